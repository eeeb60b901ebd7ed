//! Linux host calls.

pub mod fs;
pub mod system;

pub const NAME: &str = "linux";
