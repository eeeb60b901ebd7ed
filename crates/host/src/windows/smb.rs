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
//! - **A mapping that is kept is used with its own user**: a call with another user than the
//!   mapping was made (or last checked) with by this process is refused (AlreadyExists) naming
//!   that user, as Windows refuses a second connection to a server as another user (error
//!   1219); upstream keeps the mapping and links whatever the credentials. The same user with
//!   another password (a rotated secret) is checked with the server ([`Win32::connect_as`]) and
//!   the mapping reused if the server accepts it. The credentials are compared as a keyed 64-bit
//!   digest (SipHash, this process's random keys) held in memory only, with the user name. A
//!   mapping made before this process started (a restart) is not taken on the first caller's
//!   word: Create can't check credentials against an existing mapping (it fails, or reuses the
//!   server's session), so the caller's are checked with the server in a connection of their
//!   own ([`Win32::connect_as`]: a logon session of its own, so no existing session is reused)
//!   before anything is linked; a wrong password is refused as Create refuses it
//!   (PermissionDenied) and nothing changes. Only then are they recorded. A mapping made
//!   without a user name is not checked.
//! - **Failures are named** by the one table of both backends ([`crate::smb::FAILURES`]): code,
//!   symbolic name, plain words, a hint. Create's 1219 names the server's connections as other
//!   users, or reuses a mapping of the share that turns out to be this user's; connect_as's
//!   1208 carries what WNetGetLastError reported.
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
use super::{code, provider_error, Win32};
use crate::error::{clip, map_message, scrub};
use crate::probes::{Probed, Probes};
use crate::smb::{self, remote_components, Source, PROBE_TIMEOUT};
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
/// The SMB client's connections to servers (one per share, logon session and credential).
const CONNECTION: &str = "MSFT_SmbConnection";
const CONNECTION_PROPS: &[&str] = &["ServerName", "ShareName", "UserName", "Credential"];
/// How many other connections a 1219 refusal names.
const CONFLICTS_SHOWN: usize = 3;

/// What a mapping was made or checked with by this process: a keyed 64-bit digest of user and
/// password (never the password), and the user name, which a refusal may name.
#[derive(Debug, Clone)]
struct Known {
    digest: u64,
    user: String,
}

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
    /// The credentials each mapping was made or checked with, by root.
    known: Mutex<HashMap<String, Known>>,
    keys: RandomState,
}

/// The error of a failed connection to a share (a mapping's Create, a credential check) by its
/// Win32 code, through the one classification of [`crate::smb::FAILURES`]; names the share,
/// never the credential.
fn connect_error(doing: &str, root: &str, code: i32, detail: Option<&str>) -> Error {
    smb::connect_error(doing, root, Source::Win32, code, &format!("Windows error {code}"), detail)
}

