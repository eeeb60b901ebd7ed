//! System group on Windows: the SMBIOS table for the BIOS serial (no WMI), the service control
//! manager (SCM) for services.
//!
//! Start type mapping (`QueryServiceConfigW`'s `dwStartType` onto the proto enum, same numbers):
//! boot 0, system 1, auto 2 (also when delayed: that is a separate flag of an auto-start
//! service), demand 3 = Manual, disabled 4; any other value is Boot (0), as upstream maps unknown
//! WMI start modes. Status: `dwCurrentState` 1..=7 are the proto's values; anything else is
//! Unknown.

use crate::formats::smbios;
use crate::services::{
    dependents_running, poll_until, refuse_unstoppable, stop_order, RealClock, POLL_INTERVAL, WAIT_TIMEOUT,
};
use crate::types::{ServiceInfo, ServiceStatus, StartType};
use crate::{Error, Result, SystemHost};
use windows_sys::Win32::Foundation::{
    GetLastError, ERROR_ACCESS_DENIED, ERROR_DEPENDENT_SERVICES_RUNNING, ERROR_INSUFFICIENT_BUFFER, ERROR_INVALID_NAME,
    ERROR_INVALID_SERVICE_CONTROL, ERROR_MORE_DATA, ERROR_SERVICE_ALREADY_RUNNING, ERROR_SERVICE_CANNOT_ACCEPT_CTRL,
    ERROR_SERVICE_DISABLED, ERROR_SERVICE_DOES_NOT_EXIST, ERROR_SERVICE_NOT_ACTIVE, WIN32_ERROR,
};
use windows_sys::Win32::System::Services::{
    CloseServiceHandle, ControlService, EnumDependentServicesW, OpenSCManagerW, OpenServiceW, QueryServiceConfigW,
    QueryServiceStatusEx, StartServiceW, ENUM_SERVICE_STATUSW, QUERY_SERVICE_CONFIGW, SC_HANDLE, SC_MANAGER_CONNECT,
    SC_STATUS_PROCESS_INFO, SERVICE_ACTIVE, SERVICE_CONTROL_STOP, SERVICE_ENUMERATE_DEPENDENTS, SERVICE_QUERY_CONFIG,
    SERVICE_QUERY_STATUS, SERVICE_START, SERVICE_STATUS, SERVICE_STATUS_PROCESS, SERVICE_STOP,
};
use windows_sys::Win32::System::SystemInformation::{GetSystemFirmwareTable, RSMB};

/// Service control and machine identity.
pub struct System {}

impl Default for System {
    fn default() -> Self {
        Self::new()
    }
}

impl SystemHost for System {
    fn bios_serial_number(&self) -> Result<String> {
        let raw = firmware_table(RSMB, 0)?;
        let table =
            smbios::raw_table(&raw).map_err(|e| Error::internal(format!("reading the BIOS serial number: {e}")))?;
        match smbios::system_serial(table) {
            Ok(Some(serial)) => Ok(serial),
            Ok(None) => Err(Error::not_found(
                "the firmware reports no system serial number (SMBIOS System Information has no serial string)",
            )),
            Err(e) => Err(Error::internal(format!("reading the BIOS serial number: {e}"))),
        }
    }

    fn service(&self, name: &str) -> Result<ServiceInfo> {
        let scm = Handle::manager()?;
        let svc = scm.open(name, SERVICE_QUERY_CONFIG | SERVICE_QUERY_STATUS)?;
        let (start_type, display_name) = svc.config(name)?;
        let status = svc.status(name)?;
        Ok(ServiceInfo { display_name, start_type, status: status_of(status.dwCurrentState) })
    }

