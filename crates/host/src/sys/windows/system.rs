//! System group on Windows.

use crate::Result;

/// Service control and machine identity.
pub struct System {}

impl System {
    pub fn new() -> Self {
        System {}
    }
    pub fn bios_serial_number(&self) -> Result<String> {
        Err(crate::sys::unimplemented("System.GetBIOSSerialNumber"))
    }
    pub fn start_service(&self, _name: &str) -> Result<()> {
        Err(crate::sys::unimplemented("System.StartService"))
    }
    pub fn stop_service(&self, _name: &str, _force: bool) -> Result<()> {
        Err(crate::sys::unimplemented("System.StopService"))
    }
    pub fn service(&self, _name: &str) -> Result<crate::types::ServiceInfo> {
        Err(crate::sys::unimplemented("System.GetService"))
    }
}
