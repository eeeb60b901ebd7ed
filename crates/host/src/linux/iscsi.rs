//! iSCSI on Linux through open-iscsi: `iscsiadm` for portals (sendtargets discovery records),
//! node records and logins, iscsid for the sessions, sysfs for what is logged in and its disks.
//!
//! The same meaning as the Windows backend (docs/upstream.md#iscsi):
//! - A portal is a sendtargets discovery record (`iscsiadm -m discoverydb`). AddTargetPortal
//!   of an existing one succeeds; a new one is discovered at once (as `MSFT_iSCSITargetPortal.New`
//!   does) and removed again when discovery fails. RemoveTargetPortal of a missing portal is
//!   NotFound; removing one also removes its node records, not the sessions.
//! - DiscoverTargetPortal asks the portal again (`--discover -o new -o delete`, never `update`,
//!   which would reset the CHAP settings of existing records) and answers the IQNs it reported.
//! - ConnectTarget of a logged-in target succeeds without a new login; logins are not
//!   persistent (`node.startup = manual`), as upstream's `IsPersistent = false`.
//! - DisconnectTarget of a target without a session succeeds; it logs out every session of the
//!   target at that portal and clears the record's credentials.
//! - GetTargetDisks answers the disk numbers of the disk group ([`disk_number`]) of the block
//!   devices of the target's sessions, each once, sorted.
//!
//! Secrets never reach argv, logs or error texts. CHAP settings are written into the node
//! record file (`<nodes>/<iqn>/<ip>,<port>,<tpgt>/<iface>`, mode 0600, replaced atomically) in
//! iscsiadm's record syntax, from which `iscsiadm --login` hands them to iscsid. They stay there
//! while the session is up (iscsid needs them to log in again after a connection loss) and are
//! removed on logout and after a failed login. Every value that enters a record line is checked
//! first: no control characters (a newline would add a line), no surrounding blanks (the parser
//! trims them), at most 255 bytes (open-iscsi's limit).
//!
//! Mutual CHAP: the initiator's secret (SetMutualChapSecret, host-wide as on Windows) is kept in
//! a 0600 file and becomes `node.session.auth.password_in` at connect. open-iscsi accepts the
//! target's answer only when the CHAP name the target sends equals `node.session.auth.username_in`
//! (checked against tgt: an empty or different name fails the login); Windows checks no name.
//! The name we expect is the target's IQN, so a target must answer mutual CHAP under its IQN.

use super::block::{disk_number, tools};
use crate::error::clip;
use crate::types::{AuthType, ConnectTarget, Secret, TargetPortal};
use crate::{Error, IscsiHost, Result};
use csi_proxy_sync::{KeyGuard, KeyedLock};
use std::ffi::OsString;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// open-iscsi's AUTH_STR_MAX_LEN is 256 including the terminating NUL.
const AUTH_MAX: usize = 255;
/// RFC 3720 §3.2.6.1: names are at most 223 bytes.
const NAME_MAX: usize = 223;
/// How long GetTargetDisks waits for the SCSI scan of a session that has no disk yet.
const SCAN_WAIT: Duration = Duration::from_secs(5);

/// What one iscsiadm run gave back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Output {
    /// The exit code; -1 when it was killed by a signal.
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `iscsiadm` with an argv (never a shell); the seam the tests script.
pub trait Iscsiadm: Send + Sync {
    fn run(&self, args: &[String]) -> Result<Output>;
}

/// The real tool, run as every tool of the Linux backend is ([`tools::command`]: fixed `PATH`,
/// clean environment, stdin from /dev/null, dies with the daemon).
pub struct RealIscsiadm;

