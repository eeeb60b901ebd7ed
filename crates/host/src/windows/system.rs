//! System group on Windows: the service control manager (SCM) for services, the SMBIOS firmware
//! table for the BIOS serial (no WMI). The logic, written against [`Scm`] so that it builds and is
//! tested on every OS; the real calls are in `platform::system`.
//!
//! Start type mapping (`QueryServiceConfigW`'s `dwStartType` onto the proto enum, same numbers):
//! boot 0, system 1, auto 2 (also when delayed: that is a separate flag of an auto-start
//! service), demand 3 = Manual, disabled 4; any other value is Boot (0), as upstream maps unknown
//! WMI start modes. Status: `dwCurrentState` 1..=7 are the proto's values; anything else is
//! Unknown.
//!
//! Start: already running is success; paused is FailedPrecondition (continue it instead); a
//! service still stopping is waited for first; a pending start is only waited for. Stop: already
//! stopped is success; running dependents make a plain stop FailedPrecondition naming them, with
//! `force` they are stopped first (see [`stop_order`]). Every start and stop waits, polling
//! every [`POLL_INTERVAL`] for at most [`WAIT_TIMEOUT`], until the service got there.

use crate::formats::smbios;
use crate::services::{
    dependents_running, poll_until, refuse_unstoppable, same_scm_name, stop_order, Clock, RealClock, POLL_INTERVAL,
    WAIT_TIMEOUT,
};
use crate::types::{ServiceInfo, ServiceStatus, StartType};
use crate::{Error, Result, SystemHost};
use std::io;

/// Win32 error codes of the service control manager (winerror.h) the logic tells apart; the
/// general ones are in [`super::code`]. The platform checks them against the SDK's values.
pub mod code {
    pub const ERROR_DEPENDENT_SERVICES_RUNNING: i32 = 1051;
    pub const ERROR_INVALID_SERVICE_CONTROL: i32 = 1052;
    pub const ERROR_SERVICE_ALREADY_RUNNING: i32 = 1056;
    pub const ERROR_SERVICE_DISABLED: i32 = 1058;
    pub const ERROR_SERVICE_DOES_NOT_EXIST: i32 = 1060;
    pub const ERROR_SERVICE_CANNOT_ACCEPT_CTRL: i32 = 1061;
    pub const ERROR_SERVICE_NOT_ACTIVE: i32 = 1062;
}

/// Service access rights (winsvc.h) the logic asks [`Scm::open`] for.
pub mod access {
    pub const SERVICE_QUERY_CONFIG: u32 = 0x0001;
    pub const SERVICE_QUERY_STATUS: u32 = 0x0004;
    pub const SERVICE_ENUMERATE_DEPENDENTS: u32 = 0x0008;
    pub const SERVICE_START: u32 = 0x0010;
    pub const SERVICE_STOP: u32 = 0x0020;
}

/// `GetSystemFirmwareTable`'s provider of the raw SMBIOS table, `'RSMB'`.
pub const RSMB: u32 = u32::from_be_bytes(*b"RSMB");

/// The fields of `SERVICE_STATUS_PROCESS` the logic reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusProcess {
    /// `dwCurrentState`: SERVICE_STOPPED (1) .. SERVICE_PAUSED (7).
    pub current_state: u32,
    /// `dwWin32ExitCode`.
    pub win32_exit_code: u32,
    /// `dwServiceSpecificExitCode`.
    pub service_specific_exit_code: u32,
}

/// The fields of `QUERY_SERVICE_CONFIGW` the logic reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceConfig {
    /// `dwStartType`: SERVICE_BOOT_START (0) .. SERVICE_DISABLED (4).
    pub start_type: u32,
    /// `lpDisplayName`; empty when null.
    pub display_name: String,
}

/// The calls the system group makes: the service control manager's and the firmware table. Each
/// method is one documented call (with only the buffer sizing around it) and interprets
/// nothing; failures are `io::Error`s that carry the Win32 code.
pub trait Scm: Send + Sync {
    /// An open SCM or service handle, closed (CloseServiceHandle) when dropped.
    type Handle;

    /// OpenSCManagerW on the local machine's active database with SC_MANAGER_CONNECT.
    fn connect(&self) -> io::Result<Self::Handle>;

    /// OpenServiceW(`scm`, `name`, `access`). `name` holds no NUL.
    fn open(&self, scm: &Self::Handle, name: &str, access: u32) -> io::Result<Self::Handle>;

    /// QueryServiceStatusEx(SC_STATUS_PROCESS_INFO); needs SERVICE_QUERY_STATUS.
    fn status(&self, service: &Self::Handle) -> io::Result<StatusProcess>;

    /// QueryServiceConfigW (size query, then the call); needs SERVICE_QUERY_CONFIG.
    fn config(&self, service: &Self::Handle) -> io::Result<ServiceConfig>;

    /// StartServiceW without arguments; needs SERVICE_START.
    fn start(&self, service: &Self::Handle) -> io::Result<()>;

