#![cfg(target_os = "linux")]
//! The Windows CSI drivers' node flows (crate::flows) against the Linux backend on loop disks
//! (root only; CI runs as root), through the real server on unix sockets: the same sequences,
//! with the kubelet's paths below a scratch root spelled as Linux spells them. Loop disks have no
//! LUN, page 83 ID or serial number: each driver's discovery runs and finds nothing (its error is
//! checked), and the test knows its loop disk.
//! The SMB drivers' flows need a share, which this kernel (no cifs) cannot mount: the SMB group
//! runs against Samba in the storage VM instead (tests/smb_vm.rs).
//! Two things the loop disks can't do are left out and said so: SetDiskState (only SCSI disks
//! have an online state on Linux; the call is recorded, not sent), and ext4's online growth
//! (resize2fs needs CAP_SYS_RESOURCE, which containers often lack), so the volumes are XFS.

use csi_proxy_host::types::FsType;
use csi_proxy_stack_tests::disks::{run, LoopDisk};
use csi_proxy_stack_tests::flows::{self, azuredisk, ebs, gce_pd, vsphere, BlockVolume, Local, Node, Proxy};
use csi_proxy_stack_tests::mounts::mounted_at;
use csi_proxy_stack_tests::procs::{fds_and_threads, sockets_under};
use csi_proxy_stack_tests::{needs_root, Scratch, TestServer};
use csi_proxy_wire::Group;
use std::path::Path;
use tonic::Code;

const MIB: u64 = 1 << 20;
/// The loop disk, then grown to [`GROWN`] (XFS needs 300 MB at least).
const SIZE: u64 = 320 * MIB;
const GROWN: u64 = 640 * MIB;
const HASH: &str = "7d5f1c0a3b9e8d2f4a6c1e0b9d8f7a6c5e4d3b2a19f8e7d6c5b4a39281706f5e";
const POD: &str = "2c9b8a7f-6e5d-4c3b-a291-8f7e6d5c4b3a";

/// A node: the native backend confined to `<scratch>/kubelet`, one loop disk. Fields drop in
/// order: the server, the tree (whatever is still mounted in it is unmounted), the disk.
struct Lin {
    server: TestServer,
    _base: Scratch,
    disk: LoopDisk,
    node: Node,
}

struct FsLocal;

impl Local for FsLocal {
    fn mkdir_all(&self, path: &str) {
        std::fs::create_dir_all(path).unwrap();
    }
    fn readlink(&self, path: &str) -> Option<String> {
        std::fs::read_link(path).ok().map(|p| p.to_str().unwrap().to_owned())
    }
}

impl Lin {
    async fn start(tag: &str) -> Lin {
        let base = Scratch::new(&format!("csi-flows-{tag}"));
        let root = base.dir("kubelet");
        let server = TestServer::start_native(vec![root.clone()], FsType::Xfs).await;
        let disk = LoopDisk::new(&format!("flow-{tag}"), SIZE);
        Lin { server, _base: base, disk, node: Node::linux(&root) }
    }

    async fn proxy(&self) -> Proxy {
        let mut p = Proxy::connect(|g, v| self.server.channel(g, v)).await;
        p.not_sent.push(("disk/v1.SetDiskState", "a loop disk has no online state"));
        p.not_sent.push(("disk/v1beta2.SetAttachState", "a loop disk has no online state"));
        p
    }

    /// [`Lin::proxy`] with the fallback versions' clients too.
    async fn legacy_proxy(&self) -> Proxy {
        let mut p = self.proxy().await;
        p.connect_legacy(|g, v| self.server.channel(g, v)).await;
        p
    }

    /// The kubelet's folders for a volume of `driver`: the staging folder (csi_attacher) and the
    /// pod's volume folder (csi_mounter).
    fn block_volume(&self, driver: &str, pv: &str) -> BlockVolume {
        let v = BlockVolume {
            disk: self.disk.number(),
            staging: self.node.staging(driver, HASH),
            publish: self.node.publish(POD, pv),
        };
        std::fs::create_dir_all(&v.staging).unwrap();
        std::fs::create_dir_all(&v.publish).unwrap();
        v
    }

    /// The cloud grows the disk; the loop device is told (a test tool, as in linux_volumes.rs).
    fn grow(&self, size: u64) {
        self.disk.grow_file(size);
        run(&["losetup", "-c", self.disk.dev.to_str().unwrap()]);
    }
}

