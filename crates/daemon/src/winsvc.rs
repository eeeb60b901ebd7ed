//! `-windows-service`: run under the Windows service control manager as `csiproxy`, the name
//! upstream's install line registers (`sc.exe create csiproxy ...`).
//!
//! Unlike upstream, Stop and Shutdown really stop the daemon: the endpoints stop accepting,
//! open calls get a short drain, then the service reports Stopped and the process exits.
//!
//! A node's shutdown: the service accepts SERVICE_CONTROL_PRESHUTDOWN (SERVICE_ACCEPT_PRESHUTDOWN)
//! instead of SERVICE_CONTROL_SHUTDOWN. The Handler page: the SCM sends PRESHUTDOWN first, to the
//! services that accept it, and "a service that handles this notification blocks system shutdown
//! until the service stops or the preshutdown time-out interval specified through
//! SERVICE_PRESHUTDOWN_INFO expires"; SHUTDOWN gives a service only a short, fixed time. With
//! graceful node shutdown (KEP-4802) the kubelet, a service too, takes PRESHUTDOWN to stop its pods,
//! and their volumes are unpublished and unstaged through this daemon: so on PRESHUTDOWN the daemon
//! keeps serving until the `kubelet` service reports Stopped (or is not installed), for at most
//! `-preshutdown-wait`, then drains as for Stop. While it waits it reports StopPending with a
//! checkpoint raised at every poll (SERVICE_STATUS: "the service increments this value
//! periodically to report its progress during a lengthy ... stop ... operation"). At every start
//! it sets its own preshutdown timeout to `-preshutdown-wait` plus the drain's deadline through
//! ChangeServiceConfig2 with SERVICE_CONFIG_PRESHUTDOWN_INFO (the default is 10 s on current
//! Windows, too short for the kubelet's grace period).

use crate::flags::Options;
use csi_proxy_sync::LockExt;
use std::ffi::OsString;
use std::sync::Mutex;
use std::time::Duration;
use windows_service::service::{
    ServiceControl, ServiceControlAccept, ServiceExitCode, ServiceState, ServiceStatus, ServiceType,
};
use windows_service::service_control_handler::{self, ServiceControlHandlerResult, ServiceStatusHandle};
use windows_service::{define_windows_service, service_dispatcher};

pub const SERVICE_NAME: &str = "csiproxy";

/// The dispatcher calls `service_main` on its own thread with no way to pass data, so the
/// parsed options wait here.
static OPTIONS: Mutex<Option<Options>> = Mutex::new(None);

define_windows_service!(ffi_service_main, service_main);

/// Hands the process to the SCM; returns when the service has stopped.
pub fn run(opts: Options) -> anyhow::Result<()> {
    *OPTIONS.lock_ignoring_poison() = Some(opts);
    service_dispatcher::start(SERVICE_NAME, ffi_service_main).map_err(|e| {
        anyhow::anyhow!(
            "-windows-service: cannot connect to the service control manager as service {SERVICE_NAME:?} \
             (was the process started by the SCM?): {e}"
        )
    })
}

fn service_main(_args: Vec<OsString>) {
    if let Err(e) = run_service() {
        tracing::error!("service {SERVICE_NAME} failed: {}", crate::startup::error_chain(&e));
    }
}

/// What the service control manager asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StopKind {
    Stop,
    Shutdown,
    Preshutdown,
}

