//! What the fuzz targets in `fuzz/` reach (feature `fuzzing`, never on in the daemon): the
//! parsers of untrusted bytes in one place. Public parsers are re-exported as they are; the
//! crate-private Linux block parsers through thin wrappers (`sys::linux::block::fuzzing`).

pub use crate::paths::{unix as unix_paths, windows as windows_paths, within};
pub use crate::smbios;
pub use crate::win::{extents, ioctl, wmi};

#[cfg(target_os = "linux")]
pub use crate::sys::linux::block::fuzzing::{gpt, mountinfo, probe};