impl Iscsiadm for RealIscsiadm {
    fn run(&self, args: &[String]) -> Result<Output> {
        let argv: Vec<OsString> =
            std::iter::once(OsString::from("iscsiadm")).chain(args.iter().map(Into::into)).collect();
        let out = tools::output(&argv, tools::command(&argv)?)?;
        Ok(Output {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// Where the backend reads and writes; the tests point these into a scratch directory.
#[derive(Debug, Clone)]
pub struct Paths {
    /// sysfs (`/sys`): sessions, connections, block devices.
    pub sysfs: PathBuf,
    /// open-iscsi's node records (`/etc/iscsi/nodes`, `/var/lib/iscsi/nodes` on some distributions).
    pub nodes: PathBuf,
    /// The initiator's mutual CHAP secret (0600, owned by the daemon's user).
    pub mutual_secret: PathBuf,
}

impl Paths {
    pub fn real() -> Paths {
        let var = Path::new("/var/lib/iscsi");
        let base = if var.join("nodes").is_dir() || !Path::new("/etc/iscsi").is_dir() && var.is_dir() {
            var
        } else {
            Path::new("/etc/iscsi")
        };
        Paths {
            sysfs: PathBuf::from("/sys"),
            nodes: base.join("nodes"),
            mutual_secret: base.join("csi-proxy-mutual-chap-secret"),
        }
    }
}

pub struct Iscsi {
    tool: Box<dyn Iscsiadm>,
    paths: Paths,
    scan_wait: Duration,
    /// Calls take turns per portal and per target.
    turns: KeyedLock<String>,
}

impl Iscsi {
    pub fn real() -> Self {
        Self::new(Box::new(RealIscsiadm), Paths::real(), SCAN_WAIT)
    }

    pub fn new(tool: Box<dyn Iscsiadm>, paths: Paths, scan_wait: Duration) -> Self {
        Iscsi { tool, paths, scan_wait, turns: KeyedLock::default() }
    }

    fn run(&self, args: &[&str]) -> Result<Output> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        self.tool.run(&args)
    }

    /// Runs iscsiadm and turns a failure into an error about `what`.
    fn run_ok(&self, args: &[&str], what: impl FnOnce() -> String) -> Result<Output> {
        let out = self.run(args)?;
        match out.code {
            0 => Ok(out),
            _ => Err(tool_error(&out, &what())),
        }
    }

    /// The sendtargets discovery records: our portals.
    fn portals(&self) -> Result<Vec<TargetPortal>> {
        let out = self.run(&["-m", "discoverydb"])?;
        match out.code {
            0 => Ok(parse_portals(&out.stdout)),
            code::NO_OBJS_FOUND => Ok(Vec::new()),
            _ => Err(tool_error(&out, "listing the iSCSI target portals (iscsiadm -m discoverydb)")),
        }
    }

    fn portal_exists(&self, portal: &Portal) -> Result<bool> {
        Ok(self.portals()?.iter().any(|p| portal.is(p)))
    }

    fn require_portal(&self, portal: &Portal) -> Result<()> {
        match self.portal_exists(portal)? {
            true => Ok(()),
            false => Err(missing_portal(portal)),
        }
    }

    /// Runs sendtargets discovery on `portal` (adding new node records, deleting those it no
    /// longer reports) and answers the IQNs it reported, each once.
    fn discover(&self, portal: &Portal) -> Result<Vec<String>> {
        let p = portal.arg();
        let out =
            self.run(&["-m", "discoverydb", "-t", "sendtargets", "-p", &p, "--discover", "-o", "new", "-o", "delete"])?;
        match out.code {
            0 => {}
            code::NO_OBJS_FOUND => return Ok(Vec::new()),
            _ => return Err(tool_error(&out, &format!("discovering the targets of iSCSI target portal {portal}"))),
        }
        let mut iqns: Vec<String> = Vec::new();
        for node in parse_nodes(&out.stdout) {
            if !iqns.contains(&node.iqn) {
                iqns.push(node.iqn);
            }
        }
        Ok(iqns)
    }

    /// The node records of `iqn` reached through `portal`.
    fn nodes(&self, portal: &Portal, iqn: &str) -> Result<Vec<Node>> {
        let out = self.run(&["-m", "node"])?;
        let all = match out.code {
            0 => parse_nodes(&out.stdout),
            code::NO_OBJS_FOUND => Vec::new(),
            _ => return Err(tool_error(&out, "listing the iSCSI node records (iscsiadm -m node)")),
        };
        let ips = portal.ips()?;
        Ok(all.into_iter().filter(|n| n.iqn == iqn && n.port == portal.port && ips.contains(&n.ip)).collect())
    }

    /// The node records, or NotFound as Windows answers for a portal or target it does not know.
    fn require_nodes(&self, portal: &Portal, iqn: &str) -> Result<Vec<Node>> {
        let nodes = self.nodes(portal, iqn)?;
        if !nodes.is_empty() {
            return Ok(nodes);
        }
        self.require_portal(portal)?;
        Err(Error::not_found(format!(
            "iSCSI target {} is not among the targets of portal {portal}; expected one DiscoverTargetPortal reports",
            clip(iqn)
        )))
    }

    /// The ids of the sessions to `iqn` whose connection goes to `portal`.
    fn sessions(&self, portal: &Portal, iqn: &str) -> Result<Vec<u32>> {
        let dir = self.paths.sysfs.join("class/iscsi_session");
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            // No iscsi transport loaded: no sessions.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(format!("reading {}", dir.display()), e)),
        };
        let ips = portal.ips()?;
        let mut ids = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_prefix("session").and_then(|n| n.parse::<u32>().ok()) else { continue };
            // A session that ends meanwhile has no files any more: not ours.
            let Ok(target) = std::fs::read_to_string(entry.path().join("targetname")) else { continue };
            if target.trim_end() != iqn {
                continue;
            }
            if self.connection_goes_to(id, &ips, portal.port) {
                ids.push(id);
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    fn connection_goes_to(&self, session: u32, ips: &[IpAddr], port: u16) -> bool {
        let dir = self.paths.sysfs.join("class/iscsi_connection");
        let prefix = format!("connection{session}:");
        let Ok(entries) = std::fs::read_dir(&dir) else { return false };
        entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(&prefix)).any(|e| {
            let read = |f: &str| std::fs::read_to_string(e.path().join(f)).map(|s| s.trim().to_owned()).ok();
            let ip = read("persistent_address").and_then(|a| a.parse::<IpAddr>().ok());
            let p = read("persistent_port").and_then(|p| p.parse::<u16>().ok());
            matches!((ip, p), (Some(ip), Some(p)) if p == port && ips.contains(&ip))
        })
    }

    /// The disk numbers of the block devices of `sessions`.
    fn session_disks(&self, sessions: &[u32]) -> Result<Vec<u32>> {
        let mut disks = Vec::new();
        for id in sessions {
            let device = self.paths.sysfs.join(format!("class/iscsi_session/session{id}/device"));
            for target in children(&device, "target") {
                for lun in children(&target, "") {
                    for block in children(&lun.join("block"), "") {
                        let Some(name) = block.file_name() else { continue };
                        let dev = self.paths.sysfs.join("class/block").join(name).join("dev");
                        let Ok(text) = std::fs::read_to_string(&dev) else { continue };
                        match text.trim().split_once(':').map(|(a, b)| (a.parse::<u32>(), b.parse::<u32>())) {
                            Some((Ok(major), Ok(minor))) => disks.push(disk_number(major, minor)),
                            _ => warn!(path = %dev.display(), "unexpected device number in sysfs"),
                        }
                    }
                }
            }
        }
        disks.sort_unstable();
        disks.dedup();
        Ok(disks)
    }

    /// The record files of `nodes` (one per interface).
    fn record_files(&self, iqn: &str, nodes: &[Node]) -> Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for n in nodes {
            let path = self.paths.nodes.join(iqn).join(format!("{},{},{}", n.ip, n.port, n.tpgt));
            match std::fs::metadata(&path) {
                // The layout since open-iscsi 2.0-870: a directory with one file per interface.
                Ok(m) if m.is_dir() => files.extend(children(&path, "").into_iter().filter(|f| f.is_file())),
                Ok(_) => files.push(path),
                Err(e) => return Err(Error::io(format!("reading the iSCSI node record {}", path.display()), e)),
            }
        }
        if files.is_empty() {
            return Err(Error::internal(format!(
                "iscsiadm lists iSCSI target {iqn}, but {} has no record file for it",
                self.paths.nodes.display()
            )));
        }
        Ok(files)
    }

    /// Replaces the authentication settings of the records (and makes their logins manual).
    fn write_auth(&self, files: &[PathBuf], auth: &[(&str, &str)]) -> Result<()> {
        for file in files {
            let record = std::fs::read_to_string(file)
                .map_err(|e| Error::io(format!("reading the iSCSI node record {}", file.display()), e))?;
            let updated = with_settings(&record, auth).ok_or_else(|| {
                Error::internal(format!("the iSCSI node record {} has no \"{END}\" line", file.display()))
            })?;
            write_private(file, &updated)
                .map_err(|e| Error::io(format!("writing the iSCSI node record {}", file.display()), e))?;
        }
        Ok(())
    }

    fn clear_auth(&self, files: &[PathBuf]) -> Result<()> {
        self.write_auth(files, &[("node.session.auth.authmethod", "None")])
    }

    fn mutual_secret(&self) -> Result<Option<Secret>> {
        match std::fs::read_to_string(&self.paths.mutual_secret) {
            Ok(s) if !s.is_empty() => Ok(Some(Secret::new(s))),
            Ok(_) => Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(
                format!("reading the initiator's mutual CHAP secret from {}", self.paths.mutual_secret.display()),
                e,
            )),
        }
    }

    fn login(&self, req: &ConnectTarget, portal: &Portal, nodes: &[Node]) -> Result<()> {
        let iqn = req.iqn.as_str();
        let files = self.record_files(iqn, nodes)?;
        let mutual;
        let mut auth: Vec<(&str, &str)> = Vec::new();
        match req.auth {
            AuthType::None => auth.push(("node.session.auth.authmethod", "None")),
            AuthType::OneWayChap | AuthType::MutualChap => {
                auth.extend([
                    ("node.session.auth.authmethod", "CHAP"),
                    ("node.session.auth.username", req.chap_username.as_str()),
                    ("node.session.auth.password", req.chap_secret.expose()),
                ]);
                if req.auth == AuthType::MutualChap {
                    mutual = self.mutual_secret()?.ok_or_else(|| {
                        Error::precondition(format!(
                            "mutual CHAP to iSCSI target {iqn} needs the initiator's mutual CHAP secret; \
                             expected SetMutualChapSecret to be called first"
                        ))
                    })?;
                    check_record_value("the initiator's mutual CHAP secret", mutual.expose())?;
                    auth.extend([
                        ("node.session.auth.username_in", iqn),
                        ("node.session.auth.password_in", mutual.expose()),
                    ]);
                }
            }
        }
        self.write_auth(&files, &auth)?;
        let mut failures = Vec::new();
        for n in nodes {
            let p = n.arg();
            let out = self.run(&["-m", "node", "-T", iqn, "-p", &p, "--login"])?;
            match out.code {
                0 | code::SESS_EXISTS => {}
                _ => failures.push(out),
            }
        }
        let Some(out) = failures.into_iter().next() else { return Ok(()) };
        // Nothing half-done: no credentials left behind, no session of a partial success.
        if let Err(e) = self.logout_all(portal, iqn) {
            warn!(iqn, %portal, error = %e, "could not log out after a failed login");
        }
        if let Err(e) = self.clear_auth(&files) {
            warn!(iqn, %portal, error = %e, "could not clear the credentials after a failed login");
        }
        let what = format!("connecting to iSCSI target {iqn} at portal {portal}");
        Err(match (out.code, req.auth) {
            (code::LOGIN_AUTH_FAILED, _) => Error::denied(format!(
                "iSCSI target {iqn} at portal {portal} refused the login: {}; expected CHAP credentials the target accepts",
                tool_detail(&out)
            )),
            (code::FATAL_LOGIN, AuthType::MutualChap) => Error::denied(format!(
                "{what} failed: {}; with mutual CHAP the target must answer under the CHAP name {iqn} (its IQN) \
                 with the secret set by SetMutualChapSecret, and accept the initiator's credentials",
                tool_detail(&out)
            )),
            _ => tool_error(&out, &what),
        })
    }

    fn logout_all(&self, portal: &Portal, iqn: &str) -> Result<usize> {
        let sessions = self.sessions(portal, iqn)?;
        for id in &sessions {
            let sid = id.to_string();
            let out = self.run(&["-m", "session", "-r", &sid, "--logout"])?;
            match out.code {
                // Ended meanwhile.
                0 | code::NO_OBJS_FOUND | code::SESS_NOT_FOUND | code::SYSFS_LOOKUP => {}
                _ => {
                    return Err(tool_error(
                        &out,
                        &format!("disconnecting session {id} from iSCSI target {iqn} at portal {portal}"),
                    ))
                }
            }
        }
        Ok(sessions.len())
    }
}

impl IscsiHost for Iscsi {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        let portal = Portal::new(portal)?;
        let _turns = portal.turns(&self.turns)?;
        if self.portal_exists(&portal)? {
            info!(%portal, "the iSCSI target portal exists already");
            return Ok(());
        }
        let p = portal.arg();
        self.run_ok(&["-m", "discoverydb", "-t", "sendtargets", "-p", &p, "-o", "new"], || {
            format!("adding iSCSI target portal {portal}")
        })?;
        if let Err(e) = self.discover(&portal) {
            let out = self.run(&["-m", "discoverydb", "-t", "sendtargets", "-p", &p, "-o", "delete"]);
            if !matches!(out, Ok(Output { code: 0, .. })) {
                warn!(%portal, "could not remove the discovery record after a failed discovery");
            }
            return Err(e);
        }
        info!(%portal, "added the iSCSI target portal");
        Ok(())
    }

    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        let portal = Portal::new(portal)?;
        let _turns = portal.turns(&self.turns)?;
        self.require_portal(&portal)?;
        self.discover(&portal)
    }

    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        let portal = Portal::new(portal)?;
        let _turns = portal.turns(&self.turns)?;
        // Gone already (a retry after the call that removed it): nothing to do.
        let gone = || {
            info!(%portal, "the iSCSI target portal is not registered; nothing to remove");
            Ok(())
        };
        match self.require_portal(&portal) {
            Err(Error::NotFound(_)) => return gone(),
            other => other?,
        }
        let p = portal.arg();
        let out = self.run(&["-m", "discoverydb", "-t", "sendtargets", "-p", &p, "-o", "delete"])?;
        match out.code {
            0 => {}
            code::IDBM if out.stderr.contains("not found") => return gone(),
            _ => return Err(tool_error(&out, &format!("removing iSCSI target portal {portal}"))),
        }
        info!(%portal, "removed the iSCSI target portal");
        Ok(())
    }

    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        self.portals()
    }

    fn connect_target(&self, req: &ConnectTarget) -> Result<()> {
        let portal = Portal::new(&req.portal)?;
        let iqn = req.iqn.as_str();
        check_name(iqn)?;
        if req.auth != AuthType::None {
            check_record_value("the CHAP user name", &req.chap_username)?;
            check_record_value("the CHAP secret", req.chap_secret.expose())?;
        }
        // The portal's turn, then the target's (always in that order): removing or rediscovering
        // the portal rewrites the node records this login reads and fills with credentials.
        let _portal_turns = portal.turns(&self.turns)?;
        let _turn = self.turns.lock_blocking(target_key(iqn));
        if !self.sessions(&portal, iqn)?.is_empty() {
            info!(iqn, %portal, "the iSCSI target is connected already");
            return Ok(());
        }
        let nodes = self.require_nodes(&portal, iqn)?;
        self.login(req, &portal, &nodes)?;
        info!(iqn, %portal, auth = ?req.auth, "connected the iSCSI target");
        Ok(())
    }

    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        let portal = Portal::new(portal)?;
        check_name(iqn)?;
        let _portal_turns = portal.turns(&self.turns)?;
        let _turn = self.turns.lock_blocking(target_key(iqn));
        let ended = self.logout_all(&portal, iqn)?;
        let nodes = self.nodes(&portal, iqn)?;
        if ended == 0 && nodes.is_empty() {
            // As Windows: an unknown portal or target is NotFound, a known one without a session is done.
            self.require_nodes(&portal, iqn)?;
        }
        if !nodes.is_empty() {
            self.clear_auth(&self.record_files(iqn, &nodes)?)?;
        }
        match ended {
            0 => info!(iqn, %portal, "the iSCSI target is not connected"),
            n => info!(iqn, %portal, sessions = n, "disconnected the iSCSI target"),
        }
        Ok(())
    }

    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        let portal = Portal::new(portal)?;
        check_name(iqn)?;
        let sessions = self.sessions(&portal, iqn)?;
        if sessions.is_empty() {
            self.require_nodes(&portal, iqn)?;
            info!(iqn, %portal, "the iSCSI target is not connected; it has no disks");
            return Ok(Vec::new());
        }
        // A session just logged in may still be scanning its LUNs.
        let deadline = Instant::now() + self.scan_wait;
        loop {
            let disks = self.session_disks(&sessions)?;
            if !disks.is_empty() || Instant::now() >= deadline {
                return Ok(disks);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        let path = &self.paths.mutual_secret;
        if secret.is_empty() {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("removing {}", path.display()), e)),
            }
            info!("cleared the initiator's mutual CHAP secret");
            return Ok(());
        }
        check_record_value("the mutual CHAP secret", secret.expose())?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        }
        write_private(path, secret.expose())
            .map_err(|e| Error::io(format!("writing the initiator's mutual CHAP secret to {}", path.display()), e))?;
        info!("set the initiator's mutual CHAP secret");
        Ok(())
    }
}

