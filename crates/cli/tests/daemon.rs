#![cfg(target_os = "linux")]
//! The real `csi-proxyctl` binary against the real `csi-proxy` daemon on a socket directory of
//! its own: discovery, a JSON call's round trip, an error's code and message, a mutating call
//! refused without a terminal and run with --yes, requests from standard input or a file, every
//! listing, and reflection on every endpoint.

mod common;

use common::{text, Daemon, CTL};
use std::path::Path;
use std::process::{Command, Stdio};

#[test]
fn discovery_lists_the_23_apis_and_a_json_call_round_trips() {
    let d = Daemon::start("discover");
    let out = d.ctl(&["apis"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert_eq!(stdout.lines().filter(|l| l.contains(" SERVING ")).count(), 23, "{stdout}");
    assert!(stdout.contains("volume/v2alpha1") && stdout.contains("23 of 23 APIs answer"), "{stdout}");

    let out = d.ctl(&["--json", "apis"]);
    let all: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let all = all.as_array().unwrap();
    assert_eq!(all.len(), 23);
    assert!(all.iter().all(|a| a["state"] == "SERVING"), "{all:?}");

    std::fs::create_dir(d.kubelet("here")).unwrap();
    for (name, exists) in [("here", true), ("absent", false)] {
        let req = serde_json::json!({"path": d.kubelet(name)}).to_string();
        let out = d.ctl(&["call", "filesystem/v1", "PathExists", &req]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer, serde_json::json!({"exists": exists}));
    }
}

#[test]
fn errors_show_the_grpc_code_and_message() {
    let d = Daemon::start("errors");
    let out = d.ctl(&["call", "disk/v1", "GetDiskStats", r#"{"diskNumber": 12345}"#]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("v1.Disk/GetDiskStats: code NotFound (5): disk 12345"), "{err}");

    // A request that is not the method's JSON is a usage error: nothing was sent.
    let out = d.ctl(&["call", "disk/v1", "GetDiskStats", r#"{"disk": 1}"#]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a valid v1.GetDiskStatsRequest"), "{}", text(&out.stderr));

    let out = Command::new(CTL).args(["-socket-dir", "/nonexistent-csi-proxy", "disks"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("/nonexistent-csi-proxy/csi-proxy-disk-v1.sock"), "{}", text(&out.stderr));
}

#[test]
fn a_mutating_call_without_a_terminal_needs_yes() {
    let d = Daemon::start("mutating");
    let target = d.kubelet("made");
    let req = serde_json::json!({"path": target}).to_string();
    let out = d.ctl(&["call", "filesystem/v1", "Mkdir", &req]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("add --yes"), "{}", text(&out.stderr));
    assert!(!Path::new(&target).exists(), "refused, not run");

    let out = d.ctl(&["--yes", "call", "filesystem/v1", "Mkdir", &req]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(Path::new(&target).is_dir());
}

/// The disk number (as the Linux backend numbers disks) of the whole disk holding `/`, if `/`
/// is on a block device.
fn root_disk() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata("/").ok()?.dev();
    let (major, minor) = (libc_major(dev), libc_minor(dev));
    let sys = std::path::PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let whole = if sys.join("partition").exists() {
        std::fs::read_to_string(sys.canonicalize().ok()?.parent()?.join("dev")).ok()?
    } else {
        std::fs::read_to_string(sys.join("dev")).ok()?
    };
    let (ma, mi) = whole.trim().split_once(':')?;
    Some((ma.parse::<u64>().ok()? << 20) | mi.parse::<u64>().ok()?)
}

fn libc_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff)
}

fn libc_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0xff)
}

/// A dry run answers the plan and does nothing; an interlock's refusal comes back as the real
/// call's would, even for the disk the system runs from (the only way a test touches it).
#[test]
fn a_dry_run_answers_its_plan_and_does_nothing() {
    use std::os::unix::fs::DirBuilderExt;
    let audit_dir = std::env::temp_dir().join(format!("csi-proxyctl-dry-run-audit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&audit_dir);
    std::fs::DirBuilder::new().mode(0o700).create(&audit_dir).unwrap();
    let audit_log = audit_dir.join("audit.log");
    let d = Daemon::start_with("dry-run", &["-audit-log", audit_log.to_str().unwrap()]);
    let target = d.kubelet("planned/deeper");
    let req = serde_json::json!({"path": target}).to_string();
    // No --yes, no terminal: a dry run has nothing to confirm.
    let out = d.ctl(&["-dry-run", "call", "filesystem/v1", "Mkdir", &req]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["dry_run"], true);
    assert_eq!(answer["method"], "v1.Filesystem/Mkdir");
    let plan = answer["plan"].as_str().unwrap();
    assert!(plan.contains("would create the directory") && plan.contains(&target), "{plan}");
    assert!(!Path::new(&target).exists() && !Path::new(&d.kubelet("planned")).exists(), "nothing made");

    // Outside the working directories: the real call's refusal.
    let out = d.ctl(&["-dry-run", "call", "filesystem/v1", "Mkdir", r#"{"path": "/etc/csi-proxy-dry-run"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("PermissionDenied"), "{}", text(&out.stderr));

    // The system's disk: refused by the interlock, by dry run (as root: the backend can read it).
    match root_disk() {
        Some(disk) if cfg!(target_os = "linux") && is_root() => {
            let req = serde_json::json!({"diskNumber": disk}).to_string();
            let out = d.ctl(&["-dry-run", "call", "disk/v1", "PartitionDisk", &req]);
            let err = text(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{err}");
            assert!(err.contains("FailedPrecondition") && err.contains("holds the running system"), "{err}");
            assert!(err.contains("nothing was changed"), "{err}");
        }
        _ => eprintln!("skipped the system disk's dry run: not root, or / is on no block device"),
    }

    // -dry-run belongs to call only.
    let out = d.ctl(&["-dry-run", "disks"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("-dry-run is an option of the call command"), "{}", text(&out.stderr));

    // Audited as dry runs.
    let audit = std::fs::read_to_string(&audit_log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&audit_dir);
    let mkdir: Vec<serde_json::Value> = audit
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["method"] == "Mkdir")
        .collect();
    assert!(mkdir.len() >= 2 && mkdir.iter().all(|r| r["dry_run"] == true), "{audit}");
    assert!(
        mkdir.iter().any(|r| r["event"] == "end" && r["message"].as_str().is_some_and(|m| m.contains("would create"))),
        "{audit}"
    );
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .is_ok_and(|s| s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0")))
}

/// A request read from standard input or a file: the way to keep a password off the command line.
/// Mutating, it needs --yes (standard input is taken, so there is nothing to confirm on).
#[test]
fn a_request_comes_from_standard_input_or_a_file() {
    let d = Daemon::start("stdin");
    let ctl_with_stdin = |args: &[&str], input: &str| {
        use std::io::Write;
        let mut child = Command::new(CTL)
            .arg("-socket-dir")
            .arg(d.dir.join("sock"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The tool stops reading past its limit: the rest of an oversized input is refused.
        let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        child.wait_with_output().unwrap()
    };
    let target = d.kubelet("from-stdin");
    let req = serde_json::json!({"path": target}).to_string();
    let out = ctl_with_stdin(&["call", "filesystem/v1", "Mkdir", "-"], &req);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("came from standard input") && text(&out.stderr).contains("--yes"));
    assert!(!Path::new(&target).exists(), "refused, not run");
    let out = ctl_with_stdin(&["--yes", "call", "filesystem/v1", "Mkdir", "-"], &req);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(Path::new(&target).is_dir());

    // A read-only call needs no --yes; the request file is read the same way.
    let file = d.dir.join("request.json");
    std::fs::write(&file, &req).unwrap();
    let out = d.ctl(&["call", "filesystem/v1", "PathExists", &format!("@{}", file.display())]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap(), serde_json::json!({"exists": true}));

    // More than a request can be is refused before anything is sent (a usage error).
    let huge = format!("{{\"path\": \"{}\"}}", "x".repeat(2 << 20));
    let out = ctl_with_stdin(&["call", "filesystem/v1", "PathExists", "-"], &huge);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("larger than 1048576 bytes"), "{}", text(&out.stderr));
}

/// Every read-only listing reaches the daemon: a table with its header, or (where this host
/// lacks what it lists: no systemd, no open-iscsi, no firmware serial) the daemon's own error
/// with its gRPC code; never a usage error or a crash.
#[test]
fn every_listing_runs_against_the_daemon() {
    let d = Daemon::start("listings");
    for (args, header) in [
        (&["disks"][..], "DISK"),
        (&["volumes"][..], "VOLUME"),
        (&["iscsi-portals"][..], "ADDRESS"),
        (&["bios-serial"][..], "BIOS SERIAL"),
        (&["service", "csi-proxy-no-such-service"][..], "NAME"),
        (&["methods", "disk/v1"][..], "API"),
    ] {
        let out = d.ctl(args);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        match out.status.code() {
            Some(0) => assert!(stdout.starts_with(header), "{args:?}: {stdout}"),
            Some(1) => assert!(stderr.contains(": code "), "{args:?}: {stderr}"),
            other => panic!("{args:?}: exit {other:?}: {stdout}{stderr}"),
        }
    }
    let out = d.ctl(&["methods", "disk/v1"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).lines().any(|l| l.contains("PartitionDisk") && l.ends_with("mutating")));
}

/// Every endpoint of the real daemon answers server reflection (as grpcurl asks it) with its own
/// API's service beside health and reflection.
#[test]
fn every_endpoint_of_the_daemon_answers_reflection() {
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let d = Daemon::start("reflection");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let connector = csi_proxy_client::Connector::new().socket_dir(d.dir.join("sock"));
        for api in csi_proxy_client::APIS {
            let mut client = ServerReflectionClient::new(connector.connect(*api).await.unwrap());
            let req = ServerReflectionRequest {
                host: String::new(),
                message_request: Some(MessageRequest::ListServices(String::new())),
            };
            let mut answers = client.server_reflection_info(tokio_stream::iter([req])).await.unwrap().into_inner();
            let Some(MessageResponse::ListServicesResponse(list)) =
                answers.message().await.unwrap().unwrap().message_response
            else {
                panic!("{}: not a service list", api.service_name())
            };
            let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
            names.sort();
            let mut want =
                [api.service_name(), "grpc.health.v1.Health".into(), "grpc.reflection.v1.ServerReflection".into()];
            want.sort();
            assert_eq!(names, want);
        }
    });
}

#[test]
fn help_names_every_command() {
    let out = Command::new(CTL).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for word in [
        "apis",
        "disks",
        "volumes",
        "iscsi-portals",
        "bios-serial",
        "service <name>",
        "call <group>/<version>",
        "conformance",
        "-kubelet-path",
        "--yes",
        "-socket-dir",
        "-json",
        "-o, -output <format>",
        "version",
        "CSI_PROXY_SOCKET_DIR",
    ] {
        assert!(help.contains(word), "--help does not mention {word}");
    }
    let out = Command::new(CTL).arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown command \"frobnicate\""));
}

/// The real daemon quotes a refused path in its message as it was asked; csi-proxyctl shows it
/// escaped: ESC, BEL, CR LF, DEL, C1 and a bidi override reach the terminal as escapes, on one
/// line.
#[test]
fn an_error_quoting_a_hostile_path_is_escaped() {
    let d = Daemon::start("hostile-error");
    let path = "/etc/x\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nerror: forged\u{7f}\u{85}\u{9b}31m\u{202e}gpj.exe\u{202c}";
    let req = serde_json::json!({ "path": path }).to_string();
    let out = d.ctl(&["call", "filesystem/v1", "PathExists", &req]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let raw: Vec<char> = err
        .chars()
        .filter(|c| (c.is_control() && *c != '\n') || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'))
        .collect();
    assert!(raw.is_empty(), "raw {raw:?} in {err:?}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(r"code PermissionDenied (7): path /etc/x\u{1b}]0;pwned\u{7}\u{1b}[2J\r\nerror: forged\u{7f}\u{85}\u{9b}31m\u{202e}gpj.exe\u{202c} is not within"),
        "{err}"
    );
}
