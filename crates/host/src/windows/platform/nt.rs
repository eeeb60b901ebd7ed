//! Safe wrappers over the handle-based file calls of the filesystem group: open by path or
//! relative to a held directory, canonical path of a handle, attributes, listing, deletion and
//! reparse data. Failures are `io::Error`s carrying the Win32 code (NT statuses are converted),
//! so callers classify them one way. `real_nt.rs` puts containment's platform trait on these calls.

use std::io;
use std::ptr::{null, null_mut};
use windows_sys::Wdk::Foundation::{NtQueryObject, OBJECT_ATTRIBUTES, OBJECT_INFORMATION_CLASS};
use windows_sys::Wdk::Storage::FileSystem::{
    FileAttributeTagInformation, FileBasicInformation, FileDirectoryInformation, FileDispositionInformation,
    FileDispositionInformationEx, FileInternalInformation, NtCreateFile, NtQueryDirectoryFile,
    NtQueryFullAttributesFile, NtQueryInformationFile, NtSetInformationFile, FILE_DISPOSITION_DELETE,
    FILE_DISPOSITION_IGNORE_READONLY_ATTRIBUTE, FILE_DISPOSITION_POSIX_SEMANTICS, FILE_NETWORK_OPEN_INFORMATION,
    FILE_SYNCHRONOUS_IO_NONALERT, NTCREATEFILE_CREATE_DISPOSITION, NTCREATEFILE_CREATE_OPTIONS,
};
use windows_sys::Win32::Foundation::{
    CloseHandle, RtlNtStatusToDosError, ERROR_ACCESS_DENIED, ERROR_DIRECTORY, ERROR_FILE_NOT_FOUND,
    ERROR_INVALID_FUNCTION, ERROR_INVALID_NAME, ERROR_INVALID_PARAMETER, ERROR_MORE_DATA, ERROR_NOT_SUPPORTED,
    ERROR_PATH_NOT_FOUND, HANDLE, INVALID_HANDLE_VALUE, NTSTATUS, OBJ_CASE_INSENSITIVE, STATUS_NO_MORE_FILES,
    UNICODE_STRING,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, CreateSymbolicLinkW, GetFinalPathNameByHandleW, DELETE, FILE_ATTRIBUTE_NORMAL,
    FILE_ATTRIBUTE_READONLY, FILE_FLAG_BACKUP_SEMANTICS, FILE_LIST_DIRECTORY, FILE_NAME_NORMALIZED,
    FILE_READ_ATTRIBUTES, FILE_READ_DATA, FILE_SHARE_DELETE, FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_TRAVERSE,
    FILE_WRITE_ATTRIBUTES, OPEN_EXISTING, SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE, SYMBOLIC_LINK_FLAG_DIRECTORY,
    SYNCHRONIZE, VOLUME_NAME_DOS, VOLUME_NAME_GUID,
};
use windows_sys::Win32::System::Ioctl::FSCTL_GET_REPARSE_POINT;
use windows_sys::Win32::System::SystemInformation::GetSystemWindowsDirectoryW;
use windows_sys::Win32::System::IO::{DeviceIoControl, IO_STATUS_BLOCK};

pub const IO_REPARSE_TAG_MOUNT_POINT: u32 = 0xA000_0003;
pub const IO_REPARSE_TAG_SYMLINK: u32 = 0xA000_000C;
/// `Flags` bit of a symlink's reparse data: the target is relative to the link's directory.
const SYMLINK_FLAG_RELATIVE: u32 = 1;
const MAXIMUM_REPARSE_DATA_BUFFER_SIZE: usize = 16 * 1024;

/// Access for directories we hold. Listing is data access, which is what makes the share mode
/// (no delete) bind: handles with attribute access only take part in no sharing checks.
pub const HOLD: u32 = FILE_LIST_DIRECTORY | FILE_TRAVERSE | FILE_READ_ATTRIBUTES;
/// Access for an entry we hold (`contain::Open::Entry`): data access for the same reason, without
/// FILE_TRAVERSE, which on a file would be execute access.
pub(super) const HOLD_ENTRY: u32 = FILE_READ_DATA | FILE_READ_ATTRIBUTES;
/// Access to remove a name (`contain::Open::Remove`), and to list it when it is a directory.
pub const REMOVE: u32 = DELETE | FILE_LIST_DIRECTORY | FILE_READ_ATTRIBUTES | FILE_WRITE_ATTRIBUTES;

