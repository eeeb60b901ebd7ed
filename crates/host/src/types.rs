//! Version-less request and result types shared by the server and every backend.

use std::fmt;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskLocation {
    pub adapter: String,
    pub bus: String,
    pub target: String,
    pub lun_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskIds {
    /// SCSI VPD page 0x83 identifier; empty when the disk has none.
    pub page83: String,
    pub serial_number: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub total_bytes: u64,
    pub used_bytes: u64,
}

/// A string that must never reach logs or error messages.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "<empty>" } else { "<redacted>" })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmbMapping {
    /// As the client sent it, with `/` already turned into `\`.
    pub remote_path: String,
    /// Where to link the share locally; empty for none.
    pub local_path: String,
    pub username: String,
    pub password: Secret,
    pub require_privacy: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TargetPortal {
    pub address: String,
    pub port: u16,
}

impl fmt::Display for TargetPortal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.address, self.port)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthType {
    None,
    OneWayChap,
    MutualChap,
}

#[derive(Clone, PartialEq, Eq)]
pub struct ConnectTarget {
    pub portal: TargetPortal,
    pub iqn: String,
    pub auth: AuthType,
    pub chap_username: String,
    pub chap_secret: Secret,
}

/// The CHAP user name is half of a credential: like the secret, it stays out of the call log and
/// the audit trail, which show requests through this.
impl fmt::Debug for ConnectTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let user = if self.chap_username.is_empty() { "<empty>" } else { "<redacted>" };
        f.debug_struct("ConnectTarget")
            .field("portal", &self.portal)
            .field("iqn", &self.iqn)
            .field("auth", &self.auth)
            .field("chap_username", &format_args!("{user}"))
            .field("chap_secret", &self.chap_secret)
            .finish()
    }
}

/// How a service starts; the discriminants are the wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartType {
    Boot = 0,
    System = 1,
    Automatic = 2,
    Manual = 3,
    Disabled = 4,
}

/// State of a service; the discriminants are the wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServiceStatus {
    Unknown = 0,
    Stopped = 1,
    StartPending = 2,
    StopPending = 3,
    Running = 4,
    ContinuePending = 5,
    PausePending = 6,
    Paused = 7,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceInfo {
    pub display_name: String,
    pub start_type: StartType,
    pub status: ServiceStatus,
}

/// The filesystem FormatVolume creates on Linux (`-linux-fs-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsType {
    #[default]
    Ext4,
    Xfs,
    Btrfs,
    Ntfs,
}

impl FsType {
    pub const ALL: [FsType; 4] = [FsType::Ext4, FsType::Xfs, FsType::Btrfs, FsType::Ntfs];

    pub fn name(self) -> &'static str {
        match self {
            FsType::Ext4 => "ext4",
            FsType::Xfs => "xfs",
            FsType::Btrfs => "btrfs",
            FsType::Ntfs => "ntfs",
        }
    }
}

impl std::str::FromStr for FsType {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        FsType::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown filesystem type {s:?}; expected one of ext4, xfs, btrfs, ntfs"))
    }
}

impl fmt::Display for FsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_request_shows_neither_half_of_its_credential() {
        let req = ConnectTarget {
            portal: TargetPortal { address: "10.0.0.5".into(), port: 3260 },
            iqn: "iqn.2024-01.org.example:disk1".into(),
            auth: AuthType::OneWayChap,
            chap_username: "alice-the-user".into(),
            chap_secret: Secret::new("s3cret-value"),
        };
        let shown = format!("{req:?}");
        assert!(!shown.contains("alice-the-user") && !shown.contains("s3cret-value"), "{shown}");
        assert!(shown.contains("iqn.2024-01.org.example:disk1") && shown.contains("<redacted>"), "{shown}");
    }
}
