//! SMB global mappings on Linux: the kernel's cifs client mounts each share's root once, in a
//! folder the daemon manages under `-linux-smb-dir`, and the caller's `local_path` becomes a
//! symbolic link to the requested path inside that mount (`\\srv\share\sub` → `<mount>/sub`),
//! as on Windows a global mapping of the root plus a link to the whole remote path.
//!
//! Choices, and where they keep the Windows backend's meaning (`windows::smb`; the remote-path
//! rule and the probe limit are both backends' ([`crate::smb`])):
//! - **Validation before any change.** Host (IP literal or DNS name), share name, sub-path,
//!   user name, domain, password and the local path (contained as the filesystem group contains
//!   CreateSymlink's link: [`Filesystem::contained_dir`] of its parent) are checked before the
//!   first mount.
//! - **The kernel gets the mount through `fsopen`/`fsconfig`/`fsmount`**: every option is its
//!   own key/value, so nothing in a value can inject another option, and the password goes to
//!   the kernel alone: no argv, no credentials file, no child process. The host name is
//!   resolved here and passed as `ip` (what `mount.cifs` does), so no DNS upcall is needed.
//! - **Mount folder**: `<smb-dir>/<host>-<share>-<hash>`: the lower-cased host and share with
//!   anything outside `[a-z0-9._-]` turned into `_` (cut to 60 bytes each), plus 16 hex digits
//!   of a 64-bit FNV-1a hash of the lower-cased `host\share` (share names compare without case,
//!   as Windows compares its mapping roots). The name is stable across restarts; a mount found
//!   there whose source is another share is refused, so a hash collision can't mix shares.
//! - **Credentials**: a share is mounted with one set of credentials. A request for a mounted
//!   share with another user or domain (read from the mount's options in
//!   `/proc/self/mountinfo`) or another password is refused (AlreadyExists), as Windows refuses
//!   a second connection to a server with other credentials (error 1219). The password is
//!   compared as a keyed 64-bit digest (SipHash with this process's random keys) held in memory
//!   only: nothing derived from it is written anywhere. A share mounted before this process
//!   started (a restart) has no digest here: the caller's credentials are checked with the
//!   server first ([`Kernel::verify`]: a mount with the same options plus `nosharesock`, so the
//!   kernel authenticates a session of its own, never attached and closed at once), and only
//!   then is the digest recorded and the mount linked to. A wrong password is refused as a
//!   first mount refuses it (PermissionDenied), with nothing linked, mounted or unmounted. This
//!   rather than a slow salted hash on disk: it holds for mounts made before an upgrade or by
//!   hand, follows a password changed on the server, and writes nothing derived from a
//!   password. A guest request (no user name) has no password to check.
//! - **`require_privacy`** mounts with `seal` (SMB3 encryption); a mount without `seal` is not
//!   reused when privacy is required (AlreadyExists).
//! - **A healthy mount is reused; a dead one is replaced**: `statfs` of the mount, on its own
//!   thread, bounded by [`PROBE_TIMEOUT`] (one probe per share at a time, as on Windows). Any
//!   error (EHOSTDOWN, ESTALE, EIO, ...) or no answer in time counts as dead: the mount is
//!   detached (lazy unmount) and mounted again at the same folder, so existing links work again.
//! - **Which links use a mount** is recorded per share in `<mount folder>.links` (0600, one
//!   link path per line, written before the link is made, rewritten by rename).
//!   RemoveSmbGlobalMapping keeps the mount while a recorded link still exists and still points
//!   into the mount folder; otherwise it unmounts (lazily when busy), removes the folder and the
//!   record. Links are judged when Remove runs: a driver removes its link first, then the
//!   mapping (csi-driver-smb's NodeUnstageVolume).
//! - **Missing mapping on remove = success**; calls are serialised per share root and never
//!   across shares, so a hung server only holds calls for its own share here. The kernel itself
//!   serialises new cifs mounts (`cifs_mount_mutex`): while a silent server's mount waits for
//!   the kernel's negotiate timeout, a *new* mount of another share waits too; calls on shares
//!   already mounted (reuse, link, remove) do not.
//! - **Rollback**: a link, record or mount folder this call made is undone when a later step
//!   fails; a mount it made is unmounted when no other recorded link uses it.
//! - Mounts get `file_mode=0777,dir_mode=0777`, so a pod whatever its uid can use the share
//!   through the bind mount the kubelet makes of its link (a Windows global mapping is usable by
//!   every process of the host); the share's own permissions still apply on the server. No other
//!   local user reaches them: `-linux-smb-dir` and each share's folder in it are 0700 (the daemon
//!   makes the directory owner-only at start).

