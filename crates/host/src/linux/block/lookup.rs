//! Volume IDs and finding a volume: which disk's GPT has the partition GUID, with a hint of
//! where each GUID was last seen, and the volume resolved again once its disk is locked.
//!
//! - **Volume ID**: `\\?\Volume{<GPT partition GUID, lower case>}\`, upstream's shape. The GUID is
//!   in the table, so the ID survives reboots and rescans and is found by reading the tables of
//!   the disks. Partitions of MBR disks are not volumes here. An ID found on two disks (a cloned
//!   disk) is refused rather than guessed, whichever disk was listed last.

use super::disklock::{DiskLock, Lock};
use super::table::{BASIC_DATA, LINUX_FS};
use super::{Block, Disk, Volume};
use crate::data_volume::{self, Candidate, DiskNumber};
use crate::error::MOVED_TRIES;
use crate::formats::gpt::{Entry, Guid};
use crate::{Error, Result};
use std::time::{Duration, Instant};

const ID_PREFIX: &str = r"\\?\Volume{";
const ID_SUFFIX: &str = r"}\";

/// The volume ID of the GPT partition with this unique GUID.
pub(crate) fn volume_id(guid: &Guid) -> String {
    format!("{ID_PREFIX}{guid}{ID_SUFFIX}")
}

/// The GUID in a volume ID; InvalidArgument naming it and the expected form otherwise. Hex digits
/// may be of either case (Windows compares volume IDs without case).
pub(crate) fn parse_volume_id(id: &str) -> Result<Guid> {
    id.strip_prefix(ID_PREFIX).and_then(|rest| rest.strip_suffix(ID_SUFFIX)).and_then(Guid::parse).ok_or_else(|| {
        Error::invalid(format!(
            "volume ID {id:?} is malformed: expected \\\\?\\Volume{{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}}\\ \
             (a GPT partition GUID, as ListVolumesOnDisk returns)"
        ))
    })
}

/// Where a volume GUID was last seen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Seen {
    On(u32),
    /// On more than one disk (a cloned disk): no hint, every lookup reads every disk (and
    /// refuses while the GUID is on several), until a lookup finds it on one disk only.
    Several,
}

/// Which disk each volume GUID was last seen on ([`Block::seen`]). A lookup tries that disk
/// first instead of reading the table of every disk: a disk nobody holds open has its page cache
/// dropped at its last close, so each table read is I/O. Only a hint: the disk's table is read to
/// confirm it.
pub(crate) type LastSeen = crate::sync::LastSeen<Guid, Seen>;

/// GUIDs whose disk is remembered at most (a node's disks times their partitions is far less).
pub(crate) const REMEMBERED: usize = 4096;

/// Notes the GUIDs of `disk`'s table. A GUID already seen on another disk loses its hint for
/// good (`Seen::Several`): the order in which disks are listed must not pick one of two clones.
fn remember(seen: &LastSeen, disk: u32, entries: &[Entry]) {
    for e in entries {
        seen.update(e.guid, |hint| match hint {
            Some(Seen::On(other)) if *other != disk => Seen::Several,
            Some(Seen::Several) => Seen::Several,
            _ => Seen::On(disk),
        });
    }
}

/// A volume resolved while its disk's lock is held: what the volume calls that touch a
/// partition take.
pub(crate) struct HeldVolume {
    pub(crate) volume: Volume,
    pub(crate) lock: DiskLock,
}

impl std::ops::Deref for HeldVolume {
    type Target = Volume;
    fn deref(&self) -> &Volume {
        &self.volume
    }
}

impl Block {
    /// The volumes (GPT partitions) of one disk, in table order. MBR disks and disks without a
    /// table have none. A volume the kernel does not have yet has an empty `name` and `node`.
    pub fn volumes_of(&self, disk: &Disk) -> Result<Vec<Volume>> {
        let od = self.open_disk(disk)?;
        let Some(table) = od.table()? else { return Ok(Vec::new()) };
        let kernel = self.kernel_partitions(disk)?;
        let entries = table.entries();
        remember(&self.seen, disk.number, &entries);
        Ok(entries.iter().map(|e| self.volume_of(disk, &od, e, &kernel)).collect())
    }

    /// The volume with this ID: InvalidArgument when the ID is malformed, NotFound when no disk
    /// has it, FailedPrecondition when several do (found when every disk is read: on the first
    /// lookup of an ID, or when the disk it was last seen on no longer has it).
    pub fn volume(&self, volume_id: &str) -> Result<Volume> {
        self.volume_by(volume_id, DiskNumber::Refused)
    }