/// Every share mode, for `contain::Open::Peek`.
pub(super) const SHARE_ALL: u32 = FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE;

/// FileInternalInformation: the file's 64-bit ID (on NTFS its file reference, sequence number
/// included, so not reused while a handle keeps the file).
pub fn file_id(h: &Handle) -> io::Result<u64> {
    let mut id = 0u64;
    let mut io = IO_STATUS_BLOCK::default();
    // SAFETY: FILE_INTERNAL_INFORMATION is one LARGE_INTEGER; `id` has its size and alignment.
    check(unsafe { NtQueryInformationFile(h.0, &mut io, (&mut id as *mut u64).cast(), 8, FileInternalInformation) })?;
    Ok(id)
}

/// An open kernel handle, closed on drop.
#[derive(Debug)]
pub struct Handle(HANDLE);

impl Handle {
    /// The raw handle, for a call that borrows it; it stays owned here.
    pub fn raw(&self) -> HANDLE {
        self.0
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: we own the handle; it was returned open by CreateFileW or NtCreateFile and is
        // closed exactly once, here.
        unsafe { CloseHandle(self.0) };
    }
}

/// Wide string without the terminating NUL.
fn wide(s: &str) -> Vec<u16> {
    s.encode_utf16().collect()
}

fn wide_z(s: &str) -> Vec<u16> {
    s.encode_utf16().chain([0]).collect()
}

fn nt_error(status: NTSTATUS) -> io::Error {
    // SAFETY: a pure table lookup.
    io::Error::from_raw_os_error(unsafe { RtlNtStatusToDosError(status) } as i32)
}

fn check(status: NTSTATUS) -> io::Result<()> {
    if status >= 0 {
        Ok(())
    } else {
        Err(nt_error(status))
    }
}

/// The name (or a directory on its way) does not exist.
pub fn is_not_found(e: &io::Error) -> bool {
    matches!(e.raw_os_error().map(|c| c as u32), Some(ERROR_FILE_NOT_FOUND | ERROR_PATH_NOT_FOUND))
}

fn is(e: &io::Error, code: u32) -> bool {
    e.raw_os_error() == Some(code as i32)
}

/// A directory was required and the name is something else.
pub fn is_not_a_directory(e: &io::Error) -> bool {
    is(e, ERROR_DIRECTORY)
}

/// The drive of the Windows directory (GetSystemWindowsDirectoryW, the same for every session),
/// `C:` as `%SystemDrive%` spells it: where Win32 puts a service's paths rooted without a drive.
pub fn system_drive() -> io::Result<String> {
    let mut buf = [0u16; 261];
    // SAFETY: the buffer and its length in UTF-16 units match; the call writes at most that.
    let n = unsafe { GetSystemWindowsDirectoryW(buf.as_mut_ptr(), buf.len() as u32) } as usize;
    if n == 0 {
        return Err(io::Error::last_os_error());
    }
    let dir = String::from_utf16_lossy(&buf[..n.min(buf.len())]);
    Ok(dir.chars().take(2).collect())
}

/// Opens an existing file or directory by a `\\?\` path, following reparse points unless
/// `flags` holds `FILE_FLAG_OPEN_REPARSE_POINT`. Sharing excludes delete, so while the handle is
/// held (with data access) the object cannot be renamed or deleted.
pub fn open_path(path: &str, access: u32, flags: u32) -> io::Result<Handle> {
    open_path_shared(path, access, FILE_SHARE_READ | FILE_SHARE_WRITE, flags)
}

/// [`open_path`] with the share mode `share`.
pub(super) fn open_path_shared(path: &str, access: u32, share: u32, flags: u32) -> io::Result<Handle> {
    let p = wide_z(path);
    // SAFETY: `p` is NUL-terminated and outlives the call; no security attributes or template.
    let h = unsafe {
        CreateFileW(p.as_ptr(), access, share, null(), OPEN_EXISTING, FILE_FLAG_BACKUP_SEMANTICS | flags, null_mut())
    };
    if h == INVALID_HANDLE_VALUE {
        Err(io::Error::last_os_error())
    } else {
        Ok(Handle(h))
    }
}

