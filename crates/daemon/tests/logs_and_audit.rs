#![cfg(target_os = "linux")]
//! The real daemon's log lines and audit records across a call of every one of the 23 APIs, each
//! made by the real `csi-proxyctl`: text lines parse with klog's header (as klog.go documents
//! it) and its structured `"msg" key=value` tail, JSON lines carry Kubernetes' typed keys, and
//! neither has Rust `Debug` leaking into values (`Some(…)`, `1.5ms`-style durations). Audit
//! records carry the request as a JSON object with every secret redacted.

mod common;

use regex::Regex;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");
const PASSWORD: &str = "Tr0ub4dor&3-logs";
const CHAP_SECRET: &str = "chap-secret-7e2a91";
const CHAP_USER: &str = "initiator-name-51f0";

/// klog's header, field by field as klog.go's header comment defines it:
/// `Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg...` (threadid space-padded).
const KLOG_HEADER: &str = r"^([IWEF])(\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.(\d{6}) +(\d+) ([^ :\]]+):(\d+)\] (.*)$";
/// What klog's structured calls write after the header: the quoted message, then ` key=value`
/// pairs, values quoted strings or bare numbers and booleans.
const KLOG_TAIL: &str = r#"^"(?:[^"\\]|\\.)*"(?: [A-Za-z_][A-Za-z0-9_.]*=(?:"(?:[^"\\]|\\.)*"|-?[0-9][0-9.e+-]*|true|false|NaN|inf|-inf))*$"#;
/// A value ending in Debug's rendering of a `Duration` (`159.548µs`, `5s`), in either format.
const DEBUG_DURATION: &str = r#"\d+(\.\d+)?(ns|µs|us|ms|s|m|h)""#;

/// A daemon killed when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Run {
    log: String,
    audit: String,
}

/// One read-only method of every API (from the descriptors), plus three calls that change the
/// host, two of them carrying secrets (both refused before any network or host work).
fn calls(root: &Path) -> Vec<(String, String, String)> {
    use prost::Message;
    let set = prost_types::FileDescriptorSet::decode(csi_proxy_wire::FILE_DESCRIPTOR_SET).unwrap();
    let mut out = Vec::new();
    for api in csi_proxy_wire::APIS {
        let service = set
            .file
            .iter()
            .filter(|f| f.package() == api.version)
            .flat_map(|f| &f.service)
            .find(|s| s.name() == api.group.service())
            .unwrap_or_else(|| panic!("{api:?}"));
        // A read-only one, or (SMB has none) a removal with an empty request, refused as such.
        let method = service
            .method
            .iter()
            .find(|m| csi_proxy_wire::is_read_only(m.name()))
            .or_else(|| service.method.iter().find(|m| m.name().starts_with("Remove")))
            .unwrap_or_else(|| panic!("no safe method in {api:?}"));
        out.push((format!("{}/{}", api.group.name(), api.version), method.name().to_string(), "{}".to_string()));
    }
    assert_eq!(out.len(), 23);
    out.push((
        "filesystem/v1".into(),
        "Mkdir".into(),
        serde_json::json!({"path": root.join("made").to_str().unwrap()}).to_string(),
    ));
    out.push((
        "smb/v1".into(),
        "NewSmbGlobalMapping".into(),
        serde_json::json!({"remotePath": r"\\192.0.2.1\share", "localPath": "/etc/csi-proxy-logs-test",
            "username": "alice", "password": PASSWORD})
        .to_string(),
    ));
    out.push((
        "iscsi/v1alpha2".into(),
        "ConnectTarget".into(),
        serde_json::json!({"targetPortal": {"targetAddress": "192.0.2.1", "targetPort": 3260}, "iqn": "not an iqn",
            "authType": "ONE_WAY_CHAP", "chapUsername": CHAP_USER, "chapSecret": CHAP_SECRET})
        .to_string(),
    ));
    out
}

