//! System group on Linux: DMI for the BIOS serial.

use crate::{Error, Result};
use std::path::Path;

const DMI_SERIAL: &str = "/sys/class/dmi/id/product_serial";

/// Service control and machine identity.
pub struct System {}

impl System {
    pub fn new() -> Self {
        System {}
    }
    pub fn bios_serial_number(&self) -> Result<String> {
        read_serial(Path::new(DMI_SERIAL))
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

/// The kernel exposes the SMBIOS type-1 serial as one line; firmware without one leaves it
/// empty or fills in blanks, which we report as "none" instead of an empty success.
fn read_serial(path: &Path) -> Result<String> {
    let raw = std::fs::read_to_string(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
    let serial = raw.trim();
    if serial.is_empty() {
        return Err(Error::not_found(format!(
            "the firmware reports no system serial number ({} is empty)",
            path.display()
        )));
    }
    Ok(serial.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_is_trimmed_and_empty_is_not_found() {
        let dir = std::env::temp_dir().join(format!("csi-proxy-serial-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("product_serial");
        std::fs::write(&f, "VMware-56 4d\n").unwrap();
        assert_eq!(read_serial(&f).unwrap(), "VMware-56 4d");
        std::fs::write(&f, "  \n").unwrap();
        assert!(matches!(read_serial(&f), Err(Error::NotFound(m)) if m.contains("no system serial")));
        assert!(matches!(read_serial(&dir.join("missing")), Err(Error::NotFound(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
