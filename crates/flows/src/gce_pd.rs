//! gcp-compute-persistent-disk-csi-driver: pkg/mount-manager/safe-mounter-v1_windows.go,
//! pkg/mount-manager/statter_windows.go, pkg/resizefs/resizefs_windows.go,
//! pkg/gce-pd-csi-driver/utils_windows.go, pkg/gce-pd-csi-driver/node.go.

use super::*;

pub mod master;
pub mod v1beta;

/// NodeStageVolume, not read-only: the staging path goes to IsSymlink, MountVolume and the
/// resize's GetVolumeIDFromTargetPath exactly as the kubelet sent it (no drive on Windows).
pub async fn stage(p: &mut Proxy, v: &BlockVolume) -> Outcome {
    // isVolumePathMounted: an error counts as "not mounted".
    if let Ok(true) = p.is_symlink(&v.staging).await {
        return Ok(());
    }
    format_mount_and_grow(p, v).await
}

/// The end of NodeStageVolume in every release followed here: format and mount the disk at the
/// staging path, then grow the volume found there to its partition's end (ResizeVolume 0).
async fn format_mount_and_grow(p: &mut Proxy, v: &BlockVolume) -> Outcome {
    format_and_mount(p, v.disk, true, &v.staging)
        .await
        .map_err(|s| internal("Failed to format and mount device", &s))?;
    let resize = async {
        let id = p.volume_at(&v.staging).await?;
        p.resize_volume(&id, 0).await
    };
    resize.await.map_err(|s| internal("error when resizing volume", &s))
}

pub async fn publish(p: &mut Proxy, node: &Node, local: &dyn Local, v: &BlockVolume) -> Outcome {
    let prepare = async {
        if p.path_exists(&node.n(&v.publish)).await? {
            p.rmdir(&node.n(&v.publish), true).await?;
        }
        Ok::<_, Status>(())
    };
    prepare.await.map_err(|s| internal(&format!("mkdir failed on disk {}", v.publish), &s))?;
    // MountSensitive: the parent is made by the driver itself, then the link.
    local.mkdir_all(&node.parent(&v.publish));
    (p.create_symlink(&node.n(&v.staging), &node.n(&v.publish)).await)
        .map_err(|s| internal("NodePublishVolume mount of disk failed", &s))
}

/// NodeGetVolumeStats through StatFSV1. Returns (total, used).
pub async fn stats(p: &mut Proxy, v: &BlockVolume) -> Outcome<(i64, i64)> {
    let run = async {
        let id = p.volume_at(&v.publish).await?;
        p.volume_stats(&id).await
    };
    run.await.map_err(|s| internal(&format!("failed to get fs info on path {}", v.publish), &s))
}

pub async fn expand(p: &mut Proxy, v: &BlockVolume, required: i64) -> Outcome<i64> {
    let run = async {
        let id = p.volume_at(&v.publish).await?;
        p.resize_volume(&id, 0).await
    };
    run.await.map_err(|s| internal("error when resizing volume", &s))?;
    let size = (p.disk_stats(v.disk).await).map_err(|s| internal("GetDiskStats", &s))?;
    if size < required {
        return Err(fail(
            Code::Internal,
            format!("resize requested for {required} but after resize volume was size {size}"),
        ));
    }
    Ok(size)
}

pub async fn unpublish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    (p.rmdir(&node.n(&v.publish), true).await).map_err(|s| internal("Unmount failed", &s))
}

/// UnmountDevice: unmount, remove the folder, take the disk offline.
pub async fn unstage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    unmount_and_offline(p, &node.n(&v.staging)).await.map_err(|s| internal("NodeUnstageVolume failed", &s))
}
