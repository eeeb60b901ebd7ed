#![cfg(windows)]
#![allow(unsafe_code)]
//! Console control events stop the real daemon (outside the service manager) with the same drain
//! as a service-manager Stop, and exit code 0; CTRL_LOGOFF does not stop it.
//!
//! How each event is delivered:
//! * CTRL_C: `GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0)`, to every process on this console;
//! * CTRL_BREAK: on Windows, `GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, pid)` to the daemon
//!   started in a process group of its own; under Wine 8, which generates CTRL_C only, as below;
//! * CTRL_CLOSE, CTRL_SHUTDOWN, CTRL_LOGOFF (which no API generates): the way Windows' console
//!   host delivers every control event, a thread started in the daemon at kernel32's
//!   `CtrlRoutine` with the event as its argument. That runs the daemon's real handler list,
//!   from the last registered handler to the default one, as a real close or shutdown does.
//!   (A process started with CREATE_NEW_PROCESS_GROUP ignores Ctrl-C; Wine's CtrlRoutine ignores
//!   every event there, so these daemons stay in our process group.)

use std::ffi::c_void;
use std::io::{BufRead as _, BufReader};
use std::os::windows::io::AsRawHandle as _;
use std::os::windows::process::CommandExt as _;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use windows_sys::core::BOOL;
use windows_sys::Win32::Foundation::CloseHandle;
use windows_sys::Win32::System::Console::{
    AllocConsole, FreeConsole, GenerateConsoleCtrlEvent, GetConsoleWindow, GetStdHandle, SetConsoleCtrlHandler,
    SetStdHandle, CTRL_BREAK_EVENT, CTRL_CLOSE_EVENT, CTRL_C_EVENT, CTRL_LOGOFF_EVENT, CTRL_SHUTDOWN_EVENT,
    STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
};
use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleA, GetProcAddress};
use windows_sys::Win32::System::Threading::{CreateRemoteThread, CREATE_NEW_PROCESS_GROUP, LPTHREAD_START_ROUTINE};

/// The daemon cargo built beside this test (`target/<triple>/debug/csi-proxy.exe`; the test is
/// in `deps/`). The cross build doesn't set CARGO_BIN_EXE_*.
fn daemon_exe() -> std::path::PathBuf {
    let me = std::env::current_exe().unwrap();
    let exe = me.parent().and_then(|deps| deps.parent()).unwrap().join("csi-proxy.exe");
    assert!(exe.is_file(), "{} is missing", exe.display());
    exe
}

/// The daemons bind the same pipe names: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A daemon with its standard error collected; killed on drop if still running.
struct Daemon {
    child: Child,
    log: Arc<Mutex<String>>,
    kubelet: std::path::PathBuf,
}

