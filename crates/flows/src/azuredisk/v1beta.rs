//! azuredisk-csi-driver v1.34.5's fallback mounter, used when the v1 pipes are missing or
//! `--use-csiproxy-ga-interface=false`: pkg/mounter/safe_mounter_v1beta_windows.go
//! (filesystem v1beta1, disk v1beta2, volume v1beta2; disks named by their number as a
//! string), driven by the same pkg/azuredisk/nodeserver.go as [`super::v1_34`].

use super::*;
use crate::legacy::{Context, VolumeApi};

const VOL: VolumeApi = VolumeApi::V1beta2;

/// IsLikelyNotMountPoint of the v1beta mounter: PathExists, then IsMountPoint.
async fn is_mounted(p: &mut Proxy, node: &Node, path: &str) -> Result<bool, Status> {
    if !p.b1_path_exists(&node.n(path), Context::Plugin).await? {
        return Ok(false);
    }
    p.b1_is_mount_point(&node.n(path)).await
}

/// getDevicePathWithLUN through disk v1beta2: Rescan, ListDiskLocations, EqualFold on the LUN.
pub async fn find_disk_by_lun(p: &mut Proxy, lun: &str) -> Outcome<String> {
    if let Err(s) = p.b2_rescan().await {
        p.warnings.push(format!("Rescan failed in scsiHostRescan, error: {}", go_error(&s)));
    }
    let failed = |why: String| {
        fail(
            Code::Internal,
            format!("failed to find disk on lun {lun}. azureDisk - findDiskByLun({lun}) failed with error({why})"),
        )
    };
    let locations = p.b2_list_disk_locations().await.map_err(|s| failed(go_error(&s)))?;
    let lower = lun.to_lowercase();
    match locations.into_iter().find(|(_, l)| l.to_lowercase() == lower) {
        Some((id, _)) => Ok(id),
        None => Err(failed(format!("could not find disk id for lun: {lun}"))),
    }
}

/// NodeStageVolume: FormatAndMount with the disk's ID string, then ResizeVolume with the
/// volume ID set to that string.
pub async fn stage(p: &mut Proxy, node: &Node, disk: &str, v: &BlockVolume) -> Outcome {
    let mounted = is_mounted(p, node, &v.staging)
        .await
        .map_err(|s| internal(&format!("could not mount target {:?}", v.staging), &s))?;
    if mounted {
        return Ok(());
    }
    let target = node.n(&v.staging);
    let run = async {
        p.b2_partition_disk(disk).await?;
        let ids = p.b_list_volumes_on_disk(VOL, disk).await?;
        let id = ids.into_iter().next().ok_or_else(|| Status::internal("ListVolumesOnDisk returned no volume"))?;
        if !p.b_is_volume_formatted(VOL, &id).await? {
            p.b_format_volume(VOL, &id).await?;
        }
        p.b_mount_volume(VOL, &id, &target).await
    };
    run.await
        .map_err(|s| internal(&format!("could not format {disk}, and mount it at {}, failed with", v.staging), &s))?;
    (p.b_resize_volume(VOL, disk, 0).await)
        .map_err(|s| internal(&format!("NodeStageVolume: could not resize volume {disk} ({}): ", v.staging), &s))
}

pub async fn publish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let prepare = async {
        if p.b1_path_exists(&node.n(&v.publish), Context::Plugin).await? {
            p.b1_rmdir(&node.n(&v.publish), Context::Pod).await?;
        }
        Ok::<_, Status>(())
    };
    prepare.await.map_err(|s| internal("Target path could not be prepared", &s))?;
    let mounted = is_mounted(p, node, &v.publish).await.map_err(|s| internal("could not mount target", &s))?;
    if mounted {
        return Ok(());
    }
    (p.b1_link_path(&node.n(&v.staging), &node.n(&v.publish)).await)
        .map_err(|s| internal(&format!("could not mount {:?} at {:?}", v.staging, v.publish), &s))
}

/// NodeGetVolumeStats: GetVolumeIDFromMount with the path as sent, VolumeStats, whose
/// VolumeSize the driver takes as the free bytes. Returns (total, used) as it reports them.
pub async fn stats(p: &mut Proxy, v: &BlockVolume) -> Outcome<(i64, i64)> {
    let id = (p.b_volume_id_from_mount(VOL, &v.publish).await)
        .map_err(|s| internal(&format!("GetVolumeIDFromMount({}) failed with error", v.publish), &s))?;
    let (size, used) = (p.b_volume_stats(VOL, &id).await)
        .map_err(|s| internal(&format!("GetVolumeStats({id}) failed with error"), &s))?;
    Ok((size + used, used))
}

pub async fn unpublish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    (p.b1_rmdir(&node.n(&v.publish), Context::Pod).await).map_err(|s| internal("failed to unmount target", &s))
}

/// NodeUnstageVolume: the cache flush (GetVolumeIDFromMount with the path as sent,
/// WriteVolumeCache; failures only logged), then Rmdir.
pub async fn unstage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    match p.b_volume_id_from_mount(VOL, &v.staging).await {
        Err(s) => p.warnings.push(format!("GetVolumeIDFromMount({}) failed: {}", v.staging, go_error(&s))),
        Ok(id) => {
            if let Err(s) = p.b2_write_volume_cache(&id).await {
                p.warnings.push(format!("WriteVolumeCache({id}) failed: {}", go_error(&s)));
            }
        }
    }
    (p.b1_rmdir(&node.n(&v.staging), Context::Pod).await).map_err(|s| internal("failed to unmount staging target", &s))
}
