//! aws-ebs-csi-driver (csi-proxy mode): pkg/mounter/mount_windows_proxyV1.go,
//! pkg/mounter/mount_windows.go, pkg/driver/node.go.

use super::*;

pub mod v1_64;

/// handleGetDeviceNameFromMountError's pattern,
/// `(Get-Item -Path \S+).Target, output: , error: <nil>|because it does not exist`, matched
/// as Go's regexp does (the parentheses are a group, the dot before Target any character).
pub fn not_mounted_text(msg: &str) -> bool {
    if msg.contains("because it does not exist") {
        return true;
    }
    const HEAD: &str = "Get-Item -Path ";
    const TAIL: &str = "Target, output: , error: <nil>";
    msg.match_indices(HEAD).any(|(at, _)| {
        let rest = &msg[at + HEAD.len()..];
        let word = rest.find(char::is_whitespace).unwrap_or(rest.len());
        // `\S+` ends somewhere in the run of non-space characters, then `.` takes one more.
        rest[..word].char_indices().skip(1).map(|(i, _)| i).chain([word]).any(|end| {
            let mut after = rest[end..].chars();
            after.next().is_some_and(|c| c != '\n' && rest[end + c.len_utf8()..].starts_with(TAIL))
        })
    })
}

/// GetDeviceNameFromMount: the disk mounted at `path`, `None` when the error text says
/// nothing is.
async fn mounted_disk(p: &mut Proxy, node: &Node, path: &str) -> Result<Option<u32>, Status> {
    match p.volume_at(&node.n(path)).await {
        Ok(id) => Ok(Some(p.disk_of_volume(&id).await?)),
        Err(s) if not_mounted_text(&go_error(&s)) => Ok(None),
        Err(s) => Err(s),
    }
}

pub async fn stage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let target = node.n(&v.staging);
    let exists = (p.path_exists(&target).await)
        .map_err(|s| internal(&format!("failed to check if target {:?} exists", v.staging), &s))?;
    if !exists {
        (p.mkdir(&target).await).map_err(|s| internal(&format!("could not create target dir {:?}", v.staging), &s))?;
    }
    let device = (mounted_disk(p, node, &v.staging).await)
        .map_err(|s| internal("failed to check if volume is already mounted", &s))?;
    if device == Some(v.disk) {
        return Ok(());
    }
    format_and_mount(p, v.disk, true, &target)
        .await
        .map_err(|s| internal(&format!("could not format {:?} and mount it at {:?}", v.disk, v.staging), &s))?;
    // NeedResize, then Resize when the filesystem is within a block of the disk.
    let need = async {
        if let Err(s) = p.rescan().await {
            p.warnings.push(format!("Rescan failed during NeedResize: {}", go_error(&s)));
        }
        let disk_size = p.disk_stats(v.disk).await?;
        let id = p.volume_at(&target).await?;
        let (fs_size, _) = p.volume_stats(&id).await?;
        Ok::<_, Status>(disk_size <= 4096 + fs_size)
    };
    let need = need.await.map_err(|s| internal("Could not determine if volume need to be resized", &s))?;
    if need {
        resize(p, &target).await.map_err(|s| internal("Could not resize volume", &s))?;
    }
    Ok(())
}

async fn resize(p: &mut Proxy, target: &str) -> Result<(), Status> {
    if let Err(s) = p.rescan().await {
        p.warnings.push(format!("Rescan failed during Resize: {}", go_error(&s)));
    }
    let id = p.volume_at(target).await?;
    p.resize_volume(&id, 0).await
}

pub async fn publish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let target = node.n(&v.publish);
    let prepare = async {
        if p.path_exists(&target).await? {
            p.rmdir(&target, true).await?;
        }
        Ok::<_, Status>(())
    };
    prepare.await.map_err(|s| internal(&format!("error Rmdir target {:?}", v.publish), &s))?;
    // isMounted: IsLikelyNotMountPoint (PathExists, then IsSymlink).
    let mounted = async {
        if !p.path_exists(&target).await? {
            return Ok(false);
        }
        p.is_symlink(&target).await
    };
    let mounted = mounted.await.map_err(|s| internal(&format!("Could not check if {:?} is mounted", v.publish), &s))?;
    if mounted {
        return Ok(());
    }
    (p.create_symlink(&node.n(&v.staging), &target).await)
        .map_err(|s| internal(&format!("Could not mount {:?} at {:?}", v.staging, v.publish), &s))
}

/// NodeGetVolumeStats: only the existence check goes through csi-proxy (the sizes come from
/// GetDiskFreeSpaceEx in the driver).
pub async fn stats_exists(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    match p.path_exists(&node.n(&v.publish)).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(fail(Code::NotFound, format!("path {} does not exist", v.publish))),
        Err(s) => Err(internal("unknown error when stat", &s)),
    }
}

pub async fn expand(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome<i64> {
    let device =
        (mounted_disk(p, node, &v.publish).await).map_err(|s| internal("failed to get device name from mount", &s))?;
    if device.is_none() {
        return Err(fail(Code::NotFound, "failed to find device path for device name"));
    }
    resize(p, &node.n(&v.publish)).await.map_err(|s| internal("Could not resize volume", &s))?;
    (p.disk_stats(v.disk).await).map_err(|s| internal("failed to get block capacity", &s))
}

pub async fn unpublish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    (p.rmdir(&node.n(&v.publish), true).await).map_err(|s| internal("failed to remove directory", &s))
}

pub async fn unstage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
    let device = (mounted_disk(p, node, &v.staging).await)
        .map_err(|s| internal(&format!("failed to check if target {:?} is a mount point", v.staging), &s))?;
    if device.is_none() {
        return Ok(());
    }
    let target = node.n(&v.staging);
    let run = async {
        let id = p.volume_at(&target).await?;
        p.unmount_volume(&id, &target).await?;
        p.rmdir(&target, true).await?;
        let disk = p.disk_of_volume(&id).await?;
        p.set_disk_state(disk, false).await
    };
    run.await.map_err(|s| internal(&format!("Could not unmount target {:?}", v.staging), &s))
}
