//! Least privilege: which caller may call which method on what ([`Policy`], read from the
//! daemon's `-authorization-policy` file by [`file`]), and the [`Authorizer`] that holds the
//! policy in force and answers for every call before it waits for anything.
//!
//! Callers are matched as the daemon's identifier named them (a pod's container by namespace,
//! pod name, container name and image; a host process by executable and user); a caller that
//! could not be named matches no rule. Arguments are matched as written in the request ([`args`]):
//! the host's own checks (working directories, link containment, the disk interlocks) still
//! apply to everything a policy admits.

pub mod args;
pub mod file;

use args::{portal_text, Arg};
use csi_proxy_host::interlock::ProtectedDisk;
use csi_proxy_host::types::DiskLocation;
use csi_proxy_sync::LockExt;
use csi_proxy_wire::{Api, Caller, Group, Workload, APIS};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

pub use file::{parse, PolicyError};

/// A checked policy.
#[derive(Debug, Default)]
pub struct Policy {
    pub(crate) rules: Vec<Rule>,
}

#[derive(Debug)]
pub(crate) struct Rule {
    pub name: String,
    pub callers: Vec<CallerRule>,
    pub allow: Vec<MethodGrant>,
    pub paths: Vec<Root>,
    pub disks: Disks,
    pub remotes: Vec<Glob>,
    pub services: Vec<Glob>,
    pub portals: Vec<Glob>,
}

#[derive(Debug)]
pub(crate) enum CallerRule {
    Pod { namespace: Glob, name: Option<Glob>, container: Option<Glob>, image: Option<Glob> },
    Host { exe: Glob, user: Option<Glob> },
}

#[derive(Debug)]
pub(crate) struct MethodGrant {
    pub group: Group,
    /// Empty: every version.
    pub versions: Vec<String>,
    /// A method name, or `*`.
    pub method: String,
}

#[derive(Debug)]
pub(crate) enum Disks {
    Any,
    Some(Vec<ProtectedDisk>),
}

/// A shell-style pattern matched whole.
#[derive(Debug)]
pub(crate) struct Glob {
    pub pattern: glob::Pattern,
    pub case_sensitive: bool,
    /// Whether `*` and `?` match `/` too: yes for executables and images
    /// (`*/csi-proxyctl`, `registry.k8s.io/*`), no for SMB shares, where a `*` must stay
    /// within one part of `//server/share`.
    pub spans_separators: bool,
}

impl Glob {
    fn matches(&self, text: &str) -> bool {
        let options = glob::MatchOptions {
            case_sensitive: self.case_sensitive,
            require_literal_separator: !self.spans_separators,
            require_literal_leading_dot: false,
        };
        self.pattern.matches_with(text, options)
    }
}

/// A path form: POSIX (`/a/b`, compared with case) or Windows (`C:\a\b`, `\\?\C:\a`, either
/// separator, compared without case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Posix,
    Windows,
}

/// A path's form and its segments, or why it cannot be judged: relative, or with `.` or `..`
/// segments (which could climb out of a root as written).
fn segments(path: &str) -> Result<(Style, Vec<String>), &'static str> {
    // Rooted without a drive (`\var\lib\kubelet\…`, as the kubelet hands drivers their staging
    // paths): Win32, and so the host, reads it on the system drive.
    let on_drive;
    let path = if path.starts_with('\\') && !path.starts_with(r"\\") {
        on_drive = format!("{}{path}", system_drive());
        on_drive.as_str()
    } else {
        path
    };
    let (style, rest) = if let Some(rest) = path.strip_prefix(r"\\?\").or_else(|| path.strip_prefix("//?/")) {
        (Style::Windows, rest)
    } else if path.as_bytes().get(1) == Some(&b':') && path.as_bytes()[0].is_ascii_alphabetic() {
        (Style::Windows, path)
    } else if path.starts_with('/') {
        (Style::Posix, path)
    } else {
        return Err("not an absolute path");
    };
    let parts: Vec<String> = match style {
        Style::Posix => rest.split('/').filter(|s| !s.is_empty()).map(str::to_string).collect(),
        Style::Windows => rest.split(['\\', '/']).filter(|s| !s.is_empty()).map(fold_case).collect(),
    };
    if parts.iter().any(|s| s == "." || s == "..") {
        return Err("a path with . or .. segments");
    }
    Ok((style, parts))
}