    /// ControlService(SERVICE_CONTROL_STOP); needs SERVICE_STOP. The status it hands back is
    /// not used.
    fn control_stop(&self, service: &Self::Handle) -> io::Result<()>;

    /// EnumDependentServicesW(SERVICE_ACTIVE) (size query, then the call): the names of the
    /// active services that depend on this one, as the SCM lists them (the indirect ones too);
    /// needs SERVICE_ENUMERATE_DEPENDENTS.
    fn active_dependents(&self, service: &Self::Handle) -> io::Result<Vec<String>>;

    /// GetSystemFirmwareTable(`provider`, `id`): the whole table (size query, then the fetch,
    /// again if it grew in between).
    fn firmware_table(&self, provider: u32, id: u32) -> io::Result<Vec<u8>>;
}

/// Service control and machine identity over `S`.
pub struct System<S> {
    scm: S,
    /// A new clock for each wait; tests substitute virtual time.
    clock: fn() -> Box<dyn Clock>,
}

impl<S: Scm> System<S> {
    /// Waits on the real clock.
    pub fn new(scm: S) -> Self {
        Self::with_clock(scm, || Box::new(RealClock::start()))
    }

    /// Waits on the clocks `clock` makes, one per wait.
    pub fn with_clock(scm: S, clock: fn() -> Box<dyn Clock>) -> Self {
        System { scm, clock }
    }

    pub fn scm(&self) -> &S {
        &self.scm
    }

    /// The local SCM, for connecting and opening services only.
    fn manager(&self) -> Result<S::Handle> {
        self.scm.connect().map_err(|e| win32(e, "connecting to the service control manager"))
    }

    fn open(&self, scm: &S::Handle, name: &str, access: u32) -> Result<S::Handle> {
        // An embedded NUL would silently cut the name short.
        if name.contains('\0') {
            return Err(Error::invalid(format!("service name {name:?} contains a NUL character")));
        }
        self.scm.open(scm, name, access).map_err(|e| match e.raw_os_error() {
            Some(code::ERROR_SERVICE_DOES_NOT_EXIST) => Error::not_found(format!("service {name:?} not found")),
            Some(super::code::ERROR_INVALID_NAME) => Error::invalid(format!("service name {name:?} is not valid")),
            _ => win32(e, &format!("opening service {name:?}")),
        })
    }

    fn status(&self, svc: &S::Handle, name: &str) -> Result<StatusProcess> {
        self.scm.status(svc).map_err(|e| win32(e, &format!("querying the status of service {name:?}")))
    }

    fn active_dependents(&self, svc: &S::Handle, name: &str) -> Result<Vec<String>> {
        self.scm.active_dependents(svc).map_err(|e| win32(e, &format!("listing the services that depend on {name:?}")))
    }

    /// Sends the stop control and waits until the service has stopped.
    fn stop_one(&self, svc: &S::Handle, name: &str) -> Result<()> {
        if let Err(e) = self.scm.control_stop(svc) {
            match e.raw_os_error() {
                Some(code::ERROR_SERVICE_NOT_ACTIVE) => return Ok(()),
                Some(code::ERROR_DEPENDENT_SERVICES_RUNNING) => {
                    return Err(Error::precondition(format!(
                        "service {name:?} cannot be stopped: services that depend on it are running"
                    )))
                }
                Some(code::ERROR_INVALID_SERVICE_CONTROL) => {
                    return Err(Error::precondition(format!("service {name:?} does not accept stop requests")))
                }
                Some(code::ERROR_SERVICE_CANNOT_ACCEPT_CTRL) => {
                    // Already stopping is fine; any other state is not a stop we can make now.
                    let state = status_of(self.status(svc, name)?.current_state);
                    if !matches!(state, ServiceStatus::StopPending | ServiceStatus::Stopped) {
                        return Err(Error::precondition(format!(
                            "service {name:?} cannot accept a stop request while {state:?}; try again"
                        )));
                    }
                }
                _ => return Err(win32(e, &format!("stopping service {name:?}"))),
            }
        }
        self.wait_for(svc, name, ServiceStatus::Stopped, "stop")
    }

