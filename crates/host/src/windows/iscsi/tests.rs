use super::*;
use crate::testing::traced;
use crate::windows::script::{returned, Answer, Script};
use crate::windows::smb::tests::Capture;

const ADDR: &str = "10.0.0.9";
const PORTAL_PATH: &str = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_iSCSITargetPortal.TargetPortalAddress="10.0.0.9",TargetPortalPortNumber=3260"#;
const IQN: &str = "iqn.2003-01.org.linux-iscsi.tgt:vol-a";
const OTHER: &str = "iqn.2003-01.org.linux-iscsi.tgt:vol-b";
const SECRET: &str = "Chap-Secret-0451";

fn portal() -> TargetPortal {
    TargetPortal { address: ADDR.into(), port: 3260 }
}

fn target_path(iqn: &str) -> String {
    format!(r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_iSCSITarget.NodeAddress="{iqn}""#)
}

fn session_path() -> String {
    r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_iSCSISession.SessionIdentifier="ffff8a0c-4000013700000002""#.into()
}

fn find_portal() -> Query {
    Query::select(Namespace::Storage, "MSFT_iSCSITargetPortal", &["TargetPortalAddress", "TargetPortalPortNumber"])
        .eq("TargetPortalAddress", ADDR)
        .eq("TargetPortalPortNumber", 3260u16)
}

fn portal_row() -> Row {
    Row::new("MSFT_iSCSITargetPortal", PORTAL_PATH)
        .with("TargetPortalAddress", ADDR)
        .with("TargetPortalPortNumber", 3260u16)
}

fn target_row(iqn: &str, connected: bool) -> Row {
    Row::new("MSFT_iSCSITarget", target_path(iqn)).with("NodeAddress", iqn).with("IsConnected", connected)
}

const TARGETS: &str = "MSFT_iSCSITargetToiSCSITargetPortal MSFT_iSCSITarget";

struct Fixture {
    script: Arc<Script>,
    wmi: Arc<Capture>,
    iscsi: Iscsi,
}

fn fixture() -> Fixture {
    let script = Arc::new(Script::new());
    let wmi = Arc::new(Capture::new(script.clone()));
    Fixture { script: script.clone(), iscsi: Iscsi::new(wmi.clone()), wmi }
}

impl Fixture {
    /// The portal exists and has these targets.
    fn with_targets(&self, targets: Vec<Row>) -> &Self {
        self.script.on_query(&find_portal(), vec![portal_row()]);
        self.script.on_associators(PORTAL_PATH, "MSFT_iSCSITargetToiSCSITargetPortal", "MSFT_iSCSITarget", targets);
        self
    }
}

fn lookup_lines() -> Vec<String> {
    vec![format!("query {}", find_portal().wql().unwrap()), format!("associators {PORTAL_PATH} {TARGETS}")]
}

fn connect(auth: AuthType, user: &str, secret: &str) -> ConnectTarget {
    ConnectTarget {
        portal: portal(),
        iqn: IQN.into(),
        auth,
        chap_username: user.into(),
        chap_secret: Secret::new(secret),
    }
}

fn connect_line(auth: &str, user: &str, secret: &str) -> String {
    let args = [
        ("NodeAddress", Value::from(IQN)),
        ("TargetPortalAddress", Value::from(ADDR)),
        ("TargetPortalPortNumber", Value::from(3260u16)),
        ("AuthenticationType", Value::from(auth)),
        ("ChapUsername", Value::from(user)),
        ("ChapSecret", Value::Secret(Secret::new(secret))),
        ("IsPersistent", Value::Bool(false)),
    ];
    format!("call MSFT_iSCSITarget Connect {args:?}")
}

#[test]
fn add_target_portal_is_idempotent() {
    let f = fixture();
    f.script.on_query(&find_portal(), vec![portal_row()]);
    f.iscsi.add_target_portal(&portal()).unwrap();
    assert_eq!(f.script.log(), lookup_lines()[..1]);

    let f = fixture();
    f.script.on_query(&find_portal(), vec![]).on_call("MSFT_iSCSITargetPortal", "New", returned(0));
    f.iscsi.add_target_portal(&portal()).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(
        f.script.log()[1],
        r#"call MSFT_iSCSITargetPortal New [("TargetPortalAddress", "10.0.0.9"), ("TargetPortalPortNumber", 3260)]"#
    );

    let f = fixture();
    f.script.on_query(&find_portal(), vec![]).on_call("MSFT_iSCSITargetPortal", "New", returned(0xEFFF_0003));
    let err = f.iscsi.add_target_portal(&portal()).unwrap_err().to_string();
    assert!(err.contains("10.0.0.9:3260") && err.contains("ISDSC_CONNECTION_FAILED"), "{err}");
}

#[test]
fn discover_lists_the_portal_targets() {
    let f = fixture();
    f.with_targets(vec![target_row(OTHER, false), target_row(IQN, true)]);
    assert_eq!(f.iscsi.discover_target_portal(&portal()).unwrap(), [OTHER, IQN]);
    f.script.assert_all_scripted();
    assert_eq!(f.script.log(), lookup_lines());
}

#[test]
fn a_missing_portal_is_not_found() {
    let f = fixture();
    f.script.on_query(&find_portal(), vec![]);
    for err in [
        f.iscsi.discover_target_portal(&portal()).unwrap_err(),
        f.iscsi.connect_target(&connect(AuthType::None, "", "")).unwrap_err(),
        f.iscsi.disconnect_target(&portal(), IQN).unwrap_err(),
        f.iscsi.get_target_disks(&portal(), IQN).unwrap_err(),
    ] {
        assert!(
            matches!(&err, Error::NotFound(m) if m.contains("10.0.0.9:3260") && m.contains("AddTargetPortal")),
            "{err:?}"
        );
    }
    // Removing it is no error (a retry after the call that removed it), and calls nothing.
    f.iscsi.remove_target_portal(&portal()).unwrap();
    assert!(f.script.log().iter().all(|l| l.starts_with("query ")), "{:?}", f.script.log());
}

#[test]
fn list_and_remove_portals() {
    let f = fixture();
    let all =
        Query::select(Namespace::Storage, "MSFT_iSCSITargetPortal", &["TargetPortalAddress", "TargetPortalPortNumber"]);
    f.script.on_query(
        &all,
        vec![
            portal_row(),
            Row::new("MSFT_iSCSITargetPortal", "p2")
                .with("TargetPortalAddress", "san.local")
                .with("TargetPortalPortNumber", 3261u16),
        ],
    );
    assert_eq!(
        f.iscsi.list_target_portals().unwrap(),
        [portal(), TargetPortal { address: "san.local".into(), port: 3261 }]
    );

    let f = fixture();
    f.script.on_query(&find_portal(), vec![portal_row()]).on_call(PORTAL_PATH, "Remove", returned(0));
    f.iscsi.remove_target_portal(&portal()).unwrap();
    f.script.assert_all_scripted();
    assert_eq!(
        f.script.log()[1],
        format!(r#"call {PORTAL_PATH} Remove [("TargetPortalAddress", "10.0.0.9"), ("TargetPortalPortNumber", 3260)]"#)
    );
}

#[test]
fn connecting_a_connected_target_does_nothing() {
    let f = fixture();
    f.with_targets(vec![target_row(IQN, true)]);
    f.iscsi.connect_target(&connect(AuthType::OneWayChap, "u", SECRET)).unwrap();
    assert_eq!(f.script.log(), lookup_lines());
    assert!(f.wmi.secrets().is_empty());
}

#[test]
fn connecting_passes_upstream_arguments() {
    for (auth, name, user, secret) in [
        (AuthType::None, "NONE", "", ""),
        (AuthType::OneWayChap, "ONEWAYCHAP", "u", SECRET),
        (AuthType::MutualChap, "MUTUALCHAP", "u", SECRET),
    ] {
        let f = fixture();
        f.with_targets(vec![target_row(OTHER, false), target_row(IQN, false)]);
        f.script.on_call("MSFT_iSCSITarget", "Connect", returned(0));
        f.iscsi.connect_target(&connect(auth, user, secret)).unwrap();
        f.script.assert_all_scripted();
        let mut want = lookup_lines();
        want.push(connect_line(name, user, secret));
        assert_eq!(f.script.log(), want);
        assert_eq!(f.wmi.secrets(), [("ChapSecret", secret.to_owned())]);
    }
}

#[test]
fn iqns_are_compared_exactly() {
    let f = fixture();
    f.with_targets(vec![target_row(&IQN.to_uppercase(), false)]);
    let err = f.iscsi.connect_target(&connect(AuthType::None, "", "")).unwrap_err();
    let Error::NotFound(m) = &err else { panic!("{err:?}") };
    assert!(m.contains(IQN) && m.contains("10.0.0.9:3260") && m.contains("differs only in case"), "{m}");
    assert!(f.script.calls("call ").is_empty());

    let f = fixture();
    f.with_targets(vec![target_row(OTHER, false)]);
    let err = f.iscsi.disconnect_target(&portal(), IQN).unwrap_err();
    assert!(matches!(&err, Error::NotFound(m) if m.contains(IQN) && !m.contains("case")), "{err:?}");
}

#[test]
fn chap_failures_are_permission_denied_and_keep_the_secret() {
    let denied = [
        Answer::Out(returned(code::ISDSC_AUTHENTICATION_FAILURE)),
        Answer::Out(
            Row::new("__PARAMETERS", "")
                .with("ReturnValue", Value::I64(code::ISDSC_AUTHORIZATION_FAILURE as i32 as i64)),
        ),
        Answer::WmiError(Error::internal, "Generic failure: 0xEFFF0009".into()),
        Answer::WmiError(Error::internal, format!("Authentication Failure. (secret {SECRET})")),
    ];
    for answer in denied {
        let f = fixture();
        f.with_targets(vec![target_row(IQN, false)]);
        f.script.on("call MSFT_iSCSITarget Connect", answer.clone());
        let (res, lines) = traced(|| f.iscsi.connect_target(&connect(AuthType::MutualChap, "u", SECRET)));
        let err = res.unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::PermissionDenied(_)), "{answer:?}: {err:?}");
        assert!(msg.contains(IQN) && msg.contains("10.0.0.9:3260"), "{msg}");
        for line in lines.iter().chain(&f.script.log()).chain([&msg, &format!("{err:?}")]) {
            assert!(!line.contains(SECRET), "secret leaked: {line}");
        }
    }

    let f = fixture();
    f.with_targets(vec![target_row(IQN, false)]);
    f.script.on_call("MSFT_iSCSITarget", "Connect", returned(code::ISDSC_INVALID_CHAP_SECRET));
    let err = f.iscsi.connect_target(&connect(AuthType::OneWayChap, "u", "short")).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument(m) if m.contains("ISDSC_INVALID_CHAP_SECRET")), "{err:?}");

    let f = fixture();
    f.with_targets(vec![target_row(IQN, false)]);
    f.script.on_call("MSFT_iSCSITarget", "Connect", returned(code::ISDSC_CONNECTION_FAILED));
    let err = f.iscsi.connect_target(&connect(AuthType::None, "", "")).unwrap_err();
    assert!(matches!(&err, Error::Internal(m) if m.contains("ISDSC_CONNECTION_FAILED") && m.contains(IQN)), "{err:?}");
}

