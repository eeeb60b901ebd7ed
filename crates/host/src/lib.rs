//! Host layer: the privileged work behind each API group, independent of gRPC and of API versions.
//!
//! Every group has one trait ([`DiskHost`], [`VolumeHost`], [`FilesystemHost`], [`SmbHost`],
//! [`IscsiHost`], [`SystemHost`]) whose methods take and return the version-less types of
//! [`types`]. The methods are synchronous: they do blocking system work, and the server runs
//! them on a blocking thread.
//!
//! The tree, by what a module depends on:
//! - the API, every OS: the traits here, [`types`], [`error`], [`paths`] (lexical path rules and
//!   the roots), [`services`] (service-control logic), [`formats`] (GPT, superblocks,
//!   mountinfo, SMBIOS);
//! - backends, peers of each other, each implementing the group traits itself:
//!   - `linux`: the real Linux host (built on Linux only);
//!   - [`windows`]: the Windows logic, built and tested on every OS against two platform traits,
//!     and `windows::platform`, the thin layer of real Win32/WMI calls (built on Windows only);
//!   - [`memory`]: a host kept in memory, for tests.
//!
//! [`native`] picks the real backend of the OS this is built for: the one place that does.

pub mod data_volume;
pub mod error;
pub mod formats;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod interlock;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod memory;
pub mod paths;
pub mod probes;
pub mod services;
pub mod smb;
#[cfg(test)]
mod testing;
pub mod types;
pub mod windows;

#[cfg(not(any(target_os = "linux", windows)))]
compile_error!("csi-proxy-host has native backends for Linux and Windows only");

/// The keyed lock and the poison-ignoring mutex lock every layer shares.
pub use csi_proxy_sync as sync;
pub use error::{Error, Result};

/// Names compared as Windows compares them (NTFS's upcase table, the service control manager):
/// character by character in upper case. A character whose upper case is several characters
/// (ß → SS) stays itself, so no two names match that Windows tells apart.
pub fn same_ignoring_case(a: &str, b: &str) -> bool {
    fn up(c: char) -> char {
        let mut u = c.to_uppercase();
        match (u.next(), u.next()) {
            (Some(one), None) => one,
            _ => c,
        }
    }
    a.chars().map(up).eq(b.chars().map(up))
}
use std::collections::BTreeMap;
use std::sync::Arc;
use types::*;

/// Whole-disk operations. Disks are named by their OS disk number.
///
/// In every group a method that serves an RPC has the RPC's name in snake case (`get_disk_stats`
/// for GetDiskStats), so that a search for either finds the other.
pub trait DiskHost: Send + Sync {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>>;
    fn partition_disk(&self, disk: u32) -> Result<()>;
    /// The host-wide part of a rescan: new disks and new sizes found (SCSI scans, the OS's
    /// storage cache). It runs holding no disk, so it must not change a disk's partition table:
    /// that is [`DiskHost::refresh_disk`], called afterwards for each of
    /// [`DiskHost::disks_to_refresh`] under that disk's own lock ([`rescan_and_refresh`] does
    /// the three in order, without the locks).
    fn rescan(&self) -> Result<()>;
    /// The disks whose partition tables a rescan re-reads (none where the OS does it itself).
    fn disks_to_refresh(&self) -> Result<Vec<u32>> {
        Ok(Vec::new())
    }
    /// Re-reads one disk's partition table after a rescan; nothing is written to the disk. A disk
    /// that is gone since it was listed, or that this process may not open, is skipped.
    fn refresh_disk(&self, disk: u32) -> Result<()> {
        let _ = disk;
        Ok(())
    }
    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>>;
    /// GetDiskStats: the disk's size in bytes.
    fn get_disk_stats(&self, disk: u32) -> Result<u64>;
    fn set_disk_state(&self, disk: u32, online: bool) -> Result<()>;
    fn get_disk_state(&self, disk: u32) -> Result<bool>;
    /// Dry-run of PartitionDisk: what it would do to `disk`, or the error it would answer, found
    /// by reading only (the checks the call makes before its first write, interlocks included).
    /// A backend that cannot tell refuses ([`no_plan`]): a dry run never falls back to the work.
    fn plan_partition_disk(&self, disk: u32) -> Result<String> {
        let _ = disk;
        Err(no_plan("PartitionDisk"))
    }
    /// Dry-run of SetDiskState, as [`Self::plan_partition_disk`].
    fn plan_set_disk_state(&self, disk: u32, online: bool) -> Result<String> {
        let _ = (disk, online);
        Err(no_plan("SetDiskState"))
    }
}

