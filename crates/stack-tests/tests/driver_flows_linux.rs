#![cfg(target_os = "linux")]
//! The Windows CSI drivers' node flows (crate::flows) against the Linux backend on loop disks
//! (root only; CI runs as root), through the real server on unix sockets: the same sequences,
//! with the kubelet's paths below a scratch root spelled as Linux spells them. Disk discovery (by
//! LUN, page 83 or serial number) is not part of the flows: the test knows its loop disk.
//! The SMB drivers' flows need a share, which this kernel (no cifs) cannot mount: the SMB group
//! runs against Samba in the storage VM instead (tests/smb_vm.rs).
//! Two things the loop disks can't do are left out and said so: SetDiskState (only SCSI disks
//! have an online state on Linux; the call is recorded, not sent), and ext4's online growth
//! (resize2fs needs CAP_SYS_RESOURCE, which containers often lack), so the volumes are XFS.

use csi_proxy_host::types::FsType;
use csi_proxy_stack_tests::disks::{run, LoopDisk};
use csi_proxy_stack_tests::flows::{self, azuredisk, ebs, gce_pd, vsphere, BlockVolume, Local, Node, Proxy};
use csi_proxy_stack_tests::mounts::mounted_at;
use csi_proxy_stack_tests::{needs_root, Scratch, TestServer};
use std::path::Path;

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
