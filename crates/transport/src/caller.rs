//! The client of a connection, as the OS reports it: asked once when the connection is accepted
//! and attached to each of its requests (see [`csi_proxy_wire::Caller`]).

#[cfg(unix)]
use csi_proxy_wire::Caller;

/// The executable and cgroup of process `pid`, from procfs, and only if `pid` is still the
/// process that connected once they are read: a pidfd opened first tells whether it has exited
/// since (its pid could then be another process's), in which case both are `None`. What is left is
/// a client that exits and whose pid is reused between `SO_PEERCRED` and `pidfd_open`, within
/// microseconds; the kernel's `SO_PEERPIDFD` (Linux 6.5) would close it, but not every node's
/// kernel has it.
#[cfg(target_os = "linux")]
fn procfs_of(pid: u32) -> (Option<String>, Option<String>) {
    use rustix::event::{poll, PollFd, PollFlags};
    let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else { return (None, None) };
    let Ok(pidfd) = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) else {
        return (None, None);
    };
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok().map(|p| p.to_string_lossy().into_owned());
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok().and_then(|text| pod_cgroup(&text));
    // A pidfd polls readable once its process has exited.
    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    match poll(&mut fds, Some(&zero)) {
        Ok(0) => (exe, cgroup),
        _ => (None, None),
    }
}

/// The one cgroup path of `/proc/<pid>/cgroup` that says where the process runs: the unified
/// hierarchy's (`0::/path`) when it names a pod or there is nothing else, else the first v1
/// controller's line naming a pod (cgroup v1 nodes), else the unified one. Bounded.
#[cfg(any(target_os = "linux", test))]
pub fn pod_cgroup(text: &str) -> Option<String> {
    let paths: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some((controllers, path))
        })
        .collect();
    let unified = paths.iter().find(|(c, _)| c.is_empty()).map(|(_, p)| *p);
    let names_pod = |p: &&str| p.contains("kubepods");
    let chosen = unified
        .filter(names_pod)
        .or_else(|| paths.iter().map(|(_, p)| *p).find(names_pod))
        .or(unified)
        .or_else(|| paths.first().map(|(_, p)| *p))?;
    let mut end = chosen.len().min(csi_proxy_wire::caller::MAX_CGROUP);
    while !chosen.is_char_boundary(end) {
        end -= 1;
    }
    Some(chosen[..end].to_string())
}

/// The peer of a unix socket connection as it connected: SO_PEERCRED's pid, uid and gid (fixed by
/// the kernel at connect, whoever writes on the connection later), and that pid's executable and
/// cgroup, read now (at accept). Linux would also give each write's sender (SO_PASSCRED), but the
/// bytes reach HTTP/2 through plain reads, and tying a request's frames back to the writes that
/// carried them would take a transport of its own; so the audit trail names this connect-time
/// peer only.
#[cfg(unix)]
pub fn of_unix_stream(stream: &tokio::net::UnixStream) -> Caller {
    let Ok(cred) = stream.peer_cred() else { return Caller::default() };
    // 0 when the peer is in no PID namespace this process can see (a daemon in a container
    // without the host's PID namespace): no process to read.
    let pid = cred.pid().and_then(|p| u32::try_from(p).ok()).filter(|&p| p != 0);
    #[cfg(target_os = "linux")]
    let (exe, cgroup) = pid.map_or((None, None), procfs_of);
    #[cfg(not(target_os = "linux"))]
    let (exe, cgroup) = (None, None);
    Caller { pid, uid: Some(cred.uid()), gid: Some(cred.gid()), exe, cgroup, ..Caller::default() }
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
        let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        assert_eq!(c.cgroup, pod_cgroup(&mine));
        assert!(c.cgroup.is_some());
    }

    #[test]
    fn the_cgroup_that_names_the_pod_is_kept() {
        let v2 =
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podab_cd.slice/cri-containerd-12.scope\n";
        assert_eq!(pod_cgroup(v2).unwrap(), v2[3..].trim_end());
        let v1 = "12:pids:/kubepods/burstable/podab/34\n1:name=systemd:/kubepods/burstable/podab/34\n0::/\n";
        assert_eq!(pod_cgroup(v1).unwrap(), "/kubepods/burstable/podab/34");
        assert_eq!(
            pod_cgroup("0::/user.slice/user-0.slice/session-1.scope\n").unwrap(),
            "/user.slice/user-0.slice/session-1.scope"
        );
        let long = format!("0::/{}\n", "é".repeat(2000));
        assert!(pod_cgroup(&long).unwrap().len() <= csi_proxy_wire::caller::MAX_CGROUP);
        assert_eq!(pod_cgroup(""), None);
    }
}
