//! The real [`Win32`] platform: each method is the documented call (or one open and one call)
//! named in the trait, with only the buffer handling around it. Failures are `io::Error`s that
//! carry the Win32 code, which the logic in `crate::windows` matches on.

use super::nt::Handle;
use crate::types::Secret;
use crate::windows::{Access, Win32};
use std::io;
use std::ptr::{null, null_mut};
use windows_sys::core::BOOL;
use windows_sys::Win32::Devices::DeviceAndDriverInstallation::{
    CM_Get_Device_Interface_ListW, CM_Get_Device_Interface_List_SizeW, CM_GET_DEVICE_INTERFACE_LIST_PRESENT, CONFIGRET,
    CR_ACCESS_DENIED, CR_BUFFER_SMALL, CR_FAILURE, CR_INVALID_DATA, CR_INVALID_FLAG, CR_INVALID_POINTER,
    CR_NO_SUCH_DEVICE_INTERFACE, CR_OUT_OF_MEMORY, CR_SUCCESS,
};
use windows_sys::Win32::Foundation::{
    CloseHandle, SetLastError, ERROR_EXTENDED_ERROR, ERROR_FILE_NOT_FOUND, ERROR_INSUFFICIENT_BUFFER,
    ERROR_INVALID_NAME, ERROR_INVALID_PARAMETER, ERROR_MORE_DATA, ERROR_NO_MORE_FILES, ERROR_PATH_NOT_FOUND,
    GENERIC_READ, GENERIC_WRITE, HANDLE, INVALID_HANDLE_VALUE, MAX_PATH, NO_ERROR,
};
use windows_sys::Win32::NetworkManagement::WNet::{
    WNetAddConnection2W, WNetCancelConnection2W, WNetGetLastErrorW, CONNECT_TEMPORARY, NETRESOURCEW, RESOURCETYPE_DISK,
};
use windows_sys::Win32::Security::{
    ImpersonateLoggedOnUser, LogonUserW, RevertToSelf, LOGON32_LOGON_NEW_CREDENTIALS, LOGON32_PROVIDER_WINNT50,
};
use windows_sys::Win32::Storage::FileSystem::{
    DeleteVolumeMountPointW, FindFirstVolumeW, FindNextVolumeW, FindVolumeClose, FlushFileBuffers, GetDiskFreeSpaceExW,
    GetFileAttributesW, GetVolumeInformationW, GetVolumeNameForVolumeMountPointW, GetVolumePathNameW,
    GetVolumePathNamesForVolumeNameW, SetVolumeMountPointW, INVALID_FILE_ATTRIBUTES,
};
use windows_sys::Win32::System::Ioctl::GUID_DEVINTERFACE_DISK;
use windows_sys::Win32::System::IO::DeviceIoControl;

/// First output buffer of [`Win32::ioctl`]; enough for every fixed-size answer and for the
/// layouts and extent lists of ordinary disks.
const IOCTL_FIRST: usize = 4 << 10;
/// Largest output buffer [`Win32::ioctl`] grows to; no answer the backend asks for comes near.
const IOCTL_BOUND: usize = 1 << 20;
/// Tries of the size-then-list pairs whose list can grow in between (interfaces, mount points).
const LIST_TRIES: usize = 8;
/// A volume GUID path is 49 characters and a NUL (documented as 50); a little more for safety.
const VOLUME_NAME_UNITS: usize = 64;

/// The Windows host's Win32 calls.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealWin32;

