//! The real [`PipeClientOs`]: the Win32 and HCS calls, each as its documentation says. What
//! is decided from their answers is in `pipe_client.rs`.
//!
//! Wine runs the pipe, process, token and job calls (the tests under Wine exercise them); it
//! has no computecore.dll, so the HCS calls never ran there: they are written to the HCS
//! reference (learn.microsoft.com/virtualization/api/hcs/reference) and the conformance check
//! `caller-identity` says what a real node answers.

use super::pipe_client::{self, PipeClientOs};
use csi_proxy_wire::Caller;
use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::sync::OnceLock;
use std::time::Duration;
use tokio::net::windows::named_pipe::NamedPipeServer;
use windows_sys::core::{BOOL, HRESULT, PCWSTR, PWSTR};
use windows_sys::Win32::Foundation::{
    LocalFree, ERROR_BROKEN_PIPE, ERROR_INSUFFICIENT_BUFFER, ERROR_NO_DATA, ERROR_PIPE_NOT_CONNECTED, GENERIC_ALL,
    HANDLE, HLOCAL, WAIT_OBJECT_0, WAIT_TIMEOUT,
};
use windows_sys::Win32::Security::Authorization::ConvertSidToStringSidW;
use windows_sys::Win32::Security::{GetTokenInformation, RevertToSelf, TokenUser, TOKEN_QUERY, TOKEN_USER};
use windows_sys::Win32::System::HostComputeSystem::{HCS_OPERATION, HCS_OPERATION_COMPLETION, HCS_SYSTEM};
use windows_sys::Win32::System::JobObjects::IsProcessInJob;
use windows_sys::Win32::System::LibraryLoader::{GetProcAddress, LoadLibraryExW, LOAD_LIBRARY_SEARCH_SYSTEM32};
use windows_sys::Win32::System::Pipes::{GetNamedPipeClientProcessId, ImpersonateNamedPipeClient, PeekNamedPipe};
use windows_sys::Win32::System::Threading::{
    GetCurrentThread, OpenProcess, OpenProcessToken, OpenThreadToken, QueryFullProcessImageNameW, WaitForSingleObject,
    PROCESS_NAME_WIN32, PROCESS_QUERY_INFORMATION, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_SYNCHRONIZE,
};

/// The client process of a connected pipe instance: its ID, user SID, image path and container,
/// as far as the OS lets this process see them (see [`pipe_client`] for what is trusted when).
pub fn of_pipe(pipe: &NamedPipeServer) -> Caller {
    pipe_client::identify(&Os { pipe: pipe.as_raw_handle() as HANDLE })
}

/// The OS, for one connected pipe instance (borrowed: `of_pipe`'s `pipe` outlives it).
struct Os {
    pipe: HANDLE,
}

