//! The policy file: YAML, read into [`Policy`] once, checked whole before it replaces the one in
//! force. Every error names the line and the field.
//!
//! ```yaml
//! rules:
//! - name: azuredisk                      # shown in denials and logs
//!   callers:                             # who: any of these
//!   - pod: {namespace: kube-system, name: "csi-azuredisk-node-*", container: azuredisk,
//!           image: "mcr.microsoft.com/oss/kubernetes-csi/azuredisk-csi:*"}
//!   - host: {exe: 'C:\k\csi-proxyctl.exe', user: S-1-5-18}
//!   allow:                               # what: API groups, versions, methods
//!   - {api: disk, versions: [v1], methods: [ListDiskLocations, PartitionDisk]}
//!   - {api: volume, methods: ["*"]}
//!   paths: ['C:\var\lib\kubelet\']        # on what: each kind a call names must be admitted
//!   disks: ["*"]                         # a number, serial=GLOB, location=GLOB or *
//!   smb_remotes: ['\\*.file.core.windows.net\*']
//!   services: []
//!   iscsi_portals: []
//! ```
//!
//! A call is granted when one rule matches its caller, allows its method, and admits every path,
//! disk, volume (by its disk), share, service and portal the call names. A kind a rule leaves
//! out admits nothing of that kind.

use super::{CallerRule, Disks, Glob, MethodGrant, Policy, Root, Rule};
use csi_proxy_host::interlock::ProtectedDisk;
use csi_proxy_wire::APIS;
use serde::Deserialize;
use serde_saphyr::Spanned;
use std::collections::BTreeSet;

/// The largest policy file read (a real one is a few KiB).
pub const MAX_BYTES: usize = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rules: Vec<RuleFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    name: Spanned<String>,
    callers: Vec<CallerFile>,
    allow: Vec<AllowFile>,
    #[serde(default)]
    paths: Vec<Spanned<String>>,
    #[serde(default)]
    disks: Vec<Spanned<String>>,
    #[serde(default)]
    smb_remotes: Vec<Spanned<String>>,
    #[serde(default)]
    services: Vec<Spanned<String>>,
    #[serde(default)]
    iscsi_portals: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
