#![cfg(unix)]
//! Every iSCSI RPC of both versions, through a real socket, against the in-memory host.

use csi_proxy_host::memory::SimTarget;
use csi_proxy_host::types::{AuthType, TargetPortal};
use csi_proxy_stack_tests::{assert_status, logs, TestServer};
use csi_proxy_wire::{v1alpha1, v1alpha2, Group};
use tonic::Code;

const SECRET: &str = "chap-Secret-0xC0FFEE";
const ADDR: &str = "10.0.0.1";
const IQN_A: &str = "iqn.2024-01.org.example:a";
const IQN_B: &str = "iqn.2024-01.org.example:b";

fn portal(port: u16) -> TargetPortal {
    TargetPortal { address: ADDR.into(), port }
}

/// Two targets behind 10.0.0.1:3260 (only `a` has disks); nothing registered yet.
fn arrange_targets(s: &TestServer) {
    s.host.with(|st| {
        let targets = st.portals.entry(portal(3260)).or_default();
        targets.insert(IQN_A.into(), SimTarget { connected: false, disks: vec![2, 3], last_auth: None });
        targets.insert(IQN_B.into(), SimTarget { connected: false, disks: vec![], last_auth: None });
    });
}

fn connected(s: &TestServer, iqn: &str) -> bool {
    s.host.with(|st| st.portals[&portal(3260)][iqn].connected)
}

/// Asserts an InvalidArgument that mentions `needle` and never the CHAP secret.
#[track_caller]
fn assert_invalid_no_secret<T: std::fmt::Debug>(r: Result<T, tonic::Status>, needle: &str) {
    assert_secret_free(r, Code::InvalidArgument, needle);
}

#[track_caller]
fn assert_secret_free<T: std::fmt::Debug>(r: Result<T, tonic::Status>, code: Code, needle: &str) {
    let e = r.expect_err("expected the call to fail");
    assert!(!e.message().contains(SECRET), "secret leaked: {e:?}");
    assert!(!format!("{e:?}").contains(SECRET), "secret leaked: {e:?}");
    assert_status::<()>(Err(e), code, needle);
}

