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

use csi_proxy_wire::{v1, v1alpha1, Group};
use std::collections::BTreeMap;
use std::future::Future;
use tonic::transport::Channel;
use tonic::{Code, Status};

pub mod legacy;

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

/// See [`Proxy::before_call`].
pub type BeforeCall = Box<dyn FnMut(&str) + Send>;

/// The v1 clients (and system v1alpha1) the drivers use, each on its own pipe or socket, and the
/// record of what the flows called.
pub struct Proxy {
    pub disk: v1::disk_client::DiskClient<Channel>,
    pub fs: v1::filesystem_client::FilesystemClient<Channel>,
    pub volume: v1::volume_client::VolumeClient<Channel>,
    pub smb: v1::smb_client::SmbClient<Channel>,
    pub system: v1alpha1::system_client::SystemClient<Channel>,
    /// `group/version.Rpc argument…`, one per call.
    pub calls: Vec<String>,
    /// What the driver would only log as a warning.
    pub warnings: Vec<String>,
    /// Called with each call's line before the call is sent (the scripted environment sets the
    /// platform's answers up from its model of the node there).
    pub before_call: Option<BeforeCall>,
    /// Calls (by name, e.g. `disk/v1.SetDiskState`) the environment cannot make, with why: they
    /// are recorded with the reason and answered OK without being sent (loop disks have no
    /// online state).
    pub not_sent: Vec<(&'static str, &'static str)>,
    /// The older API versions' clients, once [`Proxy::connect_legacy`] made them (the drivers'
    /// fallbacks: see [`legacy`]).
    pub legacy: Option<legacy::Clients>,
}

/// The API versions the flows use (the drivers' GA clients; vSphere's system client).
pub const APIS: [(Group, &str); 5] = [
    (Group::Disk, "v1"),
    (Group::Filesystem, "v1"),
    (Group::Volume, "v1"),
    (Group::Smb, "v1"),
    (Group::System, "v1alpha1"),
];

