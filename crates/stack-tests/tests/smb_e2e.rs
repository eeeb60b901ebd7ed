#![cfg(unix)]
//! Every SMB RPC of every version, through a real socket, against the in-memory host.
//!
//! Requests are identical in all four versions; v1alpha1 and v1beta1 responses carry an `error`
//! string that must stay empty (failures travel as gRPC statuses).

use csi_proxy_host::memory::Node;
use csi_proxy_stack_tests::{assert_status, logs, TestServer};
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, Group};
use tonic::Code;

const PASSWORD: &str = "hunter2-Sekr1t";

/// The `error` string of v1alpha1/v1beta1 responses; the newer ones have none.
macro_rules! no_error_field {
    (v1alpha1, $r:expr) => {
        assert_eq!($r.error, "")
    };
    (v1beta1, $r:expr) => {
        assert_eq!($r.error, "")
    };
    ($v:ident, $r:expr) => {
        let _ = $r;
    };
}

macro_rules! smb_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::smb_client::SmbClient::new(s.channel(Group::Smb, stringify!($v)).await);
            let new = |remote: &str, local: &str| $v::NewSmbGlobalMappingRequest {
                remote_path: remote.into(),
                local_path: local.into(),
                username: r"DOMAIN\user".into(),
                password: PASSWORD.into(),
            };
            let remove = |remote: &str| $v::RemoveSmbGlobalMappingRequest { remote_path: remote.into() };

            // `/` separators are turned into `\` before the host sees the path.
            let r = c.new_smb_global_mapping(new("//Srv/Share/sub/dir", "/var/lib/kubelet/smb")).await.unwrap();
            no_error_field!($v, r.into_inner());
            let m = s.host.with(|st| st.smb.values().cloned().collect::<Vec<_>>());
            assert_eq!(m.len(), 1);
            assert_eq!(m[0].remote_path, r"\\Srv\Share\sub\dir");
            assert_eq!(m[0].local_path, "/var/lib/kubelet/smb");
            assert_eq!(m[0].username, r"DOMAIN\user");
            assert_eq!(m[0].password.expose(), PASSWORD);
            assert!(m[0].require_privacy, "-require-privacy defaults to true");
            assert_eq!(
                s.host.with(|st| st.tree.get("/var/lib/kubelet/smb").cloned()),
                Some(Node::Link(r"\\Srv\Share\sub\dir".into()))
            );
            // Mapping the same share again succeeds.
            c.new_smb_global_mapping(new(r"\\Srv\Share\sub\dir", "/var/lib/kubelet/smb")).await.unwrap();
            assert_eq!(s.host.with(|st| st.smb.len()), 1);
            // A local path that is already something else is refused by the host.
            s.host.with(|st| st.tree.insert("/taken".into(), Node::Dir));
            assert_status(
                c.new_smb_global_mapping(new(r"\\srv2\share", "/taken")).await,
                Code::AlreadyExists,
                "/taken",
            );

            // Without local_path only the global mapping is made; mixed separators are fine too.
            c.new_smb_global_mapping(new(r"\\other/share", "")).await.unwrap();
            assert_eq!(
                s.host.with(|st| st.smb.get(r"\\other\share").map(|m| m.remote_path.clone())),
                Some(r"\\other\share".to_string())
            );

            // Remove: same normalisation; a second removal reports the mapping missing.
            let r = c.remove_smb_global_mapping(remove("//other/share")).await.unwrap();
            no_error_field!($v, r.into_inner());
            assert!(s.host.with(|st| !st.smb.contains_key(r"\\other\share")));
            // Again (a retry after it was removed): a mapping gone already is no error, as on both OSes.
            c.remove_smb_global_mapping(remove("//other/share")).await.unwrap();
            c.remove_smb_global_mapping(remove(r"\\Srv\Share\sub\dir")).await.unwrap();
            assert!(s.host.with(|st| st.smb.is_empty()));

            // Empty and invalid remote paths never reach the host; nothing leaks the password.
            for call in [
                c.new_smb_global_mapping(new("", "/l")).await.map(|_| ()),
                c.remove_smb_global_mapping(remove("")).await.map(|_| ()),
            ] {
                let e = call.unwrap_err();
                assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
                assert!(e.message().contains("remote_path is empty"), "{e:?}");
                assert!(!e.message().contains(PASSWORD), "{e:?}");
            }
            for bad in ["srv", "//srv", r"\\srv\", "//", r"\\", "/srv/", "///"] {
                let e = c.new_smb_global_mapping(new(bad, "/l")).await.unwrap_err();
                assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}: {e:?}");
                assert!(e.message().contains(&format!("remote_path {bad:?} is invalid")), "{e:?}");
                assert!(!e.message().contains(PASSWORD), "{e:?}");
                assert_status(c.remove_smb_global_mapping(remove(bad)).await, Code::InvalidArgument, "is invalid");
            }
            assert!(s.host.with(|st| st.smb.is_empty() && !st.tree.contains_key("/l")));
        }
    };
}
smb_test!(v1alpha1_mappings, v1alpha1);
smb_test!(v1beta1_mappings, v1beta1);
smb_test!(v1beta2_mappings, v1beta2);
smb_test!(v1_mappings, v1);

#[tokio::test]
async fn passwords_never_reach_the_logs() {
    logs::install();
    let s = TestServer::start().await;
    let mut c = v1::smb_client::SmbClient::new(s.channel(Group::Smb, "v1").await);
    let new = |remote: &str, local: &str| v1::NewSmbGlobalMappingRequest {
        remote_path: remote.into(),
        local_path: local.into(),
        username: "logged-user".into(),
        password: PASSWORD.into(),
    };
    c.new_smb_global_mapping(new("//logsrv/share", "")).await.unwrap();
    assert!(c.new_smb_global_mapping(new("logsrv", "")).await.is_err());
    s.host.with(|st| st.tree.insert("/busy".into(), Node::Dir));
    assert!(c.new_smb_global_mapping(new("//logsrv/share", "/busy")).await.is_err());
    let log = logs::text();
    assert!(log.contains("NewSmbGlobalMapping"), "nothing was captured:\n{log}");
    assert!(log.contains("logged-user"), "the request itself is logged:\n{log}");
    assert!(!log.contains(PASSWORD), "password logged:\n{log}");
}
