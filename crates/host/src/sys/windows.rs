//! Windows host calls.

use crate::Result;

pub const NAME: &str = "windows";

pub fn bios_serial_number() -> Result<String> {
    Err(super::unimplemented("System.GetBIOSSerialNumber"))
}
