//! A request as the call log and the audit records show it: the wire message in the protobuf
//! JSON mapping (through the wire crate's descriptors, field names in lowerCamelCase, every field
//! shown, defaults too), with the value of every field on [`csi_proxy_wire::SECRET_FIELDS`]
//! replaced by `"<redacted>"` (an empty one stays empty: that it was not given is no secret), and
//! every string bounded so that a record stays a reasonable line.

use prost_reflect::{DescriptorPool, DynamicMessage, MessageDescriptor, ReflectMessage, SerializeOptions, Value};
use serde_json::Value as Json;
use std::sync::OnceLock;

/// What a secret field's value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Strings longer than this (in bytes) are cut, at a character boundary, and marked.
pub const MAX_STRING: usize = 1024;

pub(crate) fn pool() -> Option<&'static DescriptorPool> {
    static POOL: OnceLock<Option<DescriptorPool>> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(csi_proxy_wire::FILE_DESCRIPTOR_SET).ok()).as_ref()
}

/// The input message of `service`'s `method` (`v1.Disk`, `PartitionDisk`).
pub fn input_of(service: &str, method: &str) -> Option<MessageDescriptor> {
    let service = pool()?.get_service_by_name(service)?;
    let found = service.methods().find(|m| m.name() == method)?;
    Some(found.input())
}

/// `message`, the request of `service`'s `method`, as JSON (see the module text). A message the
/// descriptors do not know (no such method) shows as a string saying so, never as its content.
pub fn request_json<M: prost::Message>(service: &str, method: &str, message: &M) -> Json {
    let Some(input) = input_of(service, method) else {
        return Json::String(format!("<no descriptor for {service}/{method}>"));
    };
    match DynamicMessage::decode(input, message.encode_to_vec().as_slice()) {
        Ok(dynamic) => dynamic_json(dynamic),
        Err(e) => Json::String(format!("<not readable as its .proto message: {e}>")),
    }
}

/// A decoded message as JSON, secrets redacted and strings bounded.
pub fn dynamic_json(mut message: DynamicMessage) -> Json {
    redact(&mut message);
    let options = SerializeOptions::new().skip_default_fields(false);
    let json = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .unwrap_or_else(|e| Json::String(format!("<not serializable: {e}>")));
    bound(json)
}

/// Replaces the value of every non-empty secret string field, in nested messages too.
fn redact(message: &mut DynamicMessage) {
    let descriptor = message.descriptor();
    for field in descriptor.fields() {
        if csi_proxy_wire::is_secret_field(field.name()) {
            let is_string = matches!(field.kind(), prost_reflect::Kind::String) && !field.is_list();
            let given = match message.get_field(&field).as_ref() {
                Value::String(s) => !s.is_empty(),
                _ => message.has_field(&field),
            };
            if is_string && given {
                message.set_field(&field, Value::String(REDACTED.into()));
            } else if !is_string {
                // Not a plain string (none is today): nothing of it is shown.
                message.clear_field(&field);
            }
            continue;
        }
        if message.has_field(&field) {
            redact_value(message.get_field_mut(&field));
        }
    }
}

fn redact_value(value: &mut Value) {
    match value {
        Value::Message(m) => redact(m),
        Value::List(items) => items.iter_mut().for_each(redact_value),
        Value::Map(map) => map.values_mut().for_each(redact_value),
        _ => {}
    }
}