impl Daemon {
    fn start(tag: &str, new_group: bool) -> Daemon {
        let kubelet = std::env::temp_dir().join(format!("csi-proxy-ctrl-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&kubelet).unwrap();
        let mut cmd = Command::new(daemon_exe());
        cmd.arg("-kubelet-path").arg(&kubelet).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        if new_group {
            cmd.creation_flags(CREATE_NEW_PROCESS_GROUP);
        }
        let mut child = cmd.spawn().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let mut text = sink.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        let daemon = Daemon { child, log, kubelet };
        daemon.wait_log("every endpoint is bound and served", Duration::from_secs(60));
        daemon
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn wait_log(&self, needle: &str, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.log().contains(needle) {
            assert!(Instant::now() < deadline, "no {needle:?} in the daemon's log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asserts the drain ran for `event` and the process then exited with code 0.
    fn assert_drained(mut self, event: &str) {
        let status = self.wait_exit(Duration::from_secs(40));
        // The reader thread may still be copying the last lines.
        std::thread::sleep(Duration::from_millis(300));
        let log = self.log();
        assert!(status.is_some(), "{event}: still running 40 s later; log:\n{log}");
        // Wine's default handler exits with 0 too: the drain is what tells them apart.
        assert!(log.contains("shutting down"), "{event}: exited ({status:?}) without draining; log:\n{log}");
        assert!(log.contains(&format!("\"stop requested\" event=\"{event}\"")), "{event}: log:\n{log}");
        assert_eq!(status.and_then(|s| s.code()), Some(0), "{event}: exit status {status:?}, log:\n{log}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.kubelet);
    }
}

/// This test process ignores CTRL_C (a CTRL_C to group 0 reaches it too), but its children,
/// which inherit `SetConsoleCtrlHandler(NULL, TRUE)`, must not: so a handler, not that.
extern "system" fn swallow_ctrl_c(ctrl: u32) -> BOOL {
    BOOL::from(ctrl == CTRL_C_EVENT)
}

/// A console for this test process and the daemons it starts (they inherit it), if it has none:
/// under Wine, a process started from a pipe is on a "shell, no window" console that
/// GenerateConsoleCtrlEvent refuses (ERROR_INVALID_ACCESS), and AllocConsole refuses while attached.
fn console() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: FFI calls without pointers; `swallow_ctrl_c` is a static function with the
        // PHANDLER_ROUTINE signature, valid for the life of the process.
        unsafe {
            if GetConsoleWindow().is_null() {
                // AllocConsole points the standard handles at the new console: keep cargo's pipes.
                let std = [STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE].map(|n| (n, GetStdHandle(n)));
                FreeConsole();
                assert_ne!(AllocConsole(), 0, "AllocConsole: {}", std::io::Error::last_os_error());
                for (n, handle) in std {
                    SetStdHandle(n, handle);
                }
            }
            assert_ne!(SetConsoleCtrlHandler(Some(swallow_ctrl_c), 1), 0, "{}", std::io::Error::last_os_error());
        }
    });
}

/// Wine's ntdll exports `wine_get_version`; Windows' does not.
fn under_wine() -> bool {
    // SAFETY: NUL-terminated names; ntdll is loaded in every process.
    unsafe {
        let ntdll = GetModuleHandleA(c"ntdll.dll".as_ptr().cast());
        !ntdll.is_null() && GetProcAddress(ntdll, c"wine_get_version".as_ptr().cast()).is_some()
    }
}

fn generate(event: u32, group: u32) -> std::io::Result<()> {
    // SAFETY: FFI call with integer arguments only.
    match unsafe { GenerateConsoleCtrlEvent(event, group) } {
        0 => Err(std::io::Error::last_os_error()),
        _ => Ok(()),
    }
}

/// Delivers `event` as the console host does: a new thread in `child` runs kernel32's
/// `CtrlRoutine(event)`, which calls the process's handlers, last registered first, down to the
/// default one (ExitProcess). kernel32 is mapped at the same address in every process of a boot
/// (and of a Wine prefix), so this process's address for it is the child's.
fn inject(child: &Child, event: u32) {
    // SAFETY: GetModuleHandleA and GetProcAddress get NUL-terminated names; CtrlRoutine has the
    // LPTHREAD_START_ROUTINE signature (`DWORD WINAPI CtrlRoutine(LPVOID)`), so the transmute
    // between the two function pointer types is sound; CreateRemoteThread gets the child's
    // process handle (PROCESS_ALL_ACCESS, from CreateProcess), null attributes and thread id, and
    // the event number as the thread's argument, which CtrlRoutine reads as an integer.
    unsafe {
        let kernel32 = GetModuleHandleA(c"kernel32.dll".as_ptr().cast());
        assert!(!kernel32.is_null(), "{}", std::io::Error::last_os_error());
        let routine = GetProcAddress(kernel32, c"CtrlRoutine".as_ptr().cast()).expect("kernel32 exports CtrlRoutine");
        let start: LPTHREAD_START_ROUTINE = Some(std::mem::transmute::<
            unsafe extern "system" fn() -> isize,
            unsafe extern "system" fn(*mut c_void) -> u32,
        >(routine));
        let thread = CreateRemoteThread(
            child.as_raw_handle(),
            std::ptr::null(),
            0,
            start,
            event as usize as *const c_void,
            0,
            std::ptr::null_mut(),
        );
        assert!(!thread.is_null(), "CreateRemoteThread: {}", std::io::Error::last_os_error());
        CloseHandle(thread);
    }
}

#[test]
fn ctrl_c_from_the_console_drains_and_exits_0() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    console();
    let daemon = Daemon::start("c", false);
    generate(CTRL_C_EVENT, 0).expect("GenerateConsoleCtrlEvent(CTRL_C_EVENT, 0)");
    daemon.assert_drained("CTRL_C");
}

#[test]
fn ctrl_break_drains_and_exits_0() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    console();
    if under_wine() {
        // Wine 8 generates CTRL_C only (GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT, ..) fails with
        // ERROR_INVALID_HANDLE), and its CtrlRoutine drops every event in a process started with
        // CREATE_NEW_PROCESS_GROUP: so an injected CTRL_BREAK, into a daemon in our group.
        let daemon = Daemon::start("break", false);
        inject(&daemon.child, CTRL_BREAK_EVENT);
        daemon.assert_drained("CTRL_BREAK");
    } else {
        let daemon = Daemon::start("break", true);
        generate(CTRL_BREAK_EVENT, daemon.child.id()).expect("GenerateConsoleCtrlEvent(CTRL_BREAK_EVENT)");
        daemon.assert_drained("CTRL_BREAK");
    }
}

#[test]
fn ctrl_close_drains_and_exits_0() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let daemon = Daemon::start("close", false);
    inject(&daemon.child, CTRL_CLOSE_EVENT);
    daemon.assert_drained("CTRL_CLOSE");
}

#[test]
fn ctrl_shutdown_drains_and_exits_0() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let daemon = Daemon::start("shutdown", false);
    inject(&daemon.child, CTRL_SHUTDOWN_EVENT);
    daemon.assert_drained("CTRL_SHUTDOWN");
}

