//! Opening the audit file so that only the daemon can change it, or read it.

use std::fs::File;
use std::path::Path;

use anyhow::Context as _;

/// A path as an error or a log line quotes it: bounded (see `csi_proxy_host::error::clip`).
fn shown(path: &Path) -> String {
    csi_proxy_host::error::clip(&path.display().to_string()).into_owned()
}

/// How the audit file is opened: never through a link, in a directory that nobody but the
/// daemon's user can change (else they could remove the trail or put a file of theirs in its
/// place), and only a regular file that nobody but the daemon's user can change, with one name
/// (a second hard link would keep the records where a rotation or removal does not reach), both
/// checked as the socket directory is (`csi_proxy_transport::unix::check_private`). A file that
/// others may read is made owner-only (0600), and that is logged. On Windows: without following
/// a reparse point (one at the path is refused), shared for reading only, so that nobody renames
/// or removes it, or writes to it, while it is open (one already open for writing is refused),
/// with a DACL for SYSTEM and Administrators only, and owned by one of them or the daemon's
/// account (another owner is replaced by Administrators, or the file refused; see `audit_acl`).
/// The error says which it is.
pub fn open_audit_file(path: &Path) -> anyhow::Result<File> {
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
    if let Some(parent) = parent {
        #[cfg(unix)]
        let created = {
            use std::os::unix::fs::DirBuilderExt;
            // New directories are the daemon's alone; existing ones are checked below.
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(parent)
        };
        #[cfg(windows)]
        let created = std::fs::create_dir_all(parent);
        created.with_context(|| format!("cannot create directory {} for audit file {}", shown(parent), shown(path)))?;
    }
    #[cfg(unix)]
    check_directory(parent.unwrap_or(Path::new(".")), path)?;
    #[cfg(unix)]
    let opened = {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: a FIFO planted at the path fails the open (and is refused below) instead of
        // hanging the start; it changes nothing for a regular file.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
    };
    let refused = |why: &str| {
        anyhow::anyhow!("audit file {} {why}; refusing to write the audit trail there (another user could rewrite or remove records)", shown(path))
    };
    // Created with a DACL and owner of its own (SYSTEM and Administrators), not following a
    // reparse point, shared for reading only; an existing one's owner checked (and fixed).
    #[cfg(windows)]
    let opened = match super::audit_acl::open(path) {
        Ok(f) => Ok(f),
        Err(super::audit_acl::AuditFileError::Io(e)) => Err(e),
        Err(e) => return Err(refused(&e.to_string())),
    };
    let file = match opened {
        Ok(f) => f,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(refused("is a symbolic link"))
        }
        Err(e) => return Err(e).with_context(|| format!("cannot open audit file {}", shown(path))),
    };
    let meta = file.metadata().with_context(|| format!("cannot inspect audit file {}", shown(path)))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if let Err(e) = csi_proxy_transport::unix::check_private(&meta, csi_proxy_transport::unix::Private::File) {
            return Err(anyhow::anyhow!(
                "{}. Use a file owned by uid {} that only it can write to (e.g. chown {} and chmod 0600 it), or remove it and let the daemon create it",
                refused(&e.why),
                e.uid,
                e.uid
            ));
        }
        if meta.nlink() != 1 {
            return Err(anyhow::anyhow!(
                "{}. Expected 1 link: remove the other names of the file, or remove it and let the daemon create it",
                refused(&format!("has {} hard links", meta.nlink()))
            ));
        }
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            // The records quote requests and callers: for the daemon's user alone, as a new file is.
            file.set_permissions(std::fs::Permissions::from_mode(0o600)).with_context(|| {
                format!("audit file {} has mode {mode:04o}, readable by others, and cannot be made 0600", shown(path))
            })?;
            tracing::warn!(target: "csi_proxy::audit", file = %shown(path), was = %format_args!("{mode:04o}"),
                "the audit file could be read by other users; its mode is now 0600");
        }
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        use windows_sys::Win32::Storage::FileSystem::FILE_ATTRIBUTE_REPARSE_POINT;
        // The handle's own attributes show a reparse point opened as such; the path's too, where
        // the flag is not honoured (Wine follows the link).
        let at_path = std::fs::symlink_metadata(path).map(|m| m.file_attributes()).unwrap_or(0);
        if (meta.file_attributes() | at_path) & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(refused("is a reparse point (a link)"));
        }
        if !meta.is_file() {
            return Err(refused("is not a regular file"));
        }
    }
    Ok(file)
}

/// The audit file's directory must be a real directory (not a link) owned by the daemon's user
/// and writable by nobody else, by the socket directory's rule: whoever can write to it can
/// remove or replace the audit file.
#[cfg(unix)]
fn check_directory(dir: &Path, path: &Path) -> anyhow::Result<()> {
    let meta = std::fs::symlink_metadata(dir)
        .with_context(|| format!("cannot inspect directory {} of audit file {}", shown(dir), shown(path)))?;
    csi_proxy_transport::unix::check_private(&meta, csi_proxy_transport::unix::Private::Dir).map_err(|e| {
        anyhow::anyhow!(
            "directory {} of audit file {} {}; refusing to write the audit trail there (another user could remove the records or put a file of theirs in their place). Expected a directory owned by uid {} that only it can write to (e.g. chown {} and chmod go-w it)",
            shown(dir),
            shown(path),
            e.why,
            e.uid,
            e.uid
        )
    })
}

/// Makes the rotated files of the audit file at `path` (`<path>.1` and on, up to the first
/// missing number) the daemon's alone, as the file itself is made at its open: files rotated
/// before the daemon checked modes keep old records. Only regular files of the daemon's user
/// are changed (its directory is the daemon's alone, so nobody swaps one for a link meanwhile);
/// what cannot be changed is logged.
#[cfg(unix)]
pub fn make_rotated_private(path: &Path) {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let uid = rustix::process::geteuid().as_raw();
    for n in 1.. {
        let rotated = super::file::rotated_name(path, n);
        let Ok(meta) = std::fs::symlink_metadata(&rotated) else { break };
        let mode = meta.mode() & 0o7777;
        if !meta.is_file() || meta.uid() != uid || mode & 0o077 == 0 {
            continue;
        }
        match std::fs::set_permissions(&rotated, std::fs::Permissions::from_mode(0o600)) {
            Ok(()) => {
                tracing::warn!(target: "csi_proxy::audit", file = %shown(&rotated), was = %format_args!("{mode:04o}"),
                "the rotated audit file could be read by other users; its mode is now 0600")
            }
            Err(e) => {
                tracing::error!(target: "csi_proxy::audit", file = %shown(&rotated), mode = %format_args!("{mode:04o}"),
                error = %e, "the rotated audit file can be read by other users and cannot be made 0600")
            }
        }
    }
}