    /// Already running is success. Waits (at most [`WAIT_TIMEOUT`]) until the service runs.
    fn start_service(&self, name: &str) -> Result<()> {
        let scm = Handle::manager()?;
        let svc = scm.open(name, SERVICE_START | SERVICE_QUERY_STATUS)?;
        let state = status_of(svc.status(name)?.dwCurrentState);
        match state {
            ServiceStatus::Running => return Ok(()),
            ServiceStatus::Paused | ServiceStatus::PausePending => {
                return Err(Error::precondition(format!(
                    "service {name:?} is {state:?}: continue it rather than start it"
                )));
            }
            ServiceStatus::StopPending => {
                // It cannot be started before it has stopped.
                wait_for(&svc, name, ServiceStatus::Stopped, "stop")?;
            }
            _ => {}
        }
        // Already on its way to Running: only wait.
        if !matches!(state, ServiceStatus::StartPending | ServiceStatus::ContinuePending) {
            // SAFETY: `svc` is an open service handle with SERVICE_START; no arguments are passed
            // (count 0, null vector).
            if unsafe { StartServiceW(svc.0, 0, std::ptr::null()) } == 0 {
                let code = last_error();
                match code {
                    ERROR_SERVICE_ALREADY_RUNNING => {}
                    ERROR_SERVICE_DISABLED => {
                        return Err(Error::precondition(format!("service {name:?} is disabled and cannot be started")))
                    }
                    _ => return Err(win32(code, &format!("starting service {name:?}"))),
                }
            }
        }
        wait_for(&svc, name, ServiceStatus::Running, "become running")
    }

    /// Already stopped is success. Running dependents make a plain stop fail; with `force` they
    /// are stopped first, each after its own dependents, then the service. Each stop waits (at
    /// most [`WAIT_TIMEOUT`]) until the service has stopped.
    fn stop_service(&self, name: &str, force: bool, may_stop: &dyn Fn(&str) -> bool) -> Result<()> {
        let scm = Handle::manager()?;
        let svc = scm.open(name, SERVICE_STOP | SERVICE_QUERY_STATUS | SERVICE_ENUMERATE_DEPENDENTS)?;
        if status_of(svc.status(name)?.dwCurrentState) == ServiceStatus::Stopped {
            return Ok(());
        }
        let order = stop_order(name, same_name, |n| {
            if same_name(n, name) {
                svc.active_dependents(name)
            } else {
                match scm.open(n, SERVICE_ENUMERATE_DEPENDENTS) {
                    Ok(dep) => dep.active_dependents(n),
                    // Gone in the meantime: nothing depends on it any more.
                    Err(Error::NotFound(_)) => Ok(Vec::new()),
                    Err(e) => Err(e),
                }
            }
        })?;
        if !order.is_empty() && !force {
            return Err(dependents_running(name, &order));
        }
        refuse_unstoppable(name, &order, may_stop)?;
        for dep in &order {
            match scm.open(dep, SERVICE_STOP | SERVICE_QUERY_STATUS) {
                Ok(d) => stop_one(&d, dep)?,
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        stop_one(&svc, name)
    }
}

impl System {
    pub fn new() -> Self {
        System {}
    }
}

/// SCM names are case-insensitive.
fn same_name(a: &str, b: &str) -> bool {
    crate::same_ignoring_case(a, b)
}

fn status_of(state: u32) -> ServiceStatus {
    match state {
        1 => ServiceStatus::Stopped,
        2 => ServiceStatus::StartPending,
        3 => ServiceStatus::StopPending,
        4 => ServiceStatus::Running,
        5 => ServiceStatus::ContinuePending,
        6 => ServiceStatus::PausePending,
        7 => ServiceStatus::Paused,
        _ => ServiceStatus::Unknown,
    }
}

fn start_type_of(start: u32) -> StartType {
    match start {
        1 => StartType::System,
        2 => StartType::Automatic,
        3 => StartType::Manual,
        4 => StartType::Disabled,
        _ => StartType::Boot,
    }
}

/// Sends the stop control and waits until the service has stopped.
fn stop_one(svc: &Handle, name: &str) -> Result<()> {
    let mut status = SERVICE_STATUS::default();
    // SAFETY: `svc` is an open service handle with SERVICE_STOP; `status` is a valid out-pointer.
    if unsafe { ControlService(svc.0, SERVICE_CONTROL_STOP, &mut status) } == 0 {
        let code = last_error();
        match code {
            ERROR_SERVICE_NOT_ACTIVE => return Ok(()),
            ERROR_DEPENDENT_SERVICES_RUNNING => {
                return Err(Error::precondition(format!(
                    "service {name:?} cannot be stopped: services that depend on it are running"
                )))
            }
            ERROR_INVALID_SERVICE_CONTROL => {
                return Err(Error::precondition(format!("service {name:?} does not accept stop requests")))
            }
            ERROR_SERVICE_CANNOT_ACCEPT_CTRL => {
                // Already stopping is fine; any other state is not a stop we can make now.
                let state = status_of(svc.status(name)?.dwCurrentState);
                if !matches!(state, ServiceStatus::StopPending | ServiceStatus::Stopped) {
                    return Err(Error::precondition(format!(
                        "service {name:?} cannot accept a stop request while {state:?}; try again"
                    )));
                }
            }
            _ => return Err(win32(code, &format!("stopping service {name:?}"))),
        }
    }
    wait_for(svc, name, ServiceStatus::Stopped, "stop")
}

/// Polls every [`POLL_INTERVAL`] for at most [`WAIT_TIMEOUT`] until the service is in `want`.
/// Waiting for Running gives up early when the service falls back to Stopped after having been
/// seen pending (it failed to start), naming its exit code.
fn wait_for(svc: &Handle, name: &str, want: ServiceStatus, goal: &str) -> Result<()> {
    let mut seen_pending = false;
    let mut last = ServiceStatus::Unknown;
    let done = poll_until(&mut RealClock::start(), POLL_INTERVAL, WAIT_TIMEOUT, || {
        let st = svc.status(name)?;
        last = status_of(st.dwCurrentState);
        if last == want {
            return Ok(Some(()));
        }
        if want == ServiceStatus::Running {
            if last == ServiceStatus::StartPending {
                seen_pending = true;
            } else if last == ServiceStatus::Stopped && (seen_pending || st.dwWin32ExitCode != 0) {
                return Err(Error::internal(format!(
                    "service {name:?} stopped while starting (exit code {}, service-specific code {})",
                    st.dwWin32ExitCode, st.dwServiceSpecificExitCode
                )));
            }
        }
        Ok(None)
    })?;
    done.ok_or_else(|| {
        Error::internal(format!(
            "timed out waiting for service {name:?} to {goal} (still {last:?} after {}s)",
            WAIT_TIMEOUT.as_secs()
        ))
    })
}

/// An open SCM or service handle, closed on drop.
struct Handle(SC_HANDLE);

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: the handle came from OpenSCManagerW/OpenServiceW, is non-null and is closed
        // exactly once, here.
        unsafe { CloseServiceHandle(self.0) };
    }
}