    /// [`Self::volume`], where `by_disk` may let a disk number stand for that disk's data volume
    /// ([`data_volume`]): the largest partition of the Linux filesystem or basic data type.
    pub fn volume_by(&self, volume_id: &str, by_disk: DiskNumber) -> Result<Volume> {
        if let (DiskNumber::DataVolume, Some(number)) = (by_disk, data_volume::disk_number_in(volume_id)) {
            let found = self.volumes_of(&self.disk(number)?)?;
            let candidates: Vec<Candidate> = found
                .iter()
                .map(|v| {
                    let (kind, data) = match v.type_guid {
                        LINUX_FS => ("GPT Linux filesystem".to_owned(), true),
                        BASIC_DATA => ("GPT basic data".to_owned(), true),
                        other => (format!("GPT type {other}"), false),
                    };
                    Candidate { id: v.id.clone(), partition: v.index, kind, data, size: v.size }
                })
                .collect();
            let id = data_volume::data_volume(number, &candidates)?;
            return Ok(found.into_iter().find(|v| v.id == id).expect("the data volume is one of those found"));
        }
        let guid = parse_volume_id(volume_id)?;
        if let Some(v) = self.volume_where_last_seen(&guid) {
            return Ok(v);
        }
        let mut found = Vec::new();
        for disk in self.disks()? {
            let od = match self.open_disk(&disk) {
                Ok(od) => od,
                Err(e @ Error::PermissionDenied(_)) => {
                    tracing::debug!("looking for volume {volume_id}: {e}");
                    continue;
                }
                Err(e) => {
                    tracing::warn!("looking for volume {volume_id}: {e}");
                    continue;
                }
            };
            let table = match od.table() {
                Ok(Some(table)) => table,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!("looking for volume {volume_id}: {e}");
                    continue;
                }
            };
            let entries = table.entries();
            remember(&self.seen, disk.number, &entries);
            if let Some(entry) = entries.into_iter().find(|e| e.guid == guid) {
                let kernel = self.kernel_partitions(&disk)?;
                found.push(self.volume_of(&disk, &od, &entry, &kernel));
            }
        }
        // Every disk was read: what was found is the hint now (clearing `Several` once only one
        // disk has the GUID).
        match &found[..] {
            [] => self.seen.forget(&guid),
            [v] => self.seen.set(guid, Seen::On(v.disk)),
            _ => self.seen.set(guid, Seen::Several),
        }
        match found.len() {
            0 => Err(Error::not_found(format!("volume {volume_id} not found: no disk has a GPT partition {guid}"))),
            1 => Ok(found.pop().unwrap()),
            _ => Err(Error::precondition(format!(
                "volume {volume_id} is on more than one disk ({}): cloned disks? refusing to guess",
                found.iter().map(|v| format!("disk {} partition {}", v.disk, v.index)).collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// The volume with GPT partition GUID `guid` if `disk`'s table has it: the lookup on one
    /// disk (where the volume was last seen, or the disk [`Self::hold_volume`] locked).
    pub(crate) fn volume_on(&self, disk: &Disk, guid: &Guid) -> Result<Option<Volume>> {
        let od = self.open_disk(disk)?;
        let Some(table) = od.table()? else { return Ok(None) };
        let entries = table.entries();
        remember(&self.seen, disk.number, &entries);
        let Some(entry) = entries.iter().find(|e| e.guid == *guid) else { return Ok(None) };
        let kernel = self.kernel_partitions(disk)?;
        Ok(Some(self.volume_of(disk, &od, entry, &kernel)))
    }

    /// The one disk `guid` was last seen on, if it was seen on one.
    fn disk_last_seen(&self, guid: &Guid) -> Option<u32> {
        match self.seen.get(guid)? {
            Seen::On(disk) => Some(disk),
            Seen::Several => None,
        }
    }

    /// The volume from the table of the disk it was last seen on, if it is still there.
    fn volume_where_last_seen(&self, guid: &Guid) -> Option<Volume> {
        let number = self.disk_last_seen(guid)?;
        let found = self.disk(number).ok().and_then(|disk| self.volume_on(&disk, guid).ok().flatten());
        if found.is_none() {
            self.seen.forget(guid);
        }
        found
    }

    /// The volume `volume_id`, resolved while its disk is locked. The disk locked first is the
    /// one the volume was last seen on (where the caller's own lookup,
    /// `get_disk_number_from_volume_id` for the server's lock, has just found it), so the volume
    /// is read once, under the lock; only a volume not seen yet is looked up before. A volume found elsewhere under the lock
    /// (a disk replaced meanwhile) is looked up and locked anew, [`MOVED_TRIES`] locks in all. A
    /// volume the kernel does not show yet (a table re-read by someone else just ended) is
    /// waited for, at most [`super::device::NODE_WAIT`].
    pub(crate) fn hold_volume(&self, volume_id: &str, mode: Lock) -> Result<HeldVolume> {
        self.hold_volume_by(volume_id, mode, DiskNumber::Refused)
    }

    /// [`Self::hold_volume`] through [`Block::volume_by`]: a disk number, where `by_disk` allows
    /// it, holds that disk's data volume as chosen before the lock.
    pub(crate) fn hold_volume_by(&self, volume_id: &str, mode: Lock, by_disk: DiskNumber) -> Result<HeldVolume> {
        let by_number = by_disk == DiskNumber::DataVolume && data_volume::disk_number_in(volume_id).is_some();
        let hinted = if by_number { None } else { Some(parse_volume_id(volume_id)?) };
        let (guid, mut disk) = match hinted.and_then(|guid| Some((guid, self.disk_last_seen(&guid)?))) {
            Some(hint) => hint,
            None => {
                let first = self.volume_by(volume_id, by_disk)?;
                (parse_volume_id(&first.id)?, first.disk)
            }
        };
        for _ in 0..MOVED_TRIES {
            let held = match self.disk(disk) {
                Ok(d) => self.held_on(&d, &guid, mode)?,
                // The disk the volume was last seen on is gone: looked up below like a move.
                Err(Error::NotFound(_)) => None,
                Err(e) => return Err(e),
            };
            if let Some(held) = held {
                return Ok(held);
            }
            disk = self.volume_by(volume_id, by_disk)?.disk;
        }
        Err(Error::volume_moved(volume_id))
    }

    /// The volume with partition GUID `guid` on `disk`, read with the disk locked; `None` (and
    /// the lock let go) when the disk's table does not have it.
    fn held_on(&self, disk: &Disk, guid: &Guid, mode: Lock) -> Result<Option<HeldVolume>> {
        let lock = self.lock_disk(disk, mode)?;
        let deadline = Instant::now() + super::device::NODE_WAIT;
        loop {
            match self.volume_on(&lock.disk, guid)? {
                Some(v) if v.name.is_empty() && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Some(volume) => return Ok(Some(HeldVolume { volume, lock })),
                None => return Ok(None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_ids_round_trip() {
        let g = Guid::parse("0fc63daf-8483-4772-8e79-3d69d8477de4").unwrap();
        let id = volume_id(&g);
        assert_eq!(id, r"\\?\Volume{0fc63daf-8483-4772-8e79-3d69d8477de4}\");
        assert_eq!(parse_volume_id(&id).unwrap(), g);
        assert_eq!(parse_volume_id(r"\\?\Volume{0FC63DAF-8483-4772-8E79-3D69D8477DE4}\").unwrap(), g);
    }

    #[test]
    fn malformed_volume_ids_are_invalid_arguments_naming_the_form() {
        for bad in [
            "",
            r"\\?\Volume{0fc63daf-8483-4772-8e79-3d69d8477de4}",
            r"\\.\Volume{0fc63daf-8483-4772-8e79-3d69d8477de4}\",
            r"\\?\Volume{0fc63daf-8483-4772-8e79-3d69d8477de}\",
            r"\\?\Volume{zfc63daf-8483-4772-8e79-3d69d8477de4}\",
            "/dev/loop0p1",
        ] {
            match parse_volume_id(bad) {
                Err(Error::InvalidArgument(msg)) => {
                    assert!(msg.contains(&format!("{bad:?}")), "{msg}");
                    assert!(msg.contains(r"\\?\Volume{xxxxxxxx-"), "{msg}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_guid_seen_on_two_disks_loses_its_hint_whatever_the_order() {
        let entry =
            |g: u8| Entry { number: 1, type_guid: LINUX_FS, guid: Guid([g; 16]), first_lba: 2048, last_lba: 4095 };
        let seen = LastSeen::new(REMEMBERED);
        let hint = |g: u8| seen.get(&Guid([g; 16]));
        remember(&seen, 1, &[entry(0xa1)]);
        remember(&seen, 1, &[entry(0xa1)]);
        assert_eq!(hint(0xa1), Some(Seen::On(1)));
        for (g, order) in [(0xa2, [1, 2, 1]), (0xa3, [2, 1, 2])] {
            for disk in order {
                remember(&seen, disk, &[entry(g)]);
            }
            assert_eq!(hint(g), Some(Seen::Several), "{order:?}");
        }
    }
}
