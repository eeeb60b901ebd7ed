#![cfg(windows)]
//! The Windows CSI drivers' node flows (crate::flows) over the real named pipes, served by the
//! native Windows backend, for the steps Wine can do: the filesystem group on a real folder tree
//! (Wine 8 has no symbolic links, so CreateSymlink and what follows a link are left out), the
//! volume group's lookups of a kubelet folder by the paths drivers send (with and without a
//! drive), the system group's BIOS serial number, and the calls that need MSFT_* classes (which
//! Wine lacks) answering FailedPrecondition, the code of a missing host capability.
//!
//! The kubelet's folder is `C:\csi-flows-<pid>\kubelet`, and the process' current drive is C:,
//! so a path without a drive means the same folder to Win32, to the daemon and to the drivers.
//!
//! Pipe names are global, so this file serves them once, from its single test.

use csi_proxy_host::paths::Roots;
use csi_proxy_host::Config as HostConfig;
use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::api;
use csi_proxy_stack_tests::flows::{
    azuredisk, ebs, gce_pd, smb, vsphere, BlockVolume, Local, Node, Proxy, Share, APIS,
};
use csi_proxy_stack_tests::pipes::{channel, PipeServer};
use std::path::Path;
use tonic::Code;

const HASH: &str = "7d5f1c0a3b9e8d2f4a6c1e0b9d8f7a6c5e4d3b2a19f8e7d6c5b4a39281706f5e";
const POD: &str = "2c9b8a7f-6e5d-4c3b-a291-8f7e6d5c4b3a";

struct FsLocal;

impl Local for FsLocal {
    fn mkdir_all(&self, path: &str) {
        std::fs::create_dir_all(path).unwrap();
    }
    fn readlink(&self, path: &str) -> Option<String> {
        std::fs::read_link(path).ok().map(|p| p.to_str().unwrap().to_owned())
    }
}