/// Cuts every string of `json` to [`MAX_STRING`] bytes.
fn bound(json: Json) -> Json {
    match json {
        Json::String(s) if s.len() > MAX_STRING => {
            let mut end = MAX_STRING;
            while !s.is_char_boundary(end) {
                end -= 1;
            }
            Json::String(format!("{}…[{} bytes in all]", &s[..end], s.len()))
        }
        Json::Array(items) => Json::Array(items.into_iter().map(bound).collect()),
        Json::Object(fields) => Json::Object(fields.into_iter().map(|(k, v)| (k, bound(v))).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::{FieldDescriptor, Kind, MapKey};

    /// A value for `field` that is not its default, naming the field in strings.
    fn sample(field: &FieldDescriptor, depth: usize) -> Value {
        let one = |kind: &Kind| -> Value {
            match kind {
                Kind::String => Value::String(format!("value-of-{}", field.name())),
                Kind::Bytes => Value::Bytes(b"bytes".to_vec().into()),
                Kind::Bool => Value::Bool(true),
                Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(-7),
                Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(-7),
                Kind::Uint32 | Kind::Fixed32 => Value::U32(7),
                Kind::Uint64 | Kind::Fixed64 => Value::U64(7),
                Kind::Float => Value::F32(1.5),
                Kind::Double => Value::F64(1.5),
                Kind::Enum(e) => Value::EnumNumber(e.values().last().map_or(0, |v| v.number())),
                Kind::Message(m) => Value::Message(filled(m.clone(), depth + 1)),
            }
        };
        if field.is_map() {
            let Kind::Message(entry) = field.kind() else { unreachable!("a map field is a message") };
            let key = match entry.map_entry_key_field().kind() {
                Kind::String => MapKey::String("k".into()),
                Kind::Bool => MapKey::Bool(true),
                Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => MapKey::I32(1),
                Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => MapKey::I64(1),
                Kind::Uint32 | Kind::Fixed32 => MapKey::U32(1),
                _ => MapKey::U64(1),
            };
            let value_field = entry.map_entry_value_field();
            let value = match value_field.kind() {
                Kind::Message(m) => Value::Message(filled(m, depth + 1)),
                k => sample_kind(&k, field.name()),
            };
            return Value::Map([(key, value)].into_iter().collect());
        }
        let v = one(&field.kind());
        if field.is_list() {
            Value::List(vec![v])
        } else {
            v
        }
    }

    fn sample_kind(kind: &Kind, name: &str) -> Value {
        match kind {
            Kind::String => Value::String(format!("value-of-{name}")),
            Kind::Bool => Value::Bool(true),
            Kind::Uint32 | Kind::Fixed32 => Value::U32(7),
            Kind::Uint64 | Kind::Fixed64 => Value::U64(7),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(-7),
            _ => Value::I32(-7),
        }
    }

    /// A message with every field set (nested messages too, to a depth).
    fn filled(descriptor: MessageDescriptor, depth: usize) -> DynamicMessage {
        let mut m = DynamicMessage::new(descriptor.clone());
        if depth < 4 {
            for field in descriptor.fields() {
                m.set_field(&field, sample(&field, depth));
            }
        }
        m
    }

    /// Every secret field's JSON name anywhere in `descriptor` (depth-bounded like `filled`).
    fn secret_names(descriptor: &MessageDescriptor, depth: usize, out: &mut Vec<String>) {
        if depth >= 4 {
            return;
        }
        for field in descriptor.fields() {
            if csi_proxy_wire::is_secret_field(field.name()) {
                out.push(field.json_name().to_string());
            } else if let Kind::Message(m) = field.kind() {
                secret_names(&m, depth + 1, out);
            }
        }
    }

    /// The 139 methods upstream serves (../shared/wire/upstream-wire.json), each from the
    /// descriptors: every request, filled in completely, shows as a JSON object in which every
    /// secret field says `<redacted>` and no secret value appears anywhere, while the other
    /// values are shown.
    #[test]
    fn every_methods_request_is_json_with_its_secrets_redacted() {
        let pool = pool().expect("the wire descriptors decode");
        let mut methods = 0;
        let mut secrets = 0;
        for service in pool.services() {
            for method in service.methods() {
                methods += 1;
                let input = input_of(service.full_name(), method.name()).expect("found by name");
                assert_eq!(input.full_name(), method.input().full_name());
                let message = filled(input.clone(), 0);
                let json = request_json(service.full_name(), method.name(), &message);
                let text = json.to_string();
                let object =
                    json.as_object().unwrap_or_else(|| panic!("{}: not an object: {text}", method.full_name()));
                assert_eq!(object.len(), input.fields().len(), "{}: every field shown: {text}", method.full_name());
                let mut names = Vec::new();
                secret_names(&input, 0, &mut names);
                for name in &names {
                    secrets += 1;
                    assert!(
                        text.contains(&format!("\"{name}\":\"{REDACTED}\"")),
                        "{}: {name} not redacted: {text}",
                        method.full_name()
                    );
                    let field = csi_proxy_wire::SECRET_FIELDS.iter().find(|f| text.contains(&format!("value-of-{f}")));
                    assert!(field.is_none(), "{}: a secret's value shows: {text}", method.full_name());
                }
                // The other strings are shown as given.
                for field in input.fields().filter(|f| f.kind() == Kind::String && !f.is_list()) {
                    if !csi_proxy_wire::is_secret_field(field.name()) {
                        assert_eq!(object[field.json_name()], format!("value-of-{}", field.name()), "{text}");
                    }
                }
            }
        }
        assert_eq!(methods, 139, "upstream's wire has 139 methods");
        // SMB's NewSmbGlobalMapping (4 versions: password), iSCSI's ConnectTarget (2: user name
        // and secret) and SetMutualChapSecret.
        assert_eq!(secrets, 4 + 2 * 2 + 1);
    }

    /// The method list is upstream's (../shared/wire/upstream-wire.json), read when it is there.
    #[test]
    fn the_methods_are_upstreams() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/wire/upstream-wire.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            eprintln!("skipped: {} is not here", path.display());
            return;
        };
        let wire: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut n = 0;
        for api in wire["apis"].as_array().unwrap() {
            for m in api["methods"].as_array().unwrap() {
                n += 1;
                let input = input_of(api["service"].as_str().unwrap(), m["name"].as_str().unwrap())
                    .unwrap_or_else(|| panic!("{m}"));
                assert_eq!(input.full_name(), m["input"].as_str().unwrap());
            }
        }
        assert_eq!(n, 139);
    }

    /// An empty secret stays empty (nothing was given), a long string is cut, and a method the
    /// descriptors do not know shows no content.
    #[test]
    fn empty_secrets_long_strings_and_unknown_methods() {
        let input = input_of("v1.Smb", "NewSmbGlobalMapping").unwrap();
        let mut m = DynamicMessage::new(input);
        m.set_field_by_name("remote_path", Value::String("x".repeat(5000)));
        let json = request_json("v1.Smb", "NewSmbGlobalMapping", &m);
        assert_eq!(json["password"], "");
        let remote = json["remotePath"].as_str().unwrap();
        assert!(remote.len() < 1100 && remote.ends_with("…[5000 bytes in all]"), "{remote}");
        let json = request_json("v1.Smb", "NoSuchMethod", &m);
        assert_eq!(json, "<no descriptor for v1.Smb/NoSuchMethod>");
    }
}
