//! Dry runs (`csi_proxy_server::dry_run`) through the server's services, over the memory host:
//! every method of the 23 APIs that may change the host, asked with `csi-proxy-dry-run: true`,
//! leaves the host exactly as it was, and the valid requests answer OK with a plan; the same
//! requests without the metadata do change it (so the comparison can fail).

mod common;

use common::{api, call, filled, input, pool, request};
use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::types::{ServiceStatus, SmbMapping, TargetPortal};
use csi_proxy_host::{DiskHost, Hosts, VolumeHost};
use csi_proxy_server::{Config, Context};
use csi_proxy_wire::{is_read_only, APIS, DRY_RUN_METADATA};
use std::sync::Arc;
use tonic::Code;

/// A host with something of every kind to change: disks 0 and 1 partitioned, disk 0's volume
/// formatted and mounted at /mnt/a, a directory, a link, an SMB mapping, a registered iSCSI portal with a
/// target, and a running service beside the stopped one.
fn arranged() -> (Arc<MemoryHost>, String) {
    let host = Arc::new(MemoryHost::sample());
    host.partition_disk(0).unwrap();
    host.partition_disk(1).unwrap();
    let volume = host.list_volumes_on_disk(0, 0).unwrap().remove(0);
    host.format_volume(&volume).unwrap();
    host.with(|s| {
        s.tree.insert("/mnt".into(), csi_proxy_host::memory::Node::Dir);
        s.tree.insert("/d".into(), csi_proxy_host::memory::Node::Dir);
        s.tree.insert("/d/e".into(), csi_proxy_host::memory::Node::Dir);
        s.smb.insert(
            r"\\srv\share".into(),
            SmbMapping {
                remote_path: r"\\srv\share".into(),
                local_path: String::new(),
                username: "u".into(),
                password: csi_proxy_host::types::Secret::new("p"),
                require_privacy: true,
            },
        );
        let portal = TargetPortal { address: "10.0.0.1".into(), port: 3260 };
        s.registered.insert(portal.clone());
        s.portals.entry(portal).or_default();
        let mut running = s.services["iscsid"].clone();
        running.info.status = ServiceStatus::Running;
        s.services.insert("kubelet".into(), running);
    });
    host.mount_volume(&volume, "/mnt/a").unwrap();
    (host, volume)
}

/// Everything the memory host holds, as text.
fn snapshot(host: &MemoryHost) -> String {
    host.with(|s| format!("{s:#?}"))
}