fn run_service() -> anyhow::Result<()> {
    let opts = OPTIONS.lock_ignoring_poison().take().ok_or_else(|| anyhow::anyhow!("service started twice"))?;
    let preshutdown_wait = opts.preshutdown_wait;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<StopKind>();
    let stop_tx = Mutex::new(Some(stop_tx));
    let handler = move |control| match control {
        ServiceControl::Stop | ServiceControl::Shutdown | ServiceControl::Preshutdown => {
            let kind = match control {
                ServiceControl::Stop => StopKind::Stop,
                ServiceControl::Shutdown => StopKind::Shutdown,
                _ => StopKind::Preshutdown,
            };
            // The first one decides; a later one (a Stop during the preshutdown wait) changes
            // nothing: the wait is bounded anyway.
            if let Some(tx) = stop_tx.lock_ignoring_poison().take() {
                let _ = tx.send(kind);
            }
            ServiceControlHandlerResult::NoError
        }
        ServiceControl::Interrogate | ServiceControl::ParamChange => ServiceControlHandlerResult::NoError,
        _ => ServiceControlHandlerResult::NotImplemented,
    };
    let status = service_control_handler::register(SERVICE_NAME, handler)?;
    set_preshutdown_timeout(preshutdown_wait + crate::DRAIN_DEADLINE);
    report(
        status,
        ServiceState::StartPending,
        ServiceControlAccept::empty(),
        ServiceExitCode::NO_ERROR,
        Duration::from_secs(10),
    )?;
    // Running only once every pipe exists, so that a dependent service (or `sc start` followed by
    // a client) never finds a pipe missing. If a pipe cannot be created, Running is never
    // reported: the service goes from StartPending to Stopped with service-specific exit code 1.
    let running = move || {
        // ParamChange is accepted, as upstream does, and ignored: there is nothing to reload.
        // PRESHUTDOWN, not SHUTDOWN: see the module documentation.
        let accepted = ACCEPTED;
        if let Err(e) = report(status, ServiceState::Running, accepted, ServiceExitCode::NO_ERROR, Duration::ZERO) {
            tracing::warn!("reporting Running to the service control manager: {e}");
        }
    };
    let stopping = move || {
        // Draining is bounded (crate::DRAIN_DEADLINE, after which the process exits); the hint covers it.
        let hint = crate::DRAIN_DEADLINE;
        if let Err(e) =
            report(status, ServiceState::StopPending, ServiceControlAccept::empty(), ServiceExitCode::NO_ERROR, hint)
        {
            tracing::warn!("reporting StopPending to the service control manager: {e}");
        }
    };
    let result = crate::run_until(opts, running, async move {
        let kind = stop_rx.await.unwrap_or(StopKind::Stop);
        tracing::info!(control = ?kind, "stop requested by the service control manager");
        if kind == StopKind::Preshutdown {
            // Blocking SCM queries and sleeps, on a thread of their own; serving goes on meanwhile.
            let waited = tokio::task::spawn_blocking(move || {
                let progress = |n: u32| {
                    if let Err(e) = status.set_service_status(pending_status(n, PRESHUTDOWN_POLL * 4)) {
                        tracing::warn!("reporting StopPending to the service control manager: {e}");
                    }
                };
                wait_for_kubelet(
                    &mut ScmStates::default(),
                    preshutdown_wait,
                    PRESHUTDOWN_POLL,
                    &mut RealClock,
                    progress,
                )
            })
            .await;
            match waited {
                Ok(end) => {
                    tracing::info!(kubelet = %end, waited_at_most = ?preshutdown_wait, "node shutdown: stopping now")
                }
                Err(e) => tracing::warn!(error = %e, "node shutdown: the wait for the kubelet failed; stopping now"),
            }
        }
        stopping();
    });
    if let Err(e) = &result {
        tracing::error!("{}", crate::startup::error_chain(e));
    }
    report(status, ServiceState::Stopped, ServiceControlAccept::empty(), exit_code(result.is_err()), Duration::ZERO)?;
    result
}

/// The exit code the Stopped report carries. A failure is service-specific code 1: SetServiceStatus
/// takes it in dwServiceSpecificExitCode only when dwWin32ExitCode is ERROR_SERVICE_SPECIFIC_ERROR
/// (1066), which is what `ServiceSpecific` sets. `Win32(1)` would claim ERROR_INVALID_FUNCTION, and
/// the event log and `sc query` would name that. Either way the SCM sees a failure (non-zero).
fn exit_code(failed: bool) -> ServiceExitCode {
    if failed {
        ServiceExitCode::ServiceSpecific(1)
    } else {
        ServiceExitCode::NO_ERROR
    }
}