impl Handle {
    /// The local SCM, for connecting and opening services only.
    fn manager() -> Result<Handle> {
        // SAFETY: null machine and database names mean the local, active database.
        let h = unsafe { OpenSCManagerW(std::ptr::null(), std::ptr::null(), SC_MANAGER_CONNECT) };
        if h.is_null() {
            return Err(win32(last_error(), "connecting to the service control manager"));
        }
        Ok(Handle(h))
    }

    fn open(&self, name: &str, access: u32) -> Result<Handle> {
        let wide = wide(name)?;
        // SAFETY: `self` is an open SCM handle; `wide` is a NUL-terminated UTF-16 string that
        // outlives the call.
        let h = unsafe { OpenServiceW(self.0, wide.as_ptr(), access) };
        if h.is_null() {
            let code = last_error();
            return Err(match code {
                ERROR_SERVICE_DOES_NOT_EXIST => Error::not_found(format!("service {name:?} not found")),
                ERROR_INVALID_NAME => Error::invalid(format!("service name {name:?} is not valid")),
                _ => win32(code, &format!("opening service {name:?}")),
            });
        }
        Ok(Handle(h))
    }

    fn status(&self, name: &str) -> Result<SERVICE_STATUS_PROCESS> {
        let mut st = SERVICE_STATUS_PROCESS::default();
        let mut needed = 0u32;
        // SAFETY: `self` has SERVICE_QUERY_STATUS; the buffer is a SERVICE_STATUS_PROCESS of the
        // size passed; `needed` is a valid out-pointer.
        let ok = unsafe {
            QueryServiceStatusEx(
                self.0,
                SC_STATUS_PROCESS_INFO,
                (&mut st as *mut SERVICE_STATUS_PROCESS).cast(),
                std::mem::size_of::<SERVICE_STATUS_PROCESS>() as u32,
                &mut needed,
            )
        };
        if ok == 0 {
            return Err(win32(last_error(), &format!("querying the status of service {name:?}")));
        }
        Ok(st)
    }