fn last_error(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl PipeClientOs for Os {
    type Process = OwnedHandle;

    fn client_pid(&self) -> io::Result<u32> {
        let mut pid = 0u32;
        // SAFETY: the handle is a connected pipe instance, alive for the call; `pid` is a valid
        // out-pointer.
        if unsafe { GetNamedPipeClientProcessId(self.pipe, &mut pid) } == 0 {
            return Err(last_error("GetNamedPipeClientProcessId"));
        }
        Ok(pid)
    }

    fn client_token_user(&self) -> io::Result<String> {
        // ImpersonateNamedPipeClient: "If the ImpersonateNamedPipeClient function fails, the
        // client is not impersonated" (and nothing is done for it here either); on success this
        // thread runs as the client until RevertToSelf, which the guard calls before this
        // function returns, on every path. Nothing but the token is opened meanwhile.
        // SAFETY: the handle is the server end of a connected pipe instance, alive for the call.
        if unsafe { ImpersonateNamedPipeClient(self.pipe) } == 0 {
            return Err(last_error("ImpersonateNamedPipeClient"));
        }
        let revert = Impersonating;
        let mut token: HANDLE = std::ptr::null_mut();
        // OpenAsSelf TRUE: "the access check is to be made against the process-level security
        // context", not the client's (who may not be allowed to open its own token).
        // SAFETY: GetCurrentThread's pseudo handle needs no closing; `token` is a valid
        // out-pointer.
        let opened = unsafe { OpenThreadToken(GetCurrentThread(), TOKEN_QUERY, 1, &mut token) };
        let result =
            if opened == 0 { Err(last_error("OpenThreadToken of the impersonated client")) } else { Ok(token) };
        drop(revert);
        // SAFETY: a token handle just opened, owned by nothing else; it stays valid after the
        // thread reverts.
        let token = unsafe { OwnedHandle::from_raw_handle(result? as RawHandle) };
        user_sid(&token)
    }

    fn open_process(&self, pid: u32) -> io::Result<OwnedHandle> {
        // PROCESS_QUERY_LIMITED_INFORMATION is documented as enough for OpenProcessToken,
        // IsProcessInJob and QueryFullProcessImageNameW, and SYNCHRONIZE for the wait; both are
        // granted on protected processes too. PROCESS_QUERY_INFORMATION (a superset) is asked
        // first all the same: Wine's IsProcessInJob refuses a limited handle (access denied).
        for access in [PROCESS_QUERY_INFORMATION, PROCESS_QUERY_LIMITED_INFORMATION] {
            // SAFETY: plain call; a null result is checked before the handle is owned.
            let process = unsafe { OpenProcess(access | PROCESS_SYNCHRONIZE, 0, pid) };
            if !process.is_null() {
                // SAFETY: a valid process handle that nothing else owns.
                return Ok(unsafe { OwnedHandle::from_raw_handle(process as RawHandle) });
            }
        }
        Err(last_error("OpenProcess"))
    }

    fn process_token_user(&self, process: &OwnedHandle) -> io::Result<String> {
        let mut token: HANDLE = std::ptr::null_mut();
        // SAFETY: a valid process handle; `token` is a valid out-pointer.
        if unsafe { OpenProcessToken(process.as_raw_handle() as HANDLE, TOKEN_QUERY, &mut token) } == 0 {
            return Err(last_error("OpenProcessToken"));
        }
        // SAFETY: a token handle just opened, owned by nothing else.
        let token = unsafe { OwnedHandle::from_raw_handle(token as RawHandle) };
        user_sid(&token)
    }

    fn image(&self, process: &OwnedHandle) -> io::Result<String> {
        // 32 767 UTF-16 units and its NUL: the longest path Windows has.
        let mut buf = vec![0u16; 32_768];
        let mut len = buf.len() as u32;
        // SAFETY: `buf` holds `len` UTF-16 units; the call writes at most that many and sets
        // `len` to the count written.
        let ok = unsafe {
            QueryFullProcessImageNameW(
                process.as_raw_handle() as HANDLE,
                PROCESS_NAME_WIN32,
                buf.as_mut_ptr(),
                &mut len,
            )
        };
        if ok == 0 {
            return Err(last_error("QueryFullProcessImageNameW"));
        }
        Ok(String::from_utf16_lossy(&buf[..len as usize]))
    }

    fn in_any_job(&self, process: &OwnedHandle) -> io::Result<bool> {
        let mut result: BOOL = 0;
        // JobHandle NULL: "the function tests if the process is running under any job".
        // SAFETY: a process handle with PROCESS_QUERY_LIMITED_INFORMATION; `result` is a valid
        // out-pointer.
        if unsafe { IsProcessInJob(process.as_raw_handle() as HANDLE, std::ptr::null_mut(), &mut result) } == 0 {
            return Err(last_error("IsProcessInJob"));
        }
        Ok(result != 0)
    }

    fn still_running(&self, process: &OwnedHandle) -> io::Result<bool> {
        // A process object is signaled once the process has exited.
        // SAFETY: a process handle with SYNCHRONIZE; a zero timeout does not wait.
        match unsafe { WaitForSingleObject(process.as_raw_handle() as HANDLE, 0) } {
            WAIT_TIMEOUT => Ok(true),
            WAIT_OBJECT_0 => Ok(false),
            _ => Err(last_error("WaitForSingleObject of the client process")),
        }
    }

    fn client_connected(&self) -> io::Result<bool> {
        let mut available = 0u32;
        // No buffer: only the count of bytes available is asked for, nothing is read.
        // SAFETY: the pipe handle is alive; the null pointers are documented as optional, and
        // `available` is a valid out-pointer.
        let ok = unsafe {
            PeekNamedPipe(
                self.pipe,
                std::ptr::null_mut(),
                0,
                std::ptr::null_mut(),
                &mut available,
                std::ptr::null_mut(),
            )
        };
        if ok != 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error().map(|c| c as u32) {
            Some(ERROR_BROKEN_PIPE | ERROR_PIPE_NOT_CONNECTED | ERROR_NO_DATA) => Ok(false),
            _ => Err(io::Error::new(e.kind(), format!("PeekNamedPipe: {e}"))),
        }
    }

    fn compute_systems(&self, timeout: Duration) -> io::Result<String> {
        let hcs = hcs()?;
        let op = Operation::new(hcs)?;
        // query NULL: "Optional JSON document of SystemQuery": every compute system.
        // SAFETY: a live operation handle; a null query is documented as optional.
        let hr = unsafe { (hcs.enumerate)(std::ptr::null(), op.0) };
        started(hr, "HcsEnumerateComputeSystems")?;
        op.wait(timeout, "HcsEnumerateComputeSystems")
    }

    fn process_list(&self, id: &str, timeout: Duration) -> io::Result<String> {
        let hcs = hcs()?;
        let wide_id = wide(id);
        let mut system: HCS_SYSTEM = std::ptr::null_mut();
        // requestedAccess: "Reserved for future use, must be GENERIC_ALL".
        // SAFETY: `wide_id` is NUL-terminated and outlives the call; `system` a valid out-pointer.
        let hr = unsafe { (hcs.open)(wide_id.as_ptr(), GENERIC_ALL, &mut system) };
        if hr < 0 || system.is_null() {
            return Err(hresult_error("HcsOpenComputeSystem", hr, None));
        }
        let system = ComputeSystem { hcs, handle: system };
        let op = Operation::new(hcs)?;
        let query = wide(r#"{"PropertyTypes":["ProcessList"]}"#);
        // SAFETY: live compute system and operation handles; `query` is NUL-terminated and
        // outlives the call (the operation copies what it needs before returning: the
        // document is an `_In_` parameter).
        let hr = unsafe { (hcs.properties)(system.handle, op.0, query.as_ptr()) };
        started(hr, "HcsGetComputeSystemProperties")?;
        op.wait(timeout, "HcsGetComputeSystemProperties")
    }
}

/// Reverts this thread to the daemon's own token when dropped. "If RevertToSelf fails, your
/// application continues to run in the context of the client, which is not appropriate. You
/// should shut down the process if RevertToSelf fails": so it aborts.
struct Impersonating;

impl Drop for Impersonating {
    fn drop(&mut self) {
        // SAFETY: plain call, on the thread that impersonates.
        if unsafe { RevertToSelf() } == 0 {
            eprintln!(
                "csi-proxy: RevertToSelf failed ({}): stopping rather than run as a client",
                io::Error::last_os_error()
            );
            std::process::abort();
        }
    }
}

/// The user SID of `token`, as text (`S-1-5-…`).
fn user_sid(token: &OwnedHandle) -> io::Result<String> {
    let handle = token.as_raw_handle() as HANDLE;
    // The documented two calls: the first, with no buffer, fails with
    // ERROR_INSUFFICIENT_BUFFER and sets the size needed.
    let mut needed = 0u32;
    // SAFETY: a null buffer of length 0 is how the size is asked for; `needed` is a valid
    // out-pointer.
    let ok = unsafe { GetTokenInformation(handle, TokenUser, std::ptr::null_mut(), 0, &mut needed) };
    if ok != 0 || io::Error::last_os_error().raw_os_error() != Some(ERROR_INSUFFICIENT_BUFFER as i32) || needed == 0 {
        return Err(last_error("GetTokenInformation(TokenUser) asked for its size"));
    }
    // u64s: aligned for TOKEN_USER's pointer.
    let mut buf = vec![0u64; (needed as usize).div_ceil(8)];
    let size = (buf.len() * 8) as u32;
    // SAFETY: `buf` is writable for `size` bytes, at least `needed`.
    if unsafe { GetTokenInformation(handle, TokenUser, buf.as_mut_ptr().cast(), size, &mut needed) } == 0 {
        return Err(last_error("GetTokenInformation(TokenUser)"));
    }
    // SAFETY: on success the buffer starts with a TOKEN_USER (aligned: a u64 array) whose SID
    // points into the buffer.
    let sid = unsafe { (*buf.as_ptr().cast::<TOKEN_USER>()).User.Sid };
    let mut text: PWSTR = std::ptr::null_mut();
    // SAFETY: `sid` points into `buf`, still alive; `text` is a valid out-pointer.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 || text.is_null() {
        return Err(last_error("ConvertSidToStringSidW"));
    }
    // The string is the caller's to LocalFree.
    Ok(LocalWide(text).text())
}

/// A NUL-terminated UTF-16 string LocalAlloc'ed by a call, freed on drop.
struct LocalWide(PWSTR);

impl LocalWide {
    fn text(&self) -> String {
        if self.0.is_null() {
            return String::new();
        }
        // SAFETY: a NUL-terminated string, alive until this value drops; read up to the NUL.
        unsafe {
            let len = (0..).take_while(|&i| *self.0.add(i) != 0).count();
            String::from_utf16_lossy(std::slice::from_raw_parts(self.0, len))
        }
    }
}

impl Drop for LocalWide {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: allocated by the call that returned it, freed once.
            unsafe { LocalFree(self.0 as HLOCAL) };
        }
    }
}

fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

// The HCS functions (ComputeCore.h), loaded when first needed: computecore.dll is there from
// Windows Server 2019 (1809) on and only with the Containers feature in use; importing it would
// keep the daemon from starting where it is missing (and under Wine, which has none).
type CreateOperation = unsafe extern "system" fn(*const c_void, HCS_OPERATION_COMPLETION) -> HCS_OPERATION;
type CloseOperation = unsafe extern "system" fn(HCS_OPERATION);
type Enumerate = unsafe extern "system" fn(PCWSTR, HCS_OPERATION) -> HRESULT;
type WaitForResult = unsafe extern "system" fn(HCS_OPERATION, u32, *mut PWSTR) -> HRESULT;
type Open = unsafe extern "system" fn(PCWSTR, u32, *mut HCS_SYSTEM) -> HRESULT;
type Close = unsafe extern "system" fn(HCS_SYSTEM);
type Properties = unsafe extern "system" fn(HCS_SYSTEM, HCS_OPERATION, PCWSTR) -> HRESULT;

struct Hcs {
    create_operation: CreateOperation,
    close_operation: CloseOperation,
    enumerate: Enumerate,
    wait: WaitForResult,
    open: Open,
    close: Close,
    properties: Properties,
}

/// computecore.dll's functions, loaded once (the module stays loaded for the process's life).
fn hcs() -> io::Result<&'static Hcs> {
    static HCS: OnceLock<Result<Hcs, String>> = OnceLock::new();
    HCS.get_or_init(load_hcs).as_ref().map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.clone()))
}

