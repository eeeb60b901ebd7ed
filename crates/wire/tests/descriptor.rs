//! Checks our .proto files against upstream's wire contract.
//!
//! `shared/wire/upstream-wire.json` describes every API upstream serves: package, service, RPCs
//! with their full gRPC paths and message types, every message's fields and every enum's values.
//! Both that document and our compiled `FileDescriptorSet` are flattened into the same list of
//! "facts" (a key naming one thing, plus a text describing it), and the two lists are diffed in
//! both directions. Every mismatch is collected before the test fails, so one run shows them all.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message as _;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet};
use serde_json::Value;

const UPSTREAM_JSON: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/wire/upstream-wire.json");

const EXPECTED_APIS: usize = 23;
const EXPECTED_METHODS: usize = 139;

/// Key → description. Keys start with `<group>/<version>` so a report groups naturally by API.
type Facts = BTreeMap<String, String>;

fn load_upstream() -> Value {
    let text = std::fs::read_to_string(UPSTREAM_JSON).unwrap_or_else(|e| panic!("cannot read {UPSTREAM_JSON}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("cannot parse {UPSTREAM_JSON}: {e}"))
}

fn load_ours() -> FileDescriptorSet {
    FileDescriptorSet::decode(csi_proxy_wire::FILE_DESCRIPTOR_SET)
        .expect("FILE_DESCRIPTOR_SET does not decode as a FileDescriptorSet")
}

fn s<'a>(v: &'a Value, key: &str, ctx: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or_else(|| panic!("upstream JSON: {ctx}: `{key}` is not a string"))
}

fn arr<'a>(v: &'a Value, key: &str, ctx: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("upstream JSON: {ctx}: `{key}` is not an array"))
}

fn obj<'a>(v: &'a Value, key: &str, ctx: &str) -> &'a serde_json::Map<String, Value> {
    v.get(key).and_then(Value::as_object).unwrap_or_else(|| panic!("upstream JSON: {ctx}: `{key}` is not an object"))
}

/// Text of one field, built the same way on both sides.
fn field_text(
    name: &str,
    ty: &str,
    repeated: bool,
    type_name: Option<&str>,
    map: Option<(&str, &str)>,
    extra: &[String],
) -> String {
    let mut out = format!("name={name}");
    match map {
        Some((k, v)) => out.push_str(&format!(" map<{k}, {v}>")),
        None => {
            if repeated {
                out.push_str(" repeated");
            }
            out.push_str(&format!(" {ty}"));
            if let Some(t) = type_name {
                out.push_str(&format!("({t})"));
            }
        }
    }
    for e in extra {
        out.push(' ');
        out.push_str(e);
    }
    out
}

fn rpc_text(name: &str, input: &str, output: &str, streaming: &str) -> String {
    format!("name={name} {input} -> {output} {streaming}")
}

/// Flattens upstream's JSON contract.
fn upstream_facts(doc: &Value) -> Facts {
    let mut facts = Facts::new();
    for api in arr(doc, "apis", "top level") {
        let gv = format!("{}/{}", s(api, "group", "api"), s(api, "version", "api"));
        let ctx = gv.as_str();
        facts.insert(format!("{gv} pipe"), s(api, "pipe", ctx).to_string());
        facts.insert(format!("{gv} package"), s(api, "package", ctx).to_string());
        // Every upstream api.proto declares `syntax = "proto3"`; proto2 would change field
        // presence and defaults, so our files must match even though the JSON does not say it.
        facts.insert(format!("{gv} syntax"), "proto3".to_string());
        facts.insert(format!("{gv} service {}", s(api, "service", ctx)), String::new());
        for m in arr(api, "methods", ctx) {
            let text = rpc_text(s(m, "name", ctx), s(m, "input", ctx), s(m, "output", ctx), "unary");
            facts.insert(format!("{gv} rpc {}", s(m, "path", ctx)), text);
        }
        for (msg_name, msg) in obj(api, "messages", ctx) {
            facts.insert(format!("{gv} message {msg_name}"), String::new());
            let mctx = format!("{gv} {msg_name}");
            for f in arr(msg, "fields", &mctx) {
                let number = f
                    .get("number")
                    .and_then(Value::as_i64)
                    .unwrap_or_else(|| panic!("upstream JSON: {mctx}: field without number"));
                let ty = s(f, "type", &mctx);
                let repeated = f.get("repeated").and_then(Value::as_bool).unwrap_or(false);
                let type_name = f.get("type_name").and_then(Value::as_str);
                let map = (ty == "map").then(|| (s(f, "key", &mctx), s(f, "value", &mctx)));
                let text = field_text(s(f, "name", &mctx), ty, repeated, type_name, map, &[]);
                facts.insert(format!("{gv} message {msg_name} field #{number}"), text);
            }
        }
        for (enum_name, values) in obj(api, "enums", ctx) {
            facts.insert(format!("{gv} enum {enum_name}"), String::new());
            let values = values.as_object().unwrap_or_else(|| panic!("upstream JSON: {gv} {enum_name}: not an object"));
            for (value_name, number) in values {
                let number = number
                    .as_i64()
                    .unwrap_or_else(|| panic!("upstream JSON: {gv} {enum_name}.{value_name}: not a number"));
                facts.insert(format!("{gv} enum {enum_name} value {value_name}"), number.to_string());
            }
        }
    }
    facts
}