/// iscsiadm's exit codes (iscsiadm(8), EXIT STATUS) the logic tells apart.
pub mod code {
    pub const SESS_NOT_FOUND: i32 = 2;
    pub const TRANS: i32 = 4;
    pub const LOGIN: i32 = 5;
    pub const IDBM: i32 = 6;
    pub const INVAL: i32 = 7;
    pub const TRANS_TIMEOUT: i32 = 8;
    pub const PDU_TIMEOUT: i32 = 11;
    pub const TRANS_NOT_FOUND: i32 = 12;
    pub const ACCESS: i32 = 13;
    pub const SESS_EXISTS: i32 = 15;
    pub const ISCSID_COMM_ERR: i32 = 18;
    pub const FATAL_LOGIN: i32 = 19;
    pub const ISCSID_NOTCONN: i32 = 20;
    pub const NO_OBJS_FOUND: i32 = 21;
    pub const SYSFS_LOOKUP: i32 = 22;
    pub const LOGIN_AUTH_FAILED: i32 = 24;
    pub const BUSY: i32 = 28;
    pub const AGAIN: i32 = 29;

    /// The iscsiadm(8) name of `code`, for messages.
    pub fn name(code: i32) -> Option<&'static str> {
        Some(match code {
            1 => "ISCSI_ERR",
            SESS_NOT_FOUND => "ISCSI_ERR_SESS_NOT_FOUND",
            TRANS => "ISCSI_ERR_TRANS",
            LOGIN => "ISCSI_ERR_LOGIN",
            IDBM => "ISCSI_ERR_IDBM",
            INVAL => "ISCSI_ERR_INVAL",
            TRANS_TIMEOUT => "ISCSI_ERR_TRANS_TIMEOUT",
            PDU_TIMEOUT => "ISCSI_ERR_PDU_TIMEOUT",
            TRANS_NOT_FOUND => "ISCSI_ERR_TRANS_NOT_FOUND",
            ACCESS => "ISCSI_ERR_ACCESS",
            SESS_EXISTS => "ISCSI_ERR_SESS_EXISTS",
            ISCSID_COMM_ERR => "ISCSI_ERR_ISCSID_COMM_ERR",
            FATAL_LOGIN => "ISCSI_ERR_FATAL_LOGIN",
            ISCSID_NOTCONN => "ISCSI_ERR_ISCSID_NOTCONN",
            NO_OBJS_FOUND => "ISCSI_ERR_NO_OBJS_FOUND",
            SYSFS_LOOKUP => "ISCSI_ERR_SYSFS_LOOKUP",
            LOGIN_AUTH_FAILED => "ISCSI_ERR_LOGIN_AUTH_FAILED",
            BUSY => "ISCSI_ERR_BUSY",
            AGAIN => "ISCSI_ERR_AGAIN",
            _ => return None,
        })
    }
}

