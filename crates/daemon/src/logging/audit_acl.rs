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
//! - The DACL alone does not keep others out: "the owner of an object ... can always change the
//!   permissions" (Learn: "Ownership of objects"; the owner is implicitly allowed READ_CONTROL
//!   and WRITE_DAC whatever the DACL says). So the owner is read back (`GetSecurityInfo` with
//!   `OWNER_SECURITY_INFORMATION`; the descriptor it returns is freed with `LocalFree`, as its
//!   page says) and must be LocalSystem, BUILTIN\Administrators or the daemon's own account (as
//!   the Unix path wants the daemon's uid). Any other owner is replaced by Administrators
//!   (`SetSecurityInfo` with `OWNER_SECURITY_INFORMATION`, which needs a handle opened with
//!   `WRITE_OWNER`: a second one, by `ReOpenFile`, only then; the new owner must be a group of the caller's token that may own objects, as
//!   Administrators is for an elevated administrator and for LocalSystem); if that fails, the
//!   open is refused, saying so. A created file is given that owner directly (`O:BA` in its
//!   descriptor).
//! - Access is checked when a handle is opened, and a handle keeps what it was granted; so a
//!   data writer that opened the file before the daemon (say whoever planted it) is kept out by
//!   the share mode instead (a handle holding only WRITE_DAC or WRITE_OWNER is not: share modes
//!   govern data access): the daemon shares reading only (`FILE_SHARE_READ`). `CreateFileW`: "If
//!   this flag is not specified, but the file ... has been opened for write access ..., the
//!   function fails" with ERROR_SHARING_VIOLATION, and no later open for writing succeeds while
//!   the daemon holds the file.
//!
//! The DACL is read back (tests, and csi-proxyctl conformance on a node) by
//! `csi_proxy_client::file_dacl`.

// A platform module: the file-security calls.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::path::Path;
use std::ptr;

use windows_sys::Win32::Foundation::{
    LocalFree, ERROR_SHARING_VIOLATION, ERROR_SUCCESS, HANDLE, HLOCAL, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertSidToStringSidW, ConvertStringSecurityDescriptorToSecurityDescriptorW, GetSecurityInfo, SetSecurityInfo,
    SDDL_REVISION_1, SE_FILE_OBJECT,
};
use windows_sys::Win32::Security::{
    CreateWellKnownSid, EqualSid, GetSecurityDescriptorDacl, GetTokenInformation, IsWellKnownSid, TokenUser,
    WinBuiltinAdministratorsSid, WinLocalSystemSid, ACL, DACL_SECURITY_INFORMATION, OWNER_SECURITY_INFORMATION,
    PROTECTED_DACL_SECURITY_INFORMATION, PSECURITY_DESCRIPTOR, PSID, SECURITY_ATTRIBUTES, TOKEN_QUERY, TOKEN_USER,
};
use windows_sys::Win32::Storage::FileSystem::{
    CreateFileW, ReOpenFile, FILE_APPEND_DATA, FILE_ATTRIBUTE_NORMAL, FILE_FLAG_OPEN_REPARSE_POINT,
    FILE_READ_ATTRIBUTES, FILE_SHARE_READ, FILE_SHARE_WRITE, FILE_WRITE_ATTRIBUTES, OPEN_ALWAYS, READ_CONTROL,
    SYNCHRONIZE, WRITE_DAC, WRITE_OWNER,
};
use windows_sys::Win32::System::Threading::{GetCurrentProcess, OpenProcessToken};

/// The audit file's DACL: full access for LocalSystem and BUILTIN\Administrators, nobody else,
/// nothing inherited.
pub const AUDIT_FILE_SDDL: &str = "D:P(A;;FA;;;SY)(A;;FA;;;BA)";

/// What a created audit file gets: owned by BUILTIN\Administrators, with [`AUDIT_FILE_SDDL`].
const CREATE_SDDL: &str = "O:BAD:P(A;;FA;;;SY)(A;;FA;;;BA)";

