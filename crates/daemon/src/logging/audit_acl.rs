//! Windows: the audit file is created with a DACL of its own, SYSTEM and Administrators only and
//! protected from inheritance, instead of whatever its folder would pass on (the folder may let
//! users write, and a record must not be rewritable by them).
//!
//! Microsoft's contract followed here:
//! - `CreateFileW`: "lpSecurityDescriptor ... specifies a SECURITY_DESCRIPTOR for a file" that is
//!   applied when the call creates the file (so no other ACL applies to it for a moment); "If
//!   CreateFile opens an existing file, it ignores lpSecurityDescriptor".
//! - So the file (existing or new) is then given the DACL through `SetSecurityInfo` with
//!   `PROTECTED_DACL_SECURITY_INFORMATION` ("the DACL cannot inherit ACEs"), which needs the
//!   handle opened with `WRITE_DAC`.
//! - The `P` in the SDDL sets `SE_DACL_PROTECTED` on a created file; `FA` is `FILE_ALL_ACCESS`.
//! - A descriptor from `ConvertStringSecurityDescriptorToSecurityDescriptorW` is freed with
//!   `LocalFree`, as its documentation says.
//!
//! The DACL is read back (tests, and csi-proxyctl conformance on a node) by
//! `csi_proxy_client::file_dacl`.

// A platform module: the file-security calls.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::path::Path;
use std::ptr;

use windows_sys::Win32::Foundation::{LocalFree, ERROR_SUCCESS, HLOCAL, INVALID_HANDLE_VALUE};
use windows_sys::Win32::Security::Authorization::{
    ConvertStringSecurityDescriptorToSecurityDescriptorW, SetSecurityInfo, SDDL_REVISION_1, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    GetSecurityDescriptorDacl, ACL, DACL_SECURITY_INFORMATION, PROTECTED_DACL_SECURITY_INFORMATION,
    PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, FILE_APPEND_DATA, FILE_ATTRIBUTE_NORMAL, FILE_FLAG_OPEN_REPARSE_POINT, FILE_READ_ATTRIBUTES,
    FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_WRITE_ATTRIBUTES, OPEN_ALWAYS, READ_CONTROL, SYNCHRONIZE, WRITE_DAC,
};

/// The audit file's DACL: full access for LocalSystem and BUILTIN\Administrators, nobody else,
/// nothing inherited.
pub const AUDIT_FILE_SDDL: &str = "D:P(A;;FA;;;SY)(A;;FA;;;BA)";

/// A security descriptor the system allocated, freed with `LocalFree`.
struct LocalDescriptor(PSECURITY_DESCRIPTOR);

impl Drop for LocalDescriptor {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from ConvertStringSecurityDescriptorToSecurityDescriptorW,
            // documented to allocate it with LocalAlloc; freed once.
            unsafe { LocalFree(self.0 as HLOCAL) };
        }
    }
}

fn descriptor(sddl: &str) -> io::Result<LocalDescriptor> {
    let wide: Vec<u16> = sddl.encode_utf16().chain(std::iter::once(0)).collect();
    let mut sd: PSECURITY_DESCRIPTOR = ptr::null_mut();
    // SAFETY: `wide` is NUL-terminated and outlives the call; `sd` is a valid out-pointer; the
    // size out-parameter is optional.
    let ok = unsafe {
        ConvertStringSecurityDescriptorToSecurityDescriptorW(wide.as_ptr(), SDDL_REVISION_1, &mut sd, ptr::null_mut())
    };
    if ok == 0 || sd.is_null() {
        return Err(io::Error::last_os_error());
    }
    Ok(LocalDescriptor(sd))
}