impl Win32 for RealWin32 {
    fn volumes(&self) -> io::Result<Vec<String>> {
        let mut buf = [0u16; MAX_PATH as usize + 1];
        let first = checked(
            "FindFirstVolumeW",
            |&h| h == INVALID_HANDLE_VALUE,
            // SAFETY: the buffer holds the stated number of units and outlives the call.
            || unsafe { FindFirstVolumeW(buf.as_mut_ptr(), buf.len() as u32) },
        );
        let find = match first {
            Ok(h) => FindVolume(h),
            Err(e) if is(&e, ERROR_NO_MORE_FILES) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut names = vec![until_nul(&buf)?];
        loop {
            let next = call_bool("FindNextVolumeW", || {
                // SAFETY: `find` holds an open find handle; the buffer is as above.
                unsafe { FindNextVolumeW(find.0, buf.as_mut_ptr(), buf.len() as u32) }
            });
            match next {
                Ok(()) => names.push(until_nul(&buf)?),
                Err(e) if is(&e, ERROR_NO_MORE_FILES) => return Ok(names),
                Err(e) => return Err(e),
            }
        }
    }

    fn disk_interfaces(&self) -> io::Result<Vec<String>> {
        for _ in 0..LIST_TRIES {
            let mut len = 0u32;
            // SAFETY: `len` and the GUID are live; no device ID filter.
            let cr = unsafe {
                CM_Get_Device_Interface_List_SizeW(
                    &mut len,
                    &GUID_DEVINTERFACE_DISK,
                    null(),
                    CM_GET_DEVICE_INTERFACE_LIST_PRESENT,
                )
            };
            if cr != CR_SUCCESS {
                return Err(configret_error("CM_Get_Device_Interface_List_SizeW", cr));
            }
            // `len` counts the final NUL of the list; never hand over an empty buffer.
            let mut buf = vec![0u16; (len as usize).max(1)];
            // SAFETY: the buffer holds the stated number of units and outlives the call.
            let cr = unsafe {
                CM_Get_Device_Interface_ListW(
                    &GUID_DEVINTERFACE_DISK,
                    null(),
                    buf.as_mut_ptr(),
                    buf.len() as u32,
                    CM_GET_DEVICE_INTERFACE_LIST_PRESENT,
                )
            };
            match cr {
                CR_SUCCESS => return split_multi_sz(&buf),
                // A disk arrived between the two calls.
                CR_BUFFER_SMALL => tracing::debug!(units = buf.len(), "disk interface list grew; asking again"),
                cr => return Err(configret_error("CM_Get_Device_Interface_ListW", cr)),
            }
        }
        Err(configret_error("CM_Get_Device_Interface_ListW", CR_BUFFER_SMALL))
    }

    fn ioctl(&self, path: &str, code: u32, input: &[u8], access: Access) -> io::Result<Vec<u8>> {
        let access = match access {
            Access::Query => 0,
            Access::Read => GENERIC_READ,
            Access::ReadWrite => GENERIC_READ | GENERIC_WRITE,
        };
        let device = open_device(path, access)?;
        let in_len = u32::try_from(input.len()).map_err(|_| os_error(ERROR_INVALID_PARAMETER))?;
        let in_ptr = if input.is_empty() { null() } else { input.as_ptr().cast() };
        with_growing_buffer(IOCTL_FIRST, IOCTL_BOUND, |out| {
            let mut got = 0u32;
            // SAFETY: input and output buffers are valid for their stated lengths and outlive
            // the call, which is synchronous (no OVERLAPPED; the handle was opened without
            // FILE_FLAG_OVERLAPPED).
            call_bool("DeviceIoControl", || unsafe {
                DeviceIoControl(
                    device.raw(),
                    code,
                    in_ptr,
                    in_len,
                    out.as_mut_ptr().cast(),
                    out.len() as u32,
                    &mut got,
                    null_mut(),
                )
            })?;
            Ok(got as usize)
        })
    }

    fn filesystem_name(&self, root: &str) -> io::Result<String> {
        let root = wide_z(root)?;
        let mut name = [0u16; MAX_PATH as usize + 1];
        // SAFETY: `root` is NUL-terminated; the name buffer holds the stated number of units;
        // the outputs we do not want are null, which the call allows.
        call_bool("GetVolumeInformationW", || unsafe {
            GetVolumeInformationW(
                root.as_ptr(),
                null_mut(),
                0,
                null_mut(),
                null_mut(),
                null_mut(),
                name.as_mut_ptr(),
                name.len() as u32,
            )
        })?;
        until_nul(&name)
    }

    fn free_space(&self, root: &str) -> io::Result<(u64, u64)> {
        let root = wide_z(root)?;
        let (mut total, mut free) = (0u64, 0u64);
        // The volume's own free bytes (TotalNumberOfFreeBytes), whatever the caller's quota
        // leaves it: that is MSFT_Volume.SizeRemaining, which upstream reports.
        // SAFETY: `root` is NUL-terminated; the outputs are live locals; the per-caller count
        // is not wanted, and null is allowed for it.
        call_bool("GetDiskFreeSpaceExW", || unsafe {
            GetDiskFreeSpaceExW(root.as_ptr(), null_mut(), &mut total, &mut free)
        })?;
        Ok((total, free))
    }

    fn flush(&self, device: &str) -> io::Result<()> {
        let device = open_device(device, GENERIC_READ | GENERIC_WRITE)?;
        // SAFETY: an open handle with write access.
        call_bool("FlushFileBuffers", || unsafe { FlushFileBuffers(device.raw()) })
    }

    fn set_mount_point(&self, dir: &str, volume: &str) -> io::Result<()> {
        let (dir, volume) = (wide_z(dir)?, wide_z(volume)?);
        // SAFETY: both strings are NUL-terminated and outlive the call.
        call_bool("SetVolumeMountPointW", || unsafe { SetVolumeMountPointW(dir.as_ptr(), volume.as_ptr()) })
    }

    fn delete_mount_point(&self, dir: &str) -> io::Result<()> {
        let dir = wide_z(dir)?;
        // SAFETY: NUL-terminated and outlives the call.
        call_bool("DeleteVolumeMountPointW", || unsafe { DeleteVolumeMountPointW(dir.as_ptr()) })
    }

    fn volume_path_name(&self, path: &str) -> io::Result<String> {
        let path = wide_z(path)?;
        // As documented: MAX_PATH, or for a longer path its length plus a `\` and the NUL
        // (`path` already counts its NUL).
        let mut buf = vec![0u16; (MAX_PATH as usize).max(path.len() + 1)];
        // SAFETY: `path` is NUL-terminated; the buffer holds the stated number of units.
        call_bool("GetVolumePathNameW", || unsafe {
            GetVolumePathNameW(path.as_ptr(), buf.as_mut_ptr(), buf.len() as u32)
        })?;
        until_nul(&buf)
    }

    fn volume_name_for_mount_point(&self, mount_point: &str) -> io::Result<String> {
        let mount_point = wide_z(mount_point)?;
        let mut buf = [0u16; VOLUME_NAME_UNITS];
        // SAFETY: `mount_point` is NUL-terminated; the buffer holds the stated number of units.
        call_bool("GetVolumeNameForVolumeMountPointW", || unsafe {
            GetVolumeNameForVolumeMountPointW(mount_point.as_ptr(), buf.as_mut_ptr(), buf.len() as u32)
        })?;
        until_nul(&buf)
    }

    fn mount_points_of(&self, volume: &str) -> io::Result<Vec<String>> {
        let volume = wide_z(volume)?;
        let mut buf = vec![0u16; MAX_PATH as usize + 1];
        for _ in 0..LIST_TRIES {
            let mut needed = 0u32;
            // SAFETY: `volume` is NUL-terminated; the buffer holds the stated number of units;
            // `needed` is a live local.
            let listed = call_bool("GetVolumePathNamesForVolumeNameW", || unsafe {
                GetVolumePathNamesForVolumeNameW(volume.as_ptr(), buf.as_mut_ptr(), buf.len() as u32, &mut needed)
            });
            let e = match listed {
                // `needed` counts what was written, the final NUL included.
                Ok(()) => return split_multi_sz(&buf[..(needed as usize).min(buf.len())]),
                Err(e) => e,
            };
            // On ERROR_MORE_DATA `needed` is the size wanted. It is asked for again because a
            // folder may be mounted in between; a size that would not grow the buffer is not.
            if !is(&e, ERROR_MORE_DATA) || needed as usize <= buf.len() {
                return Err(e);
            }
            tracing::debug!(units = needed, "mount point list longer than the buffer; asking again");
            buf = vec![0u16; needed as usize];
        }
        Err(os_error(ERROR_MORE_DATA))
    }

    fn attributes(&self, path: &str) -> io::Result<Option<u32>> {
        let path = wide_z(path)?;
        let attrs = checked(
            "GetFileAttributesW",
            |&a| a == INVALID_FILE_ATTRIBUTES,
            // SAFETY: NUL-terminated and outlives the call.
            || unsafe { GetFileAttributesW(path.as_ptr()) },
        );
        match attrs {
            Ok(a) => Ok(Some(a)),
            Err(e) if is(&e, ERROR_FILE_NOT_FOUND) || is(&e, ERROR_PATH_NOT_FOUND) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn connect_as(&self, remote: &str, username: &str, password: &Secret) -> io::Result<()> {
        let (domain, user) = username.split_once('\\').unwrap_or(("", username));
        let (remote, whole, user, domain) = (wide_z(remote)?, wide_z(username)?, wide_z(user)?, wide_z(domain)?);
        let secret = Wiped(wide_z(password.expose())?);
        // A thread of its own: the impersonation ends with it whatever happens.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let mut token: HANDLE = null_mut();
                    call_bool("LogonUserW", || {
                        // SAFETY: NUL-terminated strings that outlive the call; `token` is written once.
                        unsafe {
                            LogonUserW(
                                user.as_ptr(),
                                if domain.len() > 1 { domain.as_ptr() } else { null() },
                                secret.0.as_ptr(),
                                LOGON32_LOGON_NEW_CREDENTIALS,
                                LOGON32_PROVIDER_WINNT50,
                                &mut token,
                            )
                        }
                    })?;
                    let token = Token(token);
                    // SAFETY: `token` is an open primary token of this process.
                    call_bool("ImpersonateLoggedOnUser", || unsafe { ImpersonateLoggedOnUser(token.0) })?;
                    let resource = NETRESOURCEW {
                        dwType: RESOURCETYPE_DISK,
                        lpRemoteName: remote.as_ptr().cast_mut(),
                        ..Default::default()
                    };
                    // SAFETY: `resource` points at NUL-terminated strings that outlive the call,
                    // which only reads them.
                    let code =
                        unsafe { WNetAddConnection2W(&resource, secret.0.as_ptr(), whole.as_ptr(), CONNECT_TEMPORARY) };
                    // Read at once, on this thread, before any other WNet call can set another.
                    let extended = (code == ERROR_EXTENDED_ERROR).then(last_network_error);
                    if code == NO_ERROR {
                        // SAFETY: NUL-terminated; cancels the connection just made, in this session.
                        unsafe { WNetCancelConnection2W(remote.as_ptr(), 0, 1) };
                    }
                    // SAFETY: ends this thread's impersonation; the thread ends right after anyway.
                    unsafe { RevertToSelf() };
                    match (code, extended) {
                        (NO_ERROR, _) => Ok(()),
                        (_, Some(Some(provider))) => Err(provider.into_io()),
                        _ => Err(os_error(code)),
                    }
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("the credential check's thread panicked")))
        })
    }
}