/// Why the audit file cannot be opened as the daemon's alone.
#[derive(Debug, thiserror::Error)]
pub enum AuditFileError {
    /// Another handle has the file open for writing (the open's share mode refuses it).
    #[error("is open for writing by another process (ERROR_SHARING_VIOLATION); whoever holds it could change records")]
    OpenForWriting,
    /// Its owner is someone else and could not be changed to Administrators.
    #[error("is owned by {owner}, not SYSTEM, Administrators or the daemon's account, and its owner cannot be made Administrators ({error}); its owner could change its access list at any time. Remove it and let the daemon create it, or make Administrators its owner (icacls FILE /setowner *S-1-5-32-544)")]
    ForeignOwner { owner: String, error: io::Error },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Who owns a file, as far as the audit file's rule goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Owner {
    /// LocalSystem, BUILTIN\Administrators, or the account the daemon runs as.
    Trusted,
    /// Anyone else, as a SID string (bounded when quoted).
    Other(String),
}

/// The owner rule, apart from the calls: `read` reads the owner, `take` makes Administrators
/// the owner. A trusted owner is kept; another is replaced, then read again, and must be trusted
/// then. Returns the former owner when it was replaced (for the log).
pub fn settle_owner(
    mut read: impl FnMut() -> io::Result<Owner>,
    take: impl FnOnce() -> io::Result<()>,
) -> Result<Option<String>, AuditFileError> {
    let Owner::Other(was) = read()? else { return Ok(None) };
    let was = csi_proxy_host::error::clip(&was).into_owned();
    if let Err(error) = take() {
        return Err(AuditFileError::ForeignOwner { owner: was, error });
    }
    match read()? {
        Owner::Trusted => Ok(Some(was)),
        Owner::Other(now) => Err(AuditFileError::ForeignOwner {
            owner: was,
            error: io::Error::other(format!("it was set, and is still {}", csi_proxy_host::error::clip(&now))),
        }),
    }
}

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

/// Opens `path` for appending (creating it owned by Administrators with [`AUDIT_FILE_SDDL`]; an
/// existing file is given that DACL, and Administrators as owner unless [`settle_owner`] trusts
/// its owner), without following a reparse point, shared for reading only.
pub fn open(path: &Path) -> Result<File, AuditFileError> {
    let sd = descriptor(AUDIT_FILE_SDDL)?;
    let create_sd = descriptor(CREATE_SDDL)?;
    let sa = SECURITY_ATTRIBUTES {
        nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
        lpSecurityDescriptor: create_sd.0,
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
            // Reading only: no other writer, before or after (see the module documentation).
            FILE_SHARE_READ,
            &sa,
            OPEN_ALWAYS,
            FILE_ATTRIBUTE_NORMAL | FILE_FLAG_OPEN_REPARSE_POINT,
            ptr::null_mut(),
        )
    };
    if handle == INVALID_HANDLE_VALUE {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(ERROR_SHARING_VIOLATION as i32) {
            return Err(AuditFileError::OpenForWriting);
        }
        return Err(e.into());
    }
    // SAFETY: a valid handle CreateFileW just returned, owned by nothing else.
    let file = File::from(unsafe { OwnedHandle::from_raw_handle(handle) });
    // An existing file kept its DACL (CreateFileW ignores the descriptor then); a new one has
    // ours already on Windows, and is given it here again, for where the create-time descriptor
    // is not kept (Wine derives a new file's DACL from its unix mode).
    set_dacl(&file, &sd)?;
    if let Some(was) = settle_owner(|| owner_of(&file), || make_administrators_owner(&file))? {
        tracing::warn!(target: "csi_proxy::audit", file = %csi_proxy_host::error::clip(&path.display().to_string()),
            was = %was, "the audit file was owned by another account; its owner is now Administrators");
    }
    Ok(file)
}

/// A well-known SID, in a buffer of the largest SID's size (`SECURITY_MAX_SID_SIZE`, 68 bytes).
struct WellKnownSid([u8; 68]);

impl WellKnownSid {
    fn new(kind: windows_sys::Win32::Security::WELL_KNOWN_SID_TYPE) -> io::Result<WellKnownSid> {
        let mut sid = WellKnownSid([0; 68]);
        let mut size = sid.0.len() as u32;
        // SAFETY: the buffer is `size` bytes, the most any SID takes; no domain SID is needed for
        // the builtin and local-system SIDs.
        if unsafe { CreateWellKnownSid(kind, ptr::null_mut(), sid.0.as_mut_ptr().cast(), &mut size) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sid)
    }

    fn as_psid(&mut self) -> PSID {
        self.0.as_mut_ptr().cast()
    }
}