    /// Start type and display name.
    fn config(&self, name: &str) -> Result<(StartType, String)> {
        let what = || format!("querying the configuration of service {name:?}");
        let mut needed = 0u32;
        // SAFETY: size query: a null buffer of size 0; `needed` is a valid out-pointer.
        let ok = unsafe { QueryServiceConfigW(self.0, std::ptr::null_mut(), 0, &mut needed) };
        if ok == 0 && last_error() != ERROR_INSUFFICIENT_BUFFER {
            return Err(win32(last_error(), &what()));
        }
        // The strings follow the struct in the same buffer; u64 units keep it aligned.
        let size = (needed as usize).max(std::mem::size_of::<QUERY_SERVICE_CONFIGW>());
        let mut buf = vec![0u64; size.div_ceil(8)];
        // SAFETY: `buf` is writable, 8-aligned and at least `size` bytes long, as passed.
        let ok = unsafe { QueryServiceConfigW(self.0, buf.as_mut_ptr().cast(), size as u32, &mut needed) };
        if ok == 0 {
            return Err(win32(last_error(), &what()));
        }
        // SAFETY: on success the buffer starts with an initialised QUERY_SERVICE_CONFIGW.
        let config = unsafe { &*(buf.as_ptr() as *const QUERY_SERVICE_CONFIGW) };
        // SAFETY: lpDisplayName is null or points at a NUL-terminated string inside `buf`.
        let display_name = unsafe { from_wide_ptr(config.lpDisplayName) };
        Ok((start_type_of(config.dwStartType), display_name))
    }