/// Characters of each WNetGetLastErrorW buffer: at least the 256 Microsoft recommends for the
/// error text; a longer text is truncated by the call, still NUL-terminated.
const NET_ERROR_UNITS: usize = 512;

/// What the network provider said about the WNet call that just answered ERROR_EXTENDED_ERROR on
/// this thread; `None` when WNetGetLastErrorW itself fails.
///
/// Microsoft's contract ("Retrieving Network Errors", and WNetGetLastErrorW in winnetwk.h): when
/// a WNet function returns ERROR_EXTENDED_ERROR, WNetGetLastError retrieves the provider's own
/// error code (specific to the provider, not generally a winerror.h code), a NUL-terminated
/// description and the provider's name; a buffer too small for a string gets it truncated but
/// NUL-terminated; the call returns NO_ERROR on success and ERROR_INVALID_ADDRESS for a bad
/// buffer. The buffers here are fixed, and each is read only up to its first NUL or its end.
fn last_network_error() -> Option<crate::windows::ProviderError> {
    let mut code = 0u32;
    let mut text = vec![0u16; NET_ERROR_UNITS];
    let mut name = vec![0u16; NET_ERROR_UNITS];
    // SAFETY: `code` is a valid u32 to write; each buffer holds the stated number of UTF-16
    // units and outlives the call.
    let rc = unsafe {
        WNetGetLastErrorW(&mut code, text.as_mut_ptr(), text.len() as u32, name.as_mut_ptr(), name.len() as u32)
    };
    if rc != NO_ERROR {
        tracing::debug!(rc, "WNetGetLastErrorW failed after ERROR_EXTENDED_ERROR");
        return None;
    }
    let until_nul = |b: &[u16]| String::from_utf16_lossy(&b[..b.iter().position(|&u| u == 0).unwrap_or(b.len())]);
    Some(crate::windows::ProviderError {
        code,
        text: until_nul(&text).trim_end().to_owned(),
        provider: until_nul(&name),
    })
}