/// Whether `sid` is the account this process runs as (its token's user).
fn is_own_account(sid: PSID) -> io::Result<bool> {
    let mut token: HANDLE = ptr::null_mut();
    // SAFETY: the pseudo-handle of this process needs no closing; `token` is a valid out-pointer.
    if unsafe { OpenProcessToken(GetCurrentProcess(), TOKEN_QUERY, &mut token) } == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: OpenProcessToken just returned this handle; it is closed once, here.
    let token = unsafe { OwnedHandle::from_raw_handle(token) };
    // TOKEN_USER and the SID it points to: 8-byte aligned, more than a TOKEN_USER with the
    // largest SID needs (16 + 68 bytes).
    let mut buf = [0u64; 16];
    let mut len = 0u32;
    // SAFETY: `buf` is `size_of_val(&buf)` writable bytes, aligned for TOKEN_USER.
    let ok = unsafe {
        GetTokenInformation(
            token.as_raw_handle(),
            TokenUser,
            buf.as_mut_ptr().cast(),
            std::mem::size_of_val(&buf) as u32,
            &mut len,
        )
    };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call filled `buf` with a TOKEN_USER whose SID points inside `buf`.
    let user = unsafe { &*buf.as_ptr().cast::<TOKEN_USER>() };
    // SAFETY: both are valid SIDs for the call.
    Ok(unsafe { EqualSid(user.User.Sid, sid) } != 0)
}

/// A SID as its string form (`S-1-...`), or a placeholder when it cannot be converted.
fn sid_string(sid: PSID) -> String {
    let mut text: windows_sys::core::PWSTR = ptr::null_mut();
    // SAFETY: `sid` is valid; `text` is a valid out-pointer.
    if unsafe { ConvertSidToStringSidW(sid, &mut text) } == 0 || text.is_null() {
        return "(a SID that cannot be shown)".to_string();
    }
    // SAFETY: the call returned a NUL-terminated string, allocated with LocalAlloc (its page: free
    // it with LocalFree), read here and freed once.
    unsafe {
        let len = (0..).take_while(|&i| *text.add(i) != 0).count();
        let shown = String::from_utf16_lossy(std::slice::from_raw_parts(text, len));
        LocalFree(text as HLOCAL);
        shown
    }
}

/// The open file's owner, by the audit file's rule.
fn owner_of(file: &File) -> io::Result<Owner> {
    let mut owner: PSID = ptr::null_mut();
    let mut sd: PSECURITY_DESCRIPTOR = ptr::null_mut();
    // SAFETY: the handle is open with READ_CONTROL; the out-pointers are valid. `owner` points
    // into `sd`, which the call allocates and the caller frees with LocalFree (below).
    let status = unsafe {
        GetSecurityInfo(
            file.as_raw_handle(),
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION,
            &mut owner,
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            &mut sd,
        )
    };
    if status != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(status as i32));
    }
    let sd = LocalDescriptor(sd);
    if owner.is_null() {
        return Ok(Owner::Other("(no owner)".to_string()));
    }
    // SAFETY: `owner` is a valid SID inside `sd`, alive until `sd` drops at the end.
    let trusted = unsafe {
        IsWellKnownSid(owner, WinLocalSystemSid) != 0 || IsWellKnownSid(owner, WinBuiltinAdministratorsSid) != 0
    } || is_own_account(owner)?;
    let answer = if trusted { Owner::Trusted } else { Owner::Other(sid_string(owner)) };
    drop(sd);
    Ok(answer)
}

