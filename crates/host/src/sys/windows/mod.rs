//! Windows host calls.

pub mod block;
pub mod fs;
mod nt;
pub mod win32;
pub mod wmi;
pub mod system;

pub const NAME: &str = "windows";