use super::fs::Filesystem;
use crate::error::clip;
use crate::error::{map_message, scrub};
use crate::probes::{Probed, Probes};
use crate::smb::{remote_components, PROBE_TIMEOUT};
use crate::types::{Secret, SmbMapping};
use crate::{Error, Result, SmbHost};
use csi_proxy_sync::KeyedLock;
use csi_proxy_sync::LockExt;
use rustix::fs::Mode;
use rustix::io::Errno;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{debug, info, warn};

mod kernel;
pub use kernel::RealKernel;

/// The longest password the kernel's cifs client takes (CIFS_MAX_PASSWORD_LEN).
const PASSWORD_MAX: usize = 512;
/// The longest share name SMB allows.
const SHARE_MAX: usize = 80;

/// What the mount needs, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountRequest {
    /// As it was asked, for resolving.
    pub host: String,
    /// `//host/share`, lower case: the mount's source.
    pub source: String,
    pub username: String,
    pub domain: String,
    pub password: Secret,
    pub seal: bool,
}

/// A cifs mount as `/proc/self/mountinfo` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CifsMount {
    pub source: String,
    /// The super options (`username=u,domain=d,seal,...`), as the kernel escapes them.
    pub options: String,
}

impl CifsMount {
    fn option(&self, key: &str) -> Option<&str> {
        self.options.split(',').find_map(|o| o.strip_prefix(key)?.strip_prefix('='))
    }
    fn flag(&self, key: &str) -> bool {
        self.options.split(',').any(|o| o == key)
    }
}

/// The kernel side, thin, so the logic can be tested with scripted failures.
pub trait Kernel: Send + Sync {
    /// Mounts the share at the existing empty directory `target`.
    fn mount(&self, request: &MountRequest, target: &Path) -> std::result::Result<(), Errno>;
    /// Checks the request's credentials against the server without using an existing session
    /// and without attaching anything: Ok when a mount made with them would authenticate, the
    /// errno that mount would fail with otherwise.
    fn verify(&self, request: &MountRequest) -> std::result::Result<(), Errno>;
    /// Unmounts `target`; `lazy` detaches it at once even while it is busy or unreachable.
    fn unmount(&self, target: &Path, lazy: bool) -> std::result::Result<(), Errno>;
    /// Asks the server behind the mount at `target` something (statfs); may block.
    fn probe(&self, target: &Path) -> std::result::Result<(), Errno>;
    /// The cifs mount visible at `target`, if any (another filesystem there is `Ok(None)` with
    /// its type, see [`Found`]).
    fn mounted(&self, target: &Path) -> Result<Found>;
}

/// What is mounted at a mount folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Nothing,
    Cifs(CifsMount),
    Other(String),
}

/// A validated remote path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Remote {
    host: String,
    share: String,
    /// The components below the share, original case.
    sub: Vec<String>,
}

impl Remote {
    /// `\\host\share`, lower case: what serialises calls and names the mount.
    fn root(&self) -> String {
        format!(r"\\{}\{}", self.host, self.share).to_lowercase()
    }
}

