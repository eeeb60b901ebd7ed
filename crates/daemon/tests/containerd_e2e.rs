#![cfg(target_os = "linux")]
//! The daemon under a real container runtime: Debian's containerd (its CRI plugin) and runc run a
//! pod as the kubelet would, from an image built here, and the pod's container calls the daemon
//! through the socket directory mounted into it, with the real `csi-proxyctl`. The daemon asks
//! that containerd (`-cri-endpoint`) who the caller is.
//!
//! Root only (containerd, runc, cgroups). In CI (`CI` set) a missing tool fails the test; elsewhere
//! it is skipped with the reason.

mod containerd;

use containerd::{caller_image, host_mounts, ro, rw, Containerd, Exited, Killed, Pod, LAST_LINE};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");

/// Whether to go on: false (after saying why) where the test cannot run and may be skipped.
fn can_run() -> bool {
    let Some(why) = containerd::missing() else { return true };
    if std::env::var_os("CI").is_some() {
        panic!("CI must run the containerd test: {why}");
    }
    eprintln!("skipped: {why}");
    false
}

/// The daemon serving on `socket_dir`, its audit file.
struct Daemon {
    _process: Killed,
    socket_dir: PathBuf,
    audit: PathBuf,
}

fn start_daemon(dir: &Path, tag: &str, extra: &[&str], cri: &Path) -> Daemon {
    let socket_dir = dir.join(format!("sock-{tag}"));
    let audit = dir.join(format!("audit-{tag}.log"));
    let log = std::fs::File::create(dir.join(format!("daemon-{tag}.log"))).unwrap();
    let child = Command::new(BIN)
        .arg("-socket-dir")
        .arg(&socket_dir)
        .arg("-kubelet-path")
        .arg(dir.join("kubelet"))
        .arg("-linux-smb-dir")
        .arg(dir.join("smb"))
        .arg("-allowed-service=")
        .arg(format!("-audit-log={}", audit.display()))
        .arg(format!("-cri-endpoint={}", cri.display()))
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let process = Killed(child);
    let socket = socket_dir.join("csi-proxy-filesystem-v1.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the daemon made no socket: {}",
            std::fs::read_to_string(dir.join(format!("daemon-{tag}.log"))).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon { _process: process, socket_dir, audit }
}

/// The audit file's records.
fn records(audit: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The cgroup lines of a `/proc/<pid>/cgroup` text that name a pod's container.
fn container_cgroups(text: &str) -> Vec<&str> {
    text.lines().filter_map(|l| l.splitn(3, ':').nth(2)).filter(|p| p.contains("/kubepods/")).collect()
}

/// The policy under test: pods `csi-test/allowed-*`, container `caller` of the caller image, may
/// check and make directories under `root`, and nothing else; no other caller is granted anything.
fn policy(root: &Path) -> String {
    let root = serde_json::to_string(root.to_str().unwrap()).unwrap();
    format!(
        r#"rules:
- name: test-driver
  callers:
  - pod: {{namespace: csi-test, name: "allowed-*", container: caller, image: "localhost/csi-proxy-test/caller:*"}}
  allow:
  - {{api: filesystem, methods: [PathExists, Mkdir]}}
  paths: [{root}]
"#
    )
}

/// What the runs share: the runtime, the caller image (and another one, the same but for its
/// name), csi-proxyctl.
struct Setup {
    runtime: Containerd,
    image: String,
    other_image: String,
    ctl: PathBuf,
}

impl Setup {
    /// Container `caller` of `pod` calls filesystem/v1 `method` on `path` through `daemon`'s
    /// sockets, with the real csi-proxyctl; its process's cgroup is checked to be the one the
    /// kubelet and containerd give that container (`/kubepods/besteffort/pod<uid>/<id>`).
    fn call(&self, pod: &Pod, daemon: &Daemon, method: &str, path: &Path) -> Exited {
        self.call_from(&self.image, pod, daemon, method, path)
    }

    /// [`Self::call`] from a container of `image`.
    fn call_from(&self, image: &str, pod: &Pod, daemon: &Daemon, method: &str, path: &Path) -> Exited {
        let mut mounts = host_mounts();
        mounts.push(ro(self.ctl.to_str().unwrap(), "/csi-proxyctl"));
        // As a driver's DaemonSet mounts the socket directory (hostPath).
        mounts.push(rw(daemon.socket_dir.to_str().unwrap(), "/csi"));
        let request = serde_json::json!({ "path": path.to_str().unwrap() }).to_string();
        // The container's cgroup, then csi-proxyctl's output (its errors too: one stream, in
        // order) and its exit status, the last line. The script is fixed; the call's arguments
        // come as its own arguments.
        let script =
            format!("cat /proc/self/cgroup; /csi-proxyctl \"$@\" 2>&1; rc=$?; echo \"{LAST_LINE}$rc\"; exit $rc");
        let command = [
            "/bin/busybox",
            "sh",
            "-c",
            &script,
            "sh",
            "-socket-dir",
            "/csi",
            "-y",
            "call",
            "filesystem/v1",
            method,
            &request,
        ];
        let exited = pod.run("caller", image, &command, mounts);
        let expected = format!("{}/{}", pod.cgroup_parent(), exited.id);
        let cgroups = container_cgroups(&exited.output);
        assert!(
            !cgroups.is_empty() && cgroups.iter().all(|c| *c == expected),
            "the container's cgroups {cgroups:?}, expected {expected}: {exited:?}"
        );
        exited
    }
}

/// The audit records of container `id`'s calls (its `caller.container_id`).
fn records_of<'a>(records: &'a [serde_json::Value], id: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["caller"]["container_id"] == id).collect()
}

