//! The volume group on Windows: Win32 volume management and two volume I/O controls, with WMI
//! (`MSFT_Volume`, `MSFT_Partition`, `MSFT_Disk`) only for formatting and resizing, which have
//! no documented Win32 call.
//!
//! Volume IDs are `\\?\Volume{GUID}\` (upstream's `MSFT_Volume.UniqueId`). Every RPC checks the
//! ID's form before any host call; the trailing `\` may be left out and the hex digits may be of
//! any case. Semantics, where they differ from upstream (docs/upstream.md#volume, #idempotency) or from the
//! Linux backend (`sys::linux::block::volumes`):
//!
//! - **ListVolumesOnDisk**: every volume (FindFirstVolumeW) whose disk extents
//!   (IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS) touch the disk; with `partition > 0`, only the one
//!   whose IOCTL_DISK_GET_PARTITION_INFO_EX number is that (0 means every partition, as
//!   upstream's code). Sorted by partition number. Volumes that don't answer (CD-ROMs, media
//!   not ready) are skipped. An unknown disk gives an empty list, as upstream.
//! - **Target paths** (Mount, Unmount, GetVolumeIDFromTargetPath and the start of
//!   GetClosestVolumeIDFromTargetPath) may be rooted without a drive (`\var\lib\kubelet\…`, the
//!   staging paths the kubelet hands drivers, which several pass on unchanged): like Win32 and
//!   so upstream, we read them on the system drive ([`Containment::with_system_drive`]). They
//!   obey the filesystem group's containment
//!   ([`super::contain`]), which upstream does not apply here: lexically inside a root (by
//!   component, case-insensitively), then the target's parent is opened and held and its
//!   canonical path checked against the roots' canonical paths, so a junction on the way that
//!   leads out is refused (PermissionDenied); the target itself is opened relative to the held
//!   parent, a link there not followed, and held too ([`Held`]). Its place is the parent's
//!   canonical path plus its name (a mounted folder's own final path names the mounted volume,
//!   not the place); if it is a reparse point but not a volume mount point, where it leads must
//!   be inside too. Mount and Unmount refuse a root itself. The handles are held until the RPC
//!   is done, and the path-taking Win32 calls (SetVolumeMountPointW, DeleteVolumeMountPointW,
//!   GetVolumeNameForVolumeMountPointW, GetVolumePathNameW) get the held target's canonical
//!   path (the mount-point calls as the plain `C:\…\` they document, GetVolumePathNameW as
//!   `\\?\C:\…`): nothing on it can be renamed, removed or swapped for a link between the check
//!   and the call.
//! - **MountVolume**: the target must exist (NotFound) and be a directory; SetVolumeMountPointW
//!   wants it empty, and a link (a junction or symbolic link that is no mount point) is refused
//!   rather than handed to it. The same volume already mounted there is success (upstream's
//!   idempotent remount, but with the GUIDs compared case-insensitively, as Windows names them);
//!   another volume, or a non-empty directory, is FailedPrecondition. A volume may be mounted in
//!   several places, as Windows and upstream allow (Linux refuses a second place).
//! - **UnmountVolume**: flushes the volume (so an unknown volume is NotFound), then removes the
//!   mount point. Nothing mounted at the target, or no target: success (upstream errors; ours is
//!   idempotent, as on Linux). Another volume there: FailedPrecondition, left alone. The
//!   directory stays, as upstream.
//! - **IsVolumeFormatted**: GetVolumeInformationW's filesystem name; `RAW` or no recognised
//!   filesystem is false, any name is true (upstream: MSFT_Volume.FileSystemType ≠ Unknown).
//! - **FormatVolume**: NTFS, quick, through `MSFT_Volume.Format` with upstream's arguments. A
//!   volume that holds a filesystem is refused with FailedPrecondition (upstream formats with
//!   Force and loses the data), as on Linux.
//! - **ResizeVolume(size)**: the volume ID may also be a disk number, meaning that disk's data
//!   volume (the largest GPT basic data or MBR FAT/IFS partition's volume among the volumes
//!   ListVolumesOnDisk finds there; none, or a tie, is an error naming the disk and what is on
//!   it): azuredisk ≥ 1.32 sends one (`crate::data_volume`). The partition is found through Win32 (the volume's one extent and
//!   its partition number), then `MSFT_Partition.Resize`, which extends NTFS along with the
//!   partition, and `MSFT_Disk.Refresh`. Against the partition's current length P: `0` means
//!   as far as the free space after it goes (IOCTL_DISK_GET_DRIVE_LAYOUT_EX and the disk's
//!   length, the end on 1 MiB; upstream asks `MSFT_Partition.GetSupportedSize`, which fails
//!   when the defragmentation service is off, aws-ebs-csi-driver#2877); within 100 MiB of P either way is a no-op (upstream's rule,
//!   and what makes a repeated call idempotent); a shrink beyond that is FailedPrecondition
//!   (upstream answers success). A volume on several extents (spanned, striped, dynamic disks)
//!   is FailedPrecondition: there is no one partition to grow.
//! - **GetVolumeStats**: GetDiskFreeSpaceExW on the volume's GUID path, which works whether or
//!   not the volume is mounted anywhere (Linux requires a mount). A volume without a filesystem
//!   is FailedPrecondition.
//! - **GetDiskNumberFromVolumeID**: the disk of the volume's first extent.
//! - **GetVolumeIDFromTargetPath**: the target must be a reparse point (else NotFound, "not a
//!   mounted folder", as upstream); every "no such path" and "nothing mounted there" answer says
//!   `because it does not exist`, the words AWS EBS's driver matches ([`DOES_NOT_EXIST`]);
//!   its volume is GetVolumePathNameW's mount point (made `\\?\` and `\`-terminated,
//!   upstream's EnsureLongPath) through GetVolumeNameForVolumeMountPointW.
//!   The attribute alone can't tell a junction from a mounted folder (both carry
//!   IO_REPARSE_TAG_MOUNT_POINT): a link answers the volume it leads to, as upstream's.
//! - **GetClosestVolumeIDFromTargetPath**: the target is contained, as on Linux; then
//!   upstream's walk of at most 256 steps, up the held target's canonical path: a reparse point
//!   answering a volume is the answer, anything else moves to its parent, and the drive root's
//!   volume comes from GetVolumeNameForVolumeMountPointW (`\\?\C:\`), not upstream's
//!   `MSFT_Partition.DriveLetter` query. A path deeper than 256 names never reaches its root and
//!   is NotFound, as upstream.
//! - **WriteVolumeCache**: FlushFileBuffers on the volume.
//!
//! Opening a volume that does not exist fails with ERROR_FILE_NOT_FOUND (a GUID the mount
//! manager doesn't know), ERROR_PATH_NOT_FOUND or ERROR_INVALID_NAME; all three are NotFound
//! naming the volume.

