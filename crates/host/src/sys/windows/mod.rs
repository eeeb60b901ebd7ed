//! Windows host calls.

pub mod block;
pub mod fs;
mod nt;
pub mod remote;
pub mod system;
pub mod win32;
pub mod wmi;

use crate::win::wmi::Wmi;
use crate::win::Win32;
use std::sync::{Arc, OnceLock};

pub const NAME: &str = "windows";

/// The real platform layers. One WMI for the whole process, so that every group reuses its
/// connections.
fn platform() -> (Arc<dyn Win32>, Arc<dyn Wmi>) {
    static WMI: OnceLock<Arc<wmi::ComWmi>> = OnceLock::new();
    let wmi = WMI.get_or_init(|| Arc::new(wmi::ComWmi::new())).clone();
    (Arc::new(win32::RealWin32), wmi)
}
