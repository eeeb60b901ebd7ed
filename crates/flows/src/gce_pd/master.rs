//! gcp-compute-persistent-disk-csi-driver master (read 2026-08-18, b560165):
//! pkg/mount-manager/safe-mounter-v1_windows.go (GetDiskNumber with its NVMe match and the
//! page 83 fallback, FormatAndMount, MountSensitive, IsLikelyNotMountPoint, GetDiskTotalBytes),
//! pkg/gce-pd-csi-driver/node.go (NodeStageVolume's disk-size validation, NodePublishVolume's
//! checks and its clean-up when the link fails), pkg/gce-pd-csi-driver/utils_windows.go.
//! NodeGetVolumeStats, NodeExpandVolume, NodeUnpublishVolume and NodeUnstageVolume make the
//! same calls as before ([`super::stats`], [`super::expand`], [`super::unpublish`],
//! [`super::unstage`]).

use super::*;

/// getDiskNumberLegacy: ListDiskIDs, the disk whose page 83 ID's last blank-separated word is
/// `device_name` (GCE writes `Google  <device name>`).
pub async fn disk_number_by_page83(p: &mut Proxy, device_name: &str) -> Outcome<u32> {
    let ids = (p.list_disk_ids().await).map_err(|s| internal("Error when getting device path", &s))?;
    for (n, (page83, _)) in &ids {
        if page83.split_whitespace().last() == Some(device_name) {
            return Ok(*n);
        }
    }
    Err(fail(
        Code::Internal,
        format!("Error when getting device path: could not find disk number for device {device_name}"),
    ))
}

/// extractEUIFromDiskInfo: the page 83 ID when it is `eui.…`, else the serial number turned
/// into one (convertSerialToEUI: one trailing `.` dropped, every `_` removed, 32 hex digits).
pub fn eui_of(page83: &str, serial: &str) -> Option<String> {
    if page83.starts_with("eui.") {
        return Some(page83.to_owned());
    }
    let cleaned = serial.strip_suffix('.').unwrap_or(serial).replace('_', "");
    if cleaned.len() != 32 || u64::from_str_radix(&cleaned[..16], 16).is_err() {
        return None;
    }
    Some(format!("eui.{cleaned}"))
}

/// convertEUIToDecimal: the first 16 hex digits after `eui.`.
pub fn eui_namespace(eui: &str) -> Option<u64> {
    let hex = eui.strip_prefix("eui.")?;
    u64::from_str_radix(hex.get(..16)?, 16).ok()
}

/// GetDiskNumber for an NVMe disk whose metadata gives `namespace_id`
/// (nvmeNamespaceIdentifier): ListDiskIDs, the disk whose EUI's first 64 bits are that number;
/// without a match, the page 83 fallback (a second ListDiskIDs).
pub async fn disk_number_nvme(p: &mut Proxy, device_name: &str, namespace_id: u64) -> Outcome<u32> {
    let ids = (p.list_disk_ids().await).map_err(|s| internal("Error when getting device path", &s))?;
    for (n, (page83, serial)) in &ids {
        if eui_of(page83, serial).as_deref().and_then(eui_namespace) == Some(namespace_id) {
            return Ok(*n);
        }
    }
    disk_number_by_page83(p, device_name).await
}

/// Go's `%q` of an integer: a quoted character literal (node.go formats the two sizes so).
fn go_quote_int(n: i64) -> String {
    let escaped = match n {
        7 => Some(r"\a"),
        8 => Some(r"\b"),
        9 => Some(r"\t"),
        10 => Some(r"\n"),
        11 => Some(r"\v"),
        12 => Some(r"\f"),
        13 => Some(r"\r"),
        _ => None,
    };
    if let Some(e) = escaped {
        return format!("'{e}'");
    }
    match u32::try_from(n).ok().and_then(char::from_u32) {
        Some(c) if (' '..='~').contains(&c) && c != '\'' && c != '\\' => format!("'{c}'"),
        Some(c) if (c as u32) < 0x80 => format!("'\\x{:02x}'", c as u32),
        Some(c) if (c as u32) < 0x10000 => format!("'\\u{:04x}'", c as u32),
        Some(c) => format!("'\\U{:08x}'", c as u32),
        None => "'\\ufffd'".into(),
    }
}

