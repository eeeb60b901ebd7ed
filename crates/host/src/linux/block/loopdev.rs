//! Loop devices: the one ioctl the daemon needs. Rescan uses LOOP_SET_CAPACITY so that a loop
//! disk whose backing file grew shows the new size (the loop analogue of a SCSI capacity rescan);
//! partitions stay as they are.

// A platform module: an ioctl on loop devices.
#![allow(unsafe_code)]

use linux_raw_sys::loop_device as ld;
use rustix::io::Result;
use rustix::ioctl::{ioctl, NoArg, Opcode};
use std::os::fd::AsFd;

/// Re-reads the size of the backing file of the loop device `dev`.
pub(crate) fn set_capacity(dev: impl AsFd) -> Result<()> {
    // SAFETY: LOOP_SET_CAPACITY takes no argument.
    unsafe { ioctl(dev, NoArg::<{ ld::LOOP_SET_CAPACITY as Opcode }>::new()) }
}
