//! The `csiproxy` service as the service control manager reports it, for the preshutdown check:
//! OpenSCManagerW (SC_MANAGER_CONNECT), OpenServiceW (SERVICE_QUERY_STATUS | SERVICE_QUERY_CONFIG),
//! QueryServiceStatus and QueryServiceConfig2W with SERVICE_CONFIG_PRESHUTDOWN_INFO, whose buffer is
//! a SERVICE_PRESHUTDOWN_INFO (one DWORD, the timeout in milliseconds). Both handles are closed with
//! CloseServiceHandle, as OpenSCManagerW's and OpenServiceW's pages say.
#![cfg_attr(windows, allow(unsafe_code))] // the service control manager's calls; each block says why

use super::named::PreshutdownState;

/// No such service on this node (OpenServiceW: ERROR_SERVICE_DOES_NOT_EXIST).
pub struct Missing;

#[cfg(not(windows))]
pub fn preshutdown_state(_: &str) -> Result<std::io::Result<PreshutdownState>, Missing> {
    Err(Missing)
}

#[cfg(windows)]
pub fn preshutdown_state(name: &str) -> Result<std::io::Result<PreshutdownState>, Missing> {
    use std::io;
    use windows_sys::Win32::System::Services::{
        OpenSCManagerW, OpenServiceW, QueryServiceConfig2W, QueryServiceStatus, SC_MANAGER_CONNECT,
        SERVICE_ACCEPT_PRESHUTDOWN, SERVICE_CONFIG_PRESHUTDOWN_INFO, SERVICE_QUERY_CONFIG, SERVICE_QUERY_STATUS,
        SERVICE_RUNNING, SERVICE_STATUS,
    };
    const ERROR_SERVICE_DOES_NOT_EXIST: i32 = 1060;
    let wide: Vec<u16> = name.encode_utf16().chain(std::iter::once(0)).collect();
    // SAFETY: FFI. Null machine and database names: the local computer's active database.
    let manager = Handle(unsafe { OpenSCManagerW(std::ptr::null(), std::ptr::null(), SC_MANAGER_CONNECT) });
    if manager.0.is_null() {
        return Ok(Err(io::Error::last_os_error()));
    }
    // SAFETY: FFI. `manager` is open; `wide` is NUL-terminated and alive for the call.
    let service =
        Handle(unsafe { OpenServiceW(manager.0, wide.as_ptr(), SERVICE_QUERY_STATUS | SERVICE_QUERY_CONFIG) });
    if service.0.is_null() {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(ERROR_SERVICE_DOES_NOT_EXIST) {
            return Err(Missing);
        }
        return Ok(Err(e));
    }
    // SAFETY: a zeroed SERVICE_STATUS (plain integers) is a valid out-buffer.
    let mut status: SERVICE_STATUS = unsafe { std::mem::zeroed() };
    // SAFETY: FFI. The handle is open with SERVICE_QUERY_STATUS; `status` is a valid out-pointer.
    if unsafe { QueryServiceStatus(service.0, &mut status) } == 0 {
        return Ok(Err(io::Error::last_os_error()));
    }
    let (mut timeout_ms, mut needed) = (0u32, 0u32);
    // SAFETY: FFI. The handle is open with SERVICE_QUERY_CONFIG; the buffer is a DWORD, the size of
    // SERVICE_PRESHUTDOWN_INFO, and that size is passed.
    let ok = unsafe {
        QueryServiceConfig2W(
            service.0,
            SERVICE_CONFIG_PRESHUTDOWN_INFO,
            (&mut timeout_ms as *mut u32).cast(),
            4,
            &mut needed,
        )
    };
    if ok == 0 {
        return Ok(Err(io::Error::last_os_error()));
    }
    Ok(Ok(PreshutdownState {
        running: status.dwCurrentState == SERVICE_RUNNING,
        accepts_preshutdown: status.dwControlsAccepted & SERVICE_ACCEPT_PRESHUTDOWN != 0,
        timeout_ms,
    }))
}

/// A service control manager handle, closed once.
#[cfg(windows)]
struct Handle(windows_sys::Win32::System::Services::SC_HANDLE);

#[cfg(windows)]
impl Drop for Handle {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: FFI. A handle OpenSCManagerW or OpenServiceW returned, closed once, here.
            unsafe { windows_sys::Win32::System::Services::CloseServiceHandle(self.0) };
        }
    }
}
