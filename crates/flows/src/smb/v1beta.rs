//! The fallback mounters of csi-driver-smb v1.20.3 and azurefile-csi-driver v1.35.7, used when
//! the v1 pipes are missing: pkg/mounter/safe_mounter_v1beta_windows.go in each (filesystem and
//! smb v1beta1). SMBMount makes the same remote path but keeps a trailing `\`; SMBUnmount only
//! removes the folder (the mapping stays).

use super::*;
use crate::legacy::Context;

/// ensureMountPoint with the v1beta mounter: PathExists, IsMountPoint, ReadDir of a mount.
async fn ensure_mount_point(p: &mut Proxy, node: &Node, local: &dyn Local, path: &str) -> Result<bool, String> {
    let n = node.n(path);
    let mounted =
        async { Ok::<_, Status>(p.b1_path_exists(&n, Context::Plugin).await? && p.b1_is_mount_point(&n).await?) };
    if mounted.await.map_err(|st| go_error(&st))? {
        let Err(why) = local.read_dir(path) else { return Ok(true) };
        p.warnings.push(format!("ReadDir {path} failed with {why}, unmount this directory"));
        p.b1_rmdir(&n, Context::Pod).await.map_err(|st| go_error(&st))?;
        return Err(why);
    }
    local.mkdir_all(path);
    Ok(false)
}

async fn remove_dir(p: &mut Proxy, node: &Node, path: &str) -> Result<(), Status> {
    if p.b1_path_exists(&node.n(path), Context::Plugin).await? {
        p.b1_rmdir(&node.n(path), Context::Pod).await?;
    }
    Ok(())
}

pub async fn stage(p: &mut Proxy, node: &Node, local: &dyn Local, driver: Driver, s: &Share) -> Outcome {
    let mounted = (ensure_mount_point(p, node, local, &s.staging).await)
        .map_err(|why| fail(Code::Internal, format!("Could not mount target {}: {why}", s.staging)))?;
    if mounted {
        return Ok(());
    }
    (remove_dir(p, node, &s.staging).await)
        .map_err(|st| internal(&format!("prepare stage path failed for {}", s.staging), &st))?;
    let parent = node.parent(&s.staging);
    // The v1 remote path without its trailing-backslash trim.
    let mut remote = remote_path(driver, local, &s.source);
    if driver == Driver::Smb && s.source.replace('/', "\\").ends_with('\\') {
        remote.push('\\');
    }
    let run = async {
        if !p.b1_path_exists(&node.n(&parent), Context::Plugin).await? {
            p.b1_mkdir(&node.n(&parent), Context::Plugin).await?;
        }
        p.b1_new_smb_mapping(&remote, &node.n(&s.staging), &s.username, &s.password).await
    };
    run.await.map_err(|st| internal("smb mapping failed", &st))
}

pub async fn publish(p: &mut Proxy, node: &Node, local: &dyn Local, s: &Share) -> Outcome {
    let mounted = (ensure_mount_point(p, node, local, &s.publish).await)
        .map_err(|why| fail(Code::Internal, format!("Could not mount target {:?}: {why}", s.publish)))?;
    if mounted {
        return Ok(());
    }
    (remove_dir(p, node, &s.publish).await).map_err(|st| internal("prepare publish failed", &st))?;
    (p.b1_link_path(&node.n(&s.staging), &node.n(&s.publish)).await)
        .map_err(|st| internal(&format!("Could not mount {:?} at {:?}", s.staging, s.publish), &st))
}

pub async fn unpublish(p: &mut Proxy, node: &Node, s: &Share) -> Outcome {
    (p.b1_rmdir(&node.n(&s.publish), Context::Pod).await).map_err(|st| internal("failed to unmount target", &st))
}

/// SMBUnmount of the v1beta mounters: Rmdir only, in both drivers.
pub async fn unstage(p: &mut Proxy, node: &Node, s: &Share) -> Outcome {
    (p.b1_rmdir(&node.n(&s.staging), Context::Pod).await)
        .map_err(|st| internal("failed to unmount staging target", &st))
}