/// Opens or creates `name` (a single component) inside the directory `dir` with NtCreateFile:
/// the lookup starts at the held directory, so nothing above it is walked again. Synchronous
/// I/O; share read and write, not delete.
pub fn open_at(
    dir: &Handle,
    name: &str,
    access: u32,
    disposition: NTCREATEFILE_CREATE_DISPOSITION,
    options: NTCREATEFILE_CREATE_OPTIONS,
) -> io::Result<Handle> {
    open_at_shared(dir, name, access, FILE_SHARE_READ | FILE_SHARE_WRITE, disposition, options)
}

/// [`open_at`] with the share mode `share`.
pub(super) fn open_at_shared(
    dir: &Handle,
    name: &str,
    access: u32,
    share: u32,
    disposition: NTCREATEFILE_CREATE_DISPOSITION,
    options: NTCREATEFILE_CREATE_OPTIONS,
) -> io::Result<Handle> {
    let n = wide(name);
    let bytes = u16::try_from(n.len() * 2).map_err(|_| io::Error::from_raw_os_error(ERROR_INVALID_NAME as i32))?;
    let us = UNICODE_STRING { Length: bytes, MaximumLength: bytes, Buffer: n.as_ptr() as *mut u16 };
    let oa = OBJECT_ATTRIBUTES {
        Length: size_of::<OBJECT_ATTRIBUTES>() as u32,
        RootDirectory: dir.0,
        ObjectName: &us,
        // As CreateFileW does: names compare case-insensitively.
        Attributes: OBJ_CASE_INSENSITIVE,
        SecurityDescriptor: null(),
        SecurityQualityOfService: null(),
    };
    let mut io = IO_STATUS_BLOCK::default();
    let mut h: HANDLE = null_mut();
    // SAFETY: every pointer refers to a live local (`us` borrows `n`, `oa` borrows `us`); `dir`
    // is an open handle; no allocation size and no extended attributes.
    let status = unsafe {
        NtCreateFile(
            &mut h,
            access | SYNCHRONIZE,
            &oa,
            &mut io,
            null(),
            FILE_ATTRIBUTE_NORMAL,
            share,
            disposition,
            options | FILE_SYNCHRONOUS_IO_NONALERT,
            null(),
            0,
        )
    };
    check(status)?;
    Ok(Handle(h))
}

