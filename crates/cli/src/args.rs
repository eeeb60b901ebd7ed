//! The command line: `csi-proxyctl [options] <command> [arguments]`. Options may come before or
//! after the command, as `-name`, `--name`, `-name value` or `-name=value` (the daemon's style);
//! `--` ends them.

use csi_proxy_client::Api;
use std::time::Duration;

pub const USAGE_TEXT: &str = "\
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
  service <name>          A Windows service's display name, start type and status.
  methods [<group>/<version>]
                          Every method of every API (or of one), read-only or mutating.

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
                          The -timeout applies to each step.

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

Options:
  -json                   Print JSON instead of tables.
  -yes, -y                Run mutating calls without asking.
  -timeout <duration>     Limit on connecting and the answers (default 60s): 500ms, 30s, 2m, or
                          seconds.
  -socket-dir <dir>       Directory of the daemon's sockets on Linux (its -socket-dir; default
                          /run/csi-proxy). On Windows the named pipes \\\\.\\pipe\\csi-proxy-<group>-<version>
                          are used.
  -h, -help               This text.
  -version                The version.

Exit status: 0 done; 1 a call or the connection failed (the gRPC code and message are shown);
2 a usage error, or a mutating call that was not confirmed.
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
    Call { api: Api, method: String, request: String },
    Conformance { kubelet_path: std::path::PathBuf, scratch_dir: std::path::PathBuf },
}

#[derive(Debug)]
pub struct Options {
    pub command: Command,
    pub json: bool,
    pub yes: bool,
    pub timeout: Duration,
    #[cfg_attr(not(unix), allow(dead_code))]
    pub socket_dir: Option<std::path::PathBuf>,
}

#[derive(Debug)]
pub enum Parsed {
    Run(Options),
    Help,
    Version,
}

pub fn parse(argv: &[String]) -> Result<Parsed, String> {
    let mut json = false;
    let mut yes = false;
    let mut timeout = Duration::from_secs(60);
    let mut socket_dir = None;
    let mut kubelet_path = None;
    let mut scratch_dir = None;
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
            "json" => json = bool_flag(name, inline.as_deref())?,
            "y" | "yes" => yes = bool_flag(name, inline.as_deref())?,
            "timeout" => timeout = duration(&value("duration")?)?,
            "socket-dir" => socket_dir = Some(std::path::PathBuf::from(value("dir")?)),
            "kubelet-path" => kubelet_path = Some(std::path::PathBuf::from(value("dir")?)),
            "scratch-dir" => scratch_dir = Some(std::path::PathBuf::from(value("dir")?)),
            _ => return Err(format!("unknown option {:?}", bounded(arg))),
        }
    }
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
        },
        other => return Err(format!("unknown command {:?}", bounded(other))),
    };
    if kubelet_path.is_some() || scratch_dir.is_some() {
        return Err("-kubelet-path and -scratch-dir are options of the conformance command".into());
    }
    if let Command::Conformance { kubelet_path, .. } = &command {
        check_kubelet_path(kubelet_path)?;
    }
    if let Some(extra) = words.next() {
        return Err(format!("unexpected argument {:?}", bounded(&extra)));
    }
    Ok(Parsed::Run(Options { command, json, yes, timeout, socket_dir }))
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

fn bool_flag(name: &str, value: Option<&str>) -> Result<bool, String> {
    match value {
        None | Some("true") | Some("1") => Ok(true),
        Some("false") | Some("0") => Ok(false),
        Some(v) => Err(format!("invalid value {:?} for -{name}: expected true or false", bounded(v))),
    }
}

/// `500ms`, `30s`, `2m` or a number of seconds.
fn duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {:?}: expected e.g. 500ms, 30s, 2m or a number of seconds", bounded(text));
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        _ => return Err(bad()),
    };
    if d.is_zero() {
        return Err(bad());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Options, String> {
        match parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())? {
            Parsed::Run(o) => Ok(o),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_go_anywhere_in_either_spelling() {
        let o =
            run(&["call", "disk/v1", "GetDiskStats", r#"{"disk_number":1}"#, "--json", "-timeout=2m", "-y"]).unwrap();
        assert!(o.json && o.yes);
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

    #[cfg(unix)]
    #[test]
    fn conformance_takes_its_directories() {
        let o = run(&["conformance", "-kubelet-path=/k", "-scratch-dir", "/s", "-json"]).unwrap();
        assert!(o.json);
        assert_eq!(o.command, Command::Conformance { kubelet_path: "/k".into(), scratch_dir: "/s".into() });
    }
}