    /// Names of the active services that depend on this one (as the SCM lists them: also the
    /// indirect ones).
    fn active_dependents(&self, name: &str) -> Result<Vec<String>> {
        let what = || format!("listing the services that depend on {name:?}");
        let (mut needed, mut count) = (0u32, 0u32);
        // SAFETY: size query: a null buffer of size 0; the out-pointers are valid.
        let ok =
            unsafe { EnumDependentServicesW(self.0, SERVICE_ACTIVE, std::ptr::null_mut(), 0, &mut needed, &mut count) };
        if ok != 0 {
            return Ok(Vec::new());
        }
        let code = last_error();
        if code != ERROR_MORE_DATA {
            return Err(win32(code, &what()));
        }
        let mut buf = vec![0u64; (needed as usize).div_ceil(8)];
        // SAFETY: `buf` is writable, 8-aligned and at least `needed` bytes long, as passed.
        let ok = unsafe {
            EnumDependentServicesW(self.0, SERVICE_ACTIVE, buf.as_mut_ptr().cast(), needed, &mut needed, &mut count)
        };
        if ok == 0 {
            return Err(win32(last_error(), &what()));
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
}

/// A whole firmware table: size query, then fetch (again if it grew in between).
fn firmware_table(provider: u32, id: u32) -> Result<Vec<u8>> {
    let what = "reading the SMBIOS firmware table";
    let mut buf: Vec<u8> = Vec::new();
    for _ in 0..3 {
        let len = buf.len() as u32;
        let ptr = if buf.is_empty() { std::ptr::null_mut() } else { buf.as_mut_ptr() };
        // SAFETY: `ptr` is null with size 0 (size query) or `buf`, writable for `len` bytes.
        let n = unsafe { GetSystemFirmwareTable(provider, id, ptr, len) };
        if n == 0 {
            return Err(win32(last_error(), what));
        }
        if n <= len {
            buf.truncate(n as usize);
            return Ok(buf);
        }
        buf = vec![0; n as usize];
    }
    Err(Error::internal(format!("{what}: its size kept changing")))
}

/// `s` as a NUL-terminated UTF-16 string; an embedded NUL would silently cut the name short, so
/// it is refused.
fn wide(s: &str) -> Result<Vec<u16>> {
    if s.contains('\0') {
        return Err(Error::invalid(format!("service name {s:?} contains a NUL character")));
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

fn last_error() -> WIN32_ERROR {
    // SAFETY: reads the calling thread's last-error value; no preconditions.
    unsafe { GetLastError() }
}

/// A failed Win32 call while doing `what`, classified.
fn win32(code: WIN32_ERROR, what: &str) -> Error {
    let msg = format!("{what}: {}", std::io::Error::from_raw_os_error(code as i32));
    match code {
        ERROR_ACCESS_DENIED => Error::PermissionDenied(msg),
        ERROR_SERVICE_DOES_NOT_EXIST => Error::NotFound(msg),
        _ => Error::Internal(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::any_service;

    #[test]
    fn mappings() {
        assert_eq!(
            (0..=8).map(status_of).collect::<Vec<_>>(),
            [
                ServiceStatus::Unknown,
                ServiceStatus::Stopped,
                ServiceStatus::StartPending,
                ServiceStatus::StopPending,
                ServiceStatus::Running,
                ServiceStatus::ContinuePending,
                ServiceStatus::PausePending,
                ServiceStatus::Paused,
                ServiceStatus::Unknown,
            ]
        );
        for (raw, t) in [
            (0, StartType::Boot),
            (1, StartType::System),
            (2, StartType::Automatic),
            (3, StartType::Manual),
            (4, StartType::Disabled),
            (9, StartType::Boot),
        ] {
            assert_eq!(start_type_of(raw), t);
            if raw <= 4 {
                assert_eq!(t as u32, raw, "wire value equals the SCM value");
            }
        }
        assert!(same_name("Spooler", "SPOOLER") && same_name("ÄÖ", "äö"));
        assert!(!same_name("straße", "STRASSE") && !same_name("a", "b") && !same_name("a", "ab"));
        assert!(matches!(wide("a\0b"), Err(Error::InvalidArgument(_))));
    }

    /// Wine 8's SCM client answers ERROR_INVALID_HANDLE now and then when one process uses
    /// several SCM connections from threads at once (seen in about one run in ten here; never
    /// with the tests one at a time), so the tests that talk to the SCM take turns.
    fn scm_turn() -> std::sync::MutexGuard<'static, ()> {
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        TURN.lock().unwrap_or_else(|p| p.into_inner())
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
        let raw = firmware_table(RSMB, 0).expect("RSMB table");
        let table = smbios::raw_table(&raw).expect("RawSMBIOSData");
        let kinds: Vec<u8> = smbios::structures(table).map(|s| s.expect("well-formed").kind).collect();
        assert!(kinds.contains(&smbios::TYPE_SYSTEM_INFORMATION), "structure types {kinds:?}");

        let got = System::new().bios_serial_number();
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
        let sys = System::new();
        // Wine's registry: PlugPlay is auto-start, Spooler demand-start, LanmanServer disabled
        // (the same start types as on Windows).
        let pnp = sys.service("PlugPlay").unwrap();
        assert_eq!(pnp.display_name, "Plug and Play Service");
        assert_eq!(pnp.start_type, StartType::Automatic);
        assert_eq!(pnp.status, ServiceStatus::Running, "started at boot");
        // SCM names are case-insensitive.
        assert_eq!(sys.service("plugplay").unwrap(), pnp);

        let spooler = sys.service("Spooler").unwrap();
        assert_eq!(spooler.display_name, "Print Spooler");
        assert_eq!(spooler.start_type, StartType::Manual);
        let lanman = sys.service("LanmanServer").unwrap();
        assert_eq!(lanman.start_type, StartType::Disabled);
        assert_eq!(lanman.status, ServiceStatus::Stopped);
    }

    #[test]
    fn missing_and_invalid_services() {
        let _turn = scm_turn();
        let sys = System::new();
        let name = "csi-proxy-no-such-service";
        for r in [
            sys.service(name).map(drop),
            sys.start_service(name),
            sys.stop_service(name, false, &any_service),
            sys.stop_service(name, true, &any_service),
        ] {
            assert!(matches!(&r, Err(Error::NotFound(m)) if m.contains(&format!("{name:?}"))), "{r:?}");
        }
        assert!(matches!(sys.service("Spooler\0x"), Err(Error::InvalidArgument(_))));
        // Disabled: refused, not started.
        let e = sys.start_service("LanmanServer").unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("disabled")), "{e:?}");
        assert_eq!(sys.service("LanmanServer").unwrap().status, ServiceStatus::Stopped);
    }

    /// Start and stop a real service: Wine's print spooler (spoolsv.exe) is a demand-start
    /// service with nothing depending on it, safe to cycle. The only test that touches it.
    #[test]
    fn start_and_stop_the_spooler() {
        let _turn = scm_turn();
        let sys = System::new();
        let status = || sys.service("Spooler").unwrap().status;
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