#[test]
fn ctrl_logoff_does_not_stop_the_daemon() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut daemon = Daemon::start("logoff", false);
    inject(&daemon.child, CTRL_LOGOFF_EVENT);
    daemon.wait_log("CTRL_LOGOFF", Duration::from_secs(20));
    assert!(daemon.wait_exit(Duration::from_secs(2)).is_none(), "exited on CTRL_LOGOFF; log:\n{}", daemon.log());
    assert!(!daemon.log().contains("shutting down"), "{}", daemon.log());
    // Still stoppable afterwards.
    inject(&daemon.child, CTRL_SHUTDOWN_EVENT);
    daemon.assert_drained("CTRL_SHUTDOWN");
}

/// A client that has finished the HTTP/2 handshake on the daemon's disk pipe and then reads
/// nothing: told to go away at the stop, it never answers, so the daemon's drain waits the
/// transport's whole drain for it (5 s), long enough to send more events meanwhile.
fn silent_client() -> std::fs::File {
    use std::io::Write as _;
    let mut pipe = std::fs::OpenOptions::new().read(true).write(true).open(r"\\.\pipe\csi-proxy-disk-v1").unwrap();
    // The client preface, then an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
    pipe.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    pipe.write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0]).unwrap();
    pipe
}

/// K4: events during the drain end nothing and extend nothing. The stop is a CTRL_C; with the
/// drain held open by a silent client, a second CTRL_C, a CTRL_BREAK and a CTRL_SHUTDOWN arrive;
/// the daemon logs them as ignored, finishes the drain ("stopped", logged after the runtime has
/// ended) and exits 0. CTRL_SHUTDOWN comes last: its handler parks its thread (tokio, as the
/// HandlerRoutine contract wants for it), and Wine's CtrlRoutine runs one event's handlers at a
/// time, so nothing sent after it would reach the handlers under Wine. Fails before the listeners
/// were kept: the second CTRL_C found no listener, the chain ended in the default handler's
/// ExitProcess, and the log has no "stopped".
#[test]
fn events_during_the_drain_end_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let daemon = Daemon::start("twice", false);
    let client = silent_client();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    inject(&daemon.child, CTRL_C_EVENT);
    daemon.wait_log("shutting down", Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(300));
    for event in [CTRL_C_EVENT, CTRL_BREAK_EVENT, CTRL_SHUTDOWN_EVENT] {
        inject(&daemon.child, event);
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut daemon = daemon;
    let status = daemon.wait_exit(Duration::from_secs(40));
    std::thread::sleep(Duration::from_millis(300));
    drop(client);
    let log = daemon.log();
    assert!(log.contains("\"stopped\""), "the drain did not finish; log:\n{log}");
    for event in ["CTRL_C", "CTRL_BREAK"] {
        let line = format!("\"ignored: the daemon is already stopping\" event=\"{event}\"");
        assert!(log.contains(&line), "no {line} in the log:\n{log}");
    }
    assert_eq!(status.and_then(|s| s.code()), Some(0), "exit status {status:?}; log:\n{log}");
    // The drain's bound, not a second event, decided when it ended.
    assert!(started.elapsed() < Duration::from_secs(30), "{:?}; log:\n{log}", started.elapsed());
}
