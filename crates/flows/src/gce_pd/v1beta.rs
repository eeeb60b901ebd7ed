//! gcp-compute-persistent-disk-csi-driver master's fallback mounter, used when the v1 pipes are
//! missing: pkg/mount-manager/safe-mounter-v1beta_windows.go (disk v1beta2, filesystem and
//! volume v1beta1), pkg/resizefs/resizefs_windows.go (resizeV1Beta), driven by the same
//! pkg/gce-pd-csi-driver/node.go as [`super::master`].

use super::*;
use crate::legacy::{Context, VolumeApi};

const VOL: VolumeApi = VolumeApi::V1beta1;

/// getDiskNumberLegacy through disk v1beta2: the `page83` identifier's last word.
pub async fn disk_number_by_page83(p: &mut Proxy, device_name: &str) -> Outcome<String> {
    let ids = (p.b2_list_disk_ids().await).map_err(|s| internal("Error when getting device path", &s))?;
    for (n, ids) in ids {
        let page83 = ids.get("page83").map(String::as_str).unwrap_or("");
        if page83.split_whitespace().last() == Some(device_name) {
            return Ok(n);
        }
    }
    Err(fail(
        Code::Internal,
        format!("Error when getting device path: could not find disk number for device {device_name}"),
    ))
}

/// IsLikelyNotMountPoint of the v1beta mounter: IsMountPoint of the path as given.
async fn is_mounted(p: &mut Proxy, path: &str) -> bool {
    matches!(p.b1_is_mount_point(path).await, Ok(true))
}

/// NodeStageVolume, not read-only: FormatAndMount (PartitionDisk, SetAttachState online,
/// ListVolumesOnDisk, IsVolumeFormatted, FormatVolume, MountVolume with the staging path as
/// sent), then the resize (GetVolumeIDFromMount, ResizeVolume).
pub async fn stage(p: &mut Proxy, disk: &str, v: &BlockVolume) -> Outcome {
    if is_mounted(p, &v.staging).await {
        return Ok(());
    }
    let run = async {
        p.b2_partition_disk(disk).await?;
        p.b2_set_attach_state(disk, true).await?;
        let ids = p.b_list_volumes_on_disk(VOL, disk).await?;
        let id = ids.into_iter().next().ok_or_else(|| Status::internal("ListVolumesOnDisk returned no volume"))?;
        if !p.b_is_volume_formatted(VOL, &id).await? {
            p.b_format_volume(VOL, &id).await?;
        }
        p.b_mount_volume(VOL, &id, &v.staging).await
    };
    run.await.map_err(|s| internal("Failed to format and mount device", &s))?;
    let resize = async {
        let id = p.b_volume_id_from_mount(VOL, &v.staging).await?;
        p.b_resize_volume(VOL, &id, 0).await
    };
    resize.await.map_err(|s| internal("error when resizing volume", &s))
}

/// NodePublishVolume: IsMountPoint, PathExists and Rmdir (POD), the parent made locally,
/// LinkPath.
pub async fn publish(p: &mut Proxy, node: &Node, local: &dyn Local, v: &BlockVolume) -> Outcome {
    if is_mounted(p, &v.publish).await {
        return Ok(());
    }
    let prepare = async {
        if p.b1_path_exists(&node.n(&v.publish), Context::Plugin).await? {
            p.b1_rmdir(&node.n(&v.publish), Context::Pod).await?;
        }
        Ok::<_, Status>(())
    };
    prepare.await.map_err(|s| internal(&format!("mkdir failed on disk {}", v.publish), &s))?;
    local.mkdir_all(&node.parent(&v.publish));
    (p.b1_link_path(&node.n(&v.staging), &node.n(&v.publish)).await)
        .map_err(|s| internal("NodePublishVolume mount of disk failed", &s))
}

pub async fn unpublish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    (p.b1_rmdir(&node.n(&v.publish), Context::Pod).await).map_err(|s| internal("Unmount failed", &s))
}

/// UnmountDevice: PathExists, GetVolumeIDFromMount, DismountVolume, Rmdir (PLUGIN),
/// GetVolumeDiskNumber, SetAttachState offline.
pub async fn unstage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let target = node.n(&v.staging);
    let run = async {
        if !p.b1_path_exists(&target, Context::Plugin).await? {
            return Ok(());
        }
        let id = p.b_volume_id_from_mount(VOL, &target).await?;
        p.b_dismount_volume(VOL, &id, &target).await?;
        p.b1_rmdir(&target, Context::Plugin).await?;
        let disk = p.b_volume_disk_number(VOL, &id).await?;
        p.b2_set_attach_state(&disk.to_string(), false).await
    };
    run.await.map_err(|s| internal("NodeUnstageVolume failed", &s))
}
