#![cfg(target_os = "linux")]
//! The iSCSI group on the native Linux backend against a real target (tgtd) and initiator
//! (open-iscsi), inside the storage VM only (`scripts/storage-vm-tests.sh`); elsewhere every test
//! returns at once. Through the real server and client over unix sockets: portals, discovery,
//! CHAP and mutual CHAP logins, the target's disk through the disk and volume groups, logout.
//! Secrets must show up in no error text, no log line and no process's argv.
//!
//! The tests share one target (127.0.0.1:3260, CHAP user `alice`) and run one at a time.

use csi_proxy_host::types::FsType;
use csi_proxy_stack_tests::procs::Scanner;
use csi_proxy_stack_tests::{assert_status, logs, Scratch, TestServer};
use csi_proxy_wire::{v1, v1alpha2, Group};
use std::collections::HashMap;
use std::process::Command;
use std::sync::OnceLock;
use tonic::Code;

const USER: &str = "alice";
const SECRET: &str = "chapSecret-4f9a2c";
const WRONG: &str = "wrongSecret-77d1e0";
const MUTUAL: &str = "mutualSecret-b83e5d";
/// A mutual CHAP secret the target does not know.
const WRONG_MUTUAL: &str = "notTheTargets-1234";
const PORT: u32 = 3260;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

type Client = v1alpha2::iscsi_client::IscsiClient<tonic::transport::Channel>;

