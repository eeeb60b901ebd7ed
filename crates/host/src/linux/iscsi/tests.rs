//! The logic over a scripted iscsiadm and a scratch directory standing for sysfs and the node
//! records (this machine's kernel has no iSCSI; the real thing is tested in the storage VM by
//! crates/stack-tests/tests/iscsi_vm.rs).

use super::*;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const IQN: &str = "iqn.2024-01.org.example:disk1";
const SECRET: &str = "s3cret-Value#=x";
const MUTUAL: &str = "mutual-Secret-42";
const RECORD: &str = "# BEGIN RECORD 2.1.8\nnode.name = iqn.2024-01.org.example:disk1\nnode.tpgt = 1\n\
node.startup = automatic\nnode.session.auth.authmethod = None\nnode.session.auth.chap_algs = MD5\n\
node.conn[0].address = 10.0.0.5\nnode.conn[0].startup = automatic\n# END RECORD\n";

struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "csi-proxy-iscsi-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn paths(&self) -> Paths {
        Paths { sysfs: self.0.join("sys"), nodes: self.0.join("nodes"), mutual_secret: self.0.join("state/mutual") }
    }
    fn record(&self) -> PathBuf {
        self.0.join("nodes").join(IQN).join("10.0.0.5,3260,1/default")
    }
    fn put(&self, rel: &str, contents: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, contents).unwrap();
    }
    /// A session `id` to IQN at 10.0.0.5:3260, with the block devices `disks` (name, "maj:min").
    fn session(&self, id: u32, disks: &[(&str, &str)]) {
        self.put(&format!("sys/class/iscsi_session/session{id}/targetname"), &format!("{IQN}\n"));
        self.put(&format!("sys/class/iscsi_connection/connection{id}:0/persistent_address"), "10.0.0.5\n");
        self.put(&format!("sys/class/iscsi_connection/connection{id}:0/persistent_port"), "3260\n");
        std::fs::create_dir_all(self.0.join(format!("sys/class/iscsi_session/session{id}/device/target2:0:0")))
            .unwrap();
        for (i, (name, dev)) in disks.iter().enumerate() {
            self.disk(id, i, name, dev);
        }
    }
    fn disk(&self, id: u32, lun: usize, name: &str, dev: &str) {
        let base = format!("sys/class/iscsi_session/session{id}/device/target2:0:0/2:0:0:{lun}/block/{name}");
        std::fs::create_dir_all(self.0.join(base)).unwrap();
        self.put(&format!("sys/class/block/{name}/dev"), &format!("{dev}\n"));
    }
    fn end_session(&self, id: u32) {
        let _ = std::fs::remove_dir_all(self.0.join(format!("sys/class/iscsi_session/session{id}")));
        let _ = std::fs::remove_dir_all(self.0.join(format!("sys/class/iscsi_connection/connection{id}:0")));
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

type Respond = Box<dyn Fn(&[String]) -> Output + Send + Sync>;

/// A scripted iscsiadm: answers through `respond`, records every argv.
struct Script {
    calls: Mutex<Vec<Vec<String>>>,
    respond: Respond,
}

struct Shared(Arc<Script>);

impl Iscsiadm for Shared {
    fn run(&self, args: &[String]) -> Result<Output> {
        self.0.calls.lock().unwrap().push(args.to_vec());
        Ok((self.0.respond)(args))
    }
}

fn ok(stdout: &str) -> Output {
    Output { code: 0, stdout: stdout.into(), stderr: String::new() }
}

fn fail(code: i32, stderr: &str) -> Output {
    Output { code, stdout: String::new(), stderr: stderr.into() }
}

/// iscsiadm as a host with the portal 10.0.0.5:3260 and IQN's record; `login` answers logins.
fn standard(login: impl Fn(&[String]) -> Output + Send + Sync + 'static) -> Respond {
    Box::new(move |a: &[String]| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        match a.as_slice() {
            ["-m", "discoverydb"] => ok("10.0.0.5:3260 via sendtargets\n"),
            ["-m", "node"] => ok(&format!("10.0.0.5:3260,1 {IQN}\n10.0.0.6:3260,1 {IQN}\n")),
            ["-m", "node", "-T", _, "-p", _, "--login"] => login(&a.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            ["-m", "session", "-r", _, "--logout"] => ok(""),
            _ => fail(7, "unexpected call"),
        }
    })
}

fn backend(s: &Scratch, respond: Respond) -> (Iscsi, Arc<Script>) {
    let script = Arc::new(Script { calls: Mutex::new(Vec::new()), respond });
    let iscsi = Iscsi::new(Box::new(Shared(script.clone())), s.paths(), Duration::from_millis(300));
    (iscsi, script)
}

fn portal() -> TargetPortal {
    TargetPortal { address: "10.0.0.5".into(), port: 3260 }
}

fn chap(auth: AuthType) -> ConnectTarget {
    ConnectTarget {
        portal: portal(),
        iqn: IQN.into(),
        auth,
        chap_username: "alice".into(),
        chap_secret: Secret::new(SECRET),
    }
}

fn calls(script: &Script) -> Vec<String> {
    script.calls.lock().unwrap().iter().map(|c| c.join(" ")).collect()
}

fn assert_no_secret_in_argv(script: &Script) {
    for c in calls(script) {
        assert!(!c.contains(SECRET) && !c.contains(MUTUAL), "a secret in argv: {c}");
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn chap_credentials_reach_the_record_file_not_argv() {
    let s = Scratch::new();
    s.put("nodes/iqn.2024-01.org.example:disk1/10.0.0.5,3260,1/default", RECORD);
    let rec = s.record();
    let seen = Arc::new(Mutex::new(String::new()));
    let (seen2, rec2) = (seen.clone(), rec.clone());
    let (iscsi, script) = backend(
        &s,
        standard(move |_| {
            // What iscsiadm would read at login.
            *seen2.lock().unwrap() = std::fs::read_to_string(&rec2).unwrap();
            ok("")
        }),
    );
    iscsi.connect_target(&chap(AuthType::OneWayChap)).unwrap();
    let at_login = seen.lock().unwrap().clone();
    assert!(at_login.contains(&format!("\nnode.session.auth.password = {SECRET}\n")), "{at_login}");
    assert!(at_login.contains("\nnode.session.auth.authmethod = CHAP\n"), "{at_login}");
    assert!(at_login.contains("\nnode.session.auth.username = alice\n"), "{at_login}");
    assert_eq!(at_login.matches("node.session.auth.authmethod").count(), 1, "{at_login}");
    // Not persistent, as upstream's IsPersistent = false.
    assert!(at_login.contains("\nnode.startup = manual\n") && !at_login.contains("automatic"), "{at_login}");
    assert!(at_login.ends_with("# END RECORD\n") && at_login.contains("node.session.auth.chap_algs = MD5"));
    assert_eq!(mode(&rec), 0o600);
    assert!(calls(&script).contains(&format!("-m node -T {IQN} -p 10.0.0.5:3260 --login")), "{:?}", calls(&script));
    assert_no_secret_in_argv(&script);
}

#[test]
fn a_refused_login_is_permission_denied_without_the_secret_and_leaves_no_credentials() {
    let s = Scratch::new();
    s.put("nodes/iqn.2024-01.org.example:disk1/10.0.0.5,3260,1/default", RECORD);
    let (iscsi, script) = backend(
        &s,
        standard(|_| {
            fail(24, "iscsiadm: initiator reported error (24 - iSCSI login failed due to authorization failure)\n")
        }),
    );
    let err = iscsi.connect_target(&chap(AuthType::OneWayChap)).unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains(IQN) && msg.contains("authorization failure") && !msg.contains(SECRET), "{msg}");
    let record = std::fs::read_to_string(s.record()).unwrap();
    assert!(!record.contains(SECRET) && record.contains("node.session.auth.authmethod = None"), "{record}");
    assert_no_secret_in_argv(&script);
}

#[test]
fn connect_of_a_connected_target_does_not_log_in_again() {
    let s = Scratch::new();
    s.session(3, &[]);
    let (iscsi, script) = backend(&s, standard(|_| panic!("no login expected")));
    iscsi.connect_target(&chap(AuthType::None)).unwrap();
    assert!(calls(&script).iter().all(|c| !c.contains("--login")), "{:?}", calls(&script));
}

#[test]
fn connect_of_an_unknown_target_or_portal_is_not_found() {
    let s = Scratch::new();
    let (iscsi, _) = backend(&s, standard(|_| panic!("no login expected")));
    let mut req = chap(AuthType::None);
    req.iqn = "iqn.2024-01.org.example:other".into();
    let err = iscsi.connect_target(&req).unwrap_err();
    assert!(matches!(err, Error::NotFound(ref m) if m.contains("is not among the targets of portal")), "{err:?}");
    req.portal.address = "10.9.9.9".into();
    let err = iscsi.connect_target(&req).unwrap_err();
    assert!(matches!(err, Error::NotFound(ref m) if m.contains("does not exist")), "{err:?}");
}

#[test]
fn mutual_chap_needs_the_host_wide_secret_and_expects_the_target_under_its_iqn() {
    let s = Scratch::new();
    s.put("nodes/iqn.2024-01.org.example:disk1/10.0.0.5,3260,1/default", RECORD);
    let seen = Arc::new(Mutex::new(String::new()));
    let (seen2, rec2) = (seen.clone(), s.record());
    let (iscsi, script) = backend(
        &s,
        standard(move |_| {
            *seen2.lock().unwrap() = std::fs::read_to_string(&rec2).unwrap();
            ok("")
        }),
    );
    let err = iscsi.connect_target(&chap(AuthType::MutualChap)).unwrap_err();
    assert!(matches!(err, Error::FailedPrecondition(ref m) if m.contains("SetMutualChapSecret")), "{err:?}");
    iscsi.set_mutual_chap_secret(&Secret::new(MUTUAL)).unwrap();
    assert_eq!(mode(&s.paths().mutual_secret), 0o600);
    iscsi.connect_target(&chap(AuthType::MutualChap)).unwrap();
    let at_login = seen.lock().unwrap().clone();
    assert!(at_login.contains(&format!("\nnode.session.auth.password_in = {MUTUAL}\n")), "{at_login}");
    assert!(at_login.contains(&format!("\nnode.session.auth.username_in = {IQN}\n")), "{at_login}");
    assert!(at_login.contains(&format!("\nnode.session.auth.password = {SECRET}\n")), "{at_login}");
    assert_no_secret_in_argv(&script);
    // Cleared with an empty secret.
    iscsi.set_mutual_chap_secret(&Secret::new("")).unwrap();
    assert!(!s.paths().mutual_secret.exists());
}

#[test]
fn values_that_could_add_record_lines_are_refused_before_any_tool_runs() {
    let s = Scratch::new();
    let (iscsi, script) = backend(&s, standard(|_| panic!("no login expected")));
    type Change = Box<dyn Fn(&mut ConnectTarget)>;
    let cases: Vec<(&str, Change)> = vec![
        ("iqn newline", Box::new(|r| r.iqn = format!("{IQN}\nnode.startup = automatic"))),
        ("iqn slash", Box::new(|r| r.iqn = "iqn.2024-01.org.example:../../etc".into())),
        ("iqn syntax", Box::new(|r| r.iqn = "target1".into())),
        ("user newline", Box::new(|r| r.chap_username = "alice\nnode.session.auth.password_in = x".into())),
        ("user blank", Box::new(|r| r.chap_username = String::new())),
        ("secret newline", Box::new(|r| r.chap_secret = Secret::new(format!("{SECRET}\nnode.x = y")))),
        ("secret padded", Box::new(|r| r.chap_secret = Secret::new(format!(" {SECRET}")))),
        ("secret too long", Box::new(|r| r.chap_secret = Secret::new(SECRET.repeat(20)))),
        ("address", Box::new(|r| r.portal.address = "10.0.0.5 -o delete".into())),
        ("port", Box::new(|r| r.portal.port = 0)),
    ];
    for (what, change) in cases {
        let mut req = chap(AuthType::OneWayChap);
        change(&mut req);
        let err = iscsi.connect_target(&req).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{what}: {err:?}");
        assert!(!err.to_string().contains(SECRET), "{what}: {err}");
    }
    assert!(calls(&script).is_empty(), "{:?}", calls(&script));
    let err = iscsi.set_mutual_chap_secret(&Secret::new("a\nb")).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

#[test]
fn disconnect_logs_out_by_session_and_clears_the_credentials() {
    let s = Scratch::new();
    s.put(
        "nodes/iqn.2024-01.org.example:disk1/10.0.0.5,3260,1/default",
        &RECORD.replace("# END", &format!("node.session.auth.password = {SECRET}\n# END")),
    );
    s.session(4, &[]);
    s.session(9, &[]);
    // Another target's session on the same portal stays.
    s.put("sys/class/iscsi_session/session5/targetname", "iqn.2024-01.org.example:other\n");
    s.put("sys/class/iscsi_connection/connection5:0/persistent_address", "10.0.0.5\n");
    s.put("sys/class/iscsi_connection/connection5:0/persistent_port", "3260\n");
    let (iscsi, script) = backend(&s, standard(|_| ok("")));
    iscsi.disconnect_target(&portal(), IQN).unwrap();
    let c = calls(&script);
    assert!(c.contains(&"-m session -r 4 --logout".to_string()) && c.contains(&"-m session -r 9 --logout".to_string()));
    assert!(!c.iter().any(|c| c.contains("-r 5")), "{c:?}");
    let record = std::fs::read_to_string(s.record()).unwrap();
    assert!(!record.contains(SECRET), "{record}");
}

#[test]
fn disconnect_without_a_session_succeeds_but_an_unknown_portal_is_not_found() {
    let s = Scratch::new();
    s.put("nodes/iqn.2024-01.org.example:disk1/10.0.0.5,3260,1/default", RECORD);
    let (iscsi, script) = backend(&s, standard(|_| ok("")));
    iscsi.disconnect_target(&portal(), IQN).unwrap();
    iscsi.disconnect_target(&portal(), IQN).unwrap();
    assert!(calls(&script).iter().all(|c| !c.contains("--logout")));
    let err = iscsi.disconnect_target(&TargetPortal { address: "10.9.9.9".into(), port: 3260 }, IQN).unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
}

#[test]
fn target_disks_are_disk_group_numbers_and_wait_for_the_scan() {
    let s = Scratch::new();
    s.session(2, &[("sdc", "8:32"), ("sdb", "8:16")]);
    let (iscsi, _) = backend(&s, standard(|_| ok("")));
    assert_eq!(iscsi.get_target_disks(&portal(), IQN).unwrap(), vec![disk_number(8, 16), disk_number(8, 32)]);
    // A session whose LUN shows up a moment after the call started.
    s.end_session(2);
    s.session(7, &[]);
    let root = s.0.clone();
    let later = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        let s = Scratch(root);
        s.disk(7, 0, "sdd", "8:48");
        std::mem::forget(s);
    });
    assert_eq!(iscsi.get_target_disks(&portal(), IQN).unwrap(), vec![disk_number(8, 48)]);
    later.join().unwrap();
    // Not connected: no disks.
    s.end_session(7);
    assert_eq!(iscsi.get_target_disks(&portal(), IQN).unwrap(), Vec::<u32>::new());
}

#[test]
fn portals_are_discovery_records() {
    let s = Scratch::new();
    let added = Arc::new(Mutex::new(false));
    let added2 = added.clone();
    let (iscsi, script) = backend(
        &s,
        Box::new(move |a: &[String]| {
            let a: Vec<&str> = a.iter().map(String::as_str).collect();
            let mut added = added2.lock().unwrap();
            match a.as_slice() {
                ["-m", "discoverydb"] if *added => ok("10.0.0.5:3260 via sendtargets\nfd00::1:3261 via sendtargets\n"),
                ["-m", "discoverydb"] => fail(21, ""),
                [.., "-p", "10.0.0.5:3260", "-o", "new"] => {
                    *added = true;
                    ok("New discovery record for [10.0.0.5,3260] added.\n")
                }
                [.., "-p", "10.0.0.5:3260", "--discover", "-o", "new", "-o", "delete"] => ok(&format!(
                    "10.0.0.5:3260,1 {IQN}\n10.0.0.6:3260,1 {IQN}\n10.0.0.5:3260,1 iqn.2024-01.org.example:b\n"
                )),
                [.., "-p", "10.0.0.5:3260", "-o", "delete"] => {
                    *added = false;
                    ok("")
                }
                _ => fail(7, "unexpected call"),
            }
        }),
    );
    assert_eq!(iscsi.list_target_portals().unwrap(), vec![]);
    let err = iscsi.discover_target_portal(&portal()).unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err:?}");
    iscsi.add_target_portal(&portal()).unwrap();
    let n = calls(&script).len();
    iscsi.add_target_portal(&portal()).unwrap();
    assert!(calls(&script)[n..].iter().all(|c| !c.contains("-o new")), "idempotent add: {:?}", calls(&script));
    assert_eq!(
        iscsi.list_target_portals().unwrap(),
        vec![portal(), TargetPortal { address: "fd00::1".into(), port: 3261 }]
    );
    assert_eq!(iscsi.discover_target_portal(&portal()).unwrap(), vec![IQN, "iqn.2024-01.org.example:b"]);
    iscsi.remove_target_portal(&portal()).unwrap();
    // Again (a retry after it was removed): gone already is no error, and deletes nothing.
    let n = calls(&script).len();
    iscsi.remove_target_portal(&portal()).unwrap();
    assert!(calls(&script)[n..].iter().all(|c| !c.contains("-o delete")), "{:?}", calls(&script));
}