use super::contain::{Containment, Held, Nt};
use super::disks::GPT_BASIC_DATA;
use super::extents::{
    self, IOCTL_DISK_GET_DRIVE_LAYOUT_EX, IOCTL_DISK_GET_PARTITION_INFO_EX, IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS,
};
use super::ioctl;
use super::wmi::{Namespace, Query, Row, Value, Wmi};
use super::{attr, code, failure as os, Access, Win32};
use crate::data_volume::{self, Candidate, DiskNumber};
use crate::error::DOES_NOT_EXIST;
use crate::interlock::{self, Action, ProtectedDisk};
use crate::paths::windows as wp;
use crate::types::VolumeStats;
use crate::{Error, Result, VolumeHost};
use std::fmt;
use std::io;
use std::sync::Arc;

#[cfg(test)]
mod tests;

/// Upstream's tolerance: a requested size within this of the partition's is no change.
pub const RESIZE_TOLERANCE: u64 = 100 << 20;
/// Where Windows puts partition boundaries.
const PARTITION_ALIGNMENT: u64 = 1 << 20;
/// The size of a GPT partition entry Windows writes (the header's SizeOfPartitionEntry).
const GPT_ENTRY_SIZE: u64 = 128;
/// Steps of GetClosestVolumeIDFromTargetPath's walk (upstream's bound).
pub const MAX_WALK: usize = 256;
/// Volumes looked at by ListVolumesOnDisk; a host has far fewer.
pub const MAX_VOLUMES: usize = 4096;

/// The form every volume ID must have, for messages.
const ID_FORM: &str = r"\\?\Volume{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}\";

pub struct Volumes<N: Nt> {
    win32: Arc<dyn Win32>,
    wmi: Arc<dyn Wmi>,
    contain: Containment<N>,
    /// `-protected-disk` ([`crate::interlock`]).
    protected: Vec<ProtectedDisk>,
}

/// A volume ID whose form was checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeId {
    /// `\\?\Volume{…}\`, as given plus the trailing `\` when it was left out.
    pub id: String,
    /// The same without the trailing `\`: the device, for I/O controls and flushing.
    pub device: String,
}

