//! Console control events (Windows, outside the service manager). CTRL_C, CTRL_BREAK, CTRL_CLOSE
//! and CTRL_SHUTDOWN each start the same drain as a service-manager Stop. A HostProcess container
//! stop (hcsshim's job containers) turns the runtime's SIGTERM into CTRL_SHUTDOWN and delivers it
//! by starting kernel32's `CtrlRoutine` on a new thread in this process, as the console host does
//! (tests/console_events.rs delivers events the same way); it then kills the process when the
//! pod's grace period ends, which (30 s in deploy/) leaves room for the whole drain.
//!
//! tokio's handler, once it has passed CTRL_CLOSE or CTRL_SHUTDOWN on, parks its thread instead
//! of returning: under the HandlerRoutine contract the system ends the process as soon as the
//! handler returns, or after its timeout for close, logoff and shutdown if it never does
//! (<https://learn.microsoft.com/windows/console/handlerroutine>). So the process lives until
//! `main` returns after the drain, or until that timeout, whichever comes first. (A real console
//! close gives about 5 s, less than the longest drain: 5 s for connections, 10 s for host calls.)
//!
//! What the documentation settles (HandlerRoutine and SetConsoleCtrlHandler pages,
//! <https://learn.microsoft.com/windows/console/handlerroutine>), and how this module follows it:
//! - K2. "If a console application loads the gdi32.dll or user32.dll library", the handler "does
//!   not get called for the CTRL_LOGOFF_EVENT and CTRL_SHUTDOWN_EVENT events": the system treats
//!   it as a Windows application (WM_QUERYENDSESSION instead). The daemon's WMI calls load ole32,
//!   which brings user32 with it, so a daemon started from a console is not promised
//!   CTRL_SHUTDOWN at a system shutdown. That is not how a node runs it: as a service
//!   (`-windows-service`, `winsvc`), the stop and the node's shutdown come through the service's
//!   control handler as SERVICE_CONTROL_STOP, PRESHUTDOWN and SHUTDOWN (the Handler page:
//!   "services also have their own notification mechanism for shutdown events"), whatever DLLs
//!   are loaded, and this module is not used at all; in a HostProcess pod, the container's stop
//!   is not a system shutdown: hcsshim starts `CtrlRoutine` in the process itself, which runs
//!   the handler list directly. So user32 is left loaded (on a node, `tasklist /m user32.dll`
//!   shows whether it is), and a daemon run from a console is documented as not for nodes
//!   (docs/windows.md).
//! - K3. For CTRL_CLOSE, CTRL_LOGOFF and CTRL_SHUTDOWN, a handler that returns TRUE ends the
//!   chain "and the system terminates the process"; one that returns FALSE hands the event on,
//!   to the default handler at the end, which calls ExitProcess. CTRL_LOGOFF "is received only by
//!   services. Interactive applications are terminated at logoff" and a console application run
//!   as a service gets "a modified default console control handler" that does not call
//!   ExitProcess for CTRL_LOGOFF and CTRL_SHUTDOWN. So for a process outside the service manager
//!   no documented answer to CTRL_LOGOFF keeps it alive: FALSE certainly ends it (our default
//!   handler), TRUE leaves it to the system, which ends the processes of the session logging off.
//!   `on_logoff` answers TRUE, the only answer that can leave a SYSTEM process of session 0 (a
//!   HostProcess pod) running when an interactive user logs off; whether it does is a node's
//!   answer (docs/windows.md: a user logs on and off twice, the daemon keeps its PID and logs no
//!   drain). The documented way to be untouched by logoffs is the service (`winsvc`).
//! - K4. After the first stopping event the listeners stay registered (`keep_listening`), so a
//!   later event ends nothing, and the drain has a deadline of its own (`crate::DRAIN_DEADLINE`).
#![allow(unsafe_code)]

use std::task::Poll;
use tokio::signal::windows as signal;
use windows_sys::core::BOOL;
use windows_sys::Win32::System::Console as con;

/// A console control event: what a `HandlerRoutine` gets as `dwCtrlType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtrlEvent {
    C,
    Break,
    Close,
    Logoff,
    Shutdown,
}

impl CtrlEvent {
    pub const ALL: [CtrlEvent; 5] = [Self::C, Self::Break, Self::Close, Self::Logoff, Self::Shutdown];

    pub const fn name(self) -> &'static str {
        match self {
            Self::C => "CTRL_C",
            Self::Break => "CTRL_BREAK",
            Self::Close => "CTRL_CLOSE",
            Self::Logoff => "CTRL_LOGOFF",
            Self::Shutdown => "CTRL_SHUTDOWN",
        }
    }

    #[cfg(test)]
    const fn code(self) -> u32 {
        match self {
            Self::C => con::CTRL_C_EVENT,
            Self::Break => con::CTRL_BREAK_EVENT,
            Self::Close => con::CTRL_CLOSE_EVENT,
            Self::Logoff => con::CTRL_LOGOFF_EVENT,
            Self::Shutdown => con::CTRL_SHUTDOWN_EVENT,
        }
    }

    /// Whether the event stops the daemon. Not CTRL_LOGOFF: the system sends it to every console
    /// process whenever any user logs off, without saying who, so a daemon running as SYSTEM
    /// (a HostProcess container) would stop each time someone's session ends.
    pub const fn stops(self) -> bool {
        !matches!(self, Self::Logoff)
    }
}