/// The error of a failed [`Win32::connect_as`]: its Win32 code, or for ERROR_EXTENDED_ERROR the
/// network provider's code, text and name, which say what the bare 1208 does not.
fn connect_as_error(doing: &str, root: &str, e: &std::io::Error) -> Error {
    if let Some(p) = provider_error(e) {
        let detail =
            format!("the network provider {:?} reported error {}: {:?}", clip(&p.provider), p.code, clip(&p.text));
        return connect_error(doing, root, code::ERROR_EXTENDED_ERROR, Some(&detail));
    }
    match e.raw_os_error() {
        Some(c) => connect_error(doing, root, c, None),
        None => Error::internal(format!("{doing} {root} failed: {e}")),
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
            known: Mutex::default(),
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

    /// A mapping that is kept is used with the user it was made with. Another user than the one
    /// this process made or checked it with is refused, naming that user, as Windows refuses a
    /// second connection to a server as another user (error 1219). The same user with another
    /// password (a rotated secret) is checked with the server and, if it accepts it, the mapping
    /// is reused; a wrong one is refused as Create refuses it. One this process has not seen
    /// (made before it started) is checked with the server first, in a connection of its own;
    /// only then is the mapping linked to and the credentials taken as its own.
    fn check_credentials(&self, root: &str, mapping: &SmbMapping) -> Result<()> {
        let digest = self.digest(mapping);
        let known = self.known.lock_ignoring_poison().get(root).cloned();
        match &known {
            Some(k) if k.digest == digest => return Ok(()),
            Some(k) if k.user.to_lowercase() != mapping.username.to_lowercase() => {
                return Err(Error::exists(format!(
                    "{root} is already mapped for user {:?}, not {:?} (Windows error 1219, \
                     ERROR_SESSION_CREDENTIAL_CONFLICT: Windows connects to a server as one user); hint: give this \
                     share the same credentials as the mapping's, or remove that mapping first (Get-SmbGlobalMapping \
                     lists them)",
                    clip(&k.user),
                    clip(&mapping.username)
                )))
            }
            _ => {}
        }
        // Without a user the mapping uses the host's own identity: no credential to check.
        if !mapping.username.is_empty() {
            self.win32
                .connect_as(root, &mapping.username, &mapping.password)
                .map_err(|e| scrub(connect_as_error("checking the credentials for", root, &e), &mapping.password))?;
            if known.is_some() {
                info!(root, "the SMB global mapping is reused: the server accepted another password of its user");
            } else {
                info!(root, "the credentials for the existing SMB global mapping were checked with the server");
            }
        }
        self.remember(root, mapping, digest);
        Ok(())
    }

    fn remember(&self, root: &str, mapping: &SmbMapping, digest: u64) {
        let known = Known { digest, user: mapping.username.clone() };
        self.known.lock_ignoring_poison().insert(root.to_owned(), known);
    }

    /// After Create answered 1219: a mapping of this very share whose server connection is this
    /// user's (made meanwhile by another caller, or one Create could not see) is reused once the
    /// caller's credentials are checked; otherwise the refusal names the connections to the
    /// server as other users (MSFT_SmbConnection's Credential, "domain + user name"), a few at
    /// most. Only this failure's path asks: a New call enumerates nothing otherwise.
    fn conflict(&self, root: &str, mapping: &SmbMapping) -> Result<bool> {
        let (host, share) = root.trim_start_matches('\\').split_once('\\').unwrap_or((root, ""));
        let q = Query::select(Namespace::Smb, CONNECTION, CONNECTION_PROPS).eq("ServerName", host);
        let connections = self.wmi.query(&q).unwrap_or_else(|e| {
            debug!(root, error = %e, "could not list the SMB connections to the server");
            Vec::new()
        });
        fn user_of(c: &Row) -> &str {
            match c.str("Credential") {
                Ok(cred) if !cred.is_empty() => cred,
                _ => c.str("UserName").unwrap_or_default(),
            }
        }
        let ours =
            |c: &Row| !mapping.username.is_empty() && user_of(c).to_lowercase() == mapping.username.to_lowercase();
        let same_share =
            connections.iter().any(|c| ours(c) && c.str("ShareName").unwrap_or_default().eq_ignore_ascii_case(share));
        let mapped_ok = || self.find(root).ok().flatten().is_some_and(|row| row.u32("Status").ok() == Some(status::OK));
        if same_share && mapped_ok() {
            self.check_credentials(root, mapping)?;
            info!(root, "Create answered 1219, but the share is mapped for this user already; reused");
            return Ok(false);
        }
        let others: Vec<String> = connections
            .iter()
            .filter(|c| !ours(c))
            .map(|c| {
                format!(
                    r"\\{}\{} as {:?}",
                    clip(c.str("ServerName").unwrap_or_default()),
                    clip(c.str("ShareName").unwrap_or_default()),
                    clip(user_of(c))
                )
            })
            .collect();
        let detail = match others.len() {
            0 => "no connection to the server as another user was found (it may be another logon session's)".to_owned(),
            n if n <= CONFLICTS_SHOWN => format!("connected as {}", others.join(", ")),
            n => format!("connected as {} and {} more", others[..CONFLICTS_SHOWN].join(", "), n - CONFLICTS_SHOWN),
        };
        Err(connect_error(
            "creating the SMB global mapping of",
            root,
            code::ERROR_SESSION_CREDENTIAL_CONFLICT,
            Some(&detail),
        ))
    }

    fn find(&self, root: &str) -> Result<Option<Row>> {
        let q = Query::select(Namespace::Smb, CLASS, PROPS).eq("RemotePath", root);
        Ok(self.wmi.query(&q)?.into_iter().next())
    }

    fn remove(&self, row: &Row, root: &str) -> Result<()> {
        let out = self.wmi.call(Namespace::Smb, &row.path, "Remove", &[("Force", Value::Bool(true))])?;
        match out.return_value()? {
            0 => {
                self.known.lock_ignoring_poison().remove(root);
                info!(root, "removed the SMB global mapping");
                Ok(())
            }
            rv => Err(Error::internal(format!(
                "removing the SMB global mapping of {root} failed: {CLASS}.Remove returned {rv}, expected 0"
            ))),
        }
    }

    /// Creates the mapping; true when made, false when Create's 1219 found it already made for
    /// this user ([`Self::conflict`]).
    fn create(&self, root: &str, mapping: &SmbMapping) -> Result<bool> {
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
                self.remember(root, mapping, self.digest(mapping));
                info!(root, require_privacy = mapping.require_privacy, "created the SMB global mapping");
                Ok(true)
            }
            1219 => self.conflict(root, mapping).map_err(|e| {
                map_message(scrub(e, &mapping.password), |m| format!("{m} ({CLASS}.Create returned 1219, expected 0)"))
            }),
            rv => Err(map_message(connect_error("creating the SMB global mapping of", root, rv as i32, None), |m| {
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
        self.create(root, mapping)
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