/// The flow's result, or a failure naming what the driver would report and the calls it made.
macro_rules! ok {
    ($p:ident, $what:expr, $flow:expr) => {{
        let r: flows::Outcome<_> = $flow;
        r.unwrap_or_else(|f| panic!("{} failed as the driver would report it: {f}\ncalls: {:#?}", $what, $p.calls))
    }};
}

fn mounted(path: &str) -> bool {
    !mounted_at(path).is_empty()
}

fn assert_no_warnings(p: &Proxy) {
    assert!(p.warnings.is_empty(), "the driver logged: {:#?}\ncalls: {:#?}", p.warnings, p.calls);
}

/// azuredisk-csi-driver v1.31 (pkg/mounter/safe_mounter_windows.go,
/// pkg/azuredisk/azure_common_windows.go, pkg/azuredisk/nodeserver.go), mapped to Linux paths.
#[tokio::test]
async fn azuredisk_node_flows_on_a_loop_disk() {
    needs_root!();
    let l = Lin::start("azuredisk").await;
    let mut p = l.proxy().await;
    let v = l.block_volume("disk.csi.azure.com", "pvc-azuredisk");

    ok!(p, "NodeStageVolume", azuredisk::stage(&mut p, &l.node, &v).await);
    assert!(mounted(&v.staging));
    ok!(p, "NodePublishVolume", azuredisk::publish(&mut p, &l.node, &v).await);
    std::fs::write(Path::new(&v.publish).join("data"), b"kept").unwrap();
    let (total, used) = ok!(p, "NodeGetVolumeStats", azuredisk::stats(&mut p, &v).await);
    assert!(total > 250 * MIB as i64 && used > 0, "{total} {used}");
    l.grow(GROWN);
    let capacity = ok!(p, "NodeExpandVolume", azuredisk::expand(&mut p, &l.node, &v, 560 * MIB as i64).await);
    assert!(capacity > 560 * MIB as i64, "{capacity}");
    ok!(p, "NodeUnpublishVolume", azuredisk::unpublish(&mut p, &l.node, &v).await);
    ok!(p, "NodeUnstageVolume", azuredisk::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging) && !Path::new(&v.staging).exists());
    assert_eq!(p.called("volume/v1.WriteVolumeCache").len(), 1);
    assert_no_warnings(&p);
    drop(l);
}

/// gcp-compute-persistent-disk-csi-driver (pkg/mount-manager/safe-mounter-v1_windows.go,
/// pkg/resizefs/resizefs_windows.go, pkg/mount-manager/statter_windows.go,
/// pkg/gce-pd-csi-driver/node.go), mapped to Linux paths.
#[tokio::test]
async fn gce_pd_node_flows_on_a_loop_disk() {
    needs_root!();
    let l = Lin::start("gce").await;
    let mut p = l.proxy().await;
    let v = l.block_volume("pd.csi.storage.gke.io", "pvc-gce");

    ok!(p, "NodeStageVolume", gce_pd::stage(&mut p, &v).await);
    assert!(mounted(&v.staging));
    ok!(p, "NodePublishVolume", gce_pd::publish(&mut p, &l.node, &FsLocal, &v).await);
    let (total, _) = ok!(p, "NodeGetVolumeStats", gce_pd::stats(&mut p, &v).await);
    assert!(total > 250 * MIB as i64, "{total}");
    l.grow(GROWN);
    let size = ok!(p, "NodeExpandVolume", gce_pd::expand(&mut p, &v, GROWN as i64).await);
    assert_eq!(size as u64, GROWN);
    let (total, _) = ok!(p, "NodeGetVolumeStats", gce_pd::stats(&mut p, &v).await);
    assert!(total > 560 * MIB as i64, "the filesystem grew: {total}");
    ok!(p, "NodeUnpublishVolume", gce_pd::unpublish(&mut p, &l.node, &v).await);
    ok!(p, "NodeUnstageVolume", gce_pd::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging));
    assert_no_warnings(&p);
}