/// UTF-16 of a password, overwritten when dropped.
struct Wiped(Vec<u16>);

impl Drop for Wiped {
    fn drop(&mut self) {
        for u in self.0.iter_mut() {
            // SAFETY: a valid, aligned element of the vector; volatile so the wipe is not elided.
            unsafe { std::ptr::write_volatile(u, 0) };
        }
    }
}

/// A logon token, closed on drop.
struct Token(HANDLE);

impl Drop for Token {
    fn drop(&mut self) {
        // SAFETY: we own the token returned by LogonUserW and close it once.
        unsafe { CloseHandle(self.0) };
    }
}

/// A FindFirstVolumeW handle, closed on drop.
struct FindVolume(HANDLE);

impl Drop for FindVolume {
    fn drop(&mut self) {
        // SAFETY: we own the find handle, returned by FindFirstVolumeW, and close it once.
        unsafe { FindVolumeClose(self.0) };
    }
}

/// Opens an existing device (or file) shared read/write, for synchronous I/O, through the
/// filesystem group's opener. A name with a NUL is refused first: Windows would cut it short.
fn open_device(path: &str, access: u32) -> io::Result<Handle> {
    wide_z(path)?;
    super::nt::open_path(path, access, 0)
}

/// Runs `fill` on a zeroed buffer of `first` bytes and returns what it wrote (the count it
/// returns). While it fails with ERROR_INSUFFICIENT_BUFFER or ERROR_MORE_DATA the buffer is
/// doubled, up to `bound`; a failure at `bound` is returned as it is.
fn with_growing_buffer(
    first: usize,
    bound: usize,
    mut fill: impl FnMut(&mut [u8]) -> io::Result<usize>,
) -> io::Result<Vec<u8>> {
    let mut size = first.min(bound);
    loop {
        let mut buf = vec![0u8; size];
        match fill(&mut buf) {
            Ok(n) => {
                buf.truncate(n);
                return Ok(buf);
            }
            Err(e) if (is(&e, ERROR_INSUFFICIENT_BUFFER) || is(&e, ERROR_MORE_DATA)) && size < bound => {
                size = size.saturating_mul(2).min(bound);
            }
            Err(e) => {
                if size >= bound {
                    tracing::debug!(bytes = size, error = %e, "I/O control output still too small at the bound");
                }
                return Err(e);
            }
        }
    }
}