/// The answer of a dry run that a backend cannot plan: nothing is done.
pub fn no_plan(method: &str) -> Error {
    Error::precondition(format!("this host cannot plan {method} without doing it; nothing was done"))
}

/// A whole rescan without the server's disk locks (for tests and tools that have the host to
/// themselves): [`rescan_in_order`] with every step run here, at once.
pub fn rescan_and_refresh(host: &dyn DiskHost) -> Result<()> {
    use std::convert::Infallible;
    let steps = rescan_in_order(
        async { Ok::<_, Infallible>(host.rescan()) },
        async { Ok(host.disks_to_refresh()) },
        |disk| async move { Ok(host.refresh_disk(disk)) },
    );
    match sync::block_on(steps) {
        Ok(outcome) => outcome,
        Err(never) => match never {},
    }
}

/// The one order of a rescan's steps: the host-wide part ([`DiskHost::rescan`], its output
/// `T`), then the disks to refresh ([`DiskHost::disks_to_refresh`]), then each disk's refresh
/// ([`DiskHost::refresh_disk`]) in turn. A failing step does not stop the others; the outcome is
/// `T`, or the error of every failure ([`rescan_outcome`]). The caller wraps each step with where
/// it runs and what it holds (the server: a pool thread, that disk's lock for its refresh); a
/// wrapper's own failure `X` (the server's: the step panicked) ends the rescan there.
pub async fn rescan_in_order<T, X, F>(
    rescan: impl std::future::Future<Output = std::result::Result<Result<T>, X>>,
    disks: impl std::future::Future<Output = std::result::Result<Result<Vec<u32>>, X>>,
    mut refresh: impl FnMut(u32) -> F,
) -> std::result::Result<Result<T>, X>
where
    F: std::future::Future<Output = std::result::Result<Result<()>, X>>,
{
    let mut failed = Vec::new();
    let output = match rescan.await? {
        Ok(output) => Some(output),
        Err(e) => {
            failed.push(e);
            None
        }
    };
    match disks.await? {
        Ok(disks) => {
            for disk in disks {
                failed.extend(refresh(disk).await?.err());
            }
        }
        Err(e) => failed.push(e),
    }
    // `output` is None only when `failed` holds its error, so the outcome is that error.
    Ok(rescan_outcome(failed).and_then(|()| output.ok_or_else(|| Error::internal("rescan failed"))))
}

/// The outcome of a rescan from the failures of its steps: the one error as it is, or one that
/// names them all.
pub fn rescan_outcome(mut failed: Vec<Error>) -> Result<()> {
    match failed.len() {
        0 => Ok(()),
        1 => Err(failed.remove(0)),
        n => Err(Error::internal(format!(
            "rescan failed ({n} errors): {}",
            failed.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")
        ))),
    }
}

/// Volume operations. A volume ID is whatever the backend hands out in `list_volumes_on_disk`.
/// Target paths are contained by the backend as the filesystem group's paths are.
pub trait VolumeHost: Send + Sync {
    /// `partition == 0` means every partition of the disk.
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>>;
    fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()>;
    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()>;
    fn is_volume_formatted(&self, volume_id: &str) -> Result<bool>;
    fn format_volume(&self, volume_id: &str) -> Result<()>;
    /// `size_bytes == 0` means as large as the disk allows. `volume_id` may also be a disk
    /// number, standing for that disk's data volume ([`data_volume`]).
    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()>;
    fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats>;
    fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32>;
    /// Whether the volume calls find their volume again once they hold a lock of their own on
    /// the disk [`Self::get_disk_number_from_volume_id`] last answered for it, and follow it when
    /// it has moved (the Linux backend's disk `flock`, linux/block/lookup.rs). The server then
    /// looks a volume's disk up once, for its own lock, and not again once it holds it.
    fn finds_volumes_under_own_lock(&self) -> bool {
        false
    }
    fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String>;
    fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String>;
    /// WriteVolumeCache: flushes the volume's cached writes to the disk.
    fn write_volume_cache(&self, volume_id: &str) -> Result<()>;
    /// Dry-run of MountVolume, as [`DiskHost::plan_partition_disk`].
    fn plan_mount_volume(&self, volume_id: &str, target_path: &str) -> Result<String> {
        let _ = (volume_id, target_path);
        Err(no_plan("MountVolume"))
    }
    /// Dry-run of FormatVolume, as [`DiskHost::plan_partition_disk`].
    fn plan_format_volume(&self, volume_id: &str) -> Result<String> {
        let _ = volume_id;
        Err(no_plan("FormatVolume"))
    }
    /// Dry-run of ResizeVolume, as [`DiskHost::plan_partition_disk`].
    fn plan_resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<String> {
        let _ = (volume_id, size_bytes);
        Err(no_plan("ResizeVolume"))
    }
}