/// aws-ebs-csi-driver (pkg/mounter/mount_windows_proxyV1.go, pkg/mounter/mount_windows.go,
/// pkg/driver/node.go), mapped to Linux paths: the "not mounted" answers must carry the words its
/// pattern looks for.
#[tokio::test]
async fn ebs_node_flows_on_a_loop_disk() {
    needs_root!();
    let l = Lin::start("ebs").await;
    let mut p = l.proxy().await;
    let v = l.block_volume("ebs.csi.aws.com", "pvc-ebs");
    std::fs::remove_dir(&v.staging).unwrap(); // EBS makes the folder itself when it is missing

    ok!(p, "NodeStageVolume", ebs::stage(&mut p, &l.node, &v).await);
    assert!(mounted(&v.staging));
    let before = p.calls.len();
    ok!(p, "NodeStageVolume again", ebs::stage(&mut p, &l.node, &v).await);
    assert!(!p.calls[before..].iter().any(|c| c.contains("PartitionDisk")), "{:#?}", &p.calls[before..]);
    ok!(p, "NodePublishVolume", ebs::publish(&mut p, &l.node, &v).await);
    ok!(p, "NodeGetVolumeStats", ebs::stats_exists(&mut p, &l.node, &v).await);
    l.grow(GROWN);
    let size = ok!(p, "NodeExpandVolume", ebs::expand(&mut p, &l.node, &v).await);
    assert_eq!(size as u64, GROWN);
    ok!(p, "NodeUnpublishVolume", ebs::unpublish(&mut p, &l.node, &v).await);
    ok!(p, "NodeUnstageVolume", ebs::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging));
    let before = p.calls.len();
    ok!(p, "NodeUnstageVolume again", ebs::unstage(&mut p, &l.node, &v).await);
    assert_eq!(p.calls.len(), before + 1, "{:#?}", &p.calls[before..]);
    assert_no_warnings(&p);
}

/// vsphere-csi-driver v3.4 (pkg/csi/service/mounter/mounter_windows.go,
/// pkg/csi/service/osutils/windows_os_utils.go, pkg/csi/service/node.go), mapped to Linux paths.
#[tokio::test]
async fn vsphere_node_flows_on_a_loop_disk() {
    needs_root!();
    let l = Lin::start("vsphere").await;
    let mut p = l.proxy().await;
    let v = l.block_volume("csi.vsphere.vmware.com", "pvc-vsphere");

    ok!(p, "NodeStageVolume", vsphere::stage(&mut p, &l.node, &v).await);
    assert!(mounted(&v.staging));
    ok!(p, "NodePublishVolume", vsphere::publish(&mut p, &l.node, &v).await);
    let (total, _) = ok!(p, "NodeGetVolumeStats", vsphere::stats(&mut p, &v).await);
    assert!(total > 250 * MIB as i64, "{total}");
    l.grow(GROWN);
    ok!(p, "NodeExpandVolume", vsphere::expand(&mut p, &l.node, &v, GROWN as i64).await);
    ok!(p, "NodeUnpublishVolume", vsphere::unpublish(&mut p, &l.node, &v).await);
    ok!(p, "NodeUnstageVolume", vsphere::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging));
    assert_no_warnings(&p);
}

/// azuredisk-csi-driver v1.34.5 (pkg/azuredisk/nodeserver.go, azure_common_windows.go,
/// pkg/mounter/safe_mounter_windows.go), mapped to Linux paths: a disk restored larger than its
/// filesystem is grown by NodeStageVolume's ResizeVolume(VolumeId = disk number). A loop disk
/// has no LUN, so the driver's discovery finds nothing (its error is checked); the test knows
/// its disk. NodeExpandVolume's size check reads the filesystem before resizing: Unavailable.
#[tokio::test]
async fn azuredisk_v1_34_stage_resizes_a_larger_disk_on_a_loop_disk() {
    needs_root!();
    let l = Lin::start("azuredisk134").await;
    let mut p = l.proxy().await;
    let local = FsLocal;
    let v = l.block_volume("disk.csi.azure.com", "pvc-azuredisk-clone");

    let r = azuredisk::v1_34::find_disk_by_lun(&mut p, "3").await.unwrap_err();
    assert_eq!(r.code, Code::Internal);
    assert!(r.message.contains("could not find disk id for lun: 3"), "{r}");

    // The source volume, staged once at 320 MiB and unstaged: a filesystem of that size.
    ok!(p, "NodeStageVolume", azuredisk::v1_34::stage(&mut p, &l.node, &local, &v, "3").await);
    let (small, _) = ok!(
        p,
        "NodeGetVolumeStats",
        azuredisk::stats(&mut p, &BlockVolume { publish: v.staging.clone(), ..v.clone() }).await
    );
    ok!(p, "NodeUnstageVolume", azuredisk::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging));
    // Restored onto a 640 MiB disk, staged again: the stage's ResizeVolume grows it.
    l.grow(GROWN);
    std::fs::create_dir_all(&v.staging).unwrap();
    ok!(p, "NodeStageVolume (larger)", azuredisk::v1_34::stage(&mut p, &l.node, &local, &v, "3").await);
    let resized = format!("volume/v1.ResizeVolume {} 0", v.disk);
    assert_eq!(p.called("volume/v1.ResizeVolume"), [resized.as_str(), resized.as_str()]);
    ok!(p, "NodePublishVolume", azuredisk::v1_34::publish(&mut p, &l.node, &local, &v).await);
    let (total, _) = ok!(p, "NodeGetVolumeStats", azuredisk::stats(&mut p, &v).await);
    println!("azuredisk v1.34 stage-resize on a loop disk: filesystem {small} -> {total} bytes");
    assert!(small < 330 * MIB as i64 && total > 560 * MIB as i64, "the volume grew: {small} -> {total}");

    let r = azuredisk::v1_34::expand(&mut p, &l.node, &v, 2 << 30).await.unwrap_err();
    assert_eq!(r.code, Code::Unavailable, "{r}");
    ok!(p, "NodeUnpublishVolume", azuredisk::unpublish(&mut p, &l.node, &v).await);
    ok!(p, "NodeUnstageVolume", azuredisk::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging));
    assert_no_warnings(&p);
}

