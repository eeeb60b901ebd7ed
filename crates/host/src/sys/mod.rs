//! The real backend for the OS this crate is built for.
//!
//! Operations without a native implementation yet (SMB and iSCSI on Linux) answer
//! [`Error::Unimplemented`] naming the operation and the OS: the daemon never pretends that work
//! was done.

use crate::types::*;
use crate::*;

#[cfg(target_os = "linux")]
pub mod linux;
#[cfg(target_os = "linux")]
use linux as os;

#[cfg(windows)]
pub mod windows;
#[cfg(windows)]
use windows as os;

#[cfg(not(any(target_os = "linux", windows)))]
compile_error!("csi-proxy-host has native backends for Linux and Windows only");

/// Name of the OS in error messages.
pub const OS: &str = os::NAME;

/// Only Linux still has groups without a backend (SMB, iSCSI).
#[cfg(target_os = "linux")]
pub(crate) fn unimplemented(operation: &'static str) -> Error {
    Error::Unimplemented { operation, os: OS }
}

/// Settings of the native backend that come from the command line.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where filesystem paths (and mount targets) must stay: `-working-dir`s and `-kubelet-path`.
    pub roots: crate::paths::Roots,
    /// `-linux-fs-type`: the filesystem FormatVolume creates on Linux.
    pub fs_type: FsType,
}

/// The native host: every group of this OS.
pub struct NativeHost {
    fs: Arc<os::fs::Filesystem>,
    system: os::system::System,
    block: os::block::Block,
    /// SMB and iSCSI.
    remote: os::remote::Remote,
}

impl NativeHost {
    pub fn new(config: Config) -> Self {
        let fs = Arc::new(os::fs::Filesystem::new(config.roots.clone()));
        NativeHost {
            remote: os::remote::Remote::new(fs.clone()),
            fs,
            system: os::system::System::new(),
            block: os::block::Block::new(config.roots, config.fs_type),
        }
    }

    pub fn hosts(config: Config) -> Hosts {
        Hosts::from_one(Arc::new(Self::new(config)))
    }
}

impl DiskHost for NativeHost {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        self.block.list_disk_locations()
    }
    fn partition_disk(&self, disk: u32) -> Result<()> {
        self.block.partition_disk(disk)
    }
    fn rescan(&self) -> Result<()> {
        self.block.rescan()
    }
    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        self.block.list_disk_ids()
    }
    fn disk_size(&self, disk: u32) -> Result<u64> {
        self.block.disk_size(disk)
    }
    fn set_disk_online(&self, disk: u32, online: bool) -> Result<()> {
        self.block.set_disk_online(disk, online)
    }
    fn disk_online(&self, disk: u32) -> Result<bool> {
        self.block.disk_online(disk)
    }
}

impl VolumeHost for NativeHost {
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>> {
        self.block.list_volumes_on_disk(disk, partition)
    }
    fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.block.mount_volume(volume_id, target_path)
    }
    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        self.block.unmount_volume(volume_id, target_path)
    }
    fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        self.block.is_volume_formatted(volume_id)
    }
    fn format_volume(&self, volume_id: &str) -> Result<()> {
        self.block.format_volume(volume_id)
    }
    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        self.block.resize_volume(volume_id, size_bytes)
    }
    fn volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        self.block.volume_stats(volume_id)
    }
    fn disk_number_of_volume(&self, volume_id: &str) -> Result<u32> {
        self.block.disk_number_of_volume(volume_id)
    }
    fn volume_at_path(&self, target_path: &str) -> Result<String> {
        self.block.volume_at_path(target_path)
    }
    fn closest_volume_to_path(&self, target_path: &str) -> Result<String> {
        self.block.closest_volume_to_path(target_path)
    }
    fn flush_volume(&self, volume_id: &str) -> Result<()> {
        self.block.flush_volume(volume_id)
    }
}

impl FilesystemHost for NativeHost {
    fn path_exists(&self, path: &str) -> Result<bool> {
        self.fs.path_exists(path)
    }
    fn mkdir(&self, path: &str) -> Result<()> {
        self.fs.mkdir(path)
    }
    fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        self.fs.rmdir(path, force)
    }
    fn rmdir_contents(&self, path: &str) -> Result<()> {
        self.fs.rmdir_contents(path)
    }
    fn create_symlink(&self, destination: &str, link: &str) -> Result<()> {
        self.fs.create_symlink(destination, link)
    }
    fn is_symlink(&self, path: &str) -> Result<bool> {
        self.fs.is_symlink(path)
    }
}

impl SmbHost for NativeHost {
    fn new_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        self.remote.new_global_mapping(mapping)
    }
    fn remove_global_mapping(&self, remote_path: &str) -> Result<()> {
        self.remote.remove_global_mapping(remote_path)
    }
}

impl IscsiHost for NativeHost {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.remote.add_target_portal(portal)
    }
    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        self.remote.discover_target_portal(portal)
    }
    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.remote.remove_target_portal(portal)
    }
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        self.remote.list_target_portals()
    }
    fn connect_target(&self, request: &ConnectTarget) -> Result<()> {
        self.remote.connect_target(request)
    }
    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        self.remote.disconnect_target(portal, iqn)
    }
    fn target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        self.remote.target_disks(portal, iqn)
    }
    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        self.remote.set_mutual_chap_secret(secret)
    }
}

impl SystemHost for NativeHost {
    fn bios_serial_number(&self) -> Result<String> {
        self.system.bios_serial_number()
    }
    fn start_service(&self, name: &str) -> Result<()> {
        self.system.start_service(name)
    }
    fn stop_service(&self, name: &str, force: bool, may_stop: &dyn Fn(&str) -> bool) -> Result<()> {
        self.system.stop_service(name, force, may_stop)
    }
    fn service(&self, name: &str) -> Result<ServiceInfo> {
        self.system.service(name)
    }
}