#[test]
fn disconnecting_a_target_that_is_not_connected_does_nothing() {
    let f = fixture();
    f.with_targets(vec![target_row(IQN, false)]);
    f.iscsi.disconnect_target(&portal(), IQN).unwrap();
    assert_eq!(f.script.log(), lookup_lines());
}

#[test]
fn disconnecting_unregisters_a_persistent_session_first() {
    for persistent in [true, false] {
        let f = fixture();
        let t = target_path(IQN);
        f.with_targets(vec![target_row(IQN, true)]);
        let session = Row::new("MSFT_iSCSISession", session_path())
            .with("SessionIdentifier", "ffff8a0c-4000013700000002")
            .with("IsPersistent", persistent);
        f.script
            .on_associators(&t, "MSFT_iSCSITargetToiSCSISession", "MSFT_iSCSISession", vec![session])
            .on_call(&session_path(), "Unregister", returned(0))
            .on_call(&t, "Disconnect", returned(0));
        f.iscsi.disconnect_target(&portal(), IQN).unwrap();
        let mut want = lookup_lines();
        want.push(format!("associators {t} MSFT_iSCSITargetToiSCSISession MSFT_iSCSISession"));
        if persistent {
            want.push(format!("call {} Unregister []", session_path()));
        }
        want.push(format!(r#"call {t} Disconnect [("SessionIdentifier", "ffff8a0c-4000013700000002")]"#));
        assert_eq!(f.script.log(), want, "persistent: {persistent}");
    }
}

#[test]
fn disconnecting_a_connected_target_without_a_session_succeeds() {
    let f = fixture();
    let t = target_path(IQN);
    f.with_targets(vec![target_row(IQN, true)]);
    f.script.on_associators(&t, "MSFT_iSCSITargetToiSCSISession", "MSFT_iSCSISession", vec![]);
    let (res, lines) = traced(|| f.iscsi.disconnect_target(&portal(), IQN));
    res.unwrap();
    f.script.assert_all_scripted();
    assert!(f.script.calls("call ").is_empty());
    assert!(lines.iter().any(|l| l.starts_with("WARN") && l.contains("no session")), "{lines:?}");
}

#[test]
fn a_failed_disconnect_is_an_error() {
    let f = fixture();
    let t = target_path(IQN);
    f.with_targets(vec![target_row(IQN, true)]);
    let session =
        Row::new("MSFT_iSCSISession", session_path()).with("SessionIdentifier", "s1").with("IsPersistent", false);
    f.script.on_associators(&t, "MSFT_iSCSITargetToiSCSISession", "MSFT_iSCSISession", vec![session]).on_call(
        &t,
        "Disconnect",
        returned(0xEFFF_0040),
    );
    let err = f.iscsi.disconnect_target(&portal(), IQN).unwrap_err().to_string();
    assert!(err.contains("s1") && err.contains(IQN) && err.contains("0xEFFF0040"), "{err}");
}

#[test]
fn target_disks_are_deduplicated_and_sorted() {
    let f = fixture();
    let t = target_path(IQN);
    f.with_targets(vec![target_row(IQN, true)]);
    let conn =
        |n: u32| Row::new("MSFT_iSCSIConnection", format!("conn{n}")).with("ConnectionIdentifier", format!("c-{n}"));
    let disk = |n: u32| Row::new("MSFT_Disk", format!("disk{n}")).with("Number", n);
    f.script
        .on_associators(&t, "MSFT_iSCSITargetToiSCSIConnection", "MSFT_iSCSIConnection", vec![conn(1), conn(2)])
        .on_associators("conn1", "MSFT_iSCSIConnectionToDisk", "MSFT_Disk", vec![disk(7), disk(3)])
        .on_associators("conn2", "MSFT_iSCSIConnectionToDisk", "MSFT_Disk", vec![disk(7)]);
    assert_eq!(f.iscsi.get_target_disks(&portal(), IQN).unwrap(), [3, 7]);
    f.script.assert_all_scripted();
    assert_eq!(f.script.calls("associators ").len(), 4);

    let f = fixture();
    f.with_targets(vec![target_row(IQN, false)]);
    assert!(f.iscsi.get_target_disks(&portal(), IQN).unwrap().is_empty());
    assert_eq!(f.script.log(), lookup_lines());
}

#[test]
fn the_mutual_chap_secret_is_set_on_the_class() {
    let f = fixture();
    f.script.on_call("MSFT_iSCSISession", "SetCHAPSecret", returned(0));
    f.iscsi.set_mutual_chap_secret(&Secret::new(SECRET)).unwrap();
    assert_eq!(f.script.log(), [r#"call MSFT_iSCSISession SetCHAPSecret [("ChapSecret", <redacted>)]"#]);
    assert_eq!(f.wmi.secrets(), [("ChapSecret", SECRET.to_owned())]);

    for (code, invalid) in [(code::ISDSC_INVALID_INITIATOR_CHAP_SECRET, true), (1, false)] {
        let f = fixture();
        f.script.on_call("MSFT_iSCSISession", "SetCHAPSecret", returned(code));
        let err = f.iscsi.set_mutual_chap_secret(&Secret::new(SECRET)).unwrap_err();
        assert_eq!(matches!(err, Error::InvalidArgument(_)), invalid, "{err:?}");
        assert!(!err.to_string().contains(SECRET) && err.to_string().contains("SetCHAPSecret"), "{err}");
    }

    let f = fixture();
    f.script
        .on("call MSFT_iSCSISession SetCHAPSecret", Answer::WmiError(Error::internal, format!("bad value {SECRET}")));
    let err = f.iscsi.set_mutual_chap_secret(&Secret::new(SECRET)).unwrap_err().to_string();
    assert!(!err.contains(SECRET) && err.contains("withheld"), "{err}");
}

#[test]
fn return_codes_read_either_way() {
    let neg = Row::new("__PARAMETERS", "").with("ReturnValue", Value::I64(-268_500_983));
    assert_eq!(return_code(&neg).unwrap(), code::ISDSC_AUTHENTICATION_FAILURE);
    assert_eq!(return_code(&returned(0xEFFF_0009)).unwrap(), code::ISDSC_AUTHENTICATION_FAILURE);
    assert_eq!(describe(0xEFFF_0009), "4026466313 (0xEFFF0009, ISDSC_AUTHENTICATION_FAILURE)");
    assert_eq!(describe(5), "5");
    assert_eq!(refusal_of_text("login failed 4026466314"), Some(Refusal::Credentials));
    assert_eq!(refusal_of_text("HRESULT 0xefff004a"), Some(Refusal::BadChapParameter));
    assert_eq!(refusal_of_text("connection failed 0xEFFF0003"), None);
}