macro_rules! iscsi_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::iscsi_client::IscsiClient::new(s.channel(Group::Iscsi, stringify!($v)).await);
            arrange_targets(&s);
            let tp =
                |address: &str, port: u32| Some($v::TargetPortal { target_address: address.into(), target_port: port });

            // ListTargetPortals / AddTargetPortal: port 0 means 3260; adding twice is fine.
            assert!(c
                .list_target_portals($v::ListTargetPortalsRequest {})
                .await
                .unwrap()
                .into_inner()
                .target_portals
                .is_empty());
            c.add_target_portal($v::AddTargetPortalRequest { target_portal: tp(ADDR, 0) }).await.unwrap();
            assert!(s.host.with(|st| st.registered.contains(&portal(3260))));
            c.add_target_portal($v::AddTargetPortalRequest { target_portal: tp(ADDR, 3260) }).await.unwrap();
            c.add_target_portal($v::AddTargetPortalRequest { target_portal: tp(ADDR, 65535) }).await.unwrap();
            let list =
                c.list_target_portals($v::ListTargetPortalsRequest {}).await.unwrap().into_inner().target_portals;
            assert_eq!(
                list,
                vec![
                    $v::TargetPortal { target_address: ADDR.into(), target_port: 3260 },
                    $v::TargetPortal { target_address: ADDR.into(), target_port: 65535 },
                ]
            );

            // DiscoverTargetPortal lists the IQNs behind a registered portal.
            let disc = |address: &str, port: u32| $v::DiscoverTargetPortalRequest { target_portal: tp(address, port) };
            assert_eq!(c.discover_target_portal(disc(ADDR, 0)).await.unwrap().into_inner().iqns, vec![IQN_A, IQN_B]);
            assert!(c.discover_target_portal(disc(ADDR, 65535)).await.unwrap().into_inner().iqns.is_empty());
            assert_status(c.discover_target_portal(disc("10.9.9.9", 0)).await, Code::NotFound, "10.9.9.9:3260");

            // ConnectTarget: the portal's port 0 is 3260 too; auth type and user reach the host.
            let connect = |iqn: &str, auth: i32| $v::ConnectTargetRequest {
                target_portal: tp(ADDR, 0),
                iqn: iqn.into(),
                auth_type: auth,
                chap_username: "chapuser".into(),
                chap_secret: SECRET.into(),
            };
            let one_way = $v::AuthenticationType::OneWayChap as i32;
            c.connect_target(connect(IQN_A, one_way)).await.unwrap();
            assert!(connected(&s, IQN_A));
            assert!(!connected(&s, IQN_B));
            assert_eq!(
                s.host.with(|st| st.portals[&portal(3260)][IQN_A].last_auth.clone()),
                Some((AuthType::OneWayChap, "chapuser".to_string()))
            );
            c.connect_target(connect(IQN_A, one_way)).await.unwrap();
            c.connect_target(connect(IQN_B, $v::AuthenticationType::None as i32)).await.unwrap();
            assert_eq!(
                s.host.with(|st| st.portals[&portal(3260)][IQN_B].last_auth.clone()),
                Some((AuthType::None, "chapuser".to_string()))
            );

            // GetTargetDisks: decimal strings; a disconnected target has none.
            let disks = |iqn: &str| $v::GetTargetDisksRequest { target_portal: tp(ADDR, 0), iqn: iqn.into() };
            assert_eq!(c.get_target_disks(disks(IQN_A)).await.unwrap().into_inner().disk_i_ds, vec!["2", "3"]);
            assert!(c.get_target_disks(disks(IQN_B)).await.unwrap().into_inner().disk_i_ds.is_empty());
            assert_status(c.get_target_disks(disks("iqn.x")).await, Code::NotFound, "iqn.x");
            assert_status(c.get_target_disks(disks("")).await, Code::InvalidArgument, "iqn is empty");

            // DisconnectTarget is idempotent.
            let disconnect = |iqn: &str| $v::DisconnectTargetRequest { target_portal: tp(ADDR, 3260), iqn: iqn.into() };
            c.disconnect_target(disconnect(IQN_A)).await.unwrap();
            assert!(!connected(&s, IQN_A));
            c.disconnect_target(disconnect(IQN_A)).await.unwrap();
            assert!(c.get_target_disks(disks(IQN_A)).await.unwrap().into_inner().disk_i_ds.is_empty());
            assert_status(c.disconnect_target(disconnect("iqn.x")).await, Code::NotFound, "iqn.x");
            assert_status(c.disconnect_target(disconnect("")).await, Code::InvalidArgument, "iqn is empty");

            // ConnectTarget failures never echo the CHAP secret.
            assert_invalid_no_secret(c.connect_target(connect(IQN_A, 7)).await, "auth_type 7");
            assert_invalid_no_secret(c.connect_target(connect(IQN_A, -1)).await, "auth_type -1");
            assert_invalid_no_secret(c.connect_target(connect("", one_way)).await, "iqn is empty");
            assert_secret_free(c.connect_target(connect("iqn.x", one_way)).await, Code::NotFound, "iqn.x");
            let mut bad_portal = connect(IQN_A, one_way);
            bad_portal.target_portal = tp(ADDR, 70000);
            assert_invalid_no_secret(c.connect_target(bad_portal).await, "target_port 70000");
            let mut no_portal = connect(IQN_A, one_way);
            no_portal.target_portal = None;
            assert_invalid_no_secret(c.connect_target(no_portal).await, "target_portal is missing");
            assert!(!connected(&s, IQN_A));

            // A request without target_portal is InvalidArgument (upstream crashed), for every RPC.
            assert_status(
                c.add_target_portal($v::AddTargetPortalRequest { target_portal: None }).await,
                Code::InvalidArgument,
                "target_portal is missing",
            );
            assert_status(
                c.discover_target_portal($v::DiscoverTargetPortalRequest { target_portal: None }).await,
                Code::InvalidArgument,
                "target_portal is missing",
            );
            assert_status(
                c.remove_target_portal($v::RemoveTargetPortalRequest { target_portal: None }).await,
                Code::InvalidArgument,
                "target_portal is missing",
            );
            assert_status(
                c.disconnect_target($v::DisconnectTargetRequest { target_portal: None, iqn: IQN_A.into() }).await,
                Code::InvalidArgument,
                "target_portal is missing",
            );
            assert_status(
                c.get_target_disks($v::GetTargetDisksRequest { target_portal: None, iqn: IQN_A.into() }).await,
                Code::InvalidArgument,
                "target_portal is missing",
            );
            // Empty address and ports beyond u16.
            assert_status(
                c.add_target_portal($v::AddTargetPortalRequest { target_portal: tp("", 3260) }).await,
                Code::InvalidArgument,
                "target_portal.target_address is empty",
            );
            for port in [65536, u32::MAX] {
                assert_status(
                    c.add_target_portal($v::AddTargetPortalRequest { target_portal: tp(ADDR, port) }).await,
                    Code::InvalidArgument,
                    &format!("target_port {port} is out of range"),
                );
                assert_status(c.discover_target_portal(disc(ADDR, port)).await, Code::InvalidArgument, "target_port");
            }
            assert_eq!(s.host.with(|st| st.registered.len()), 2);

            // RemoveTargetPortal: port 0 is 3260; removing a portal gone already is no error (a
            // retry after the call that removed it).
            let rm = |port: u32| $v::RemoveTargetPortalRequest { target_portal: tp(ADDR, port) };
            c.remove_target_portal(rm(0)).await.unwrap();
            assert!(s.host.with(|st| !st.registered.contains(&portal(3260))));
            c.remove_target_portal(rm(3260)).await.unwrap();
            c.remove_target_portal(rm(65535)).await.unwrap();
            assert!(c
                .list_target_portals($v::ListTargetPortalsRequest {})
                .await
                .unwrap()
                .into_inner()
                .target_portals
                .is_empty());
        }
    };
}
iscsi_test!(v1alpha1_portals_and_targets, v1alpha1);
iscsi_test!(v1alpha2_portals_and_targets, v1alpha2);

