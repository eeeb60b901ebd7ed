//! The csi-proxy clients the flows call through, and the record of each call they make.

use crate::legacy;
use csi_proxy_wire::{v1, v1alpha1, Group};
use std::collections::BTreeMap;
use std::future::Future;
use tonic::transport::Channel;
use tonic::Status;

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

    pub(crate) fn note(&mut self, call: &str, args: &[&str]) {
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
    pub(crate) fn stood_in(&mut self, call: &str) -> bool {
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