fn load_hcs() -> Result<Hcs, String> {
    let name = wide("computecore.dll");
    // LOAD_LIBRARY_SEARCH_SYSTEM32: System32 only, never a DLL planted elsewhere on the path.
    // SAFETY: `name` is NUL-terminated; no file handle is passed (reserved, must be NULL).
    let module = unsafe { LoadLibraryExW(name.as_ptr(), std::ptr::null_mut(), LOAD_LIBRARY_SEARCH_SYSTEM32) };
    if module.is_null() {
        return Err(format!(
            "computecore.dll could not be loaded (no host compute service here?): {}",
            io::Error::last_os_error()
        ));
    }
    let find = |symbol: &'static [u8]| {
        // SAFETY: `module` is loaded (never freed); `symbol` is a NUL-terminated ASCII name.
        unsafe { GetProcAddress(module, symbol.as_ptr()) }.ok_or_else(|| {
            let shown = String::from_utf8_lossy(&symbol[..symbol.len() - 1]);
            format!("computecore.dll has no {shown}: {}", io::Error::last_os_error())
        })
    };
    // SAFETY: (each transmute) the function of that name in computecore.dll has that signature
    // in ComputeCore.h and the HCS reference (the same as windows-sys declares).
    unsafe {
        Ok(Hcs {
            create_operation: std::mem::transmute::<unsafe extern "system" fn() -> isize, CreateOperation>(find(
                b"HcsCreateOperation\0",
            )?),
            close_operation: std::mem::transmute::<unsafe extern "system" fn() -> isize, CloseOperation>(find(
                b"HcsCloseOperation\0",
            )?),
            enumerate: std::mem::transmute::<unsafe extern "system" fn() -> isize, Enumerate>(find(
                b"HcsEnumerateComputeSystems\0",
            )?),
            wait: std::mem::transmute::<unsafe extern "system" fn() -> isize, WaitForResult>(find(
                b"HcsWaitForOperationResult\0",
            )?),
            open: std::mem::transmute::<unsafe extern "system" fn() -> isize, Open>(find(b"HcsOpenComputeSystem\0")?),
            close: std::mem::transmute::<unsafe extern "system" fn() -> isize, Close>(find(
                b"HcsCloseComputeSystem\0",
            )?),
            properties: std::mem::transmute::<unsafe extern "system" fn() -> isize, Properties>(find(
                b"HcsGetComputeSystemProperties\0",
            )?),
        })
    }
}

