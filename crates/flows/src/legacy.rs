//! The older API versions the drivers fall back to when the v1 pipes are not there (or, for
//! azuredisk, when `--use-csiproxy-ga-interface=false`): filesystem v1beta1, disk v1beta2,
//! volume v1beta1 (GCE PD) and v1beta2 (azuredisk), smb v1beta1. The calls are recorded in
//! [`Proxy::calls`] like the v1 ones, named `group/version.Rpc`.

use crate::{Proxy, Status};
use csi_proxy_wire::{v1beta1, v1beta2, Group};
use std::collections::BTreeMap;
use std::future::Future;
use tonic::transport::Channel;

/// The fallback versions' clients.
pub struct Clients {
    pub fs: v1beta1::filesystem_client::FilesystemClient<Channel>,
    pub disk: v1beta2::disk_client::DiskClient<Channel>,
    pub volume_v1beta1: v1beta1::volume_client::VolumeClient<Channel>,
    pub volume_v1beta2: v1beta2::volume_client::VolumeClient<Channel>,
    pub smb: v1beta1::smb_client::SmbClient<Channel>,
}

/// The API versions [`Clients`] use.
pub const APIS: [(Group, &str); 5] = [
    (Group::Filesystem, "v1beta1"),
    (Group::Disk, "v1beta2"),
    (Group::Volume, "v1beta1"),
    (Group::Volume, "v1beta2"),
    (Group::Smb, "v1beta1"),
];

/// Which volume API a flow uses: GCE PD's v1beta1 or azuredisk's v1beta2 (the same RPCs; v1beta2
/// adds WriteVolumeCache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeApi {
    V1beta1,
    V1beta2,
}

impl VolumeApi {
    fn name(self) -> &'static str {
        match self {
            VolumeApi::V1beta1 => "volume/v1beta1",
            VolumeApi::V1beta2 => "volume/v1beta2",
        }
    }
}

/// v1beta1's PathContext: the drivers say POD for pod folders and PLUGIN for their own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    Plugin,
    Pod,
}

impl Context {
    fn wire(self) -> i32 {
        match self {
            Context::Plugin => v1beta1::PathContext::Plugin as i32,
            Context::Pod => v1beta1::PathContext::Pod as i32,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Context::Plugin => "PLUGIN",
            Context::Pod => "POD",
        }
    }
}

fn missing() -> Status {
    Status::failed_precondition("the flow needs Proxy::connect_legacy first")
}

macro_rules! volume_call {
    ($self:ident, $api:expr, $rpc:ident, $req:ident { $($f:ident: $v:expr),* $(,)? }) => {{
        let c = $self.legacy.as_mut().ok_or_else(missing)?;
        match $api {
            VolumeApi::V1beta1 => c.volume_v1beta1.$rpc(v1beta1::$req { $($f: $v),* }).await.map(|r| r.into_inner()).map(Into::into),
            VolumeApi::V1beta2 => c.volume_v1beta2.$rpc(v1beta2::$req { $($f: $v),* }).await.map(|r| r.into_inner()).map(Into::into),
        }
    }};
}

/// What the two volume versions answer, in one shape.
pub struct Answer<T>(pub T);

macro_rules! answers {
    ($($msg:ident => $t:ty, |$r:ident| $e:expr;)*) => {$(
        impl From<v1beta1::$msg> for Answer<$t> {
            fn from($r: v1beta1::$msg) -> Self { Answer($e) }
        }
        impl From<v1beta2::$msg> for Answer<$t> {
            fn from($r: v1beta2::$msg) -> Self { Answer($e) }
        }
    )*};
}

answers! {
    ListVolumesOnDiskResponse => Vec<String>, |r| r.volume_ids;
    IsVolumeFormattedResponse => bool, |r| r.formatted;
    FormatVolumeResponse => (), |_r| ();
    MountVolumeResponse => (), |_r| ();
    DismountVolumeResponse => (), |_r| ();
    ResizeVolumeResponse => (), |_r| ();
    VolumeStatsResponse => (i64, i64), |r| (r.volume_size, r.volume_used_size);
    VolumeDiskNumberResponse => i64, |r| r.disk_number;
    VolumeIdFromMountResponse => String, |r| r.volume_id;
}

