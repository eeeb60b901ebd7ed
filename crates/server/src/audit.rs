//! The audit trail: a record when a privileged call starts and another when it ends, with who
//! asked (the transport's [`Caller`]), what was asked (the operation as its `Debug` shows it,
//! which redacts secrets), and how it ended. Where the records go is the sink's business (the
//! daemon's `-audit-log` file).
//!
//! The rule that makes the trail trustworthy: a call whose start record cannot be written is
//! not run (it fails with `Unavailable`). An end record that cannot be written is logged as an
//! error; the call's own outcome is still returned, since its work is done either way.

use csi_proxy_wire::Caller;
use std::time::{Duration, SystemTime};

/// Where audit records go. Each `write` must put the record down whole (one line, not
/// interleaved with another) before it returns, or fail.
pub trait AuditSink: Send + Sync {
    fn write(&self, record: &Record<'_>) -> std::io::Result<()>;
    /// Whether read-only calls (List*, Get*, Is*, PathExists, the stats) are recorded too;
    /// without it only calls that may change the host are.
    fn read_only_calls(&self) -> bool {
        false
    }
}

/// What a record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The request was valid and its work is about to start (waiting for its disk first, if it
    /// takes one).
    Start,
    /// The work ended (successfully or not); pairs with the start record of the same `call`.
    End,
    /// The request could not even be read as an operation (a malformed field, such as a disk
    /// number that is not a number); no start record. A request that reads but that the
    /// operation then refuses (an empty path) has a start and an end record.
    Refused,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::End => "end",
            Event::Refused => "refused",
        }
    }
}

/// One audit record.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub event: Event,
    /// Numbers the calls of this daemon run; a start and its end carry the same number.
    pub call: u64,
    pub time: SystemTime,
    /// `None` when the transport attached no caller (in-process tests).
    pub caller: Option<&'a Caller>,
    /// The gRPC service, `<version>.<Group>` (`v1.Disk`).
    pub service: &'a str,
    pub method: &'a str,
    /// The operation with its fields, secrets shown as `<redacted>`, bounded in size. Start
    /// records only.
    pub request: Option<&'a str>,
    /// The gRPC code name as Go spells it (`OK`, `InvalidArgument`): end and refused records.
    pub code: Option<&'static str>,
    /// The error message the client got; `None` on success.
    pub message: Option<&'a str>,
    /// From the start of the call (before waiting for a disk) to its end: end records.
    pub duration: Option<Duration>,
}

/// Whether `method` (a wire method name of any version) only reads: the listings, queries and
/// statistics. Every other method may change the host and is always audited; naming the
/// read-only ones (rather than the mutating ones) makes a method added later audited by default.
pub fn is_read_only(method: &str) -> bool {
    const PREFIXES: &[&str] = &["Get", "List", "Is"];
    const OTHERS: &[&str] = &["PathExists", "DiskStats", "VolumeStats"];
    PREFIXES.iter().any(|p| method.starts_with(p)) || OTHERS.contains(&method)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every method name the 23 APIs serve, each classified on purpose.
    #[test]
    fn every_method_is_classified_on_purpose() {
        let read_only = [
            "DiskStats",
            "GetAttachState",
            "GetBIOSSerialNumber",
            "GetClosestVolumeIDFromTargetPath",
            "GetDiskNumberByName",
            "GetDiskNumberFromVolumeID",
            "GetDiskState",
            "GetDiskStats",
            "GetService",
            "GetTargetDisks",
            "GetVolumeDiskNumber",
            "GetVolumeIDFromMount",
            "GetVolumeIDFromTargetPath",
            "GetVolumeStats",
            "IsMountPoint",
            "IsSymlink",
            "IsVolumeFormatted",
            "ListDiskIDs",
            "ListDiskLocations",
            "ListTargetPortals",
            "ListVolumesOnDisk",
            "PathExists",
            "VolumeStats",
        ];
        let changing = [
            "AddTargetPortal",
            "ConnectTarget",
            "CreateSymlink",
            "DisconnectTarget",
            // Discovery writes the initiator's records of the portal's targets.
            "DiscoverTargetPortal",
            "DismountVolume",
            "FormatVolume",
            "LinkPath",
            "Mkdir",
            "MountVolume",
            "NewSmbGlobalMapping",
            "PartitionDisk",
            "RemoveSmbGlobalMapping",
            "RemoveTargetPortal",
            "Rescan",
            "ResizeVolume",
            "Rmdir",
            "RmdirContents",
            "SetAttachState",
            "SetDiskState",
            "SetMutualChapSecret",
            "StartService",
            "StopService",
            "UnmountVolume",
            "WriteVolumeCache",
        ];
        for m in read_only {
            assert!(is_read_only(m), "{m}");
        }
        for m in changing {
            assert!(!is_read_only(m), "{m}");
        }
        // Both lists together are every method of every API, from the descriptors themselves.
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(csi_proxy_wire::FILE_DESCRIPTOR_SET).unwrap();
        let mut served: Vec<String> =
            set.file.iter().flat_map(|f| &f.service).flat_map(|s| &s.method).filter_map(|m| m.name.clone()).collect();
        served.sort_unstable();
        served.dedup();
        let mut listed: Vec<&str> = read_only.iter().chain(changing.iter()).copied().collect();
        listed.sort_unstable();
        assert_eq!(served, listed);
    }
}