/// azuredisk v1.34.5's and GCE PD master's fallback mounters (safe_mounter_v1beta_windows.go,
/// safe-mounter-v1beta_windows.go): filesystem v1beta1, disk v1beta2, volume v1beta2 and
/// v1beta1, on a loop disk. SetAttachState is recorded, not sent (no online state here).
#[tokio::test]
async fn fallback_versions_on_a_loop_disk() {
    needs_root!();
    let l = Lin::start("beta").await;
    let mut p = l.legacy_proxy().await;
    let v = l.block_volume("disk.csi.azure.com", "pvc-azuredisk-beta");
    let disk = v.disk.to_string();

    ok!(p, "azuredisk NodeStageVolume", azuredisk::v1beta::stage(&mut p, &l.node, &disk, &v).await);
    assert!(mounted(&v.staging));
    ok!(p, "azuredisk NodePublishVolume", azuredisk::v1beta::publish(&mut p, &l.node, &v).await);
    std::fs::write(Path::new(&v.publish).join("data"), b"kept").unwrap();
    let (total, used) = ok!(p, "azuredisk NodeGetVolumeStats", azuredisk::v1beta::stats(&mut p, &v).await);
    assert!(total > 250 * MIB as i64 && used > 0, "{total} {used}");
    ok!(p, "azuredisk NodeUnpublishVolume", azuredisk::v1beta::unpublish(&mut p, &l.node, &v).await);
    ok!(p, "azuredisk NodeUnstageVolume", azuredisk::v1beta::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging) && !Path::new(&v.staging).exists());
    assert_eq!(p.called("volume/v1beta2.WriteVolumeCache").len(), 1);

    // The same disk, now formatted, through GCE PD's fallback.
    let g = l.block_volume("pd.csi.storage.gke.io", "pvc-gce-beta");
    ok!(p, "gce NodeStageVolume", gce_pd::v1beta::stage(&mut p, &disk, &g).await);
    assert!(mounted(&g.staging));
    ok!(p, "gce NodePublishVolume", gce_pd::v1beta::publish(&mut p, &l.node, &FsLocal, &g).await);
    assert_eq!(std::fs::read(Path::new(&g.publish).join("data")).unwrap(), b"kept");
    ok!(p, "gce NodeUnpublishVolume", gce_pd::v1beta::unpublish(&mut p, &l.node, &g).await);
    ok!(p, "gce NodeUnstageVolume", gce_pd::v1beta::unstage(&mut p, &l.node, &g).await);
    assert!(!mounted(&g.staging));
    assert!(p.calls.iter().all(|c| !c.contains("/v1.")), "only the fallback versions: {:#?}", p.calls);
    assert_no_warnings(&p);
}

