//! The Windows backend's logic, written against small platform traits so that it builds and is
//! tested on every OS (the pattern of youki's `Syscall`): [`Win32`] for the documented Win32
//! calls (volume management, device I/O controls), [`wmi::Wmi`] for the few things Windows only
//! offers through WMI (formatting, partitioning, resizing, SMB global mappings, iSCSI), and
//! [`system::Scm`] for the service control manager and the firmware tables.
//!
//! The real implementations live in `platform` (built on Windows only) and stay thin: they make
//! the call and hand back bytes, strings or rows. Everything that decides — which call, in what order, what a
//! result means, which error the client sees — is here, and runs against the scripted platform
//! of the tests.
//!
//! Path containment, which every group handed a path obeys, is [`contain`], written against a
//! third platform trait, [`contain::Nt`] (handle-relative opens).
//!
//! Volume IDs are upstream's `MSFT_Volume.UniqueId` form, `\\?\Volume{GUID}\`.

#[cfg(windows)]
pub mod platform;
pub mod wmi;

#[cfg(any(test, feature = "scripted"))]
pub mod script;

use crate::Error;
use std::fmt;
use std::io;

/// Win32 error codes the logic tells apart (winerror.h). Real calls report them as
/// [`io::Error::raw_os_error`]; the scripted platform makes them with [`os_error`].
pub mod code {
    pub const ERROR_INVALID_FUNCTION: i32 = 1;
    pub const ERROR_FILE_NOT_FOUND: i32 = 2;
    pub const ERROR_PATH_NOT_FOUND: i32 = 3;
    pub const ERROR_ACCESS_DENIED: i32 = 5;
    pub const ERROR_INVALID_PARAMETER: i32 = 87;
    pub const ERROR_NOT_READY: i32 = 21;
    pub const ERROR_INSUFFICIENT_BUFFER: i32 = 122;
    pub const ERROR_INVALID_NAME: i32 = 123;
    pub const ERROR_DIR_NOT_EMPTY: i32 = 145;
    pub const ERROR_MORE_DATA: i32 = 234;
    pub const ERROR_NOT_SUPPORTED: i32 = 50;
    pub const ERROR_UNRECOGNIZED_VOLUME: i32 = 1005;
    pub const ERROR_EXTENDED_ERROR: i32 = 1208;
    pub const ERROR_SESSION_CREDENTIAL_CONFLICT: i32 = 1219;
    pub const ERROR_NOT_A_REPARSE_POINT: i32 = 4390;
    pub const ERROR_INVALID_REPARSE_DATA: i32 = 4392;
    pub const ERROR_REPARSE_TAG_INVALID: i32 = 4393;
    pub const ERROR_REPARSE_TAG_MISMATCH: i32 = 4394;
}

/// An OS error with a Win32 code, as the real layer returns them.
pub fn os_error(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// What `WNetGetLastErrorW` reports after a WNet call answered ERROR_EXTENDED_ERROR (1208): the
/// network provider's own code (not generally a winerror.h code, Microsoft says), its text and
/// the provider's name, each as the provider wrote it (bounded by the buffers they were read
/// into). [`Win32::connect_as`] hands it back inside its `io::Error` (see [`provider_error`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderError {
    pub code: u32,
    pub text: String,
    pub provider: String,
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the network provider {:?} reported error {}: {:?}", self.provider, self.code, self.text)
    }
}

impl std::error::Error for ProviderError {}

impl ProviderError {
    /// The `io::Error` a WNet call's extended error travels in.
    pub fn into_io(self) -> io::Error {
        io::Error::other(self)
    }
}

/// The provider's error inside `e`, when the call answered ERROR_EXTENDED_ERROR and the provider
/// said more.
pub fn provider_error(e: &io::Error) -> Option<&ProviderError> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<ProviderError>())
}

/// A Win32 failure, classified by its Win32 code (the logic also runs where codes are not the
/// OS's own, so `io::ErrorKind` can't be trusted): the one table of the backend's plain Win32
/// failures. ERROR_NOT_READY (a disk without media, offline or still arriving) is a state of
/// the device the caller or the operator must change, FailedPrecondition, not Unavailable,
/// which clients read as "this daemon is down, try again".
pub(crate) fn failure(what: impl fmt::Display, e: io::Error) -> Error {
    let msg = format!("{what}: {e}");
    match e.raw_os_error() {
        Some(code::ERROR_FILE_NOT_FOUND | code::ERROR_PATH_NOT_FOUND | code::ERROR_INVALID_NAME) => {
            Error::NotFound(msg)
        }
        Some(code::ERROR_ACCESS_DENIED) => Error::PermissionDenied(msg),
        Some(code::ERROR_NOT_READY) => Error::FailedPrecondition(msg),
        Some(code::ERROR_DIR_NOT_EMPTY) => Error::FailedPrecondition(msg),
        Some(_) => Error::Internal(msg),
        None => Error::io(what, e),
    }
}

/// The name (or a directory on its way) does not exist.
pub(crate) fn is_not_found(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code::ERROR_FILE_NOT_FOUND | code::ERROR_PATH_NOT_FOUND))
}

/// The Win32 calls the backend makes. Paths and names are passed as Windows spells them; every
/// method is one documented call (or one open + one call) and interprets nothing.
pub trait Win32: Send + Sync {
    /// Every volume's GUID path, `\\?\Volume{…}\` (FindFirstVolumeW / FindNextVolumeW).
    fn volumes(&self) -> io::Result<Vec<String>>;

    /// Device interface paths of the present disks (CM_Get_Device_Interface_ListW with
    /// GUID_DEVINTERFACE_DISK). Each can be opened with [`Win32::ioctl`].
    fn disk_interfaces(&self) -> io::Result<Vec<String>>;