fn parse_remote(remote: &str) -> Result<Remote> {
    let parts = remote_components(remote)?;
    let (host, share) = (parts[0], parts[1]);
    check_host(remote, host)?;
    let bad_share = |why: String| Error::invalid(format!("remote path {:?}: share name {why}", clip(remote)));
    if share.chars().count() > SHARE_MAX {
        return Err(bad_share(format!("is longer than {SHARE_MAX} characters")));
    }
    if let Some(c) = share.chars().find(|c| c.is_control() || "\"/\\[]:|<>+=;,*?".contains(*c)) {
        return Err(bad_share(format!("{share:?} contains {c:?}, which share names can't contain")));
    }
    for c in &parts[2..] {
        if c.contains('/') {
            return Err(Error::invalid(format!("remote path {:?}: {c:?} contains `/`", clip(remote))));
        }
        if c.len() > 255 {
            return Err(Error::invalid(format!(
                "remote path {:?} has a component of {} bytes; the limit is 255",
                clip(remote),
                c.len()
            )));
        }
    }
    Ok(Remote {
        host: host.to_owned(),
        share: share.to_owned(),
        sub: parts[2..].iter().map(|s| s.to_string()).collect(),
    })
}

/// An IPv4 or IPv6 literal (bracketed or not), or a DNS name.
fn check_host(remote: &str, host: &str) -> Result<()> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if bare.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if host.len() <= 253 && host.trim_end_matches('.').split('.').all(label_ok) {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "remote path {:?}: host {:?} is not an IP address or a DNS name (letters, digits, `-`, `_` in dot-separated \
         labels)",
        clip(remote),
        clip(host)
    )))
}

/// `DOMAIN\user` or `user`; empty for a guest mount.
fn parse_user(username: &str) -> Result<(String, String)> {
    let (domain, user) = match username.split_once('\\') {
        Some((d, u)) => (d, u),
        None => ("", username),
    };
    let what = || format!("username {:?}", clip(username));
    if username.len() > 256 {
        return Err(Error::invalid(format!("{} is longer than 256 bytes", what())));
    }
    if !username.is_empty() && user.is_empty() {
        return Err(Error::invalid(format!("{} has no user name; expected user or DOMAIN\\user", what())));
    }
    if let Some(c) = user.chars().find(|c| c.is_control() || "\"/\\[]:;|=,+*?<>".contains(*c)) {
        return Err(Error::invalid(format!("{} contains {c:?}, which user names can't contain", what())));
    }
    if let Some(c) = domain.chars().find(|c| !(c.is_ascii_alphanumeric() || "-._".contains(*c))) {
        return Err(Error::invalid(format!(
            "{}: domain contains {c:?}; expected letters, digits, `-`, `.` or `_`",
            what()
        )));
    }
    Ok((domain.to_owned(), user.to_owned()))
}

fn check_password(password: &Secret) -> Result<()> {
    let p = password.expose();
    if p.len() > PASSWORD_MAX {
        return Err(Error::invalid(format!("the password is longer than {PASSWORD_MAX} bytes")));
    }
    if p.contains('\0') {
        return Err(Error::invalid("the password contains a NUL character, which the kernel can't take"));
    }
    Ok(())
}

/// A stable 64-bit hash (FNV-1a): the mount folder's name must not change across restarts or
/// Rust releases, which rules out std's hashers.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The mount folder's name for a share root (see the module doc).
fn folder_name(remote: &Remote) -> String {
    fn readable(s: &str) -> String {
        s.to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' })
            .take(60)
            .collect()
    }
    // A leading `.` would hide the folder and `..` would climb; neither comes out of a hex tail.
    format!(
        "{}-{}-{:016x}",
        readable(&remote.host).trim_start_matches('.'),
        readable(&remote.share),
        fnv1a(remote.root().as_bytes())
    )
}

/// A value as the kernel shows it in mount options (`seq_show_option`: octal for `,= \t\n\\`).
fn shown(value: &str) -> String {
    value.chars().fold(String::new(), |mut s, c| {
        if matches!(c, ',' | '=' | ' ' | '\t' | '\n' | '\\') {
            s.push_str(&format!("\\{:03o}", c as u32));
        } else {
            s.push(c);
        }
        s
    })
}