/// Whether the entry at `path` (a `\\?\` path) exists: the entry itself, so a link there exists
/// whether or not its target does. NtQueryFullAttributesFile (what GetFileAttributesExW is made
/// of, and like it not following a link at the final name, which is how Go's Lstat sees a
/// link's own attributes) leaves no handle to close: one lookup rather than an open and a close,
/// each a wineserver round trip under Wine. It takes a full path, not a name relative to a held
/// directory: Wine 8 answers that form wrongly here (an existing directory reported missing).
pub fn exists(path: &str) -> io::Result<bool> {
    let nt_path = match path.strip_prefix(r"\\?\") {
        Some(rest) => format!(r"\??\{rest}"),
        None => return Err(io::Error::from_raw_os_error(ERROR_INVALID_NAME as i32)),
    };
    let n = wide(&nt_path);
    let bytes = u16::try_from(n.len() * 2).map_err(|_| io::Error::from_raw_os_error(ERROR_INVALID_NAME as i32))?;
    let us = UNICODE_STRING { Length: bytes, MaximumLength: bytes, Buffer: n.as_ptr() as *mut u16 };
    let oa = OBJECT_ATTRIBUTES {
        Length: size_of::<OBJECT_ATTRIBUTES>() as u32,
        RootDirectory: null_mut(),
        ObjectName: &us,
        Attributes: OBJ_CASE_INSENSITIVE,
        SecurityDescriptor: null(),
        SecurityQualityOfService: null(),
    };
    let mut info = FILE_NETWORK_OPEN_INFORMATION::default();
    // SAFETY: `oa` borrows `us`, which borrows `n`, all alive for the call; `info` is the
    // structure the call fills.
    match check(unsafe { NtQueryFullAttributesFile(&oa, &mut info) }) {
        Ok(()) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// The canonical path of what `h` refers to: `\\?\C:\…` with every link resolved and names in
/// their on-disk spelling; `\\?\Volume{GUID}\…` for a volume without a DOS name.
pub fn final_path(h: &Handle) -> io::Result<String> {
    match final_path_as(h, FILE_NAME_NORMALIZED | VOLUME_NAME_DOS) {
        Ok(p) => Ok(p),
        Err(e) if is(&e, ERROR_MORE_DATA) => object_name(h),
        Err(_) => final_path_as(h, FILE_NAME_NORMALIZED | VOLUME_NAME_GUID),
    }
}

/// Wine's GetFinalPathNameByHandleW stops at MAX_PATH; the object name it is made from
/// (`\??\C:\…` under Wine) does not. On Windows the object name is `\Device\…`, a form no root
/// matches, so this fallback can only refuse there.
fn object_name(h: &Handle) -> io::Result<String> {
    const OBJECT_NAME_INFORMATION: OBJECT_INFORMATION_CLASS = 1;
    // u64 for the alignment of the UNICODE_STRING at the start; room for 32K units after it.
    let mut buf = vec![0u64; 8 * 1024 + 4];
    let mut got = 0u32;
    // SAFETY: the buffer is writable for its whole byte length and outlives the call.
    check(unsafe {
        NtQueryObject(h.0, OBJECT_NAME_INFORMATION, buf.as_mut_ptr().cast(), (buf.len() * 8) as u32, &mut got)
    })?;
    // SAFETY: on success the buffer starts with a UNICODE_STRING whose Buffer points to Length
    // bytes inside our buffer.
    let units = unsafe {
        let us = &*buf.as_ptr().cast::<UNICODE_STRING>();
        if us.Buffer.is_null() {
            return Err(bad_data("object name"));
        }
        std::slice::from_raw_parts(us.Buffer, usize::from(us.Length) / 2)
    };
    String::from_utf16(units).map_err(|_| bad_data("object name"))
}

pub(super) fn final_path_as(h: &Handle, flags: u32) -> io::Result<String> {
    let mut buf = vec![0u16; 512];
    loop {
        // SAFETY: the buffer holds `buf.len()` units and outlives the call.
        let n = unsafe { GetFinalPathNameByHandleW(h.0, buf.as_mut_ptr(), buf.len() as u32, flags) } as usize;
        match n {
            // Wine says ERROR_MORE_DATA instead of the size needed.
            0 if is(&io::Error::last_os_error(), ERROR_MORE_DATA) && buf.len() < 1 << 16 => {
                buf.resize(buf.len() * 2, 0)
            }
            0 => return Err(io::Error::last_os_error()),
            // Too small: `n` is the size needed, including the NUL.
            n if n >= buf.len() => buf.resize(n + 1, 0),
            n => return String::from_utf16(&buf[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }
}

/// File attributes and, for a reparse point, its tag.
pub fn attributes(h: &Handle) -> io::Result<(u32, u32)> {
    let mut info = [0u32; 2];
    let mut io = IO_STATUS_BLOCK::default();
    // SAFETY: FILE_ATTRIBUTE_TAG_INFORMATION is two u32s; the buffer has exactly that size.
    check(unsafe { NtQueryInformationFile(h.0, &mut io, info.as_mut_ptr().cast(), 8, FileAttributeTagInformation) })?;
    Ok((info[0], info[1]))
}

/// Replaces the attributes, leaving the times alone (zero means unchanged).
pub fn set_attributes(h: &Handle, attributes: u32) -> io::Result<()> {
    // FILE_BASIC_INFORMATION: four times (i64), then the attributes (u32), padded to 40 bytes.
    let mut info = [0u64; 5];
    info[4] = u64::from(if attributes == 0 { FILE_ATTRIBUTE_NORMAL } else { attributes });
    let mut io = IO_STATUS_BLOCK::default();
    // SAFETY: `info` has the size and alignment of FILE_BASIC_INFORMATION.
    check(unsafe { NtSetInformationFile(h.0, &mut io, info.as_ptr().cast(), 40, FileBasicInformation) })
}

/// Names in the directory `dir` (opened with list access), without `.` and `..`.
pub fn list(dir: &Handle) -> io::Result<Vec<String>> {
    // u64 for the 8-byte alignment of FILE_DIRECTORY_INFORMATION entries.
    let mut buf = vec![0u64; 8 * 1024];
    let mut names = Vec::new();
    let mut restart = true;
    loop {
        let mut io = IO_STATUS_BLOCK::default();
        // SAFETY: the buffer is writable for its whole byte length and outlives the call; the
        // handle was opened for synchronous I/O, so no event or APC is needed.
        let status = unsafe {
            NtQueryDirectoryFile(
                dir.0,
                null_mut(),
                None,
                null(),
                &mut io,
                buf.as_mut_ptr().cast(),
                (buf.len() * 8) as u32,
                FileDirectoryInformation,
                false,
                null(),
                restart,
            )
        };
        if status == STATUS_NO_MORE_FILES {
            return Ok(names);
        }
        check(status)?;
        restart = false;
        // SAFETY: reading the bytes of our own initialised u64 buffer.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), buf.len() * 8) };
        let filled = &bytes[..io.Information.min(bytes.len())];
        let mut at = 0;
        // Each entry: NextEntryOffset u32 @0, FileNameLength u32 @60, FileName @64.
        while at + 64 <= filled.len() {
            let next = u32_at(filled, at) as usize;
            let len = u32_at(filled, at + 60) as usize;
            let name_bytes = filled.get(at + 64..at + 64 + len).ok_or_else(|| bad_data("directory entry"))?;
            let units: Vec<u16> = name_bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
            let name = String::from_utf16(&units).map_err(|_| bad_data("a name that is not valid UTF-16"))?;
            if name != "." && name != ".." {
                names.push(name);
            }
            if next == 0 {
                break;
            }
            at += next;
        }
    }
}

/// Marks the object of `h` (opened with DELETE access) for deletion. POSIX semantics unlink the
/// name at once where the filesystem supports them; otherwise the name goes when the last handle
/// closes, which for us is right after this call. Read-only files are deleted too, as Go's
/// os.Remove does.
pub fn delete(h: &Handle) -> io::Result<()> {
    let flags = FILE_DISPOSITION_DELETE | FILE_DISPOSITION_POSIX_SEMANTICS | FILE_DISPOSITION_IGNORE_READONLY_ATTRIBUTE;
    let mut io = IO_STATUS_BLOCK::default();
    // SAFETY: FILE_DISPOSITION_INFORMATION_EX is one u32.
    let status =
        unsafe { NtSetInformationFile(h.0, &mut io, (&flags as *const u32).cast(), 4, FileDispositionInformationEx) };
    let err = match check(status) {
        Ok(()) => return Ok(()),
        Err(e) => e,
    };
    // Older Windows, FAT and Wine do not know this class or these flags.
    if ![ERROR_INVALID_FUNCTION, ERROR_INVALID_PARAMETER, ERROR_NOT_SUPPORTED].iter().any(|&c| is(&err, c)) {
        return Err(err);
    }
    match delete_on_close(h) {
        Err(e) if is(&e, ERROR_ACCESS_DENIED) => {
            let (attrs, _) = attributes(h)?;
            if attrs & FILE_ATTRIBUTE_READONLY == 0 {
                return Err(e);
            }
            set_attributes(h, attrs & !FILE_ATTRIBUTE_READONLY)?;
            delete_on_close(h)
        }
        other => other,
    }
}

fn delete_on_close(h: &Handle) -> io::Result<()> {
    let yes: u8 = 1;
    let mut io = IO_STATUS_BLOCK::default();
    // SAFETY: FILE_DISPOSITION_INFORMATION is one BOOLEAN.
    check(unsafe { NtSetInformationFile(h.0, &mut io, (&yes as *const u8).cast(), 1, FileDispositionInformation) })
}

/// A link's reparse data, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reparse {
    /// A symbolic link: its substitute name (`\??\C:\x`, or relative as stored).
    Symlink {
        target: String,
        relative: bool,
    },
    /// A junction (`\??\C:\x`) or a volume mounted folder (`\??\Volume{GUID}\`).
    MountPoint {
        target: String,
    },
    Other(u32),
}

/// Reads the reparse data of `h` (opened with FILE_OPEN_REPARSE_POINT).
pub fn reparse(h: &Handle) -> io::Result<Reparse> {
    let mut buf = vec![0u8; MAXIMUM_REPARSE_DATA_BUFFER_SIZE];
    let mut got = 0u32;
    // SAFETY: output buffer of the stated size, outliving the synchronous call; no input.
    let ok = unsafe {
        DeviceIoControl(
            h.0,
            FSCTL_GET_REPARSE_POINT,
            null(),
            0,
            buf.as_mut_ptr().cast(),
            buf.len() as u32,
            &mut got,
            null_mut(),
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    decode_reparse(&buf[..got as usize]).ok_or_else(|| bad_data("reparse data"))
}

/// REPARSE_DATA_BUFFER: tag u32, data length u16, reserved u16, then for links the substitute
/// and print name offsets and lengths (u16 each), for symlinks a u32 of flags, and the names.
fn decode_reparse(b: &[u8]) -> Option<Reparse> {
    let tag = u32_at(b, 0);
    let (path_buffer, flags) = match tag {
        IO_REPARSE_TAG_SYMLINK => (20, u32_at(b, 16)),
        IO_REPARSE_TAG_MOUNT_POINT => (16, 0),
        other => return Some(Reparse::Other(other)),
    };
    let (off, len) = (u16_at(b, 8) as usize, u16_at(b, 10) as usize);
    let raw = b.get(path_buffer + off..path_buffer + off + len)?;
    let units: Vec<u16> = raw.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    let target = String::from_utf16(&units).ok()?;
    Some(match tag {
        IO_REPARSE_TAG_SYMLINK => Reparse::Symlink { target, relative: flags & SYMLINK_FLAG_RELATIVE != 0 },
        _ => Reparse::MountPoint { target },
    })
}

/// CreateSymbolicLinkW as Go's os.Symlink calls it: with the unprivileged (developer mode) flag,
/// then, on any failure, without it (Windows before 10 1703 rejects the flag).
pub fn create_symlink(link: &str, target: &str, directory: bool) -> io::Result<()> {
    let (l, t) = (wide_z(link), wide_z(target));
    let dir_flag = if directory { SYMBOLIC_LINK_FLAG_DIRECTORY } else { 0 };
    for flags in [dir_flag | SYMBOLIC_LINK_FLAG_ALLOW_UNPRIVILEGED_CREATE, dir_flag] {
        // SAFETY: both strings are NUL-terminated and outlive the call.
        if unsafe { CreateSymbolicLinkW(l.as_ptr(), t.as_ptr(), flags) } {
            return Ok(());
        }
    }
    Err(io::Error::last_os_error())
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4).map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    b.get(at..at + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

fn bad_data(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("malformed {what} from the filesystem"))
}

#[cfg(test)]
pub mod testing {
    //! Junctions for tests: FSCTL_SET_REPARSE_POINT with mount-point data.
    use super::*;
    use windows_sys::Win32::System::Ioctl::FSCTL_SET_REPARSE_POINT;

    /// Turns the empty directory `dir` (opened with write access and FILE_OPEN_REPARSE_POINT)
    /// into a junction to `target` (`C:\x`).
    pub fn make_junction(dir: &Handle, target: &str) -> io::Result<()> {
        let subst = wide(&format!(r"\??\{target}"));
        let print = wide(target);
        let (sl, pl) = (subst.len() * 2, print.len() * 2);
        let mut data = Vec::new();
        for v in [0, sl as u16, sl as u16 + 2, pl as u16] {
            data.extend(v.to_le_bytes());
        }
        subst.iter().chain(&[0]).chain(&print).chain(&[0]).for_each(|u| data.extend(u.to_le_bytes()));
        let mut buf = Vec::new();
        buf.extend(IO_REPARSE_TAG_MOUNT_POINT.to_le_bytes());
        buf.extend((data.len() as u16).to_le_bytes());
        buf.extend(0u16.to_le_bytes());
        buf.extend(data);
        let mut got = 0u32;
        // SAFETY: input buffer of the stated size, outliving the synchronous call; no output.
        let ok = unsafe {
            DeviceIoControl(
                dir.0,
                FSCTL_SET_REPARSE_POINT,
                buf.as_ptr().cast(),
                buf.len() as u32,
                null_mut(),
                0,
                &mut got,
                null_mut(),
            )
        };
        if ok == 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reparse_data_decodes() {
        let target: Vec<u16> = wide(r"\??\C:\x");
        let mut b = Vec::new();
        b.extend(IO_REPARSE_TAG_SYMLINK.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        b.extend(0u16.to_le_bytes());
        for v in [0u16, 16, 16, 0] {
            b.extend(v.to_le_bytes());
        }
        b.extend(1u32.to_le_bytes());
        target.iter().for_each(|u| b.extend(u.to_le_bytes()));
        assert_eq!(decode_reparse(&b), Some(Reparse::Symlink { target: r"\??\C:\x".into(), relative: true }));
        b[..4].copy_from_slice(&0x8000_0013u32.to_le_bytes());
        assert_eq!(decode_reparse(&b), Some(Reparse::Other(0x8000_0013)));
        b[..4].copy_from_slice(&IO_REPARSE_TAG_MOUNT_POINT.to_le_bytes());
        b.truncate(20);
        assert_eq!(decode_reparse(&b), None);
    }
}
