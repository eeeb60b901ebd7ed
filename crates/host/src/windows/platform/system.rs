//! The real [`Scm`]: the service control manager's calls and GetSystemFirmwareTable, each
//! method the documented call named in the trait with only the buffer handling around it.
//! Failures are `io::Error`s carrying the Win32 code, which the logic in
//! [`crate::windows::system`] matches on.

use crate::windows::system::{access, code, ServiceConfig, StatusProcess, RSMB};
use crate::windows::system::{Scm, System};
use std::io;
use windows_sys::Win32::Foundation::{
    ERROR_ACCESS_DENIED, ERROR_DEPENDENT_SERVICES_RUNNING, ERROR_INSUFFICIENT_BUFFER, ERROR_INVALID_NAME,
    ERROR_INVALID_SERVICE_CONTROL, ERROR_MORE_DATA, ERROR_SERVICE_ALREADY_RUNNING, ERROR_SERVICE_CANNOT_ACCEPT_CTRL,
    ERROR_SERVICE_DISABLED, ERROR_SERVICE_DOES_NOT_EXIST, ERROR_SERVICE_NOT_ACTIVE,
};
use windows_sys::Win32::System::Services::{
    CloseServiceHandle, ControlService, EnumDependentServicesW, OpenSCManagerW, OpenServiceW, QueryServiceConfigW,
    QueryServiceStatusEx, StartServiceW, ENUM_SERVICE_STATUSW, QUERY_SERVICE_CONFIGW, SC_HANDLE, SC_MANAGER_CONNECT,
    SC_STATUS_PROCESS_INFO, SERVICE_ACTIVE, SERVICE_CONTROL_STOP, SERVICE_ENUMERATE_DEPENDENTS, SERVICE_QUERY_CONFIG,
    SERVICE_QUERY_STATUS, SERVICE_START, SERVICE_STATUS, SERVICE_STATUS_PROCESS, SERVICE_STOP,
};
use windows_sys::Win32::System::SystemInformation::GetSystemFirmwareTable;

// The logic's copies of the SDK's values are the SDK's values.
const _: () = {
    assert!(access::SERVICE_QUERY_CONFIG == SERVICE_QUERY_CONFIG);
    assert!(access::SERVICE_QUERY_STATUS == SERVICE_QUERY_STATUS);
    assert!(access::SERVICE_ENUMERATE_DEPENDENTS == SERVICE_ENUMERATE_DEPENDENTS);
    assert!(access::SERVICE_START == SERVICE_START);
    assert!(access::SERVICE_STOP == SERVICE_STOP);
    assert!(code::ERROR_DEPENDENT_SERVICES_RUNNING as u32 == ERROR_DEPENDENT_SERVICES_RUNNING);
    assert!(code::ERROR_INVALID_SERVICE_CONTROL as u32 == ERROR_INVALID_SERVICE_CONTROL);
    assert!(code::ERROR_SERVICE_ALREADY_RUNNING as u32 == ERROR_SERVICE_ALREADY_RUNNING);
    assert!(code::ERROR_SERVICE_DISABLED as u32 == ERROR_SERVICE_DISABLED);
    assert!(code::ERROR_SERVICE_DOES_NOT_EXIST as u32 == ERROR_SERVICE_DOES_NOT_EXIST);
    assert!(code::ERROR_SERVICE_CANNOT_ACCEPT_CTRL as u32 == ERROR_SERVICE_CANNOT_ACCEPT_CTRL);
    assert!(code::ERROR_SERVICE_NOT_ACTIVE as u32 == ERROR_SERVICE_NOT_ACTIVE);
    assert!(crate::windows::code::ERROR_ACCESS_DENIED as u32 == ERROR_ACCESS_DENIED);
    assert!(crate::windows::code::ERROR_INVALID_NAME as u32 == ERROR_INVALID_NAME);
    assert!(RSMB == windows_sys::Win32::System::SystemInformation::RSMB);
};

/// The system group on this machine: [`System`]'s logic over the real SCM.
pub type RealSystem = System<RealScm>;

/// The real service control manager and firmware tables.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealScm;