/// NodeStageVolume, not read-only, with the publish context's disk size (`expected_gib`, when
/// the controller set one): IsSymlink of the staging path as sent (an error is "not
/// mounted"), GetDiskStats and the size check before anything is written, then as before.
pub async fn stage(p: &mut Proxy, v: &BlockVolume, expected_gib: Option<i64>) -> Outcome {
    if let Ok(true) = p.is_symlink(&v.staging).await {
        return Ok(());
    }
    if let Some(expected) = expected_gib {
        let bytes = (p.disk_stats(v.disk).await)
            .map_err(|s| internal(&format!("failed to get block size for '{}'", v.disk), &s))?;
        let actual = round_up_gib(bytes);
        if expected > actual {
            return Err(fail(
                Code::Internal,
                format!("expected block size {}, got {}", go_quote_int(expected), go_quote_int(actual)),
            ));
        }
    }
    format_mount_and_grow(p, v).await
}

/// NodePublishVolume for a filesystem volume: isVolumePathMounted (IsSymlink of the target as
/// sent; an error is "not mounted"), preparePublishPath (PathExists, Rmdir), MountSensitive
/// (the parent made locally, CreateSymlink). When the link fails: IsSymlink again; a link
/// there is unmounted (Rmdir) and checked once more; the target is removed locally
/// (os.Remove, its failure only logged) and the mount error returned.
pub async fn publish(p: &mut Proxy, node: &Node, local: &dyn Local, v: &BlockVolume) -> Outcome {
    if let Ok(true) = p.is_symlink(&v.publish).await {
        return Ok(());
    }
    let prepare = async {
        if p.path_exists(&node.n(&v.publish)).await? {
            p.rmdir(&node.n(&v.publish), true).await?;
        }
        Ok::<_, Status>(())
    };
    prepare.await.map_err(|s| internal(&format!("mkdir failed on disk {}", v.publish), &s))?;
    local.mkdir_all(&node.parent(&v.publish));
    let Err(mount) = p.create_symlink(&node.n(&v.staging), &node.n(&v.publish)).await else { return Ok(()) };
    let mount_err = go_error(&mount);
    let check = |p: &mut Proxy, s: Status| {
        p.warnings.push(format!("IsLikelyNotMountPoint check failed: {}", go_error(&s)));
        fail(
            Code::Internal,
            format!("NodePublishVolume failed to check whether target path is a mount point: {mount_err}"),
        )
    };
    match p.is_symlink(&v.publish).await {
        Err(s) => return Err(check(p, s)),
        Ok(true) => {
            p.warnings.push(format!("mount failed but {} is mounted already", v.publish));
            if p.rmdir(&node.n(&v.publish), true).await.is_err() {
                return Err(fail(
                    Code::Internal,
                    format!("NodePublishVolume failed to unmount target path: {mount_err}"),
                ));
            }
            match p.is_symlink(&v.publish).await {
                Err(s) => return Err(check(p, s)),
                Ok(true) => {
                    return Err(fail(
                        Code::Internal,
                        format!("NodePublishVolume something is wrong with mounting: {mount_err}"),
                    ))
                }
                Ok(false) => {}
            }
        }
        Ok(false) => {}
    }
    if let Err(why) = local.remove(&v.publish) {
        p.warnings.push(format!("failed to remove targetPath {}: {why}", v.publish));
    }
    Err(fail(Code::Internal, format!("NodePublishVolume mount of disk failed: {mount_err}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvme_serials_and_euis_as_the_driver_reads_them() {
        // The serial Windows reports for a GCE NVMe namespace, its trailing `.` kept.
        let serial = "10CC_9636_B6E3_CE3B_0000_0000_0000_0000.";
        assert_eq!(eui_of("", serial).as_deref(), Some("eui.10CC9636B6E3CE3B0000000000000000"));
        assert_eq!(eui_of("", serial).as_deref().and_then(eui_namespace), Some(0x10CC_9636_B6E3_CE3B));
        // Page 83 wins when it is an EUI; other serials give none.
        assert_eq!(eui_of("eui.0000000000000001abcd", serial).as_deref(), Some("eui.0000000000000001abcd"));
        assert_eq!(eui_of("Google  pvc-1", "pvc-1"), None);
        // Only one trailing `.` goes: two leave 33 characters.
        assert_eq!(eui_of("", "10CC_9636_B6E3_CE3B_0000_0000_0000_0000.."), None);
        assert_eq!(go_quote_int(20), r"'\x14'");
        assert_eq!(go_quote_int(10), r"'\n'");
        assert_eq!(go_quote_int(11), r"'\v'");
        assert_eq!(go_quote_int(65), "'A'");
    }
}
