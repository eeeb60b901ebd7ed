//! azuredisk-csi-driver v1.34.5 in csi-proxy mode with the GA interface (its default):
//! pkg/azuredisk/nodeserver.go (NodeStageVolume, NodePublishVolume, NodeExpandVolume,
//! ensureMountPoint, getDevicePathWithLUN, validateBlockDeviceSize),
//! pkg/azuredisk/azure_common_windows.go (needResizeVolume is always true, resizeVolume passes
//! the disk number it found by LUN), pkg/mounter/safe_mounter_windows.go (FindDiskByLun,
//! FormatAndMount, ResizeVolume, GetVolumeSizeInBytes, Unmount). NodeGetVolumeStats,
//! NodeUnpublishVolume and NodeUnstageVolume make the same calls as v1.31
//! ([`super::stats`], [`super::unpublish`], [`super::unstage`]).

use super::*;

/// Go's strings.EqualFold for the LUN strings the drivers compare.
fn equal_fold(a: &str, b: &str) -> bool {
    a.chars().flat_map(char::to_lowercase).eq(b.chars().flat_map(char::to_lowercase))
}

/// getDevicePathWithLUN: one Rescan (its failure only logged), then FindDiskByLun
/// (ListDiskLocations, a disk whose LUNID equals `lun` under EqualFold). The driver polls
/// every second for two minutes, but FindDiskByLun answers "could not find" as an error,
/// which ends the poll at once: a disk not listed yet fails the stage, and the kubelet retries.
pub async fn find_disk_by_lun(p: &mut Proxy, lun: &str) -> Outcome<u32> {
    if let Err(s) = p.rescan().await {
        p.warnings.push(format!("Rescan failed in scsiHostRescan, error: {}", go_error(&s)));
    }
    let failed = |why: String| {
        fail(
            Code::Internal,
            format!("failed to find disk on lun {lun}. azureDisk - findDiskByLun({lun}) failed with error({why})"),
        )
    };
    let locations = p.list_disk_locations().await.map_err(|s| failed(go_error(&s)))?;
    match locations.iter().find(|(_, l)| equal_fold(l, lun)) {
        Some((n, _)) => Ok(*n),
        None => Err(failed(format!("could not find disk id for lun: {lun}"))),
    }
}

/// ensureMountPoint on Windows: PathExists and IsSymlink; a link is read (os.ReadDir in the
/// driver) and, when that fails, unmounted (Unmount: the cache flush by the path as given,
/// then Rmdir) and the ReadDir error returned, so this call fails and the retry mounts again.
async fn ensure_mount_point(p: &mut Proxy, node: &Node, local: &dyn Local, path: &str) -> Result<bool, Failure> {
    let target = |s: &Status| internal(&format!("could not mount target {path:?}"), s);
    if !is_mounted(p, node, path).await.map_err(|s| target(&s))? {
        return Ok(false);
    }
    let Err(why) = local.read_dir(path) else { return Ok(true) };
    p.warnings.push(format!("ReadDir {path} failed with {why}, unmount this directory"));
    unmount(p, node, path).await.map_err(|s| target(&s))?;
    Err(fail(Code::Internal, format!("could not mount target {path:?}: {why}")))
}

/// csiProxyMounter.Unmount: GetVolumeIDFromTargetPath with the path as given and
/// WriteVolumeCache (both only logged when they fail), then Rmdir.
async fn unmount(p: &mut Proxy, node: &Node, path: &str) -> Result<(), Status> {
    match p.volume_at(path).await {
        Err(s) => p.warnings.push(format!("GetVolumeIDFromTargetPath({path}) failed: {}", go_error(&s))),
        Ok(id) => {
            if let Err(s) = p.write_volume_cache(&id).await {
                p.warnings.push(format!("WriteVolumeCache({id}) failed: {}", go_error(&s)));
            }
        }
    }
    p.rmdir(&node.n(path), true).await
}

/// NodeStageVolume for a filesystem volume: FormatAndMount, then (needResizeVolume being always
/// true on Windows) ResizeVolume with the volume ID set to the disk number, size 0. A clone or
/// restored snapshot larger than its source gets its filesystem grown here.
pub async fn stage(p: &mut Proxy, node: &Node, local: &dyn Local, v: &BlockVolume, lun: &str) -> Outcome {
    if ensure_mount_point(p, node, local, &v.staging).await? {
        return Ok(());
    }
    format_and_mount(p, v.disk, false, &node.n(&v.staging)).await.map_err(|s| {
        internal(&format!("could not format {}(lun: {lun}), and mount it at {}, failed with", v.disk, v.staging), &s)
    })?;
    (p.resize_volume(&v.disk.to_string(), 0).await)
        .map_err(|s| internal(&format!("NodeStageVolume: could not resize volume {} ({}): ", v.disk, v.staging), &s))
}

pub async fn publish(p: &mut Proxy, node: &Node, local: &dyn Local, v: &BlockVolume) -> Outcome {
    let prepare = async {
        if p.path_exists(&node.n(&v.publish)).await? {
            p.rmdir(&node.n(&v.publish), true).await?;
        }
        Ok::<_, Status>(())
    };
    prepare.await.map_err(|s| internal("Target path could not be prepared", &s))?;
    if ensure_mount_point(p, node, local, &v.publish).await? {
        return Ok(());
    }
    (p.create_symlink(&node.n(&v.staging), &node.n(&v.publish)).await)
        .map_err(|s| internal(&format!("could not mount {:?} at {:?}", v.staging, v.publish), &s))
}

/// validateBlockDeviceSize in csi-proxy mode: the "device" is the volume ID, its size
/// GetVolumeStats' TotalBytes (the filesystem's), rounded up to GiB and compared with the
/// request.
async fn validate_size(p: &mut Proxy, id: &str, request_gib: i64) -> Result<i64, Failure> {
    let total = (p.volume_stats(id).await)
        .map_err(|s| internal(&format!("could not get size of block volume at path {id}"), &s))?
        .0;
    let gib = round_up_gib(total);
    if gib < request_gib {
        return Err(fail(
            Code::Internal,
            format!("block volume at path {id} size check failed: current {gib} GiB < requested {request_gib} GiB"),
        ));
    }
    Ok(total)
}

/// NodeExpandVolume to at least `required` bytes: GetDeviceNameFromMount (the publish path
/// with `c:`), the size check before the resize, ResizeVolume (its error kept for later), the
/// size check again. In csi-proxy mode the first check compares the filesystem, which has not
/// grown yet, so a request above its rounded-up size is Unavailable before anything is resized
/// (the kubelet retries; the next NodeStageVolume grows it). Returns the capacity reported.
pub async fn expand(p: &mut Proxy, node: &Node, v: &BlockVolume, required: i64) -> Outcome<i64> {
    let request_gib = round_up_gib(required);
    let id = (p.volume_at(&node.n(&v.publish)).await).map_err(|s| fail(Code::NotFound, go_error(&s)))?;
    validate_size(p, &id, request_gib).await.map_err(|f| {
        fail(
            Code::Unavailable,
            format!("NodeExpandVolume: block device size did not match requested size: {}", f.message),
        )
    })?;
    let resized = p.resize_volume(&id, 0).await;
    match validate_size(p, &id, request_gib).await {
        Ok(total) => Ok(total),
        Err(f) => Err(match resized {
            Err(s) => internal(&format!("could not resize volume {:?} ({id:?}): ", v.publish), &s),
            Ok(()) => fail(
                Code::Internal,
                format!(
                    "NodeExpandVolume: block device size did not match requested size after filesystem resize: {}",
                    f.message
                ),
            ),
        }),
    }
}