enum CallerFile {
    Pod(PodFile),
    Host(HostFile),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PodFile {
    namespace: Spanned<String>,
    #[serde(default)]
    name: Option<Spanned<String>>,
    #[serde(default)]
    container: Option<Spanned<String>>,
    #[serde(default)]
    image: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostFile {
    exe: Spanned<String>,
    #[serde(default)]
    user: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AllowFile {
    api: Spanned<String>,
    #[serde(default)]
    versions: Vec<Spanned<String>>,
    methods: Vec<Spanned<String>>,
}

/// A policy file's fault: where, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PolicyError(pub String);

fn at<T>(s: &Spanned<T>, field: &str, what: impl std::fmt::Display) -> PolicyError {
    PolicyError(format!("line {}, {field}: {what}", s.referenced.line()))
}

/// Reads and checks a policy.
pub fn parse(text: &str) -> Result<Policy, PolicyError> {
    if text.len() > MAX_BYTES {
        return Err(PolicyError(format!("the file has {} bytes; at most {MAX_BYTES} are read", text.len())));
    }
    let file: File = serde_saphyr::from_str(text).map_err(|e| PolicyError(first_lines(&e.to_string())))?;
    let mut names = BTreeSet::new();
    let mut rules = Vec::new();
    for rule in file.rules {
        if rule.name.value.is_empty() {
            return Err(at(&rule.name, "name", "a rule needs a name"));
        }
        if !names.insert(rule.name.value.clone()) {
            return Err(at(&rule.name, "name", format!("a second rule named {:?}", rule.name.value)));
        }
        if rule.callers.is_empty() {
            return Err(at(&rule.name, "callers", "a rule needs at least one caller"));
        }
        let callers = rule.callers.iter().map(caller).collect::<Result<_, _>>()?;
        let mut allow = Vec::new();
        for a in &rule.allow {
            allow.extend(grant(a)?);
        }
        let globs = |list: &[Spanned<String>], field: &str| {
            list.iter().map(|s| glob(s, field, false, false)).collect::<Result<Vec<_>, _>>()
        };
        rules.push(Rule {
            name: rule.name.value.clone(),
            callers,
            allow,
            paths: rule.paths.iter().map(root).collect::<Result<_, _>>()?,
            disks: disks(&rule.disks)?,
            remotes: rule
                .smb_remotes
                .iter()
                .map(|s| {
                    let unified = Spanned { value: super::remote_form(&s.value), ..s.clone() };
                    glob(&unified, "smb_remotes", false, false)
                })
                .collect::<Result<_, _>>()?,
            services: globs(&rule.services, "services")?,
            portals: rule
                .iscsi_portals
                .iter()
                .map(|s| {
                    glob(&Spanned { value: super::portal_form(&s.value), ..s.clone() }, "iscsi_portals", false, false)
                })
                .collect::<Result<_, _>>()?,
        });
    }
    Ok(Policy { rules })
}

/// serde-saphyr's message starts with where and what went wrong; the snippet it draws after
/// that is for terminals, and a log line gets the first line only.
fn first_lines(message: &str) -> String {
    let first = message.lines().next().unwrap_or(message);
    csi_proxy_host::error::clip(first.trim_end()).into_owned()
}

fn caller(c: &CallerFile) -> Result<CallerRule, PolicyError> {
    let opt = |s: &Option<Spanned<String>>, field: &str| s.as_ref().map(|s| glob(s, field, true, false)).transpose();
    Ok(match c {
        CallerFile::Pod(p) => CallerRule::Pod {
            namespace: glob(&p.namespace, "pod.namespace", true, false)?,
            name: opt(&p.name, "pod.name")?,
            container: opt(&p.container, "pod.container")?,
            image: p.image.as_ref().map(|s| glob(s, "pod.image", true, true)).transpose()?,
        },
        // Windows image paths and SIDs compare without case, as Windows compares them.
        CallerFile::Host(h) => CallerRule::Host {
            exe: glob(&h.exe, "host.exe", !h.exe.value.contains('\\'), true)?,
            user: h.user.as_ref().map(|u| glob(u, "host.user", false, false)).transpose()?,
        },
    })
}

fn grant(a: &AllowFile) -> Result<Vec<MethodGrant>, PolicyError> {
    let apis: Vec<_> = APIS.iter().filter(|api| api.group.name() == a.api.value).collect();
    if apis.is_empty() {
        let groups: BTreeSet<&str> = APIS.iter().map(|api| api.group.name()).collect();
        return Err(at(&a.api, "api", format!("{:?} is no API group; expected one of {groups:?}", a.api.value)));
    }
    let mut versions = Vec::new();
    for v in &a.versions {
        if !apis.iter().any(|api| api.version == v.value) {
            let known: Vec<&str> = apis.iter().map(|api| api.version).collect();
            return Err(at(v, "versions", format!("{} has no version {:?}; it has {known:?}", a.api.value, v.value)));
        }
        versions.push(v.value.clone());
    }
    if a.methods.is_empty() {
        return Err(at(&a.api, "methods", "name the methods allowed, or [\"*\"] for all of them"));
    }
    let mut grants = Vec::new();
    for m in &a.methods {
        if m.value != "*" {
            // Known in some version asked for (every version when none is named).
            let known = apis
                .iter()
                .filter(|api| versions.is_empty() || versions.contains(&api.version.to_string()))
                .any(|api| super::methods_of(api).contains(&m.value));
            if !known {
                let mut all: BTreeSet<String> = BTreeSet::new();
                for api in &apis {
                    all.extend(super::methods_of(api).iter().map(|s| s.to_string()));
                }
                return Err(at(
                    m,
                    "methods",
                    format!(
                        "{} has no method {:?}; it has {:?}",
                        a.api.value,
                        csi_proxy_host::error::clip(&m.value),
                        all
                    ),
                ));
            }
        }
        grants.push(MethodGrant { group: apis[0].group, versions: versions.clone(), method: m.value.clone() });
    }
    Ok(grants)
}

fn glob(s: &Spanned<String>, field: &str, case_sensitive: bool, spans_separators: bool) -> Result<Glob, PolicyError> {
    if s.value.is_empty() {
        return Err(at(s, field, "an empty pattern"));
    }
    let pattern = glob::Pattern::new(&s.value)
        .map_err(|e| at(s, field, format!("{:?} is not a pattern ({e})", csi_proxy_host::error::clip(&s.value))))?;
    Ok(Glob { pattern, case_sensitive, spans_separators })
}

fn root(s: &Spanned<String>) -> Result<Root, PolicyError> {
    Root::new(&s.value).map_err(|why| at(s, "paths", why))
}

fn disks(list: &[Spanned<String>]) -> Result<Disks, PolicyError> {
    let mut selectors = Vec::new();
    for s in list {
        if s.value == "*" {
            return Ok(Disks::Any);
        }
        let sel: ProtectedDisk = s.value.parse().map_err(|why: String| at(s, "disks", format!("{why}, or *")))?;
        selectors.push(sel);
    }
    Ok(Disks::Some(selectors))
}
