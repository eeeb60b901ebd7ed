//! The command line: `csi-proxyctl [options] <command> [arguments]`. Options may come before or
//! after the command, as `-name`, `--name`, `-name value` or `-name=value` (the daemon's style);
//! `--` ends them.

use csi_proxy_client::Api;
use std::time::Duration;

/// The usage text, with the `service` command described for this OS.
pub fn usage_text() -> String {
    USAGE_TEXT.replace("{service}", SERVICE_HELP)
}

#[cfg(windows)]
const SERVICE_HELP: &str = "A Windows service's display name, start type and status.";
#[cfg(not(windows))]
const SERVICE_HELP: &str = "A systemd unit's description, start type and status.";

/// The environment variable naming the socket directory when -socket-dir is not given.
#[cfg_attr(not(unix), allow(dead_code))]
pub const SOCKET_DIR_ENV: &str = "CSI_PROXY_SOCKET_DIR";

/// The socket directory: the flag's, else the environment's (when set and not empty).
#[cfg_attr(not(unix), allow(dead_code))]
pub fn socket_dir(flag: Option<std::path::PathBuf>, env: Option<std::ffi::OsString>) -> Option<std::path::PathBuf> {
    flag.or_else(|| env.filter(|e| !e.is_empty()).map(std::path::PathBuf::from))
}

const USAGE_TEXT: &str = "\
csi-proxyctl: look at and call a running csi-proxy, as a CSI driver does.

Usage: csi-proxyctl [options] <command> [arguments]