impl Proxy {
    /// Connects every client with `channel(group, version)`.
    pub async fn connect<F, Fut>(mut channel: F) -> Proxy
    where
        F: FnMut(Group, &'static str) -> Fut,
        Fut: Future<Output = Channel>,
    {
        Proxy {
            disk: v1::disk_client::DiskClient::new(channel(Group::Disk, "v1").await),
            fs: v1::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, "v1").await),
            volume: v1::volume_client::VolumeClient::new(channel(Group::Volume, "v1").await),
            smb: v1::smb_client::SmbClient::new(channel(Group::Smb, "v1").await),
            system: v1alpha1::system_client::SystemClient::new(channel(Group::System, "v1alpha1").await),
            calls: Vec::new(),
            warnings: Vec::new(),
            before_call: None,
            not_sent: Vec::new(),
            legacy: None,
        }
    }

    fn note(&mut self, call: &str, args: &[&str]) {
        let mut line = call.to_owned();
        for a in args {
            line.push(' ');
            line.push_str(a);
        }
        if let Some(hook) = self.before_call.as_mut() {
            hook(&line);
        }
        self.calls.push(line);
    }

    /// Whether `call` is one the environment does not send (see [`Proxy::not_sent`]); recorded.
    fn stood_in(&mut self, call: &str) -> bool {
        let Some((_, why)) = self.not_sent.iter().find(|(c, _)| *c == call) else { return false };
        let line = format!("{call} (not sent: {why})");
        self.calls.push(line);
        true
    }

    /// The calls recorded so far whose line starts with `prefix`.
    pub fn called(&self, prefix: &str) -> Vec<&str> {
        self.calls.iter().filter(|c| c.starts_with(prefix)).map(String::as_str).collect()
    }

    // filesystem v1

    pub async fn path_exists(&mut self, path: &str) -> Result<bool, Status> {
        self.note("filesystem/v1.PathExists", &[path]);
        let r = self.fs.path_exists(v1::PathExistsRequest { path: path.into() }).await?;
        Ok(r.into_inner().exists)
    }

    pub async fn mkdir(&mut self, path: &str) -> Result<(), Status> {
        self.note("filesystem/v1.Mkdir", &[path]);
        self.fs.mkdir(v1::MkdirRequest { path: path.into() }).await.map(drop)
    }

    pub async fn rmdir(&mut self, path: &str, force: bool) -> Result<(), Status> {
        self.note("filesystem/v1.Rmdir", &[path, if force { "force" } else { "" }]);
        self.fs.rmdir(v1::RmdirRequest { path: path.into(), force }).await.map(drop)
    }

    /// `source` is what the link points to, `target` where the link is made (upstream's names).
    pub async fn create_symlink(&mut self, source: &str, target: &str) -> Result<(), Status> {
        self.note("filesystem/v1.CreateSymlink", &[source, target]);
        let req = v1::CreateSymlinkRequest { source_path: source.into(), target_path: target.into() };
        self.fs.create_symlink(req).await.map(drop)
    }

    pub async fn is_symlink(&mut self, path: &str) -> Result<bool, Status> {
        self.note("filesystem/v1.IsSymlink", &[path]);
        let r = self.fs.is_symlink(v1::IsSymlinkRequest { path: path.into() }).await?;
        Ok(r.into_inner().is_symlink)
    }

    // disk v1

    pub async fn partition_disk(&mut self, disk: u32) -> Result<(), Status> {
        self.note("disk/v1.PartitionDisk", &[&disk.to_string()]);
        self.disk.partition_disk(v1::PartitionDiskRequest { disk_number: disk }).await.map(drop)
    }

    pub async fn rescan(&mut self) -> Result<(), Status> {
        self.note("disk/v1.Rescan", &[]);
        self.disk.rescan(v1::RescanRequest {}).await.map(drop)
    }

    pub async fn set_disk_state(&mut self, disk: u32, online: bool) -> Result<(), Status> {
        if self.stood_in("disk/v1.SetDiskState") {
            return Ok(());
        }
        self.note("disk/v1.SetDiskState", &[&disk.to_string(), if online { "online" } else { "offline" }]);
        self.disk.set_disk_state(v1::SetDiskStateRequest { disk_number: disk, is_online: online }).await.map(drop)
    }

    /// ListDiskLocations: the LUN of every disk that has a location.
    pub async fn list_disk_locations(&mut self) -> Result<BTreeMap<u32, String>, Status> {
        self.note("disk/v1.ListDiskLocations", &[]);
        let r = self.disk.list_disk_locations(v1::ListDiskLocationsRequest {}).await?.into_inner();
        Ok(r.disk_locations.into_iter().map(|(n, l)| (n, l.lunid)).collect())
    }

    /// ListDiskIDs: (page83, serial number) by disk number.
    pub async fn list_disk_ids(&mut self) -> Result<BTreeMap<u32, (String, String)>, Status> {
        self.note("disk/v1.ListDiskIDs", &[]);
        let r = self.disk.list_disk_i_ds(v1::ListDiskIDsRequest {}).await?.into_inner();
        Ok(r.disk_i_ds.into_iter().map(|(n, ids)| (n, (ids.page83, ids.serial_number))).collect())
    }

    /// ListDiskIDs on a disk v1 connection of its own, made by `open` and closed after the
    /// call (aws-ebs-csi-driver's FindDevicePath makes a new client for every call).
    pub async fn list_disk_ids_on(
        &mut self,
        open: impl Future<Output = Channel>,
    ) -> Result<BTreeMap<u32, (String, String)>, Status> {
        self.note("disk/v1.ListDiskIDs (a connection of its own)", &[]);
        let mut client = v1::disk_client::DiskClient::new(open.await);
        let r = client.list_disk_i_ds(v1::ListDiskIDsRequest {}).await?.into_inner();
        drop(client);
        Ok(r.disk_i_ds.into_iter().map(|(n, ids)| (n, (ids.page83, ids.serial_number))).collect())
    }

    pub async fn disk_stats(&mut self, disk: u32) -> Result<i64, Status> {
        self.note("disk/v1.GetDiskStats", &[&disk.to_string()]);
        let r = self.disk.get_disk_stats(v1::GetDiskStatsRequest { disk_number: disk }).await?;
        Ok(r.into_inner().total_bytes)
    }

    // volume v1

    pub async fn list_volumes_on_disk(&mut self, disk: u32) -> Result<Vec<String>, Status> {
        self.note("volume/v1.ListVolumesOnDisk", &[&disk.to_string()]);
        let req = v1::ListVolumesOnDiskRequest { disk_number: disk, partition_number: 0 };
        Ok(self.volume.list_volumes_on_disk(req).await?.into_inner().volume_ids)
    }

    pub async fn is_volume_formatted(&mut self, id: &str) -> Result<bool, Status> {
        self.note("volume/v1.IsVolumeFormatted", &[id]);
        let r = self.volume.is_volume_formatted(v1::IsVolumeFormattedRequest { volume_id: id.into() }).await?;
        Ok(r.into_inner().formatted)
    }

    pub async fn format_volume(&mut self, id: &str) -> Result<(), Status> {
        self.note("volume/v1.FormatVolume", &[id]);
        self.volume.format_volume(v1::FormatVolumeRequest { volume_id: id.into() }).await.map(drop)
    }

    pub async fn mount_volume(&mut self, id: &str, target: &str) -> Result<(), Status> {
        self.note("volume/v1.MountVolume", &[id, target]);
        let req = v1::MountVolumeRequest { volume_id: id.into(), target_path: target.into() };
        self.volume.mount_volume(req).await.map(drop)
    }

    pub async fn unmount_volume(&mut self, id: &str, target: &str) -> Result<(), Status> {
        self.note("volume/v1.UnmountVolume", &[id, target]);
        let req = v1::UnmountVolumeRequest { volume_id: id.into(), target_path: target.into() };
        self.volume.unmount_volume(req).await.map(drop)
    }

    pub async fn resize_volume(&mut self, id: &str, size: i64) -> Result<(), Status> {
        self.note("volume/v1.ResizeVolume", &[id, &size.to_string()]);
        let req = v1::ResizeVolumeRequest { volume_id: id.into(), size_bytes: size };
        self.volume.resize_volume(req).await.map(drop)
    }

    /// (total, used) bytes.
    pub async fn volume_stats(&mut self, id: &str) -> Result<(i64, i64), Status> {
        self.note("volume/v1.GetVolumeStats", &[id]);
        let r = self.volume.get_volume_stats(v1::GetVolumeStatsRequest { volume_id: id.into() }).await?;
        let r = r.into_inner();
        Ok((r.total_bytes, r.used_bytes))
    }

    pub async fn disk_of_volume(&mut self, id: &str) -> Result<u32, Status> {
        self.note("volume/v1.GetDiskNumberFromVolumeID", &[id]);
        let req = v1::GetDiskNumberFromVolumeIdRequest { volume_id: id.into() };
        Ok(self.volume.get_disk_number_from_volume_id(req).await?.into_inner().disk_number)
    }

    pub async fn volume_at(&mut self, target: &str) -> Result<String, Status> {
        self.note("volume/v1.GetVolumeIDFromTargetPath", &[target]);
        let req = v1::GetVolumeIdFromTargetPathRequest { target_path: target.into() };
        Ok(self.volume.get_volume_id_from_target_path(req).await?.into_inner().volume_id)
    }

    pub async fn write_volume_cache(&mut self, id: &str) -> Result<(), Status> {
        self.note("volume/v1.WriteVolumeCache", &[id]);
        self.volume.write_volume_cache(v1::WriteVolumeCacheRequest { volume_id: id.into() }).await.map(drop)
    }

    // smb v1

    pub async fn new_smb_mapping(
        &mut self,
        remote: &str,
        local: &str,
        user: &str,
        password: &str,
    ) -> Result<(), Status> {
        self.note("smb/v1.NewSmbGlobalMapping", &[remote, local, user]);
        let req = v1::NewSmbGlobalMappingRequest {
            remote_path: remote.into(),
            local_path: local.into(),
            username: user.into(),
            password: password.into(),
        };
        self.smb.new_smb_global_mapping(req).await.map(drop)
    }

    pub async fn remove_smb_mapping(&mut self, remote: &str) -> Result<(), Status> {
        self.note("smb/v1.RemoveSmbGlobalMapping", &[remote]);
        let req = v1::RemoveSmbGlobalMappingRequest { remote_path: remote.into() };
        self.smb.remove_smb_global_mapping(req).await.map(drop)
    }

    // system v1alpha1

    pub async fn bios_serial(&mut self) -> Result<String, Status> {
        self.note("system/v1alpha1.GetBIOSSerialNumber", &[]);
        let r = self.system.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await?;
        Ok(r.into_inner().serial_number)
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

/// azuredisk-csi-driver in csi-proxy mode (windows.useHostProcessContainers=false):
/// pkg/mounter/safe_mounter_windows.go, pkg/azuredisk/azure_common_windows.go,
/// pkg/azuredisk/nodeserver.go.
pub mod azuredisk {
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
}

/// gcp-compute-persistent-disk-csi-driver: pkg/mount-manager/safe-mounter-v1_windows.go,
/// pkg/mount-manager/statter_windows.go, pkg/resizefs/resizefs_windows.go,
/// pkg/gce-pd-csi-driver/utils_windows.go, pkg/gce-pd-csi-driver/node.go.
pub mod gce_pd {
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
}

/// aws-ebs-csi-driver (csi-proxy mode): pkg/mounter/mount_windows_proxyV1.go,
/// pkg/mounter/mount_windows.go, pkg/driver/node.go.
pub mod ebs {
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
            (p.mkdir(&target).await)
                .map_err(|s| internal(&format!("could not create target dir {:?}", v.staging), &s))?;
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
        let mounted =
            mounted.await.map_err(|s| internal(&format!("Could not check if {:?} is mounted", v.publish), &s))?;
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
        let device = (mounted_disk(p, node, &v.publish).await)
            .map_err(|s| internal("failed to get device name from mount", &s))?;
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
}

/// vsphere-csi-driver v3.4: pkg/csi/service/mounter/mounter_windows.go,
/// pkg/csi/service/osutils/windows_os_utils.go, pkg/csi/service/node.go.
pub mod vsphere {
    use super::*;

    /// GetDiskNumber (v3.4.0 mounter_windows.go): ListDiskIDs, the disk whose page 83 ID is
    /// `disk_id` exactly (the publish context's disk UUID, as the VM's SCSI disks report it).
    pub async fn disk_number(p: &mut Proxy, disk_id: &str) -> Outcome<u32> {
        let ids = (p.list_disk_ids().await).map_err(|s| internal("error getting disk number", &s))?;
        ids.iter()
            .find(|(_, (page83, _))| !page83.is_empty() && page83 == disk_id)
            .map(|(n, _)| *n)
            .ok_or_else(|| fail(Code::Internal, "error getting disk number: no matching disks found"))
    }

    /// NodeGetInfo: the node's UUID from the BIOS serial number.
    pub async fn node_info(p: &mut Proxy) -> Outcome<String> {
        (p.bios_serial().await).map_err(|s| internal("failed to get system UUID", &s))
    }

    /// NodeStageBlockVolume with mount access (the "is it mounted" check is os.Lstat in the
    /// driver; the staging folder is not there yet).
    pub async fn stage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
        format_and_mount(p, v.disk, true, &node.n(&v.staging))
            .await
            .map_err(|s| internal("error mounting volume", &s))
            .map(drop)
    }

    pub async fn publish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
        let target = node.n(&v.publish);
        let prepare = async {
            if p.path_exists(&target).await? {
                p.rmdir(&target, true).await?;
            }
            p.mkdir(&node.n(&node.parent(&v.publish))).await
        };
        prepare.await.map_err(|s| internal("Target path could not be prepared", &s))?;
        (p.create_symlink(&node.n(&v.staging), &target).await)
            .map_err(|s| internal(&format!("Could not mount {:?} at {:?}", v.staging, v.publish), &s))
    }

    /// NodeGetVolumeStats through StatFS, with the path as the kubelet sent it. (total, used).
    pub async fn stats(p: &mut Proxy, v: &BlockVolume) -> Outcome<(i64, i64)> {
        let run = async {
            let id = p.volume_at(&v.publish).await?;
            p.volume_stats(&id).await
        };
        run.await.map_err(|s| internal("failed to get metrics", &s))
    }

    pub async fn expand(p: &mut Proxy, node: &Node, v: &BlockVolume, required: i64) -> Outcome {
        let run = async {
            let id = p.volume_at(&node.n(&v.publish)).await?;
            let (total, _) = p.volume_stats(&id).await?;
            if total < required {
                p.rescan().await?;
            }
            let disk = p.disk_of_volume(&id).await?;
            let disk_size = p.disk_stats(disk).await?;
            if required - disk_size < 1 << 20 {
                return Ok(());
            }
            let disk = p.disk_of_volume(&id).await?;
            p.set_disk_state(disk, true).await?;
            p.resize_volume(&id, 0).await
        };
        run.await.map_err(|s| internal("error when resizing filesystem", &s))
    }

    pub async fn unpublish(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
        (p.rmdir(&node.n(&v.publish), true).await).map_err(|s| internal("error unmounting publishTarget", &s))
    }

    pub async fn unstage(p: &mut Proxy, node: &Node, v: &BlockVolume) -> Outcome {
        unmount_and_offline(p, &node.n(&v.staging)).await.map_err(|s| internal("error unmounting stagingTarget", &s))
    }
}

/// csi-driver-smb (pkg/mounter/safe_mounter_windows.go, pkg/smb/smb_common_windows.go,
/// pkg/smb/nodeserver.go) and azurefile-csi-driver (pkg/mounter/safe_mounter_windows.go,
/// pkg/azurefile/azure_common_windows.go, pkg/azurefile/nodeserver.go), whose Windows mounters
/// are the same but for the details each function names.
pub mod smb {
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