/// tokio's listener for one event (each has a type of its own).
enum Listener {
    C(signal::CtrlC),
    Break(signal::CtrlBreak),
    Close(signal::CtrlClose),
    Shutdown(signal::CtrlShutdown),
}

impl Listener {
    fn new(event: CtrlEvent) -> std::io::Result<Option<Listener>> {
        Ok(Some(match event {
            CtrlEvent::C => Self::C(signal::ctrl_c()?),
            CtrlEvent::Break => Self::Break(signal::ctrl_break()?),
            CtrlEvent::Close => Self::Close(signal::ctrl_close()?),
            CtrlEvent::Shutdown => Self::Shutdown(signal::ctrl_shutdown()?),
            CtrlEvent::Logoff => return Ok(None),
        }))
    }

    fn poll_recv(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<()>> {
        match self {
            Self::C(l) => l.poll_recv(cx),
            Self::Break(l) => l.poll_recv(cx),
            Self::Close(l) => l.poll_recv(cx),
            Self::Shutdown(l) => l.poll_recv(cx),
        }
    }
}

/// Completes with the name of the first event that stops the daemon. Listens from the first poll.
pub async fn stop_requested() -> &'static str {
    let mut listeners = Vec::new();
    for event in CtrlEvent::ALL.into_iter().filter(|e| e.stops()) {
        match Listener::new(event) {
            Ok(Some(l)) => listeners.push((event, l)),
            Ok(None) => {}
            Err(e) => tracing::warn!(event = event.name(), error = %e, "cannot watch this console event"),
        }
    }
    ignore_logoff();
    if listeners.is_empty() {
        tracing::warn!("no console event can stop the daemon; only ending the process will");
    }
    let first = next_event(&mut listeners).await;
    keep_listening(listeners);
    first
}

/// The next event any of `listeners` receives.
async fn next_event(listeners: &mut [(CtrlEvent, Listener)]) -> &'static str {
    std::future::poll_fn(|cx| {
        for (event, l) in listeners.iter_mut() {
            if l.poll_recv(cx).is_ready() {
                return Poll::Ready(event.name());
            }
        }
        Poll::Pending
    })
    .await
}

/// K4: the listeners stay registered for the rest of the process, so that an event during the
/// drain (a second Ctrl-C, a close after Ctrl-C, a runtime sending its stop twice) changes
/// nothing: tokio's handler answers it (TRUE for CTRL_C and CTRL_BREAK; for CTRL_CLOSE and
/// CTRL_SHUTDOWN it parks its thread, as for the first) and the drain goes on, with its own
/// deadline (`crate::DRAIN_DEADLINE`). Were they dropped, tokio's handler would find nobody
/// listening and return FALSE, and the chain would end in the default handler, which "calls the
/// ExitProcess function" (HandlerRoutine), ending the process mid-drain. They are never dropped
/// (`ManuallyDrop`): not even when the runtime ends, between the drain and the process's exit.
fn keep_listening(listeners: Vec<(CtrlEvent, Listener)>) {
    let mut listeners = std::mem::ManuallyDrop::new(listeners);
    tokio::spawn(async move {
        loop {
            let event = next_event(&mut listeners[..]).await;
            tracing::info!(event, "ignored: the daemon is already stopping");
        }
    });
}

/// Answers CTRL_LOGOFF itself (handlers run last registered first, so before tokio's): else it
/// would reach the default handler, which ends the process at once.
fn ignore_logoff() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: `on_logoff` has the PHANDLER_ROUTINE signature and, being a plain function,
        // stays valid for the life of the process.
        if unsafe { con::SetConsoleCtrlHandler(Some(on_logoff), 1) } == 0 {
            let e = std::io::Error::last_os_error();
            tracing::warn!(error = %e, "cannot install the CTRL_LOGOFF handler; a user logging off may end the daemon");
        }
    });
}

extern "system" fn on_logoff(ctrl: u32) -> BOOL {
    if ctrl != con::CTRL_LOGOFF_EVENT {
        return 0;
    }
    tracing::info!(event = CtrlEvent::Logoff.name(), "ignored: a user logged off");
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_but_logoff_stops_the_daemon() {
        let stopping: Vec<_> = CtrlEvent::ALL.into_iter().filter(|e| e.stops()).map(CtrlEvent::name).collect();
        assert_eq!(stopping, ["CTRL_C", "CTRL_BREAK", "CTRL_CLOSE", "CTRL_SHUTDOWN"]);
        let codes: Vec<_> = CtrlEvent::ALL.into_iter().map(CtrlEvent::code).collect();
        assert_eq!(codes, [0, 1, 2, 5, 6], "HandlerRoutine's dwCtrlType values");
    }

    #[test]
    fn a_listener_is_installed_for_each_stopping_event() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            for event in CtrlEvent::ALL {
                let listener = Listener::new(event).unwrap();
                assert_eq!(listener.is_some(), event.stops(), "{event:?}");
            }
        });
    }

    #[test]
    fn logoff_is_answered_and_nothing_else() {
        for event in CtrlEvent::ALL {
            assert_eq!(on_logoff(event.code()), BOOL::from(event == CtrlEvent::Logoff), "{event:?}");
        }
    }
}
