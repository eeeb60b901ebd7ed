#![cfg(target_os = "linux")]
//! `csi-proxyctl conformance -smb-share … -iscsi-portal …` against the real daemon and real peers,
//! inside the storage VM only (`scripts/storage-vm-tests.sh`): Samba on 127.0.0.1 and tgtd with
//! CHAP (`storage-vm-peers smb`, `storage-vm-peers iscsi-target`), the kernel's cifs client and
//! open-iscsi. Elsewhere every test returns at once.
//!
//! The smb and iscsi checks pass, the password (from a file) and the CHAP secret (from standard
//! input) appear in no output, and nothing of the run is left: no cifs mount, no link, no
//! session, no portal it added; a portal that was there before stays.
//!
//! Run with `--test-threads=1`: the tests share the peers.

mod common;

use common::{text, Daemon, CTL};
use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

const USER: &str = "confuser";
const PASSWORD: &str = "Conf,Pw=7 x";
const CHAP_USER: &str = "confchap";
const CHAP_SECRET: &str = "confChapSecret-91a";

struct Peers {
    iqn: String,
}

fn peers() -> Option<&'static Peers> {
    if std::env::var("STORAGE_VM").as_deref() != Ok("1") {
        eprintln!("skipped: only inside storage-vm (scripts/storage-vm-tests.sh)");
        return None;
    }
    static PEERS: OnceLock<Peers> = OnceLock::new();
    Some(PEERS.get_or_init(|| {
        let peers = std::env::var("STORAGE_VM_PEERS").expect("STORAGE_VM_PEERS");
        let run = |args: &[&str]| -> HashMap<String, String> {
            let out = Command::new(&peers).args(args).output().unwrap();
            assert!(out.status.success(), "storage-vm-peers {args:?}: {}", text(&out.stderr));
            text(&out.stdout).lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect()
        };
        let vars = run(&["smb", "--user", USER, "--pass", PASSWORD, "--name", "conf", "/srv/smb-conf"]);
        assert_eq!(vars["SMB_UNC"], "//127.0.0.1/conf");
        let vars = run(&["iscsi-target", "--size", "16", "--chap", CHAP_USER, CHAP_SECRET]);
        Peers { iqn: vars["ISCSI_IQN"].clone() }
    }))
}

fn iscsiadm(args: &[&str]) -> Output {
    Command::new("iscsiadm").args(args).output().unwrap()
}

/// Whether open-iscsi has a sendtargets record for 127.0.0.1:3260.
fn portal_known() -> bool {
    text(&iscsiadm(&["-m", "discoverydb"]).stdout).contains("127.0.0.1:3260")
}

fn sessions() -> String {
    text(&iscsiadm(&["-m", "session"]).stdout)
}

fn cifs_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(" - cifs "))
        .map(str::to_owned)
        .collect()
}

/// Runs the conformance with the share and the target: the password from a file, the CHAP
/// secret from standard input.
fn run(d: &Daemon, json: bool) -> Output {
    let p = peers().unwrap();
    let pw = d.dir.join("smb-password");
    std::fs::write(&pw, format!("{PASSWORD}\n")).unwrap();
    let scratch = d.dir.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut c = Command::new(CTL);
    c.arg("-socket-dir").arg(d.dir.join("sock"));
    if json {
        c.arg("-json");
    }
    c.arg("conformance").arg("-kubelet-path").arg(d.dir.join("kubelet")).arg("-scratch-dir").arg(&scratch);
    c.args(["-smb-share", r"\\127.0.0.1\conf", "-smb-user", USER, "-smb-password-file"]).arg(&pw);
    c.args(["-iscsi-portal", "127.0.0.1:3260", "-iscsi-target", &p.iqn, "-iscsi-chap-user", CHAP_USER]);
    c.args(["-iscsi-chap-secret-file", "-"]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    child.stdin.take().unwrap().write_all(CHAP_SECRET.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    std::fs::remove_file(&pw).unwrap();
    out
}

fn daemon(tag: &str) -> (Daemon, PathBuf) {
    let smb_dir = std::env::temp_dir().join(format!("csi-proxyctl-{tag}-smb-{}", std::process::id()));
    let d = Daemon::start_with(tag, &["-linux-fs-type", "xfs", "-linux-smb-dir", smb_dir.to_str().unwrap()]);
    (d, smb_dir)
}

fn steps<'a>(r: &'a Value, check: &str) -> Vec<&'a Value> {
    r["steps"].as_array().unwrap().iter().filter(|s| s["check"] == check).collect()
}