/// `iscsiadm exited with 24 (ISCSI_ERR_LOGIN_AUTH_FAILED): <its last stderr lines, clipped>`.
fn tool_detail(out: &Output) -> String {
    let status = match (out.code, code::name(out.code)) {
        (-1, _) => "iscsiadm was killed by a signal".to_owned(),
        (c, Some(name)) => format!("iscsiadm exited with {c} ({name})"),
        (c, None) => format!("iscsiadm exited with {c}"),
    };
    let lines: Vec<&str> = out.stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
    match tail.is_empty() {
        true => status,
        false => format!("{status}: {}", clip(&tail)),
    }
}

/// A failed iscsiadm run while doing `what`, classified by its exit code.
fn tool_error(out: &Output, what: &str) -> Error {
    let msg = format!("{what} failed: {}", tool_detail(out));
    match out.code {
        code::TRANS | code::TRANS_TIMEOUT | code::PDU_TIMEOUT => {
            Error::unavailable(format!("{msg}; expected a portal that answers on this address and port"))
        }
        code::ISCSID_NOTCONN | code::ISCSID_COMM_ERR => {
            Error::unavailable(format!("{msg}; expected iscsid to run (systemctl start iscsid)"))
        }
        code::TRANS_NOT_FOUND => {
            Error::precondition(format!("{msg}; expected the iscsi_tcp kernel module to be loaded"))
        }
        code::ACCESS => Error::denied(msg),
        code::INVAL => Error::invalid(msg),
        code::NO_OBJS_FOUND => Error::not_found(msg),
        code::BUSY | code::AGAIN => Error::Aborted(msg),
        code::LOGIN_AUTH_FAILED => Error::denied(msg),
        _ => Error::internal(msg),
    }
}

