//! Interlocks: what no call may change, whatever a driver asks.
//!
//! A driver that computes the wrong disk number hands it to PartitionDisk, FormatVolume,
//! ResizeVolume or SetDiskState(offline) like any other: on NVMe-controller VM sizes azuredisk's
//! LUN lookup returned the temporary disk's number and the node mounted it as a PVC
//! (kubernetes-sigs/azuredisk-csi-driver#2661); the OS disk's number would have ended the node.
//! Each backend therefore refuses those calls, before it changes anything, on
//! - a disk that holds the running system (Linux: `/`, `/boot`, `/usr`, `/var` or active swap;
//!   Windows: the boot or system volume, a page file, crash dump or hibernation file);
//! - a disk another device is built on (Linux: LVM, md, dm-crypt, multipath holders);
//! - a volume mounted outside the working directories (and, for the whole-disk calls, a disk
//!   with any such volume);
//! - a disk the operator listed with `-protected-disk` ([`ProtectedDisk`]).
//!
//! A refusal is FailedPrecondition naming the call, the disk or volume and the reason, and
//! saying that nothing was changed ([`refusal`]).

use crate::types::DiskLocation;
use crate::Error;
use std::fmt;

/// The calls an interlock guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    PartitionDisk,
    FormatVolume,
    ResizeVolume,
    SetDiskOffline,
}

impl Action {
    /// As an operator reads it in a refusal.
    pub fn describe(self) -> &'static str {
        match self {
            Action::PartitionDisk => "PartitionDisk",
            Action::FormatVolume => "FormatVolume",
            Action::ResizeVolume => "ResizeVolume",
            Action::SetDiskOffline => "SetDiskState(offline)",
        }
    }

    /// Whether the call acts on the whole disk (so any volume of it mounted outside the working
    /// directories refuses it), not on one volume.
    pub fn whole_disk(self) -> bool {
        matches!(self, Action::PartitionDisk | Action::SetDiskOffline)
    }
}

/// The refusal of `action` on `what` (a disk or a volume, as the backend names it) because of
/// `why`.
pub fn refusal(action: Action, what: &str, why: &str) -> Error {
    Error::precondition(format!("refusing {} on {what}: {why}; nothing was changed", action.describe()))
}

/// A disk the operator protects with `-protected-disk`: by number (`3`), by serial number
/// (`serial=PATTERN`) or by location (`location=PATTERN`, matched against
/// [`location_text`]). Patterns are shell-style globs (`*`, `?`, `[...]`), matched whole and
/// case-sensitively.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtectedDisk {
    Number(u32),
    Serial(glob::Pattern),
    Location(glob::Pattern),
}

impl std::str::FromStr for ProtectedDisk {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let pattern = |p: &str| {
            if p.is_empty() {
                return Err(format!("{text:?}: the pattern after '=' is empty"));
            }
            glob::Pattern::new(p).map_err(|e| format!("{text:?}: not a pattern: {e}"))
        };
        if let Some(p) = text.strip_prefix("serial=") {
            return pattern(p).map(ProtectedDisk::Serial);
        }
        if let Some(p) = text.strip_prefix("location=") {
            return pattern(p).map(ProtectedDisk::Location);
        }
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            if let Ok(n) = text.parse() {
                return Ok(ProtectedDisk::Number(n));
            }
        }
        Err(format!(
            "{:?}: expected a disk number (e.g. 0), serial=PATTERN or location=PATTERN",
            crate::error::clip(text)
        ))
    }
}

impl fmt::Display for ProtectedDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtectedDisk::Number(n) => write!(f, "{n}"),
            ProtectedDisk::Serial(p) => write!(f, "serial={p}"),
            ProtectedDisk::Location(p) => write!(f, "location={p}"),
        }
    }
}

impl ProtectedDisk {
    /// Whether this names the disk numbered `number`, with serial number `serial` (empty when
    /// it has none: a pattern then never matches) at `location`.
    pub fn matches(&self, number: u32, serial: &str, location: &DiskLocation) -> bool {
        match self {
            ProtectedDisk::Number(n) => *n == number,
            ProtectedDisk::Serial(p) => !serial.is_empty() && p.matches(serial),
            ProtectedDisk::Location(p) => p.matches(&location_text(location)),
        }
    }
}

/// The first of `protected` that names the disk, if any.
pub fn protected_by<'p>(
    protected: &'p [ProtectedDisk],
    number: u32,
    serial: &str,
    location: &DiskLocation,
) -> Option<&'p ProtectedDisk> {
    protected.iter().find(|p| p.matches(number, serial, location))
}

/// A location as `-protected-disk=location=` patterns see it: `adapter:bus:target:lun`, each as
/// ListDiskLocations answers it (empty where the bus has no such part).
pub fn location_text(l: &DiskLocation) -> String {
    format!("{}:{}:{}:{}", l.adapter, l.bus, l.target, l.lun_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(adapter: &str, lun: &str) -> DiskLocation {
        DiskLocation { adapter: adapter.into(), bus: "0".into(), target: "0".into(), lun_id: lun.into() }
    }

    #[test]
    fn protected_disks_parse_and_match() {
        let n: ProtectedDisk = "0".parse().unwrap();
        assert!(n.matches(0, "", &at("1", "0")) && !n.matches(1, "", &at("1", "0")));
        let s: ProtectedDisk = "serial=OS-*".parse().unwrap();
        assert!(s.matches(5, "OS-123", &DiskLocation::default()));
        assert!(!s.matches(5, "DATA-1", &DiskLocation::default()) && !s.matches(5, "", &DiskLocation::default()));
        let l: ProtectedDisk = "location=*:0:0:0".parse().unwrap();
        assert!(l.matches(9, "", &at("2", "0")) && !l.matches(9, "", &at("2", "1")));
        assert_eq!(location_text(&at("2", "1")), "2:0:0:1");
        for (text, shown) in [("0", "0"), ("serial=OS-*", "serial=OS-*"), ("location=*:0:0:0", "location=*:0:0:0")] {
            assert_eq!(text.parse::<ProtectedDisk>().unwrap().to_string(), shown);
        }
    }

    #[test]
    fn bad_protected_disks_are_named() {
        for bad in ["", "-1", "sda", "serial=", "location=[", "99999999999"] {
            let e = bad.parse::<ProtectedDisk>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")) || e.contains("pattern"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_refusal_names_the_call_and_says_nothing_changed() {
        let e = refusal(Action::SetDiskOffline, "disk 0 (sda)", "it holds the running system");
        let Error::FailedPrecondition(msg) = e else { panic!() };
        assert_eq!(
            msg,
            "refusing SetDiskState(offline) on disk 0 (sda): it holds the running system; nothing was changed"
        );
    }
}