/// The drive a path rooted without one is on: the system drive, as the Windows host finds it
/// (`C:` if it cannot be read, as the host would then refuse the path anyway). Elsewhere `C:`,
/// the scripted Windows node's.
fn system_drive() -> String {
    #[cfg(windows)]
    {
        static DRIVE: OnceLock<String> = OnceLock::new();
        DRIVE.get_or_init(|| csi_proxy_host::windows::platform::system_drive().unwrap_or_else(|_| "C:".into())).clone()
    }
    #[cfg(not(windows))]
    {
        "C:".to_string()
    }
}

/// A Windows name as NTFS and the host compare it: each character upper-cased on its own
/// (`csi_proxy_host::same_ignoring_case`'s rule), so that no name matches a root here that the
/// host would take for another (U+212A KELVIN SIGN is not `K`).
fn fold_case(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut u = c.to_uppercase();
            match (u.next(), u.next()) {
                (Some(one), None) => one,
                _ => c,
            }
        })
        .collect()
}

/// A directory a rule admits paths under: the directory itself and everything below it. Each
/// segment may be a pattern (`C:\var\lib\kubelet\pods\*\volumes`), matching one segment.
#[derive(Debug)]
pub(crate) struct Root {
    style: Style,
    segments: Vec<glob::Pattern>,
}

impl Root {
    pub(crate) fn new(text: &str) -> Result<Root, String> {
        let (style, parts) = segments(text).map_err(|why| format!("{:?}: {why}", csi_proxy_host::error::clip(text)))?;
        let segments = parts
            .iter()
            .map(|p| glob::Pattern::new(p))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("{:?}: not a pattern ({e})", csi_proxy_host::error::clip(text)))?;
        Ok(Root { style, segments })
    }

    fn contains(&self, path: &str) -> bool {
        let Ok((style, parts)) = segments(path) else { return false };
        style == self.style
            && parts.len() >= self.segments.len()
            && self.segments.iter().zip(&parts).all(|(pattern, part)| pattern.matches(part))
    }
}

/// An SMB share as remote patterns see it: `//server/share/...`, whichever separators it was
/// written with, so that a `*` never spans a separator.
pub(crate) fn remote_form(remote: &str) -> String {
    remote.replace('\\', "/")
}

/// The share a remote path is on, `\\server\share`: what a global mapping maps and removes,
/// whatever folder below it a request names.
pub fn share_root(remote: &str) -> String {
    let form = remote_form(remote);
    let parts: Vec<&str> = form.trim_start_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    match parts.as_slice() {
        [server, share, ..] => format!(r"\\{server}\{share}"),
        _ => remote.to_string(),
    }
}

/// A portal as portal patterns see it: dots read as separators, so that a `*` matches within
/// one part of an address (`10.0.0.*:3260` is not `10.0.0.evil.example:3260`).
pub(crate) fn portal_form(portal: &str) -> String {
    portal.replace('.', "/")
}

/// The methods of one API, as its service declares them.
pub(crate) fn methods_of(api: &Api) -> &'static [String] {
    static METHODS: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    let all = METHODS.get_or_init(|| {
        let mut all = HashMap::new();
        if let Some(pool) = crate::shown::pool() {
            for api in APIS {
                let name = api.service_name();
                let methods = pool
                    .get_service_by_name(&name)
                    .map(|s| s.methods().map(|m| m.name().to_string()).collect())
                    .unwrap_or_default();
                all.insert(name, methods);
            }
        }
        all
    });
    all.get(&api.service_name()).map(Vec::as_slice).unwrap_or(&[])
}

/// The API a gRPC service name (`v1.Disk`) is.
pub fn api_of(service: &str) -> Option<Api> {
    APIS.iter().copied().find(|api| api.service_name() == service)
}

/// What a decision may need to know of the host: a disk's serial number and location (for rules
/// that name disks by them), the disk a volume is on.
pub trait Facts {
    fn disk(&self, number: u32) -> csi_proxy_host::Result<(String, DiskLocation)>;
    fn disk_of_volume(&self, volume_id: &str) -> csi_proxy_host::Result<u32>;
}