/// `record` names container `exited` of `pod`, as the runtime knows them.
#[track_caller]
fn assert_names(record: &serde_json::Value, pod: &Pod, exited: &Exited, image: &str) {
    let caller = &record["caller"];
    let expected = serde_json::json!({
        "kind": "pod",
        "namespace": "csi-test",
        "pod": pod.name(),
        "pod_uid": pod.uid,
        "container": "caller",
        "container_id": exited.id,
        "image": image,
    });
    for (k, v) in expected.as_object().unwrap() {
        assert_eq!(&caller[k], v, "caller.{k} of {record}");
    }
}

/// The records of a call: (start, end), or the one refused record.
fn events<'a>(records: &[&'a serde_json::Value], event: &str) -> Vec<&'a serde_json::Value> {
    records.iter().copied().filter(|r| r["event"] == event).collect()
}

#[test]
fn pods_are_named_in_audit_records_and_the_policy_allows_and_denies_as_written() {
    if !can_run() {
        return;
    }
    let ctl = csi_proxy_stack_tests::sibling::binary(BIN, "csi-proxyctl", "csi-proxyctl", true);
    let began = Instant::now();
    let runtime = Containerd::start("csi-proxy-containerd");
    let image = runtime.import(&caller_image("caller"));
    let other_image = runtime.import(&caller_image("other"));
    let s = Setup { runtime, image, other_image, ctl };
    let dir = s.runtime.dir.path();
    let root = dir.join("kubelet/plugins/test-driver");
    let elsewhere = dir.join("kubelet/pods");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let policy_file = dir.join("policy.yaml");
    std::fs::write(&policy_file, policy(&root)).unwrap();
    let policy_flag = format!("-authorization-policy={}", policy_file.display());
    let enforce = start_daemon(dir, "enforce", &[&policy_flag, "-authorization-mode=enforce"], &s.runtime.socket);
    let warn = start_daemon(dir, "warn", &[&policy_flag, "-authorization-mode=warn"], &s.runtime.socket);
    let open = start_daemon(dir, "open", &[], &s.runtime.socket);

    // A pod the policy grants: its call runs, and its records name it.
    let allowed = s.runtime.run_pod("csi-test", "allowed-1");
    let made = root.join("made-by-allowed-1");
    let ok = s.call(&allowed, &enforce, "Mkdir", &made);
    assert_eq!(ok.exit_code, 0, "{ok:?}");
    assert!(made.is_dir(), "{ok:?}");
    // The same pod outside its grant: a path under no root of its rule.
    let outside = elsewhere.join("made-by-allowed-1");
    let out_of_root = s.call(&allowed, &enforce, "Mkdir", &outside);
    assert_ne!(out_of_root.exit_code, 0, "{out_of_root:?}");
    assert!(out_of_root.output.contains("code PermissionDenied"), "{out_of_root:?}");
    assert!(!outside.exists(), "a refused call did nothing");
    // The same pod and container name, but another image than the rule's.
    let other_path = root.join("made-by-allowed-1-other");
    let other = s.call_from(&s.other_image, &allowed, &enforce, "Mkdir", &other_path);
    assert_ne!(other.exit_code, 0, "{other:?}");
    assert!(other.output.contains("code PermissionDenied"), "{other:?}");
    assert!(other.output.contains("localhost/csi-proxy-test/other:1"), "the message names the image: {other:?}");
    assert!(!other_path.exists(), "a refused call did nothing");

    // A pod of the same namespace that no rule grants: PermissionDenied, naming it.
    let denied = s.runtime.run_pod("csi-test", "denied-1");
    let refused_path = root.join("made-by-denied-1");
    let refused = s.call(&denied, &enforce, "Mkdir", &refused_path);
    assert_ne!(refused.exit_code, 0, "{refused:?}");
    assert!(refused.output.contains("code PermissionDenied"), "{refused:?}");
    let named = "pod=csi-test/denied-1 container=caller";
    assert!(refused.output.contains(named), "the message names the caller: {refused:?}");
    assert!(!refused_path.exists(), "a refused call did nothing");

    // The same pod against the daemon in warn mode: the call runs, and is recorded as one the
    // policy would deny.
    let warned_path = root.join("made-by-denied-1-warn");
    let warned = s.call(&denied, &warn, "Mkdir", &warned_path);
    assert_eq!(warned.exit_code, 0, "{warned:?}");
    assert!(warned_path.is_dir(), "{warned:?}");

    // Without a policy every call runs, and the caller is still named.
    let open_path = root.join("made-by-denied-1-open");
    let unchecked = s.call(&denied, &open, "Mkdir", &open_path);
    assert_eq!(unchecked.exit_code, 0, "{unchecked:?}");
    assert!(open_path.is_dir(), "{unchecked:?}");

    let enforced = records(&enforce.audit);
    let ok_records = records_of(&enforced, &ok.id);
    let (start, end) = (events(&ok_records, "start"), events(&ok_records, "end"));
    assert!(start.len() == 1 && end.len() == 1, "a start and an end record: {enforced:#?}");
    for r in [start[0], end[0]] {
        assert_eq!(r["method"], "Mkdir", "{r}");
        assert_names(r, &allowed, &ok, &s.image);
        assert!(r.get("authorization").is_none_or(|a| a.get("denied").is_none()), "nothing denied: {r}");
    }
    assert_eq!(end[0]["code"], "OK", "{}", end[0]);
    for (exited, pod, image) in
        [(&out_of_root, &allowed, &s.image), (&other, &allowed, &s.other_image), (&refused, &denied, &s.image)]
    {
        let of_it = records_of(&enforced, &exited.id);
        let refusals = events(&of_it, "refused");
        assert!(refusals.len() == 1 && of_it.len() == 1, "only a refused record: {enforced:#?}");
        assert_eq!(refusals[0]["code"], "PermissionDenied", "{}", refusals[0]);
        assert_names(refusals[0], pod, exited, image);
        let message = refusals[0]["message"].as_str().unwrap_or_default();
        assert!(message.contains(&format!("pod=csi-test/{}", pod.name())), "{}", refusals[0]);
    }

    let warned_records = records(&warn.audit);
    let of_it = records_of(&warned_records, &warned.id);
    let (start, end) = (events(&of_it, "start"), events(&of_it, "end"));
    assert!(start.len() == 1 && end.len() == 1, "a start and an end record: {warned_records:#?}");
    assert_names(start[0], &denied, &warned, &s.image);
    let authorization = &start[0]["authorization"];
    assert_eq!(authorization["mode"], "warn", "{}", start[0]);
    assert!(authorization["denied"].as_str().is_some_and(|why| !why.is_empty()), "what would be denied: {}", start[0]);
    assert_eq!(end[0]["code"], "OK", "{}", end[0]);

    let open_records = records(&open.audit);
    let of_it = records_of(&open_records, &unchecked.id);
    let (start, end) = (events(&of_it, "start"), events(&of_it, "end"));
    assert!(start.len() == 1 && end.len() == 1, "a start and an end record: {open_records:#?}");
    assert_names(start[0], &denied, &unchecked, &s.image);
    assert!(start[0].get("authorization").is_none_or(|a| a.get("denied").is_none()), "{}", start[0]);

    // The host's csi-proxyctl is named as the host, and no rule grants it anything here.
    let host = Command::new(&s.ctl)
        .arg("-socket-dir")
        .arg(&enforce.socket_dir)
        .args(["-y", "call", "filesystem/v1", "PathExists"])
        .arg(serde_json::json!({ "path": root.to_str().unwrap() }).to_string())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!host.status.success(), "{host:?}");
    assert!(String::from_utf8_lossy(&host.stderr).contains("code PermissionDenied"), "{host:?}");
    let enforced = records(&enforce.audit);
    let host_refusal = enforced.last().unwrap();
    assert_eq!(host_refusal["event"], "refused", "{host_refusal}");
    assert_eq!(host_refusal["caller"]["kind"], "host", "{host_refusal}");

    drop((allowed, denied));
    eprintln!("containerd test: {:.1} s", began.elapsed().as_secs_f64());
}