/// Valid requests of every mutating method, in the newest version that has it: each answers OK
/// with a plan.
fn valid_requests(volume: &str) -> Vec<(&'static str, &'static str, String)> {
    let v = serde_json::to_string(volume).unwrap();
    vec![
        ("v1.Disk", "PartitionDisk", r#"{"diskNumber": 1}"#.into()),
        ("v1.Disk", "Rescan", "{}".into()),
        ("v1.Disk", "SetDiskState", r#"{"diskNumber": 1, "isOnline": false}"#.into()),
        ("v1.Volume", "FormatVolume", r#"{"volumeId": "vol-1-1"}"#.into()),
        ("v1.Volume", "ResizeVolume", format!(r#"{{"volumeId": {v}, "sizeBytes": 0}}"#)),
        ("v1.Volume", "MountVolume", format!(r#"{{"volumeId": {v}, "targetPath": "/mnt/b"}}"#)),
        ("v1.Volume", "UnmountVolume", format!(r#"{{"volumeId": {v}, "targetPath": "/mnt/a"}}"#)),
        ("v1.Volume", "WriteVolumeCache", format!(r#"{{"volumeId": {v}}}"#)),
        ("v1.Filesystem", "Mkdir", r#"{"path": "/d/new"}"#.into()),
        ("v1.Filesystem", "Rmdir", r#"{"path": "/d/e", "force": true}"#.into()),
        ("v2alpha1.Filesystem", "RmdirContents", r#"{"path": "/d"}"#.into()),
        ("v1.Filesystem", "CreateSymlink", r#"{"sourcePath": "/d/e", "targetPath": "/d/link"}"#.into()),
        (
            "v1.Smb",
            "NewSmbGlobalMapping",
            r#"{"remotePath": "\\\\srv2\\s", "username": "u", "password": "secret-value"}"#.into(),
        ),
        ("v1.Smb", "RemoveSmbGlobalMapping", r#"{"remotePath": "\\\\srv\\share"}"#.into()),
        ("v1alpha2.Iscsi", "AddTargetPortal", r#"{"targetPortal": {"targetAddress": "10.0.0.2", "targetPort": 3260}}"#.into()),
        ("v1alpha2.Iscsi", "DiscoverTargetPortal", r#"{"targetPortal": {"targetAddress": "10.0.0.1", "targetPort": 3260}}"#.into()),
        ("v1alpha2.Iscsi", "RemoveTargetPortal", r#"{"targetPortal": {"targetAddress": "10.0.0.1", "targetPort": 3260}}"#.into()),
        (
            "v1alpha2.Iscsi",
            "ConnectTarget",
            r#"{"targetPortal": {"targetAddress": "10.0.0.1", "targetPort": 3260}, "iqn": "iqn.x:t", "authType": "ONE_WAY_CHAP", "chapUsername": "cu", "chapSecret": "secret-value"}"#.into(),
        ),
        (
            "v1alpha2.Iscsi",
            "DisconnectTarget",
            r#"{"targetPortal": {"targetAddress": "10.0.0.1", "targetPort": 3260}, "iqn": "iqn.x:t"}"#.into(),
        ),
        ("v1alpha2.Iscsi", "SetMutualChapSecret", r#"{"MutualChapSecret": "secret-value"}"#.into()),
        ("v1alpha1.System", "StartService", r#"{"name": "iscsid"}"#.into()),
        ("v1alpha1.System", "StopService", r#"{"name": "kubelet", "force": true}"#.into()),
    ]
}

#[tokio::test]
async fn every_mutating_method_plans_and_changes_nothing() {
    let (host, volume) = arranged();
    let ctx = Context::new(Hosts::from_one(host.clone()), Config::default());
    let pool = pool();
    let before = snapshot(&host);

    let valid = valid_requests(&volume);
    let mut covered = std::collections::BTreeSet::new();
    for (service, method, json) in &valid {
        let answer = call(&ctx, api(service), method, request(input(&pool, service, method), json), Some("true")).await;
        assert_eq!(answer.code, Code::Ok, "{service}/{method}: {}", answer.message);
        assert!(answer.dry_run_header, "{service}/{method}: the answer says it was a dry run");
        let plan = answer.plan.unwrap_or_default();
        assert!(!plan.is_empty(), "{service}/{method}: a plan");
        assert!(!plan.contains("secret-value"), "{service}/{method}: no secret in the plan: {plan}");
        assert_eq!(snapshot(&host), before, "{service}/{method} changed the host: {plan}");
        covered.insert(*method);
    }

    // Every method of every version that may change the host, with every field set: whatever it
    // answers, it is a dry run's answer (a plan, or the error the real call would give), never
    // the work.
    let mut mutating = 0;
    for a in APIS {
        let s = pool.get_service_by_name(&a.service_name()).unwrap();
        for m in s.methods().filter(|m| !is_read_only(m.name())) {
            mutating += 1;
            let bytes = prost::Message::encode_to_vec(&filled(m.input(), 0));
            let answer = call(&ctx, *a, m.name(), bytes, Some("true")).await;
            let what = format!("{}/{}", a.service_name(), m.name());
            assert!(answer.code != Code::Internal && answer.code != Code::Unimplemented, "{what}: {}", answer.message);
            assert!(!answer.message.contains("cannot plan"), "{what}: {}", answer.message);
            assert_eq!(answer.code == Code::Ok, answer.plan.is_some(), "{what}: an OK carries its plan");
            assert_eq!(snapshot(&host), before, "{what} changed the host");
        }
    }
    // The mutating methods of the 23 APIs (../shared/wire/upstream-wire.json); each of the 22
    // operations behind them has been seen to plan above.
    assert_eq!(mutating, 78, "the mutating methods of upstream-wire.json");
    assert_eq!(covered.len(), 22);

    // The same valid requests for real change the host: the comparison above can fail.
    let (service, method, json) = &valid[8];
    assert_eq!(*method, "Mkdir");
    let answer = call(&ctx, api(service), method, request(input(&pool, service, method), json), None).await;
    assert_eq!(answer.code, Code::Ok, "{}", answer.message);
    assert!(answer.plan.is_none() && !answer.dry_run_header);
    assert_ne!(snapshot(&host), before, "a real Mkdir changed the host");
}

#[tokio::test]
async fn refusals_are_the_real_calls_and_unclear_metadata_runs_nothing() {
    let (host, _) = arranged();
    let ctx = Context::new(
        Hosts::from_one(host.clone()),
        Config { allowed_services: Some(vec!["iscsid".into()]), ..Config::default() },
    );
    let pool = pool();
    let before = snapshot(&host);
    let cases = [
        // Not allowed by -allowed-service: the real call's PermissionDenied.
        (
            "v1alpha1.System",
            "StopService",
            r#"{"name": "kubelet"}"#.to_string(),
            Code::PermissionDenied,
            "not among the allowed",
        ),
        // No such disk or volume: the real call's NotFound.
        ("v1.Disk", "PartitionDisk", r#"{"diskNumber": 7}"#.to_string(), Code::NotFound, "disk 7"),
        ("v1.Volume", "FormatVolume", r#"{"volumeId": "nope"}"#.to_string(), Code::NotFound, "nope"),
        // Validation first, as for the real call.
        ("v1.Filesystem", "Mkdir", r#"{"path": ""}"#.to_string(), Code::InvalidArgument, "path"),
        (
            "v1.Volume",
            "MountVolume",
            r#"{"volumeId": "vol-9-1", "targetPath": "/mnt/z"}"#.to_string(),
            Code::NotFound,
            "vol-9-1",
        ),
        // Another volume mounted there: the real call's AlreadyExists (the memory host's).
        (
            "v1.Volume",
            "MountVolume",
            r#"{"volumeId": "vol-1-1", "targetPath": "/mnt/a"}"#.to_string(),
            Code::AlreadyExists,
            "already has volume vol-0-1 mounted",
        ),
    ];
    for (service, method, json, code, says) in cases {
        let answer =
            call(&ctx, api(service), method, request(input(&pool, service, method), &json), Some("true")).await;
        assert_eq!(answer.code, code, "{service}/{method}: {}", answer.message);
        assert!(answer.message.contains(says), "{service}/{method}: {}", answer.message);
    }
    // A value other than true or false is refused before anything runs.
    let mkdir = request(input(&pool, "v1.Filesystem", "Mkdir"), r#"{"path": "/d/x"}"#);
    for bad in ["yes", "TRUE", "1"] {
        let answer = call(&ctx, api("v1.Filesystem"), "Mkdir", mkdir.clone(), Some(bad)).await;
        assert_eq!(answer.code, Code::InvalidArgument, "{bad}: {}", answer.message);
        assert!(answer.message.contains(DRY_RUN_METADATA), "{}", answer.message);
    }
    assert_eq!(snapshot(&host), before);
    // `false` is the real call.
    let answer = call(&ctx, api("v1.Filesystem"), "Mkdir", mkdir, Some("false")).await;
    assert_eq!(answer.code, Code::Ok);
    assert_ne!(snapshot(&host), before);
}

#[tokio::test]
async fn a_read_only_call_runs_as_asked() {
    let (host, _) = arranged();
    let ctx = Context::new(Hosts::from_one(host), Config::default());
    let pool = pool();
    let req = request(input(&pool, "v1.Filesystem", "PathExists"), r#"{"path": "/d/e"}"#);
    let answer = call(&ctx, api("v1.Filesystem"), "PathExists", req, Some("true")).await;
    assert_eq!(answer.code, Code::Ok);
    assert!(answer.plan.is_none() && !answer.dry_run_header, "no plan: it ran");
}
