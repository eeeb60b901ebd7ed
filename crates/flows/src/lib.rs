//! Driver flows: the csi-proxy calls that the Windows CSI node plugins make for each CSI node
//! RPC, in their order, with the arguments spelled as each driver builds them and each driver's
//! own checks on the answers. One definition runs in every environment: the Windows backend on
//! the scripted platform, the real pipes under Wine, the Linux backend on loop disks, and
//! `csi-proxyctl conformance` against the daemon running on a node.
//!
//! The facts (which call, which API version, which path spelling, which check) come from the
//! drivers' sources; each flow names the files it follows. What a driver does on its own (reading
//! a link, statfs, creating a directory in its container) is not a csi-proxy call: the flows take
//! it from [`Local`], which each environment provides.
//!
//! A flow answers what the driver would answer the kubelet: `Ok`, or the [`Failure`] (gRPC code
//! and text) the driver would return. Calls the driver makes are recorded in [`Proxy::calls`];
//! what a driver only logs as a warning (and so goes unnoticed by the kubelet, like a skipped
//! cache flush) is recorded in [`Proxy::warnings`], which tests expect empty.

use std::future::Future;
use tonic::transport::Channel;
use tonic::{Code, Status};

pub mod azuredisk;
pub mod ebs;
pub mod gce_pd;
pub mod legacy;
mod proxy;
pub mod smb;
pub mod vsphere;

pub use proxy::{BeforeCall, Proxy, APIS};

/// What the kubelet would get back from the driver.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub code: Code,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

pub type Outcome<T = ()> = Result<T, Failure>;

fn fail(code: Code, message: impl Into<String>) -> Failure {
    Failure { code, message: message.into() }
}

/// The text a Go client's error has for a failed call (`err.Error()` of a gRPC status), which is
/// what the drivers log, wrap and match.
pub fn go_error(s: &Status) -> String {
    format!("rpc error: code = {:?} desc = {}", s.code(), s.message())
}

/// The OS whose path rules the node follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Os {
    Windows,
    Linux,
}

/// Where the kubelet puts a volume's directories, spelled as the kubelet hands them to drivers.
#[derive(Debug, Clone)]
pub struct Node {
    pub os: Os,
    /// The kubelet's root as staging paths start: on Windows without a drive
    /// (`\var\lib\kubelet`), as the kubelet sends NodeStageVolume's staging_target_path.
    pub staging_root: String,
    /// The kubelet's root as publish paths start: on Windows with the drive
    /// (`c:\var\lib\kubelet`).
    pub publish_root: String,
}

impl Node {
    /// A Windows node whose kubelet directory is `root`, a drive path (`C:\var\lib\kubelet`).
    pub fn windows(root: &str) -> Node {
        let (drive, rest) = root.split_at(2);
        assert!(drive.ends_with(':') && rest.starts_with('\\'), "{root}: expected a drive path");
        Node { os: Os::Windows, staging_root: rest.to_owned(), publish_root: format!("{}{rest}", drive.to_lowercase()) }
    }

    /// A Linux node whose kubelet directory is `root`.
    pub fn linux(root: &str) -> Node {
        Node { os: Os::Linux, staging_root: root.to_owned(), publish_root: root.to_owned() }
    }

    fn sep(&self) -> char {
        match self.os {
            Os::Windows => '\\',
            Os::Linux => '/',
        }
    }

    fn join(&self, base: &str, names: &[&str]) -> String {
        let mut p = base.to_owned();
        for n in names {
            p.push(self.sep());
            p.push_str(n);
        }
        p
    }

    /// `<root>\plugins\kubernetes.io\csi\<driver>\<hash>\globalmount` (the kubelet's
    /// csi_attacher; `hash` is its SHA-256 of the volume handle).
    pub fn staging(&self, driver: &str, hash: &str) -> String {
        self.join(&self.staging_root, &["plugins", "kubernetes.io", "csi", driver, hash, "globalmount"])
    }

    /// `<root>\pods\<uid>\volumes\kubernetes.io~csi\<pv>\mount` (the kubelet's csi_mounter).
    pub fn publish(&self, pod: &str, pv: &str) -> String {
        self.join(&self.publish_root, &["pods", pod, "volumes", "kubernetes.io~csi", pv, "mount"])
    }

