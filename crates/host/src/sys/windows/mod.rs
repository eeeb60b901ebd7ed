//! Windows host calls.

pub mod block;
pub mod fs;
// Until the Windows SMB and iSCSI backends are wired in: the Linux stand-in, which answers Unimplemented.
#[path = "../linux/remote.rs"]
pub mod remote;
mod nt;
pub mod win32;
pub mod wmi;
pub mod system;

pub const NAME: &str = "windows";
