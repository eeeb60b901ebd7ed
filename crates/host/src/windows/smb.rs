//! SMB global mappings (`MSFT_SmbGlobalMapping` in `ROOT\Microsoft\Windows\SMB`; Windows has no
//! documented Win32 call for a host-wide mapping, `WNetAddConnection*` maps per logon session)
//! and the local link to the share.
//!
//! Where this differs from upstream (docs/upstream.md#smb-mapping, #idempotency):
//! - **Everything is validated before anything changes.** The remote path's components and the
//!   local path (inside the roots, nothing there yet) are checked before the first WMI call;
//!   upstream creates the mapping first and validates the local path afterwards.
//! - **A mapping in any state but OK is removed and recreated** (csi-driver-smb#733); upstream
//!   calls Create over it, which fails. An OK mapping whose root can't be reached (logon failure
//!   after a password change, #66/#75) is removed and recreated as upstream does.
//! - **A mapping that is kept is used with its own credentials**: a call with another user or
//!   password than the mapping was made (or last checked) with by this process is refused
//!   (AlreadyExists), as Windows refuses a second connection to a server with other credentials
//!   (error 1219); upstream keeps the mapping and links whatever the password. The credentials
//!   are compared as a keyed 64-bit digest (SipHash, this process's random keys) held in memory
//!   only. A mapping made before this process started (a restart) is not taken on the first
//!   caller's word: Create can't check credentials against an existing mapping (it fails, or
//!   reuses the server's session), so the caller's are checked with the server in a connection
//!   of their own ([`Win32::connect_as`]: a logon session of its own, so no existing session
//!   is reused) before anything is linked; a wrong password is refused as Create refuses it
//!   (PermissionDenied) and nothing changes. Only then are they recorded. A mapping made
//!   without a user name is not checked.
//! - **A failed link undoes a mapping this call created**, so a failed call leaves nothing
//!   behind. A mapping that was already there and healthy is kept: other links may use it.
//! - **The link target is `\\?\UNC\host\share\…\`**, the documented verbatim UNC form, where
//!   upstream writes `\\?\` + `\\host\share\…\` (see [`link_target`]).
//! - **RemoveSmbGlobalMapping of a missing mapping succeeds** (logged at info), so Kubernetes
//!   retries converge; upstream answers an error.
//! - A failing WMI query is an error, not "not mapped".
//! - **Calls are serialised per share root** (`\\host\share`), so a rollback can't pull a
//!   mapping away from a concurrent call on the same share that just decided to keep it. Calls on
//!   other shares never wait for it: `MSFT_SmbGlobalMapping.Create` may wait 120 s for an
//!   unreachable server, longer than the drivers' NodeStageVolume timeouts (smb 110 s,
//!   azurefile 90 s), and one such server must not stall every SMB volume of the node. Upstream
//!   holds no lock at all.
//! - **The reachability probe is bounded** ([`PROBE_TIMEOUT`]): GetFileAttributesW on a share
//!   waits as long as the SMB client does. A probe that has not answered by then counts as an
//!   unreachable share (the mapping is recreated, as for any other failure); it goes on in the
//!   background, and a later call on the same share waits for that probe rather than starting
//!   another, so one share holds at most one probe thread.
//!
//! The password only ever travels inside a [`Value::Secret`]; it is not logged, and an error text
//! that happens to contain it is withheld.

use super::wmi::{Namespace, Query, Row, Value, Wmi};
use super::Win32;
use crate::error::{map_message, scrub};
use crate::probes::{Probed, Probes};
use crate::smb::{remote_components, PROBE_TIMEOUT};
use crate::types::{Secret, SmbMapping};
use crate::{Error, Result, SmbHost};
use csi_proxy_sync::KeyedLock;
use csi_proxy_sync::LockExt;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, info, warn};

/// Where the share gets linked on the host; the real one is the filesystem group's
/// (`platform::fs`), under the one containment of the backend ([`super::contain`]).
pub trait ShareLinks: Send + Sync {
    /// Checks that `local` may hold the link to `target`: inside the roots, and either free
    /// (`Ok(false)`) or already that very link (`Ok(true)`, a retried call). Anything else there
    /// is AlreadyExists.
    fn check(&self, local: &str, target: &str) -> Result<bool>;
    /// Makes a directory symbolic link at `local` pointing to `target`.
    fn link(&self, local: &str, target: &str) -> Result<()>;
}