/// The proto keyword of a scalar type, or `message` / `enum` / `group`.
fn type_keyword(ty: Type) -> &'static str {
    match ty {
        Type::Double => "double",
        Type::Float => "float",
        Type::Int64 => "int64",
        Type::Uint64 => "uint64",
        Type::Int32 => "int32",
        Type::Fixed64 => "fixed64",
        Type::Fixed32 => "fixed32",
        Type::Bool => "bool",
        Type::String => "string",
        Type::Group => "group",
        Type::Message => "message",
        Type::Bytes => "bytes",
        Type::Uint32 => "uint32",
        Type::Enum => "enum",
        Type::Sfixed32 => "sfixed32",
        Type::Sfixed64 => "sfixed64",
        Type::Sint32 => "sint32",
        Type::Sint64 => "sint64",
    }
}

fn strip_dot(name: &str) -> &str {
    name.strip_prefix('.').unwrap_or(name)
}

/// A map field's key and value type, written like upstream's JSON: key as a scalar keyword,
/// value as a scalar keyword or a fully qualified message/enum name. `Err` describes an entry
/// message that does not have the shape protoc gives map entries.
fn map_types(entry: &DescriptorProto) -> Result<(String, String), String> {
    let field = |number: i32, name: &str| -> Result<&FieldDescriptorProto, String> {
        entry
            .field
            .iter()
            .find(|f| f.number() == number && f.name() == name)
            .ok_or_else(|| format!("map entry without `{name} = {number}`"))
    };
    if entry.field.len() != 2 {
        return Err(format!("map entry with {} fields", entry.field.len()));
    }
    let key = field(1, "key")?;
    let value = field(2, "value")?;
    let key_text = type_keyword(key.r#type()).to_string();
    let value_text = match value.r#type() {
        Type::Message | Type::Enum => strip_dot(value.type_name()).to_string(),
        other => type_keyword(other).to_string(),
    };
    Ok((key_text, value_text))
}

/// Splits `disk/v1/api.proto` into `disk/v1`.
fn group_version(file: &FileDescriptorProto) -> Option<String> {
    let name = file.name();
    let parts: Vec<&str> = name.split('/').collect();
    match parts.as_slice() {
        [group, version, "api.proto"] => Some(format!("{group}/{version}")),
        _ => None,
    }
}

