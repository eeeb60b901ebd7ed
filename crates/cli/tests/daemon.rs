#![cfg(target_os = "linux")]
//! The real `csi-proxyctl` binary against the real `csi-proxy` daemon on a socket directory of
//! its own: discovery, a JSON call's round trip, an error's code and message, a mutating call
//! refused without a terminal and run with --yes, requests from standard input or a file, every
//! listing, and reflection on every endpoint.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CTL: &str = env!("CARGO_BIN_EXE_csi-proxyctl");

/// The daemon's binary, next to ours in the target directory (`cargo test --workspace` builds
/// it; built here when only this package's tests were built).
fn daemon_binary() -> PathBuf {
    let bin = Path::new(CTL).with_file_name("csi-proxy");
    if !bin.exists() {
        let target = Path::new(CTL).parent().and_then(Path::parent).expect("target/<profile>/");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let profile = Path::new(CTL).parent().unwrap().file_name().unwrap().to_str().unwrap().to_string();
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "csi-proxy", "--bin", "csi-proxy", "--target-dir"]).arg(target);
        if profile == "release" {
            build.arg("--release");
        }
        let status = build.status().expect("running cargo build -p csi-proxy");
        assert!(status.success() && bin.exists(), "could not build {}", bin.display());
    }
    bin
}

/// A running daemon serving every API in `dir/sock`, with `dir/kubelet` as its kubelet path;
/// killed, and `dir` removed, on drop.
struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Daemon {
    fn start(tag: &str) -> Daemon {
        let dir = std::env::temp_dir().join(format!("csi-proxyctl-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("kubelet")).unwrap();
        let child = Command::new(daemon_binary())
            .arg("-socket-dir")
            .arg(dir.join("sock"))
            .arg("-kubelet-path")
            .arg(dir.join("kubelet"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon { child, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::fs::read_dir(d.dir.join("sock"))
            .map(|r| r.filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "sock")).count())
            .unwrap_or(0)
            < 23
        {
            assert!(Instant::now() < deadline, "the daemon did not create its sockets");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Health turns SERVING once every endpoint is served, a moment after the sockets exist.
        while text(&d.ctl(&["apis"]).stdout).contains("NOT_SERVING") {
            assert!(Instant::now() < deadline, "the daemon did not turn SERVING");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// `csi-proxyctl -socket-dir <ours> <args>`, stdin not a terminal.
    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(CTL)
            .arg("-socket-dir")
            .arg(self.dir.join("sock"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn kubelet(&self, name: &str) -> String {
        self.dir.join("kubelet").join(name).display().to_string()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

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

    let out = d.ctl(&["call", "disk/v1", "GetDiskStats", r#"{"disk": 1}"#]);
    assert_eq!(out.status.code(), Some(1));
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

    // More than a request can be is refused before anything is sent.
    let huge = format!("{{\"path\": \"{}\"}}", "x".repeat(2 << 20));
    let out = ctl_with_stdin(&["call", "filesystem/v1", "PathExists", "-"], &huge);
    assert_eq!(out.status.code(), Some(1));
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
        "--yes",
        "-socket-dir",
        "-json",
    ] {
        assert!(help.contains(word), "--help does not mention {word}");
    }
    let out = Command::new(CTL).arg("frobnicate").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown command \"frobnicate\""));
}
