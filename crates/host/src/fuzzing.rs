//! What the fuzz targets in `fuzz/` reach (feature `fuzzing`, never on in the daemon): the
//! parsers of untrusted bytes in one place. Public parsers are re-exported as they are; the
//! crate-private format readers through thin wrappers (`formats::fuzzing`).

pub use crate::formats::fuzzing::{gpt, mountinfo, probe};
pub use crate::formats::smbios;
pub use crate::paths::{unix as unix_paths, windows as windows_paths, within};
pub use crate::windows::{extents, ioctl, wmi};
