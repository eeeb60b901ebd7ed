//! The real Windows platform: thin layers that make the documented calls ([`win32`], [`wmi`],
//! `nt` with `real_nt`, whose `RealNt` is containment's handle layer, and [`system`]'s service control manager),
//! and the filesystem group (`fs`), whose create/remove/link steps sit with their NT calls after
//! the portable containment check.

// The Windows platform layer: the only place of the Windows backend with FFI.
#![allow(unsafe_code)]

pub mod fs;
mod nt;
pub use nt::system_drive;
pub mod real_nt;
pub mod system;
pub mod win32;
pub mod wmi;

use super::contain::Containment;
use super::disks::Disks;
use super::iscsi::Iscsi;
use super::smb::Smb;
use super::volumes::Volumes;
use crate::{Config, Hosts};
use std::sync::{Arc, OnceLock};

/// Every group of the Windows host on the real Win32 and WMI layers. One WMI connection set for
/// the whole process, reused by every group and every call of this function. `-linux-fs-type` does not apply: FormatVolume makes
/// NTFS.
pub fn hosts(config: Config) -> Hosts {
    let win32: Arc<dyn super::Win32> = Arc::new(win32::RealWin32);
    static WMI: OnceLock<Arc<wmi::ComWmi>> = OnceLock::new();
    let wmi: Arc<dyn super::wmi::Wmi> = WMI.get_or_init(|| Arc::new(wmi::ComWmi::new())).clone();
    let fs = Arc::new(fs::Filesystem::new(config.roots.clone()));
    Hosts {
        disk: Arc::new(Disks::new(win32.clone(), wmi.clone()).protecting(config.protected_disks.clone())),
        volume: Arc::new(
            Volumes::new(win32.clone(), wmi.clone(), Containment::new(real_nt::RealNt, config.roots))
                .protecting(config.protected_disks),
        ),
        smb: Arc::new(Smb::new(win32, wmi.clone(), fs.clone())),
        iscsi: Arc::new(Iscsi::new(wmi)),
        filesystem: fs,
        system: Arc::new(system::RealSystem::new(system::RealScm)),
    }
}