/// An HCS operation, closed on drop (HcsCloseOperation: "freeing any tracking resources").
struct Operation(HCS_OPERATION, &'static Hcs);

impl Operation {
    fn new(hcs: &'static Hcs) -> io::Result<Operation> {
        // No context and no callback: the result is waited for (HcsWaitForOperationResult).
        // SAFETY: both parameters are documented as optional.
        let op = unsafe { (hcs.create_operation)(std::ptr::null(), None) };
        if op.is_null() {
            return Err(io::Error::other("HcsCreateOperation returned no operation"));
        }
        Ok(Operation(op, hcs))
    }

    /// The operation's result document, within `timeout`.
    fn wait(&self, timeout: Duration, what: &str) -> io::Result<String> {
        let ms = u32::try_from(timeout.as_millis()).unwrap_or(u32::MAX).max(1);
        let mut doc: PWSTR = std::ptr::null_mut();
        // SAFETY: a live operation that a call above started; `doc` is a valid out-pointer. The
        // document, success or failure, is the caller's to LocalFree.
        let hr = unsafe { (self.1.wait)(self.0, ms, &mut doc) };
        let doc = LocalWide(doc).text();
        if hr < 0 {
            return Err(hresult_error(what, hr, Some(&doc)));
        }
        Ok(doc)
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        // SAFETY: a live operation, closed once.
        unsafe { (self.1.close_operation)(self.0) };
    }
}

/// An open compute system, closed on drop (HcsCloseComputeSystem).
struct ComputeSystem {
    hcs: &'static Hcs,
    handle: HCS_SYSTEM,
}

impl Drop for ComputeSystem {
    fn drop(&mut self) {
        // SAFETY: a handle HcsOpenComputeSystem returned, closed once.
        unsafe { (self.hcs.close)(self.handle) };
    }
}

/// An HCS function's return: S_OK (or another success) means "the operation started
/// successfully".
fn started(hr: HRESULT, what: &str) -> io::Result<()> {
    if hr < 0 {
        return Err(hresult_error(what, hr, None));
    }
    Ok(())
}

/// `what` failed with `hr`; the error document (a ResultError) when HCS gave one, cut short.
fn hresult_error(what: &str, hr: HRESULT, doc: Option<&str>) -> io::Error {
    let mut text = format!("{what} failed: HRESULT 0x{:08x}", hr as u32);
    if let Some(doc) = doc.filter(|d| !d.is_empty()) {
        text.push_str(": ");
        text.extend(doc.chars().take(200).flat_map(char::escape_debug));
    }
    io::Error::other(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_wire::Isolation;
    use tokio::net::windows::named_pipe::{ClientOptions, ServerOptions};

    /// The process's own user SID, from its own token.
    fn my_sid() -> String {
        // SAFETY: the current process's pseudo handle, never closed.
        let me = unsafe { windows_sys::Win32::System::Threading::GetCurrentProcess() };
        let mut token: HANDLE = std::ptr::null_mut();
        // SAFETY: a valid process handle; `token` a valid out-pointer.
        assert_ne!(unsafe { OpenProcessToken(me, TOKEN_QUERY, &mut token) }, 0);
        // SAFETY: a token just opened, owned by nothing else.
        user_sid(&unsafe { OwnedHandle::from_raw_handle(token as RawHandle) }).unwrap()
    }

    fn in_a_job() -> bool {
        let mut r: BOOL = 0;
        // SAFETY: the current process's pseudo handle, never closed.
        let me = unsafe { windows_sys::Win32::System::Threading::GetCurrentProcess() };
        // SAFETY: a valid process handle; `r` a valid out-pointer.
        assert_ne!(unsafe { IsProcessInJob(me, std::ptr::null_mut(), &mut r) }, 0);
        r != 0
    }

    /// This process connects to its own pipe: the caller is this process, its user and its
    /// image, and (in no job) the host.
    #[tokio::test]
    async fn a_pipe_client_is_this_process_its_user_and_image() {
        let name = format!(r"\\.\pipe\csi-proxy-caller-test-{}", std::process::id());
        let server = ServerOptions::new().first_pipe_instance(true).create(&name).unwrap();
        let client = ClientOptions::new().open(&name).unwrap();
        server.connect().await.unwrap();
        let c = of_pipe(&server);
        assert_eq!(c.pid, Some(std::process::id()));
        assert_eq!(c.user.as_deref(), Some(my_sid().as_str()));
        assert!(c.user.as_deref().unwrap().starts_with("S-1-"), "{c:?}");
        let me = std::env::current_exe().unwrap();
        let exe = c.exe.clone().expect("the image");
        assert!(
            exe.eq_ignore_ascii_case(me.to_str().unwrap()) || exe.ends_with(me.file_name().unwrap().to_str().unwrap()),
            "{exe}"
        );
        if in_a_job() {
            // In a job: HCS is asked; where it is missing (Wine) that is said.
            match &c.isolation {
                Some(Isolation::Host) => {}
                Some(Isolation::Unknown { why }) => assert!(why.contains("computecore.dll"), "{why}"),
                other => panic!("{other:?}"),
            }
        } else {
            assert_eq!(c.isolation, Some(Isolation::Host));
        }
        // The connection is still there: the token and process agreed and it was checked.
        drop(client);
        // Gone: the process is this one still, but its end of the pipe is closed.
        let mut c = of_pipe(&server);
        for _ in 0..50 {
            if matches!(&c.isolation, Some(Isolation::Unknown { .. })) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            c = of_pipe(&server);
        }
        assert!(matches!(&c.isolation, Some(Isolation::Unknown { why }) if why.contains("disconnected")), "{c:?}");
    }

    /// The token the pipe holds for its client is its user's, and the thread is itself again
    /// afterwards (it has no thread token).
    #[tokio::test]
    async fn the_client_token_is_read_and_the_thread_reverts() {
        let name = format!(r"\\.\pipe\csi-proxy-caller-token-{}", std::process::id());
        let server = ServerOptions::new().first_pipe_instance(true).create(&name).unwrap();
        let _client = ClientOptions::new().open(&name).unwrap();
        server.connect().await.unwrap();
        let os = Os { pipe: server.as_raw_handle() as HANDLE };
        match os.client_token_user() {
            Ok(sid) => assert_eq!(sid, my_sid()),
            // Allowed by the contract before anything was read from the pipe.
            Err(e) => assert!(e.to_string().contains("ImpersonateNamedPipeClient"), "{e}"),
        }
        let mut token: HANDLE = std::ptr::null_mut();
        // SAFETY: the pseudo handle of this thread; `token` a valid out-pointer.
        let has = unsafe { OpenThreadToken(GetCurrentThread(), TOKEN_QUERY, 1, &mut token) } != 0;
        if has {
            // SAFETY: a token just opened.
            drop(unsafe { OwnedHandle::from_raw_handle(token as RawHandle) });
        }
        assert!(!has, "the thread still impersonates");
    }

    /// A process's own pseudo handle is in no compute system; computecore.dll's absence
    /// (Wine) is named, its presence answers a document.
    #[test]
    fn hcs_answers_or_says_it_is_missing() {
        let os = Os { pipe: std::ptr::null_mut() };
        match os.compute_systems(Duration::from_secs(2)) {
            Ok(doc) => assert!(doc.trim_start().starts_with('['), "{doc}"),
            Err(e) => assert!(e.to_string().contains("computecore.dll") || e.to_string().contains("HRESULT"), "{e}"),
        }
    }
}