/// Makes BUILTIN\Administrators the open file's owner, through a second handle with
/// WRITE_OWNER only. The file's own handle does not ask for WRITE_OWNER: an existing file whose
/// trusted owner needs no change must open even where its DACL grants no WRITE_OWNER (the owner
/// is implicitly allowed READ_CONTROL and WRITE_DAC only: "Ownership of Objects",
/// learn.microsoft.com). By now [`set_dacl`] has given Administrators full control, so the
/// reopen (ReOpenFile, the same file whatever its path now names) is allowed; it asks for no data
/// access, so the share modes of the handles already open do not apply to it, and it shares
/// reading and writing with them.
fn make_administrators_owner(file: &File) -> io::Result<()> {
    let mut admins = WellKnownSid::new(WinBuiltinAdministratorsSid)?;
    // SAFETY: the handle is a valid open file handle for the call.
    let raw = unsafe {
        ReOpenFile(file.as_raw_handle(), WRITE_OWNER, FILE_SHARE_READ | FILE_SHARE_WRITE, FILE_FLAG_OPEN_REPARSE_POINT)
    };
    if raw == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a valid handle ReOpenFile just returned, owned by nothing else.
    let owner_handle = unsafe { OwnedHandle::from_raw_handle(raw) };
    // SAFETY: the handle is open with WRITE_OWNER; `admins` is a valid SID for the call.
    let status = unsafe {
        SetSecurityInfo(
            owner_handle.as_raw_handle(),
            SE_FILE_OBJECT,
            OWNER_SECURITY_INFORMATION,
            admins.as_psid(),
            ptr::null_mut(),
            ptr::null(),
            ptr::null(),
        )
    };
    if status != ERROR_SUCCESS {
        return Err(io::Error::from_raw_os_error(status as i32));
    }
    Ok(())
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

    fn scratch(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("csi-proxy-audit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// B1: a file someone already holds open for writing (std's open shares reading, writing
    /// and deleting, as a planted file's writer would) is refused, instead of being shared with
    /// that writer. Fails with the old share mode (FILE_SHARE_READ | FILE_SHARE_WRITE): the open
    /// succeeds and both handles append.
    #[test]
    fn a_file_another_process_holds_open_for_writing_is_refused() {
        let dir = scratch("writer");
        let path = dir.join("audit.log");
        let planted = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        let e = open(&path).unwrap_err();
        assert!(matches!(e, AuditFileError::OpenForWriting), "{e:?}");
        assert!(e.to_string().contains("open for writing by another process"), "{e}");
        drop(planted);
        // Once that writer is gone the file is the daemon's, and nobody opens it for writing
        // while the daemon holds it; reading stays possible.
        let held = open(&path).unwrap();
        let again = std::fs::OpenOptions::new().append(true).open(&path).unwrap_err();
        assert_eq!(again.raw_os_error(), Some(ERROR_SHARING_VIOLATION as i32), "{again:?}");
        std::fs::read(&path).expect("readers are let in");
        drop(held);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// B1: the audit file's owner, read back through GetSecurityInfo, is one the rule trusts
    /// (under Wine, which maps every file's owner to the user running it, the daemon's own
    /// account; on Windows, Administrators for a created file: csi-proxyctl conformance's
    /// audit-file-dacl check reads it).
    #[test]
    fn the_audit_file_is_owned_by_a_trusted_account() {
        let dir = scratch("owner");
        let path = dir.join("audit.log");
        let f = open(&path).unwrap();
        assert_eq!(owner_of(&f).unwrap(), Owner::Trusted);
        assert!(is_own_account(WellKnownSid::new(WinLocalSystemSid).unwrap().as_psid()).is_ok());
        drop(f);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The owner rule: a trusted owner is left alone; another is replaced by Administrators and
    /// must read back as trusted; if it cannot be replaced (or does not read back so), the file is
    /// refused with the owner named.
    #[test]
    fn a_foreign_owner_is_replaced_or_the_file_refused() {
        let other = || Owner::Other("S-1-5-21-1-2-3-1001".to_string());
        let mut took = false;
        assert!(settle_owner(
            || Ok(Owner::Trusted),
            || {
                took = true;
                Ok(())
            }
        )
        .unwrap()
        .is_none());
        assert!(!took, "a trusted owner is kept");

        let mut reads = vec![Owner::Trusted, other()];
        let was = settle_owner(|| Ok(reads.pop().unwrap()), || Ok(())).unwrap();
        assert_eq!(was.as_deref(), Some("S-1-5-21-1-2-3-1001"));

        let denied = settle_owner(|| Ok(other()), || Err(io::Error::from_raw_os_error(5))).unwrap_err();
        let text = denied.to_string();
        assert!(matches!(denied, AuditFileError::ForeignOwner { .. }), "{denied:?}");
        assert!(text.contains("owned by S-1-5-21-1-2-3-1001") && text.contains("Remove it"), "{text}");

        let kept = settle_owner(|| Ok(other()), || Ok(())).unwrap_err();
        assert!(kept.to_string().contains("still S-1-5-21-1-2-3-1001"), "{kept}");

        let long = settle_owner(|| Ok(Owner::Other("S".repeat(100_000))), || Err(io::Error::other("no")))
            .unwrap_err()
            .to_string();
        assert!(long.len() < 2_000, "the quoted owner is bounded: {} bytes", long.len());
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