    /// The drivers' normalizeWindowsPath (azuredisk, smb and azurefile
    /// pkg/mounter/safe_mounter_windows.go, EBS pkg/util/util.go, vSphere mounter_windows.go, and
    /// k8s.io/mount-utils NormalizeWindowsPath for GCE): `/` becomes `\`, and a path rooted
    /// without a drive gets `c:` in front. On Linux the drivers pass paths as they are.
    pub fn n(&self, path: &str) -> String {
        match self.os {
            Os::Linux => path.to_owned(),
            Os::Windows => {
                let p = path.replace('/', "\\");
                if p.starts_with('\\') {
                    format!("c:{p}")
                } else {
                    p
                }
            }
        }
    }

    /// Go's `filepath.Dir` for this OS (the paths here are clean and have a parent).
    pub fn parent(&self, path: &str) -> String {
        path.rsplit_once(self.sep()).map(|(p, _)| p.to_owned()).unwrap_or_default()
    }
}

/// What a driver does on the node itself, without csi-proxy (in its container or host process).
pub trait Local: Send + Sync {
    /// `os.MkdirAll`.
    fn mkdir_all(&self, path: &str);
    /// `os.Readlink`: where the link at `path` points, `None` when it is none.
    fn readlink(&self, path: &str) -> Option<String>;
    /// `os.ReadDir` (azuredisk, csi-driver-smb and azurefile ensureMountPoint read a mounted
    /// folder to see that its link still leads somewhere): the error's text when it fails.
    fn read_dir(&self, path: &str) -> Result<(), String> {
        std::fs::read_dir(path).map(drop).map_err(|e| e.to_string())
    }
    /// `os.Remove`: a file or an empty directory.
    fn remove(&self, path: &str) -> Result<(), String> {
        std::fs::remove_dir(path).or_else(|_| std::fs::remove_file(path)).map_err(|e| e.to_string())
    }
    /// `net.ResolveIPAddr("ip4", host)` (csi-driver-smb's SMBMount for `*.svc.cluster.local`
    /// servers): the first IPv4 address, `None` when the name does not resolve to one.
    fn resolve_ipv4(&self, host: &str) -> Option<String> {
        use std::net::ToSocketAddrs;
        let addrs = (host, 445).to_socket_addrs().ok()?;
        addrs.into_iter().find(|a| a.is_ipv4()).map(|a| a.ip().to_string())
    }
}

/// One block volume as a driver's node RPCs see it.
#[derive(Debug, Clone)]
pub struct BlockVolume {
    /// The disk number the driver found (by LUN, page 83 or serial number: not part of these
    /// flows, the environments know their disk).
    pub disk: u32,
    /// NodeStageVolume's staging_target_path, as the kubelet sends it.
    pub staging: String,
    /// NodePublishVolume's target_path (also NodeGetVolumeStats' and NodeExpandVolume's
    /// volume_path).
    pub publish: String,
}

/// One SMB share as csi-driver-smb and azurefile stage it.
#[derive(Debug, Clone)]
pub struct Share {
    /// The volume context's source as the driver has it (`//server/share/dir` for smb).
    pub source: String,
    pub username: String,
    pub password: String,
    pub staging: String,
    pub publish: String,
}

fn internal(what: &str, s: &Status) -> Failure {
    fail(Code::Internal, format!("{what}: {}", go_error(s)))
}

/// The first volume of `disk`, as every driver takes it (`VolumeIds[0]`).
async fn first_volume(p: &mut Proxy, disk: u32) -> Result<String, Status> {
    let ids = p.list_volumes_on_disk(disk).await?;
    ids.into_iter().next().ok_or_else(|| Status::internal("ListVolumesOnDisk does not return any volumes"))
}

/// PartitionDisk, [SetDiskState online], ListVolumesOnDisk, IsVolumeFormatted, FormatVolume when
/// not, MountVolume at `target`: the FormatAndMount every disk driver has. Returns the volume.
async fn format_and_mount(p: &mut Proxy, disk: u32, online: bool, target: &str) -> Result<String, Status> {
    p.partition_disk(disk).await?;
    if online {
        p.set_disk_state(disk, true).await?;
    }
    let id = first_volume(p, disk).await?;
    if !p.is_volume_formatted(&id).await? {
        p.format_volume(&id).await?;
    }
    p.mount_volume(&id, target).await?;
    Ok(id)
}

