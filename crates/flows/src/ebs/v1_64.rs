//! aws-ebs-csi-driver v1.64.0 in csi-proxy v1 mode: pkg/mounter/mount_windows_proxyV1.go
//! (FindDevicePath: a disk v1 client of its own for every call, ListDiskIDs, the serial number
//! that contains the volume ID without its dashes; ResizeVolume; GetDeviceSize),
//! pkg/mounter/mount_windows.go (GetDeviceNameFromMount's error pattern, Resize's Rescan),
//! pkg/driver/node.go (NodeStageVolume and NodeExpandVolume). The other RPCs make the same
//! calls as before ([`super::publish`], [`super::stats_exists`], [`super::unpublish`],
//! [`super::unstage`]).

use super::*;

/// FindDevicePath: a new disk v1 connection (`open`), ListDiskIDs on it, closed again; the
/// disk whose serial number contains `volume_id` with its dashes removed (EBS serials are
/// `vol` and the ID's hex digits). The error is the driver's text.
pub async fn find_device_path(
    p: &mut Proxy,
    open: impl Future<Output = Channel>,
    device_path: &str,
    volume_id: &str,
) -> Result<u32, String> {
    let ids = p.list_disk_ids_on(open).await.map_err(|s| format!("error listing disk ids: {:?}", go_error(&s)))?;
    let clean = volume_id.replace('-', "");
    for (n, (_, serial)) in &ids {
        if serial.contains(&clean) {
            return Ok(*n);
        }
    }
    Err(format!("disk number for device path {device_path:?} volume id {volume_id:?} not found"))
}

/// NodeStageVolume of volume `volume_id` attached at `device_path`: FindDevicePath first
/// (NotFound when the disk is not there), then as before with the disk it found.
pub async fn stage(
    p: &mut Proxy,
    open: impl Future<Output = Channel>,
    node: &Node,
    v: &BlockVolume,
    device_path: &str,
    volume_id: &str,
) -> Outcome {
    let disk = (find_device_path(p, open, device_path, volume_id).await)
        .map_err(|why| fail(Code::NotFound, format!("Failed to find device path {device_path}. {why}")))?;
    super::stage(p, node, &BlockVolume { disk, ..v.clone() }).await
}

/// NodeExpandVolume of a filesystem volume: GetDeviceNameFromMount (a "not mounted" text is
/// an empty device name, not an error), FindDevicePath, Resize (Rescan, only logged;
/// GetVolumeIDFromTargetPath of the publish path with `c:`; ResizeVolume), GetDiskStats.
/// With nothing mounted at the path the disk is still found and the resize's lookup fails:
/// Internal. Returns the capacity it reports.
pub async fn expand(
    p: &mut Proxy,
    open: impl Future<Output = Channel>,
    node: &Node,
    v: &BlockVolume,
    volume_id: &str,
) -> Outcome<i64> {
    let device = (mounted_disk(p, node, &v.publish).await)
        .map_err(|s| internal(&format!("failed to get device name from mount {}", v.publish), &s))?;
    let name = device.map(|d| d.to_string()).unwrap_or_default();
    let disk = find_device_path(p, open, &name, volume_id).await.map_err(|why| {
        fail(
            Code::NotFound,
            format!("failed to find device path for device name {name} for mount {}: {why}", v.publish),
        )
    })?;
    (resize(p, &node.n(&v.publish)).await)
        .map_err(|s| internal(&format!("Could not resize volume {volume_id:?} ({:?})", disk.to_string()), &s))?;
    (p.disk_stats(disk).await).map_err(|s| internal(&format!("failed to get block capacity on path {}", v.publish), &s))
}