/// Facts looked up from the host's reading calls, for the disks and volumes a decision asked
/// about: a decision is made with what is known, noting what it lacked ([`Gathered::wanted`]);
/// those are looked up ([`Gathered::gather`], on a pool thread) and the decision made again.
#[derive(Debug, Default)]
pub struct Gathered {
    disks: HashMap<u32, Result<(String, DiskLocation), String>>,
    volumes: HashMap<String, Result<u32, String>>,
    wanted: Mutex<Vec<Want>>,
    passes: usize,
}

/// A fact a decision lacked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    Disk(u32),
    Volume(String),
}

const NOT_YET: &str = "not looked up yet";

impl Gathered {
    /// What the last decision lacked (and forgets it).
    pub fn wanted(&self) -> Vec<Want> {
        std::mem::take(&mut *self.wanted.lock_ignoring_poison())
    }

    /// How many times facts were gathered.
    pub fn passes(&self) -> usize {
        self.passes
    }

    /// These facts and the `wanted` ones, from the host.
    pub fn gather(mut self, hosts: &csi_proxy_host::Hosts, wanted: Vec<Want>) -> Gathered {
        self.passes += 1;
        let disks: Vec<u32> =
            wanted.iter().filter_map(|w| if let Want::Disk(n) = w { Some(*n) } else { None }).collect();
        if !disks.is_empty() {
            // One listing of each kind answers for every disk asked about.
            let ids = hosts.disk.list_disk_ids().map_err(|e| e.to_string());
            let locations = hosts.disk.list_disk_locations().map_err(|e| e.to_string());
            for n in disks {
                let fact = match (&ids, &locations) {
                    (Ok(ids), Ok(locations)) => Ok((
                        ids.get(&n).map(|i| i.serial_number.clone()).unwrap_or_default(),
                        locations.get(&n).cloned().unwrap_or_default(),
                    )),
                    (Err(e), _) | (_, Err(e)) => Err(e.clone()),
                };
                self.disks.insert(n, fact);
            }
        }
        for w in wanted {
            if let Want::Volume(v) = w {
                let fact = hosts.volume.get_disk_number_from_volume_id(&v).map_err(|e| e.to_string());
                self.volumes.insert(v, fact);
            }
        }
        self
    }

    fn want(&self, w: Want) -> csi_proxy_host::Error {
        self.wanted.lock_ignoring_poison().push(w);
        csi_proxy_host::Error::Unavailable(NOT_YET.into())
    }
}

impl Facts for Gathered {
    fn disk(&self, number: u32) -> csi_proxy_host::Result<(String, DiskLocation)> {
        match self.disks.get(&number) {
            Some(Ok(fact)) => Ok(fact.clone()),
            Some(Err(e)) => Err(csi_proxy_host::Error::Unavailable(e.clone())),
            None => Err(self.want(Want::Disk(number))),
        }
    }
    fn disk_of_volume(&self, volume_id: &str) -> csi_proxy_host::Result<u32> {
        match self.volumes.get(volume_id) {
            Some(Ok(n)) => Ok(*n),
            Some(Err(e)) => Err(csi_proxy_host::Error::Unavailable(e.clone())),
            None => Err(self.want(Want::Volume(volume_id.to_string()))),
        }
    }
}

