//! Readers (and the one writer) of formats the host hands us as bytes: GPT tables, filesystem
//! superblocks, `/proc/self/mountinfo`, SMBIOS. Pure functions over byte slices or `Read + Seek`,
//! so they build and are tested on every OS whichever backend uses them.

// The Linux backend is their only user outside tests; elsewhere they only build and test.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod gpt;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod mountinfo;
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) mod probe;
pub mod smbios;

#[cfg(feature = "fuzzing")]
pub mod fuzzing;