#[test]
fn a_portal_whose_discovery_fails_is_not_left_behind() {
    let s = Scratch::new();
    let (iscsi, script) = backend(
        &s,
        Box::new(|a: &[String]| match a.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            ["-m", "discoverydb"] => fail(21, ""),
            [.., "--discover", "-o", "new", "-o", "delete"] => fail(
                11,
                "iscsiadm: cannot make connection to 10.0.0.5: Connection refused\n\
                 iscsiadm: Could not perform SendTargets discovery: iSCSI PDU timed out\n",
            ),
            _ => ok(""),
        }),
    );
    let err = iscsi.add_target_portal(&portal()).unwrap_err();
    assert!(matches!(err, Error::Unavailable(ref m) if m.contains("ISCSI_ERR_PDU_TIMEOUT")), "{err:?}");
    assert_eq!(calls(&script).last().unwrap(), "-m discoverydb -t sendtargets -p 10.0.0.5:3260 -o delete");
}

#[test]
fn exit_codes_map_to_error_kinds_with_bounded_texts() {
    let long = "x".repeat(100_000);
    let e = tool_error(&fail(code::ISCSID_NOTCONN, &long), "connecting");
    assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
    assert!(e.to_string().len() < 1200, "{}", e.to_string().len());
    assert!(matches!(tool_error(&fail(code::LOGIN_AUTH_FAILED, ""), "x"), Error::PermissionDenied(_)));
    assert!(matches!(tool_error(&fail(code::NO_OBJS_FOUND, ""), "x"), Error::NotFound(_)));
    assert!(matches!(tool_error(&fail(code::TRANS_NOT_FOUND, ""), "x"), Error::FailedPrecondition(_)));
    assert!(matches!(tool_error(&fail(1, ""), "x"), Error::Internal(_)));
}