/// GCE PD master (node.go, safe-mounter-v1_windows.go) on a loop disk: the disk-size check with
/// GetDiskStats before anything is written, publish starting with IsSymlink. Loop disks have
/// no page 83 ID or serial: GCE's, EBS's and vSphere's discovery find nothing, each with its
/// driver's error.
#[tokio::test]
async fn gce_pd_master_and_discovery_on_a_loop_disk() {
    needs_root!();
    let l = Lin::start("gcemaster").await;
    let mut p = l.proxy().await;
    let v = l.block_volume("pd.csi.storage.gke.io", "pvc-gce-master");

    let r = gce_pd::master::disk_number_by_page83(&mut p, "pvc-gce-master").await.unwrap_err();
    assert!(r.message.contains("could not find disk number for device pvc-gce-master"), "{r}");
    let r = gce_pd::master::disk_number_nvme(&mut p, "pvc-gce-master", 0x10CC_9636_B6E3_CE3B).await.unwrap_err();
    assert!(r.message.contains("could not find disk number"), "{r}");
    let open = || l.server.channel(Group::Disk, "v1");
    let r = ebs::v1_64::find_device_path(&mut p, open(), "/dev/xvdba", "vol-0123456789abcdef0").await.unwrap_err();
    assert!(r.contains("not found"), "{r}");
    let r = vsphere::disk_number(&mut p, "6000c29b1a2b3c4d5e6f708192a3b4c5").await.unwrap_err();
    assert!(r.message.contains("no matching disks found"), "{r}");

    // 320 MiB rounds up to 1 GiB: 2 GiB expected is refused before anything is written.
    let before = p.calls.len();
    let r = gce_pd::master::stage(&mut p, &v, Some(2)).await.unwrap_err();
    assert_eq!(r.message, r"expected block size '\x02', got '\x01'");
    assert_eq!(p.calls.len(), before + 2, "{:#?}", &p.calls[before..]);
    ok!(p, "NodeStageVolume", gce_pd::master::stage(&mut p, &v, Some(1)).await);
    assert!(mounted(&v.staging));
    ok!(p, "NodePublishVolume", gce_pd::master::publish(&mut p, &l.node, &FsLocal, &v).await);
    let before = p.calls.len();
    ok!(p, "NodePublishVolume again", gce_pd::master::publish(&mut p, &l.node, &FsLocal, &v).await);
    assert_eq!(p.calls[before..], [format!("filesystem/v1.IsSymlink {}", v.publish)]);
    ok!(p, "NodeUnpublishVolume", gce_pd::unpublish(&mut p, &l.node, &v).await);
    ok!(p, "NodeUnstageVolume", gce_pd::unstage(&mut p, &l.node, &v).await);
    assert!(!mounted(&v.staging));
    assert_no_warnings(&p);
}

/// aws-ebs-csi-driver v1.64.0 FindDevicePath (mount_windows_proxyV1.go): a disk v1 connection
/// per call, 200 times, against the Linux backend; afterwards the server holds no more file
/// descriptors or threads than before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebs_connection_per_call_leaks_nothing() {
    needs_root!();
    let l = Lin::start("ebsconn").await;
    let mut p = l.proxy().await;
    let open = || l.server.channel(Group::Disk, "v1");
    let id = "vol-0123456789abcdef0";
    let _ = ebs::v1_64::find_device_path(&mut p, open(), "", id).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let socket = l.server.socket(Group::Disk, "v1").parent().unwrap().to_owned();
    let (held, (fds, threads)) = (sockets_under(&socket), fds_and_threads());
    for _ in 0..200 {
        // Loop disks have no serial: every call lists the disks and finds none.
        let r = ebs::v1_64::find_device_path(&mut p, open(), "", id).await.unwrap_err();
        assert!(r.contains("not found"), "{r}");
    }
    // Closed connections are torn down by tasks of their own: wait for them, bounded.
    let mut now = sockets_under(&socket);
    for _ in 0..100 {
        if now <= held {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        now = sockets_under(&socket);
    }
    let (fds_after, threads_after) = fds_and_threads();
    println!(
        "200 connections (Linux backend): the server's sockets {held} -> {now}; \
         this process (the server and other tests) fds {fds} -> {fds_after}, threads {threads} -> {threads_after}"
    );
    assert_eq!(now, held, "the server still holds {} of the 200 connections", now - held);
    // The other tests in this process come and go: a thread per call would be 200 more.
    assert!(threads_after < threads + 50, "threads: {threads} before, {threads_after} after");
    assert_eq!(p.called("disk/v1.ListDiskIDs (a connection of its own)").len(), 201);
}