/// The controls a running service accepts.
const ACCEPTED: ServiceControlAccept =
    ServiceControlAccept::STOP.union(ServiceControlAccept::PRESHUTDOWN).union(ServiceControlAccept::PARAM_CHANGE);

/// How often the preshutdown wait asks for the kubelet's state.
const PRESHUTDOWN_POLL: Duration = Duration::from_secs(1);

/// The service the daemon outlives at a node's shutdown (the kubelet's own service name, as
/// kubelet's `--windows-service` registers it).
pub const KUBELET_SERVICE: &str = "kubelet";

/// StopPending with checkpoint `n` (the preshutdown wait's progress) and `hint`.
fn pending_status(n: u32, hint: Duration) -> ServiceStatus {
    ServiceStatus {
        service_type: ServiceType::OWN_PROCESS,
        current_state: ServiceState::StopPending,
        controls_accepted: ServiceControlAccept::empty(),
        exit_code: ServiceExitCode::NO_ERROR,
        checkpoint: n,
        wait_hint: hint,
        process_id: None,
    }
}

/// Sets this service's preshutdown timeout (ChangeServiceConfig2, SERVICE_CONFIG_PRESHUTDOWN_INFO,
/// which needs SERVICE_CHANGE_CONFIG on the service: LocalSystem, which services run as, has it).
/// A failure is logged: the node's shutdown then waits only the timeout configured already.
fn set_preshutdown_timeout(timeout: Duration) {
    use windows_service::service::ServiceAccess;
    use windows_service::service_manager::{ServiceManager, ServiceManagerAccess};
    // The field is milliseconds in a DWORD: at most about 49 days.
    let timeout = timeout.min(Duration::from_millis(u64::from(u32::MAX)));
    let set = ServiceManager::local_computer(None::<&str>, ServiceManagerAccess::CONNECT)
        .and_then(|m| m.open_service(SERVICE_NAME, ServiceAccess::CHANGE_CONFIG))
        .and_then(|s| s.set_preshutdown_timeout(timeout));
    match set {
        Ok(()) => tracing::info!(timeout = ?timeout, "preshutdown timeout set"),
        Err(e) => tracing::warn!(error = %e, timeout = ?timeout,
            "cannot set the service's preshutdown timeout; a node's shutdown may end the daemon before the kubelet has stopped"),
    }
}

/// The kubelet service's state, as the preshutdown wait needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kubelet {
    /// No such service on this node.
    Absent,
    Stopped,
    /// Running, stopping, or any other state.
    Up,
    /// Running but not accepting PRESHUTDOWN (a kubelet built without Windows graceful node
    /// shutdown accepts only STOP and SHUTDOWN): the SCM sends it SHUTDOWN only once every preshutdown handler has finished
    /// ("Service Control Handler Function", learn.microsoft.com), so it cannot stop first and
    /// waiting for it only delays the node's shutdown.
    NoPreshutdown,
}

/// Where the kubelet's state comes from: the SCM ([`ScmStates`]) or a script (tests).
trait ServiceStates {
    fn kubelet(&mut self) -> Result<Kubelet, String>;
}

/// How the wait for the kubelet ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum WaitEnd {
    Stopped,
    Absent,
    /// The kubelet takes no PRESHUTDOWN ([`Kubelet::NoPreshutdown`]).
    KubeletTakesNoPreshutdown,
    TimedOut,
    /// The SCM could not be asked; waiting on would be blind.
    CannotTell(String),
}

impl std::fmt::Display for WaitEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitEnd::Stopped => f.write_str("stopped"),
            WaitEnd::Absent => f.write_str("not installed"),
            WaitEnd::KubeletTakesNoPreshutdown => {
                f.write_str("running, but it takes no PRESHUTDOWN, so it stops only after this service")
            }
            WaitEnd::TimedOut => f.write_str("still running at the end of -preshutdown-wait"),
            WaitEnd::CannotTell(e) => write!(f, "state unknown ({})", csi_proxy_host::error::clip(e)),
        }
    }
}