    /// Opens the device at `path` (a disk interface, `\\.\PhysicalDriveN` or a volume without
    /// its trailing `\`) with `access`, shared read/write, and sends `code` with `input`. Returns the output bytes: the buffer is grown
    /// on ERROR_INSUFFICIENT_BUFFER / ERROR_MORE_DATA up to a bound, and truncated to what the
    /// driver wrote.
    fn ioctl(&self, path: &str, code: u32, input: &[u8], access: Access) -> io::Result<Vec<u8>>;

    /// GetVolumeInformationW on a root (`\\?\Volume{…}\`, `C:\`, a mount point with `\`): the
    /// filesystem's name, e.g. `NTFS`, `RAW`. ERROR_UNRECOGNIZED_VOLUME when there is none.
    fn filesystem_name(&self, root: &str) -> io::Result<String>;

    /// GetDiskFreeSpaceExW on a root: (total bytes, free bytes) as the caller may use them.
    fn free_space(&self, root: &str) -> io::Result<(u64, u64)>;

    /// FlushFileBuffers on the volume device (`\\?\Volume{…}` without the `\`) opened for
    /// writing: flushes the filesystem's and the device's caches.
    fn flush(&self, device: &str) -> io::Result<()>;

    /// SetVolumeMountPointW(`dir`, `volume`); both end in `\`.
    fn set_mount_point(&self, dir: &str, volume: &str) -> io::Result<()>;

    /// DeleteVolumeMountPointW(`dir`); `dir` ends in `\`.
    fn delete_mount_point(&self, dir: &str) -> io::Result<()>;

    /// GetVolumePathNameW: the mount point (ending in `\`) of the volume that holds `path`.
    fn volume_path_name(&self, path: &str) -> io::Result<String>;

    /// GetVolumeNameForVolumeMountPointW: the `\\?\Volume{…}\` mounted at `mount_point` (which
    /// ends in `\`). ERROR_NOT_A_REPARSE_POINT (or ERROR_INVALID_PARAMETER) when nothing is.
    fn volume_name_for_mount_point(&self, mount_point: &str) -> io::Result<String>;

    /// GetVolumePathNamesForVolumeNameW: where the volume is mounted (drive roots and folders,
    /// each ending in `\`).
    fn mount_points_of(&self, volume: &str) -> io::Result<Vec<String>>;

    /// The attributes of `path` itself (a final reparse point is not followed); `None` when
    /// it does not exist.
    fn attributes(&self, path: &str) -> io::Result<Option<u32>>;

    /// Connects to the share `remote` (`\\host\share`) as `username` with `password` in a logon
    /// session of its own (LogonUserW with LOGON32_LOGON_NEW_CREDENTIALS, impersonated on a
    /// thread of its own, WNetAddConnection2W, WNetCancelConnection2W): the server checks the
    /// credentials afresh rather than through a connection the host already has. Nothing stays.
    /// ERROR_EXTENDED_ERROR comes back as the [`ProviderError`] `WNetGetLastErrorW` reports (or
    /// as the bare code when that call fails).
    fn connect_as(&self, remote: &str, username: &str, password: &crate::types::Secret) -> io::Result<()>;
}

/// The access a device is opened with for an IOCTL: the least its code requires (the access
/// bits of CTL_CODE), so that queries need no data access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// FILE_ANY_ACCESS codes: no data access.
    Query,
    /// FILE_READ_ACCESS codes (e.g. IOCTL_DISK_GET_LENGTH_INFO): GENERIC_READ.
    Read,
    /// Codes that change the device: GENERIC_READ | GENERIC_WRITE.
    ReadWrite,
}

/// FILE_ATTRIBUTE_* bits the logic reads.
pub mod attr {
    pub const DIRECTORY: u32 = 0x10;
    pub const REPARSE_POINT: u32 = 0x400;
}

pub mod contain;
pub mod disks;
pub mod extents;
pub mod interlock;
pub mod ioctl;
pub mod iscsi;
pub mod remove;
pub mod smb;
pub mod system;
pub mod volumes;

#[cfg(test)]
mod failure_tests {
    use super::*;

    /// One classification: the disk group's failures are the same table's (ERROR_NOT_READY was
    /// Unavailable here and FailedPrecondition there).
    #[test]
    fn win32_codes_are_classified_once() {
        let kind = |code| match failure("x", io::Error::from_raw_os_error(code)) {
            Error::NotFound(_) => "NotFound",
            Error::PermissionDenied(_) => "PermissionDenied",
            Error::FailedPrecondition(_) => "FailedPrecondition",
            Error::Internal(_) => "Internal",
            other => panic!("{other:?}"),
        };
        assert_eq!(kind(code::ERROR_NOT_READY), "FailedPrecondition");
        assert_eq!(kind(code::ERROR_FILE_NOT_FOUND), "NotFound");
        assert_eq!(kind(code::ERROR_ACCESS_DENIED), "PermissionDenied");
        assert_eq!(kind(code::ERROR_DIR_NOT_EMPTY), "FailedPrecondition");
        assert_eq!(kind(87), "Internal");
        for code in [code::ERROR_NOT_READY, code::ERROR_FILE_NOT_FOUND, code::ERROR_ACCESS_DENIED, 87] {
            let a = failure("x failed", io::Error::from_raw_os_error(code));
            let b = disks::win32_error("x".into(), io::Error::from_raw_os_error(code));
            assert_eq!(std::mem::discriminant(&a), std::mem::discriminant(&b), "{code}");
            assert_eq!(a.to_string(), b.to_string(), "{code}");
        }
    }
}