Commands (read-only):
  apis                    Which of the 23 APIs answer, and their health (SERVING, NOT_SERVING;
                          'answers' for a daemon without the health service, e.g. upstream's).
  disks                   Disks: number, size, location (adapter/bus/target/LUN), page83 ID,
                          serial number, online.
  volumes                 Volumes of every disk: ID, disk, formatted, size, used.
                          (No API call lists a volume's mount targets or the SMB mappings; for a
                          path's volume use: call volume/v1 GetVolumeIDFromTargetPath.)
  iscsi-portals           The iSCSI target portals the initiator knows.
  bios-serial             The BIOS serial number.
  service <name>          {service}
  methods [<group>/<version>]
                          Every method of every API (or of one), read-only or mutating (-o wide:
                          and its request and response messages).
  version                 This program's version and the daemon's (which every answer of the
                          daemon names in its csi-proxy-version header).
  whoami                  Who the daemon takes this program to be, as its audit trail and
                          -authorization-policy see it (host, a pod's container, or unknown and
                          why), from the csi-proxy-caller header of its answers.

Node check (changes the host: run it on a node you may test on, as root on Linux):
  conformance             Runs every group's calls and each block driver's node flow (azuredisk,
                          GCE PD, EBS, vSphere) against the daemon, on scratch disks it makes
                          (Linux: loop devices over sparse files under -scratch-dir) and in a
                          scratch directory under -kubelet-path. Prints check, step, result
                          (ok, FAILED: <code: message>, skipped: <why>, needs Windows: <API>) and
                          time, then 'N passed, M failed, K skipped'. It touches no disk it did
                          not make, and removes everything it made when done, on failure, and on
                          Ctrl-C or SIGTERM. Exit status 0 only if no step failed. Options:
    -kubelet-path <dir>   The daemon's -kubelet-path (default /var/lib/kubelet, on Windows
                          C:\\var\\lib\\kubelet); the scratch directory is made inside it.
    -scratch-dir <dir>    Where the disks' backing files go (default the temp directory).
    -list                 Only print every check it can run: name, OS (linux, windows or
                          both) and what a pass settles (with -json: an array of {\"name\",
                          \"os\", \"settles\"}). Runs nothing and contacts no daemon.
    -cleanup              Only remove what earlier runs killed outright left (each run writes
                          down what it is about to make in -kubelet-path's
                          .csi-proxyctl-conformance directory; every run does this first). Only
                          what a marker names is removed, and nothing of a run still running.
    -audit-log <file>     The daemon's -audit-log file: on Windows the audit-file-dacl check
                          reads its DACL (SYSTEM and Administrators only), and caller-identity
                          reads this run's records (its image and user). Without it: skipped.
                          The -timeout applies to each step.
    -smb-share <\\\\host\\share>
                          A test share (also //host/share) to map, write through and remove
                          (smb v1), with -smb-user <name> and -smb-password-file <file>; the
                          file '-' is standard input (not a terminal). A second mapping with
                          a wrong password must be refused. Without it: skipped.
    -iscsi-portal <host[:port]>, -iscsi-target <iqn>
                          A test target to discover, log in to, list the disks of and log out
                          of (iscsi v1alpha2); port 3260 by default. CHAP: -iscsi-chap-user
                          <name> and -iscsi-chap-secret-file <file> (or '-'). A portal that
                          was there before the run is kept. Without them: skipped.
                          Passwords and secrets come only from files or standard input (never
                          the command line or the environment), at most 1024 bytes, one
                          trailing newline dropped; they appear in no output.

Any call:
  call <group>/<version> <Method> ['<json request>']
                          Calls any method of any API with the request as JSON (field names as
                          in the .proto or in lowerCamelCase; default {}), and prints the answer
                          as JSON. Example:
                            csi-proxyctl call filesystem/v1 PathExists '{\"path\": \"C:\\\\var\"}'
                          The request may also be '-' (read from standard input) or '@FILE'
                          (read from FILE): use one of these for a request with a password or
                          CHAP secret, which on the command line anyone could read with ps.
                          A mutating method (anything but Get*, List*, Is*, PathExists,
                          DiskStats, VolumeStats) asks for confirmation on the terminal,
                          showing the request with its secrets withheld; without a terminal
                          (or with the request on standard input) it is refused unless --yes
                          is given. The -timeout starts after the confirmation.
                          With -dry-run, a mutating method is sent as a dry run: the daemon
                          answers what it would do (the plan, printed as JSON) and does
                          nothing, or the error the call would give (a refusal by an interlock,
                          say). Nothing to confirm, then. csi-proxyctl first checks that the
                          daemon says it understands dry runs (upstream's would do the work),
                          and refuses to send it otherwise. A read-only method runs as asked.

Options:
  -o, -output <format>    table (the default), wide (tables with more columns: apis adds the
                          error of an absent API, disks and volumes their sizes in bytes,
                          methods the messages) or json. 'call' always prints JSON.
  -json                   The same as -o json.
  -yes, -y                Run mutating calls without asking.
  -dry-run                'call' only: ask the daemon what a mutating call would do, doing
                          nothing (see 'call').
  -timeout <duration>     Limit on connecting and the answers (default 60s), as Go writes a
                          duration: 500ms, 90s, 1m30s, 1h, 1.5h (units ns, us, ms, s, m, h).
  -socket-dir <dir>       Directory of the daemon's sockets on Linux (its -socket-dir; default
                          the environment variable CSI_PROXY_SOCKET_DIR, else /run/csi-proxy).
                          On Windows the named pipes \\\\.\\pipe\\csi-proxy-<group>-<version> are used.
  -h, -help               This text.
  -version                This program's version (the 'version' command adds the daemon's).

Output that cannot be written because its reader is gone (csi-proxyctl methods | head -1) is
dropped silently; the exit status is still the command's.

Exit status: 0 done; 1 a call or the connection failed (the gRPC code and message are shown), or
a listing could not read some of its rows (each named in a warning); 2 a usage error (an unknown
option, command, API or method, a request that is not the method's JSON, a bad value), or a
mutating call that was not confirmed.
";

#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    Apis,
    Disks,
    Volumes,
    IscsiPortals,
    BiosSerial,
    Service(String),
    Methods(Option<Api>),
    Version,
    Whoami,
    Call {
        api: Api,
        method: String,
        request: String,
    },
    Conformance {
        kubelet_path: std::path::PathBuf,
        scratch_dir: std::path::PathBuf,
        /// Boxed: the largest part, which would make every command as large.
        remote: Box<Remote>,
        /// The daemon's -audit-log file, whose DACL the audit-file-dacl check reads (Windows).
        audit_log: Option<std::path::PathBuf>,
        /// `-cleanup`: only remove what runs killed outright left (by their markers).
        cleanup: bool,
        /// `-list`: only print the checks it can run.
        list: bool,
    },
}

/// Where a password or secret is read from: a file, or standard input (`-`). There is no flag
/// that takes one on the command line, and none is read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    File(std::path::PathBuf),
    Stdin,
}

impl SecretSource {
    fn new(value: String) -> SecretSource {
        if value == "-" {
            SecretSource::Stdin
        } else {
            SecretSource::File(value.into())
        }
    }
}

/// The conformance run's test share and target, when given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Remote {
    pub smb: Option<SmbArgs>,
    pub iscsi: Option<IscsiArgs>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmbArgs {
    /// `\\host\share[\path]`, backslashes only.
    pub share: String,
    pub user: String,
    pub password: SecretSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IscsiArgs {
    pub host: String,
    pub port: u32,
    pub iqn: String,
    /// One-way CHAP: the user name and where the secret is.
    pub chap: Option<(String, SecretSource)>,
}

/// Most a password or secret file may hold.
pub const MAX_SECRET: u64 = 1024;

/// A password or secret: shown by nothing (its Debug says it is withheld).
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Another secret: this one with `suffix` (a password that must be refused).
    pub fn with_suffix(&self, suffix: &str) -> Secret {
        Secret(format!("{}{suffix}", self.0))
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<withheld>)")
    }
}

/// Reads the secret `flag` names from `source` (standard input only when it is no terminal,
/// which would echo it).
pub fn read_secret(flag: &str, source: &SecretSource) -> Result<Secret, String> {
    use std::io::IsTerminal;
    match source {
        SecretSource::Stdin => {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                return Err(format!(
                    "-{flag} -: standard input is a terminal, which would show what is typed; pipe it in or give a file"
                ));
            }
            secret_from(stdin.lock(), flag, "standard input")
        }
        SecretSource::File(path) => {
            let name = path.display().to_string();
            let f = std::fs::File::open(path).map_err(|e| format!("-{flag}: cannot open {name:?}: {e}"))?;
            secret_from(f, flag, &name)
        }
    }
}