/// Time, for the wait: the real one, or a script's.
trait Clock {
    fn elapsed(&self) -> Duration;
    fn sleep(&mut self, d: Duration);
}

struct RealClock;

impl Clock for RealClock {
    fn elapsed(&self) -> Duration {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START.get_or_init(std::time::Instant::now).elapsed()
    }
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d)
    }
}

/// The decision at PRESHUTDOWN: ask for the kubelet's state every `poll` until it is Stopped or
/// absent, or `bound` has passed (or the SCM cannot be asked); `progress` gets 1, 2, ... at each
/// poll, for the StopPending checkpoint.
fn wait_for_kubelet(
    states: &mut impl ServiceStates,
    bound: Duration,
    poll: Duration,
    clock: &mut impl Clock,
    mut progress: impl FnMut(u32),
) -> WaitEnd {
    let start = clock.elapsed();
    let mut n = 0u32;
    loop {
        n = n.saturating_add(1);
        progress(n);
        match states.kubelet() {
            Ok(Kubelet::Stopped) => return WaitEnd::Stopped,
            Ok(Kubelet::Absent) => return WaitEnd::Absent,
            Ok(Kubelet::NoPreshutdown) => return WaitEnd::KubeletTakesNoPreshutdown,
            Err(e) => return WaitEnd::CannotTell(e),
            Ok(Kubelet::Up) => {}
        }
        let spent = clock.elapsed().saturating_sub(start);
        if spent >= bound {
            return WaitEnd::TimedOut;
        }
        clock.sleep(poll.min(bound - spent));
    }
}

/// The kubelet's state from the service control manager (OpenServiceW with
/// SERVICE_QUERY_STATUS, QueryServiceStatus). ERROR_SERVICE_DOES_NOT_EXIST (1060) is "absent".
#[derive(Default)]
struct ScmStates {
    service: Option<windows_service::service::Service>,
}

impl ServiceStates for ScmStates {
    fn kubelet(&mut self) -> Result<Kubelet, String> {
        use windows_service::service::ServiceAccess;
        use windows_service::service_manager::{ServiceManager, ServiceManagerAccess};
        if self.service.is_none() {
            let manager = ServiceManager::local_computer(None::<&str>, ServiceManagerAccess::CONNECT)
                .map_err(|e| e.to_string())?;
            match manager.open_service(KUBELET_SERVICE, ServiceAccess::QUERY_STATUS) {
                Ok(s) => self.service = Some(s),
                Err(windows_service::Error::Winapi(e)) if e.raw_os_error() == Some(1060) => return Ok(Kubelet::Absent),
                Err(e) => return Err(e.to_string()),
            }
        }
        let state = self.service.as_ref().map(|s| s.query_status()).transpose().map_err(|e| e.to_string())?;
        Ok(match state {
            Some(s) if s.current_state == ServiceState::Stopped => Kubelet::Stopped,
            Some(s) if !s.controls_accepted.contains(ServiceControlAccept::PRESHUTDOWN) => Kubelet::NoPreshutdown,
            _ => Kubelet::Up,
        })
    }
}