fn message_facts(facts: &mut Facts, gv: &str, prefix: &str, msg: &DescriptorProto, top_level: bool) {
    let full = format!("{prefix}.{}", msg.name());
    let is_entry = msg.options.as_ref().and_then(|o| o.map_entry).unwrap_or(false);
    if is_entry {
        if top_level {
            // A map entry outside any message cannot come from a map field; report it.
            facts.insert(format!("{gv} message {full}"), "stray map entry".to_string());
        }
        return;
    }
    facts.insert(format!("{gv} message {full}"), String::new());

    let entries: BTreeMap<String, &DescriptorProto> = msg
        .nested_type
        .iter()
        .filter(|n| n.options.as_ref().and_then(|o| o.map_entry).unwrap_or(false))
        .map(|n| (format!("{full}.{}", n.name()), n))
        .collect();
    let mut used_entries = BTreeSet::new();

    for f in &msg.field {
        let repeated = f.label() == Label::Repeated;
        let ty = f.r#type();
        let type_name = matches!(ty, Type::Message | Type::Enum).then(|| strip_dot(f.type_name()));
        let mut extra = Vec::new();
        if f.label() == Label::Required {
            extra.push("required".to_string());
        }
        if f.proto3_optional() {
            extra.push("proto3-optional".to_string());
        }
        if let Some(i) = f.oneof_index {
            extra.push(format!("oneof#{i}"));
        }
        if let Some(p) = f.options.as_ref().and_then(|o| o.packed) {
            extra.push(format!("packed={p}"));
        }
        if f.default_value.is_some() {
            extra.push(format!("default={}", f.default_value()));
        }
        if f.extendee.is_some() {
            extra.push("extension".to_string());
        }

        let key = format!("{gv} message {full} field #{}", f.number());
        let entry = type_name.and_then(|t| entries.get(t).copied());
        let text = match entry {
            Some(entry) if ty == Type::Message && repeated => {
                used_entries.insert(strip_dot(f.type_name()).to_string());
                match map_types(entry) {
                    Ok((k, v)) => field_text(f.name(), "map", false, None, Some((&k, &v)), &extra),
                    Err(problem) => format!("name={} {problem}", f.name()),
                }
            }
            _ => field_text(f.name(), type_keyword(ty), repeated, type_name, None, &extra),
        };
        facts.insert(key, text);
    }

    // Upstream declares no nested types other than the implicit map entries, so anything else
    // nested (or an entry no field uses) shows up as an extra message / enum.
    for nested in &msg.nested_type {
        let name = format!("{full}.{}", nested.name());
        if entries.contains_key(&name) {
            if !used_entries.contains(&name) {
                facts.insert(format!("{gv} message {name}"), "unused map entry".to_string());
            }
        } else {
            message_facts(facts, gv, &full, nested, false);
        }
    }
    for e in &msg.enum_type {
        enum_facts(facts, gv, &full, e);
    }
    if !msg.oneof_decl.is_empty() {
        facts.insert(format!("{gv} message {full} oneofs"), msg.oneof_decl.len().to_string());
    }
    if !msg.extension.is_empty() || !msg.extension_range.is_empty() {
        facts.insert(format!("{gv} message {full} extensions"), "present".into());
    }
}

fn enum_facts(facts: &mut Facts, gv: &str, prefix: &str, e: &prost_types::EnumDescriptorProto) {
    let full = format!("{prefix}.{}", e.name());
    facts.insert(format!("{gv} enum {full}"), String::new());
    for v in &e.value {
        facts.insert(format!("{gv} enum {full} value {}", v.name()), v.number().to_string());
    }
}

/// Flattens our descriptors (plus the pipe names from the crate's API table).
fn our_facts(fds: &FileDescriptorSet) -> Facts {
    let mut facts = Facts::new();
    for api in csi_proxy_wire::APIS {
        facts.insert(format!("{}/{} pipe", api.group.name(), api.version), api.pipe_path());
    }
    for file in &fds.file {
        let Some(gv) = group_version(file) else {
            facts.insert(format!("file {}", file.name()), "unexpected file".to_string());
            continue;
        };
        let pkg = file.package();
        facts.insert(format!("{gv} package"), pkg.to_string());
        facts.insert(format!("{gv} syntax"), file.syntax().to_string());
        if !file.extension.is_empty() {
            facts.insert(format!("{gv} extensions"), "present".into());
        }
        for svc in &file.service {
            let svc_name = format!("{pkg}.{}", svc.name());
            facts.insert(format!("{gv} service {svc_name}"), String::new());
            for m in &svc.method {
                let streaming = match (m.client_streaming(), m.server_streaming()) {
                    (false, false) => "unary",
                    (true, false) => "client-streaming",
                    (false, true) => "server-streaming",
                    (true, true) => "bidi-streaming",
                };
                let text = rpc_text(m.name(), strip_dot(m.input_type()), strip_dot(m.output_type()), streaming);
                facts.insert(format!("{gv} rpc /{svc_name}/{}", m.name()), text);
            }
        }
        for msg in &file.message_type {
            message_facts(&mut facts, &gv, pkg, msg, true);
        }
        for e in &file.enum_type {
            enum_facts(&mut facts, &gv, pkg, e);
        }
    }
    facts
}