const CLASS: &str = "MSFT_SmbGlobalMapping";
const PROPS: &[&str] = &["RemotePath", "Status", "LocalPath"];

/// `MSFT_SmbGlobalMapping.Status` (the SMB client's connection states).
pub mod status {
    pub const OK: u32 = 0;
    pub const PAUSED: u32 = 1;
    pub const DISCONNECTED: u32 = 2;
    pub const NETWORK_ERROR: u32 = 3;
    pub const CONNECTING: u32 = 4;
    pub const RECONNECTING: u32 = 5;
    pub const UNAVAILABLE: u32 = 6;

    pub fn name(status: u32) -> &'static str {
        match status {
            OK => "OK",
            PAUSED => "Paused",
            DISCONNECTED => "Disconnected",
            NETWORK_ERROR => "NetworkError",
            CONNECTING => "Connecting",
            RECONNECTING => "Reconnecting",
            UNAVAILABLE => "Unavailable",
            _ => "unknown",
        }
    }
}

/// The mapping root `\\host\share`, lower-cased: every sub-path of one share shares one mapping
/// (upstream #210, Windows error 1219 otherwise).
pub fn share_root(remote: &str) -> Result<String> {
    let parts = remote_components(remote)?;
    Ok(format!(r"\\{}\{}", parts[0], parts[1]).to_lowercase())
}

