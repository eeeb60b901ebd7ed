use super::*;
use crate::testing::traced;
use crate::windows::attr::DIRECTORY;
use crate::windows::script::{returned, Answer, Gate, Script};
use std::sync::Mutex;

const SRV: &str = r"\\srv\share";
const MAP: &str = r#"\\H\ROOT\Microsoft\Windows\SMB:MSFT_SmbGlobalMapping.RemotePath="\\\\srv\\share""#;
const LOCAL: &str = r"C:\var\lib\kubelet\pods\p\volumes\v";
const PASSWORD: &str = "Zebra-Quartz-7781";

/// Records the secrets passed to WMI (the script's log shows them redacted) and delegates.
pub(crate) struct Capture {
    pub script: Arc<Script>,
    pub secrets: Mutex<Vec<(&'static str, String)>>,
}

impl Capture {
    pub fn new(script: Arc<Script>) -> Self {
        Capture { script, secrets: Mutex::new(Vec::new()) }
    }
    pub fn secrets(&self) -> Vec<(&'static str, String)> {
        self.secrets.lock().unwrap().clone()
    }
}

impl Wmi for Capture {
    fn query(&self, query: &Query) -> Result<Vec<Row>> {
        self.script.query(query)
    }
    fn call(&self, ns: Namespace, target: &str, method: &str, args: &[(&'static str, Value)]) -> Result<Row> {
        for (name, v) in args {
            if let Value::Secret(s) = v {
                self.secrets.lock().unwrap().push((name, s.expose().to_owned()));
            }
        }
        self.script.call(ns, target, method, args)
    }
    fn associators(
        &self,
        ns: Namespace,
        path: &str,
        assoc: &'static str,
        result: &'static str,
        props: &[&'static str],
    ) -> Result<Vec<Row>> {
        self.script.associators(ns, path, assoc, result, props)
    }
}

type MakeErr = fn(String) -> Error;

/// A scripted [`ShareLinks`] with its own log.
#[derive(Default)]
struct Links {
    log: Mutex<Vec<String>>,
    check_err: Option<MakeErr>,
    link_err: Option<MakeErr>,
    /// `check` finds the link to the target already there.
    linked: bool,
}

impl Links {
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl ShareLinks for Links {
    fn check(&self, local: &str, target: &str) -> Result<bool> {
        self.log.lock().unwrap().push(format!("check {local} {target}"));
        self.check_err.map_or(Ok(self.linked), |e| Err(e(format!("{local} already exists"))))
    }
    fn link(&self, local: &str, target: &str) -> Result<()> {
        self.log.lock().unwrap().push(format!("link {local} {target}"));
        self.link_err.map_or(Ok(()), |e| Err(e(format!("creating link {local} to {target}: refused"))))
    }
}

struct Fixture {
    script: Arc<Script>,
    wmi: Arc<Capture>,
    links: Arc<Links>,
    smb: Smb,
}

fn fixture(links: Links) -> Fixture {
    let script = Arc::new(Script::new());
    let wmi = Arc::new(Capture::new(script.clone()));
    let links = Arc::new(links);
    let smb = Smb::new(script.clone(), wmi.clone(), links.clone());
    Fixture { script, wmi, links, smb }
}

fn find(root: &str) -> Query {
    Query::select(Namespace::Smb, "MSFT_SmbGlobalMapping", &["RemotePath", "Status", "LocalPath"])
        .eq("RemotePath", root)
}

fn find_line(root: &str) -> String {
    format!("query {}", find(root).wql().unwrap())
}

fn mapping_row(status: u32) -> Row {
    Row::new("MSFT_SmbGlobalMapping", MAP).with("RemotePath", SRV).with("Status", status).with("LocalPath", "")
}

fn create_line(root: &str, privacy: bool, credential: bool) -> String {
    let mut args = vec![("RemotePath", Value::from(root)), ("RequirePrivacy", Value::Bool(privacy))];
    if credential {
        args.push(("Credential", Value::Secret(Secret::new("x"))));
    }
    format!("call MSFT_SmbGlobalMapping Create {args:?}")
}

fn remove_line() -> String {
    format!("call {MAP} Remove [(\"Force\", true)]")
}

fn request(remote: &str, local: &str, user: &str) -> SmbMapping {
    SmbMapping {
        remote_path: remote.into(),
        local_path: local.into(),
        username: user.into(),
        password: Secret::new(if user.is_empty() { "" } else { PASSWORD }),
        require_privacy: true,
    }
}

#[test]
fn share_roots_and_link_targets() {
    let cases = [
        (r"\\srv\share", r"\\srv\share", r"\\?\UNC\srv\share\"),
        (r"\\SRV\Share", r"\\srv\share", r"\\?\UNC\SRV\Share\"),
        (r"\\Srv\Share\Sub\Dir", r"\\srv\share", r"\\?\UNC\Srv\Share\Sub\Dir\"),
        (r"\\srv\share\sub\", r"\\srv\share", r"\\?\UNC\srv\share\sub\"),
        (r"\\\srv\\share\\a", r"\\srv\share", r"\\?\UNC\srv\share\a\"),
        (r"\\10.0.0.5\Vol$", r"\\10.0.0.5\vol$", r"\\?\UNC\10.0.0.5\Vol$\"),
        (r"\\SRV\ÄRGER", r"\\srv\ärger", r"\\?\UNC\SRV\ÄRGER\"),
        (r"\\srv\o'brien", r"\\srv\o'brien", r"\\?\UNC\srv\o'brien\"),
    ];
    for (remote, root, target) in cases {
        assert_eq!(share_root(remote).unwrap(), root, "{remote}");
        assert_eq!(link_target(remote).unwrap(), target, "{remote}");
    }
    for bad in [
        "",
        r"\\",
        r"\\srv",
        r"\\srv\",
        r"\\srv\share\..\other",
        r"\\srv\.\share",
        r"\\?\UNC\srv\share",
        r"\\srv\sh*re",
        "\\\\srv\\sh\u{1}re",
    ] {
        let err = share_root(bad).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{bad:?}: {err:?}");
        assert!(err.to_string().contains(&format!("remote path {bad:?}")), "{err}");
        assert!(link_target(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn credentials_escape_the_user_name_only() {
    let cases = [
        ("user", "pw", "user:pw"),
        (r"DOMAIN\user", "pw", r"DOMAIN\\user:pw"),
        ("a:b", "pw", r"a\:b:pw"),
        (r"a\:b", "pw", r"a\\\:b:pw"),
        ("user", r"p:w\x", r"user:p:w\x"),
    ];
    for (user, pw, want) in cases {
        assert_eq!(credential(user, &Secret::new(pw)).expose(), want, "{user} {pw}");
    }
}

#[test]
fn a_fresh_mapping_without_credentials() {
    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![]).on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    f.smb.new_smb_global_mapping(&request(r"\\SRV\Share\Sub", LOCAL, "")).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.log(), [find_line(SRV), create_line(SRV, true, false)]);
    assert!(f.wmi.secrets().is_empty());
    assert_eq!(
        f.links.log(),
        [format!(r"check {LOCAL} \\?\UNC\SRV\Share\Sub\"), format!(r"link {LOCAL} \\?\UNC\SRV\Share\Sub\")]
    );
}

#[test]
fn a_retried_call_finds_its_link_and_still_makes_sure_of_the_mapping() {
    // The mapping went away since the first call (a reboot); the link is still there.
    let f = fixture(Links { linked: true, ..Links::default() });
    f.script.on_query(&find(SRV), vec![]).on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    f.smb.new_smb_global_mapping(&request(r"\\SRV\Share\Sub", LOCAL, "")).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.log(), [find_line(SRV), create_line(SRV, true, false)]);
    assert_eq!(f.links.log(), [format!(r"check {LOCAL} \\?\UNC\SRV\Share\Sub\")], "no second link");
}

#[test]
fn a_fresh_mapping_with_credentials() {
    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![]).on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc:k8s")).unwrap();
    f.script.assert_all_scripted();
    let create = create_line(SRV, true, true);
    assert!(create.ends_with(r#"("Credential", <redacted>)]"#), "{create}");
    assert_eq!(f.script.log(), [find_line(SRV), create]);
    assert_eq!(f.wmi.secrets(), [("Credential", format!(r"CORP\\svc\:k8s:{PASSWORD}"))]);
}

#[test]
fn require_privacy_is_passed_as_configured() {
    for privacy in [false, true] {
        let f = fixture(Links::default());
        f.script.on_query(&find(SRV), vec![]).on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
        let mut m = request(SRV, "", "");
        m.require_privacy = privacy;
        f.smb.new_smb_global_mapping(&m).unwrap();
        assert_eq!(f.script.log(), [find_line(SRV), create_line(SRV, privacy, false)]);
        assert!(f.links.log().is_empty(), "no local path, no link");
    }
}

#[test]
fn a_healthy_mapping_is_kept() {
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![mapping_row(0)])
        .on(format!(r"attributes {SRV}\"), Answer::Attributes(Some(DIRECTORY)))
        .on(format!(r"connect_as {SRV}"), Answer::Done);
    f.smb.new_smb_global_mapping(&request(r"\\srv\share\a", LOCAL, "u")).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.log(), [find_line(SRV), format!(r"attributes {SRV}\"), format!(r"connect_as {SRV} u")]);
    assert_eq!(f.links.log()[1], format!(r"link {LOCAL} \\?\UNC\srv\share\a\"));
}

#[test]
fn an_ok_but_unreachable_mapping_is_recreated() {
    const ERROR_LOGON_FAILURE: i32 = 1326;
    let unreachable = [Answer::Win32Error(ERROR_LOGON_FAILURE), Answer::Attributes(None)];
    for answer in unreachable {
        let f = fixture(Links::default());
        f.script
            .on_query(&find(SRV), vec![mapping_row(0)])
            .on(format!(r"attributes {SRV}\"), answer)
            .on_call(MAP, "Remove", returned(0))
            .on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
        f.smb.new_smb_global_mapping(&request(SRV, "", "u")).unwrap();
        f.script.assert_all_scripted();
        assert_eq!(
            f.script.log(),
            [find_line(SRV), format!(r"attributes {SRV}\"), remove_line(), create_line(SRV, true, true)]
        );
    }
}

/// A mapping made before this process started (a restart) whose share answers: its credentials
/// are unknown here. The script answers the connection the backend makes to check them.
fn restarted(checks: Vec<Answer>) -> Fixture {
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![mapping_row(status::OK)])
        .on(format!(r"attributes {SRV}\"), Answer::Attributes(Some(DIRECTORY)));
    for answer in checks {
        f.script.on(format!(r"connect_as {SRV}"), answer);
    }
    f
}

const ERROR_LOGON_FAILURE: i32 = 1326;

#[test]
fn after_a_restart_a_wrong_password_is_refused_and_the_right_one_then_taken() {
    let f = restarted(vec![Answer::Win32Error(ERROR_LOGON_FAILURE), Answer::Done]);
    let wrong = SmbMapping { password: Secret::new("Wrong-Secret-42"), ..request(SRV, LOCAL, r"CORP\svc") };
    let (r, lines) = traced(|| f.smb.new_smb_global_mapping(&wrong));
    let err = r.unwrap_err();
    // As Create answers a wrong password: PermissionDenied, the password nowhere.
    assert!(matches!(&err, Error::PermissionDenied(m) if m.contains(SRV) && m.contains("1326")), "{err:?}");
    for text in lines.iter().chain([&err.to_string(), &format!("{err:?}")]) {
        assert!(!text.contains("Wrong-Secret"), "{text}");
    }
    // Checked with the server; the mapping neither removed nor created, nothing linked.
    let check = format!(r"connect_as {SRV} CORP\svc");
    assert_eq!(f.script.log(), [find_line(SRV), format!(r"attributes {SRV}\"), check.clone()]);
    assert_eq!(f.links.log(), [format!(r"check {LOCAL} \\?\UNC\srv\share\")]);
    // The right one is checked too, then linked.
    f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.calls("connect_as").len(), 2);
    assert!(f.script.calls("call ").is_empty(), "{:?}", f.script.log());
    assert_eq!(f.links.log().last().unwrap(), &format!(r"link {LOCAL} \\?\UNC\srv\share\"));
}

#[test]
fn after_a_restart_the_right_password_is_checked_then_another_user_refused_naming_the_mappings() {
    let f = restarted(vec![Answer::Done]);
    f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap();
    assert_eq!(f.script.calls("connect_as"), [format!(r"connect_as {SRV} CORP\svc")]);
    let other = r"C:\var\lib\kubelet\pods\q\volumes\v";
    let err = f.smb.new_smb_global_mapping(&request(SRV, other, r"CORP\bob")).unwrap_err();
    // Names the user the mapping is for, the code Windows would answer, and what to do.
    assert!(
        matches!(&err, Error::AlreadyExists(m) if m.contains(r#"for user "CORP\\svc", not "CORP\\bob""#)
            && m.contains("1219") && m.contains("hint:")),
        "{err:?}"
    );
    // Known now: not checked again; user names compare without case.
    f.smb.new_smb_global_mapping(&request(SRV, other, r"corp\SVC")).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.calls("connect_as").len(), 1, "{:?}", f.script.log());
    assert!(f.script.calls("call ").is_empty(), "{:?}", f.script.log());
    assert_eq!(f.links.log().iter().filter(|l| l.starts_with("link ")).count(), 2);
}

#[test]
fn a_mapping_made_here_is_not_checked_again_and_keeps_its_credentials() {
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![])
        .on_query(&find(SRV), vec![mapping_row(status::OK)])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0))
        .on(format!(r"attributes {SRV}\"), Answer::Attributes(Some(DIRECTORY)))
        .on(format!(r"connect_as {SRV}"), Answer::Win32Error(ERROR_LOGON_FAILURE));
    f.smb.new_smb_global_mapping(&request(SRV, "", r"CORP\svc")).unwrap();
    f.smb.new_smb_global_mapping(&request(SRV, "", r"CORP\svc")).unwrap();
    assert!(f.script.calls("connect_as").is_empty(), "{:?}", f.script.log());
    // The same user with a password the server refuses: refused as Create refuses it.
    let wrong = SmbMapping { password: Secret::new("Wrong-Secret-42"), ..request(SRV, "", r"CORP\svc") };
    let err = f.smb.new_smb_global_mapping(&wrong).unwrap_err();
    assert!(matches!(&err, Error::PermissionDenied(m) if m.contains("ERROR_LOGON_FAILURE")), "{err:?}");
    assert!(!format!("{err:?}").contains("Wrong-Secret"), "{err:?}");
    f.script.assert_all_scripted();
    assert_eq!(f.script.calls("connect_as"), [format!(r"connect_as {SRV} CORP\svc")]);
    assert!(f.script.calls(&remove_line()).is_empty(), "kept: {:?}", f.script.log());
}

/// A mapping to the same remote with the same user is reused, not refused: a rotated password
/// the server accepts is checked once and then taken as the mapping's.
#[test]
fn the_same_user_with_a_rotated_password_reuses_the_mapping() {
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![])
        .on_query(&find(SRV), vec![mapping_row(status::OK)])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0))
        .on(format!(r"attributes {SRV}\"), Answer::Attributes(Some(DIRECTORY)))
        .on(format!(r"connect_as {SRV}"), Answer::Done);
    f.smb.new_smb_global_mapping(&request(SRV, "", r"CORP\svc")).unwrap();
    let rotated = SmbMapping { password: Secret::new("Rotated-Secret-43"), ..request(SRV, LOCAL, r"CORP\svc") };
    f.smb.new_smb_global_mapping(&rotated).unwrap();
    f.smb.new_smb_global_mapping(&rotated).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.calls("connect_as"), [format!(r"connect_as {SRV} CORP\svc")], "checked once");
    assert_eq!(f.script.calls("call ").len(), 1, "one Create, no Remove: {:?}", f.script.log());
    assert_eq!(f.links.log().iter().filter(|l| l.starts_with("link ")).count(), 2);
}

#[test]
fn after_a_restart_a_failed_check_says_why_and_a_mapping_without_user_is_not_checked() {
    for (code, ok) in [
        (53, (|e| matches!(e, Error::Unavailable(_))) as fn(&Error) -> bool),
        (67, |e| matches!(e, Error::NotFound(_))),
        (1331, |e| matches!(e, Error::PermissionDenied(_))),
        (1219, |e| matches!(e, Error::AlreadyExists(_))),
        (31, |e| matches!(e, Error::Internal(_))),
    ] {
        let f = restarted(vec![Answer::Win32Error(code)]);
        let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, "u")).unwrap_err();
        assert!(ok(&err) && err.to_string().contains("checking the credentials"), "{code}: {err:?}");
        assert!(f.script.calls("call ").is_empty() && f.links.log().len() == 1, "{:?}", f.script.log());
    }
    let f = restarted(vec![]);
    f.smb.new_smb_global_mapping(&request(SRV, LOCAL, "")).unwrap();
    f.script.assert_all_scripted();
    assert!(f.script.calls("connect_as").is_empty());
}

#[test]
fn a_mapping_not_ok_is_recreated_without_probing() {
    for st in [status::DISCONNECTED, status::UNAVAILABLE, status::RECONNECTING] {
        let f = fixture(Links::default());
        f.script.on_query(&find(SRV), vec![mapping_row(st)]).on_call(MAP, "Remove", returned(0)).on_call(
            "MSFT_SmbGlobalMapping",
            "Create",
            returned(0),
        );
        f.smb.new_smb_global_mapping(&request(SRV, "", "")).unwrap();
        f.script.assert_all_scripted();
        assert_eq!(f.script.log(), [find_line(SRV), remove_line(), create_line(SRV, true, false)], "status {st}");
    }
}

#[test]
fn a_failed_removal_of_a_broken_mapping_stops_before_create() {
    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![mapping_row(status::DISCONNECTED)]).on_call(MAP, "Remove", returned(2));
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, "")).unwrap_err().to_string();
    assert!(err.contains(SRV) && err.contains("Remove returned 2"), "{err}");
    assert_eq!(f.script.log(), [find_line(SRV), remove_line()]);
    assert_eq!(f.links.log(), [format!(r"check {LOCAL} \\?\UNC\srv\share\")], "no link after a failure");
}

#[test]
fn a_bad_local_path_fails_before_any_wmi_call() {
    let f = fixture(Links { check_err: Some(Error::AlreadyExists), ..Links::default() });
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, "u")).unwrap_err();
    assert!(matches!(&err, Error::AlreadyExists(m) if m.contains(LOCAL)), "{err:?}");
    assert!(f.script.log().is_empty(), "{:?}", f.script.log());
    assert_eq!(f.links.log(), [format!(r"check {LOCAL} \\?\UNC\srv\share\")]);

    let f = fixture(Links::default());
    let err = f.smb.new_smb_global_mapping(&request(r"\\srv\share\..\x", LOCAL, "u")).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(f.script.log().is_empty() && f.links.log().is_empty());
}

#[test]
fn a_failed_link_removes_the_mapping_this_call_made() {
    let f = fixture(Links { link_err: Some(Error::PermissionDenied), ..Links::default() });
    f.script
        .on_query(&find(SRV), vec![])
        .on_query(&find(SRV), vec![mapping_row(0)])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0))
        .on_call(MAP, "Remove", returned(0));
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, "u")).unwrap_err();
    assert!(matches!(&err, Error::PermissionDenied(m) if m.contains(LOCAL)), "{err:?}");
    f.script.assert_all_scripted();
    assert_eq!(f.script.log(), [find_line(SRV), create_line(SRV, true, true), find_line(SRV), remove_line()]);
}

#[test]
fn a_failed_rollback_is_reported_with_the_link_error() {
    let f = fixture(Links { link_err: Some(Error::PermissionDenied), ..Links::default() });
    f.script
        .on_query(&find(SRV), vec![])
        .on_query(&find(SRV), vec![mapping_row(0)])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0))
        .on_call(MAP, "Remove", returned(5));
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, "")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::PermissionDenied(_)), "the link's error kind is kept: {err:?}");
    assert!(
        msg.contains("creating link") && msg.contains("could not be removed") && msg.contains("returned 5"),
        "{msg}"
    );
}

#[test]
fn a_failed_link_keeps_a_mapping_that_was_there() {
    let f = fixture(Links { link_err: Some(Error::AlreadyExists), ..Links::default() });
    f.script
        .on_query(&find(SRV), vec![mapping_row(0)])
        .on(format!(r"attributes {SRV}\"), Answer::Attributes(Some(DIRECTORY)))
        .on(format!(r"connect_as {SRV}"), Answer::Done);
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, "u")).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
    f.script.assert_all_scripted();
    assert_eq!(f.script.log(), [find_line(SRV), format!(r"attributes {SRV}\"), format!(r"connect_as {SRV} u")]);
}

#[test]
fn a_create_failure_names_the_code_and_the_root() {
    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![]).on_call("MSFT_SmbGlobalMapping", "Create", returned(87));
    let err = f.smb.new_smb_global_mapping(&request(r"\\SRV\share\x", LOCAL, "u")).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert!(
        msg.contains(SRV) && msg.contains("Create returned 87") && msg.contains("ERROR_INVALID_PARAMETER"),
        "{msg}"
    );
    assert!(msg.contains("hint: check the source is"), "{msg}");
    assert_eq!(f.links.log(), [format!(r"check {LOCAL} \\?\UNC\SRV\share\x\")], "no link without a mapping");
}

fn denied(e: &Error) -> bool {
    matches!(e, Error::PermissionDenied(_))
}
fn not_found(e: &Error) -> bool {
    matches!(e, Error::NotFound(_))
}
fn unavailable(e: &Error) -> bool {
    matches!(e, Error::Unavailable(_))
}
fn invalid(e: &Error) -> bool {
    matches!(e, Error::InvalidArgument(_))
}

type Named = (i32, &'static str, &'static str, fn(&Error) -> bool);
/// The codes users saw bare (csi-driver-smb#520, csi-proxy#206): each has its kind, its name,
/// plain words and a hint, from Create and from the credential check alike.
const NAMED: [Named; 6] = [
    (53, "ERROR_BAD_NETPATH", "port 445", unavailable),
    (67, "ERROR_BAD_NET_NAME", "share's name", not_found),
    (86, "ERROR_INVALID_PASSWORD", "password in the volume's secret", denied),
    (87, "ERROR_INVALID_PARAMETER", "user name DOMAIN", invalid),
    (1311, "ERROR_NO_LOGON_SERVERS", "domain controller", unavailable),
    (1326, "ERROR_LOGON_FAILURE", "user name (DOMAIN", denied),
];

#[test]
fn each_named_code_from_create_has_its_kind_its_name_and_a_hint() {
    for (code, name, hint, kind) in NAMED {
        let f = fixture(Links::default());
        f.script.on_query(&find(SRV), vec![]).on_call("MSFT_SmbGlobalMapping", "Create", returned(code as u32));
        let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err();
        let m = err.to_string();
        assert!(kind(&err), "{code}: {err:?}");
        assert!(m.contains(&format!("(Windows error {code}, {name}): ")), "{code}: {m}");
        assert!(m.contains("hint: ") && m.contains(hint), "{code}: {m}");
        assert!(!m.contains(PASSWORD), "{m}");
    }
}

#[test]
fn each_named_code_from_the_credential_check_has_its_kind_its_name_and_a_hint() {
    for (code, name, hint, kind) in NAMED {
        let f = restarted(vec![Answer::Win32Error(code)]);
        let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err();
        let m = err.to_string();
        assert!(kind(&err) && m.contains("checking the credentials for"), "{code}: {err:?}");
        assert!(m.contains(&format!("(Windows error {code}, {name}): ")) && m.contains(hint), "{code}: {m}");
        assert!(f.script.calls("call ").is_empty() && f.links.log().len() == 1, "{:?}", f.script.log());
    }
}

/// WNetAddConnection2W's ERROR_EXTENDED_ERROR says only "ask WNetGetLastError": the provider's
/// code, text and name are what the caller sees, bounded, and withheld if they quote the password.
#[test]
fn an_extended_error_carries_the_providers_code_and_text() {
    let provider = |text: String| {
        Answer::Provider(crate::windows::ProviderError {
            code: 0xC000_006D,
            text,
            provider: "Microsoft Windows Network".into(),
        })
    };
    let f = restarted(vec![provider("The server refused the session setup.".into())]);
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err();
    let m = err.to_string();
    assert!(matches!(err, Error::Internal(_)), "{err:?}");
    assert!(m.contains("(Windows error 1208, ERROR_EXTENDED_ERROR)"), "{m}");
    assert!(
        m.contains(r#"the network provider "Microsoft Windows Network" reported error 3221225581: "The server refused the session setup.""#),
        "{m}"
    );
    // A provider's text is quoted bounded.
    let f = restarted(vec![provider("x".repeat(100_000))]);
    let m = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err().to_string();
    assert!(m.len() < 2000 && m.contains("more bytes cut"), "{} bytes", m.len());
    // One that quotes the password is withheld.
    let f = restarted(vec![provider(format!("bad password {PASSWORD}"))]);
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err();
    assert!(!format!("{err:?}").contains(PASSWORD) && err.to_string().contains("withheld"), "{err:?}");
}

fn connections(host: &str) -> Query {
    Query::select(Namespace::Smb, "MSFT_SmbConnection", &["ServerName", "ShareName", "UserName", "Credential"])
        .eq("ServerName", host)
}

fn connection(share: &str, credential: &str) -> Row {
    Row::new("MSFT_SmbConnection", format!("conn-{share}-{credential}"))
        .with("ServerName", "srv")
        .with("ShareName", share)
        .with("UserName", r"NT AUTHORITY\SYSTEM")
        .with("Credential", credential)
}

/// Create's 1219 (azurefile#2974, Azure/AKS#5612) names the connections to that server as other
/// users, a few of them, so the operator knows which mapping is in the way.
#[test]
fn create_answering_1219_names_the_other_connections_and_their_users() {
    let f = fixture(Links::default());
    let others: Vec<Row> = ["other", "third", "fourth", "fifth"].iter().map(|s| connection(s, r"CORP\alice")).collect();
    f.script
        .on_query(&find(SRV), vec![])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(1219))
        .on_query(&connections("srv"), others);
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err();
    let m = err.to_string();
    assert!(matches!(err, Error::AlreadyExists(_)), "{err:?}");
    assert!(m.contains("(Windows error 1219, ERROR_SESSION_CREDENTIAL_CONFLICT)"), "{m}");
    assert!(m.contains(r#"connected as \\srv\other as "CORP\\alice", \\srv\third as "CORP\\alice""#), "{m}");
    assert!(m.contains("and 1 more") && m.contains("hint: map every share") && m.contains("returned 1219"), "{m}");
    assert!(!m.contains(PASSWORD), "{m}");
    f.script.assert_all_scripted();
    assert_eq!(f.links.log().len(), 1, "nothing linked");
    // The connections can't be listed: still the plain 1219 with its hint.
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(1219))
        .on("query ", Answer::WmiError(Error::internal, "provider failed".into()));
    let m = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err().to_string();
    assert!(m.contains("1219") && m.contains("no connection to the server as another user was found"), "{m}");
}

/// Create's 1219 when the share is mapped already for this very user (made meanwhile, or not
/// seen by the first query): the mapping is reused once the credentials are checked.
#[test]
fn create_answering_1219_reuses_a_mapping_of_the_share_for_the_same_user() {
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(1219))
        .on_query(&connections("srv"), vec![connection("other", r"CORP\alice"), connection("share", r"corp\SVC")])
        .on_query(&find(SRV), vec![mapping_row(status::OK)])
        .on(format!(r"connect_as {SRV}"), Answer::Done);
    f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.calls("connect_as"), [format!(r"connect_as {SRV} CORP\svc")]);
    assert_eq!(f.links.log()[1], format!(r"link {LOCAL} \\?\UNC\srv\share\"));
    // Another user than the mapping's is still refused.
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(1219))
        .on_query(&connections("srv"), vec![connection("share", r"CORP\alice")])
        .on_query(&find(SRV), vec![mapping_row(status::OK)]);
    let m = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err().to_string();
    assert!(m.contains(r#"\\srv\share as "CORP\\alice""#), "{m}");
    assert!(f.script.calls("connect_as").is_empty());
    // This user's, but the mapping is not OK: not reused, refused as Create answered.
    let f = fixture(Links::default());
    f.script
        .on_query(&find(SRV), vec![])
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(1219))
        .on_query(&connections("srv"), vec![connection("share", r"CORP\svc")])
        .on_query(&find(SRV), vec![mapping_row(status::DISCONNECTED)]);
    let err = f.smb.new_smb_global_mapping(&request(SRV, LOCAL, r"CORP\svc")).unwrap_err();
    assert!(matches!(&err, Error::AlreadyExists(m) if m.contains("1219")), "{err:?}");
    assert!(f.script.calls("connect_as").is_empty() && f.links.log().len() == 1);
}

#[test]
fn remove_of_a_present_mapping() {
    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![mapping_row(0)]).on_call(MAP, "Remove", returned(0));
    f.smb.remove_smb_global_mapping(r"\\Srv\SHARE\sub").unwrap();
    f.script.assert_all_scripted();
    assert_eq!(f.script.log(), [find_line(SRV), remove_line()]);

    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![mapping_row(0)]).on_call(MAP, "Remove", returned(2));
    let err = f.smb.remove_smb_global_mapping(SRV).unwrap_err().to_string();
    assert!(err.contains(SRV) && err.contains("Remove returned 2"), "{err}");
}

#[test]
fn remove_of_a_missing_mapping_succeeds() {
    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![]);
    let (res, lines) = traced(|| f.smb.remove_smb_global_mapping(SRV));
    res.unwrap();
    assert_eq!(f.script.log(), [find_line(SRV)]);
    assert!(lines.iter().any(|l| l.starts_with("INFO") && l.contains("no SMB global mapping")), "{lines:?}");
}

#[test]
fn the_password_never_shows() {
    let mut seen: Vec<String> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    let m = request(SRV, LOCAL, r"CORP\svc");
    seen.push(format!("{m:?}"));

    // Created, then linked.
    let f = fixture(Links::default());
    f.script.on_query(&find(SRV), vec![]).on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    let (res, lines) = traced(|| f.smb.new_smb_global_mapping(&m));
    res.unwrap();
    assert!(!lines.is_empty(), "the capture must see the backend's events");
    seen.extend(lines);
    seen.extend(f.script.log());
    let passed: Vec<String> = f.wmi.secrets().into_iter().map(|(_, s)| s).collect();

    // Create fails with a code; Create fails with a text that quotes the credential.
    for answer in [
        Answer::Out(returned(1326)),
        Answer::WmiError(Error::internal, format!("Create(Credential=CORP\\\\svc:{PASSWORD}) failed")),
    ] {
        let f = fixture(Links::default());
        f.script.on_query(&find(SRV), vec![]).on("call MSFT_SmbGlobalMapping Create", answer);
        let (res, lines) = traced(|| f.smb.new_smb_global_mapping(&m));
        let err = res.unwrap_err();
        errors.push(err.to_string());
        errors.push(format!("{err:?}"));
        seen.extend(lines);
        seen.extend(f.script.log());
    }

    // Recreated after a logon failure, then the link fails and the rollback fails too.
    let f = fixture(Links { link_err: Some(Error::PermissionDenied), ..Links::default() });
    f.script
        .on_query(&find(SRV), vec![mapping_row(0)])
        .on(format!(r"attributes {SRV}\"), Answer::Win32Error(1326))
        .on_call(MAP, "Remove", returned(0))
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0))
        .on_call(MAP, "Remove", returned(5));
    let (res, lines) = traced(|| f.smb.new_smb_global_mapping(&m));
    errors.push(res.unwrap_err().to_string());
    seen.extend(lines);
    seen.extend(f.script.log());

    assert!(errors[2].contains("withheld"), "{errors:?}");
    for line in seen.iter().chain(&errors) {
        assert!(!line.contains(PASSWORD), "password leaked: {line}");
    }
    assert!(passed.iter().any(|s| s.contains(PASSWORD)), "the password must reach WMI as a secret: {passed:?}");
}

/// Long enough for any machine to finish a call that isn't blocked; reached only when the code
/// under test is wrong (a call waiting for another share), so the test fails instead of hanging.
const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(60);
const OTHER: &str = r"\\other\share";

/// Runs `call` on its own thread and waits for it (up to [`WATCHDOG`]); `None` when it did not
/// finish. `gate` is opened either way, so nothing stays blocked behind a failed assertion.
fn finishes<T: Send>(gate: &Gate, call: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|t| {
        let (tx, rx) = std::sync::mpsc::channel();
        t.spawn(move || tx.send(call()));
        let got = rx.recv_timeout(WATCHDOG).ok();
        gate.open();
        got
    })
}

/// One unreachable server must not stall the SMB volumes of every other share on the node:
/// MSFT_SmbGlobalMapping.Create may wait 120 s, beyond the drivers' NodeStageVolume timeouts.
#[test]
fn a_hung_create_on_one_share_does_not_hold_up_another() {
    let f = fixture(Links::default());
    let gate = Gate::new();
    f.script
        .on_query(&find(SRV), vec![])
        .on_query(&find(OTHER), vec![])
        // The first Create (SRV's) hangs until the gate opens; the second (OTHER's) answers.
        .on("call MSFT_SmbGlobalMapping Create", Answer::Held(gate.clone(), Box::new(Answer::Out(returned(0)))))
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    let smb = &f.smb;
    std::thread::scope(|t| {
        let hung = t.spawn(|| smb.new_smb_global_mapping(&request(SRV, "", "")));
        gate.wait_for(1); // SRV's call is inside Create
        let other = finishes(&gate, || smb.new_smb_global_mapping(&request(OTHER, "", "")));
        assert!(matches!(other, Some(Ok(()))), "the call on another share waited for the hung one: {other:?}");
        hung.join().unwrap().unwrap();
    });
    let log = f.script.log();
    let other_create = log.iter().position(|l| *l == create_line(OTHER, true, false)).unwrap();
    assert_eq!(log.iter().position(|l| *l == create_line(SRV, true, false)), Some(1), "{log:#?}");
    assert!(other_create > 1, "{log:#?}");
}

/// GetFileAttributesW on a share waits as long as the SMB client does: the probe is bounded, a
/// share that does not answer in time counts as unreachable, and a later call on it waits for
/// the probe still running instead of starting another.
#[test]
fn a_share_that_does_not_answer_the_probe_is_given_up_on_once() {
    let script = Arc::new(Script::new());
    let mut smb = Smb::new(script.clone(), script.clone(), Arc::new(Links::default()))
        .with_probe_timeout(std::time::Duration::from_millis(20));
    let gate = Gate::new();
    let probe = format!(r"attributes {SRV}\");
    script
        .on_query(&find(SRV), vec![mapping_row(status::OK)])
        .on(&probe, Answer::Held(gate.clone(), Box::new(Answer::Attributes(Some(DIRECTORY)))))
        .on_call(MAP, "Remove", returned(0))
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    // Two calls while the probe hangs: both finish, recreating the mapping, on one probe. (The
    // gate opens once they are done, or at the watchdog if they hang.)
    let done = finishes(&gate, || {
        let first = smb.new_smb_global_mapping(&request(SRV, "", ""));
        let second = smb.new_smb_global_mapping(&request(SRV, "", ""));
        (first, second)
    });
    assert!(matches!(done, Some((Ok(()), Ok(())))), "a call waited for the hung probe: {done:?}");
    assert_eq!(gate.arrived(), 1, "one probe for the share, not one per call");
    assert_eq!(script.calls(&probe).len(), 1);
    assert_eq!(script.calls(&remove_line()).len(), 2);
    // Once the probe answers, the next call probes afresh and keeps the healthy mapping.
    let deadline = std::time::Instant::now() + WATCHDOG;
    while smb.probes.running() > 0 {
        assert!(std::time::Instant::now() < deadline, "the probe never finished");
        std::thread::yield_now();
    }
    // (A limit no answering probe can miss, however loaded the machine.)
    smb.probes.set_limit(WATCHDOG);
    smb.new_smb_global_mapping(&request(SRV, "", "")).unwrap();
    assert_eq!(script.calls(&probe).len(), 2);
    assert_eq!(script.calls(&remove_line()).len(), 2, "kept: {:#?}", script.log());
}

/// Calls on one share still take turns: a rollback must not pull the mapping away from a call
/// on the same share that has just decided to keep it.
#[test]
fn calls_on_one_share_take_turns() {
    let f = fixture(Links::default());
    let gate = Gate::new();
    f.script
        .on_query(&find(SRV), vec![])
        .on("call MSFT_SmbGlobalMapping Create", Answer::Held(gate.clone(), Box::new(Answer::Out(returned(0)))))
        .on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    let smb = &f.smb;
    std::thread::scope(|t| {
        let first = t.spawn(|| smb.new_smb_global_mapping(&request(r"\\srv\share\a", "", "")));
        gate.wait_for(1);
        let second = t.spawn(|| smb.new_smb_global_mapping(&request(r"\\SRV\Share\b", "", "")));
        // Give the second call every chance to overtake; it must not.
        std::thread::sleep(std::time::Duration::from_millis(50));
        let before = f.script.calls("query ").len();
        gate.open();
        first.join().unwrap().unwrap();
        second.join().unwrap().unwrap();
        assert_eq!(before, 1, "the second call on the share ran while the first was in Create: {:#?}", f.script.log());
    });
    let log = f.script.log();
    assert_eq!(log, [find_line(SRV), create_line(SRV, true, false), find_line(SRV), create_line(SRV, true, false)]);
}

/// A host's SMB global mappings as WMI shows them, kept in a map: a query by RemotePath is one
/// lookup, any other query of the class returns every mapping (an enumeration, counted by the
/// rows it reads). Counts the WMI calls and rows the backend asks for, for the scale test.
#[derive(Default)]
struct Mappings {
    /// By the WQL of the query that finds each one (its RemotePath filter).
    by_query: Mutex<HashMap<String, Row>>,
    calls: std::sync::atomic::AtomicUsize,
    rows: std::sync::atomic::AtomicUsize,
}

impl Mappings {
    fn add(&self, root: &str) {
        let path = format!(
            r#"\\H\ROOT\Microsoft\Windows\SMB:MSFT_SmbGlobalMapping.RemotePath="{}""#,
            root.replace('\\', r"\\")
        );
        let row =
            Row::new("MSFT_SmbGlobalMapping", path).with("RemotePath", root).with("Status", 0u32).with("LocalPath", "");
        self.by_query.lock().unwrap().insert(find(root).wql().unwrap(), row);
    }
    fn len(&self) -> usize {
        self.by_query.lock().unwrap().len()
    }
    /// (WMI calls, rows read) since the last look.
    fn take(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::SeqCst;
        (self.calls.swap(0, SeqCst), self.rows.swap(0, SeqCst))
    }
}

impl Wmi for Mappings {
    fn query(&self, query: &Query) -> Result<Vec<Row>> {
        use std::sync::atomic::Ordering::SeqCst;
        self.calls.fetch_add(1, SeqCst);
        let wql = query.wql()?;
        let all = self.by_query.lock().unwrap();
        let rows: Vec<Row> = match all.get(&wql) {
            Some(row) => vec![row.clone()],
            None if !wql.contains(" WHERE ") => all.values().cloned().collect(),
            None => Vec::new(),
        };
        self.rows.fetch_add(rows.len(), SeqCst);
        Ok(rows)
    }
    fn call(&self, _ns: Namespace, target: &str, method: &str, args: &[(&'static str, Value)]) -> Result<Row> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        match method {
            "Create" => {
                let root = args.iter().find_map(|(n, v)| match (n, v) {
                    (&"RemotePath", Value::Str(s)) => Some(s.clone()),
                    _ => None,
                });
                self.add(&root.expect("Create without a RemotePath"));
            }
            "Remove" => self.by_query.lock().unwrap().retain(|_, row| row.path != target),
            m => return Err(Error::internal(format!("unexpected method {m}"))),
        }
        Ok(returned(0))
    }
    fn associators(
        &self,
        _: Namespace,
        _: &str,
        _: &'static str,
        _: &'static str,
        _: &[&'static str],
    ) -> Result<Vec<Row>> {
        Err(Error::internal("no associators here"))
    }
}

/// Item 6 of issue 40 (azurefile#1925: nodes broke near 700 mappings): with 10 and with 1,000
/// mappings on the host, a New of a new share, a New of a mapped share and a Remove each make the
/// same number of WMI calls and read the same number of rows: nothing enumerates the mappings.
/// Prints the counts and the time per call (a figure, not asserted).
#[test]
fn new_and_remove_cost_does_not_grow_with_the_number_of_mappings() {
    let mut figures = Vec::new();
    for count in [10usize, 1000] {
        let script = Arc::new(Script::new());
        let wmi = Arc::new(Mappings::default());
        let smb = Smb::new(script.clone(), wmi.clone(), Arc::new(Links::default()));
        for i in 0..count {
            smb.new_smb_global_mapping(&request(&format!(r"\\srv\share{i}"), "", "")).unwrap();
        }
        assert_eq!(wmi.len(), count);
        let made = wmi.take();
        let root = r"\\srv\share5";
        script.on(format!(r"attributes {root}\"), Answer::Attributes(Some(DIRECTORY)));
        let started = std::time::Instant::now();
        smb.new_smb_global_mapping(&request(r"\\srv\fresh", "", "")).unwrap();
        let fresh = wmi.take();
        smb.new_smb_global_mapping(&request(root, "", "")).unwrap();
        let kept = wmi.take();
        smb.remove_smb_global_mapping(root).unwrap();
        let removed = wmi.take();
        let elapsed = started.elapsed();
        assert_eq!(wmi.len(), count);
        println!(
            "{count:>5} mappings: New (new share) {} WMI calls / {} rows, New (mapped share) {} / {}, Remove {} / {}; \
             {:.1} µs for the three; making them: {} calls, {} rows",
            fresh.0,
            fresh.1,
            kept.0,
            kept.1,
            removed.0,
            removed.1,
            elapsed.as_secs_f64() * 1e6,
            made.0,
            made.1
        );
        figures.push((fresh, kept, removed, made));
    }
    let (small, large) = (figures[0], figures[1]);
    assert_eq!((small.0, small.1, small.2), (large.0, large.1, large.2), "the cost per call grew with the count");
    assert_eq!(large.0, (2, 0), "New of a new share: one lookup (nothing found), one Create");
    assert_eq!(large.1, (1, 1), "New of a mapped share: one lookup");
    assert_eq!(large.2, (2, 1), "Remove: one lookup, one Remove");
    // Making 1,000 took two calls each and read no rows.
    assert_eq!(large.3, (2000, 0));
}