/// Every difference between the two fact lists, in key order.
fn diff(upstream: &Facts, ours: &Facts) -> Vec<String> {
    let show = |v: &str| {
        if v.is_empty() {
            String::new()
        } else {
            format!(" = {v}")
        }
    };
    let keys: BTreeSet<&String> = upstream.keys().chain(ours.keys()).collect();
    let mut out = Vec::new();
    for key in keys {
        match (upstream.get(key), ours.get(key)) {
            (Some(u), None) => out.push(format!("missing in ours: {key}{}", show(u))),
            (None, Some(o)) => out.push(format!("extra in ours:   {key}{}", show(o))),
            (Some(u), Some(o)) if u != o => out.push(format!("differs:         {key}: upstream `{u}`, ours `{o}`")),
            _ => {}
        }
    }
    out
}

/// The comparison under test: every mismatch between the upstream document and our descriptors.
fn compare(upstream: &Value, ours: &FileDescriptorSet) -> Vec<String> {
    diff(&upstream_facts(upstream), &our_facts(ours))
}

fn count_upstream(doc: &Value) -> (usize, usize) {
    let apis = arr(doc, "apis", "top level");
    let methods = apis.iter().map(|a| arr(a, "methods", "api").len()).sum();
    (apis.len(), methods)
}

fn count_ours(fds: &FileDescriptorSet) -> (usize, usize) {
    let services: Vec<_> = fds.file.iter().flat_map(|f| &f.service).collect();
    let methods = services.iter().map(|s| s.method.len()).sum();
    (services.len(), methods)
}