/// Whether the arguments need [`Facts`] from the host to be judged (they name disks or volumes).
pub fn needs_facts(args: &[Arg<'_>]) -> bool {
    args.iter().any(|a| matches!(a, Arg::Disk(_) | Arg::Volume(_)))
}

impl Policy {
    pub fn rule_count(&self) -> usize {
        self.rules.len()
    }

    /// The rule that grants `method` of `api` on `args` to `caller`, or why none does.
    pub fn decide(
        &self,
        caller: Option<&Caller>,
        api: Api,
        method: &str,
        args: &[Arg<'_>],
        facts: &dyn Facts,
    ) -> Result<&str, String> {
        let mut named = Vec::new();
        let mut refusal = None;
        for rule in self.rules.iter().filter(|r| r.callers.iter().any(|c| c.matches(caller))) {
            named.push(rule.name.as_str());
            if !rule.allow.iter().any(|g| g.grants(api, method)) {
                continue;
            }
            match args.iter().find_map(|a| rule.refuses(a, facts).err()) {
                None => return Ok(&rule.name),
                Some(why) => {
                    refusal.get_or_insert(why);
                }
            }
        }
        let call = format!("{}/{} {method}", api.group.name(), api.version);
        Err(match (named.is_empty(), refusal) {
            (true, _) => format!("no rule names this caller, so it may not call {call}"),
            (false, Some(why)) => why,
            (false, None) => format!("no rule for this caller ({}) allows {call}", named.join(", ")),
        })
    }
}

impl CallerRule {
    fn matches(&self, caller: Option<&Caller>) -> bool {
        let Some(caller) = caller else { return false };
        let opt = |g: &Option<Glob>, v: &str| g.as_ref().is_none_or(|g| g.matches(v));
        match (self, &caller.workload) {
            (CallerRule::Pod { namespace, name, container, image }, Some(Workload::Pod(p))) => {
                namespace.matches(&p.namespace)
                    && opt(name, &p.pod)
                    && opt(container, &p.container)
                    && opt(image, &p.image)
            }
            (CallerRule::Host { exe, user }, Some(Workload::Host)) => {
                let Some(path) = &caller.exe else { return false };
                // The user as the OS gave it: a SID on Windows, the uid on Linux.
                let who = caller.user.clone().or_else(|| caller.uid.map(|u| u.to_string()));
                exe.matches(path) && user.as_ref().is_none_or(|u| who.as_deref().is_some_and(|w| u.matches(w)))
            }
            _ => false,
        }
    }
}

impl MethodGrant {
    fn grants(&self, api: Api, method: &str) -> bool {
        self.group == api.group
            && (self.versions.is_empty() || self.versions.iter().any(|v| v == api.version))
            && (self.method == "*" || self.method == method)
    }
}

impl Rule {
    /// Ok when this rule admits `arg`; else why not.
    fn refuses(&self, arg: &Arg<'_>, facts: &dyn Facts) -> Result<(), String> {
        let no = |what: &str| Err(format!("rule {:?} does not admit {arg} (its {what})", self.name));
        match arg {
            Arg::Path(p) => {
                if let Err(why) = segments(p) {
                    return Err(format!("{arg} cannot be judged against rule {:?}: {why}", self.name));
                }
                if self.paths.iter().any(|r| r.contains(p)) {
                    return Ok(());
                }
                no("paths")
            }
            Arg::Disk(n) => match self.admits_disk(*n, facts) {
                Ok(()) => Ok(()),
                Err(Some(why)) => Err(why),
                Err(None) => no("disks"),
            },
            Arg::Volume(v) => {
                if matches!(self.disks, Disks::Any) {
                    return Ok(());
                }
                let disk = facts
                    .disk_of_volume(v)
                    .map_err(|e| format!("{arg}: its disk could not be found to judge it ({e})"))?;
                self.admits_disk(disk, facts).map_err(|why| {
                    why.unwrap_or_else(|| {
                        format!("rule {:?} does not admit {arg} on disk {disk} (its disks)", self.name)
                    })
                })
            }
            Arg::Remote(r) => {
                if self.remotes.iter().any(|g| g.matches(&remote_form(r))) {
                    return Ok(());
                }
                no("smb_remotes")
            }
            Arg::Service(s) => {
                if self.services.iter().any(|g| g.matches(s)) {
                    return Ok(());
                }
                no("services")
            }
            Arg::Portal(p) => {
                if self.portals.iter().any(|g| g.matches(&portal_form(&portal_text(p)))) {
                    return Ok(());
                }
                no("iscsi_portals")
            }
        }
    }

    /// Ok when the rule admits disk `n`; `Err(None)` when it does not, `Err(Some(why))` when
    /// the host could not say what the disk is.
    fn admits_disk(&self, n: u32, facts: &dyn Facts) -> Result<(), Option<String>> {
        let selectors = match &self.disks {
            Disks::Any => return Ok(()),
            Disks::Some(s) => s,
        };
        if selectors.iter().any(|s| matches!(s, ProtectedDisk::Number(m) if *m == n)) {
            return Ok(());
        }
        if selectors.iter().all(|s| matches!(s, ProtectedDisk::Number(_))) {
            return Err(None);
        }
        let (serial, location) =
            facts.disk(n).map_err(|e| Some(format!("disk {n} could not be looked up to judge it ({e})")))?;
        if selectors.iter().any(|s| s.matches(n, &serial, &location)) {
            Ok(())
        } else {
            Err(None)
        }
    }
}

/// How a denial is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Refused, PermissionDenied.
    Enforce,
    /// Logged and audited as one that would be refused; it runs.
    Warn,
}

/// The policy in force, replaced whole on reload.
pub struct Authorizer {
    policy: RwLock<Arc<Policy>>,
    mode: Mode,
    /// When each denial was last logged (see [`Self::report`]); bounded.
    reported: Mutex<HashMap<String, std::time::Instant>>,
}

/// What the authorizer says of one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Granted {
        rule: String,
    },
    /// Not granted; in warn mode it runs anyway.
    Denied {
        why: String,
        enforced: bool,
    },
}