/// Where a link is to be made: its parent directory, checked, and its name there.
struct Spot {
    parent: OwnedFd,
    name: String,
    /// The link's canonical path, as recorded.
    path: PathBuf,
    /// It is already that very link (a retried call).
    linked: bool,
}

pub struct Smb {
    dir: PathBuf,
    fs: Filesystem,
    kernel: Arc<dyn Kernel>,
    /// Calls take turns per share root.
    serial: KeyedLock<String>,
    /// Health probes of mounts, one running per mount at most.
    probes: Probes<PathBuf, std::result::Result<(), Errno>>,
    /// Keyed digest of each mounted share's password, by root.
    digests: Mutex<HashMap<String, u64>>,
    keys: RandomState,
}

impl Smb {
    /// `dir` is `-linux-smb-dir` (empty: not configured); local paths are contained by `fs`.
    pub fn new(dir: PathBuf, fs: Filesystem, kernel: Arc<dyn Kernel>) -> Self {
        Smb {
            dir,
            fs,
            kernel,
            serial: KeyedLock::default(),
            probes: Probes::new("smb-probe", PROBE_TIMEOUT),
            digests: Mutex::default(),
            keys: RandomState::new(),
        }
    }

    /// The real kernel.
    pub fn real(dir: PathBuf, fs: Filesystem) -> Self {
        Self::new(dir, fs, Arc::new(RealKernel))
    }

    /// The same with another limit on the health probe.
    pub fn with_probe_timeout(mut self, limit: Duration) -> Self {
        self.probes.set_limit(limit);
        self
    }

    fn configured(&self) -> Result<()> {
        if self.dir.as_os_str().is_empty() {
            return Err(Error::precondition(
                "SMB mappings are not configured on this host: start csi-proxy with -linux-smb-dir",
            ));
        }
        Ok(())
    }

    /// The SMB directory as the kernel names it (mountinfo shows canonical paths): its longest
    /// existing ancestor resolved, the rest as configured. Nothing is created.
    fn base(&self) -> PathBuf {
        for existing in self.dir.ancestors() {
            if let Ok(canonical) = std::fs::canonicalize(existing) {
                let rest = self.dir.strip_prefix(existing).unwrap_or(Path::new(""));
                return if rest.as_os_str().is_empty() { canonical } else { canonical.join(rest) };
            }
        }
        self.dir.clone()
    }

    fn digest(&self, password: &Secret) -> u64 {
        self.keys.hash_one(password.expose())
    }

    fn records(mount: &Path) -> PathBuf {
        let mut name = mount.as_os_str().to_owned();
        name.push(".links");
        PathBuf::from(name)
    }

    fn read_records(mount: &Path) -> Result<Vec<PathBuf>> {
        let at = Self::records(mount);
        match std::fs::read_to_string(&at) {
            Ok(text) => Ok(text.lines().filter(|l| !l.is_empty()).map(PathBuf::from).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::io(format!("reading {}", at.display()), e)),
        }
    }

