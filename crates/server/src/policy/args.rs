//! What an operation acts on, as a policy constrains it: every path, disk, volume, SMB share,
//! service and iSCSI portal a request names. Each operation lists its own ([`Args`]); the `op!`
//! glue requires it, so a new operation cannot reach the host without saying what it touches.

use csi_proxy_host::types::TargetPortal;

/// One thing a request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg<'a> {
    /// A host path (a directory, a link, a mount point, a share's local folder).
    Path(&'a str),
    /// A disk by number.
    Disk(u32),
    /// A volume by ID; a policy judges it by the disk it is on.
    Volume(&'a str),
    /// An SMB share, `\\server\share[\path]` (or `//server/share`).
    Remote(std::borrow::Cow<'a, str>),
    /// A host service by name.
    Service(&'a str),
    /// An iSCSI target portal.
    Portal(&'a TargetPortal),
}

impl std::fmt::Display for Arg<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let clip = |s: &str| csi_proxy_host::error::clip(s).to_string();
        match self {
            Arg::Path(p) => write!(f, "path {:?}", clip(p)),
            Arg::Disk(n) => write!(f, "disk {n}"),
            Arg::Volume(v) => write!(f, "volume {:?}", clip(v)),
            Arg::Remote(r) => write!(f, "SMB share {:?}", clip(r)),
            Arg::Service(s) => write!(f, "service {:?}", clip(s)),
            Arg::Portal(p) => write!(f, "iSCSI portal {}", portal_text(p)),
        }
    }
}

/// A portal as policies match it: `address:port`.
pub fn portal_text(p: &TargetPortal) -> String {
    format!("{}:{}", csi_proxy_host::error::clip(&p.address), p.port)
}

/// What an operation names, for [`crate::policy`]. Empty for one that names nothing (a listing
/// of every disk, the BIOS serial).
pub trait Args {
    fn args(&self) -> Vec<Arg<'_>>;
}