/// Makes a call whose failure (`failed`) is explained by the thread's last error, clearing
/// that first: some of Wine's stubs fail without setting one, and a stale code from an earlier
/// call would then be taken for the reason.
fn checked<T>(name: &str, failed: impl FnOnce(&T) -> bool, call: impl FnOnce() -> T) -> io::Result<T> {
    // SAFETY: sets the calling thread's last-error value; no memory is involved.
    unsafe { SetLastError(0) };
    let result = call();
    if !failed(&result) {
        return Ok(result);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(0) {
        return Err(io::Error::other(format!("{name} failed without setting an error code")));
    }
    Err(e)
}

/// [`checked`] for the calls that return a BOOL.
fn call_bool(name: &str, call: impl FnOnce() -> BOOL) -> io::Result<()> {
    checked(name, |&ok| ok == 0, call).map(drop)
}

fn os_error(code: u32) -> io::Error {
    io::Error::from_raw_os_error(code as i32)
}

fn is(e: &io::Error, code: u32) -> bool {
    e.raw_os_error() == Some(code as i32)
}

/// NUL-terminated UTF-16. A NUL inside would silently cut the name short, so it is refused
/// as Windows refuses a bad name.
fn wide_z(s: &str) -> io::Result<Vec<u16>> {
    if s.contains('\0') {
        return Err(os_error(ERROR_INVALID_NAME));
    }
    Ok(s.encode_utf16().chain([0]).collect())
}

/// The string at the start of `buf`, up to its NUL (or the whole buffer without one).
fn until_nul(buf: &[u16]) -> io::Result<String> {
    let end = buf.iter().position(|&u| u == 0).unwrap_or(buf.len());
    String::from_utf16(&buf[..end]).map_err(|_| not_utf16(&buf[..end]))
}

/// The strings of a NUL-separated list ended by an empty string (a double NUL).
fn split_multi_sz(buf: &[u16]) -> io::Result<Vec<String>> {
    buf.split(|&u| u == 0)
        .take_while(|s| !s.is_empty())
        .map(|s| String::from_utf16(s).map_err(|_| not_utf16(s)))
        .collect()
}

fn not_utf16(units: &[u16]) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("Windows returned a name that is not valid UTF-16: {:?}", String::from_utf16_lossy(units)),
    )
}

/// A configuration manager failure, named by its CONFIGRET: there is no Win32 code to carry.
fn configret_error(call: &str, cr: CONFIGRET) -> io::Error {
    let name = match cr {
        CR_OUT_OF_MEMORY => "CR_OUT_OF_MEMORY",
        CR_INVALID_POINTER => "CR_INVALID_POINTER",
        CR_INVALID_FLAG => "CR_INVALID_FLAG",
        CR_FAILURE => "CR_FAILURE",
        CR_BUFFER_SMALL => "CR_BUFFER_SMALL",
        CR_INVALID_DATA => "CR_INVALID_DATA",
        CR_ACCESS_DENIED => "CR_ACCESS_DENIED",
        CR_NO_SUCH_DEVICE_INTERFACE => "CR_NO_SUCH_DEVICE_INTERFACE",
        _ => "see cfgmgr32.h",
    };
    let kind = match cr {
        CR_OUT_OF_MEMORY => io::ErrorKind::OutOfMemory,
        CR_ACCESS_DENIED => io::ErrorKind::PermissionDenied,
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, format!("{call} returned CONFIGRET {cr:#x} ({name}), expected CR_SUCCESS"))
}

#[cfg(test)]
mod tests;
