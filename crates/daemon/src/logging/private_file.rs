//! Opening the audit file so that only the daemon can change it.

use std::fs::File;
use std::path::Path;

use anyhow::Context as _;

/// How the audit file is opened: never through a link, and only a regular file that nobody but
/// the daemon's user can change (as the socket directory is checked, by
/// `csi_proxy_transport::unix::check_private`). On Windows: without following a reparse point
/// (one at the path is refused), without delete sharing, so that nobody renames or removes it
/// while it is open, and with a DACL for SYSTEM and Administrators only (see `audit_acl`). The
/// error says which it is.
pub fn open_audit_file(path: &Path) -> anyhow::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| {
            format!("cannot create directory {} for audit file {}", parent.display(), path.display())
        })?;
    }
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
    // Created with a DACL of its own (SYSTEM and Administrators), not following a reparse point.
    #[cfg(windows)]
    let opened = super::audit_acl::open(path);
    let refused = |why: &str| {
        anyhow::anyhow!("audit file {} {why}; refusing to write the audit trail there (another user could rewrite or remove records)", path.display())
    };
    let file = match opened {
        Ok(f) => f,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(refused("is a symbolic link"))
        }
        Err(e) => return Err(e).with_context(|| format!("cannot open audit file {}", path.display())),
    };
    let meta = file.metadata().with_context(|| format!("cannot inspect audit file {}", path.display()))?;
    #[cfg(unix)]
    if let Err(e) = csi_proxy_transport::unix::check_private(&meta, csi_proxy_transport::unix::Private::File) {
        return Err(anyhow::anyhow!(
            "{}. Use a file owned by uid {} that only it can write to (e.g. chown {} and chmod 0600 it), or remove it and let the daemon create it",
            refused(&e.why),
            e.uid,
            e.uid
        ));
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