fn missing_portal(portal: &Portal) -> Error {
    Error::not_found(format!("iSCSI target portal {portal} does not exist; expected one added with AddTargetPortal"))
}

fn target_key(iqn: &str) -> String {
    format!("target {iqn}")
}

/// A checked portal: a host name or IP address (IPv6 with or without brackets) and a port.
#[derive(Debug, Clone)]
struct Portal {
    /// Without brackets.
    address: String,
    port: u16,
    ip: Option<IpAddr>,
}

impl Portal {
    fn new(p: &TargetPortal) -> Result<Portal> {
        let raw = p.address.as_str();
        let bare = raw.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(raw);
        let ip = bare.parse::<IpAddr>().ok();
        if ip.is_none() && !is_host_name(raw) {
            return Err(Error::invalid(format!(
                "iSCSI target portal address {:?} is not valid; expected an IPv4 or IPv6 address or a host name",
                clip(raw)
            )));
        }
        if p.port == 0 {
            return Err(Error::invalid(format!("iSCSI target portal port 0 of {}; expected 1 to 65535", clip(raw))));
        }
        Ok(Portal { address: bare.to_ascii_lowercase(), port: p.port, ip })
    }

    /// The portal as iscsiadm's `-p` takes it.
    fn arg(&self) -> String {
        match self.ip {
            Some(IpAddr::V6(_)) => format!("[{}]:{}", self.address, self.port),
            _ => format!("{}:{}", self.address, self.port),
        }
    }

