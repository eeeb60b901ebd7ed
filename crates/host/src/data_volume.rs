//! A disk number where a volume ID is expected: a deliberate extension (docs/migrating.md,
//! docs/upstream.md#volume).
//!
//! azuredisk ≥ 1.32's NodeStageVolume ends with ResizeVolume(VolumeId = the disk number it found
//! by LUN, size 0), `pkg/azuredisk/nodeserver.go` with `needResizeVolume` answering true in
//! `azure_common_windows.go`, the request built in `pkg/mounter/safe_mounter_windows.go`.
//! Upstream looks the number up as an `MSFT_Volume.UniqueId`, finds nothing and fails the stage;
//! the kubelet's retry then finds the volume mounted and returns early, so a disk cloned or
//! restored to a larger size is never grown. azuredisk's own HostProcess mounter
//! (`safe_mounter_host_process_windows.go`) reads a numeric source as a volume of that disk.
//!
//! Here a disk number stands for that disk's data volume: of the volumes on the disk whose
//! partition is a data partition, the largest. Every backend lists its candidates and this
//! module decides, so the rule is one. Only ResizeVolume takes a disk number
//! ([`DiskNumber::DataVolume`]): it is the only volume call a driver sends one to; every other
//! call still refuses it as a malformed volume ID.

use crate::{Error, Result};

/// Whether a volume lookup takes a disk number for that disk's data volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskNumber {
    /// A disk number is a malformed volume ID, as upstream's ID form says.
    Refused,
    /// A disk number means the disk's data volume ([`data_volume`]).
    DataVolume,
}

/// The disk a volume ID names when it is a disk number: ASCII decimal digits only (what
/// azuredisk sends is Go's `strconv.Itoa` of ListDiskLocations' key), at most ten, within `u32`.
pub fn disk_number_in(volume_id: &str) -> Option<u32> {
    if volume_id.is_empty() || volume_id.len() > 10 || !volume_id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    volume_id.parse().ok()
}

/// A volume on the disk, as a backend found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The volume ID the backend hands out.
    pub id: String,
    /// Its partition number, 0 where it has none.
    pub partition: u32,
    /// What its partition is, for messages (e.g. `GPT basic data`, `MBR type 0x07`).
    pub kind: String,
    /// Whether that kind holds data (a basic data or filesystem partition).
    pub data: bool,
    /// The partition's length in bytes.
    pub size: u64,
}

/// Candidates named in an error, at most.
const SHOWN: usize = 8;

fn listed(found: &[Candidate]) -> String {
    let mut parts: Vec<String> = found
        .iter()
        .take(SHOWN)
        .map(|c| format!("volume {} (partition {}, {}, {} bytes)", c.id, c.partition, c.kind, c.size))
        .collect();
    if found.len() > SHOWN {
        parts.push(format!("and {} more", found.len() - SHOWN));
    }
    parts.join("; ")
}

/// The data volume of `disk` among `found` (every volume the backend found on it): the largest
/// data partition's. None is NotFound, two of the same largest size are FailedPrecondition;
/// both name the disk and what was found.
pub fn data_volume(disk: u32, found: &[Candidate]) -> Result<String> {
    let data: Vec<&Candidate> = found.iter().filter(|c| c.data).collect();
    let Some(largest) = data.iter().map(|c| c.size).max() else {
        return Err(Error::not_found(if found.is_empty() {
            format!("volume ID {disk} is a disk number, and disk {disk} has no volumes; expected one data volume on it")
        } else {
            format!(
                "volume ID {disk} is a disk number, and disk {disk} has no volume on a data partition; found {}",
                listed(found)
            )
        }));
    };
    match data.iter().filter(|c| c.size == largest).collect::<Vec<_>>().as_slice() {
        [one] => {
            tracing::debug!(disk, volume = %one.id, "a disk number given as a volume ID: its data volume");
            Ok(one.id.clone())
        }
        several => Err(Error::precondition(format!(
            "volume ID {disk} is a disk number, and disk {disk} has {} data volumes of the largest size, {largest} \
             bytes; refusing to guess which one it means; found {}",
            several.len(),
            listed(found)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, partition: u32, data: bool, size: u64) -> Candidate {
        let kind = if data { "GPT basic data" } else { "GPT Microsoft reserved" };
        Candidate { id: id.into(), partition, kind: kind.into(), data, size }
    }

    #[test]
    fn only_plain_decimal_numbers_are_disk_numbers() {
        assert_eq!(disk_number_in("2"), Some(2));
        assert_eq!(disk_number_in("0"), Some(0));
        assert_eq!(disk_number_in("4294967295"), Some(u32::MAX));
        for not in ["", "4294967296", "00000000002", "+2", "-2", " 2", "2 ", "2-part1", "0x2", r"\\?\Volume{2}\", "٢"]
        {
            assert_eq!(disk_number_in(not), None, "{not:?}");
        }
    }

    #[test]
    fn the_largest_data_partition_is_the_disks_data_volume() {
        let found = [c("msr", 1, false, 16 << 20), c("small", 2, true, 1 << 30), c("big", 3, true, 9 << 30)];
        assert_eq!(data_volume(2, &found).unwrap(), "big");
        // A larger partition that holds no data is not a candidate.
        let found = [c("reserved", 1, false, 100 << 30), c("data", 2, true, 1 << 30)];
        assert_eq!(data_volume(2, &found).unwrap(), "data");
    }

    #[test]
    fn no_data_volume_or_a_tie_is_an_error_naming_the_disk_and_what_was_found() {
        match data_volume(7, &[]) {
            Err(Error::NotFound(m)) => assert!(m.contains("disk 7 has no volumes"), "{m}"),
            other => panic!("{other:?}"),
        }
        match data_volume(7, &[c("msr", 1, false, 16 << 20)]) {
            Err(Error::NotFound(m)) => {
                assert!(m.contains("disk 7") && m.contains("volume msr (partition 1, GPT Microsoft reserved"), "{m}")
            }
            other => panic!("{other:?}"),
        }
        match data_volume(7, &[c("a", 1, true, 5 << 30), c("b", 2, true, 5 << 30), c("c", 3, true, 1 << 30)]) {
            Err(Error::FailedPrecondition(m)) => {
                assert!(
                    m.contains("disk 7 has 2 data volumes") && m.contains("volume a") && m.contains("volume c"),
                    "{m}"
                )
            }
            other => panic!("{other:?}"),
        }
        // The list in an error is bounded.
        let many: Vec<Candidate> = (0..50).map(|i| c(&format!("v{i}"), i, false, 1)).collect();
        let m = data_volume(7, &many).unwrap_err().to_string();
        assert!(m.contains("and 42 more") && !m.contains("v9 "), "{m}");
    }
}