/// Directory and link operations. Paths come as the request gave them (the server refuses only
/// empty ones): each native backend checks their form ([`paths`]) and keeps them inside its roots
/// (`linux::fs`, [`windows::contain`]; ARCHITECTURE.md, "Containment"). The memory host has no
/// roots and takes any path.
pub trait FilesystemHost: Send + Sync {
    fn path_exists(&self, path: &str) -> Result<bool>;
    fn mkdir(&self, path: &str) -> Result<()>;
    fn rmdir(&self, path: &str, force: bool) -> Result<()>;
    fn rmdir_contents(&self, path: &str) -> Result<()>;
    /// Creates a link at `link` that points to `destination`.
    fn create_symlink(&self, destination: &str, link: &str) -> Result<()>;
    fn is_symlink(&self, path: &str) -> Result<bool>;
}

/// Host-wide SMB share mappings.
pub trait SmbHost: Send + Sync {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()>;
    fn remove_smb_global_mapping(&self, remote_path: &str) -> Result<()>;
}

/// iSCSI initiator.
pub trait IscsiHost: Send + Sync {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()>;
    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>>;
    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()>;
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>>;
    fn connect_target(&self, request: &ConnectTarget) -> Result<()>;
    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()>;
    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>>;
    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()>;
}

/// Machine identity and host services.
pub trait SystemHost: Send + Sync {
    fn get_bios_serial_number(&self) -> Result<String>;
    fn start_service(&self, name: &str) -> Result<()>;
    /// Without `force`, running dependents make the stop fail. With it they are stopped first;
    /// each must pass `may_stop` (the server's allow-list), checked before anything is stopped.
    fn stop_service(&self, name: &str, force: bool, may_stop: &dyn Fn(&str) -> bool) -> Result<()>;
    fn get_service(&self, name: &str) -> Result<ServiceInfo>;
}

/// Settings of the native backend that come from the command line.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Where filesystem paths (and mount targets) must stay: `-working-dir`s and `-kubelet-path`.
    pub roots: paths::Roots,
    /// `-linux-fs-type`: the filesystem FormatVolume creates on Linux.
    pub fs_type: FsType,
    /// `-linux-smb-dir`: where the Linux backend mounts SMB shares. Empty: not configured, and
    /// NewSmbGlobalMapping fails (FailedPrecondition).
    pub smb_dir: std::path::PathBuf,
    /// `-protected-disk`: disks no call may partition, format, resize or take offline, besides
    /// those the backend finds in use by the system ([`interlock`]).
    pub protected_disks: Vec<interlock::ProtectedDisk>,
}

/// Name of the OS the native backend serves, for error messages.
#[cfg(target_os = "linux")]
pub const OS: &str = "linux";
#[cfg(windows)]
pub const OS: &str = "windows";

/// How the native backend's service manager compares service names (for the server's
/// `-allowed-service` list): systemd's unit names exactly, the SCM's ignoring case.
#[cfg(target_os = "linux")]
pub const SAME_SERVICE_NAME: fn(&str, &str) -> bool = services::same_unit_name;
#[cfg(windows)]
pub const SAME_SERVICE_NAME: fn(&str, &str) -> bool = services::same_scm_name;

/// The real backend of this OS, every group.
pub fn native(config: Config) -> Hosts {
    #[cfg(target_os = "linux")]
    return linux::hosts(config);
    #[cfg(windows)]
    return windows::platform::hosts(config);
}

/// One implementation of every group, as the server consumes them.
#[derive(Clone)]
pub struct Hosts {
    pub disk: Arc<dyn DiskHost>,
    pub volume: Arc<dyn VolumeHost>,
    pub filesystem: Arc<dyn FilesystemHost>,
    pub smb: Arc<dyn SmbHost>,
    pub iscsi: Arc<dyn IscsiHost>,
    pub system: Arc<dyn SystemHost>,
}

impl Hosts {
    /// Every group served by one object, e.g. [`memory::MemoryHost`].
    pub fn from_one<H>(host: Arc<H>) -> Self
    where
        H: DiskHost + VolumeHost + FilesystemHost + SmbHost + IscsiHost + SystemHost + 'static,
    {
        Hosts {
            disk: host.clone(),
            volume: host.clone(),
            filesystem: host.clone(),
            smb: host.clone(),
            iscsi: host.clone(),
            system: host,
        }
    }
}