#[test]
fn our_protos_match_upstream_contract() {
    let doc = load_upstream();
    let fds = load_ours();
    let problems = compare(&doc, &fds);
    assert!(
        problems.is_empty(),
        "{} mismatch(es) between upstream-wire.json and our .proto files:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn totals() {
    let doc = load_upstream();
    let fds = load_ours();
    assert_eq!(count_upstream(&doc), (EXPECTED_APIS, EXPECTED_METHODS), "upstream (apis, methods)");
    assert_eq!(count_ours(&fds), (EXPECTED_APIS, EXPECTED_METHODS), "ours (services, methods)");
    assert_eq!(csi_proxy_wire::APIS.len(), EXPECTED_APIS);
    let files: BTreeSet<_> = fds.file.iter().filter_map(group_version).collect();
    assert_eq!(files.len(), EXPECTED_APIS, "api.proto files: {files:?}");
}

/// The comparator must be able to fail: break a copy of the upstream document in several ways
/// and check that each break is reported, in the direction expected.
#[test]
fn comparator_detects_mutations() {
    let doc = load_upstream();
    let fds = load_ours();
    let baseline: BTreeSet<String> = compare(&doc, &fds).into_iter().collect();
    let new_problems = |mutated: &Value| -> Vec<String> {
        compare(mutated, &fds).into_iter().filter(|p| !baseline.contains(p)).collect()
    };

    // 1. A changed field number: upstream now wants #101, ours still has #1.
    let mut m = doc.clone();
    let api = &mut m["apis"][0];
    let gv = format!("{}/{}", api["group"].as_str().unwrap(), api["version"].as_str().unwrap());
    let (msg_name, msg) = api["messages"]
        .as_object_mut()
        .unwrap()
        .iter_mut()
        .find(|(_, v)| !v["fields"].as_array().unwrap().is_empty())
        .expect("a message with fields");
    let msg_name = msg_name.clone();
    let field = &mut msg["fields"][0];
    let old = field["number"].as_i64().unwrap();
    field["number"] = Value::from(old + 100);
    let found = new_problems(&m);
    let want_missing = format!("missing in ours: {gv} message {msg_name} field #{}", old + 100);
    let want_extra = format!("extra in ours:   {gv} message {msg_name} field #{old}");
    assert!(
        found.iter().any(|p| p.starts_with(&want_missing)) && found.iter().any(|p| p.starts_with(&want_extra)),
        "renumbered field not reported both ways: {found:#?}"
    );

    // 2. A changed scalar type is reported as a difference of the same field.
    let mut m = doc.clone();
    m["apis"][0]["messages"][&msg_name]["fields"][0]["type"] = Value::from("sint64");
    let found = new_problems(&m);
    assert!(
        found.iter().any(|p| p.starts_with(&format!("differs:         {gv} message {msg_name} field #{old}"))),
        "changed type not reported: {found:#?}"
    );

    // 3. An enum value dropped upstream is an extra on our side.
    let mut m = doc.clone();
    let (api_idx, enum_name, value_name) = m["apis"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .find_map(|(i, a)| {
            let (e, vals) = a["enums"].as_object()?.iter().next()?;
            let (v, _) = vals.as_object()?.iter().next()?;
            Some((i, e.clone(), v.clone()))
        })
        .expect("an API with an enum");
    m["apis"][api_idx]["enums"][&enum_name].as_object_mut().unwrap().remove(&value_name);
    let found = new_problems(&m);
    assert!(
        found.iter().any(|p| p.starts_with("extra in ours:") && p.contains(&format!("{enum_name} value {value_name}"))),
        "dropped enum value not reported: {found:#?}"
    );

    // 4. A renamed RPC and a changed output type.
    let mut m = doc.clone();
    m["apis"][0]["methods"][0]["output"] = Value::from("v0.Nothing");
    m["apis"][1]["methods"][0]["path"] = Value::from("/nope.Nope/Nope");
    let found = new_problems(&m);
    assert!(
        found.iter().any(|p| p.starts_with("differs:") && p.contains("v0.Nothing")),
        "changed output type not reported: {found:#?}"
    );
    assert!(
        found.iter().any(|p| p.starts_with("missing in ours:") && p.contains("/nope.Nope/Nope"))
            && found.iter().any(|p| p.starts_with("extra in ours:") && p.contains(" rpc /")),
        "changed path not reported both ways: {found:#?}"
    );

    // 5. A message upstream has that we lack, and a whole API we lack.
    let mut m = doc.clone();
    m["apis"][0]["messages"]["v9.Ghost"] = serde_json::json!({ "fields": [] });
    let mut ghost_api = m["apis"][0].clone();
    ghost_api["version"] = Value::from("v9");
    m["apis"].as_array_mut().unwrap().push(ghost_api);
    let found = new_problems(&m);
    assert!(
        found.iter().any(|p| p == &format!("missing in ours: {gv} message v9.Ghost")),
        "extra upstream message not reported: {found:#?}"
    );
    assert!(found.iter().any(|p| p.contains("/v9 package")), "extra upstream API not reported: {found:#?}");

    // 6. Breaks on our side: a field made repeated, an RPC made streaming, a nested message.
    let mut ours = fds.clone();
    let file = ours
        .file
        .iter_mut()
        .find(|f| !f.service.is_empty() && f.message_type.iter().any(|m| !m.field.is_empty()))
        .expect("a file with a service and fields");
    let gv = group_version(file).unwrap();
    let pkg = file.package().to_string();
    let svc = file.service[0].name().to_string();
    let rpc = file.service[0].method[0].name().to_string();
    file.service[0].method[0].server_streaming = Some(true);
    let msg = file.message_type.iter_mut().find(|m| !m.field.is_empty()).unwrap();
    let msg_name = format!("{pkg}.{}", msg.name());
    msg.field[0].label = Some(Label::Repeated as i32);
    let number = msg.field[0].number();
    msg.nested_type.push(DescriptorProto { name: Some("Sneaky".into()), ..Default::default() });
    let found: Vec<String> = compare(&doc, &ours).into_iter().filter(|p| !baseline.contains(p)).collect();
    let expect = [
        format!("differs:         {gv} rpc /{pkg}.{svc}/{rpc}:"),
        format!("differs:         {gv} message {msg_name} field #{number}:"),
        format!("extra in ours:   {gv} message {msg_name}.Sneaky"),
    ];
    for e in &expect {
        assert!(found.iter().any(|p| p.starts_with(e.as_str())), "`{e}` not reported: {found:#?}");
    }
    assert_eq!(found.len(), expect.len(), "{found:#?}");

    // 7. The same document compared against an empty descriptor set: everything is missing,
    // except the pipes that come from the crate's API table.
    let empty = FileDescriptorSet::default();
    let found = compare(&doc, &empty);
    let upstream = upstream_facts(&doc);
    assert_eq!(found.len(), upstream.len() - EXPECTED_APIS, "every non-pipe fact should be missing");
}