fn volume(node: &Node, driver: &str, pv: &str) -> BlockVolume {
    let v = BlockVolume { disk: 0, staging: node.staging(driver, HASH), publish: node.publish(POD, pv) };
    // What the kubelet makes: the staging folder and the pod's volume folder.
    std::fs::create_dir_all(node.n(&v.staging)).unwrap();
    std::fs::create_dir_all(&v.publish).unwrap();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_flows_on_the_pipes() {
    std::env::set_current_dir(r"C:\").unwrap();
    let base = format!(r"C:\csi-flows-{}", std::process::id());
    let root = format!(r"{base}\kubelet");
    std::fs::create_dir_all(&root).unwrap();
    let hosts = csi_proxy_host::native(HostConfig { roots: Roots::new(vec![root.clone()]), ..Default::default() });
    let apis: Vec<_> = APIS.iter().map(|(g, v)| api(*g, v)).collect();
    let server = PipeServer::start(&apis, Context::new(hosts, Config::default()));
    let mut p = Proxy::connect(|g, v| channel(g, v)).await;
    let node = Node::windows(&root);

    // aws-ebs-csi-driver NodeStageVolume (pkg/driver/node.go, mount_windows_proxyV1.go) up to
    // FormatAndMount: PathExists, Mkdir, and GetVolumeIDFromTargetPath on the fresh folder,
    // whose error text must read "not mounted" to its pattern.
    let v = volume(&node, "ebs.csi.aws.com", "pvc-ebs");
    std::fs::remove_dir(node.n(&v.staging)).unwrap();
    let r = ebs::stage(&mut p, &node, &v).await.unwrap_err();
    assert!(p.called("disk/v1.PartitionDisk").len() == 1, "stopped before FormatAndMount: {r}\n{:#?}", p.calls);
    assert_eq!(r.code, Code::Internal);
    assert!(r.message.contains("FailedPrecondition") && r.message.contains("MSFT_"), "{r}");
    assert!(Path::new(&node.n(&v.staging)).is_dir(), "EBS made its staging folder");
    // NodeUnstageVolume of a volume that is not staged: the same words, nothing else called.
    let before = p.calls.len();
    ebs::unstage(&mut p, &node, &v).await.unwrap();
    assert_eq!(p.calls.len(), before + 1, "{:#?}", &p.calls[before..]);
    std::fs::remove_dir(node.n(&v.staging)).unwrap();
    ebs::unstage(&mut p, &node, &v).await.unwrap();
    // NodeGetVolumeStats' existence check.
    ebs::stats_exists(&mut p, &node, &v).await.unwrap();
    ebs::unpublish(&mut p, &node, &v).await.unwrap();
    assert!(!Path::new(&v.publish).exists());

    // gcp-compute-persistent-disk-csi-driver NodeStageVolume (node.go, safe-mounter-v1_windows.go):
    // IsSymlink of the drive-less staging path (an error counts as "not mounted"), then
    // PartitionDisk, which needs MSFT_Disk.
    let v = volume(&node, "pd.csi.storage.gke.io", "pvc-gce");
    let r = gce_pd::stage(&mut p, &v).await.unwrap_err();
    assert!(r.message.contains("FailedPrecondition"), "{r}\n{:#?}", p.calls);
    // Its NodeGetVolumeStats (statter_windows.go) asks about the publish path as sent: a plain
    // folder is no mounted folder, said with the words drivers match.
    let r = gce_pd::stats(&mut p, &v).await.unwrap_err();
    assert!(r.message.contains("NotFound") && r.message.contains("because it does not exist"), "{r}");
    // GetVolumeIDFromTargetPath with the kubelet's drive-less staging path is the same folder.
    let s = p.volume_at(&v.staging).await.unwrap_err();
    assert_eq!(s.code(), Code::NotFound, "{s:?}");
    assert!(s.message().contains("because it does not exist"), "{s:?}");
    gce_pd::unstage(&mut p, &node, &v).await.unwrap_err();
    std::fs::remove_dir(node.n(&v.staging)).unwrap();
    gce_pd::unstage(&mut p, &node, &v).await.unwrap();
    gce_pd::unpublish(&mut p, &node, &v).await.unwrap();

    // azuredisk-csi-driver NodeUnstageVolume (safe_mounter_windows.go): the cache flush looks the
    // volume up by the drive-less staging path; a plain folder is not mounted, and the folder goes.
    let v = volume(&node, "disk.csi.azure.com", "pvc-azuredisk");
    azuredisk::unstage(&mut p, &node, &v).await.unwrap();
    assert_eq!(p.warnings.len(), 1, "only the lookup of an unmounted folder warns: {:#?}", p.warnings);
    assert!(p.warnings[0].contains("NotFound"), "{:#?}", p.warnings);
    p.warnings.clear();
    assert!(!Path::new(&node.n(&v.staging)).exists());
    azuredisk::unpublish(&mut p, &node, &v).await.unwrap();

    // vsphere-csi-driver v3.4 NodeGetInfo (osutils/windows_os_utils.go): the BIOS serial number.
    // Wine's firmware tables have no serial string: then the answer must say so (NotFound), as a
    // machine without one would.
    match vsphere::node_info(&mut p).await {
        Ok(serial) => assert!(!serial.is_empty()),
        Err(f) => assert!(f.message.contains("code = NotFound") && f.message.contains("serial"), "{f}"),
    }

    // csi-driver-smb NodeStageVolume (safe_mounter_windows.go, smb_common_windows.go): the
    // folder checks and preparation, then NewSmbGlobalMapping, which needs
    // MSFT_SmbGlobalMapping: a missing capability, not a broken connection.
    let v = volume(&node, "smb.csi.k8s.io", "pvc-smb");
    let share = Share {
        source: "//fileserver/share/dir".into(),
        username: r"CONTOSO\kube".into(),
        password: "Quartz-Heron-4471".into(),
        staging: v.staging.clone(),
        publish: v.publish.clone(),
    };
    let r = smb::stage(&mut p, &node, &FsLocal, smb::Driver::Smb, &share).await.unwrap_err();
    assert!(r.message.contains("FailedPrecondition") && r.message.contains("MSFT_SmbGlobalMapping"), "{r}");
    assert!(!r.message.contains(&share.password));
    let mapped = format!(r"smb/v1.NewSmbGlobalMapping \\fileserver\share\dir {} CONTOSO\kube", node.n(&v.staging));
    assert_eq!(p.called("smb/v1.NewSmbGlobalMapping"), [mapped.as_str()]);
    assert!(!Path::new(&node.n(&v.staging)).exists(), "the staging folder made way for the link");
    smb::unpublish(&mut p, &node, &share).await.unwrap();
    smb::unstage(&mut p, &node, &FsLocal, smb::Driver::AzureFile, &share).await.unwrap();

    assert!(p.warnings.is_empty(), "{:#?}", p.warnings);
    server.stop().await;
    std::fs::remove_dir_all(&base).unwrap();
}
