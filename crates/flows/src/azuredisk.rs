//! azuredisk-csi-driver in csi-proxy mode (windows.useHostProcessContainers=false):
//! pkg/mounter/safe_mounter_windows.go, pkg/azuredisk/azure_common_windows.go,
//! pkg/azuredisk/nodeserver.go.

use super::*;

pub mod v1_34;
pub mod v1beta;

/// ensureMountPoint: PathExists, then IsSymlink; a missing path is "not mounted".
async fn is_mounted(p: &mut Proxy, node: &Node, path: &str) -> Result<bool, Status> {
    if !p.path_exists(&node.n(path)).await? {
        return Ok(false);
    }
    p.is_symlink(&node.n(path)).await
}

/// NodeStageVolume for a filesystem volume, as of v1.31 (v1.32 added a ResizeVolume whose
/// volume ID is the disk number: [`v1_34::stage`]).
pub async fn stage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let mounted = is_mounted(p, node, &v.staging)
        .await
        .map_err(|s| internal(&format!("could not mount target {:?}", v.staging), &s))?;
    if mounted {
        return Ok(());
    }
    format_and_mount(p, v.disk, false, &node.n(&v.staging)).await.map_err(|s| {
        internal(&format!("could not format {}, and mount it at {}, failed with", v.disk, v.staging), &s)
    })?;
    Ok(())
}

pub async fn publish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let prepare = async {
        // preparePublishPath: the kubelet made the directory, the link goes in its place.
        if p.path_exists(&node.n(&v.publish)).await? {
            p.rmdir(&node.n(&v.publish), true).await?;
        }
        Ok::<_, Status>(())
    };
    prepare.await.map_err(|s| internal("Target path could not be prepared", &s))?;
    let mounted = is_mounted(p, node, &v.publish).await.map_err(|s| internal("could not mount target", &s))?;
    if mounted {
        return Ok(());
    }
    (p.create_symlink(&node.n(&v.staging), &node.n(&v.publish)).await)
        .map_err(|s| internal(&format!("could not mount {:?} at {:?}", v.staging, v.publish), &s))
}

/// NodeGetVolumeStats (the path goes to GetVolumeIDFromTargetPath as the kubelet sent it).
/// Returns (total, used).
pub async fn stats(p: &mut Proxy, v: &BlockVolume) -> Outcome<(i64, i64)> {
    let id = (p.volume_at(&v.publish).await)
        .map_err(|s| internal(&format!("GetVolumeIDFromMount({}) failed with error", v.publish), &s))?;
    (p.volume_stats(&id).await).map_err(|s| internal(&format!("GetVolumeStats({id}) failed with error"), &s))
}

/// NodeExpandVolume to at least `required` bytes, as of v1.31 (v1.34 added a size check
/// before the resize that compares the filesystem's size in csi-proxy mode:
/// [`v1_34::expand`]).
/// Returns the capacity it reports.
pub async fn expand(p: &mut Proxy, node: &Node, v: &BlockVolume, required: i64) -> Outcome<i64> {
    let id = (p.volume_at(&node.n(&v.publish)).await).map_err(|s| fail(Code::NotFound, go_error(&s)))?;
    let resized = p.resize_volume(&id, 0).await;
    let (after, _) = (p.volume_stats(&id).await).map_err(|s| internal("could not get size of block volume", &s))?;
    if round_up_gib(after) < round_up_gib(required) {
        return Err(match resized {
            Err(s) => internal(&format!("could not resize volume {id:?}"), &s),
            Ok(()) => fail(
                Code::Internal,
                format!("resize requested for {required}, but after resizing volume size was {after}"),
            ),
        });
    }
    Ok(after)
}

pub async fn unpublish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    (p.rmdir(&node.n(&v.publish), true).await).map_err(|s| internal("failed to unmount target", &s))
}

/// NodeUnstageVolume: the cache flush first (its failures only logged), then Rmdir of the
/// mounted staging folder. The flush looks the volume up by the path as the kubelet sent it.
pub async fn unstage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    match p.volume_at(&v.staging).await {
        Err(s) => p.warnings.push(format!("GetVolumeIDFromTargetPath({}) failed: {}", v.staging, go_error(&s))),
        Ok(id) => {
            if let Err(s) = p.write_volume_cache(&id).await {
                p.warnings.push(format!("WriteVolumeCache({id}) failed: {}", go_error(&s)));
            }
        }
    }
    (p.rmdir(&node.n(&v.staging), true).await).map_err(|s| internal("failed to unmount staging target", &s))
}