impl VolumeId {
    /// Accepts `\\?\Volume{GUID}\` and `\\?\Volume{GUID}`, hex digits in any case.
    pub fn parse(id: &str) -> Result<Self> {
        let device = id.strip_suffix('\\').unwrap_or(id);
        match device.strip_prefix(r"\\?\") {
            Some(name) if wp::is_volume_guid(name) => {
                Ok(VolumeId { id: format!(r"{device}\"), device: device.to_owned() })
            }
            _ => Err(Error::invalid(format!("volume ID {} is not a volume GUID path; expected {ID_FORM}", shown(id)))),
        }
    }

    /// Whether `other` (an ID as Windows answered it) names this volume: Windows compares
    /// volume names case-insensitively.
    fn is(&self, other: &str) -> bool {
        VolumeId::parse(other).is_ok_and(|o| o.device.eq_ignore_ascii_case(&self.device))
    }
}

impl fmt::Display for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// A value as sent, escaped only when it holds control characters.
fn shown(s: &str) -> String {
    if s.chars().any(char::is_control) {
        format!("{s:?}")
    } else {
        s.to_owned()
    }
}

fn raw(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
}

/// What opening a missing volume or path reports.
fn is_not_found(e: &io::Error) -> bool {
    matches!(raw(e), Some(code::ERROR_FILE_NOT_FOUND | code::ERROR_PATH_NOT_FOUND | code::ERROR_INVALID_NAME))
}

/// What GetVolumeNameForVolumeMountPointW reports for a directory that is no volume mount point.
/// Its page lists no codes; these are the System Error Codes that say so: no reparse point at
/// all (4390), a reparse point of another kind (a symbolic link: ERROR_REPARSE_TAG_MISMATCH,
/// 4394; ERROR_REPARSE_TAG_INVALID, 4393) or data that names no volume (a junction:
/// ERROR_INVALID_REPARSE_DATA, 4392; ERROR_INVALID_PARAMETER, 87), and nothing there (2, 3, 123).
fn is_not_mount_point(e: &io::Error) -> bool {
    matches!(
        raw(e),
        Some(
            code::ERROR_NOT_A_REPARSE_POINT
                | code::ERROR_INVALID_REPARSE_DATA
                | code::ERROR_REPARSE_TAG_INVALID
                | code::ERROR_REPARSE_TAG_MISMATCH
                | code::ERROR_INVALID_PARAMETER
        )
    ) || is_not_found(e)
}

/// A failure of a call on a volume: a missing volume is NotFound naming it.
fn on_volume(v: &VolumeId, doing: &str, e: io::Error) -> Error {
    if is_not_found(&e) {
        Error::not_found(format!("volume {v} not found ({doing}: {e})"))
    } else {
        os(format!("{doing} volume {v}"), e)
    }
}

/// A non-zero ReturnValue of a Storage method is an error.
fn method_failed(class: &str, method: &str, target: &str, out: &Row) -> Result<()> {
    match out.return_value()? {
        0 => Ok(()),
        rv => Err(super::disks::storage_method_error(class, method, target, rv)),
    }
}

fn with_slash(path: &str) -> String {
    if path.ends_with('\\') {
        path.to_owned()
    } else {
        format!(r"{path}\")
    }
}

/// Upstream's EnsureLongPath: `\\?\` in front unless already there, `\` at the end.
fn long_path(path: &str) -> String {
    let p = if path.starts_with(r"\\?\") { path.to_owned() } else { format!(r"\\?\{path}") };
    with_slash(&p)
}

/// A target path that passed containment, held until it is dropped.
struct Target<H> {
    held: Held<H>,
    /// The path as given, normalised (drive upper case, no doubled or trailing `\`), for logs.
    shown: String,
    /// The volume mounted at it, when it is a volume mount point.
    mounted: Option<String>,
}

impl<H> Target<H> {
    fn attrs(&self) -> Option<u32> {
        self.held.attrs()
    }

    /// The held target's canonical place for the mount-point calls: `C:\…\`, as their
    /// documentation spells a mounted folder and upstream passes it ([`Held::mount_point_dir`]).
    fn dir(&self) -> String {
        self.held.mount_point_dir()
    }
}

/// A volume found on a disk by [`Volumes::on_disk`].
struct OnDisk {
    /// As FindFirstVolumeW named it.
    name: String,
    id: VolumeId,
    /// How many disk extents it has (on any disk).
    extents: usize,
    partition: Option<extents::PartitionInfo>,
}

impl OnDisk {
    /// What the data-volume rule needs of it: a data partition is a GPT basic data partition,
    /// or an MBR partition of a FAT or IFS (NTFS, exFAT) type, that is the volume's only extent.
    fn candidate(&self) -> Candidate {
        use extents::PartitionStyle as S;
        let (number, size) = self.partition.as_ref().map_or((0, 0), |p| (p.number, p.length as u64));
        let (kind, data) = match (&self.partition, self.extents) {
            (_, n) if n > 1 => (format!("spans {n} extents"), false),
            (None, _) => ("no partition information".to_owned(), false),
            (Some(p), _) => match &p.style {
                S::Gpt { partition_type, .. } if partition_type == GPT_BASIC_DATA => {
                    ("GPT basic data".to_owned(), true)
                }
                S::Gpt { partition_type, .. } => (format!("GPT type {partition_type}"), false),
                S::Mbr { partition_type } => {
                    (format!("MBR type {partition_type:#04x}"), MBR_DATA.contains(partition_type))
                }
                S::Raw => ("no partition table".to_owned(), false),
            },
        };
        Candidate { id: self.id.id.clone(), partition: number, kind, data, size }
    }
}

/// MBR partition types that hold a filesystem Windows mounts: FAT12, FAT16 (< 32 MiB), FAT16,
/// IFS (NTFS, exFAT), FAT32, FAT32 (LBA), FAT16 (LBA).
const MBR_DATA: [u8; 7] = [0x01, 0x04, 0x06, 0x07, 0x0b, 0x0c, 0x0e];

impl<N: Nt> Volumes<N> {
    /// `contain` checks and holds the target paths (the roots are its).
    pub fn new(win32: Arc<dyn Win32>, wmi: Arc<dyn Wmi>, contain: Containment<N>) -> Self {
        Volumes { win32, wmi, contain, protected: Vec::new() }
    }

    /// This group with `-protected-disk`'s disks.
    pub fn protecting(mut self, disks: Vec<ProtectedDisk>) -> Self {
        self.protected = disks;
        self
    }

    /// What MountVolume refuses before it mounts, by reading only: the volume and the held
    /// target, or `None` when the volume is mounted there already.
    fn mount_checks(&self, volume_id: &str, target_path: &str) -> Result<Option<(VolumeId, Target<N::Handle>)>> {
        let v = self.volume_id(volume_id, DiskNumber::Refused)?;
        let t = self.target(target_path, false)?;
        let Some(attrs) = t.attrs() else {
            return Err(Error::not_found(format!(
                "target {target_path} does not exist; expected an empty directory to mount volume {v} at"
            )));
        };
        if attrs & attr::DIRECTORY == 0 {
            return Err(Error::precondition(format!(
                "target {target_path} is not a directory; expected an empty directory to mount volume {v} at"
            )));
        }
        match &t.mounted {
            Some(m) if v.is(m) => {
                tracing::debug!(volume = %v, target = %t.shown, "already mounted there");
                Ok(None)
            }
            Some(m) => Err(mounted_over(target_path, m, &v)),
            None if t.held.is_reparse() => Err(Error::precondition(format!(
                "target {target_path} is a link, not a directory; expected an empty directory to mount volume {v} at"
            ))),
            None => Ok(Some((v, t))),
        }
    }

    /// What FormatVolume refuses before it formats, by reading only; the volume to format.
    fn format_checks(&self, volume_id: &str) -> Result<VolumeId> {
        let v = self.volume_id(volume_id, DiskNumber::Refused)?;
        if let Some(fs) = self.filesystem(&v)? {
            return Err(Error::precondition(format!(
                "volume {v} already holds a {fs} filesystem; refusing to format it, which would destroy its data"
            )));
        }
        self.interlock(&v, self.disk_of(&v)?, Action::FormatVolume)?;
        Ok(v)
    }

    /// What ResizeVolume refuses before it resizes, by reading only, and the sizes it compares.
    fn resize_checks(&self, volume_id: &str, size_bytes: u64) -> Result<Grow> {
        let v = self.volume_id(volume_id, DiskNumber::DataVolume)?;
        let disk = self.disk_of(&v)?;
        self.interlock(&v, disk, Action::ResizeVolume)?;
        let info = self.partition_info(&v)?;
        if info.number == 0 {
            return Err(Error::precondition(format!(
                "volume {v} is on disk {disk} without a partition table; expected a partition to resize"
            )));
        }
        let current = info.length as u64;
        let target = match size_bytes {
            0 => self.largest_size(&v, disk, &info)?,
            n => n,
        };
        if target < current && target.abs_diff(current) > RESIZE_TOLERANCE {
            return Err(Error::precondition(format!(
                "volume {v}: resizing partition {} of disk {disk} from {current} to {target} bytes would shrink it; \
                 expected at least {} bytes (shrinking is not supported)",
                info.number,
                current - RESIZE_TOLERANCE
            )));
        }
        Ok(Grow { v, disk, partition: info.number, current, target })
    }

    /// The interlocks ([`super::interlock`]) for `action` on volume `v` of disk `disk`: the
    /// disk's, then the volume's mount points, each of which must be inside the working
    /// directories (a drive letter never is).
    fn interlock(&self, v: &VolumeId, disk: u32, action: Action) -> Result<()> {
        let what = format!("volume {v} (on disk {disk})");
        super::interlock::check_disk(&*self.wmi, &self.protected, disk, action, &what)?;
        let mounted = self.win32.mount_points_of(&v.id).map_err(|e| on_volume(v, "listing the mount points of", e))?;
        if let Some(mp) = mounted.iter().find(|mp| self.contain.lexical(mp.trim_end_matches('\\')).is_err()) {
            let why = format!(
                "it is mounted at {}, outside the working directories {}",
                crate::error::clip(mp),
                self.contain.roots()
            );
            return Err(interlock::refusal(action, &what, &why));
        }
        Ok(())
    }

    /// The one disk a volume is on, for the calls that change it.
    fn disk_of(&self, v: &VolumeId) -> Result<u32> {
        match self.extents(v)?.as_slice() {
            [(disk, _, _)] => Ok(*disk),
            [] => Err(Error::precondition(format!("volume {v} has no disk extents, so no partition to change"))),
            many => Err(Error::precondition(format!(
                "volume {v} spans {} extents (a spanned, striped or dynamic volume); expected one partition",
                many.len()
            ))),
        }
    }

    /// The extents of a volume, as (disk, offset, length).
    fn extents(&self, v: &VolumeId) -> Result<Vec<extents::DiskExtent>> {
        let buf = (self.win32.ioctl(&v.device, IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS, &[], Access::Query))
            .map_err(|e| on_volume(v, "reading the disk extents of", e))?;
        extents::parse_disk_extents(&buf).map_err(|e| Error::internal(format!("volume {v}: {e}")))
    }

    fn partition_info(&self, v: &VolumeId) -> Result<extents::PartitionInfo> {
        let buf = (self.win32.ioctl(&v.device, IOCTL_DISK_GET_PARTITION_INFO_EX, &[], Access::Query))
            .map_err(|e| on_volume(v, "reading the partition of", e))?;
        extents::parse_partition_info(&buf).map_err(|e| Error::internal(format!("volume {v}: {e}")))
    }

    /// The volume's filesystem name; `None` when it has none (RAW).
    fn filesystem(&self, v: &VolumeId) -> Result<Option<String>> {
        match self.win32.filesystem_name(&v.id) {
            Ok(name) if name.is_empty() || name.eq_ignore_ascii_case("RAW") => Ok(None),
            Ok(name) => Ok(Some(name)),
            Err(e) if raw(&e) == Some(code::ERROR_UNRECOGNIZED_VOLUME) => Ok(None),
            Err(e) => Err(on_volume(v, "reading the filesystem of", e)),
        }
    }

    /// The volume a mount point answers, its form checked.
    fn volume_at_mount_point(&self, mount_point: &str) -> io::Result<Result<String>> {
        let name = self.win32.volume_name_for_mount_point(mount_point)?;
        Ok(match VolumeId::parse(&name) {
            Ok(v) => Ok(v.id),
            Err(_) => Err(Error::internal(format!(
                "GetVolumeNameForVolumeMountPointW({mount_point}) answered {}; expected {ID_FORM}",
                shown(&name)
            ))),
        })
    }

    /// Upstream's getTarget: the volume holding `path` by its mount point. NotFound when
    /// `path` leads to no mount point.
    fn volume_holding(&self, path: &str) -> Result<String> {
        let mount_point =
            self.win32.volume_path_name(path).map_err(|e| os(format!("finding the mount point of {path}"), e))?;
        let mount_point = long_path(&mount_point);
        match self.volume_at_mount_point(&mount_point) {
            Ok(found) => found,
            Err(e) if is_not_mount_point(&e) => Err(Error::not_found(format!(
                "{path} is not a mounted folder: the volume mount point {mount_point} cannot be read {DOES_NOT_EXIST} ({e})"
            ))),
            Err(e) => Err(os(format!("reading the volume mounted at {mount_point}"), e)),
        }
    }

    /// Checks `target` against the roots (see the module comment), holds it and looks at what
    /// is there. `allow_root`: whether a root itself is an acceptable target.
    fn target(&self, target: &str, allow_root: bool) -> Result<Target<N::Handle>> {
        // A path rooted without a drive is where Win32 (and so upstream) puts it.
        let resolved = self.contain.with_system_drive(target)?;
        let target = resolved.as_ref();
        let roots = self.contain.roots();
        let refuse_root = || {
            Error::denied(format!(
                "path {target} is one of the working directories {roots} itself; expected a directory below one"
            ))
        };
        // By name first: refused before any call.
        let lexical = self.contain.lexical(target)?;
        if !allow_root && lexical.is_root {
            return Err(refuse_root());
        }
        let held = self.contain.hold(target)?;
        let mut t = Target { held, shown: lexical.parsed.to_string(), mounted: None };
        if t.attrs().is_none() {
            return Ok(t);
        }
        let check = |canonical: &[String]| -> Result<()> {
            if !t.held.at.inside(canonical) {
                return Err(roots.outside(target, Some(&wp::display(canonical))));
            }
            if !allow_root && t.held.at.is_root(canonical) {
                return Err(refuse_root());
            }
            Ok(())
        };
        // Where it is: the held parent's canonical path and its name.
        check(&t.held.canonical())?;
        if !t.held.is_reparse() {
            return Ok(t);
        }
        // A reparse point: what it is.
        let mounted = match self.volume_at_mount_point(&t.dir()) {
            Ok(found) => Some(found?),
            Err(e) if is_not_mount_point(&e) => None,
            Err(e) => return Err(os(format!("reading the volume mounted at {target}"), e)),
        };
        if mounted.is_none() {
            // Some other link: where it leads must be inside too.
            check(&self.contain.follow(&t.held, target)?)?;
        }
        t.mounted = mounted;
        Ok(t)
    }

    /// Every volume whose disk extents touch `disk`, sorted by partition number (volumes without
    /// one last). Volumes that don't answer (CD-ROMs, media not ready) are skipped.
    fn on_disk(&self, disk: u32) -> Result<Vec<OnDisk>> {
        let all = self.win32.volumes().map_err(|e| os("listing the volumes", e))?;
        if all.len() > MAX_VOLUMES {
            tracing::warn!(count = all.len(), "more volumes than {MAX_VOLUMES}; looking at the first {MAX_VOLUMES}");
        }
        let mut found = Vec::new();
        for name in all.into_iter().take(MAX_VOLUMES) {
            let Ok(v) = VolumeId::parse(&name) else {
                tracing::debug!(volume = %shown(&name), "not a volume GUID path; skipped");
                continue;
            };
            let extents = match self.extents(&v) {
                Ok(list) if list.iter().any(|(d, _, _)| *d == disk) => list.len(),
                Ok(_) => continue,
                Err(e) => {
                    tracing::debug!(volume = %v, error = %e, "no disk extents; skipped");
                    continue;
                }
            };
            let partition = match self.partition_info(&v) {
                Ok(info) => Some(info),
                Err(e) => {
                    tracing::debug!(volume = %v, error = %e, "no partition information");
                    None
                }
            };
            found.push(OnDisk { name, id: v, extents, partition });
        }
        found.sort_by_key(|o| {
            let n = o.partition.as_ref().map(|p| p.number);
            (n.is_none(), n, o.name.clone())
        });
        Ok(found)
    }

    /// The one way a request's volume ID becomes a volume: its form checked, or, where `by_disk`
    /// allows it, a disk number resolved to that disk's data volume ([`data_volume`]).
    fn volume_id(&self, id: &str, by_disk: DiskNumber) -> Result<VolumeId> {
        let disk = match (by_disk, data_volume::disk_number_in(id)) {
            (DiskNumber::DataVolume, Some(disk)) => disk,
            _ => return VolumeId::parse(id),
        };
        let found: Vec<Candidate> = self.on_disk(disk)?.iter().map(OnDisk::candidate).collect();
        VolumeId::parse(&data_volume::data_volume(disk, &found)?)
    }

    /// The largest size the volume's partition can grow to: up to the next partition on the disk
    /// or the end of the disk's usable area, the end on a 1 MiB boundary (as Windows aligns
    /// partitions); never less than it is. What MSFT_Partition.GetSupportedSize's SizeMax says,
    /// read from the disk's table and length instead: GetSupportedSize goes through the
    /// defragmentation service and fails (StorageWMI 4) where that is disabled or busy, on every
    /// retry (aws-ebs-csi-driver#2877). The Linux backend grows over the same free extent.
    fn largest_size(&self, v: &VolumeId, disk: u32, info: &extents::PartitionInfo) -> Result<u64> {
        let drive = format!(r"\\.\PhysicalDrive{disk}");
        let read = |code: u32, name: &str| {
            (self.win32.ioctl(&drive, code, &[], Access::Query))
                .map_err(|e| os(format!("{name} on disk {disk} (the disk of volume {v})"), e))
        };
        let layout =
            extents::parse_drive_layout(&read(IOCTL_DISK_GET_DRIVE_LAYOUT_EX, "IOCTL_DISK_GET_DRIVE_LAYOUT_EX")?)
                .map_err(|e| Error::internal(format!("disk {disk}: {e}")))?;
        let geometry = read(ioctl::IOCTL_DISK_GET_DRIVE_GEOMETRY_EX, "IOCTL_DISK_GET_DRIVE_GEOMETRY_EX")?;
        let (length, sector) = (ioctl::disk_size(&geometry)?, u64::from(ioctl::bytes_per_sector(&geometry)?));
        let (start, current) = (info.starting_offset as u64, info.length as u64);
        let end = start + current;
        let mut limit = match layout.gpt_usable {
            // The table's usable area, or, on a disk that grew since the table was written (its
            // backup still at the old end), the area it has once the backup entry array and
            // header sit at the disk's end, where MSFT_Partition.Resize moves them.
            Some((first, usable, entries)) => {
                let array = (u64::from(entries) * GPT_ENTRY_SIZE).div_ceil(sector) * sector;
                ((first + usable) as u64).max(length.saturating_sub(array + sector))
            }
            // MBR addresses sectors with 32 bits.
            None => length.min(sector << 32),
        };
        for p in layout.partitions.iter().filter(|p| p.length > 0 && p.starting_offset as u64 != start) {
            let (p_start, p_end) = (p.starting_offset as u64, (p.starting_offset + p.length) as u64);
            if p_start >= end {
                // A partition after this one.
                limit = limit.min(p_start);
            } else if p_start <= start && p_end >= end {
                // The extended partition holding this logical one.
                limit = limit.min(p_end);
            }
        }
        let largest = (limit / PARTITION_ALIGNMENT * PARTITION_ALIGNMENT).saturating_sub(start).max(current);
        tracing::debug!(volume = %v, disk, current, largest, "the partition's largest size, from the disk's table");
        Ok(largest)
    }

    fn partition_row(&self, v: &VolumeId, disk: u32, number: u32) -> Result<Row> {
        let q = Query::select(Namespace::Storage, "MSFT_Partition", &["Size"])
            .eq("DiskNumber", disk)
            .eq("PartitionNumber", number);
        self.wmi.query(&q)?.into_iter().next().ok_or_else(|| {
            Error::not_found(format!("volume {v}: partition {number} of disk {disk} is not in MSFT_Partition"))
        })
    }
}

/// MountVolume's refusal of `target_path`, where volume `m` is mounted, for volume `v`.
fn mounted_over(target_path: &str, m: &str, v: &VolumeId) -> Error {
    Error::precondition(format!("{target_path} has volume {m} mounted; refusing to mount volume {v} over it"))
}

/// What [`Volumes::resize_checks`] found: the volume, its disk and partition number, the
/// partition's size and the size asked for (the largest possible for 0).
struct Grow {
    v: VolumeId,
    disk: u32,
    partition: u32,
    current: u64,
    target: u64,
}

impl<N: Nt> VolumeHost for Volumes<N> {
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>> {
        Ok(self
            .on_disk(disk)?
            .into_iter()
            .filter(|o| partition == 0 || o.partition.as_ref().map(|p| p.number) == Some(partition))
            .map(|o| o.name)
            .collect())
    }

    fn plan_mount_volume(&self, volume_id: &str, target_path: &str) -> Result<String> {
        Ok(match self.mount_checks(volume_id, target_path)? {
            None => format!("volume {volume_id} is already mounted at {target_path}: nothing would change"),
            Some((v, t)) => {
                format!("would mount volume {v} at {} (SetVolumeMountPointW; the folder must be empty then)", t.shown)
            }
        })
    }

    fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        let Some((v, t)) = self.mount_checks(volume_id, target_path)? else { return Ok(()) };
        let other = |m: &str| mounted_over(target_path, m, &v);
        // The held target's canonical path: what was checked is what gets mounted on.
        let dir = t.dir();
        match self.win32.set_mount_point(&dir, &v.id) {
            Ok(()) => {
                tracing::info!(volume = %v, target = %t.shown, "volume mounted");
                Ok(())
            }
            Err(e) if raw(&e) == Some(code::ERROR_DIR_NOT_EMPTY) => match self.volume_at_mount_point(&dir) {
                Ok(found) => match found? {
                    m if v.is(&m) => Ok(()),
                    m => Err(other(&m)),
                },
                Err(e) if is_not_mount_point(&e) => Err(Error::precondition(format!(
                    "target {target_path} is a directory that is not empty; expected an empty directory to mount volume {v} at"
                ))),
                Err(e) => Err(os(format!("reading the volume mounted at {target_path}"), e)),
            },
            Err(e) => Err(on_volume(&v, &format!("mounting at {target_path}"), e)),
        }
    }

    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        let v = self.volume_id(volume_id, DiskNumber::Refused)?;
        let t = self.target(target_path, false)?;
        self.win32.flush(&v.device).map_err(|e| on_volume(&v, "flushing", e))?;
        match &t.mounted {
            None => {
                tracing::debug!(volume = %v, target = %t.shown, "nothing mounted there; nothing to unmount");
                Ok(())
            }
            Some(m) if !v.is(m) => {
                Err(Error::precondition(format!("{target_path} has volume {m} mounted, not volume {v}; left alone")))
            }
            Some(_) => {
                let dir = t.dir();
                match self.win32.delete_mount_point(&dir) {
                    Ok(()) => {
                        tracing::info!(volume = %v, target = %t.shown, "volume unmounted");
                        Ok(())
                    }
                    Err(e) => Err(os(format!("removing the mount point {target_path} of volume {v}"), e)),
                }
            }
        }
    }

    fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        let v = self.volume_id(volume_id, DiskNumber::Refused)?;
        Ok(self.filesystem(&v)?.is_some())
    }

    fn format_volume(&self, volume_id: &str) -> Result<()> {
        let v = self.format_checks(volume_id)?;
        let q = Query::select(Namespace::Storage, "MSFT_Volume", &["UniqueId", "FileSystemType"])
            .eq("UniqueId", v.id.as_str());
        let row = (self.wmi.query(&q)?.into_iter().next())
            .ok_or_else(|| Error::not_found(format!("volume {v} not found in MSFT_Volume")))?;
        // Upstream's arguments; the others (allocation unit size, compression, short names,
        // integrity streams, large FRS, heat gathering) are left to the provider's defaults.
        let args = [
            ("FileSystem", Value::from("NTFS")),
            ("FileSystemLabel", Value::from("")),
            ("Full", Value::Bool(false)),
            ("Force", Value::Bool(true)),
        ];
        let out = self.wmi.call(Namespace::Storage, &row.path, "Format", &args)?;
        method_failed("MSFT_Volume", "Format", &v.id, &out)?;
        if self.filesystem(&v)?.is_none() {
            return Err(Error::internal(format!(
                "volume {v} still holds no filesystem after MSFT_Volume.Format succeeded"
            )));
        }
        tracing::info!(volume = %v, "volume formatted with NTFS");
        Ok(())
    }

    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        let Grow { v, disk, partition, current, target } = self.resize_checks(volume_id, size_bytes)?;
        if target.abs_diff(current) <= RESIZE_TOLERANCE {
            tracing::debug!(volume = %v, current, target, "within 100 MiB of the partition's size; nothing to do");
            return Ok(());
        }
        let row = self.partition_row(&v, disk, partition)?;
        let out = self.wmi.call(Namespace::Storage, &row.path, "Resize", &[("Size", Value::U64(target))])?;
        method_failed("MSFT_Partition", "Resize", &row.path, &out)?;
        let done = [format!("partition {partition} of disk {disk} was resized from {current} to {target} bytes")];
        let refresh = || -> Result<()> {
            let q = Query::select(Namespace::Storage, "MSFT_Disk", &["Number"]).eq("Number", disk);
            let disk_row = (self.wmi.query(&q)?.into_iter().next())
                .ok_or_else(|| Error::not_found(format!("disk {disk} of volume {v} is not in MSFT_Disk")))?;
            let out = self.wmi.call(Namespace::Storage, &disk_row.path, "Refresh", &[])?;
            method_failed("MSFT_Disk", "Refresh", &disk_row.path, &out)
        };
        refresh().map_err(|e| crate::error::after_changes(e, &done))?;
        tracing::info!(volume = %v, from = current, to = target, "volume resized");
        Ok(())
    }

    fn plan_format_volume(&self, volume_id: &str) -> Result<String> {
        let v = self.format_checks(volume_id)?;
        Ok(format!("would format volume {v} with NTFS (MSFT_Volume.Format, quick, no label)"))
    }

    fn plan_resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<String> {
        let Grow { v, disk, partition, current, target } = self.resize_checks(volume_id, size_bytes)?;
        Ok(if target.abs_diff(current) <= RESIZE_TOLERANCE {
            format!("partition {partition} of disk {disk} (volume {v}) has {current} bytes, within 100 MiB of {target}: nothing would change")
        } else {
            format!("would resize partition {partition} of disk {disk} (volume {v}) from {current} to {target} bytes (MSFT_Partition.Resize), then refresh the disk")
        })
    }

    fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        let v = self.volume_id(volume_id, DiskNumber::Refused)?;
        let (total, free) = self.win32.free_space(&v.id).map_err(|e| {
            if raw(&e) == Some(code::ERROR_UNRECOGNIZED_VOLUME) {
                Error::precondition(format!("volume {v} holds no filesystem; expected a formatted volume"))
            } else {
                on_volume(&v, "reading the free space of", e)
            }
        })?;
        let used = total.checked_sub(free).ok_or_else(|| {
            Error::internal(format!("volume {v}: {free} bytes free of {total}; expected no more free than total"))
        })?;
        Ok(VolumeStats { total_bytes: total, used_bytes: used })
    }

    fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32> {
        let v = self.volume_id(volume_id, DiskNumber::Refused)?;
        match self.extents(&v)?.first() {
            Some((disk, _, _)) => Ok(*disk),
            // The volume is there (its device answered), it just isn't on a disk: not NotFound.
            None => Err(Error::precondition(format!("volume {v} has no disk extents, so it is on no disk"))),
        }
    }

    fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        let t = self.target(target_path, true)?;
        match t.attrs() {
            None => Err(Error::not_found(format!("cannot read the volume mounted at {target_path} {DOES_NOT_EXIST}"))),
            Some(a) if a & attr::REPARSE_POINT == 0 => Err(Error::not_found(format!(
                "{target_path} is not a mounted folder: the volume mount point cannot be read {DOES_NOT_EXIST}"
            ))),
            Some(_) => self.volume_holding(&t.held.verbatim()),
        }
    }

    fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        let t = self.target(target_path, true)?;
        let Some(mut attrs) = t.attrs() else {
            return Err(Error::not_found(format!("cannot find the volume of {target_path} {DOES_NOT_EXIST}")));
        };
        // Up the held target's canonical path: no link is left on it, and none of it can be
        // renamed while the target is held.
        let mut path = t.held.canonical();
        for step in 0..MAX_WALK {
            let (at, shown) = (wp::verbatim(&path), wp::display(&path));
            if step > 0 {
                attrs = (self.win32.attributes(&at))
                    .map_err(|e| os(format!("reading the attributes of {shown} (for {target_path})"), e))?
                    .ok_or_else(|| Error::not_found(format!("{shown}, a parent of {target_path}, does not exist")))?;
            }
            if attrs & attr::REPARSE_POINT != 0 {
                match self.volume_holding(&at) {
                    Ok(v) => return Ok(v),
                    // A link that leads to no mount point: go on upwards.
                    Err(Error::NotFound(why)) => tracing::debug!(path = %shown, %why, "not a mounted folder"),
                    Err(e) => return Err(e),
                }
            }
            if path.len() == 1 {
                // The drive itself, as `C:\`: a drive letter is no link anyone can swap, and
                // GetVolumeNameForVolumeMountPointW is documented for that form (Wine refuses
                // `\\?\C:\`).
                let root = with_slash(&shown);
                return match self.volume_at_mount_point(&root) {
                    Ok(found) => found,
                    Err(e) => Err(os(format!("reading the volume of drive {shown} (for {target_path})"), e)),
                };
            }
            path.pop();
        }
        Err(Error::not_found(format!(
            "no volume found for {target_path} within {MAX_WALK} steps up from it; expected a mounted folder or a drive root"
        )))
    }

    fn write_volume_cache(&self, volume_id: &str) -> Result<()> {
        let v = self.volume_id(volume_id, DiskNumber::Refused)?;
        self.win32.flush(&v.device).map_err(|e| on_volume(&v, "flushing", e))
    }
}