/// The link target: the whole remote path in its original case, as `\\?\UNC\host\share\…\`.
///
/// Upstream passes `\\?\` + `\\host\share\…\`, a form the Win32 path rules don't define:
/// nothing after `\\?\` is reinterpreted, so the link stores `\??\\\host\share\…`, an NT path
/// with an empty component that Windows happens to resolve today. `\\?\UNC\…` is the documented
/// verbatim UNC form; the link then stores `\??\UNC\host\share\…`, the same substitute name
/// `mklink /d` writes for a share and the form `GetFinalPathNameByHandleW` reports for files on
/// it. `paths::windows::components` reads both forms as the share they name, so a link made by
/// upstream before an in-place upgrade is still a link to its share for `IsSymlink`,
/// `CreateSymlink` and a retried NewSmbGlobalMapping.
/// The trailing `\` is upstream's #98 (Go could not resolve the link without it).
pub fn link_target(remote: &str) -> Result<String> {
    let parts = remote_components(remote)?;
    Ok(format!(r"\\?\UNC\{}\", parts.join("\\")))
}

/// The credential as `MSFT_SmbGlobalMapping.Create` takes it (the CIM cmdlet adapter's encoding):
/// the user name with `\` doubled and `:` escaped as `\:`, then `:`, then the password as is.
fn credential(username: &str, password: &Secret) -> Secret {
    let mut s = String::with_capacity(username.len() + password.expose().len() + 4);
    for c in username.chars() {
        match c {
            '\\' => s.push_str(r"\\"),
            ':' => s.push_str(r"\:"),
            c => s.push(c),
        }
    }
    s.push(':');
    s.push_str(password.expose());
    Secret::new(s)
}

pub struct Smb {
    win32: Arc<dyn Win32>,
    wmi: Arc<dyn Wmi>,
    links: Arc<dyn ShareLinks>,
    /// Mapping changes take turns per share root (see the module doc).
    serial: KeyedLock<String>,
    /// Reachability probes of share roots, one running per root at most.
    probes: Probes<String, Reach>,
    /// Keyed digest of the credentials each mapping was made or checked with, by root.
    digests: Mutex<HashMap<String, u64>>,
    keys: RandomState,
}

/// The error of a failed connection to a share (a mapping's Create, a credential check) by its
/// Win32 code; names the share, never the credential.
fn connect_error(doing: &str, root: &str, code: i32) -> Error {
    const DENIED: &[i32] = &[5, 86, 1323, 1326, 1327, 1328, 1329, 1330, 1331, 1385, 1907, 1909];
    const UNREACHABLE: &[i32] = &[53, 64, 121, 1222, 1231, 1232, 1311];
    match code {
        c if DENIED.contains(&c) => Error::denied(format!(
            "{doing} {root} was refused (Windows error {c}): wrong user name or password, or no access to the share"
        )),
        67 => Error::not_found(format!("{doing} {root} failed (Windows error 67): the server has no such share")),
        c if UNREACHABLE.contains(&c) => {
            Error::unavailable(format!("{doing} {root} failed (Windows error {c}): the server can't be reached"))
        }
        c => Error::internal(format!("{doing} {root} failed: Windows error {c}")),
    }
}

/// What the share's root answered.
#[derive(Debug, Clone)]
enum Reach {
    Reachable,
    Missing,
    Failed(String),
    /// No answer within the probe's time limit.
    Silent,
}

impl Smb {
    pub fn new(win32: Arc<dyn Win32>, wmi: Arc<dyn Wmi>, links: Arc<dyn ShareLinks>) -> Self {
        Smb {
            win32,
            wmi,
            links,
            serial: KeyedLock::default(),
            probes: Probes::new("smb-probe", PROBE_TIMEOUT),
            digests: Mutex::default(),
            keys: RandomState::new(),
        }
    }

    /// The same with another limit on the reachability probe.
    pub fn with_probe_timeout(mut self, limit: Duration) -> Self {
        self.probes.set_limit(limit);
        self
    }

    /// Whether the share's root answers, waiting at most the probe's time limit. A probe of the
    /// same root still running (from an earlier call that gave up on it) is waited for rather
    /// than doubled.
    fn probe(&self, root: &str) -> Reach {
        let (win32, at) = (self.win32.clone(), root.to_owned());
        // The share's root directory; a bare `\\host\share` isn't a path every Windows version
        // resolves.
        let work = move || match win32.attributes(&format!("{at}\\")) {
            Ok(Some(_)) => Reach::Reachable,
            Ok(None) => Reach::Missing,
            Err(e) => Reach::Failed(e.to_string()),
        };
        match self.probes.probe(&root.to_owned(), work) {
            Probed::Answered(reach) => reach,
            Probed::Silent => Reach::Silent,
            Probed::NotStarted(e) => Reach::Failed(format!("cannot start the probe: {e}")),
        }
    }

    /// User names compare without case, as Windows compares them; passwords exactly.
    fn digest(&self, mapping: &SmbMapping) -> u64 {
        self.keys.hash_one((mapping.username.to_lowercase(), mapping.password.expose()))
    }

    /// A mapping that is kept is used with the credentials it was made with. Another user or
    /// password than those this process made or checked it with is refused, as Windows refuses
    /// a second connection to a server with other credentials (error 1219). One it has not seen
    /// (made before this process started) is checked with the server first, in a connection of
    /// its own; only then is the mapping linked to and the credentials taken as its own.
    fn check_credentials(&self, root: &str, mapping: &SmbMapping) -> Result<()> {
        let digest = self.digest(mapping);
        let known = self.digests.lock_ignoring_poison().get(root).copied();
        match known {
            Some(d) if d != digest => {
                return Err(Error::exists(format!(
                    "{root} is already mapped with other credentials than those given for user {:?}; a share is mapped \
                     with one set of credentials: remove its other mappings first",
                    mapping.username
                )))
            }
            Some(_) => return Ok(()),
            None => {}
        }
        // Without a user the mapping uses the host's own identity: no credential to check.
        if !mapping.username.is_empty() {
            self.win32.connect_as(root, &mapping.username, &mapping.password).map_err(|e| {
                scrub(
                    match e.raw_os_error() {
                        Some(code) => connect_error("checking the credentials for", root, code),
                        None => Error::internal(format!("checking the credentials for {root} failed: {e}")),
                    },
                    &mapping.password,
                )
            })?;
            info!(root, "the credentials for the existing SMB global mapping were checked with the server");
        }
        self.digests.lock_ignoring_poison().insert(root.to_owned(), digest);
        Ok(())
    }

    fn find(&self, root: &str) -> Result<Option<Row>> {
        let q = Query::select(Namespace::Smb, CLASS, PROPS).eq("RemotePath", root);
        Ok(self.wmi.query(&q)?.into_iter().next())
    }

    fn remove(&self, row: &Row, root: &str) -> Result<()> {
        let out = self.wmi.call(Namespace::Smb, &row.path, "Remove", &[("Force", Value::Bool(true))])?;
        match out.return_value()? {
            0 => {
                self.digests.lock_ignoring_poison().remove(root);
                info!(root, "removed the SMB global mapping");
                Ok(())
            }
            rv => Err(Error::internal(format!(
                "removing the SMB global mapping of {root} failed: {CLASS}.Remove returned {rv}, expected 0"
            ))),
        }
    }

    fn create(&self, root: &str, mapping: &SmbMapping) -> Result<()> {
        let mut args: Vec<(&'static str, Value)> =
            vec![("RemotePath", Value::from(root)), ("RequirePrivacy", Value::Bool(mapping.require_privacy))];
        if !mapping.username.is_empty() {
            args.push(("Credential", Value::Secret(credential(&mapping.username, &mapping.password))));
        }
        let out = self.wmi.call(Namespace::Smb, CLASS, "Create", &args).map_err(|e| {
            map_message(scrub(e, &mapping.password), |m| format!("creating the SMB global mapping of {root}: {m}"))
        })?;
        match out.return_value()? {
            0 => {
                self.digests.lock_ignoring_poison().insert(root.to_owned(), self.digest(mapping));
                info!(root, require_privacy = mapping.require_privacy, "created the SMB global mapping");
                Ok(())
            }
            rv => Err(map_message(connect_error("creating the SMB global mapping of", root, rv as i32), |m| {
                format!("{m} ({CLASS}.Create returned {rv}, expected 0)")
            })),
        }
    }

    /// Makes sure a healthy mapping of `root` exists; true when this call created it.
    fn ensure(&self, root: &str, mapping: &SmbMapping) -> Result<bool> {
        if let Some(row) = self.find(root)? {
            let st = row.u32("Status")?;
            if st == status::OK {
                match self.probe(root) {
                    Reach::Reachable => {
                        self.check_credentials(root, mapping)?;
                        debug!(root, "the SMB global mapping exists and the share is reachable; kept");
                        return Ok(false);
                    }
                    Reach::Missing => {
                        warn!(root, "the SMB global mapping is OK but its share is missing; recreating it")
                    }
                    Reach::Failed(error) => {
                        warn!(root, %error, "the SMB global mapping is OK but its share is unreachable; recreating it")
                    }
                    Reach::Silent => warn!(
                        root,
                        limit_s = self.probes.limit().as_secs_f32(),
                        "the SMB global mapping is OK but its share did not answer in time; recreating it"
                    ),
                }
            } else {
                warn!(root, status = st, state = status::name(st), "the SMB global mapping is not OK; recreating it");
            }
            self.remove(&row, root)?;
        }
        self.create(root, mapping)?;
        Ok(true)
    }
}

impl SmbHost for Smb {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let root = share_root(&mapping.remote_path)?;
        let target = link_target(&mapping.remote_path)?;
        let local = mapping.local_path.as_str();
        // A retried call finds its own link already there: the mapping is still made sure of.
        let linked = !local.is_empty() && self.links.check(local, &target)?;
        let _serial = self.serial.lock_blocking(root.clone());
        let created = self.ensure(&root, mapping)?;
        if local.is_empty() || linked {
            return Ok(());
        }
        let Err(e) = self.links.link(local, &target) else {
            info!(root, local, target, "linked the SMB share");
            return Ok(());
        };
        if !created {
            return Err(e);
        }
        // Undo the mapping made for this link, found by its root as every other removal is,
        // rather than through Create's out-parameters.
        let undone = self.find(&root).and_then(|row| match row {
            Some(row) => self.remove(&row, &root),
            None => Ok(()),
        });
        match undone {
            Ok(()) => Err(e),
            Err(undo) => {
                warn!(root, error = %undo, "could not remove the SMB global mapping after the link failed");
                Err(map_message(e, |m| {
                    format!("{m}; the SMB global mapping of {root} made for it could not be removed either: {undo}")
                }))
            }
        }
    }

    fn remove_smb_global_mapping(&self, remote_path: &str) -> Result<()> {
        let root = share_root(remote_path)?;
        let _serial = self.serial.lock_blocking(root.clone());
        match self.find(&root)? {
            Some(row) => self.remove(&row, &root),
            None => {
                info!(root, "no SMB global mapping to remove");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