/// NodeUnstageVolume of GCE PD and vSphere (the same calls in both): nothing there is done;
/// else the staging folder's volume is unmounted, the folder removed and the disk taken offline.
async fn unmount_and_offline(p: &mut Proxy, target: &str) -> Result<(), Status> {
    if !p.path_exists(target).await? {
        return Ok(());
    }
    let id = p.volume_at(target).await?;
    p.unmount_volume(&id, target).await?;
    p.rmdir(target, true).await?;
    let disk = p.disk_of_volume(&id).await?;
    p.set_disk_state(disk, false).await
}

/// 1 GiB.
const GIB: i64 = 1 << 30;

fn round_up_gib(bytes: i64) -> i64 {
    (bytes + GIB - 1) / GIB
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_as_the_kubelet_and_the_drivers_spell_them() {
        let node = Node::windows(r"C:\var\lib\kubelet");
        let s = node.staging("disk.csi.azure.com", "ab12");
        assert_eq!(s, r"\var\lib\kubelet\plugins\kubernetes.io\csi\disk.csi.azure.com\ab12\globalmount");
        assert_eq!(node.n(&s), format!("c:{s}"));
        let p = node.publish("uid", "pv");
        assert_eq!(p, r"c:\var\lib\kubelet\pods\uid\volumes\kubernetes.io~csi\pv\mount");
        assert_eq!(node.n(&p), p);
        assert_eq!(node.n("/var/x"), r"c:\var\x");
        assert_eq!(node.parent(&p), r"c:\var\lib\kubelet\pods\uid\volumes\kubernetes.io~csi\pv");
        let linux = Node::linux("/k");
        assert_eq!(linux.staging("d", "h"), "/k/plugins/kubernetes.io/csi/d/h/globalmount");
        assert_eq!(linux.n("/k/x"), "/k/x");
    }

    struct Resolver;

    impl Local for Resolver {
        fn mkdir_all(&self, _: &str) {}
        fn readlink(&self, _: &str) -> Option<String> {
            None
        }
        fn resolve_ipv4(&self, host: &str) -> Option<String> {
            (host == "smb-server.default.svc.cluster.local").then(|| "10.96.0.7".to_owned())
        }
    }

    /// csi-driver-smb v1.20.3 SMBMount: one trailing backslash goes, a cluster service name
    /// becomes its IPv4 address (only when the source is spelled with `/`); azurefile keeps both.
    #[test]
    fn smb_remote_paths_as_the_drivers_make_them() {
        use super::smb::{remote_path, Driver};
        assert_eq!(remote_path(Driver::Smb, &Resolver, "//fileserver/share/dir/"), r"\\fileserver\share\dir");
        assert_eq!(remote_path(Driver::Smb, &Resolver, "//fileserver/share/dir//"), r"\\fileserver\share\dir\");
        assert_eq!(
            remote_path(Driver::Smb, &Resolver, "//smb-server.default.svc.cluster.local/share"),
            r"\\10.96.0.7\share"
        );
        assert_eq!(
            remote_path(Driver::Smb, &Resolver, r"\\smb-server.default.svc.cluster.local\share"),
            r"\\smb-server.default.svc.cluster.local\share"
        );
        assert_eq!(remote_path(Driver::Smb, &Resolver, "//other.svc.cluster.local/s"), r"\\other.svc.cluster.local\s");
        assert_eq!(
            remote_path(Driver::AzureFile, &Resolver, r"\\acct.file.core.windows.net\share\"),
            r"\\acct.file.core.windows.net\share\"
        );
    }

    #[test]
    fn ebs_pattern_matches_as_go_regexp_does() {
        use super::ebs::not_mounted_text;
        // Upstream's text for a folder that is no mount point.
        let upstream = r"rpc error: code = Unknown desc = error getting the volume for the mount c:\var\x, internal error error getting volume from mount. cmd: (Get-Item -Path c:\var\x).Target, output: , error: <nil>";
        assert!(not_mounted_text(upstream));
        assert!(not_mounted_text("rpc error: code = NotFound desc = x because it does not exist"));
        assert!(!not_mounted_text(r"rpc error: code = NotFound desc = c:\var\x is not a mounted folder"));
        assert!(!not_mounted_text("rpc error: code = InvalidArgument desc = path has no drive"));
        assert!(!not_mounted_text("Get-Item -Path  .Target, output: , error: <nil>"));
    }
}