    /// The turns of the portal's addresses (sorted, so that calls taking several always take them
    /// in the same order): one portal spelled as a host name, an address or another form of the
    /// same IPv6 address is one set of turns, whatever the request's spelling.
    fn turns(&self, turns: &KeyedLock<String>) -> Result<Vec<KeyGuard<String>>> {
        let mut keys: Vec<String> =
            self.ips()?.into_iter().map(|ip| format!("portal {}", SocketAddr::new(ip, self.port))).collect();
        keys.sort();
        keys.dedup();
        Ok(keys.into_iter().map(|k| turns.lock_blocking(k)).collect())
    }

    fn is(&self, other: &TargetPortal) -> bool {
        let a = other.address.trim_start_matches('[').trim_end_matches(']');
        other.port == self.port
            && match (self.ip, a.parse::<IpAddr>()) {
                (Some(x), Ok(y)) => x == y,
                _ => a.eq_ignore_ascii_case(&self.address),
            }
    }

    /// The addresses the portal stands for: node records and connections name IPs.
    fn ips(&self) -> Result<Vec<IpAddr>> {
        if let Some(ip) = self.ip {
            return Ok(vec![ip]);
        }
        use std::net::ToSocketAddrs;
        let addrs = (self.address.as_str(), self.port).to_socket_addrs().map_err(|e| {
            Error::unavailable(format!("cannot resolve the iSCSI target portal address {}: {e}", self.address))
        })?;
        Ok(addrs.map(|a| a.ip()).collect())
    }
}

