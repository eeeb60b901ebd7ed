//! vsphere-csi-driver v3.4: pkg/csi/service/mounter/mounter_windows.go,
//! pkg/csi/service/osutils/windows_os_utils.go, pkg/csi/service/node.go.

use super::*;

/// GetDiskNumber (v3.4.0 mounter_windows.go): ListDiskIDs, the disk whose page 83 ID is
/// `disk_id` exactly (the publish context's disk UUID, as the VM's SCSI disks report it).
pub async fn disk_number(p: &mut Proxy, disk_id: &str) -> Outcome<u32> {
    let ids = (p.list_disk_ids().await).map_err(|s| internal("error getting disk number", &s))?;
    ids.iter()
        .find(|(_, (page83, _))| !page83.is_empty() && page83 == disk_id)
        .map(|(n, _)| *n)
        .ok_or_else(|| fail(Code::Internal, "error getting disk number: no matching disks found"))
}

/// NodeGetInfo: the node's UUID from the BIOS serial number.
pub async fn node_info(p: &mut Proxy) -> Outcome<String> {
    (p.bios_serial().await).map_err(|s| internal("failed to get system UUID", &s))
}

/// NodeStageBlockVolume with mount access (the "is it mounted" check is os.Lstat in the
/// driver; the staging folder is not there yet).
pub async fn stage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    format_and_mount(p, v.disk, true, &node.n(&v.staging))
        .await
        .map_err(|s| internal("error mounting volume", &s))
        .map(drop)
}

pub async fn publish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let target = node.n(&v.publish);
    let prepare = async {
        if p.path_exists(&target).await? {
            p.rmdir(&target, true).await?;
        }
        p.mkdir(&node.n(&node.parent(&v.publish))).await
    };
    prepare.await.map_err(|s| internal("Target path could not be prepared", &s))?;
    (p.create_symlink(&node.n(&v.staging), &target).await)
        .map_err(|s| internal(&format!("Could not mount {:?} at {:?}", v.staging, v.publish), &s))
}

/// NodeGetVolumeStats through StatFS, with the path as the kubelet sent it. (total, used).
pub async fn stats(p: &mut Proxy, v: &BlockVolume) -> Outcome<(i64, i64)> {
    let run = async {
        let id = p.volume_at(&v.publish).await?;
        p.volume_stats(&id).await
    };
    run.await.map_err(|s| internal("failed to get metrics", &s))
}

pub async fn expand(p: &mut Proxy, node: &Node, v: &BlockVolume, required: i64) -> Outcome {
    let run = async {
        let id = p.volume_at(&node.n(&v.publish)).await?;
        let (total, _) = p.volume_stats(&id).await?;
        if total < required {
            p.rescan().await?;
        }
        let disk = p.disk_of_volume(&id).await?;
        let disk_size = p.disk_stats(disk).await?;
        if required - disk_size < 1 << 20 {
            return Ok(());
        }
        let disk = p.disk_of_volume(&id).await?;
        p.set_disk_state(disk, true).await?;
        p.resize_volume(&id, 0).await
    };
    run.await.map_err(|s| internal("error when resizing filesystem", &s))
}

pub async fn unpublish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    (p.rmdir(&node.n(&v.publish), true).await).map_err(|s| internal("error unmounting publishTarget", &s))
}

pub async fn unstage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    unmount_and_offline(p, &node.n(&v.staging)).await.map_err(|s| internal("error unmounting stagingTarget", &s))
}