/// Runs the daemon with every call of [`calls`] made through `csi-proxyctl`, stops it with
/// SIGTERM, and returns its log file and audit file.
fn run_every_api(tag: &str, format: &str) -> Run {
    let ctl = csi_proxy_stack_tests::sibling::binary(BIN, "csi-proxyctl", "csi-proxyctl", true);
    let dir = std::env::temp_dir().join(format!("csi-proxy-logs-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (root, sock) = (dir.join("kubelet"), dir.join("sock"));
    std::fs::create_dir_all(&root).unwrap();
    let (log, audit) = (dir.join("csi.log"), dir.join("audit.log"));
    let daemon = Command::new(BIN)
        .arg("-socket-dir")
        .arg(&sock)
        .arg("-kubelet-path")
        .arg(&root)
        .arg("-linux-smb-dir")
        .arg(dir.join("smb"))
        .args(["-v=5", "-logtostderr=false", "-allowed-service="])
        .arg(format!("-log_file={}", log.display()))
        .arg(format!("-logging-format={format}"))
        .arg(format!("-audit-log={}", audit.display()))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut daemon = Killed(daemon);
    let run_ctl = |args: &[&str]| -> Output {
        Command::new(&ctl).arg("-socket-dir").arg(&sock).args(args).stdin(Stdio::null()).output().unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = run_ctl(&["apis"]);
        if out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("NOT_SERVING") {
            break;
        }
        assert!(Instant::now() < deadline, "the daemon did not serve: {}", String::from_utf8_lossy(&out.stderr));
        std::thread::sleep(Duration::from_millis(50));
    }
    for (api, method, request) in calls(&root) {
        let out = run_ctl(&["-y", "call", &api, &method, &request]);
        let err = String::from_utf8_lossy(&out.stderr);
        // Success or the daemon's refusal: either way the call reached it.
        assert!(out.status.success() || err.contains(": code "), "{api} {method}: {err}");
    }
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(daemon.0.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while daemon.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the daemon did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = Run { log: std::fs::read_to_string(&log).unwrap(), audit: std::fs::read_to_string(&audit).unwrap() };
    let _ = std::fs::remove_dir_all(&dir);
    run
}

/// What no log line and no record may hold: Debug's `Some(…)`, Debug durations, secrets.
fn assert_clean(what: &str, text: &str) {
    let debug_duration = Regex::new(DEBUG_DURATION).unwrap();
    for line in text.lines() {
        assert!(!line.contains("Some("), "{what}: Debug of an Option: {line}");
        assert!(!debug_duration.is_match(line), "{what}: a Debug duration: {line}");
        for secret in [PASSWORD, CHAP_SECRET, CHAP_USER] {
            assert!(!line.contains(secret), "{what}: a secret: {line}");
        }
    }
}

/// The call log's lines of the calls made, one per call.
fn call_lines<T>(lines: &[T], is_call: impl Fn(&T) -> bool) -> Vec<&T> {
    lines.iter().filter(|l| is_call(l)).collect()
}

#[test]
fn text_logs_are_klog_lines_across_every_api() {
    let run = run_every_api("text", "text");
    let header = Regex::new(KLOG_HEADER).unwrap();
    let tail = Regex::new(KLOG_TAIL).unwrap();
    let elapsed_ms = Regex::new(r" elapsed_ms=[0-9.e+-]+(?: |$)").unwrap();
    let lines: Vec<&str> = run.log.lines().collect();
    assert!(lines.len() > 26, "{}", run.log);
    for line in &lines {
        let c = header.captures(line).unwrap_or_else(|| panic!("not a klog header: {line:?}"));
        let (month, day): (u32, u32) = (c[2].parse().unwrap(), c[3].parse().unwrap());
        assert!((1..=12).contains(&month) && (1..=31).contains(&day), "{line}");
        assert!(c[5].parse::<u32>().unwrap() < 60 && c[6].parse::<u32>().unwrap() < 61, "{line}");
        assert!(c[9].ends_with(".rs") && !c[9].contains('/'), "the file's base name: {line}");
        assert!(tail.is_match(&c[11]), "not klog's \"msg\" key=value tail: {line:?}");
    }
    assert_clean("text log", &run.log);
    let calls =
        call_lines(&lines, |l| (l.contains(r#"] "ok" "#) || l.contains(r#"] "failed" "#)) && l.contains(" method=\""));
    assert!(calls.len() >= 26, "every call logged at -v=5: {calls:#?}");
    for l in &calls {
        assert!(elapsed_ms.is_match(l), "elapsed as a number of milliseconds: {l}");
        assert!(l.contains(" request=\"{"), "the request as JSON: {l}");
    }
    assert!(lines.iter().any(|l| l.contains(r#"] "starting csi-proxy""#)), "{}", run.log);
}

#[test]
fn json_logs_are_kubernetes_lines_across_every_api() {
    let run = run_every_api("json", "json");
    let lines: Vec<serde_json::Value> =
        run.log.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect();
    assert!(lines.len() > 26, "{}", run.log);
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64() * 1000.0;
    for l in &lines {
        let ts = l["ts"].as_f64().unwrap_or_else(|| panic!("ts is a number: {l}"));
        assert!(ts > now_ms - 600_000.0 && ts <= now_ms, "ts in milliseconds since the epoch: {l}");
        let caller = l["caller"].as_str().unwrap_or_else(|| panic!("caller: {l}"));
        let (file, line) = caller.rsplit_once(':').unwrap();
        assert!(file.ends_with(".rs") && line.parse::<u32>().is_ok(), "{l}");
        assert!(l["msg"].is_string(), "{l}");
        match l["level"].as_str() {
            Some("error") => assert!(l.get("v").is_none(), "no v on errors: {l}"),
            _ => assert!(l["v"].is_u64(), "v is a number: {l}"),
        }
        assert!(l.get("error").is_none(), "the error goes under err: {l}");
    }
    assert_clean("JSON log", &run.log);
    let calls = call_lines(&lines, |l| l["logger"] == "csi_proxy::call");
    assert!(calls.len() >= 26, "every call logged at -v=5: {calls:#?}");
    for l in &calls {
        assert!(l["elapsed_ms"].is_f64(), "elapsed as a number of milliseconds: {l}");
        let request: serde_json::Value = serde_json::from_str(l["request"].as_str().unwrap()).unwrap();
        assert!(request.is_object(), "{l}");
    }
    let failed = calls.iter().find(|l| l["method"] == "NewSmbGlobalMapping").unwrap();
    assert!(failed["err"].is_string() && failed["code"].is_string(), "{failed}");
    // The audit records of the same run: requests as objects, secrets redacted, callers objects.
    let records: Vec<serde_json::Value> =
        run.audit.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}"))).collect();
    assert_clean("audit file", &run.audit);
    // Every call at -v=5 (read-only ones too) has a start record, or a refused one when its
    // request could not be read as an operation.
    let first = records.iter().filter(|r| r["event"] == "start" || r["event"] == "refused").count();
    assert!(first >= 26, "{}", run.audit);
    let starts: Vec<_> = records.iter().filter(|r| r["event"] == "start").collect();
    for r in &starts {
        assert!(r["request"].is_object(), "{r}");
        let peer = &r["peer_at_connect"];
        assert!(peer["pid"].is_u64(), "{r}");
        assert!(peer["exe"].as_str().is_some_and(|e| e.ends_with("/csi-proxyctl")), "called by csi-proxyctl: {r}");
    }
    let start = |method: &str| *starts.iter().find(|r| r["method"] == method).unwrap_or_else(|| panic!("{method}"));
    let smb = start("NewSmbGlobalMapping");
    assert_eq!(smb["request"]["password"], "<redacted>", "{smb}");
    assert_eq!(smb["request"]["username"], "alice", "{smb}");
    assert_eq!(smb["request"]["remotePath"], r"\\192.0.2.1\share", "{smb}");
    let iscsi = start("ConnectTarget");
    assert_eq!(iscsi["request"]["chapSecret"], "<redacted>", "{iscsi}");
    assert_eq!(iscsi["request"]["chapUsername"], "<redacted>", "{iscsi}");
    assert_eq!(iscsi["request"]["targetPortal"]["targetPort"], 3260, "{iscsi}");
    assert!(start("Mkdir")["request"]["path"].as_str().unwrap().ends_with("/kubelet/made"));
}

/// `-log_file` while `-logtostderr` is true (klog's default) has no effect, as with klog, and
/// the daemon says so on standard error instead of dropping it silently.
#[test]
fn log_file_without_logtostderr_false_is_warned_about() {
    let dir = std::env::temp_dir().join(format!("csi-proxy-logs-ignored-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = dir.join("never.log");
    let mut daemon = Command::new(BIN);
    daemon.arg("-socket-dir").arg(dir.join("sock")).arg(format!("-log_file={}", file.display()));
    let err = common::stderr_until_socket(&mut daemon, &dir.join("sock/csi-proxy-system-v1alpha1.sock"));
    assert!(!file.exists(), "klog writes no file while -logtostderr is true");
    let warning = err
        .lines()
        .find(|l| l.starts_with('W') && l.contains("-log_file has no effect"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(warning.contains(&format!("log_file=\"{}\"", file.display())), "{warning}");
    let _ = std::fs::remove_dir_all(&dir);
}
