//! Linux host calls.

pub mod block;
pub mod fs;
pub mod remote;
pub mod system;

pub const NAME: &str = "linux";