/// The target's IQN, once its peers run; `None` outside the VM.
fn target() -> Option<String> {
    if std::env::var("STORAGE_VM").as_deref() != Ok("1") {
        eprintln!("skipped: only inside storage-vm (scripts/storage-vm-tests.sh)");
        return None;
    }
    static IQN: OnceLock<String> = OnceLock::new();
    Some(
        IQN.get_or_init(|| {
            let peers = std::env::var("STORAGE_VM_PEERS").expect("STORAGE_VM_PEERS");
            let out = Command::new(peers)
                .args(["iscsi-target", "--size", "64", "--chap", USER, SECRET])
                .output()
                .expect("storage-vm-peers");
            assert!(out.status.success(), "storage-vm-peers: {}", String::from_utf8_lossy(&out.stderr));
            let vars: HashMap<String, String> = String::from_utf8(out.stdout)
                .unwrap()
                .lines()
                .filter_map(|l| l.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
                .collect();
            let iqn = vars["ISCSI_IQN"].clone();
            // Mutual CHAP: the target answers under its IQN (what the backend expects) with MUTUAL.
            tgtadm(&["--mode", "account", "--op", "new", "--user", &iqn, "--password", MUTUAL]);
            tgtadm(&["--mode", "account", "--op", "bind", "--tid", "1", "--user", &iqn, "--outgoing"]);
            iqn
        })
        .clone(),
    )
}

fn tgtadm(args: &[&str]) {
    let out = Command::new("tgtadm").args(["--lld", "iscsi"]).args(args).output().unwrap();
    assert!(out.status.success(), "tgtadm {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn tp() -> Option<v1alpha2::TargetPortal> {
    Some(v1alpha2::TargetPortal { target_address: "127.0.0.1".into(), target_port: PORT })
}

fn connect(iqn: &str, auth: v1alpha2::AuthenticationType, secret: &str) -> v1alpha2::ConnectTargetRequest {
    v1alpha2::ConnectTargetRequest {
        target_portal: tp(),
        iqn: iqn.into(),
        auth_type: auth as i32,
        chap_username: USER.into(),
        chap_secret: secret.into(),
    }
}

async fn disks(c: &mut Client, iqn: &str) -> Vec<u32> {
    let req = v1alpha2::GetTargetDisksRequest { target_portal: tp(), iqn: iqn.into() };
    let ids = c.get_target_disks(req).await.unwrap().into_inner().disk_i_ds;
    ids.iter().map(|d| d.parse().unwrap()).collect()
}

async fn disconnect(c: &mut Client, iqn: &str) {
    c.disconnect_target(v1alpha2::DisconnectTargetRequest { target_portal: tp(), iqn: iqn.into() }).await.unwrap();
}

/// The disk numbers of the sessions' disks as iscsiadm reports them (`Attached scsi disk sdX`),
/// read back through sysfs independently of the backend.
fn attached_disks() -> Vec<u32> {
    let out = Command::new("iscsiadm").args(["-m", "session", "-P", "3"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut numbers: Vec<u32> = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(4)
        .filter(|w| w[0] == "Attached" && w[1] == "scsi" && w[2] == "disk")
        .map(|w| {
            let dev = std::fs::read_to_string(format!("/sys/class/block/{}/dev", w[3])).unwrap();
            let (major, minor) = dev.trim().split_once(':').unwrap();
            (major.parse::<u32>().unwrap() << 20) | minor.parse::<u32>().unwrap()
        })
        .collect();
    numbers.sort_unstable();
    numbers
}

/// Every node record file's text.
fn records() -> Vec<(String, String, u32)> {
    let out = Command::new("find").args(["/etc/iscsi/nodes", "/var/lib/iscsi/nodes", "-type", "f"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|p| {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            (p.to_string(), std::fs::read_to_string(p).unwrap(), mode)
        })
        .collect()
}

/// Watches every process's argv and environment for the secrets while the calls run.
fn watch() -> Scanner {
    Scanner::start(&[SECRET, WRONG, MUTUAL, WRONG_MUTUAL])
}

#[track_caller]
fn finish(watch: Scanner) {
    let leaks = watch.finish();
    assert!(leaks.is_empty(), "a secret in a process's argv or environment: {leaks:?}");
}

#[track_caller]
fn assert_no_secret(text: &str) {
    for s in [SECRET, WRONG, MUTUAL, WRONG_MUTUAL] {
        assert!(!text.contains(s), "a secret in {text:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn portals_chap_login_and_the_disk_through_the_volume_group() {
    let Some(iqn) = target() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    logs::install();
    let root = Scratch::new("csi-proxy-iscsi-vm");
    let s = TestServer::start_native(vec![root.p("")], FsType::Ext4).await;
    let mut c = Client::new(s.channel(Group::Iscsi, "v1alpha2").await);
    let mut d = v1::disk_client::DiskClient::new(s.channel(Group::Disk, "v1").await);
    let mut vol = v1::volume_client::VolumeClient::new(s.channel(Group::Volume, "v1").await);

    // Portals: added (twice), listed, discovered; a missing one is NotFound.
    let add = || v1alpha2::AddTargetPortalRequest { target_portal: tp() };
    c.add_target_portal(add()).await.unwrap();
    c.add_target_portal(add()).await.unwrap();
    let portals = c.list_target_portals(v1alpha2::ListTargetPortalsRequest {}).await.unwrap().into_inner();
    assert_eq!(portals.target_portals, vec![tp().unwrap()]);
    let discover = |p| v1alpha2::DiscoverTargetPortalRequest { target_portal: p };
    assert_eq!(c.discover_target_portal(discover(tp())).await.unwrap().into_inner().iqns, vec![iqn.clone()]);
    let other = Some(v1alpha2::TargetPortal { target_address: "127.0.0.1".into(), target_port: 3999 });
    assert_status(c.discover_target_portal(discover(other)).await, Code::NotFound, "127.0.0.1:3999");

    // Connect with CHAP (twice: the second is a no-op); the disk is there.
    let before = attached_disks();
    assert!(before.is_empty(), "{before:?}");
    let watch = watch();
    c.connect_target(connect(&iqn, v1alpha2::AuthenticationType::OneWayChap, SECRET)).await.unwrap();
    c.connect_target(connect(&iqn, v1alpha2::AuthenticationType::OneWayChap, SECRET)).await.unwrap();
    finish(watch);
    let numbers = disks(&mut c, &iqn).await;
    assert_eq!(numbers.len(), 1, "{numbers:?}");
    assert_eq!(numbers, attached_disks());
    let number = numbers[0];
    let ids = d.list_disk_i_ds(v1::ListDiskIDsRequest {}).await.unwrap().into_inner().disk_i_ds;
    assert!(ids.contains_key(&number), "{number} not in {ids:?}");
    // The secret is in the node record (0600) only while the session is up; not persistent.
    let recs = records();
    assert!(!recs.is_empty());
    for (path, text, mode) in &recs {
        assert_eq!(*mode, 0o600, "{path}");
        assert!(text.contains(&format!("node.session.auth.password = {SECRET}\n")), "{path}");
        assert!(text.contains("node.startup = manual\n"), "{path}");
    }

    // The disk through the disk and volume groups: partition, format, mount, write, unmount.
    d.partition_disk(v1::PartitionDiskRequest { disk_number: number }).await.unwrap();
    let list = v1::ListVolumesOnDiskRequest { disk_number: number, partition_number: 0 };
    let vols = vol.list_volumes_on_disk(list).await.unwrap().into_inner().volume_ids;
    assert_eq!(vols.len(), 1, "{vols:?}");
    let id = vols[0].clone();
    vol.format_volume(v1::FormatVolumeRequest { volume_id: id.clone() }).await.unwrap();
    let target = root.dir("pods/p1/volumes/iscsi");
    vol.mount_volume(v1::MountVolumeRequest { volume_id: id.clone(), target_path: target.clone() }).await.unwrap();
    std::fs::write(format!("{target}/hello"), b"over iSCSI").unwrap();
    assert_eq!(std::fs::read(format!("{target}/hello")).unwrap(), b"over iSCSI");
    vol.unmount_volume(v1::UnmountVolumeRequest { volume_id: id, target_path: target.clone() }).await.unwrap();
    assert!(!std::path::Path::new(&format!("{target}/hello")).exists());

    // Disconnect: the disk goes, the credentials leave the record; again is fine.
    disconnect(&mut c, &iqn).await;
    assert!(attached_disks().is_empty());
    assert!(disks(&mut c, &iqn).await.is_empty());
    let ids = d.list_disk_i_ds(v1::ListDiskIDsRequest {}).await.unwrap().into_inner().disk_i_ds;
    assert!(!ids.contains_key(&number), "{number} still in {ids:?}");
    for (path, text, _) in records() {
        assert_no_secret(&text);
        assert!(text.contains("node.session.auth.authmethod = None\n"), "{path}");
    }
    disconnect(&mut c, &iqn).await;

    // Remove the portal; again (a retry after it was removed) is no error and runs no iscsiadm
    // deletion of anything.
    let remove = || v1alpha2::RemoveTargetPortalRequest { target_portal: tp() };
    c.remove_target_portal(remove()).await.unwrap();
    c.remove_target_portal(remove()).await.unwrap();
    let portals = c.list_target_portals(v1alpha2::ListTargetPortalsRequest {}).await.unwrap().into_inner();
    assert!(portals.target_portals.is_empty(), "{portals:?}");
    assert_no_secret(&logs::text());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_chap_secret_is_permission_denied_and_never_shown() {
    let Some(iqn) = target() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    logs::install();
    let root = Scratch::new("csi-proxy-iscsi-vm-wrong");
    let s = TestServer::start_native(vec![root.p("")], FsType::Ext4).await;
    let mut c = Client::new(s.channel(Group::Iscsi, "v1alpha2").await);
    c.add_target_portal(v1alpha2::AddTargetPortalRequest { target_portal: tp() }).await.unwrap();

    let watch = watch();
    let e = c.connect_target(connect(&iqn, v1alpha2::AuthenticationType::OneWayChap, WRONG)).await.unwrap_err();
    finish(watch);
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains(&iqn), "{e:?}");
    assert_no_secret(&format!("{e:?}"));
    assert!(attached_disks().is_empty());
    for (_, text, _) in records() {
        assert_no_secret(&text);
    }
    // Nothing half-done: the right secret still logs in afterwards.
    c.connect_target(connect(&iqn, v1alpha2::AuthenticationType::OneWayChap, SECRET)).await.unwrap();
    assert_eq!(disks(&mut c, &iqn).await.len(), 1);
    disconnect(&mut c, &iqn).await;
    c.remove_target_portal(v1alpha2::RemoveTargetPortalRequest { target_portal: tp() }).await.unwrap();
    assert_no_secret(&logs::text());
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_chap_proves_the_target_knows_the_initiator_secret() {
    let Some(iqn) = target() else { return };
    let _one = ONE_AT_A_TIME.lock().await;
    logs::install();
    let root = Scratch::new("csi-proxy-iscsi-vm-mutual");
    let s = TestServer::start_native(vec![root.p("")], FsType::Ext4).await;
    let mut c = Client::new(s.channel(Group::Iscsi, "v1alpha2").await);
    c.add_target_portal(v1alpha2::AddTargetPortalRequest { target_portal: tp() }).await.unwrap();
    let set = |secret: &str| v1alpha2::SetMutualChapSecretRequest { mutual_chap_secret: secret.into() };
    let mutual = v1alpha2::AuthenticationType::MutualChap;

    // A secret the target does not know: the target cannot prove itself.
    let watch = watch();
    c.set_mutual_chap_secret(set(WRONG_MUTUAL)).await.unwrap();
    let e = c.connect_target(connect(&iqn, mutual, SECRET)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert_no_secret(&format!("{e:?}"));
    assert!(attached_disks().is_empty());
    // The failed login leaves no credentials in the node records.
    for (path, text, _) in records() {
        assert!(!text.contains(SECRET) && !text.contains(WRONG_MUTUAL), "{path}: {text}");
    }

    // The right one.
    c.set_mutual_chap_secret(set(MUTUAL)).await.unwrap();
    c.connect_target(connect(&iqn, mutual, SECRET)).await.unwrap();
    finish(watch);
    assert_eq!(disks(&mut c, &iqn).await, attached_disks());
    assert_eq!(attached_disks().len(), 1);
    for (path, text, mode) in records() {
        assert_eq!(mode, 0o600, "{path}");
        assert!(text.contains(&format!("node.session.auth.username_in = {iqn}\n")), "{path}");
    }
    disconnect(&mut c, &iqn).await;
    assert!(attached_disks().is_empty());
    c.set_mutual_chap_secret(set("")).await.unwrap();
    c.remove_target_portal(v1alpha2::RemoveTargetPortalRequest { target_portal: tp() }).await.unwrap();
    assert_no_secret(&logs::text());
    s.stop().await;
}
