//! The Windows CSI drivers' node flows (crate::flows) against the Windows backend on the scripted
//! platform, through the real server and its v1 wire messages on unix sockets.
//!
//! The volume, disk and SMB groups are the Windows backend (`windows::volumes`, `disks`, `smb`)
//! over `windows::script::Script`. Before every call a new script is written from a small model
//! of one Windows node ([`Machine`]: the kubelet's folders, mount points and links, one data
//! disk and its volume, the SMB global mappings), with the answers Win32 and the Storage/SMB WMI
//! providers document for that state; after the call, what the backend did (SetVolumeMountPointW,
//! DeleteVolumeMountPointW, MSFT_Volume.Format, MSFT_Disk.CreatePartition, …) is applied to the
//! model. The filesystem group's Windows implementation is Windows-only (NT handle calls in
//! `windows::platform::fs`); here it is [`ModelFs`], the model's own answers in upstream's
//! semantics, and the real one runs the same flows under Wine (driver_flows_pipes.rs).

#![cfg(unix)]

include!("support/scripted_windows.rs");

#[cfg(target_os = "linux")]
use csi_proxy_stack_tests::procs::{fds_and_threads, sockets_under};

/// azuredisk-csi-driver v1.31 in csi-proxy mode (pkg/mounter/safe_mounter_windows.go,
/// pkg/azuredisk/azure_common_windows.go, pkg/azuredisk/nodeserver.go): stage, publish, stats,
/// expand, unpublish, unstage. Its unstage and stats look the volume up by the staging and
/// publish paths as the kubelet sent them (the staging path without a drive).
#[tokio::test]
async fn azuredisk_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("disk.csi.azure.com", "pvc-azuredisk");

    w.ok("NodeStageVolume", azuredisk::stage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert!(w.machine().formatted);
    // Staged again (a kubelet retry): nothing is formatted or mounted twice.
    let before = p.calls.len();
    w.ok("NodeStageVolume again", azuredisk::stage(&mut p, &w.node, &v).await);
    assert!(
        p.calls[before..].iter().all(|c| !c.contains("Format") && !c.contains("MountVolume")),
        "{:#?}",
        &p.calls[before..]
    );

    w.ok("NodePublishVolume", azuredisk::publish(&mut p, &w.node, &v).await);
    let staged = canon(&w.node.n(&v.staging)).unwrap();
    assert_eq!(w.at(&v.publish), Some(Kind::Link(staged)));

    let (total, used) = w.ok("NodeGetVolumeStats", azuredisk::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());
    assert_eq!(used, 0);

    w.machine().disk_size = 20 * GIB;
    let capacity = w.ok("NodeExpandVolume", azuredisk::expand(&mut p, &w.node, &v, 19 * GIB as i64).await);
    assert_eq!(capacity as u64, 20 * GIB - DATA_OFFSET - MIB - NTFS_OVERHEAD);

    w.ok("NodeUnpublishVolume", azuredisk::unpublish(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.publish), None);
    w.ok("NodeUnstageVolume", azuredisk::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    // The cache was flushed before the folder went: GetVolumeIDFromTargetPath answered for the
    // kubelet's drive-less path.
    assert_eq!(p.called("volume/v1.WriteVolumeCache"), [format!("volume/v1.WriteVolumeCache {VOLUME}")]);
    assert_no_warnings(&p);
}

/// gcp-compute-persistent-disk-csi-driver (pkg/mount-manager/safe-mounter-v1_windows.go,
/// pkg/resizefs/resizefs_windows.go, pkg/mount-manager/statter_windows.go,
/// pkg/gce-pd-csi-driver/node.go): MountVolume and the resize's GetVolumeIDFromTargetPath get the
/// staging path without a drive.
#[tokio::test]
async fn gce_pd_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("pd.csi.storage.gke.io", "pvc-gce");

    w.ok("NodeStageVolume", gce_pd::stage(&mut p, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert!(w.machine().online);
    let mounted = format!("volume/v1.MountVolume {VOLUME} {}", v.staging);
    assert_eq!(p.called("volume/v1.MountVolume"), [mounted.as_str()]);
    assert_eq!(p.called("volume/v1.ResizeVolume"), [format!("volume/v1.ResizeVolume {VOLUME} 0")]);

    w.ok("NodePublishVolume", gce_pd::publish(&mut p, &w.node, &ModelLocal(w.machine.clone()), &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    let (total, _) = w.ok("NodeGetVolumeStats", gce_pd::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());

    w.machine().disk_size = 20 * GIB;
    let size = w.ok("NodeExpandVolume", gce_pd::expand(&mut p, &v, 20 * GIB as i64).await);
    assert_eq!(size as u64, 20 * GIB);
    assert_eq!(w.machine().partition_size, 20 * GIB - DATA_OFFSET - MIB);

    w.ok("NodeUnpublishVolume", gce_pd::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", gce_pd::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online, "the disk is taken offline");
    assert_no_warnings(&p);
}

/// aws-ebs-csi-driver (pkg/mounter/mount_windows_proxyV1.go, pkg/mounter/mount_windows.go,
/// pkg/driver/node.go): NodeStageVolume asks GetVolumeIDFromTargetPath about the fresh staging
/// folder and goes on only when the error text matches its pattern; NodeUnstageVolume of a
/// volume that is gone must find the same words.
#[tokio::test]
async fn ebs_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("ebs.csi.aws.com", "pvc-ebs");

    w.ok("NodeStageVolume", ebs::stage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    // Staged again: the mounted disk is recognised, nothing else is done.
    let before = p.calls.len();
    w.ok("NodeStageVolume again", ebs::stage(&mut p, &w.node, &v).await);
    assert!(!p.calls[before..].iter().any(|c| c.contains("PartitionDisk")), "{:#?}", &p.calls[before..]);

    w.ok("NodePublishVolume", ebs::publish(&mut p, &w.node, &v).await);
    w.ok("NodeGetVolumeStats", ebs::stats_exists(&mut p, &w.node, &v).await);
    w.machine().disk_size = 20 * GIB;
    let size = w.ok("NodeExpandVolume", ebs::expand(&mut p, &w.node, &v).await);
    assert_eq!(size as u64, 20 * GIB);

    w.ok("NodeUnpublishVolume", ebs::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", ebs::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online);
    // Unstaged again (a retry): the folder is gone, which must read as "not mounted".
    let before = p.calls.len();
    w.ok("NodeUnstageVolume again", ebs::unstage(&mut p, &w.node, &v).await);
    assert_eq!(p.calls.len(), before + 1, "{:#?}", &p.calls[before..]);
    assert_no_warnings(&p);
}

/// vsphere-csi-driver v3.4 (pkg/csi/service/mounter/mounter_windows.go,
/// pkg/csi/service/osutils/windows_os_utils.go, pkg/csi/service/node.go): NodeGetVolumeStats
/// passes the publish path as the kubelet sent it.
#[tokio::test]
async fn vsphere_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("csi.vsphere.vmware.com", "pvc-vsphere");

    w.ok("NodeStageVolume", vsphere::stage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    w.ok("NodePublishVolume", vsphere::publish(&mut p, &w.node, &v).await);
    let (total, _) = w.ok("NodeGetVolumeStats", vsphere::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());
    w.machine().disk_size = 20 * GIB;
    w.ok("NodeExpandVolume", vsphere::expand(&mut p, &w.node, &v, 20 * GIB as i64).await);
    // The driver compares the request with the disk's size (GetDiskStats), which the cloud
    // already grew: within 1 MiB, it resizes nothing.
    assert!(p.called("volume/v1.ResizeVolume").is_empty(), "{:#?}", p.calls);
    assert_eq!(p.called("disk/v1.GetDiskStats"), ["disk/v1.GetDiskStats 2"]);
    w.ok("NodeUnpublishVolume", vsphere::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", vsphere::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online);
    assert_no_warnings(&p);
}

/// csi-driver-smb (pkg/mounter/safe_mounter_windows.go, pkg/smb/smb_common_windows.go,
/// pkg/smb/nodeserver.go): the global mapping's local path is the staging path with `c:`.
#[tokio::test]
async fn smb_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("smb.csi.k8s.io", "//fileserver/share/dir/", r"CONTOSO\kube");

    w.ok("NodeStageVolume", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(w.machine().mapped.contains(r"\\fileserver\share"));
    assert_eq!(w.at(&s.staging), Some(Kind::Link(r"\\?\UNC\fileserver\share\dir\".into())));
    let mapped = format!(r"smb/v1.NewSmbGlobalMapping \\fileserver\share\dir {} CONTOSO\kube", w.node.n(&s.staging));
    assert_eq!(p.called("smb/v1.NewSmbGlobalMapping"), [mapped.as_str()]);
    // Staged again: the link is there, nothing is mapped again.
    let before = p.calls.len();
    w.ok("NodeStageVolume again", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(!p.calls[before..].iter().any(|c| c.contains("NewSmbGlobalMapping")));

    w.ok("NodePublishVolume", smb::publish(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(matches!(w.at(&s.publish), Some(Kind::Link(_))));
    w.ok("NodeUnpublishVolume", smb::unpublish(&mut p, &w.node, &s).await);
    w.ok("NodeUnstageVolume", smb::unstage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert_eq!(p.called("smb/v1.RemoveSmbGlobalMapping"), [r"smb/v1.RemoveSmbGlobalMapping \\fileserver\share\dir"]);
    assert!(w.machine().mapped.is_empty());
    assert_eq!(w.at(&s.staging), None);
    assert_no_warnings(&p);
}

/// azurefile-csi-driver (pkg/mounter/safe_mounter_windows.go,
/// pkg/azurefile/azure_common_windows.go, pkg/azurefile/nodeserver.go): the share's path is
/// built with `\`, the user is `AZURE\<account>`, unstaging removes the folder only.
#[tokio::test]
async fn azurefile_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("file.csi.azure.com", r"\\acct.file.core.windows.net\share", r"AZURE\acct");

    w.ok("NodeStageVolume", smb::stage(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await);
    assert!(w.machine().mapped.contains(r"\\acct.file.core.windows.net\share"));
    w.ok("NodePublishVolume", smb::publish(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await);
    // azurefile v1.35.7: a published link whose share went away fails the republish, and is
    // left for NodeUnpublishVolume (no Rmdir).
    quiet(&w, &mut p).await;
    w.machine().mapped.clear();
    let before = p.calls.len();
    let r = smb::publish(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await.unwrap_err();
    assert!(r.message.contains("The network path was not found"), "{r}");
    assert!(p.calls[before..].iter().all(|c| !c.contains("Rmdir")), "{:#?}", &p.calls[before..]);
    assert!(matches!(w.at(&s.publish), Some(Kind::Link(_))), "the stale link is kept");
    p.warnings.clear();
    w.machine().mapped.insert(r"\\acct.file.core.windows.net\share".into());
    w.ok("NodeUnpublishVolume", smb::unpublish(&mut p, &w.node, &s).await);
    w.ok("NodeUnstageVolume", smb::unstage(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await);
    assert_eq!(w.at(&s.staging), None);
    assert!(p.called("smb/v1.RemoveSmbGlobalMapping").is_empty());
    assert_no_warnings(&p);
}

/// azuredisk-csi-driver v1.34.5 (pkg/azuredisk/nodeserver.go, azure_common_windows.go,
/// pkg/mounter/safe_mounter_windows.go): the disk is found by its LUN, and NodeStageVolume ends
/// with ResizeVolume whose volume ID is the disk number: a larger clone's volume grows there.
/// NodeExpandVolume's size check compares the filesystem before resizing, so an online
/// expansion is Unavailable in csi-proxy mode (the driver's, not the daemon's, doing); a stale
/// pod link whose ReadDir fails is removed by the next publish, which fails for the retry.
#[tokio::test]
async fn azuredisk_v1_34_stage_resizes_a_larger_clone() {
    let w = Win::start().await;
    {
        let mut m = w.machine();
        larger_clone(&mut m);
        m.identities.push(Identity { number: DISK, lun: "3", page83: None, serial: None });
    }
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let v = w.block_volume("disk.csi.azure.com", "pvc-azuredisk-clone");

    let disk = w.ok("getDevicePathWithLUN", azuredisk::v1_34::find_disk_by_lun(&mut p, "3").await);
    assert_eq!(disk, DISK);
    assert_eq!(p.calls, ["disk/v1.Rescan", "disk/v1.ListDiskLocations"]);
    let r = azuredisk::v1_34::find_disk_by_lun(&mut p, "7").await.unwrap_err();
    assert_eq!(r.code, Code::Internal);
    assert!(r.message.contains("could not find disk id for lun: 7"), "{r}");

    let before = w.machine().partition_size;
    w.ok("NodeStageVolume", azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.called("volume/v1.ResizeVolume"), ["volume/v1.ResizeVolume 2 0"]);
    assert!(p.called("volume/v1.FormatVolume").is_empty(), "the clone's NTFS is kept");
    let after = w.machine().partition_size;
    assert!(after > before + 9 * GIB, "the volume grew over the larger disk: {before} -> {after}");

    w.ok("NodePublishVolume", azuredisk::v1_34::publish(&mut p, &w.node, &local, &v).await);
    let staged = canon(&w.node.n(&v.staging)).unwrap();
    assert_eq!(w.at(&v.publish), Some(Kind::Link(staged.clone())));
    let (total, _) = w.ok("NodeGetVolumeStats", azuredisk::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());

    // The cloud grows the disk to 30 GiB; NodeExpandVolume for 29 GiB.
    w.machine().disk_size = 30 * GIB;
    let before = p.calls.len();
    let r = azuredisk::v1_34::expand(&mut p, &w.node, &v, 29 * GIB as i64).await.unwrap_err();
    assert_eq!(r.code, Code::Unavailable, "{r}");
    assert!(r.message.contains("size check failed: current 20 GiB < requested 29 GiB"), "{r}");
    assert!(!p.calls[before..].iter().any(|c| c.contains("ResizeVolume")), "{:#?}", &p.calls[before..]);

    w.ok("NodeUnpublishVolume", azuredisk::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", azuredisk::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    // The kubelet restages (the pod moved back): the stage-resize grows the volume to 30 GiB.
    w.machine().mkdir_all(&canon(&w.node.n(&v.staging)).unwrap());
    w.ok("NodeStageVolume again", azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await);
    assert_eq!(w.machine().partition_size, 30 * GIB - DATA_OFFSET - MIB);
    assert_no_warnings(&p);

    // The disk went offline under the mounted staging folder (a re-attach, upstream
    // csi-proxy#437): its ReadDir fails, the driver unmounts it (the cache flush by the path as
    // sent, then Rmdir) and fails this call; once the disk is back the retry stages again.
    quiet(&w, &mut p).await;
    w.machine().online = false;
    let before = p.calls.len();
    let r = azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await.unwrap_err();
    assert_eq!(r.code, Code::Internal);
    assert!(r.message.contains("The device is not ready"), "{r}");
    assert_eq!(w.at(&v.staging), None, "the unreadable mount was removed: {:#?}", &p.calls[before..]);
    let names: Vec<&str> = p.calls[before..].iter().map(|c| c.split(' ').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "filesystem/v1.PathExists",
            "filesystem/v1.IsSymlink",
            "volume/v1.GetVolumeIDFromTargetPath",
            "volume/v1.WriteVolumeCache",
            "filesystem/v1.Rmdir"
        ]
    );
    assert!(p.warnings.iter().any(|w| w.starts_with("ReadDir")), "{:#?}", p.warnings);
    w.machine().online = true;
    w.machine().mkdir_all(&staged);
    w.ok("NodeStageVolume retried", azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
}

/// Makes a call without effects, so that the model's state can be changed by the test (the
/// model applies the last call's effects whenever it is settled).
async fn quiet(w: &Win, p: &mut Proxy) {
    p.path_exists(&format!(r"{ROOT}\quiet")).await.unwrap();
    w.settle();
    p.calls.pop();
}

/// azuredisk-csi-driver v1.34.5 with `--use-csiproxy-ga-interface=false`
/// (pkg/mounter/safe_mounter_v1beta_windows.go): filesystem v1beta1, disk and volume v1beta2,
/// the disk named by its number as a string, ResizeVolume with that string at stage.
#[tokio::test]
async fn azuredisk_v1beta_node_flows() {
    let w = Win::start().await;
    {
        let mut m = w.machine();
        larger_clone(&mut m);
        m.identities.push(Identity { number: DISK, lun: "3", page83: None, serial: None });
    }
    let mut p = w.legacy_proxy().await;
    let v = w.block_volume("disk.csi.azure.com", "pvc-azuredisk-beta");

    let disk = w.ok("getDevicePathWithLUN", azuredisk::v1beta::find_disk_by_lun(&mut p, "3").await);
    assert_eq!(disk, DISK.to_string());
    w.ok("NodeStageVolume", azuredisk::v1beta::stage(&mut p, &w.node, &disk, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.called("volume/v1beta2.ResizeVolume"), ["volume/v1beta2.ResizeVolume 2 0"]);
    assert_eq!(w.machine().partition_size, 20 * GIB - DATA_OFFSET - MIB);
    w.ok("NodePublishVolume", azuredisk::v1beta::publish(&mut p, &w.node, &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    let (total, used) = w.ok("NodeGetVolumeStats", azuredisk::v1beta::stats(&mut p, &v).await);
    // The v1beta mounter takes VolumeSize for the free bytes and adds the used ones to it.
    assert_eq!((total as u64, used as u64), (w.machine().fs_size() + 3 * GIB, 3 * GIB));
    w.ok("NodeUnpublishVolume", azuredisk::v1beta::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", azuredisk::v1beta::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert_eq!(p.called("volume/v1beta2.WriteVolumeCache"), [format!("volume/v1beta2.WriteVolumeCache {VOLUME}")]);
    assert!(p.calls.iter().all(|c| !c.contains("/v1.")), "only the fallback versions: {:#?}", p.calls);
    assert_no_warnings(&p);
}

/// gcp-compute-persistent-disk-csi-driver master (safe-mounter-v1_windows.go, node.go): disks
/// found by page 83 (the last word is the device name) and, on NVMe, by the EUI in the serial
/// number Windows reports (`…_0000.`, trailing `.` and `_` as the device wrote them); the
/// disk-size check before formatting; publish's IsSymlink first, and the check after a failed
/// link.
#[tokio::test]
async fn gce_pd_master_node_flows() {
    let w = Win::start().await;
    w.machine().identities = vec![
        Identity {
            number: 0,
            lun: "0",
            page83: Some((CODE_SET_ASCII, b"Google  persistent-disk-0".to_vec())),
            serial: Some("persistent-disk-0   "),
        },
        Identity {
            number: DISK,
            lun: "2",
            page83: Some((CODE_SET_ASCII, b"Google  pvc-gce".to_vec())),
            serial: Some("pvc-gce"),
        },
        Identity { number: 5, lun: "1", page83: None, serial: Some("10CC_9636_B6E3_CE3B_0000_0000_0000_0000.") },
    ];
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let v = w.block_volume("pd.csi.storage.gke.io", "pvc-gce");

    assert_eq!(w.ok("GetDiskNumber", gce_pd::master::disk_number_by_page83(&mut p, "pvc-gce").await), DISK);
    let nvme = gce_pd::master::disk_number_nvme(&mut p, "pvc-nvme", 0x10CC_9636_B6E3_CE3B).await;
    assert_eq!(w.ok("GetDiskNumber (NVMe)", nvme), 5, "the serial's EUI matched");
    let r = gce_pd::master::disk_number_by_page83(&mut p, "pvc-missing").await.unwrap_err();
    assert!(r.message.contains("could not find disk number for device pvc-missing"), "{r}");

    // The controller says 11 GiB; the disk is 10: refused before anything is written.
    let before = p.calls.len();
    let r = gce_pd::master::stage(&mut p, &v, Some(11)).await.unwrap_err();
    assert_eq!(r.code, Code::Internal);
    assert_eq!(r.message, r"expected block size '\v', got '\n'");
    assert_eq!(
        &p.calls[before..],
        [format!(r"filesystem/v1.IsSymlink {}", v.staging), "disk/v1.GetDiskStats 2".into()]
    );
    w.ok("NodeStageVolume", gce_pd::master::stage(&mut p, &v, Some(10)).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));

    w.ok("NodePublishVolume", gce_pd::master::publish(&mut p, &w.node, &local, &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    let before = p.calls.len();
    w.ok("NodePublishVolume again", gce_pd::master::publish(&mut p, &w.node, &local, &v).await);
    assert_eq!(p.calls[before..], [format!("filesystem/v1.IsSymlink {}", v.publish)]);
    w.ok("NodeUnpublishVolume", gce_pd::unpublish(&mut p, &w.node, &v).await);

    // A staging path outside the kubelet's directory (a misconfigured kubelet root): the link
    // is refused; IsSymlink of the target that was never made fails, and so does the call.
    let stray = BlockVolume { staging: r"\var\lib\other\globalmount".into(), ..v.clone() };
    let before = p.calls.len();
    let r = gce_pd::master::publish(&mut p, &w.node, &local, &stray).await.unwrap_err();
    assert!(r.message.starts_with("NodePublishVolume failed to check whether target path is a mount point:"), "{r}");
    assert!(r.message.contains("PermissionDenied"), "the link's own error is reported: {r}");
    let tail: Vec<&str> = p.calls[before..].iter().rev().take(2).map(|c| c.split(' ').next().unwrap()).collect();
    assert_eq!(tail, ["filesystem/v1.IsSymlink", "filesystem/v1.CreateSymlink"]);
    assert_eq!(w.at(&v.publish), None);
    p.warnings.clear();

    w.ok("NodeUnstageVolume", gce_pd::unstage(&mut p, &w.node, &v).await);
    assert!(!w.machine().online);
    assert_no_warnings(&p);
}

/// gcp-compute-persistent-disk-csi-driver master's fallback (safe-mounter-v1beta_windows.go,
/// resizefs_windows.go): disk v1beta2 (ListDiskIDs' `page83` identifier, SetAttachState),
/// filesystem and volume v1beta1.
#[tokio::test]
async fn gce_pd_v1beta_node_flows() {
    let w = Win::start().await;
    w.machine().identities.push(Identity {
        number: DISK,
        lun: "2",
        page83: Some((CODE_SET_ASCII, b"Google  pvc-gce-beta".to_vec())),
        serial: Some("pvc-gce-beta"),
    });
    let mut p = w.legacy_proxy().await;
    let local = ModelLocal(w.machine.clone());
    let v = w.block_volume("pd.csi.storage.gke.io", "pvc-gce-beta");

    let disk = w.ok("GetDiskNumber", gce_pd::v1beta::disk_number_by_page83(&mut p, "pvc-gce-beta").await);
    assert_eq!(disk, "2");
    w.ok("NodeStageVolume", gce_pd::v1beta::stage(&mut p, &disk, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.called("volume/v1beta1.ResizeVolume"), [format!("volume/v1beta1.ResizeVolume {VOLUME} 0")]);
    w.ok("NodePublishVolume", gce_pd::v1beta::publish(&mut p, &w.node, &local, &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    w.ok("NodeUnpublishVolume", gce_pd::v1beta::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", gce_pd::v1beta::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online, "SetAttachState took the disk offline");
    assert!(p.calls.iter().all(|c| !c.contains("/v1.")), "only the fallback versions: {:#?}", p.calls);
    assert_no_warnings(&p);
}

/// aws-ebs-csi-driver v1.64.0 (mount_windows_proxyV1.go FindDevicePath, node.go): the disk is
/// found by the serial number containing the volume ID without dashes, on a disk v1 connection
/// made for that call and closed after it; NodeExpandVolume with nothing mounted at the path
/// still finds the disk and fails the resize's lookup (Internal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebs_v1_64_node_flows() {
    let w = Win::start().await;
    w.machine().identities.push(Identity {
        number: DISK,
        lun: "1",
        page83: Some((CODE_SET_BINARY, vec![0x60, 0x0d, 0x02, 0x31])),
        serial: Some("vol0123456789abcdef0"),
    });
    let mut p = w.proxy().await;
    let v = w.block_volume("ebs.csi.aws.com", "pvc-ebs-164");
    let id = "vol-0123456789abcdef0";
    let open = || w.server.channel(Group::Disk, "v1");

    w.ok("NodeStageVolume", ebs::v1_64::stage(&mut p, open(), &w.node, &v, "/dev/xvdba", id).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.calls[0], "disk/v1.ListDiskIDs (a connection of its own)");
    let r = ebs::v1_64::stage(&mut p, open(), &w.node, &v, "/dev/xvdbb", "vol-0fffffffffffffff0").await.unwrap_err();
    assert_eq!(r.code, Code::NotFound);
    assert!(r.message.contains(r#"volume id "vol-0fffffffffffffff0" not found"#), "{r}");

    // NodeExpandVolume of a volume not published here: the pattern reads "not mounted", the disk
    // is found, Rescan, and the resize's GetVolumeIDFromTargetPath fails.
    let before = p.calls.len();
    let r = ebs::v1_64::expand(&mut p, open(), &w.node, &v, id).await.unwrap_err();
    assert_eq!(r.code, Code::Internal, "{r}");
    assert!(r.message.starts_with(&format!("Could not resize volume {id:?}")), "{r}");
    let names: Vec<&str> = p.calls[before..].iter().map(|c| c.split(' ').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "volume/v1.GetVolumeIDFromTargetPath",
            "disk/v1.ListDiskIDs",
            "disk/v1.Rescan",
            "volume/v1.GetVolumeIDFromTargetPath"
        ]
    );

    w.ok("NodePublishVolume", ebs::publish(&mut p, &w.node, &v).await);
    w.machine().disk_size = 20 * GIB;
    let size = w.ok("NodeExpandVolume", ebs::v1_64::expand(&mut p, open(), &w.node, &v, id).await);
    assert_eq!(size as u64, 20 * GIB);
    w.ok("NodeUnpublishVolume", ebs::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", ebs::unstage(&mut p, &w.node, &v).await);
    assert_no_warnings(&p);

    // A connection per call, 200 times: nothing stays open in the server (this process).
    #[cfg(target_os = "linux")]
    {
        let warm = w.ok(
            "FindDevicePath",
            ebs::v1_64::find_device_path(&mut p, open(), "", id)
                .await
                .map_err(|m| flows::Failure { code: Code::NotFound, message: m }),
        );
        assert_eq!(warm, DISK);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let socket = w.server.socket(Group::Disk, "v1").parent().unwrap().to_owned();
        let (held, (fds, threads)) = (sockets_under(&socket), fds_and_threads());
        for _ in 0..200 {
            let n = ebs::v1_64::find_device_path(&mut p, open(), "", id).await.unwrap();
            assert_eq!(n, DISK);
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
            "200 connections: the server's sockets {held} -> {now}; this process \
             (the server and other tests) fds {fds} -> {fds_after}, threads {threads} -> {threads_after}"
        );
        assert_eq!(now, held, "the server still holds {} of the 200 connections", now - held);
        // The other tests in this process come and go: a thread per call would be 200 more.
        assert!(threads_after < threads + 50, "threads: {threads} before, {threads_after} after");
    }
}

/// vsphere-csi-driver v3.4.0 GetDiskNumber (mounter_windows.go): the disk whose page 83 ID is
/// the publish context's disk UUID, as VMware's NAA identifier renders in hex.
#[tokio::test]
async fn vsphere_disk_discovery() {
    let w = Win::start().await;
    let naa = [0x60, 0x00, 0xc2, 0x9b, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5];
    w.machine().identities.push(Identity {
        number: DISK,
        lun: "1",
        page83: Some((CODE_SET_BINARY, naa.to_vec())),
        serial: Some("6000c29b1a2b3c4d5e6f708192a3b4c5"),
    });
    let mut p = w.proxy().await;
    let disk = w.ok("GetDiskNumber", vsphere::disk_number(&mut p, "6000c29b1a2b3c4d5e6f708192a3b4c5").await);
    assert_eq!(disk, DISK);
    let r = vsphere::disk_number(&mut p, "6000C29B1A2B3C4D5E6F708192A3B4C5").await.unwrap_err();
    assert!(r.message.contains("no matching disks found"), "the match is exact: {r}");
}

/// csi-driver-smb v1.20.3 (safe_mounter_windows.go SMBMount, nodeserver.go): one trailing
/// backslash trimmed, a `*.svc.cluster.local` server mapped by its IPv4 address, an ephemeral
/// inline volume mapped straight at the pod's path and unpublished with Rmdir only, and a
/// staged link whose share went away removed (ReadDir fails) so the retry maps again.
#[tokio::test]
async fn smb_v1_20_node_flows() {
    let w = Win::start().await;
    w.machine().dns.insert("smb-server.default.svc.cluster.local".into(), "10.96.0.7".into());
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("smb.csi.k8s.io", "//smb-server.default.svc.cluster.local/share/dir//", r"CONTOSO\kube");

    w.ok("NodeStageVolume", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    let mapped = format!(r"smb/v1.NewSmbGlobalMapping \\10.96.0.7\share\dir\ {} CONTOSO\kube", w.node.n(&s.staging));
    assert_eq!(p.called("smb/v1.NewSmbGlobalMapping"), [mapped.as_str()]);
    assert!(w.machine().mapped.contains(r"\\10.96.0.7\share"));

    // The mapping went away (the node rebooted): the link is there but can't be read.
    quiet(&w, &mut p).await;
    w.machine().mapped.clear();
    let before = p.calls.len();
    let r = smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await.unwrap_err();
    assert!(r.message.contains("The network path was not found"), "{r}");
    assert_eq!(p.calls.last().unwrap(), &format!("filesystem/v1.Rmdir {} force", w.node.n(&s.staging)));
    assert_eq!(w.at(&s.staging), None, "{:#?}", &p.calls[before..]);
    w.ok("NodeStageVolume retried", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(w.machine().mapped.contains(r"\\10.96.0.7\share"));
    p.warnings.clear();
    w.ok("NodeUnstageVolume", smb::unstage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    // os.Readlink gives `\\10.96.0.7\share\dir\`; one backslash goes.
    assert_eq!(p.called("smb/v1.RemoveSmbGlobalMapping"), [r"smb/v1.RemoveSmbGlobalMapping \\10.96.0.7\share\dir"]);

    // An ephemeral inline volume: no staging, the pod's folder is the mapping's local path.
    let e = w.share("smb.csi.k8s.io", "//fileserver/share/inline", r"CONTOSO\kube");
    w.ok("NodePublishVolume (ephemeral)", smb::publish_ephemeral(&mut p, &w.node, &local, &e).await);
    assert_eq!(w.at(&e.publish), Some(Kind::Link(r"\\?\UNC\fileserver\share\inline\".into())));
    let before = p.calls.len();
    w.ok("NodeUnpublishVolume (ephemeral)", smb::unpublish(&mut p, &w.node, &e).await);
    assert_eq!(p.calls[before..], [format!("filesystem/v1.Rmdir {} force", e.publish)]);
    assert_eq!(w.at(&e.publish), None);
    assert!(
        w.machine().mapped.contains(r"\\fileserver\share"),
        "the mapping stays (the driver only removes the folder)"
    );
    assert_no_warnings(&p);
}

/// The fallback mounters of csi-driver-smb v1.20.3 and azurefile v1.35.7
/// (safe_mounter_v1beta_windows.go): filesystem and smb v1beta1; the trailing backslash is
/// kept, and unstaging removes the folder only.
#[tokio::test]
async fn smb_and_azurefile_v1beta_node_flows() {
    let w = Win::start().await;
    let mut p = w.legacy_proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("smb.csi.k8s.io", "//fileserver/share/dir/", r"CONTOSO\kube");

    w.ok("NodeStageVolume", smb::v1beta::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    let mapped =
        format!(r"smb/v1beta1.NewSmbGlobalMapping \\fileserver\share\dir\ {} CONTOSO\kube", w.node.n(&s.staging));
    assert_eq!(p.called("smb/v1beta1.NewSmbGlobalMapping"), [mapped.as_str()]);
    w.ok("NodePublishVolume", smb::v1beta::publish(&mut p, &w.node, &local, &s).await);
    assert!(matches!(w.at(&s.publish), Some(Kind::Link(_))));
    w.ok("NodeUnpublishVolume", smb::v1beta::unpublish(&mut p, &w.node, &s).await);
    w.ok("NodeUnstageVolume", smb::v1beta::unstage(&mut p, &w.node, &s).await);
    assert_eq!(w.at(&s.staging), None);
    assert!(w.machine().mapped.contains(r"\\fileserver\share"), "v1beta unmount leaves the mapping");

    let a = w.share("file.csi.azure.com", r"\\acct.file.core.windows.net\share", r"AZURE\acct");
    w.ok("NodeStageVolume (azurefile)", smb::v1beta::stage(&mut p, &w.node, &local, smb::Driver::AzureFile, &a).await);
    assert!(w.machine().mapped.contains(r"\\acct.file.core.windows.net\share"));
    w.ok("NodeUnstageVolume (azurefile)", smb::v1beta::unstage(&mut p, &w.node, &a).await);
    assert!(p.calls.iter().all(|c| !c.contains("/v1.")), "only the fallback versions: {:#?}", p.calls);
    assert_no_warnings(&p);
}

/// A FormatVolume and then a MountVolume of the volume (every disk driver's stage when the
/// volume is new): the mount reads the volume's disk extents once, under its disk's lock, on
/// the disk the format found it on (the server's locks.rs remembers it); the first sight of the
/// volume reads them twice, before the lock and under it, and FormatVolume once more in the
/// host, for its interlock (the disk whose flags it checks).
#[tokio::test]
async fn mount_volume_reads_the_volume_disk_once() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("disk.csi.azure.com", "pvc-lookups");
    let extents_read = |w: &Win| {
        let (line, script) = w.call.lock().unwrap().clone();
        let device = VOLUME.trim_end_matches('\\');
        let n = script.log().iter().filter(|l| l.starts_with(&format!("ioctl {device} 0x560000"))).count();
        (line, n)
    };
    p.partition_disk(DISK).await.unwrap();
    let id = p.list_volumes_on_disk(DISK).await.unwrap().remove(0);
    assert_eq!(id, VOLUME);
    p.format_volume(&id).await.unwrap();
    let (line, n) = extents_read(&w);
    assert!(line.contains("FormatVolume") && n == 3, "{line}: {n} reads");
    p.mount_volume(&id, &w.node.n(&v.staging)).await.unwrap();
    let (line, n) = extents_read(&w);
    assert!(line.contains("MountVolume") && n == 1, "{line}: {n} reads");
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert!(w.unscripted.lock().unwrap().is_empty());
}