/// An open SCM or service handle, closed on drop.
pub struct Handle(SC_HANDLE);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from OpenSCManagerW/OpenServiceW, is non-null and is closed
        // exactly once, here.
        unsafe { CloseServiceHandle(self.0) };
    }
}

impl Scm for RealScm {
    type Handle = Handle;

    fn connect(&self) -> io::Result<Handle> {
        // SAFETY: null machine and database names mean the local, active database.
        let h = unsafe { OpenSCManagerW(std::ptr::null(), std::ptr::null(), SC_MANAGER_CONNECT) };
        if h.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Handle(h))
    }

    fn open(&self, scm: &Handle, name: &str, access: u32) -> io::Result<Handle> {
        let wide = wide(name)?;
        // SAFETY: `scm` is an open SCM handle; `wide` is a NUL-terminated UTF-16 string that
        // outlives the call.
        let h = unsafe { OpenServiceW(scm.0, wide.as_ptr(), access) };
        if h.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(Handle(h))
    }

    fn status(&self, service: &Handle) -> io::Result<StatusProcess> {
        let mut st = SERVICE_STATUS_PROCESS::default();
        let mut needed = 0u32;
        // SAFETY: `service` has SERVICE_QUERY_STATUS (else the call fails); the buffer is a
        // SERVICE_STATUS_PROCESS of the size passed; `needed` is a valid out-pointer.
        let ok = unsafe {
            QueryServiceStatusEx(
                service.0,
                SC_STATUS_PROCESS_INFO,
                (&mut st as *mut SERVICE_STATUS_PROCESS).cast(),
                std::mem::size_of::<SERVICE_STATUS_PROCESS>() as u32,
                &mut needed,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(StatusProcess {
            current_state: st.dwCurrentState,
            win32_exit_code: st.dwWin32ExitCode,
            service_specific_exit_code: st.dwServiceSpecificExitCode,
        })
    }

    fn config(&self, service: &Handle) -> io::Result<ServiceConfig> {
        let mut needed = 0u32;
        // SAFETY: size query: a null buffer of size 0; `needed` is a valid out-pointer.
        let ok = unsafe { QueryServiceConfigW(service.0, std::ptr::null_mut(), 0, &mut needed) };
        if ok == 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(ERROR_INSUFFICIENT_BUFFER as i32) {
                return Err(e);
            }
        }
        // The strings follow the struct in the same buffer; u64 units keep it aligned.
        let size = (needed as usize).max(std::mem::size_of::<QUERY_SERVICE_CONFIGW>());
        let mut buf = vec![0u64; size.div_ceil(8)];
        // SAFETY: `buf` is writable, 8-aligned and at least `size` bytes long, as passed.
        let ok = unsafe { QueryServiceConfigW(service.0, buf.as_mut_ptr().cast(), size as u32, &mut needed) };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: on success the buffer starts with an initialised QUERY_SERVICE_CONFIGW.
        let config = unsafe { &*(buf.as_ptr() as *const QUERY_SERVICE_CONFIGW) };
        // SAFETY: lpDisplayName is null or points at a NUL-terminated string inside `buf`.
        let display_name = unsafe { from_wide_ptr(config.lpDisplayName) };
        Ok(ServiceConfig { start_type: config.dwStartType, display_name })
    }

    fn start(&self, service: &Handle) -> io::Result<()> {
        // SAFETY: `service` is an open service handle; no arguments are passed (count 0, null
        // vector).
        if unsafe { StartServiceW(service.0, 0, std::ptr::null()) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn control_stop(&self, service: &Handle) -> io::Result<()> {
        let mut status = SERVICE_STATUS::default();
        // SAFETY: `service` is an open service handle; `status` is a valid out-pointer.
        if unsafe { ControlService(service.0, SERVICE_CONTROL_STOP, &mut status) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn active_dependents(&self, service: &Handle) -> io::Result<Vec<String>> {
        let (mut needed, mut count) = (0u32, 0u32);
        // SAFETY: size query: a null buffer of size 0; the out-pointers are valid.
        let ok = unsafe {
            EnumDependentServicesW(service.0, SERVICE_ACTIVE, std::ptr::null_mut(), 0, &mut needed, &mut count)
        };
        if ok != 0 {
            return Ok(Vec::new());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(ERROR_MORE_DATA as i32) {
            return Err(e);
        }
        let mut buf = vec![0u64; (needed as usize).div_ceil(8)];
        // SAFETY: `buf` is writable, 8-aligned and at least `needed` bytes long, as passed.
        let ok = unsafe {
            EnumDependentServicesW(service.0, SERVICE_ACTIVE, buf.as_mut_ptr().cast(), needed, &mut needed, &mut count)
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        let max = buf.len() * 8 / std::mem::size_of::<ENUM_SERVICE_STATUSW>();
        // SAFETY: on success the buffer starts with `count` initialised ENUM_SERVICE_STATUSW
        // entries (bounded by what fits the buffer).
        let entries = unsafe {
            std::slice::from_raw_parts(buf.as_ptr() as *const ENUM_SERVICE_STATUSW, (count as usize).min(max))
        };
        // SAFETY: each lpServiceName is null or a NUL-terminated string inside `buf`.
        Ok(entries.iter().map(|e| unsafe { from_wide_ptr(e.lpServiceName) }).collect())
    }

    fn firmware_table(&self, provider: u32, id: u32) -> io::Result<Vec<u8>> {
        let mut buf: Vec<u8> = Vec::new();
        for _ in 0..3 {
            let len = buf.len() as u32;
            let ptr = if buf.is_empty() { std::ptr::null_mut() } else { buf.as_mut_ptr() };
            // SAFETY: `ptr` is null with size 0 (size query) or `buf`, writable for `len` bytes.
            let n = unsafe { GetSystemFirmwareTable(provider, id, ptr, len) };
            if n == 0 {
                return Err(io::Error::last_os_error());
            }
            if n <= len {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            buf = vec![0; n as usize];
        }
        Err(io::Error::other("its size kept changing"))
    }
}

/// `s` as a NUL-terminated UTF-16 string; an embedded NUL would silently cut the name short, so
/// it is refused (the logic refuses such names before they get here).
fn wide(s: &str) -> io::Result<Vec<u16>> {
    if s.contains('\0') {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{s:?} contains a NUL character")));
    }
    Ok(s.encode_utf16().chain(std::iter::once(0)).collect())
}

/// # Safety
/// `p` must be null or point at a NUL-terminated UTF-16 string.
unsafe fn from_wide_ptr(p: *const u16) -> String {
    if p.is_null() {
        return String::new();
    }
    let mut n = 0;
    // SAFETY: the caller guarantees a terminating NUL, so every read up to it is in bounds.
    while unsafe { *p.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: the `n` units before the NUL were just read.
    String::from_utf16_lossy(unsafe { std::slice::from_raw_parts(p, n) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::smbios;
    use crate::services::any_service;
    use crate::types::{ServiceStatus, StartType};
    use crate::{Error, SystemHost};

    fn system() -> RealSystem {
        System::new(RealScm)
    }

    #[test]
    fn wide_names() {
        assert_eq!(wide("ab").unwrap(), [u16::from(b'a'), u16::from(b'b'), 0]);
        assert_eq!(wide("a\0b").unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    /// Wine 8's SCM client answers ERROR_INVALID_HANDLE now and then when one process uses
    /// several SCM connections from threads at once (seen in about one run in ten here; never
    /// with the tests one at a time), so the tests that talk to the SCM take turns.
    fn scm_turn() -> std::sync::MutexGuard<'static, ()> {
        use csi_proxy_sync::LockExt;
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        TURN.lock_ignoring_poison()
    }

    /// Wine prefixes carry Wine's own tools; real Windows does not.
    fn under_wine() -> bool {
        std::path::Path::new(r"C:\windows\system32\winecfg.exe").exists()
    }

    /// The real SMBIOS table. Wine builds it from Linux's /sys/class/dmi/id (seen through drive
    /// Z:), so there the answer must be that file's serial, or NotFound when it is missing or
    /// blank (as in containers without DMI, where Wine's type 1 structure has serial index 0).
    #[test]
    fn bios_serial_number_from_the_firmware_table() {
        let raw = RealScm.firmware_table(RSMB, 0).expect("RSMB table");
        let table = smbios::raw_table(&raw).expect("RawSMBIOSData");
        let kinds: Vec<u8> = smbios::structures(table).map(|s| s.expect("well-formed").kind).collect();
        assert!(kinds.contains(&smbios::TYPE_SYSTEM_INFORMATION), "structure types {kinds:?}");

        let got = system().get_bios_serial_number();
        if under_wine() {
            let linux = std::fs::read_to_string(r"Z:\sys\class\dmi\id\product_serial").unwrap_or_default();
            match linux.trim() {
                "" => {
                    assert!(matches!(&got, Err(Error::NotFound(m)) if m.contains("no system serial number")), "{got:?}")
                }
                serial => assert_eq!(got.unwrap(), serial),
            }
        } else {
            match got {
                Ok(serial) => assert!(!serial.trim().is_empty() && serial == serial.trim()),
                Err(e) => assert!(matches!(e, Error::NotFound(_)), "{e:?}"),
            }
        }
    }

    #[test]
    fn get_service_of_real_services() {
        let _turn = scm_turn();
        let sys = system();
        // Wine's registry: PlugPlay is auto-start, Spooler demand-start, LanmanServer disabled
        // (the same start types as on Windows).
        let pnp = sys.get_service("PlugPlay").unwrap();
        assert_eq!(pnp.display_name, "Plug and Play Service");
        assert_eq!(pnp.start_type, StartType::Automatic);
        assert_eq!(pnp.status, ServiceStatus::Running, "started at boot");
        // SCM names are case-insensitive.
        assert_eq!(sys.get_service("plugplay").unwrap(), pnp);

        let spooler = sys.get_service("Spooler").unwrap();
        assert_eq!(spooler.display_name, "Print Spooler");
        assert_eq!(spooler.start_type, StartType::Manual);
        let lanman = sys.get_service("LanmanServer").unwrap();
        assert_eq!(lanman.start_type, StartType::Disabled);
        assert_eq!(lanman.status, ServiceStatus::Stopped);
    }

    #[test]
    fn missing_and_invalid_services() {
        let _turn = scm_turn();
        let sys = system();
        let name = "csi-proxy-no-such-service";
        for r in [
            sys.get_service(name).map(drop),
            sys.start_service(name),
            sys.stop_service(name, false, &any_service),
            sys.stop_service(name, true, &any_service),
        ] {
            assert!(matches!(&r, Err(Error::NotFound(m)) if m.contains(&format!("{name:?}"))), "{r:?}");
        }
        assert!(matches!(sys.get_service("Spooler\0x"), Err(Error::InvalidArgument(_))));
        // Disabled: refused, not started.
        let e = sys.start_service("LanmanServer").unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("disabled")), "{e:?}");
        assert_eq!(sys.get_service("LanmanServer").unwrap().status, ServiceStatus::Stopped);
    }

    /// Start and stop a real service: Wine's print spooler (spoolsv.exe) is a demand-start
    /// service with nothing depending on it, safe to cycle. The only test that touches it.
    #[test]
    fn start_and_stop_the_spooler() {
        let _turn = scm_turn();
        let sys = system();
        let status = || sys.get_service("Spooler").unwrap().status;
        sys.stop_service("Spooler", false, &any_service).unwrap();
        assert_eq!(status(), ServiceStatus::Stopped);

        sys.start_service("Spooler").unwrap();
        assert_eq!(status(), ServiceStatus::Running);
        sys.start_service("spooler").unwrap();
        assert_eq!(status(), ServiceStatus::Running, "already running is success");

        sys.stop_service("Spooler", false, &any_service).unwrap();
        assert_eq!(status(), ServiceStatus::Stopped);
        sys.stop_service("Spooler", false, &any_service).unwrap();
        assert_eq!(status(), ServiceStatus::Stopped, "already stopped is success");

        sys.start_service("Spooler").unwrap();
        sys.stop_service("SPOOLER", true, &any_service).unwrap();
        assert_eq!(status(), ServiceStatus::Stopped, "forced stop without dependents");
    }
}