    /// Writes the record (0600, through a temporary file and a rename); none left when empty.
    fn write_records(mount: &Path, links: &[PathBuf]) -> Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let at = Self::records(mount);
        if links.is_empty() {
            return match std::fs::remove_file(&at) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(Error::io(format!("removing {}", at.display()), e))
                }
                _ => Ok(()),
            };
        }
        let mut tmp = at.as_os_str().to_owned();
        tmp.push(".new");
        let text: String = links.iter().map(|l| format!("{}\n", l.display())).collect();
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &at));
        written.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            Error::io(format!("writing {}", at.display()), e)
        })
    }

    /// The recorded links that still exist and still point into `mount`.
    fn live_links(mount: &Path) -> Result<Vec<PathBuf>> {
        Ok(Self::read_records(mount)?
            .into_iter()
            .filter(|l| std::fs::read_link(l).is_ok_and(|t| t.starts_with(mount)))
            .collect())
    }

    /// Checks that `local` may hold a link to `target` (see [`Spot`]).
    fn spot(&self, local: &str, target: &Path) -> Result<Spot> {
        if local.contains(['\n', '\r']) {
            return Err(Error::invalid(format!("local path {:?} contains a line break", clip(local))));
        }
        let names = crate::paths::unix::parse(local)?;
        let Some((name, parents)) = names.split_last() else {
            return Err(Error::invalid("local path / can't be a link; expected a path inside the working directories"));
        };
        let (parent, canonical) = self.fs.contained_dir(&format!("/{}", parents.join("/")))?;
        let path = Path::new(&canonical).join(name);
        let linked = match rustix::fs::readlinkat(&parent, *name, Vec::new()) {
            Ok(existing) if existing.as_bytes() == target.as_os_str().as_encoded_bytes() => true,
            // Where the existing link points is not said: it may lead anywhere on the host.
            Ok(_) => {
                return Err(Error::exists(format!(
                    "local path {} already exists as a link to something else, not to {}",
                    clip(local),
                    target.display()
                )))
            }
            Err(Errno::NOENT) => false,
            Err(Errno::INVAL) => {
                return Err(Error::exists(format!("local path {} already exists and is not a link", clip(local))))
            }
            Err(e) => return Err(Error::io(format!("checking local path {}", clip(local)), e.into())),
        };
        Ok(Spot { parent, name: name.to_string(), path, linked })
    }

    /// Whether the mount at `mount` answers, waiting at most the probe's time limit; a probe
    /// still running from an earlier call is waited for rather than doubled.
    fn probe(&self, mount: &Path) -> Probed<std::result::Result<(), Errno>> {
        let (kernel, at) = (self.kernel.clone(), mount.to_owned());
        self.probes.probe(&mount.to_owned(), move || kernel.probe(&at))
    }

    /// An existing mount of the share is refused unless it was made as this request asks.
    fn check_same(&self, root: &str, found: &CifsMount, request: &MountRequest) -> Result<()> {
        if !found.source.eq_ignore_ascii_case(&request.source) {
            return Err(Error::exists(format!(
                "the mount folder of {root} holds another share ({}); remove its mappings first",
                clip(&found.source)
            )));
        }
        let theirs = |key| found.option(key).unwrap_or("").to_owned();
        let (user, domain) = (theirs("username"), theirs("domain"));
        if !crate::same_ignoring_case(&user, &shown(&request.username))
            || !crate::same_ignoring_case(&domain, &shown(&request.domain))
        {
            let who = if domain.is_empty() { user } else { format!("{domain}\\{user}") };
            return Err(Error::exists(format!(
                "{root} is already mounted with other credentials (user {who:?}); a share is mounted with one set of \
                 credentials: remove its other mappings first"
            )));
        }
        if request.seal && !found.flag("seal") {
            return Err(Error::exists(format!(
                "{root} is already mounted without encryption (seal), but privacy is required; remove its other \
                 mappings first"
            )));
        }
        let digest = self.digest(&request.password);
        let known = self.digests.lock_ignoring_poison().get(root).copied();
        match known {
            Some(d) if d != digest => Err(Error::exists(format!(
                "{root} is already mounted with another password for user {:?}; a share is mounted with one set of \
                 credentials: remove its other mappings first",
                request.username
            ))),
            Some(_) => Ok(()),
            None => {
                // Mounted before this process started, with a password it never saw: the caller's
                // is checked with the server before anything is linked to the mount. A guest has none.
                if !request.username.is_empty() {
                    self.kernel.verify(request).map_err(|errno| {
                        scrub(mount_error("checking the credentials for", root, errno), &request.password)
                    })?;
                    info!(root, "the credentials for the share's existing mount were checked with the server");
                }
                self.digests.lock_ignoring_poison().insert(root.to_owned(), digest);
                Ok(())
            }
        }
    }

    /// Makes sure a healthy mount of the share is at `mount`; true when this call mounted it.
    fn ensure(&self, root: &str, mount: &Path, request: &MountRequest) -> Result<bool> {
        let mut made_folder = false;
        match self.kernel.mounted(mount)? {
            Found::Cifs(found) => {
                self.check_same(root, &found, request)?;
                match self.probe(mount) {
                    Probed::Answered(Ok(())) => {
                        debug!(root, mount = %mount.display(), "the share is mounted and answers; kept");
                        return Ok(false);
                    }
                    Probed::Answered(Err(errno)) => {
                        warn!(root, error = %errno, "the share's mount does not answer; mounting it again")
                    }
                    Probed::Silent | Probed::NotStarted(_) => warn!(
                        root,
                        limit_s = self.probes.limit().as_secs_f32(),
                        "the share's mount did not answer in time; mounting it again"
                    ),
                }
                self.kernel.unmount(mount, true).map_err(|e| {
                    Error::internal(format!("detaching the dead mount of {root} at {}: {e}", mount.display()))
                })?;
            }
            Found::Other(fstype) => {
                return Err(Error::precondition(format!(
                    "the mount folder of {root}, {}, holds a {fstype} mount, not the share; unmount it",
                    mount.display()
                )))
            }
            Found::Nothing => {
                let base = mount.parent().unwrap_or(mount);
                // Owner-only: the mounts below are open to every user (as a Windows global
                // mapping is), so the folder decides who reaches them: root, and pods through
                // the bind mounts the kubelet makes of their links.
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(base)
                    .map_err(|e| Error::io(format!("creating the SMB directory {}", base.display()), e))?;
                match rustix::fs::mkdir(mount, Mode::from_bits_truncate(0o700)) {
                    Ok(()) => made_folder = true,
                    Err(Errno::EXIST) => {}
                    Err(e) => return Err(Error::io(format!("creating {}", mount.display()), e.into())),
                }
            }
        }
        if let Err(errno) = self.kernel.mount(request, mount) {
            if made_folder {
                let _ = std::fs::remove_dir(mount);
            }
            return Err(scrub(mount_error("mounting", root, errno), &request.password));
        }
        self.digests.lock_ignoring_poison().insert(root.to_owned(), self.digest(&request.password));
        info!(root, mount = %mount.display(), seal = request.seal, "mounted the SMB share");
        Ok(true)
    }

    /// Unmounts the share and removes its folder and records (what Remove and a rollback do).
    fn unmount(&self, root: &str, mount: &Path) -> Result<()> {
        match self.kernel.unmount(mount, false) {
            Ok(()) => {}
            Err(Errno::BUSY) => {
                warn!(root, "the share's mount is busy; detaching it");
                self.kernel
                    .unmount(mount, true)
                    .map_err(|e| Error::internal(format!("detaching the mount of {root}: {e}")))?;
            }
            Err(e) => return Err(Error::internal(format!("unmounting {root} from {}: {e}", mount.display()))),
        }
        self.digests.lock_ignoring_poison().remove(root);
        match std::fs::remove_dir(mount) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                warn!(root, error = %e, "could not remove the mount folder")
            }
            _ => {}
        }
        Self::write_records(mount, &[])?;
        info!(root, mount = %mount.display(), "unmounted the SMB share");
        Ok(())
    }

    fn link(&self, root: &str, mount: &Path, spot: &Spot, target: &Path) -> Result<()> {
        let mut links = Self::live_links(mount)?;
        if !links.contains(&spot.path) {
            links.push(spot.path.clone());
            Self::write_records(mount, &links)?;
        }
        if spot.linked {
            return Ok(());
        }
        match rustix::fs::symlinkat(target, &spot.parent, spot.name.as_str()) {
            Ok(()) => {}
            // Made meanwhile by a call on another share (ours are serialised): the same link is fine.
            Err(Errno::EXIST)
                if rustix::fs::readlinkat(&spot.parent, spot.name.as_str(), Vec::new())
                    .is_ok_and(|t| t.as_bytes() == target.as_os_str().as_encoded_bytes()) => {}
            Err(e) => {
                links.retain(|l| l != &spot.path);
                let _ = Self::write_records(mount, &links);
                return Err(Error::io(format!("creating the link {} to {root}", spot.path.display()), e.into()));
            }
        }
        info!(root, local = %spot.path.display(), target = %target.display(), "linked the SMB share");
        Ok(())
    }
}

