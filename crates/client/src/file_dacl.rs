//! A file's DACL as SDDL, for the daemon's test of its audit file and csi-proxyctl
//! conformance's audit-file-dacl check on a Windows node (the one copy both binaries share).
//!
//! Microsoft's contract followed here:
//! - `GetNamedSecurityInfoW` with `SE_FILE_OBJECT` and `DACL_SECURITY_INFORMATION` returns the
//!   file's descriptor (the caller needs READ_CONTROL on the file); "free the returned buffer by
//!   calling the LocalFree function".
//! - `ConvertSecurityDescriptorToStringSecurityDescriptorW` writes the DACL part as SDDL
//!   (`D:<flags>(<ace>)...`); its string is freed with `LocalFree` too.

// A platform module: the file-security calls.
#![allow(unsafe_code)]

use std::os::windows::ffi::OsStrExt;
use std::path::Path;
use std::ptr;

use windows_sys::Win32::Foundation::{LocalFree, ERROR_SUCCESS, HLOCAL};
use windows_sys::Win32::Security::Authorization::{
    ConvertSecurityDescriptorToStringSecurityDescriptorW, GetNamedSecurityInfoW, SDDL_REVISION_1, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR};

/// Memory the system allocated with LocalAlloc, freed once with `LocalFree`.
struct Local(*mut core::ffi::c_void);

impl Drop for Local {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: from GetNamedSecurityInfoW or ConvertSecurityDescriptorToStringSecurity-
            // DescriptorW, both documented to be freed with LocalFree; freed here only.
            unsafe { LocalFree(self.0 as HLOCAL) };
        }
    }
}

/// `path`'s DACL as SDDL, e.g. `D:PAI(A;;FA;;;SY)(A;;FA;;;BA)`.
pub fn dacl_sddl(path: &Path) -> std::io::Result<String> {
    let wide: Vec<u16> = path.as_os_str().encode_wide().chain(std::iter::once(0)).collect();
    let mut sd: PSECURITY_DESCRIPTOR = ptr::null_mut();
    // SAFETY: `wide` is NUL-terminated and outlives the call; only the descriptor out-pointer is
    // asked for, the others may be null.
    let status = unsafe {
        GetNamedSecurityInfoW(
            wide.as_ptr(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut sd,
        )
    };
    if status != ERROR_SUCCESS {
        return Err(std::io::Error::from_raw_os_error(status as i32));
    }
    let sd = Local(sd);
    let (mut text, mut len): (*mut u16, u32) = (ptr::null_mut(), 0);
    // SAFETY: `sd.0` is the descriptor GetNamedSecurityInfoW returned; the out-pointers are valid.
    let ok = unsafe {
        ConvertSecurityDescriptorToStringSecurityDescriptorW(
            sd.0,
            SDDL_REVISION_1,
            DACL_SECURITY_INFORMATION,
            &mut text,
            &mut len,
        )
    };
    if ok == 0 || text.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    let text = Local(text.cast());
    // SAFETY: a string of `len` characters (the NUL perhaps counted, trimmed below) the call
    // returned, alive until `text` drops.
    let chars = unsafe { std::slice::from_raw_parts(text.0 as *const u16, len as usize) };
    Ok(String::from_utf16_lossy(chars).trim_end_matches('\0').to_string())
}