impl Proxy {
    /// Connects the fallback versions' clients with `channel(group, version)`.
    pub async fn connect_legacy<F, Fut>(&mut self, mut channel: F)
    where
        F: FnMut(Group, &'static str) -> Fut,
        Fut: Future<Output = Channel>,
    {
        self.legacy = Some(Clients {
            fs: v1beta1::filesystem_client::FilesystemClient::new(channel(Group::Filesystem, "v1beta1").await),
            disk: v1beta2::disk_client::DiskClient::new(channel(Group::Disk, "v1beta2").await),
            volume_v1beta1: v1beta1::volume_client::VolumeClient::new(channel(Group::Volume, "v1beta1").await),
            volume_v1beta2: v1beta2::volume_client::VolumeClient::new(channel(Group::Volume, "v1beta2").await),
            smb: v1beta1::smb_client::SmbClient::new(channel(Group::Smb, "v1beta1").await),
        });
    }

    fn clients(&mut self) -> Result<&mut Clients, Status> {
        self.legacy.as_mut().ok_or_else(missing)
    }

    // filesystem v1beta1

    pub async fn b1_path_exists(&mut self, path: &str, context: Context) -> Result<bool, Status> {
        self.note("filesystem/v1beta1.PathExists", &[path, context.name()]);
        let req = v1beta1::PathExistsRequest { path: path.into(), context: context.wire() };
        Ok(self.clients()?.fs.path_exists(req).await?.into_inner().exists)
    }

    pub async fn b1_mkdir(&mut self, path: &str, context: Context) -> Result<(), Status> {
        self.note("filesystem/v1beta1.Mkdir", &[path, context.name()]);
        let req = v1beta1::MkdirRequest { path: path.into(), context: context.wire() };
        self.clients()?.fs.mkdir(req).await.map(drop)
    }

    pub async fn b1_rmdir(&mut self, path: &str, context: Context) -> Result<(), Status> {
        self.note("filesystem/v1beta1.Rmdir", &[path, context.name(), "force"]);
        let req = v1beta1::RmdirRequest { path: path.into(), context: context.wire(), force: true };
        self.clients()?.fs.rmdir(req).await.map(drop)
    }

    /// LinkPath: `source` is what the link points to, `target` where it is made.
    pub async fn b1_link_path(&mut self, source: &str, target: &str) -> Result<(), Status> {
        self.note("filesystem/v1beta1.LinkPath", &[source, target]);
        let req = v1beta1::LinkPathRequest { source_path: source.into(), target_path: target.into() };
        self.clients()?.fs.link_path(req).await.map(drop)
    }

    pub async fn b1_is_mount_point(&mut self, path: &str) -> Result<bool, Status> {
        self.note("filesystem/v1beta1.IsMountPoint", &[path]);
        let req = v1beta1::IsMountPointRequest { path: path.into() };
        Ok(self.clients()?.fs.is_mount_point(req).await?.into_inner().is_mount_point)
    }

    // disk v1beta2 (disks named by their number as a string)

    pub async fn b2_rescan(&mut self) -> Result<(), Status> {
        self.note("disk/v1beta2.Rescan", &[]);
        self.clients()?.disk.rescan(v1beta2::RescanRequest {}).await.map(drop)
    }

    /// ListDiskLocations: the LUN by disk ID.
    pub async fn b2_list_disk_locations(&mut self) -> Result<BTreeMap<String, String>, Status> {
        self.note("disk/v1beta2.ListDiskLocations", &[]);
        let r = self.clients()?.disk.list_disk_locations(v1beta2::ListDiskLocationsRequest {}).await?.into_inner();
        Ok(r.disk_locations.into_iter().map(|(n, l)| (n, l.lunid)).collect())
    }

    /// ListDiskIDs: the identifiers (`page83`, `serialNumber`) by disk ID.
    pub async fn b2_list_disk_ids(&mut self) -> Result<BTreeMap<String, BTreeMap<String, String>>, Status> {
        self.note("disk/v1beta2.ListDiskIDs", &[]);
        let r = self.clients()?.disk.list_disk_i_ds(v1beta2::ListDiskIDsRequest {}).await?.into_inner();
        Ok(r.disk_i_ds.into_iter().map(|(n, ids)| (n, ids.identifiers)).collect())
    }

    pub async fn b2_partition_disk(&mut self, disk: &str) -> Result<(), Status> {
        self.note("disk/v1beta2.PartitionDisk", &[disk]);
        let req = v1beta2::PartitionDiskRequest { disk_id: disk.into() };
        self.clients()?.disk.partition_disk(req).await.map(drop)
    }

    pub async fn b2_disk_stats(&mut self, disk: &str) -> Result<i64, Status> {
        self.note("disk/v1beta2.DiskStats", &[disk]);
        let req = v1beta2::DiskStatsRequest { disk_id: disk.into() };
        Ok(self.clients()?.disk.disk_stats(req).await?.into_inner().disk_size)
    }

    pub async fn b2_set_attach_state(&mut self, disk: &str, online: bool) -> Result<(), Status> {
        if self.stood_in("disk/v1beta2.SetAttachState") {
            return Ok(());
        }
        self.note("disk/v1beta2.SetAttachState", &[disk, if online { "online" } else { "offline" }]);
        let req = v1beta2::SetAttachStateRequest { disk_id: disk.into(), is_online: online };
        self.clients()?.disk.set_attach_state(req).await.map(drop)
    }

    // volume v1beta1 / v1beta2

    pub async fn b_list_volumes_on_disk(&mut self, api: VolumeApi, disk: &str) -> Result<Vec<String>, Status> {
        self.note(&format!("{}.ListVolumesOnDisk", api.name()), &[disk]);
        let a: Answer<Vec<String>> =
            volume_call!(self, api, list_volumes_on_disk, ListVolumesOnDiskRequest { disk_id: disk.into() })?;
        Ok(a.0)
    }

    pub async fn b_is_volume_formatted(&mut self, api: VolumeApi, id: &str) -> Result<bool, Status> {
        self.note(&format!("{}.IsVolumeFormatted", api.name()), &[id]);
        let a: Answer<bool> =
            volume_call!(self, api, is_volume_formatted, IsVolumeFormattedRequest { volume_id: id.into() })?;
        Ok(a.0)
    }

    pub async fn b_format_volume(&mut self, api: VolumeApi, id: &str) -> Result<(), Status> {
        self.note(&format!("{}.FormatVolume", api.name()), &[id]);
        let _: Answer<()> = volume_call!(self, api, format_volume, FormatVolumeRequest { volume_id: id.into() })?;
        Ok(())
    }

    pub async fn b_mount_volume(&mut self, api: VolumeApi, id: &str, path: &str) -> Result<(), Status> {
        self.note(&format!("{}.MountVolume", api.name()), &[id, path]);
        let _: Answer<()> =
            volume_call!(self, api, mount_volume, MountVolumeRequest { volume_id: id.into(), path: path.into() })?;
        Ok(())
    }

    pub async fn b_dismount_volume(&mut self, api: VolumeApi, id: &str, path: &str) -> Result<(), Status> {
        self.note(&format!("{}.DismountVolume", api.name()), &[id, path]);
        let _: Answer<()> = volume_call!(
            self,
            api,
            dismount_volume,
            DismountVolumeRequest { volume_id: id.into(), path: path.into() }
        )?;
        Ok(())
    }

    pub async fn b_resize_volume(&mut self, api: VolumeApi, id: &str, size: i64) -> Result<(), Status> {
        self.note(&format!("{}.ResizeVolume", api.name()), &[id, &size.to_string()]);
        let _: Answer<()> =
            volume_call!(self, api, resize_volume, ResizeVolumeRequest { volume_id: id.into(), size: size })?;
        Ok(())
    }

    /// VolumeStats: (free, used) bytes, as upstream's v1beta versions answer them.
    pub async fn b_volume_stats(&mut self, api: VolumeApi, id: &str) -> Result<(i64, i64), Status> {
        self.note(&format!("{}.VolumeStats", api.name()), &[id]);
        let a: Answer<(i64, i64)> = volume_call!(self, api, volume_stats, VolumeStatsRequest { volume_id: id.into() })?;
        Ok(a.0)
    }

    pub async fn b_volume_disk_number(&mut self, api: VolumeApi, id: &str) -> Result<i64, Status> {
        self.note(&format!("{}.GetVolumeDiskNumber", api.name()), &[id]);
        let a: Answer<i64> =
            volume_call!(self, api, get_volume_disk_number, VolumeDiskNumberRequest { volume_id: id.into() })?;
        Ok(a.0)
    }

    pub async fn b_volume_id_from_mount(&mut self, api: VolumeApi, mount: &str) -> Result<String, Status> {
        self.note(&format!("{}.GetVolumeIDFromMount", api.name()), &[mount]);
        let a: Answer<String> =
            volume_call!(self, api, get_volume_id_from_mount, VolumeIdFromMountRequest { mount: mount.into() })?;
        Ok(a.0)
    }

    /// WriteVolumeCache (v1beta2 only).
    pub async fn b2_write_volume_cache(&mut self, id: &str) -> Result<(), Status> {
        self.note("volume/v1beta2.WriteVolumeCache", &[id]);
        let req = v1beta2::WriteVolumeCacheRequest { volume_id: id.into() };
        self.clients()?.volume_v1beta2.write_volume_cache(req).await.map(drop)
    }

    // smb v1beta1

    pub async fn b1_new_smb_mapping(
        &mut self,
        remote: &str,
        local: &str,
        user: &str,
        password: &str,
    ) -> Result<(), Status> {
        self.note("smb/v1beta1.NewSmbGlobalMapping", &[remote, local, user]);
        let req = v1beta1::NewSmbGlobalMappingRequest {
            remote_path: remote.into(),
            local_path: local.into(),
            username: user.into(),
            password: password.into(),
        };
        self.clients()?.smb.new_smb_global_mapping(req).await.map(drop)
    }
}