#[test]
fn record_settings_replace_earlier_values_only() {
    let updated = with_settings(
        &RECORD.replace("# END", "node.session.auth.password_in = old\nnode.session.auth.username_in = old\n# END"),
        &[("node.session.auth.authmethod", "CHAP")],
    )
    .unwrap();
    assert!(!updated.contains("old") && !updated.contains("automatic"), "{updated}");
    assert!(updated.contains("node.session.auth.chap_algs = MD5\n") && updated.contains("node.tpgt = 1\n"));
    assert!(updated.ends_with("node.session.auth.authmethod = CHAP\n# END RECORD\n"), "{updated}");
    assert_eq!(with_settings("node.name = x\n", &[]), None);
}

#[test]
fn names_and_portals() {
    for good in [IQN, "iqn.2001-04.com.example", "eui.02004567A425678D", "naa.52004567BA64678D"] {
        check_name(good).unwrap();
    }
    for bad in ["", "iqn.", "iqn.2024-1.org.x", "eui.0200", "iqn.2024-01.org.x/y", "iqn.2024-01.org.x y"] {
        assert!(check_name(bad).is_err(), "{bad}");
    }
    let p = |a: &str| Portal::new(&TargetPortal { address: a.into(), port: 3260 });
    assert_eq!(p("[fd00::1]").unwrap().arg(), "[fd00::1]:3260");
    assert_eq!(p("Storage.Example").unwrap().arg(), "storage.example:3260");
    for bad in ["", "-o", "a b", "a;b", "host_1", "x..y"] {
        assert!(p(bad).is_err(), "{bad}");
    }
    assert_eq!(
        parse_nodes("[fd00::1]:3260,1 iqn.2024-01.x:y\n10.0.0.5:3260,7 eui.02004567A425678D\ngarbage\n"),
        vec![
            Node { ip: "fd00::1".parse().unwrap(), port: 3260, tpgt: "1".into(), iqn: "iqn.2024-01.x:y".into() },
            Node { ip: "10.0.0.5".parse().unwrap(), port: 3260, tpgt: "7".into(), iqn: "eui.02004567A425678D".into() },
        ]
    );
}