/// Opens `path` for appending (creating it with [`AUDIT_FILE_SDDL`]; an existing file is given
/// that DACL), without following a reparse point, shared for reading and writing but not
/// deleting.
pub fn open(path: &Path) -> io::Result<File> {
    let sd = descriptor(AUDIT_FILE_SDDL)?;
    let sa = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: sd.0 as *mut c_void,
        bInheritHandle: 0,
    };
    let wide: Vec<u16> = path.as_os_str().encode_wide().chain(std::iter::once(0)).collect();
    // Appending only (no FILE_WRITE_DATA): every write goes to the end, as std's append(true).
    let access =
        FILE_APPEND_DATA | FILE_READ_ATTRIBUTES | FILE_WRITE_ATTRIBUTES | READ_CONTROL | WRITE_DAC | SYNCHRONIZE;
    // SAFETY: `wide` is NUL-terminated and outlives the call; `sa` and the descriptor it points to
    // are valid for the call (CreateFileW copies the descriptor into the new file).
    let handle = unsafe {
        CreateFileW(
            wide.as_ptr(),
            access,
            FILE_SHARE_READ | FILE_SHARE_WRITE,
            &sa,
            OPEN_ALWAYS,
            FILE_ATTRIBUTE_NORMAL | FILE_FLAG_OPEN_REPARSE_POINT,
            ptr::null_mut(),
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a valid handle CreateFileW just returned, owned by nothing else.
    let file = File::from(unsafe { OwnedHandle::from_raw_handle(handle) });
    // An existing file kept its DACL (CreateFileW ignores the descriptor then); a new one has
    // ours already on Windows, and is given it here again, for where the create-time descriptor
    // is not kept (Wine derives a new file's DACL from its unix mode).
    set_dacl(&file, &sd)?;
    Ok(file)
}

/// Gives the open file `sd`'s DACL, protected from inheritance.
fn set_dacl(file: &File, sd: &LocalDescriptor) -> io::Result<()> {
    let (mut present, mut defaulted) = (0, 0);
    let mut dacl: *mut ACL = ptr::null_mut();
    // SAFETY: `sd.0` is a valid self-relative descriptor; the out-pointers are valid.
    let ok = unsafe { GetSecurityDescriptorDacl(sd.0, &mut present, &mut dacl, &mut defaulted) };
    if ok == 0 || present == 0 {
        return Err(io::Error::other("the audit file's descriptor has no DACL"));
    }
    // SAFETY: the handle is open with WRITE_DAC; `dacl` points into `sd`, alive for the call.
    let status = unsafe {
        SetSecurityInfo(
            file.as_raw_handle(),
            SE_FILE_OBJECT,
            DACL_SECURITY_INFORMATION | PROTECTED_DACL_SECURITY_INFORMATION,
            ptr::null_mut(),
            ptr::null_mut(),
            dacl,
            ptr::null(),
        )
    };
    if status != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(status as i32));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    fn open_plain(path: &Path) -> File {
        use std::os::windows::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .append(true)
            .access_mode(READ_CONTROL | WRITE_DAC | FILE_APPEND_DATA)
            .open(path)
            .unwrap()
    }

    /// `f`'s DACL as SDDL without the auto-inheritance flags (`AI`, `AR`), which Windows may add
    /// to a DACL set through SetSecurityInfo; `P` and the ACEs are what is set.
    fn dacl_as_set(path: &Path) -> String {
        let sddl = csi_proxy_client::file_dacl::dacl_sddl(path).unwrap();
        let at = sddl.find('(').unwrap_or(sddl.len());
        sddl[..at].replace("AI", "").replace("AR", "") + &sddl[at..]
    }

    /// Whether this system keeps a file's DACL as set. Wine 8 (Debian's, as in CI) does not: its
    /// server turns a DACL into unix mode bits and reads back one made from them (its
    /// wineserver calls no xattr function: it keeps no descriptor in `user.wine.sd`, even on a
    /// filesystem with user xattrs), so there the exact DACL is checked only on Windows:
    /// csi-proxyctl conformance's audit-file-dacl check.
    fn dacls_are_kept(dir: &Path) -> bool {
        let probe = dir.join("probe");
        std::fs::write(&probe, "").unwrap();
        let f = open_plain(&probe);
        set_dacl(&f, &descriptor("D:P(A;;FA;;;WD)").unwrap()).unwrap();
        dacl_as_set(&probe) == "D:P(A;;FA;;;WD)"
    }

    /// A new audit file gets exactly its DACL, protected (it had its folder's inherited ACL); an
    /// existing file with another DACL is given it too, and is appended to.
    #[test]
    fn the_audit_file_has_system_and_administrators_only() {
        let dir = std::env::temp_dir().join(format!("csi-proxy-audit-acl-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let other = dir.join("existing.log");
        std::fs::write(&other, "kept\n").unwrap();
        // Both calls succeed (CreateFileW with the descriptor, SetSecurityInfo) wherever this runs.
        let new = open(&path).unwrap();
        let existing = open(&other).unwrap();
        if dacls_are_kept(&dir) {
            assert_eq!(dacl_as_set(&path), AUDIT_FILE_SDDL);
            assert_eq!(dacl_as_set(&other), AUDIT_FILE_SDDL);
        } else {
            eprintln!(
                "this system does not keep file DACLs (Wine): read back {:?}; the exact DACL is checked on Windows (csi-proxyctl conformance: audit-file-dacl)",
                csi_proxy_client::file_dacl::dacl_sddl(&path).unwrap()
            );
        }
        drop((new, existing));
        assert_eq!(std::fs::read_to_string(&other).unwrap(), "kept\n", "appended to, not truncated");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