    /// Polls every [`POLL_INTERVAL`] for at most [`WAIT_TIMEOUT`] until the service is in `want`.
    /// Waiting for Running gives up early when the service falls back to Stopped after having
    /// been seen pending (it failed to start), naming its exit code.
    fn wait_for(&self, svc: &S::Handle, name: &str, want: ServiceStatus, goal: &str) -> Result<()> {
        let mut seen_pending = false;
        let mut last = ServiceStatus::Unknown;
        let done = poll_until(&mut *(self.clock)(), POLL_INTERVAL, WAIT_TIMEOUT, || {
            let st = self.status(svc, name)?;
            last = status_of(st.current_state);
            if last == want {
                return Ok(Some(()));
            }
            if want == ServiceStatus::Running {
                if last == ServiceStatus::StartPending {
                    seen_pending = true;
                } else if last == ServiceStatus::Stopped && (seen_pending || st.win32_exit_code != 0) {
                    return Err(Error::internal(format!(
                        "service {name:?} stopped while starting (exit code {}, service-specific code {})",
                        st.win32_exit_code, st.service_specific_exit_code
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
}

impl<S: Scm> SystemHost for System<S> {
    fn get_bios_serial_number(&self) -> Result<String> {
        let raw = self.scm.firmware_table(RSMB, 0).map_err(|e| win32(e, "reading the SMBIOS firmware table"))?;
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

    fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        use access::*;
        let scm = self.manager()?;
        let svc = self.open(&scm, name, SERVICE_QUERY_CONFIG | SERVICE_QUERY_STATUS)?;
        let config =
            self.scm.config(&svc).map_err(|e| win32(e, &format!("querying the configuration of service {name:?}")))?;
        let status = self.status(&svc, name)?;
        Ok(ServiceInfo {
            display_name: config.display_name,
            start_type: start_type_of(config.start_type),
            status: status_of(status.current_state),
        })
    }

    /// Already running is success. Waits (at most [`WAIT_TIMEOUT`]) until the service runs.
    fn start_service(&self, name: &str) -> Result<()> {
        use access::*;
        let scm = self.manager()?;
        let svc = self.open(&scm, name, SERVICE_START | SERVICE_QUERY_STATUS)?;
        let state = status_of(self.status(&svc, name)?.current_state);
        match state {
            ServiceStatus::Running => return Ok(()),
            ServiceStatus::Paused | ServiceStatus::PausePending => {
                return Err(Error::precondition(format!(
                    "service {name:?} is {state:?}: continue it rather than start it"
                )));
            }
            ServiceStatus::StopPending => {
                // It cannot be started before it has stopped.
                self.wait_for(&svc, name, ServiceStatus::Stopped, "stop")?;
            }
            _ => {}
        }
        // Already on its way to Running: only wait.
        if !matches!(state, ServiceStatus::StartPending | ServiceStatus::ContinuePending) {
            if let Err(e) = self.scm.start(&svc) {
                match e.raw_os_error() {
                    Some(code::ERROR_SERVICE_ALREADY_RUNNING) => {}
                    Some(code::ERROR_SERVICE_DISABLED) => {
                        return Err(Error::precondition(format!("service {name:?} is disabled and cannot be started")))
                    }
                    _ => return Err(win32(e, &format!("starting service {name:?}"))),
                }
            }
        }
        self.wait_for(&svc, name, ServiceStatus::Running, "become running")
    }

    /// Already stopped is success. Running dependents make a plain stop fail; with `force` they
    /// are stopped first, each after its own dependents, then the service. Each stop waits (at
    /// most [`WAIT_TIMEOUT`]) until the service has stopped.
    fn stop_service(&self, name: &str, force: bool, may_stop: &dyn Fn(&str) -> bool) -> Result<()> {
        use access::*;
        let scm = self.manager()?;
        let svc = self.open(&scm, name, SERVICE_STOP | SERVICE_QUERY_STATUS | SERVICE_ENUMERATE_DEPENDENTS)?;
        if status_of(self.status(&svc, name)?.current_state) == ServiceStatus::Stopped {
            return Ok(());
        }
        let order = stop_order(name, same_scm_name, |n| {
            if same_scm_name(n, name) {
                self.active_dependents(&svc, name)
            } else {
                match self.open(&scm, n, SERVICE_ENUMERATE_DEPENDENTS) {
                    Ok(dep) => self.active_dependents(&dep, n),
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
            match self.open(&scm, dep, SERVICE_STOP | SERVICE_QUERY_STATUS) {
                Ok(d) => self.stop_one(&d, dep)?,
                Err(Error::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        self.stop_one(&svc, name)
    }
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

/// A failed call while doing `what`, classified by its Win32 code.
fn win32(e: io::Error, what: &str) -> Error {
    let msg = format!("{what}: {e}");
    match e.raw_os_error() {
        Some(super::code::ERROR_ACCESS_DENIED) => Error::PermissionDenied(msg),
        Some(code::ERROR_SERVICE_DOES_NOT_EXIST) => Error::NotFound(msg),
        _ => Error::Internal(msg),
    }
}

#[cfg(test)]
mod tests {
    use super::access::*;
    use super::code::*;
    use super::*;
    use crate::services::any_service;
    use crate::services::tests::FakeClock;
    use crate::windows::code::{ERROR_ACCESS_DENIED, ERROR_INVALID_NAME};
    use crate::windows::os_error;
    use std::collections::{BTreeMap, VecDeque};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    const STOPPED: u32 = 1;
    const START_PENDING: u32 = 2;
    const STOP_PENDING: u32 = 3;
    const RUNNING: u32 = 4;
    const CONTINUE_PENDING: u32 = 5;
    const PAUSE_PENDING: u32 = 6;
    const PAUSED: u32 = 7;

    /// Status queries in one wait that runs out: every 200 ms for 30 s, plus the first and the
    /// last check.
    const POLLS_UNTIL_TIMEOUT: usize = 151;

    /// One simulated service.
    #[derive(Clone)]
    struct Svc {
        display: String,
        start_type: u32,
        /// What the status queries see, one state per query; the last one sticks.
        states: VecDeque<u32>,
        /// dwWin32ExitCode, dwServiceSpecificExitCode.
        exit: (u32, u32),
        /// The services that depend on this one directly. A name the SCM does not know is
        /// still listed (a dependent that went away after the listing).
        dependents: Vec<String>,
        /// What the status queries see after a successful start / stop control.
        after_start: Vec<u32>,
        after_stop: Vec<u32>,
        /// The error StartServiceW / ControlService answer with.
        start_error: Option<i32>,
        stop_error: Option<i32>,
    }

    impl Svc {
        fn new(state: u32) -> Self {
            Svc {
                display: String::new(),
                start_type: 3,
                states: [state].into(),
                exit: (0, 0),
                dependents: Vec::new(),
                after_start: vec![RUNNING],
                after_stop: vec![STOPPED],
                start_error: None,
                stop_error: None,
            }
        }
        fn states(mut self, s: &[u32]) -> Self {
            self.states = s.iter().copied().collect();
            self
        }
        fn dependents(mut self, d: &[&str]) -> Self {
            self.dependents = d.iter().map(|s| s.to_string()).collect();
            self
        }
        fn after_start(mut self, s: &[u32]) -> Self {
            self.after_start = s.to_vec();
            self
        }
        fn after_stop(mut self, s: &[u32]) -> Self {
            self.after_stop = s.to_vec();
            self
        }
        fn state(&self) -> u32 {
            self.states[0]
        }
    }

    /// A simulated service control manager. Names are case-insensitive; a call whose handle was
    /// not opened with the right it needs is ERROR_ACCESS_DENIED, starting a disabled or running
    /// service and stopping a stopped one or one with active dependents fail as on Windows. Every
    /// call is logged, and open handles are counted.
    #[derive(Default)]
    struct FakeScm {
        services: Mutex<BTreeMap<String, Svc>>,
        connect_error: Option<i32>,
        firmware: Option<std::result::Result<Vec<u8>, i32>>,
        log: Mutex<Vec<String>>,
        handles: Arc<AtomicUsize>,
    }

    /// The SCM (no service) or a service with the access it was opened with.
    struct FakeHandle {
        service: Option<(String, u32)>,
        handles: Arc<AtomicUsize>,
    }

    impl Drop for FakeHandle {
        fn drop(&mut self) {
            self.handles.fetch_sub(1, Ordering::SeqCst);
        }
    }

    impl FakeScm {
        fn with(services: Vec<(&str, Svc)>) -> Self {
            let f = FakeScm::default();
            f.services.lock().unwrap().extend(services.into_iter().map(|(n, s)| (n.to_string(), s)));
            f
        }

        fn log(&self, line: String) {
            self.log.lock().unwrap().push(line);
        }

        fn state(&self, name: &str) -> u32 {
            self.services.lock().unwrap()[name].state()
        }

        /// Calls made whose line starts with `prefix`.
        fn calls(&self, prefix: &str) -> Vec<String> {
            self.log.lock().unwrap().iter().filter(|l| l.starts_with(prefix)).cloned().collect()
        }

        /// The service of `h`, checked for `right`, and its name.
        fn with_service<T>(
            &self,
            h: &FakeHandle,
            right: u32,
            verb: &str,
            f: impl FnOnce(&mut BTreeMap<String, Svc>, &str) -> io::Result<T>,
        ) -> io::Result<T> {
            let (name, access) = h.service.clone().expect("a service handle, not the SCM's");
            self.log(format!("{verb} {name}"));
            if access & right == 0 {
                return Err(os_error(ERROR_ACCESS_DENIED));
            }
            f(&mut self.services.lock().unwrap(), &name)
        }
    }

    /// All dependents of `name`, direct and indirect, the way EnumDependentServicesW lists
    /// them; those the SCM knows only when active.
    fn active_dependents_of(services: &BTreeMap<String, Svc>, name: &str, known_only: bool) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut todo = vec![name.to_string()];
        while let Some(n) = todo.pop() {
            for d in services.get(&n).map(|s| s.dependents.clone()).unwrap_or_default() {
                if d == name || out.contains(&d) {
                    continue;
                }
                match services.get(&d) {
                    Some(s) if s.state() != STOPPED => out.push(d.clone()),
                    Some(_) => {}
                    None if !known_only => out.push(d.clone()),
                    None => {}
                }
                todo.push(d);
            }
        }
        out
    }

    impl Scm for FakeScm {
        type Handle = FakeHandle;

        fn connect(&self) -> io::Result<FakeHandle> {
            self.log("connect".into());
            if let Some(code) = self.connect_error {
                return Err(os_error(code));
            }
            self.handles.fetch_add(1, Ordering::SeqCst);
            Ok(FakeHandle { service: None, handles: self.handles.clone() })
        }

        fn open(&self, scm: &FakeHandle, name: &str, access: u32) -> io::Result<FakeHandle> {
            assert!(scm.service.is_none(), "services are opened through the SCM's handle");
            assert!(!name.contains('\0'), "the logic refuses NULs");
            self.log(format!("open {name} {access:#x}"));
            if name.contains('\\') || name.contains('/') {
                return Err(os_error(ERROR_INVALID_NAME));
            }
            let services = self.services.lock().unwrap();
            let canonical = services.keys().find(|k| same_scm_name(k, name)).cloned();
            let canonical = canonical.ok_or_else(|| os_error(ERROR_SERVICE_DOES_NOT_EXIST))?;
            self.handles.fetch_add(1, Ordering::SeqCst);
            Ok(FakeHandle { service: Some((canonical, access)), handles: self.handles.clone() })
        }

        fn status(&self, h: &FakeHandle) -> io::Result<StatusProcess> {
            self.with_service(h, SERVICE_QUERY_STATUS, "status", |services, name| {
                let s = services.get_mut(name).unwrap();
                let state = if s.states.len() > 1 { s.states.pop_front().unwrap() } else { s.state() };
                Ok(StatusProcess {
                    current_state: state,
                    win32_exit_code: s.exit.0,
                    service_specific_exit_code: s.exit.1,
                })
            })
        }

        fn config(&self, h: &FakeHandle) -> io::Result<ServiceConfig> {
            self.with_service(h, SERVICE_QUERY_CONFIG, "config", |services, name| {
                let s = &services[name];
                Ok(ServiceConfig { start_type: s.start_type, display_name: s.display.clone() })
            })
        }

        fn start(&self, h: &FakeHandle) -> io::Result<()> {
            self.with_service(h, SERVICE_START, "start", |services, name| {
                let s = services.get_mut(name).unwrap();
                if let Some(code) = s.start_error {
                    return Err(os_error(code));
                }
                if s.start_type == 4 {
                    return Err(os_error(ERROR_SERVICE_DISABLED));
                }
                if s.state() != STOPPED {
                    return Err(os_error(ERROR_SERVICE_ALREADY_RUNNING));
                }
                s.states = s.after_start.iter().copied().collect();
                Ok(())
            })
        }

        fn control_stop(&self, h: &FakeHandle) -> io::Result<()> {
            self.with_service(h, SERVICE_STOP, "stop", |services, name| {
                if let Some(code) = services[name].stop_error {
                    return Err(os_error(code));
                }
                if services[name].state() == STOPPED {
                    return Err(os_error(ERROR_SERVICE_NOT_ACTIVE));
                }
                if !active_dependents_of(services, name, true).is_empty() {
                    return Err(os_error(ERROR_DEPENDENT_SERVICES_RUNNING));
                }
                let s = services.get_mut(name).unwrap();
                s.states = s.after_stop.iter().copied().collect();
                Ok(())
            })
        }

        fn active_dependents(&self, h: &FakeHandle) -> io::Result<Vec<String>> {
            self.with_service(h, SERVICE_ENUMERATE_DEPENDENTS, "dependents", |services, name| {
                Ok(active_dependents_of(services, name, false))
            })
        }

        fn firmware_table(&self, provider: u32, id: u32) -> io::Result<Vec<u8>> {
            self.log(format!("firmware {provider:#x} {id}"));
            match &self.firmware {
                Some(Ok(raw)) => Ok(raw.clone()),
                Some(Err(code)) => Err(os_error(*code)),
                None => Err(os_error(crate::windows::code::ERROR_INVALID_FUNCTION)),
            }
        }
    }

    /// The logic over `scm`, waiting on virtual time.
    fn system(scm: FakeScm) -> System<FakeScm> {
        System::with_clock(scm, || Box::new(FakeClock::default()))
    }

    /// Every handle was closed.
    fn closed(sys: &System<FakeScm>) {
        assert_eq!(sys.scm().handles.load(Ordering::SeqCst), 0, "handles left open");
    }

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
        assert!(same_scm_name("Spooler", "SPOOLER") && same_scm_name("ÄÖ", "äö"));
        assert!(!same_scm_name("straße", "STRASSE") && !same_scm_name("a", "b") && !same_scm_name("a", "ab"));
        assert_eq!(RSMB, 0x5253_4d42);
    }

    #[test]
    fn service_info_from_config_and_status() {
        let mut spooler = Svc::new(RUNNING);
        spooler.display = "Print Spooler".into();
        let mut odd = Svc::new(9);
        odd.start_type = 9;
        let sys = system(FakeScm::with(vec![("Spooler", spooler), ("Odd", odd)]));
        let info = sys.get_service("spooler").unwrap();
        assert_eq!(
            info,
            ServiceInfo {
                display_name: "Print Spooler".into(),
                start_type: StartType::Manual,
                status: ServiceStatus::Running
            }
        );
        assert_eq!(*sys.scm().log.lock().unwrap(), ["connect", "open spooler 0x5", "config Spooler", "status Spooler"]);
        let odd = sys.get_service("Odd").unwrap();
        assert_eq!((odd.start_type, odd.status), (StartType::Boot, ServiceStatus::Unknown));
        closed(&sys);
    }

    #[test]
    fn not_found_invalid_and_denied() {
        let sys = system(FakeScm::with(vec![("Spooler", Svc::new(RUNNING))]));
        let name = "csi-proxy-no-such-service";
        for r in [
            sys.get_service(name).map(drop),
            sys.start_service(name),
            sys.stop_service(name, false, &any_service),
            sys.stop_service(name, true, &any_service),
        ] {
            assert!(matches!(&r, Err(Error::NotFound(m)) if m == &format!("service {name:?} not found")), "{r:?}");
        }
        assert_eq!(sys.scm().calls("status").len(), 0);
        // A NUL would cut the name short: refused before the SCM sees it.
        let e = sys.get_service("Spooler\0x").unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("NUL")), "{e:?}");
        assert_eq!(sys.scm().calls("open").len(), 4);
        let e = sys.start_service("a\\b").unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("\"a\\\\b\" is not valid")), "{e:?}");
        closed(&sys);

        let scm = FakeScm { connect_error: Some(ERROR_ACCESS_DENIED), ..FakeScm::default() };
        let sys = system(scm);
        let e = sys.stop_service("Spooler", false, &any_service).unwrap_err();
        assert!(
            matches!(&e, Error::PermissionDenied(m) if m.starts_with("connecting to the service control manager: "))
        );
        closed(&sys);
    }

    #[test]
    fn start_of_a_running_service_is_ok_and_starts_nothing() {
        let sys = system(FakeScm::with(vec![("Spooler", Svc::new(RUNNING))]));
        sys.start_service("SPOOLER").unwrap();
        assert_eq!(*sys.scm().log.lock().unwrap(), ["connect", "open SPOOLER 0x14", "status Spooler"]);
        closed(&sys);
    }

    #[test]
    fn start_waits_until_running() {
        let svc = Svc::new(STOPPED).after_start(&[START_PENDING, START_PENDING, RUNNING]);
        let sys = system(FakeScm::with(vec![("Spooler", svc)]));
        sys.start_service("Spooler").unwrap();
        assert_eq!(sys.scm().state("Spooler"), RUNNING);
        assert_eq!(sys.scm().calls("start"), ["start Spooler"]);
        assert_eq!(sys.scm().calls("status").len(), 4, "one check, then three polls");
        closed(&sys);
    }

    #[test]
    fn start_of_a_stopping_or_starting_service() {
        // Still stopping: waited for, then started.
        let svc = Svc::new(STOP_PENDING).states(&[STOP_PENDING, STOP_PENDING, STOPPED]);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        sys.start_service("S").unwrap();
        assert_eq!(sys.scm().state("S"), RUNNING);
        assert_eq!(sys.scm().calls("start").len(), 1);
        // Already on its way: only waited for.
        for state in [START_PENDING, CONTINUE_PENDING] {
            let svc = Svc::new(state).states(&[state, state, RUNNING]);
            let sys = system(FakeScm::with(vec![("S", svc)]));
            sys.start_service("S").unwrap();
            assert!(sys.scm().calls("start").is_empty());
            assert_eq!(sys.scm().calls("status").len(), 3);
            closed(&sys);
        }
        // Started by someone else in between: ERROR_SERVICE_ALREADY_RUNNING, still waited for.
        let mut svc = Svc::new(STOPPED).states(&[STOPPED, START_PENDING, RUNNING]);
        svc.start_error = Some(ERROR_SERVICE_ALREADY_RUNNING);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        sys.start_service("S").unwrap();
        assert_eq!(sys.scm().calls("status").len(), 3);
        closed(&sys);
    }

    #[test]
    fn start_refusals() {
        for state in [PAUSED, PAUSE_PENDING] {
            let sys = system(FakeScm::with(vec![("S", Svc::new(state))]));
            let e = sys.start_service("S").unwrap_err();
            assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("continue it")), "{e:?}");
            assert!(sys.scm().calls("start").is_empty());
        }
        let mut disabled = Svc::new(STOPPED);
        disabled.start_type = 4;
        let mut denied = Svc::new(STOPPED);
        denied.start_error = Some(ERROR_ACCESS_DENIED);
        let sys = system(FakeScm::with(vec![("Off", disabled), ("Denied", denied)]));
        let e = sys.start_service("Off").unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(m) if m == "service \"Off\" is disabled and cannot be started"));
        assert_eq!(sys.scm().state("Off"), STOPPED);
        let e = sys.start_service("Denied").unwrap_err();
        assert!(matches!(&e, Error::PermissionDenied(m) if m.starts_with("starting service \"Denied\": ")), "{e:?}");
        closed(&sys);
    }

    #[test]
    fn start_failures_and_timeouts() {
        // Seen pending, then stopped: failed to start, with its exit codes.
        let mut svc = Svc::new(STOPPED).after_start(&[START_PENDING, STOPPED]);
        svc.exit = (1067, 42);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        let e = sys.start_service("S").unwrap_err();
        assert!(
            matches!(&e, Error::Internal(m) if m.contains("stopped while starting (exit code 1067, service-specific code 42)")),
            "{e:?}"
        );
        // Stopped at once with an exit code: failed as well, without waiting.
        let mut svc = Svc::new(STOPPED);
        svc.after_start = vec![STOPPED];
        svc.exit = (1053, 0);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        let e = sys.start_service("S").unwrap_err();
        assert!(matches!(&e, Error::Internal(m) if m.contains("exit code 1053")), "{e:?}");
        assert_eq!(sys.scm().calls("status").len(), 2);
        // Stuck pending, or still stopped without an exit code: waited for 30 s, then given up.
        for (after, still) in [(START_PENDING, "StartPending"), (STOPPED, "Stopped")] {
            let sys = system(FakeScm::with(vec![("S", Svc::new(STOPPED).after_start(&[after]))]));
            let e = sys.start_service("S").unwrap_err();
            let want = format!("timed out waiting for service \"S\" to become running (still {still} after 30s)");
            assert!(matches!(&e, Error::Internal(m) if *m == want), "{e:?}");
            assert_eq!(sys.scm().calls("status").len(), 1 + POLLS_UNTIL_TIMEOUT);
            closed(&sys);
        }
    }

    #[test]
    fn stop_of_a_stopped_service_is_ok_and_stops_nothing() {
        let sys = system(FakeScm::with(vec![("S", Svc::new(STOPPED).dependents(&["D"])), ("D", Svc::new(STOPPED))]));
        sys.stop_service("S", false, &any_service).unwrap();
        sys.stop_service("S", true, &any_service).unwrap();
        assert!(sys.scm().calls("stop").is_empty() && sys.scm().calls("dependents").is_empty());
        assert_eq!(sys.scm().calls("open"), ["open S 0x2c", "open S 0x2c"]);
        closed(&sys);
    }

    /// iscsi <- mid <- leaf (leaf also depends on iscsi directly), iscsi <- off (stopped),
    /// iscsi <- other.
    fn graph() -> FakeScm {
        FakeScm::with(vec![
            (
                "iscsi",
                Svc::new(RUNNING).dependents(&["mid", "off", "other", "leaf"]).after_stop(&[STOP_PENDING, STOPPED]),
            ),
            ("mid", Svc::new(RUNNING).dependents(&["leaf"])),
            ("leaf", Svc::new(START_PENDING)),
            ("off", Svc::new(STOPPED).dependents(&["mid"])),
            ("other", Svc::new(RUNNING)),
        ])
    }

    #[test]
    fn stop_with_running_dependents_without_force_names_them() {
        let sys = system(graph());
        let e = sys.stop_service("ISCSI", false, &any_service).unwrap_err();
        assert!(
            matches!(&e, Error::FailedPrecondition(m)
                if m.starts_with("service \"ISCSI\" cannot be stopped") && m.contains(": leaf, mid, other;")),
            "{e:?}"
        );
        assert!(sys.scm().calls("stop").is_empty(), "nothing stopped without force");
        assert_eq!(sys.scm().state("iscsi"), RUNNING);
        closed(&sys);
    }

    #[test]
    fn forced_stop_stops_dependents_first() {
        let sys = system(graph());
        sys.stop_service("iscsi", true, &any_service).unwrap();
        assert_eq!(sys.scm().calls("stop"), ["stop leaf", "stop mid", "stop other", "stop iscsi"]);
        for s in ["iscsi", "mid", "leaf", "off", "other"] {
            assert_eq!(sys.scm().state(s), STOPPED, "{s}");
        }
        // The root with everything it needs, dependents just for listing, then stop and query.
        assert_eq!(sys.scm().calls("open iscsi"), ["open iscsi 0x2c"]);
        assert_eq!(sys.scm().calls("open mid"), ["open mid 0x8", "open mid 0x24"]);
        closed(&sys);

        // A dependent refused by may_stop: nothing is stopped.
        let sys = system(graph());
        let e = sys.stop_service("iscsi", true, &|s| s != "mid").unwrap_err();
        assert!(matches!(&e, Error::PermissionDenied(m) if m.contains("would also stop mid,")), "{e:?}");
        assert!(sys.scm().calls("stop").is_empty());
        closed(&sys);

        // A dependent gone between the listing and the opening is skipped.
        let sys =
            system(FakeScm::with(vec![("S", Svc::new(RUNNING).dependents(&["gone", "D"])), ("D", Svc::new(RUNNING))]));
        sys.stop_service("S", true, &any_service).unwrap();
        assert_eq!(sys.scm().calls("stop"), ["stop D", "stop S"]);
        closed(&sys);
    }

    #[test]
    fn stop_errors_and_timeouts() {
        // Stopped by someone else in between: done, nothing to wait for.
        let mut svc = Svc::new(RUNNING);
        svc.stop_error = Some(ERROR_SERVICE_NOT_ACTIVE);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        sys.stop_service("S", false, &any_service).unwrap();
        assert_eq!(sys.scm().calls("status").len(), 1);

        for (code, needle) in [
            (ERROR_INVALID_SERVICE_CONTROL, "service \"S\" does not accept stop requests"),
            (ERROR_DEPENDENT_SERVICES_RUNNING, "services that depend on it are running"),
        ] {
            let mut svc = Svc::new(RUNNING);
            svc.stop_error = Some(code);
            let sys = system(FakeScm::with(vec![("S", svc)]));
            let e = sys.stop_service("S", false, &any_service).unwrap_err();
            assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains(needle)), "{e:?}");
        }

        // Cannot accept the control: fine while it is already stopping, refused while starting.
        let mut svc = Svc::new(RUNNING).states(&[RUNNING, STOP_PENDING, STOP_PENDING, STOPPED]);
        svc.stop_error = Some(ERROR_SERVICE_CANNOT_ACCEPT_CTRL);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        sys.stop_service("S", false, &any_service).unwrap();
        assert_eq!(sys.scm().state("S"), STOPPED);
        let mut svc = Svc::new(START_PENDING);
        svc.stop_error = Some(ERROR_SERVICE_CANNOT_ACCEPT_CTRL);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        let e = sys.stop_service("S", false, &any_service).unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("while StartPending; try again")), "{e:?}");

        let mut svc = Svc::new(RUNNING);
        svc.stop_error = Some(ERROR_ACCESS_DENIED);
        let sys = system(FakeScm::with(vec![("S", svc)]));
        let e = sys.stop_service("S", false, &any_service).unwrap_err();
        assert!(matches!(&e, Error::PermissionDenied(m) if m.starts_with("stopping service \"S\": ")), "{e:?}");

        // Stuck stopping: given up after 30 s.
        let sys = system(FakeScm::with(vec![("S", Svc::new(RUNNING).after_stop(&[STOP_PENDING]))]));
        let e = sys.stop_service("S", false, &any_service).unwrap_err();
        assert!(
            matches!(&e, Error::Internal(m) if m == "timed out waiting for service \"S\" to stop (still StopPending after 30s)"),
            "{e:?}"
        );
        assert_eq!(sys.scm().calls("status").len(), 1 + POLLS_UNTIL_TIMEOUT);
        closed(&sys);
    }

    /// A RawSMBIOSData with a type 1 structure whose serial is string `serial_index` of
    /// `strings`, and the end of the table.
    fn smbios_raw(serial_index: u8, strings: &[&str]) -> Vec<u8> {
        let mut t = vec![1, 8, 0, 1, 1, 2, 3, serial_index];
        for s in strings {
            t.extend_from_slice(s.as_bytes());
            t.push(0);
        }
        t.extend_from_slice(if strings.is_empty() { &[0, 0] } else { &[0] });
        t.extend_from_slice(&[127, 4, 0xff, 0xfe, 0, 0]);
        let mut raw = vec![0, 3, 4, 0];
        raw.extend_from_slice(&(t.len() as u32).to_le_bytes());
        raw.extend_from_slice(&t);
        raw
    }

    #[test]
    fn bios_serial_number_from_the_smbios_table() {
        let firmware = |f| system(FakeScm { firmware: Some(f), ..FakeScm::default() });
        let sys = firmware(Ok(smbios_raw(4, &["ACME", "Box", "v1", "  SN-123 "])));
        assert_eq!(sys.get_bios_serial_number().unwrap(), "SN-123");
        assert_eq!(*sys.scm().log.lock().unwrap(), ["firmware 0x52534d42 0"]);

        let e = firmware(Ok(smbios_raw(0, &[]))).get_bios_serial_number().unwrap_err();
        assert!(matches!(&e, Error::NotFound(m) if m.contains("no system serial number")), "{e:?}");
        let e = firmware(Ok(vec![0, 3, 4, 0, 99, 0, 0, 0])).get_bios_serial_number().unwrap_err();
        assert!(matches!(&e, Error::Internal(m) if m.starts_with("reading the BIOS serial number: ")), "{e:?}");
        let e = firmware(Err(ERROR_ACCESS_DENIED)).get_bios_serial_number().unwrap_err();
        assert!(
            matches!(&e, Error::PermissionDenied(m) if m.starts_with("reading the SMBIOS firmware table: ")),
            "{e:?}"
        );
    }
}