impl Authorizer {
    pub fn new(policy: Policy, mode: Mode) -> Self {
        Authorizer { policy: RwLock::new(Arc::new(policy)), mode, reported: Mutex::default() }
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Puts `policy` in force for the calls that start from now on.
    pub fn replace(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(policy);
    }

    pub fn current(&self) -> Arc<Policy> {
        self.policy.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The verdict on `method` of `service` naming `args`, for `caller` (not logged: see
    /// [`Self::report`]).
    pub fn check(
        &self,
        caller: Option<&Caller>,
        service: &str,
        method: &str,
        args: &[Arg<'_>],
        facts: &dyn Facts,
    ) -> Verdict {
        let Some(api) = api_of(service) else {
            return Verdict::Denied { why: format!("{service} is no API"), enforced: self.mode == Mode::Enforce };
        };
        match self.current().decide(caller, api, method, args, facts) {
            Ok(rule) => Verdict::Granted { rule: rule.to_string() },
            Err(why) => {
                let why = format!("authorization policy: {}: {why}", caller_text(caller));
                Verdict::Denied { why, enforced: self.mode == Mode::Enforce }
            }
        }
    }

    /// Logs a denial (or in warn mode, what would be one), at most once a minute per caller and
    /// method: a driver retrying a refused call must not flood the log.
    pub fn report(&self, caller: Option<&Caller>, service: &str, method: &str, why: &str) {
        // By caller and call, not by reason: a caller varying its arguments gets no more lines.
        let key = format!("{} {service} {method}", caller_text(caller));
        let now = std::time::Instant::now();
        let mut reported = self.reported.lock_ignoring_poison();
        if reported.get(&key).is_some_and(|t| now.duration_since(*t) < std::time::Duration::from_secs(60)) {
            return;
        }
        if reported.len() >= 4096 {
            reported.clear();
        }
        reported.insert(key, now);
        drop(reported);
        match self.mode {
            Mode::Enforce => tracing::warn!(target: "csi_proxy::authz", service, method, reason = why, "call refused"),
            Mode::Warn => tracing::warn!(target: "csi_proxy::authz", service, method, reason = why,
                "call would be refused (-authorization-mode=warn): it runs"),
        }
    }
}

/// A caller as a denial names it: the pod's container, or the host process, or why unknown.
pub fn caller_text(caller: Option<&Caller>) -> String {
    match caller.and_then(|c| c.workload.as_ref().map(|w| (c, w))) {
        Some((_, w @ Workload::Pod(_))) => w.to_string(),
        Some((c, Workload::Host)) => format!("host process {}", host_text(c)),
        Some((c, Workload::Unknown { why })) => format!("an unnamed caller ({why}; {})", host_text(c)),
        None => match caller {
            Some(c) => format!("an unnamed caller ({c})"),
            None => "an unnamed caller".to_string(),
        },
    }
}

fn host_text(c: &Caller) -> String {
    let exe = c.exe.as_deref().map(|e| csi_proxy_host::error::clip(e).into_owned()).unwrap_or_else(|| "?".into());
    let user = c.user.clone().or_else(|| c.uid.map(|u| format!("uid {u}"))).unwrap_or_else(|| "?".into());
    format!("{exe:?} as {user}")
}

#[cfg(test)]
mod tests;