/// The error of a failed mount (or credential check: `doing` says which), by the kernel's errno,
/// through the one classification of [`crate::smb::FAILURES`]; names the share, never the
/// password.
fn mount_error(doing: &str, root: &str, errno: Errno) -> Error {
    crate::smb::connect_error(doing, root, crate::smb::Source::Errno, errno.raw_os_error(), &errno.to_string(), None)
}

impl SmbHost for Smb {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let remote = parse_remote(&mapping.remote_path)?;
        let (domain, username) = parse_user(&mapping.username)?;
        check_password(&mapping.password)?;
        self.configured()?;
        let root = remote.root();
        let mount = self.base().join(folder_name(&remote));
        let target = remote.sub.iter().fold(mount.clone(), |p, c| p.join(c));
        let local = mapping.local_path.as_str();
        let spot = if local.is_empty() { None } else { Some(self.spot(local, &target)?) };
        let request = MountRequest {
            host: remote.host.clone(),
            source: format!("//{}/{}", remote.host, remote.share).to_lowercase(),
            username,
            domain,
            password: mapping.password.clone(),
            seal: mapping.require_privacy,
        };
        let _serial = self.serial.lock_blocking(root.clone());
        let mounted = self.ensure(&root, &mount, &request)?;
        let Some(spot) = spot else { return Ok(()) };
        let Err(e) = self.link(&root, &mount, &spot, &target) else { return Ok(()) };
        // Undo the mount made for this link, unless another recorded link uses it.
        if mounted && Self::live_links(&mount).is_ok_and(|l| l.is_empty()) {
            if let Err(undo) = self.unmount(&root, &mount) {
                warn!(root, error = %undo, "could not unmount the share after the link failed");
                return Err(map_message(e, |m| {
                    format!("{m}; the mount of {root} made for it could not be undone: {undo}")
                }));
            }
        }
        Err(e)
    }

    fn remove_smb_global_mapping(&self, remote_path: &str) -> Result<()> {
        let remote = parse_remote(remote_path)?;
        let root = remote.root();
        if self.dir.as_os_str().is_empty() {
            info!(root, "no SMB mapping to remove (-linux-smb-dir is not set)");
            return Ok(());
        }
        let mount = self.base().join(folder_name(&remote));
        let _serial = self.serial.lock_blocking(root.clone());
        let live = Self::live_links(&mount)?;
        if !live.is_empty() {
            Self::write_records(&mount, &live)?;
            info!(root, links = live.len(), "the share's mount is kept: other links still use it");
            return Ok(());
        }
        match self.kernel.mounted(&mount)? {
            Found::Cifs(found) if found.source.eq_ignore_ascii_case(&format!("//{}/{}", remote.host, remote.share)) => {
                self.unmount(&root, &mount)
            }
            Found::Cifs(found) => Err(Error::precondition(format!(
                "the mount folder of {root} holds another share ({}); nothing was unmounted",
                clip(&found.source)
            ))),
            Found::Other(fstype) => Err(Error::precondition(format!(
                "the mount folder of {root}, {}, holds a {fstype} mount, not the share; nothing was unmounted",
                mount.display()
            ))),
            Found::Nothing => {
                Self::write_records(&mount, &[])?;
                let _ = std::fs::remove_dir(&mount);
                info!(root, "no SMB mapping to remove");
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