/// Removing a portal waits for a login through it: the removal deletes the node records the login
/// reads and fills with credentials.
#[test]
fn a_portal_is_not_removed_while_a_login_through_it_runs() {
    let s = Scratch::new();
    s.put("nodes/iqn.2024-01.org.example:disk1/10.0.0.5,3260,1/default", RECORD);
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (entered_tx, go_rx) = (Mutex::new(entered_tx), Mutex::new(go_rx));
    let login = standard(move |_| {
        entered_tx.lock().unwrap().send(()).unwrap();
        go_rx.lock().unwrap().recv().unwrap();
        ok("")
    });
    let respond: Respond =
        Box::new(move |a: &[String]| if a.last().is_some_and(|x| x == "delete") { ok("") } else { login(a) });
    let (iscsi, script) = backend(&s, respond);
    std::thread::scope(|scope| {
        let connect = scope.spawn(|| iscsi.connect_target(&chap(AuthType::None)));
        entered_rx.recv().unwrap();
        let remove = scope.spawn(|| iscsi.remove_target_portal(&portal()));
        // However long the login takes, the removal does not start meanwhile.
        std::thread::sleep(Duration::from_millis(200));
        let during = calls(&script);
        go_tx.send(()).unwrap();
        connect.join().unwrap().unwrap();
        remove.join().unwrap().unwrap();
        assert!(
            during.iter().all(|c| !c.ends_with("-o delete")),
            "the portal was removed during the login: {during:?}"
        );
    });
    let all = calls(&script);
    let login_at = all.iter().position(|c| c.ends_with("--login")).unwrap();
    let delete_at = all.iter().position(|c| c.ends_with("-o delete")).unwrap();
    assert!(login_at < delete_at, "{all:?}");
}