fn assert_nothing_left(d: &Daemon, smb_dir: &Path) {
    assert_eq!(cifs_mounts(), Vec::<String>::new(), "cifs mounts left");
    let left: Vec<_> =
        std::fs::read_dir(smb_dir).map(|r| r.flatten().map(|e| e.file_name()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "left in the SMB directory: {left:?}");
    let kubelet: Vec<_> = std::fs::read_dir(d.dir.join("kubelet")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(kubelet.is_empty(), "left in the kubelet directory: {kubelet:?}");
    assert!(!sessions().contains("127.0.0.1:3260"), "an iSCSI session left: {}", sessions());
}

#[test]
fn smb_and_iscsi_checks_pass_against_real_peers_and_leave_nothing() {
    let Some(_) = peers() else { return };
    assert!(!portal_known(), "the portal is known before the test");
    let (d, smb_dir) = daemon("conformance-remote");
    let out = run(&d, true);
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    let r: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {all}"));
    eprintln!("{r:#}");
    for (check, least) in [("smb", 7), ("smb-errors-are-named", 4), ("iscsi", 7)] {
        let s = steps(&r, check);
        assert!(s.len() >= least, "{check}: {s:#?}");
        for step in &s {
            assert_eq!(step["result"], "ok", "{check}: {step}\n{r:#}");
        }
    }
    let names: Vec<&str> = steps(&r, "iscsi").iter().map(|s| s["step"].as_str().unwrap()).collect();
    assert!(names[0].contains("127.0.0.1:3260 is new"), "{names:?}");
    assert!(names.iter().any(|n| n.starts_with("RemoveTargetPortal")), "{names:?}");
    for secret in [PASSWORD, CHAP_SECRET, "Conf,Pw"] {
        assert!(!all.contains(secret), "a secret in the output: {all}");
    }
    assert_eq!(out.status.code(), Some(0), "{all}");
    assert!(!portal_known(), "the portal this run added is left");
    assert_nothing_left(&d, &smb_dir);
    let _ = std::fs::remove_dir_all(&smb_dir);
}

/// A portal that was there before the run stays, and the row says so.
#[test]
fn a_portal_that_was_there_before_is_kept() {
    let Some(_) = peers() else { return };
    let add = iscsiadm(&["-m", "discovery", "-t", "sendtargets", "-p", "127.0.0.1:3260"]);
    assert!(add.status.success(), "{}", text(&add.stderr));
    let (d, smb_dir) = daemon("conformance-remote-kept");
    let out = run(&d, false);
    let table = text(&out.stdout);
    eprintln!("{table}");
    assert_eq!(out.status.code(), Some(0), "{table}{}", text(&out.stderr));
    assert!(table.contains("127.0.0.1:3260 was there before this run (it is kept)"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("iscsi") && l.contains("RemoveTargetPortal") && l.contains("skipped")));
    assert!(!table.contains(PASSWORD) && !table.contains(CHAP_SECRET), "{table}");
    assert!(portal_known(), "the portal that was there before is gone");
    assert_nothing_left(&d, &smb_dir);
    let del = iscsiadm(&["-m", "discoverydb", "-t", "sendtargets", "-p", "127.0.0.1:3260", "-o", "delete"]);
    assert!(del.status.success(), "{}", text(&del.stderr));
    let _ = std::fs::remove_dir_all(&smb_dir);
}