/// At most [`MAX_SECRET`] bytes of UTF-8 from `from`, one trailing newline dropped. No error
/// quotes what was read.
pub fn secret_from(from: impl std::io::Read, flag: &str, name: &str) -> Result<Secret, String> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    from.take(MAX_SECRET + 1).read_to_end(&mut bytes).map_err(|e| format!("-{flag}: reading {name:?}: {e}"))?;
    if bytes.len() as u64 > MAX_SECRET {
        return Err(format!(
            "-{flag}: {name:?} holds more than {MAX_SECRET} bytes, the limit for a password or secret"
        ));
    }
    let mut text = String::from_utf8(bytes).map_err(|_| format!("-{flag}: {name:?} is not valid UTF-8"))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err(format!("-{flag}: {name:?} is empty"));
    }
    Ok(Secret(text))
}

/// `\\host\share[\path]` or `//host/share[/path]`, as `\\host\share[\path]`.
fn smb_share(text: &str) -> Result<String, String> {
    let bad = || format!("-smb-share {:?} is not \\\\host\\share or //host/share", bounded(text));
    let rest = text.strip_prefix("\\\\").or_else(|| text.strip_prefix("//")).ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(['\\', '/']).filter(|p| !p.is_empty()).collect();
    if parts.len() < 2 || rest.starts_with(['\\', '/']) {
        return Err(bad());
    }
    Ok(format!("\\\\{}", parts.join("\\")))
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` (port 3260 when not given).
fn iscsi_portal(text: &str) -> Result<(String, u32), String> {
    let bad = || format!("-iscsi-portal {:?} is not host[:port] (an IPv6 address in brackets)", bounded(text));
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match text.split_once(':') {
            Some((h, p)) if !p.contains(':') => (h, Some(p)),
            Some(_) => (text, None), // an IPv6 address without a port
            None => (text, None),
        }
    };
    if host.is_empty() || host.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad());
    }
    let port = match port {
        None => 3260,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => u32::from(n),
            _ => return Err(bad()),
        },
    };
    Ok((host.to_owned(), port))
}

/// How listings are printed (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Table,
    Wide,
    Json,
}

#[derive(Debug)]
pub struct Options {
    pub command: Command,
    pub output: Output,
    pub yes: bool,
    /// `-dry-run`: a mutating `call` is sent as a dry run.
    pub dry_run: bool,
    pub timeout: Duration,
    #[cfg_attr(not(unix), allow(dead_code))]
    pub socket_dir: Option<std::path::PathBuf>,
}

#[derive(Debug)]
pub enum Parsed {
    Run(Box<Options>),
    Help,
    Version,
}

pub fn parse(argv: &[String]) -> Result<Parsed, String> {
    let mut output = Output::Table;
    let mut yes = false;
    let mut dry_run = false;
    let mut timeout = Duration::from_secs(60);
    let mut socket_dir = None;
    let mut kubelet_path = None;
    let mut scratch_dir = None;
    let mut audit_log = None;
    let mut cleanup = None;
    let mut list = None;
    // The conformance run's test share and target.
    let (mut smb_share_, mut smb_user, mut smb_password) = (None, None, None);
    let (mut portal, mut target, mut chap_user, mut chap_secret) = (None, None, None, None);
    let mut words = Vec::new();
    let mut it = argv.iter();
    let mut flags_done = false;
    while let Some(arg) = it.next() {
        if flags_done || !arg.starts_with('-') || arg == "-" {
            words.push(arg.clone());
            continue;
        }
        if arg == "--" {
            flags_done = true;
            continue;
        }
        let body = arg.trim_start_matches('-');
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let mut value = |hint: &str| {
            inline
                .clone()
                .or_else(|| it.next().cloned())
                .ok_or_else(|| format!("-{name} needs a value: -{name} <{hint}>"))
        };
        match name {
            "h" | "help" => return Ok(Parsed::Help),
            "version" => return Ok(Parsed::Version),
            "json" => {
                if bool_flag(name, inline.as_deref())? {
                    output = Output::Json;
                } else if output == Output::Json {
                    output = Output::Table;
                }
            }
            "o" | "output" => {
                output = match value("table|wide|json")?.as_str() {
                    "table" => Output::Table,
                    "wide" => Output::Wide,
                    "json" => Output::Json,
                    other => {
                        return Err(format!(
                            "invalid value {:?} for -{name}: expected table, wide or json",
                            bounded(other)
                        ))
                    }
                }
            }
            "y" | "yes" => yes = bool_flag(name, inline.as_deref())?,
            "dry-run" => dry_run = bool_flag(name, inline.as_deref())?,
            "timeout" => timeout = duration(&value("duration")?)?,
            "socket-dir" => socket_dir = Some(std::path::PathBuf::from(value("dir")?)),
            "kubelet-path" => kubelet_path = Some(std::path::PathBuf::from(value("dir")?)),
            "scratch-dir" => scratch_dir = Some(std::path::PathBuf::from(value("dir")?)),
            "audit-log" => audit_log = Some(std::path::PathBuf::from(value("file")?)),
            "cleanup" => cleanup = Some(bool_flag(name, inline.as_deref())?),
            "list" => list = Some(bool_flag(name, inline.as_deref())?),
            "smb-share" => smb_share_ = Some(smb_share(&value("\\\\host\\share")?)?),
            "smb-user" => smb_user = Some(value("name")?),
            "smb-password-file" => smb_password = Some(SecretSource::new(value("file, or - for standard input")?)),
            "iscsi-portal" => portal = Some(iscsi_portal(&value("host[:port]")?)?),
            "iscsi-target" => target = Some(value("iqn")?),
            "iscsi-chap-user" => chap_user = Some(value("name")?),
            "iscsi-chap-secret-file" => chap_secret = Some(SecretSource::new(value("file, or - for standard input")?)),
            _ => return Err(format!("unknown option {:?}", bounded(arg))),
        }
    }
    let remote = remote(smb_share_, smb_user, smb_password, portal, target, chap_user, chap_secret)?;
    let mut words = words.into_iter();
    let Some(command) = words.next() else {
        return Err("no command given".into());
    };
    let command = match command.as_str() {
        "apis" | "discover" => Command::Apis,
        "disks" => Command::Disks,
        "volumes" => Command::Volumes,
        "iscsi-portals" => Command::IscsiPortals,
        "bios-serial" => Command::BiosSerial,
        "version" => Command::Version,
        "whoami" => Command::Whoami,
        "service" => Command::Service(words.next().ok_or("service needs the service's name: service <name>")?),
        "methods" => Command::Methods(
            words.next().map(|a| csi_proxy_client::parse_api(&a)).transpose().map_err(|e| e.to_string())?,
        ),
        "call" => {
            let api = words.next().ok_or("call needs <group>/<version> <Method> ['<json>']")?;
            let api = csi_proxy_client::parse_api(&api).map_err(|e| e.to_string())?;
            let method =
                words.next().ok_or("call needs the method's name after the API, e.g. call disk/v1 ListDiskIDs")?;
            let request = words.next().unwrap_or_else(|| "{}".into());
            Command::Call { api, method, request }
        }
        "conformance" => Command::Conformance {
            kubelet_path: kubelet_path.take().unwrap_or_else(|| DEFAULT_KUBELET_PATH.into()),
            scratch_dir: scratch_dir.take().unwrap_or_else(std::env::temp_dir),
            remote: Box::new(remote.clone()),
            audit_log: audit_log.take(),
            cleanup: cleanup.take().unwrap_or(false),
            list: list.take().unwrap_or(false),
        },
        other => return Err(format!("unknown command {:?}", bounded(other))),
    };
    if kubelet_path.is_some() || scratch_dir.is_some() || audit_log.is_some() || cleanup.is_some() || list.is_some() {
        return Err(
            "-kubelet-path, -scratch-dir, -audit-log, -cleanup and -list are options of the conformance command".into(),
        );
    }
    if let Command::Conformance { cleanup: true, list: true, .. } = &command {
        return Err("-list only prints the checks: it runs nothing, and so no -cleanup".into());
    }
    if remote != Remote::default() && !matches!(command, Command::Conformance { .. }) {
        return Err("-smb-* and -iscsi-* are options of the conformance command".into());
    }
    if let Command::Conformance { kubelet_path, .. } = &command {
        check_kubelet_path(kubelet_path)?;
    }
    if let Some(extra) = words.next() {
        return Err(format!("unexpected argument {:?}", bounded(&extra)));
    }
    if dry_run && !matches!(command, Command::Call { .. }) {
        return Err("-dry-run is an option of the call command".into());
    }
    Ok(Parsed::Run(Box::new(Options { command, output, yes, dry_run, timeout, socket_dir })))
}

/// The test share's and target's flags, checked together.
fn remote(
    share: Option<String>,
    user: Option<String>,
    password: Option<SecretSource>,
    portal: Option<(String, u32)>,
    target: Option<String>,
    chap_user: Option<String>,
    chap_secret: Option<SecretSource>,
) -> Result<Remote, String> {
    let smb = match (share, user, password) {
        (None, None, None) => None,
        (Some(share), Some(user), Some(password)) if !user.is_empty() => Some(SmbArgs { share, user, password }),
        (Some(_), _, _) => return Err("-smb-share needs -smb-user <name> and -smb-password-file <file or ->".into()),
        _ => return Err("-smb-user and -smb-password-file go with -smb-share".into()),
    };
    let chap = match (chap_user, chap_secret) {
        (None, None) => None,
        (Some(u), Some(s)) if !u.is_empty() => Some((u, s)),
        _ => return Err("CHAP needs both -iscsi-chap-user <name> and -iscsi-chap-secret-file <file or ->".into()),
    };
    let iscsi = match (portal, target) {
        (None, None) if chap.is_none() => None,
        (Some((host, port)), Some(iqn)) if !iqn.is_empty() => Some(IscsiArgs { host, port, iqn, chap }),
        _ => return Err("the iSCSI check needs both -iscsi-portal <host[:port]> and -iscsi-target <iqn>".into()),
    };
    let both_stdin = matches!(&smb, Some(s) if s.password == SecretSource::Stdin)
        && matches!(&iscsi, Some(IscsiArgs { chap: Some((_, SecretSource::Stdin)), .. }));
    if both_stdin {
        return Err("-smb-password-file and -iscsi-chap-secret-file can't both be standard input (-)".into());
    }
    Ok(Remote { smb, iscsi })
}

/// The daemon's default `-kubelet-path`.
#[cfg(windows)]
const DEFAULT_KUBELET_PATH: &str = r"C:\var\lib\kubelet";
#[cfg(not(windows))]
const DEFAULT_KUBELET_PATH: &str = "/var/lib/kubelet";

/// The flows spell the kubelet's paths from this root as the kubelet does, which needs an
/// absolute path (on Windows one with a drive: `C:\var\lib\kubelet`).
fn check_kubelet_path(path: &std::path::Path) -> Result<(), String> {
    let text = path.to_str().ok_or("-kubelet-path is not valid UTF-8")?;
    let ok = if cfg!(windows) {
        let b = text.as_bytes();
        b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && b[2] == b'\\'
    } else {
        text.starts_with('/')
    };
    if !ok {
        let want = if cfg!(windows) { "a path with a drive, as C:\\var\\lib\\kubelet" } else { "an absolute path" };
        return Err(format!("-kubelet-path {:?} is not {want}", bounded(text)));
    }
    Ok(())
}

fn bounded(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A boolean option: alone it is true; `-name=VALUE` takes the daemon's spellings (Go's
/// `strconv.ParseBool`: [`csi_proxy_client::go_bool`]).
fn bool_flag(name: &str, value: Option<&str>) -> Result<bool, String> {
    match value {
        None => Ok(true),
        Some(v) => csi_proxy_client::go_bool::parse(v).ok_or_else(|| {
            format!("invalid value {:?} for -{name}: expected true or false (or 1, t, T, TRUE, True, 0, f, F, FALSE, False)", bounded(v))
        }),
    }
}

/// A timeout as Go writes a duration (as the daemon's flags take it; see
/// [`csi_proxy_client::go_duration`]), and more than zero.
fn duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &dyn std::fmt::Display| {
        format!("invalid duration {:?}: {why}; expected e.g. 500ms, 90s, 1m30s or 1h", bounded(text))
    };
    match csi_proxy_client::go_duration::parse(text) {
        Err(why) => Err(bad(&why)),
        Ok(Duration::ZERO) => Err(bad(&"a timeout must be more than zero")),
        Ok(d) => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, String> {
        match parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())? {
            Parsed::Run(o) => Ok(*o),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_go_anywhere_in_either_spelling() {
        let o =
            run(&["call", "disk/v1", "GetDiskStats", r#"{"disk_number":1}"#, "--json", "-timeout=2m", "-y"]).unwrap();
        assert!(o.output == Output::Json && o.yes);
        assert_eq!(o.timeout, Duration::from_secs(120));
        let Command::Call { api, method, request } = o.command else { panic!() };
        assert_eq!(
            (api.service_name(), method.as_str(), request.as_str()),
            ("v1.Disk".into(), "GetDiskStats", r#"{"disk_number":1}"#)
        );
        let o = run(&["-socket-dir", "/tmp/x", "disks"]).unwrap();
        assert_eq!(o.socket_dir.as_deref(), Some(std::path::Path::new("/tmp/x")));
        assert_eq!(o.command, Command::Disks);
    }

    #[test]
    fn mistakes_are_named() {
        assert!(run(&["disks", "extra"]).unwrap_err().contains("\"extra\""));
        assert!(run(&["-frob", "disks"]).unwrap_err().contains("-frob"));
        assert!(run(&["call", "disk/v9", "X"]).unwrap_err().contains("disk/v9"));
        assert!(run(&["-timeout", "soon", "disks"]).unwrap_err().contains("soon"));
        assert!(run(&["service"]).unwrap_err().contains("name"));
        assert!(run(&[]).unwrap_err().contains("no command"));
        assert!(run(&["-kubelet-path", "/k", "disks"]).unwrap_err().contains("conformance"));
        assert!(run(&["-kubelet-path", "kubelet", "conformance"]).unwrap_err().contains("\"kubelet\""));
    }

    #[test]
    fn go_durations() {
        let d = |s: &str| duration(s);
        for (text, want) in [
            ("1h", Duration::from_secs(3600)),
            ("90s", Duration::from_secs(90)),
            ("1m30s", Duration::from_secs(90)),
            ("500ms", Duration::from_millis(500)),
            ("1.5h", Duration::from_secs(5400)),
            ("2h45m", Duration::from_secs(9900)),
            (".5s", Duration::from_millis(500)),
            ("1.s", Duration::from_secs(1)),
            ("10us", Duration::from_micros(10)),
            ("10µs", Duration::from_micros(10)),
            ("7ns", Duration::from_nanos(7)),
            ("1h0m0s", Duration::from_secs(3600)),
            ("0.000000001s", Duration::from_nanos(1)),
            ("2562047h", Duration::from_secs(2_562_047 * 3600)),
        ] {
            assert_eq!(d(text), Ok(want), "{text}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("60", "unit is missing"),
            ("1h30", "unit is missing"),
            ("5x", "unknown unit"),
            ("1d", "unknown unit"),
            ("-1h", "malformed"),
            ("+1h", "malformed"),
            (".s", "malformed"),
            ("1.2.3s", "malformed"),
            ("1 h", "unknown unit"),
            ("0", "more than zero"),
            ("0s", "more than zero"),
            ("2562048h", "too large"),
            ("99999999999999999999999999999999999999999h", "too large"),
        ] {
            let e = d(bad).unwrap_err();
            assert!(e.contains(why) && e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn output_formats_and_the_json_alias() {
        assert_eq!(run(&["disks"]).unwrap().output, Output::Table);
        assert_eq!(run(&["-o", "wide", "disks"]).unwrap().output, Output::Wide);
        assert_eq!(run(&["disks", "-output=json"]).unwrap().output, Output::Json);
        assert_eq!(run(&["disks", "-json"]).unwrap().output, Output::Json);
        assert_eq!(run(&["-json", "-json=false", "disks"]).unwrap().output, Output::Table);
        assert_eq!(run(&["-o", "wide", "-json=false", "disks"]).unwrap().output, Output::Wide);
        let e = run(&["-o", "yaml", "disks"]).unwrap_err();
        assert!(e.contains("\"yaml\"") && e.contains("table, wide or json"), "{e}");
        assert!(run(&["disks", "-o"]).unwrap_err().contains("-o needs a value"));
        assert_eq!(run(&["version"]).unwrap().command, Command::Version);
    }

    /// The daemon's boolean spellings (Go's strconv.ParseBool), and no others: `-yes=T` was
    /// refused here while the daemon took `-require-privacy=T`.
    #[test]
    fn boolean_options_take_the_daemons_spellings() {
        for t in ["1", "t", "T", "true", "TRUE", "True"] {
            assert!(run(&[&format!("-yes={t}"), "disks"]).unwrap().yes, "{t}");
        }
        for f in ["0", "f", "F", "false", "FALSE", "False"] {
            assert!(!run(&["-yes", &format!("-yes={f}"), "disks"]).unwrap().yes, "{f}");
        }
        let e = run(&["-yes=yes", "disks"]).unwrap_err();
        assert!(e.contains("invalid value \"yes\" for -yes"), "{e}");
    }

    #[test]
    fn the_socket_dir_flag_wins_over_the_environment() {
        let p = |s: &str| Some(std::path::PathBuf::from(s));
        assert_eq!(socket_dir(p("/flag"), Some("/env".into())), p("/flag"));
        assert_eq!(socket_dir(None, Some("/env".into())), p("/env"));
        assert_eq!(socket_dir(None, Some("".into())), None);
        assert_eq!(socket_dir(None, None), None);
    }

    #[test]
    fn the_service_command_is_described_for_this_os() {
        let help = usage_text();
        let line = help.lines().find(|l| l.trim_start().starts_with("service <name>")).unwrap();
        assert_eq!(line.contains("Windows"), cfg!(windows), "{line}");
        assert_eq!(line.contains("systemd"), !cfg!(windows), "{line}");
        assert!(!help.contains("{service}"));
    }

    #[cfg(unix)]
    #[test]
    fn conformance_takes_its_directories() {
        let o = run(&["conformance", "-kubelet-path=/k", "-scratch-dir", "/s", "-json"]).unwrap();
        assert_eq!(o.output, Output::Json);
        let (kubelet_path, scratch_dir, remote) = ("/k".into(), "/s".into(), Box::default());
        assert_eq!(
            o.command,
            Command::Conformance { kubelet_path, scratch_dir, remote, audit_log: None, cleanup: false, list: false }
        );
        let o = run(&["conformance", "-cleanup", "-kubelet-path=/k"]).unwrap();
        assert!(matches!(o.command, Command::Conformance { cleanup: true, .. }), "{:?}", o.command);
        let o = run(&["-cleanup=false", "conformance"]).unwrap();
        assert!(matches!(o.command, Command::Conformance { cleanup: false, .. }), "{:?}", o.command);
        assert!(run(&["disks", "-cleanup"]).unwrap_err().contains("conformance"));
        assert!(run(&["conformance", "-cleanup=maybe"]).unwrap_err().contains("\"maybe\""));
        let o = run(&["conformance", "-list", "-json"]).unwrap();
        assert!(matches!(o.command, Command::Conformance { list: true, cleanup: false, .. }), "{:?}", o.command);
        assert_eq!(o.output, Output::Json);
        let o = run(&["-list=false", "conformance"]).unwrap();
        assert!(matches!(o.command, Command::Conformance { list: false, .. }), "{:?}", o.command);
        assert!(run(&["disks", "-list"]).unwrap_err().contains("conformance"));
        assert!(run(&["conformance", "-list=maybe"]).unwrap_err().contains("\"maybe\""));
        assert!(run(&["conformance", "-list", "-cleanup"]).unwrap_err().contains("-cleanup"));
        let o = run(&["conformance", "-kubelet-path=/k", "-audit-log", "/var/log/audit.log"]).unwrap();
        assert!(
            matches!(o.command, Command::Conformance { audit_log: Some(a), .. } if a == std::path::Path::new("/var/log/audit.log"))
        );
        assert!(run(&["disks", "-audit-log", "/a"]).unwrap_err().contains("conformance"));
    }

    fn conformance_remote(args: &[&str]) -> Result<Remote, String> {
        let mut all = vec!["conformance", "-kubelet-path", if cfg!(windows) { r"C:\k" } else { "/k" }];
        all.extend_from_slice(args);
        match run(&all)?.command {
            Command::Conformance { remote, .. } => Ok(*remote),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_test_share_and_target_are_flags() {
        let r = conformance_remote(&["-smb-share", "//srv/data/sub", "-smb-user", "u", "-smb-password-file", "/pw"])
            .unwrap();
        let smb = r.smb.unwrap();
        assert_eq!(smb.share, r"\\srv\data\sub");
        assert_eq!((smb.user.as_str(), &smb.password), ("u", &SecretSource::File("/pw".into())));
        assert!(r.iscsi.is_none());
        let r = conformance_remote(&["-smb-share", r"\\srv\data", "-smb-user=u", "-smb-password-file", "-"]).unwrap();
        assert_eq!(
            r.smb.as_ref().map(|s| (s.share.as_str(), &s.password)),
            Some((r"\\srv\data", &SecretSource::Stdin))
        );

        let r = conformance_remote(&["-iscsi-portal", "10.0.0.5", "-iscsi-target", "iqn.2003-01.org:t1"]).unwrap();
        let i = r.iscsi.unwrap();
        assert_eq!((i.host.as_str(), i.port, i.iqn.as_str(), &i.chap), ("10.0.0.5", 3260, "iqn.2003-01.org:t1", &None));
        let r = conformance_remote(&[
            "-iscsi-portal=[fd00::5]:3261",
            "-iscsi-target=iqn.x",
            "-iscsi-chap-user",
            "alice",
            "-iscsi-chap-secret-file",
            "/s",
        ])
        .unwrap();
        let i = r.iscsi.unwrap();
        assert_eq!((i.host.as_str(), i.port), ("fd00::5", 3261));
        assert_eq!(i.chap, Some(("alice".into(), SecretSource::File("/s".into()))));
        assert_eq!(iscsi_portal("fd00::5").unwrap(), ("fd00::5".into(), 3260));
        assert_eq!(iscsi_portal("host:3262").unwrap(), ("host".into(), 3262));
    }

    #[test]
    fn test_share_and_target_mistakes_are_named() {
        let e = |args: &[&str]| conformance_remote(args).unwrap_err();
        assert!(e(&["-smb-share", "srv/data", "-smb-user", "u", "-smb-password-file", "f"]).contains("srv/data"));
        assert!(e(&["-smb-share", "//srv", "-smb-user", "u", "-smb-password-file", "f"]).contains("//srv"));
        assert!(e(&["-smb-share", "//srv/d", "-smb-password-file", "f"]).contains("-smb-user"));
        assert!(e(&["-smb-share", "//srv/d", "-smb-user", "u"]).contains("-smb-password-file"));
        assert!(e(&["-smb-user", "u"]).contains("-smb-share"));
        assert!(e(&["-iscsi-portal", "h"]).contains("-iscsi-target"));
        assert!(e(&["-iscsi-target", "iqn.x"]).contains("-iscsi-portal"));
        assert!(e(&["-iscsi-portal", "h:0", "-iscsi-target", "iqn.x"]).contains("h:0"));
        assert!(e(&["-iscsi-portal", "h:99999", "-iscsi-target", "iqn.x"]).contains("h:99999"));
        assert!(e(&["-iscsi-portal", "h", "-iscsi-target", "iqn.x", "-iscsi-chap-user", "a"]).contains("secret-file"));
        let both = e(&[
            "-smb-share=//s/d",
            "-smb-user=u",
            "-smb-password-file=-",
            "-iscsi-portal=h",
            "-iscsi-target=iqn.x",
            "-iscsi-chap-user=a",
            "-iscsi-chap-secret-file=-",
        ]);
        assert!(both.contains("standard input"), "{both}");
        // Only the conformance command takes them.
        assert!(run(&["disks", "-iscsi-portal", "h", "-iscsi-target", "iqn.x"]).unwrap_err().contains("conformance"));
    }

    /// No flag takes a password or secret itself: each spelling one might try is unknown.
    #[test]
    fn no_password_or_secret_on_the_command_line() {
        for flag in ["-smb-password", "-password", "-iscsi-chap-secret", "-chap-secret", "-secret"] {
            let e = conformance_remote(&[flag, "hunter2"]).unwrap_err();
            assert!(e.starts_with("unknown option") && e.contains(flag), "{flag}: {e}");
            assert!(!e.contains("hunter2"), "{e}");
            let e = conformance_remote(&[&format!("{flag}=hunter2")]).unwrap_err();
            assert!(e.starts_with("unknown option"), "{flag}: {e}");
        }
    }

    #[test]
    fn secrets_are_bounded_and_never_quoted() {
        let s = secret_from(&b"Pw,with=Comma 7\n"[..], "smb-password-file", "/pw").unwrap();
        assert_eq!(s.expose(), "Pw,with=Comma 7");
        assert_eq!(format!("{s:?}"), "Secret(<withheld>)");
        assert_eq!(secret_from(&b"a b \r\n"[..], "f", "x").unwrap().expose(), "a b ");
        assert_eq!(secret_from(&b"x\n\n"[..], "f", "x").unwrap().expose(), "x\n");
        let exact = "k".repeat(MAX_SECRET as usize);
        assert_eq!(secret_from(exact.as_bytes(), "f", "x").unwrap().expose(), exact);

        let big = format!("{}SECRETTAIL", "s".repeat(MAX_SECRET as usize));
        let e = secret_from(big.as_bytes(), "smb-password-file", "/etc/pw").unwrap_err();
        assert!(e.contains("-smb-password-file") && e.contains("\"/etc/pw\"") && e.contains("1024 bytes"), "{e}");
        assert!(!e.contains("SECRETTAIL") && !e.contains("sss"), "{e}");
        let e = secret_from(&b"\n"[..], "iscsi-chap-secret-file", "/s").unwrap_err();
        assert!(e.contains("/s") && e.contains("empty"), "{e}");
        let e = secret_from(&b"pw\xff"[..], "f", "/s").unwrap_err();
        assert!(e.contains("UTF-8") && !e.contains("pw"), "{e}");

        // From a real file, and a file over the bound.
        let dir = std::env::temp_dir().join(format!("csi-proxyctl-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (ok, over) = (dir.join("ok"), dir.join("over"));
        std::fs::write(&ok, "filePw-1\n").unwrap();
        std::fs::write(&over, "x".repeat(MAX_SECRET as usize + 1)).unwrap();
        assert_eq!(read_secret("smb-password-file", &SecretSource::File(ok)).unwrap().expose(), "filePw-1");
        let e = read_secret("iscsi-chap-secret-file", &SecretSource::File(over.clone())).unwrap_err();
        // The name is quoted as Rust quotes a string (Windows' backslashes doubled).
        assert!(e.contains(&format!("{:?}", over.display().to_string())) && e.contains("1024"), "{e}");
        let e = read_secret("smb-password-file", &SecretSource::File(dir.join("missing"))).unwrap_err();
        assert!(e.contains("missing"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