impl std::fmt::Display for Portal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.arg())
    }
}

/// RFC 1123 host name: dot-separated labels of letters, digits and inner hyphens.
fn is_host_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// An iSCSI name (RFC 3720 §3.2.6.3): `iqn.YYYY-MM.<reversed domain>[:<anything>]`,
/// `eui.<16 hex>` or `naa.<16 or 32 hex>`. Only the characters a normalised name has (plus
/// upper case, which some targets use), so it is safe as a path component and a record value.
fn check_name(name: &str) -> Result<()> {
    let ok = name.len() <= NAME_MAX
        && if let Some(rest) = name.strip_prefix("iqn.") {
            let b = rest.as_bytes();
            b.len() > 8
                && b[..4].iter().all(u8::is_ascii_digit)
                && b[4] == b'-'
                && b[5..7].iter().all(u8::is_ascii_digit)
                && b[7] == b'.'
                && rest.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'-' | b':'))
        } else if let Some(hex) = name.strip_prefix("eui.") {
            hex.len() == 16 && hex.bytes().all(|c| c.is_ascii_hexdigit())
        } else if let Some(hex) = name.strip_prefix("naa.") {
            matches!(hex.len(), 16 | 32) && hex.bytes().all(|c| c.is_ascii_hexdigit())
        } else {
            false
        };
    match ok {
        true => Ok(()),
        false => Err(Error::invalid(format!(
            "iSCSI target name {:?} is not valid; expected iqn.YYYY-MM.<domain>[:<name>], eui.<16 hex digits> \
             or naa.<16 or 32 hex digits> (letters, digits, '.', '-', ':'; at most {NAME_MAX} bytes)",
            clip(name)
        ))),
    }
}

