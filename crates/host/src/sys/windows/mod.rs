//! Windows host calls.

pub mod block;
pub mod fs;
mod nt;
pub mod system;

pub const NAME: &str = "windows";