/// One status report. Pending states carry checkpoint 1 and a wait hint: the SCM gives the
/// service that long before it considers the start or stop hung.
fn report(
    status: ServiceStatusHandle,
    state: ServiceState,
    accept: ServiceControlAccept,
    exit: ServiceExitCode,
    wait_hint: Duration,
) -> windows_service::Result<()> {
    let pending = matches!(state, ServiceState::StartPending | ServiceState::StopPending);
    status.set_service_status(ServiceStatus {
        service_type: ServiceType::OWN_PROCESS,
        current_state: state,
        controls_accepted: accept,
        exit_code: exit,
        checkpoint: u32::from(pending),
        wait_hint,
        process_id: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R9: a failed start is reported as ERROR_SERVICE_SPECIFIC_ERROR with code 1, not as
    /// Win32 error 1 (ERROR_INVALID_FUNCTION). The SCM's side (event 7024 naming
    /// "service-specific error 1") shows only on Windows; tests/winsvc.rs reads the code back
    /// through the SCM under Wine.
    /// A scripted service manager: the kubelet's states in turn (the last one repeats).
    struct Script(Vec<Result<Kubelet, String>>);

    impl ServiceStates for Script {
        fn kubelet(&mut self) -> Result<Kubelet, String> {
            if self.0.len() > 1 {
                self.0.remove(0)
            } else {
                self.0[0].clone()
            }
        }
    }

    /// A clock that moves only when slept on.
    #[derive(Default)]
    struct FakeClock(Duration);

    impl Clock for FakeClock {
        fn elapsed(&self) -> Duration {
            self.0
        }
        fn sleep(&mut self, d: Duration) {
            self.0 += d
        }
    }

    fn run(script: Vec<Result<Kubelet, String>>, bound: Duration) -> (WaitEnd, Duration, Vec<u32>) {
        let mut clock = FakeClock::default();
        let mut seen = Vec::new();
        let end = wait_for_kubelet(&mut Script(script), bound, PRESHUTDOWN_POLL, &mut clock, |n| seen.push(n));
        (end, clock.0, seen)
    }

    /// Node shutdown on the scripted service manager: the daemon serves on while the kubelet is
    /// up, and stops as soon as it has stopped, reporting progress at each poll.
    #[test]
    fn preshutdown_serves_until_the_kubelet_has_stopped() {
        let (end, waited, seen) = run(
            vec![Ok(Kubelet::Up), Ok(Kubelet::Up), Ok(Kubelet::Up), Ok(Kubelet::Stopped)],
            Duration::from_secs(120),
        );
        assert_eq!(end, WaitEnd::Stopped);
        assert_eq!(waited, Duration::from_secs(3), "three polls while it ran, none after");
        assert_eq!(seen, [1, 2, 3, 4], "a rising checkpoint");
    }

    /// ... and no longer than -preshutdown-wait when the kubelet never stops; not at all when there
    /// is no kubelet service, or the SCM cannot be asked, or the wait is 0.
    #[test]
    fn preshutdown_waits_a_bounded_time_and_only_for_a_kubelet() {
        let (end, waited, _) = run(vec![Ok(Kubelet::Up)], Duration::from_millis(2_500));
        assert_eq!((end, waited), (WaitEnd::TimedOut, Duration::from_millis(2_500)));
        let (end, waited, _) = run(vec![Ok(Kubelet::Absent)], Duration::from_secs(120));
        assert_eq!((end, waited), (WaitEnd::Absent, Duration::ZERO));
        let (end, waited, _) = run(vec![Err("access denied".into())], Duration::from_secs(120));
        assert_eq!((end, waited), (WaitEnd::CannotTell("access denied".into()), Duration::ZERO));
        let (end, waited, _) = run(vec![Ok(Kubelet::Up)], Duration::ZERO);
        assert_eq!((end, waited), (WaitEnd::TimedOut, Duration::ZERO));
        // A kubelet that takes no PRESHUTDOWN is told to stop only after this wait: no wait.
        let (end, waited, _) = run(vec![Ok(Kubelet::NoPreshutdown)], Duration::from_secs(120));
        assert_eq!((end, waited), (WaitEnd::KubeletTakesNoPreshutdown, Duration::ZERO));
    }

    /// PRESHUTDOWN is accepted (the SCM sends it only to services that accept it), with Stop.
    #[test]
    fn the_running_service_accepts_preshutdown() {
        assert!(ACCEPTED.contains(ServiceControlAccept::PRESHUTDOWN | ServiceControlAccept::STOP));
    }

    #[test]
    fn a_failure_is_a_service_specific_exit_code() {
        assert_eq!(exit_code(true), ServiceExitCode::ServiceSpecific(1));
        assert_eq!(exit_code(false), ServiceExitCode::Win32(0));
    }
}