#[test]
fn one_portal_spelled_two_ways_takes_one_turn() {
    // "::1" and "0:0:0:0:0:0:0:1" are one portal: the second call waits for the first, as it would
    // if both were spelled alike (before, the turns were keyed by the spelling).
    let s = Scratch::new();
    let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let (entered_tx, go_rx) = (Mutex::new(entered_tx), Mutex::new(go_rx));
    let first = std::sync::atomic::AtomicBool::new(true);
    let respond: Respond = Box::new(move |_: &[String]| {
        if first.swap(false, std::sync::atomic::Ordering::SeqCst) {
            entered_tx.lock().unwrap().send(()).unwrap();
            go_rx.lock().unwrap().recv().unwrap();
        }
        ok("[::1]:3260 via sendtargets\n")
    });
    let (iscsi, script) = backend(&s, respond);
    let spelled = |address: &str| TargetPortal { address: address.into(), port: 3260 };
    std::thread::scope(|scope| {
        let a = scope.spawn(|| iscsi.discover_target_portal(&spelled("::1")));
        entered_rx.recv().unwrap();
        let b = scope.spawn(|| iscsi.discover_target_portal(&spelled("0:0:0:0:0:0:0:1")));
        std::thread::sleep(Duration::from_millis(200));
        let during = calls(&script);
        go_tx.send(()).unwrap();
        let _ = (a.join().unwrap(), b.join().unwrap());
        assert_eq!(during.len(), 1, "the second spelling ran while the first held the portal: {during:?}");
    });
}

#[test]
fn a_refused_chap_user_name_is_not_quoted() {
    // The user name is half of the credential: its error names the field, not the value.
    let s = Scratch::new();
    let (iscsi, script) = backend(&s, standard(|_| ok("")));
    let mut req = chap(AuthType::OneWayChap);
    req.chap_username = "alice-private\u{7}".into();
    let e = iscsi.connect_target(&req).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    assert!(e.to_string().contains("the CHAP user name") && !e.to_string().contains("alice-private"), "{e}");
    assert!(calls(&script).is_empty(), "no tool ran");
}