/// Mutual CHAP needs the initiator secret, which only v1alpha2 can set.
macro_rules! mutual_chap_refused_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::iscsi_client::IscsiClient::new(s.channel(Group::Iscsi, stringify!($v)).await);
            arrange_targets(&s);
            let tp = Some($v::TargetPortal { target_address: ADDR.into(), target_port: 3260 });
            c.add_target_portal($v::AddTargetPortalRequest { target_portal: tp.clone() }).await.unwrap();
            let r = c
                .connect_target($v::ConnectTargetRequest {
                    target_portal: tp,
                    iqn: IQN_A.into(),
                    auth_type: $v::AuthenticationType::MutualChap as i32,
                    chap_username: "u".into(),
                    chap_secret: SECRET.into(),
                })
                .await;
            assert_secret_free(r, Code::FailedPrecondition, "mutual CHAP");
            assert!(!connected(&s, IQN_A));
        }
    };
}
mutual_chap_refused_test!(v1alpha1_mutual_chap_without_secret, v1alpha1);
mutual_chap_refused_test!(v1alpha2_mutual_chap_without_secret, v1alpha2);

#[tokio::test]
async fn v1alpha2_set_mutual_chap_secret() {
    let s = TestServer::start().await;
    let mut c = v1alpha2::iscsi_client::IscsiClient::new(s.channel(Group::Iscsi, "v1alpha2").await);
    arrange_targets(&s);
    c.set_mutual_chap_secret(v1alpha2::SetMutualChapSecretRequest { mutual_chap_secret: "initiator-secret".into() })
        .await
        .unwrap();
    assert_eq!(
        s.host.with(|st| st.mutual_chap_secret.as_ref().map(|x| x.expose().to_string())),
        Some("initiator-secret".to_string())
    );
    let tp = Some(v1alpha2::TargetPortal { target_address: ADDR.into(), target_port: 0 });
    c.add_target_portal(v1alpha2::AddTargetPortalRequest { target_portal: tp.clone() }).await.unwrap();
    c.connect_target(v1alpha2::ConnectTargetRequest {
        target_portal: tp,
        iqn: IQN_A.into(),
        auth_type: v1alpha2::AuthenticationType::MutualChap as i32,
        chap_username: "u".into(),
        chap_secret: SECRET.into(),
    })
    .await
    .unwrap();
    assert!(connected(&s, IQN_A));
    assert_eq!(
        s.host.with(|st| st.portals[&portal(3260)][IQN_A].last_auth.clone()),
        Some((AuthType::MutualChap, "u".to_string()))
    );
    // Setting it again replaces it.
    c.set_mutual_chap_secret(v1alpha2::SetMutualChapSecretRequest { mutual_chap_secret: "second".into() })
        .await
        .unwrap();
    assert_eq!(
        s.host.with(|st| st.mutual_chap_secret.as_ref().map(|x| x.expose().to_string())),
        Some("second".to_string())
    );
}

#[tokio::test]
async fn chap_secrets_never_reach_the_logs() {
    logs::install();
    let s = TestServer::start().await;
    let mut c = v1alpha2::iscsi_client::IscsiClient::new(s.channel(Group::Iscsi, "v1alpha2").await);
    arrange_targets(&s);
    const MUTUAL: &str = "mutual-Initiator-Secret-77";
    let tp = Some(v1alpha2::TargetPortal { target_address: ADDR.into(), target_port: 0 });
    c.add_target_portal(v1alpha2::AddTargetPortalRequest { target_portal: tp.clone() }).await.unwrap();
    let connect = |iqn: &str, auth: i32| v1alpha2::ConnectTargetRequest {
        target_portal: tp.clone(),
        iqn: iqn.into(),
        auth_type: auth,
        chap_username: "logged-user".into(),
        chap_secret: SECRET.into(),
    };
    // Failures (logged at info with the error) and successes (logged at debug with the request).
    assert!(c.connect_target(connect(IQN_A, 2)).await.is_err());
    assert!(c.connect_target(connect(IQN_A, 9)).await.is_err());
    assert!(c.connect_target(connect("iqn.x", 1)).await.is_err());
    c.set_mutual_chap_secret(v1alpha2::SetMutualChapSecretRequest { mutual_chap_secret: MUTUAL.into() }).await.unwrap();
    c.connect_target(connect(IQN_A, 2)).await.unwrap();
    let log = logs::text();
    assert!(log.contains("ConnectTarget"), "nothing was captured:\n{log}");
    assert!(log.contains(IQN_A), "the request itself is logged:\n{log}");
    // The user name is half of the credential: redacted like the secrets.
    assert!(!log.contains("logged-user"), "CHAP user name logged:\n{log}");
    assert!(log.contains("<redacted>"), "{log}");
    assert!(!log.contains(SECRET), "CHAP secret logged:\n{log}");
    assert!(!log.contains(MUTUAL), "mutual CHAP secret logged:\n{log}");
}
