//! The client of a connection, as the OS reports it: asked once when the connection is accepted
//! and attached to each of its requests (see [`csi_proxy_wire::Caller`]).

#[cfg(unix)]
use csi_proxy_wire::Caller;

/// The executable of process `pid` (`/proc/<pid>/exe`). `None` when it has exited or procfs
/// does not say.
#[cfg(target_os = "linux")]
fn exe_of(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok().map(|p| p.to_string_lossy().into_owned())
}

/// The peer of a unix socket connection as it connected: SO_PEERCRED's pid, uid and gid (fixed by
/// the kernel at connect, whoever writes on the connection later), and that pid's executable, read
/// now (at accept). Linux would also give each write's sender (SO_PASSCRED), but the bytes reach
/// HTTP/2 through plain reads, and tying a request's frames back to the writes that carried them
/// would take a transport of its own; so the audit trail names this connect-time peer only.
#[cfg(unix)]
pub fn of_unix_stream(stream: &tokio::net::UnixStream) -> Caller {
    let Ok(cred) = stream.peer_cred() else { return Caller::default() };
    let pid = cred.pid().and_then(|p| u32::try_from(p).ok());
    #[cfg(target_os = "linux")]
    let exe = pid.and_then(exe_of);
    #[cfg(not(target_os = "linux"))]
    let exe = None;
    Caller { pid, uid: Some(cred.uid()), gid: Some(cred.gid()), user: None, exe }
}

#[cfg(windows)]
pub use windows::of_pipe;

#[cfg(windows)]
#[allow(unsafe_code)] // the process and token queries
mod windows {
    use csi_proxy_wire::Caller;
    use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
    use tokio::net::windows::named_pipe::NamedPipeServer;
    use windows_sys::Win32::Foundation::{LocalFree, HANDLE, HLOCAL};
    use windows_sys::Win32::Security::Authorization::ConvertSidToStringSidW;
    use windows_sys::Win32::Security::{GetTokenInformation, TokenUser, TOKEN_QUERY, TOKEN_USER};
    use windows_sys::Win32::System::Pipes::GetNamedPipeClientProcessId;
    use windows_sys::Win32::System::Threading::{
        OpenProcess, OpenProcessToken, QueryFullProcessImageNameW, PROCESS_NAME_WIN32,
        PROCESS_QUERY_LIMITED_INFORMATION,
    };

    /// The client process of a connected pipe instance: its ID, image path and user SID, as far
    /// as the OS lets this process see them.
    pub fn of_pipe(pipe: &NamedPipeServer) -> Caller {
        let mut pid = 0u32;
        // SAFETY: the handle is a connected pipe instance owned by `pipe`, alive for the call;
        // `pid` is a valid out-pointer.
        if unsafe { GetNamedPipeClientProcessId(pipe.as_raw_handle() as HANDLE, &mut pid) } == 0 {
            return Caller::default();
        }
        let mut caller = Caller { pid: Some(pid), ..Caller::default() };
        // SAFETY: plain call; a null result is checked before the handle is owned.
        let process = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
        if process.is_null() {
            return caller;
        }
        // SAFETY: a valid process handle that nothing else owns.
        let process = unsafe { OwnedHandle::from_raw_handle(process as RawHandle) };
        caller.exe = image_of(&process);
        caller.user = user_of(&process);
        caller
    }

    fn image_of(process: &OwnedHandle) -> Option<String> {
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
        (ok != 0).then(|| String::from_utf16_lossy(&buf[..len as usize]))
    }

    fn user_of(process: &OwnedHandle) -> Option<String> {
        let mut token: HANDLE = std::ptr::null_mut();
        // SAFETY: a valid process handle; `token` is a valid out-pointer.
        if unsafe { OpenProcessToken(process.as_raw_handle() as HANDLE, TOKEN_QUERY, &mut token) } == 0 {
            return None;
        }
        // SAFETY: a token handle just opened, owned by nothing else.
        let token = unsafe { OwnedHandle::from_raw_handle(token as RawHandle) };
        // TOKEN_USER is a pointer and a SID (at most 68 bytes); 256 bytes, aligned for the
        // pointer, hold it.
        let mut buf = [0u64; 32];
        let mut needed = 0u32;
        // SAFETY: `buf` is writable for its whole size, which is what we pass.
        let ok = unsafe {
            GetTokenInformation(
                token.as_raw_handle() as HANDLE,
                TokenUser,
                buf.as_mut_ptr().cast(),
                std::mem::size_of_val(&buf) as u32,
                &mut needed,
            )
        };
        if ok == 0 {
            return None;
        }
        // SAFETY: on success the buffer starts with a TOKEN_USER, suitably aligned (u64 array).
        let sid = unsafe { (*buf.as_ptr().cast::<TOKEN_USER>()).User.Sid };
        let mut text: *mut u16 = std::ptr::null_mut();
        // SAFETY: `sid` points into `buf`, still alive; `text` is a valid out-pointer.
        if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 || text.is_null() {
            return None;
        }
        // SAFETY: `text` is a NUL-terminated string LocalAlloc'ed by the call; read up to the NUL,
        // then freed once.
        unsafe {
            let len = (0..).take_while(|&i| *text.add(i) != 0).count();
            let s = String::from_utf16_lossy(std::slice::from_raw_parts(text, len));
            LocalFree(text as HLOCAL);
            Some(s)
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_unix_peer_is_this_process() {
        let (a, _b) = tokio::net::UnixStream::pair().unwrap();
        let c = of_unix_stream(&a);
        assert_eq!(c.pid, Some(std::process::id()));
        assert_eq!(c.uid, Some(rustix::process::getuid().as_raw()));
        assert_eq!(c.gid, Some(rustix::process::getgid().as_raw()));
        let me = std::env::current_exe().unwrap();
        assert_eq!(c.exe.as_deref(), Some(me.to_str().unwrap()));
    }
}
