//! `-windows-service`: run under the Windows service control manager as `csiproxy`, the name
//! upstream's install line registers (`sc.exe create csiproxy ...`).
//!
//! Unlike upstream, Stop and Shutdown really stop the daemon: the endpoints stop accepting,
//! open calls get a short drain, then the service reports Stopped and the process exits.

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

fn run_service() -> anyhow::Result<()> {
    let opts = OPTIONS.lock_ignoring_poison().take().ok_or_else(|| anyhow::anyhow!("service started twice"))?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let stop_tx = Mutex::new(Some(stop_tx));
    let handler = move |control| match control {
        ServiceControl::Stop | ServiceControl::Shutdown => {
            if let Some(tx) = stop_tx.lock_ignoring_poison().take() {
                let _ = tx.send(());
            }
            ServiceControlHandlerResult::NoError
        }
        ServiceControl::Interrogate | ServiceControl::ParamChange => ServiceControlHandlerResult::NoError,
        _ => ServiceControlHandlerResult::NotImplemented,
    };
    let status = service_control_handler::register(SERVICE_NAME, handler)?;
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
        let accepted = ServiceControlAccept::STOP | ServiceControlAccept::SHUTDOWN | ServiceControlAccept::PARAM_CHANGE;
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
        let _ = stop_rx.await;
        tracing::info!("stop requested by the service control manager");
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
    #[test]
    fn a_failure_is_a_service_specific_exit_code() {
        assert_eq!(exit_code(true), ServiceExitCode::ServiceSpecific(1));
        assert_eq!(exit_code(false), ServiceExitCode::Win32(0));
    }
}
