//! csi-driver-smb (pkg/mounter/safe_mounter_windows.go, pkg/smb/smb_common_windows.go,
//! pkg/smb/nodeserver.go) and azurefile-csi-driver (pkg/mounter/safe_mounter_windows.go,
//! pkg/azurefile/azure_common_windows.go, pkg/azurefile/nodeserver.go), whose Windows mounters
//! are the same but for the details each function names.

use super::*;

pub mod v1beta;

/// Which of the two drivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// csi-driver-smb, RemoveSMBMappingDuringUnmount on (its default).
    Smb,
    AzureFile,
}

/// ensureMountPoint: PathExists, IsSymlink; a link is read (os.ReadDir) and, when that
/// fails, unmounted (Unmount is Rmdir in both drivers) unless `keep` (azurefile v1.35.7's
/// NodePublishVolume leaves a stale mount to NodeUnpublishVolume), and the ReadDir error
/// returned; a folder that is no link gets created locally. The error is the text the
/// driver wraps.
async fn ensure_mount_point(
    p: &mut Proxy,
    node: &Node,
    local: &dyn Local,
    path: &str,
    keep: bool,
) -> Result<bool, String> {
    let n = node.n(path);
    let mounted = async { Ok::<_, Status>(p.path_exists(&n).await? && p.is_symlink(&n).await?) };
    if mounted.await.map_err(|st| go_error(&st))? {
        let Err(why) = local.read_dir(path) else { return Ok(true) };
        if keep {
            p.warnings.push(format!("ReadDir {path} failed with {why}, skip unmount to avoid race condition"));
            return Err(why);
        }
        p.warnings.push(format!("ReadDir {path} failed with {why}, unmount this directory"));
        p.rmdir(&n, true).await.map_err(|st| go_error(&st))?;
        return Err(why);
    }
    local.mkdir_all(path);
    Ok(false)
}

/// removeDir (prepareStagePath, preparePublishPath).
async fn remove_dir(p: &mut Proxy, node: &Node, path: &str) -> Result<(), Status> {
    if p.path_exists(&node.n(path)).await? {
        p.rmdir(&node.n(path), true).await?;
    }
    Ok(())
}

/// The share's server as SMBMount sees it: the first field of the source split at blanks
/// and `/` (its Split), so only a `//server/share` source has one.
fn server_of(source: &str) -> Option<&str> {
    source.split([' ', '/']).find(|f| !f.is_empty())
}

/// SMBMount's remote path: csi-driver-smb (v1.20.3) resolves a `*.svc.cluster.local` server
/// to its first IPv4 address (keeping the name when that fails), turns `/` into `\` and
/// drops one trailing `\`; azurefile (v1.35.7) only turns the slashes.
pub fn remote_path(driver: Driver, local: &dyn Local, source: &str) -> String {
    let mut source = source.to_owned();
    if driver == Driver::Smb {
        let server = server_of(&source).filter(|s| s.ends_with("svc.cluster.local")).map(str::to_owned);
        if let Some(server) = server {
            if let Some(ip) = local.resolve_ipv4(&server) {
                source = source.replacen(&server, &ip, 1);
            }
        }
    }
    let remote = source.replace('/', "\\");
    match driver {
        Driver::Smb => remote.strip_suffix('\\').map(str::to_owned).unwrap_or(remote),
        Driver::AzureFile => remote,
    }
}

/// NodeStageVolume (csi-driver-smb v1.20.3, azurefile v1.35.7).
pub async fn stage(p: &mut Proxy, node: &Node, local: &dyn Local, driver: Driver, s: &Share) -> Outcome {
    let mounted = (ensure_mount_point(p, node, local, &s.staging, false).await)
        .map_err(|why| fail(Code::Internal, format!("Could not mount target {}: {why}", s.staging)))?;
    if mounted {
        return Ok(());
    }
    (remove_dir(p, node, &s.staging).await)
        .map_err(|st| internal(&format!("prepare stage path failed for {}", s.staging), &st))?;
    // SMBMount.
    let parent = node.parent(&s.staging);
    let remote = remote_path(driver, local, &s.source);
    let run = async {
        if !p.path_exists(&node.n(&parent)).await? {
            p.mkdir(&node.n(&parent)).await?;
        }
        p.new_smb_mapping(&remote, &node.n(&s.staging), &s.username, &s.password).await
    };
    run.await.map_err(|st| internal("NewSmbGlobalMapping failed", &st))
}

/// NodePublishVolume of an ephemeral inline volume (csi-driver-smb v1.20.3 nodeserver.go):
/// the driver stages the share straight into the pod's mount path; its unpublish is
/// [`unpublish`] (Rmdir only) and nothing is staged elsewhere.
pub async fn publish_ephemeral(p: &mut Proxy, node: &Node, local: &dyn Local, s: &Share) -> Outcome {
    let inline = Share { staging: s.publish.clone(), ..s.clone() };
    stage(p, node, local, Driver::Smb, &inline).await
}

pub async fn publish(p: &mut Proxy, node: &Node, local: &dyn Local, driver: Driver, s: &Share) -> Outcome {
    let keep = driver == Driver::AzureFile;
    let mounted = (ensure_mount_point(p, node, local, &s.publish, keep).await)
        .map_err(|why| fail(Code::Internal, format!("Could not mount target {:?}: {why}", s.publish)))?;
    if mounted {
        return Ok(());
    }
    (remove_dir(p, node, &s.publish).await).map_err(|st| internal("prepare publish failed", &st))?;
    (p.create_symlink(&node.n(&s.staging), &node.n(&s.publish)).await)
        .map_err(|st| internal(&format!("Could not mount {:?} at {:?}", s.staging, s.publish), &st))
}

pub async fn unpublish(p: &mut Proxy, node: &Node, s: &Share) -> Outcome {
    (p.rmdir(&node.n(&s.publish), true).await).map_err(|st| internal("failed to unmount target", &st))
}

/// SMBUnmount (smb: the link is read by the driver, the mapping removed when this was its
/// last volume) or Unmount (azurefile: the folder only).
pub async fn unstage(p: &mut Proxy, node: &Node, local: &dyn Local, driver: Driver, s: &Share) -> Outcome {
    if driver == Driver::Smb {
        match local.readlink(&s.staging) {
            None => p.warnings.push(format!("SMBUnmount: can't get remote path of {}", s.staging)),
            Some(remote) => {
                // One trailing backslash goes (strings.TrimSuffix), as at mount time.
                let remote = remote.strip_suffix('\\').unwrap_or(&remote).to_owned();
                (p.remove_smb_mapping(&remote).await)
                    .map_err(|st| internal("RemoveSmbGlobalMapping failed with error", &st))?;
            }
        }
    }
    (p.rmdir(&node.n(&s.staging), true).await).map_err(|st| internal("failed to unmount staging target", &st))
}