/// A value that becomes one line of a node record (`key = value`). A secret is never quoted.
fn check_record_value(what: &str, value: &str) -> Result<()> {
    // The value itself is never quoted: every value checked here is half of a credential (the
    // CHAP user name as much as the secrets), and errors reach logs and the audit trail.
    let problem = if value.is_empty() {
        "is empty"
    } else if value.len() > AUTH_MAX {
        "is too long"
    } else if value.chars().any(char::is_control) {
        "contains a control character"
    } else if value.trim() != value {
        "starts or ends with a blank"
    } else {
        return Ok(());
    };
    Err(Error::invalid(format!(
        "{what} {problem}; expected 1 to {AUTH_MAX} bytes without control characters or surrounding blanks"
    )))
}

const END: &str = "# END RECORD";
/// The record keys a connect sets; any earlier value of them is dropped.
const OWNED_KEYS: &[&str] = &[
    "node.startup",
    "node.conn[0].startup",
    "node.session.auth.authmethod",
    "node.session.auth.username",
    "node.session.auth.password",
    "node.session.auth.username_in",
    "node.session.auth.password_in",
];

/// `record` with the keys of [`OWNED_KEYS`] replaced by `settings` and manual startup; `None`
/// when it has no end line.
fn with_settings(record: &str, settings: &[(&str, &str)]) -> Option<String> {
    let end = record.lines().position(|l| l.trim() == END)?;
    let mut out = String::with_capacity(record.len() + 256);
    for line in record.lines().take(end) {
        let key = line.split_once('=').map(|(k, _)| k.trim());
        if key.is_some_and(|k| OWNED_KEYS.contains(&k)) {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    for (k, v) in [("node.startup", "manual"), ("node.conn[0].startup", "manual")].iter().chain(settings) {
        out.push_str(&format!("{k} = {v}\n"));
    }
    for line in record.lines().skip(end) {
        out.push_str(line);
        out.push('\n');
    }
    Some(out)
}

/// Writes `contents` to `path` through a new 0600 file renamed over it, so that a reader sees
/// the old or the new file whole and the secret never sits in a file others can read.
fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.csi-proxy-{}-{n}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(contents.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The entries of `dir` whose names start with `prefix`, sorted; none when it cannot be read.
fn children(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> =
        entries.flatten().filter(|e| e.file_name().to_string_lossy().starts_with(prefix)).map(|e| e.path()).collect();
    v.sort();
    v
}

/// A node record as `iscsiadm -m node` and discovery list it: `ADDR:PORT,TPGT IQN`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    ip: IpAddr,
    port: u16,
    tpgt: String,
    iqn: String,
}

impl Node {
    fn arg(&self) -> String {
        match self.ip {
            IpAddr::V6(_) => format!("[{}]:{}", self.ip, self.port),
            IpAddr::V4(_) => format!("{}:{}", self.ip, self.port),
        }
    }
}

fn parse_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let (portal, iqn) = line.trim().split_once(' ')?;
            let (addr, tpgt) = portal.rsplit_once(',')?;
            let (ip, port) = addr.rsplit_once(':')?;
            let ip = ip.trim_start_matches('[').trim_end_matches(']').parse().ok()?;
            Some(Node { ip, port: port.parse().ok()?, tpgt: tpgt.to_owned(), iqn: iqn.trim().to_owned() })
        })
        .collect()
}

/// `iscsiadm -m discoverydb`: `ADDR:PORT via sendtargets` lines (IPv6 without brackets).
fn parse_portals(text: &str) -> Vec<TargetPortal> {
    text.lines()
        .filter_map(|line| {
            let addr = line.trim().strip_suffix(" via sendtargets")?;
            let (address, port) = addr.rsplit_once(':')?;
            let address = address.trim_start_matches('[').trim_end_matches(']');
            Some(TargetPortal { address: address.to_owned(), port: port.parse().ok()? })
        })
        .collect()
}

#[cfg(test)]
mod tests;
