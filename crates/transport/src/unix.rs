//! Unix sockets: `<dir>/csi-proxy-<group>-<version>.sock`, mode 0600 from the moment it exists.
//!
//! A socket file cannot be created with a mode (bind uses the process umask, which is shared by
//! every thread), so each socket is bound inside a private 0700 staging directory, chmod-ed, and
//! then renamed into place. Nobody else can reach it before it has its final mode, and the rename
//! also replaces a stale socket left by a daemon that died.

use crate::Listener;
use csi_proxy_wire::Api;
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("{path} is in use by another running csi-proxy (connecting to it succeeded)")]
    InUse { path: PathBuf },
    #[error("socket directory {dir} is locked by another running csi-proxy (lock file {lock})")]
    Locked { dir: PathBuf, lock: PathBuf },
    #[error("{path} exists and is not a socket; refusing to replace it")]
    NotASocket { path: PathBuf },
    #[error("{what} {path}: {source}")]
    Io { what: &'static str, path: PathBuf, source: io::Error },
    /// The socket directory, or a directory above it, is something other than a directory.
    #[error("{}", not_a_directory(dir, path, what))]
    NotADirectory { dir: PathBuf, path: PathBuf, what: &'static str },
    #[error(
        "socket directory {dir} {why}; refusing to serve there (another user could replace a socket). Use a \
         directory owned by uid {uid} that only it can write to (e.g. chown {uid} and chmod 0755 it), or remove it and \
         let the daemon create it"
    )]
    UnsafeDir { dir: PathBuf, why: String, uid: u32 },
}

fn not_a_directory(dir: &Path, path: &Path, what: &str) -> String {
    if dir == path {
        format!("socket directory {} is a {what}, but a directory is expected there", dir.display())
    } else {
        format!(
            "cannot create socket directory {}: {} is a {what}, but a directory is expected there",
            dir.display(),
            path.display()
        )
    }
}

/// Why `dir` could not be created, when the reason is that it, or the nearest of its ancestors
/// that exists, is not a directory (the system only says "File exists" or "Not a directory").
fn non_directory_in_the_way(dir: &Path) -> Option<(PathBuf, &'static str)> {
    for p in dir.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        match fs::metadata(p) {
            Ok(m) if m.is_dir() => return None,
            Ok(m) => {
                let t = m.file_type();
                let what = if t.is_file() {
                    "regular file"
                } else if t.is_socket() {
                    "socket"
                } else if t.is_fifo() {
                    "named pipe"
                } else {
                    "device or other special file"
                };
                return Some((p.to_path_buf(), what));
            }
            Err(_) => continue,
        }
    }
    None
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> BindError + 'a {
    move |source| BindError::Io { what, path: path.to_path_buf(), source }
}

/// An exclusive lock on a socket directory, held for the daemon's lifetime. Dropping it removes
/// the lock file (while still holding the lock), so a clean stop leaves nothing behind.
#[derive(Debug)]
pub struct DirLock {
    file: File,
    path: PathBuf,
}

impl DirLock {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Only while the path is still the file we locked (see `lock_dir`). Removing it before
        // the lock is released is what keeps this safe: a daemon that opened the old file
        // meanwhile sees, once it gets the lock, that the path no longer names that file.
        if same_file(&self.file, &self.path) {
            if let Err(e) = fs::remove_file(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the lock file");
            }
        }
    }
}

/// Whether `path` names the file open as `file` (same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::symlink_metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Creates `dir` (0755) if needed, checks that nobody but this daemon's user can change what is in
/// it, and takes its lock, so that two daemons never share a directory even if they start at the
/// same instant.
pub fn lock_dir(dir: &Path) -> Result<DirLock, BindError> {
    DirBuilder::new().recursive(true).mode(0o755).create(dir).map_err(|source| {
        match non_directory_in_the_way(dir) {
            Some((path, what)) => BindError::NotADirectory { dir: dir.to_path_buf(), path, what },
            None => BindError::Io { what: "creating socket directory", path: dir.to_path_buf(), source },
        }
    })?;
    check_dir_owner(dir)?;
    let path = dir.join("csi-proxy.lock");
    // The daemon that held the lock removes the file as it stops: the file locked here may have
    // been removed between opening and locking it, and then locks nothing. Open it again.
    for _ in 0..16 {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("opening lock file", &path))?;
        match file.try_lock() {
            Ok(()) if same_file(&file, &path) => return Ok(DirLock { file, path }),
            Ok(()) => continue,
            Err(fs::TryLockError::WouldBlock) => return Err(BindError::Locked { dir: dir.to_path_buf(), lock: path }),
            Err(fs::TryLockError::Error(e)) => return Err(BindError::Io { what: "locking", path, source: e }),
        }
    }
    Err(BindError::Locked { dir: dir.to_path_buf(), lock: path })
}

/// A directory that was there before may belong to someone else: whoever can write to it can
/// replace a socket with one of their own, and the node plugins would talk to them. It must be a
/// real directory (not a link), owned by the daemon's user, writable by nobody else.
fn check_dir_owner(dir: &Path) -> Result<(), BindError> {
    let meta = fs::symlink_metadata(dir).map_err(io_err("checking socket directory", dir))?;
    check_private(&meta, Private::Dir).map_err(|NotPrivate { why, uid }| BindError::UnsafeDir {
        dir: dir.to_path_buf(),
        why,
        uid,
    })
}

/// What [`check_private`] expects to find.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Private {
    Dir,
    File,
}

/// Why something only the daemon's user may change is not so: `why` completes "<path> …".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct NotPrivate {
    pub why: String,
    /// The daemon's (effective) uid, for the advice.
    pub uid: u32,
}

/// The one check of what the daemon trusts on disk that others could have made (the socket
/// directory, the audit file, the SMB directory): `meta` (from `symlink_metadata`, or `fstat` of
/// a file opened without following links) must be a real `expected`, not a link, owned by the
/// daemon's user and writable by nobody else.
pub fn check_private(meta: &fs::Metadata, expected: Private) -> Result<(), NotPrivate> {
    use std::os::unix::fs::MetadataExt;
    let uid = rustix::process::geteuid().as_raw();
    let refuse = |why: String| Err(NotPrivate { why, uid });
    if meta.file_type().is_symlink() {
        return refuse("is a symbolic link".into());
    }
    match expected {
        Private::Dir if !meta.is_dir() => return refuse("is not a directory".into()),
        Private::File if !meta.is_file() => return refuse("is not a regular file".into()),
        _ => {}
    }
    if meta.uid() != uid {
        return refuse(format!("is owned by uid {}", meta.uid()));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!("has mode {:04o}: others can write to it", meta.mode() & 0o7777));
    }
    Ok(())
}

/// A listening socket for one API. Dropping it removes its socket file, if that is still the
/// one it bound (not one that replaced it since).
#[derive(Debug)]
pub struct UnixSocketListener {
    inner: tokio::net::UnixListener,
    path: PathBuf,
    /// Device and inode of the socket file as bound.
    id: (u64, u64),
}

impl Drop for UnixSocketListener {
    fn drop(&mut self) {
        use std::os::unix::fs::MetadataExt;
        match fs::symlink_metadata(&self.path) {
            Ok(m) if (m.dev(), m.ino()) == self.id => {
                if let Err(e) = fs::remove_file(&self.path) {
                    tracing::warn!(path = %self.path.display(), error = %e, "cannot remove the socket");
                }
            }
            _ => {}
        }
    }
}

impl UnixSocketListener {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Listener for UnixSocketListener {
    type Io = tokio::net::UnixStream;

    async fn accept(&mut self) -> io::Result<Self::Io> {
        self.inner.accept().await.map(|(s, _)| s)
    }

    fn caller(io: &Self::Io) -> csi_proxy_wire::Caller {
        crate::caller::of_unix_stream(io)
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }
}

/// Binds the socket of `api` in `dir` (which must exist). Must run inside a tokio runtime.
pub fn bind(dir: &Path, api: &Api) -> Result<UnixSocketListener, BindError> {
    let path = api.socket_path(dir);
    check_existing(&path)?;

    static SEQ: AtomicU32 = AtomicU32::new(0);
    let staging = dir.join(format!(".staging-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
    let _ = fs::remove_dir_all(&staging);
    DirBuilder::new().mode(0o700).create(&staging).map_err(io_err("creating staging directory", &staging))?;
    let result = (|| {
        let tmp = staging.join("s");
        let std_listener = std::os::unix::net::UnixListener::bind(&tmp).map_err(io_err("binding", &tmp))?;
        fs::set_permissions(&tmp, Permissions::from_mode(0o600)).map_err(io_err("setting mode of", &tmp))?;
        let id = {
            use std::os::unix::fs::MetadataExt;
            let m = fs::symlink_metadata(&tmp).map_err(io_err("inspecting", &tmp))?;
            (m.dev(), m.ino())
        };
        fs::rename(&tmp, &path).map_err(io_err("moving socket into place at", &path))?;
        std_listener.set_nonblocking(true).map_err(io_err("configuring", &path))?;
        let inner = tokio::net::UnixListener::from_std(std_listener).map_err(io_err("registering", &path))?;
        Ok(UnixSocketListener { inner, path: path.clone(), id })
    })();
    let _ = fs::remove_dir_all(&staging);
    result
}

/// A live socket means another daemon; a dead one is stale and will be replaced.
fn check_existing(path: &Path) -> Result<(), BindError> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(BindError::Io { what: "inspecting", path: path.to_path_buf(), source: e }),
    };
    if !meta.file_type().is_socket() {
        return Err(BindError::NotASocket { path: path.to_path_buf() });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(BindError::InUse { path: path.to_path_buf() }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            tracing::info!(path = %path.display(), "replacing the stale socket of a daemon that is gone");
            Ok(())
        }
        Err(e) => Err(BindError::Io { what: "probing", path: path.to_path_buf(), source: e }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_wire::APIS;
    use std::os::unix::fs::MetadataExt;

    fn tempdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("csi-proxy-unix-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A socket directory someone else could write to is refused before anything is bound in
    /// it (it used to be accepted silently): others-writable, group-writable, another owner, a
    /// link. The daemon's own 0755 directory is fine.
    #[test]
    fn socket_directories_others_can_change_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempdir("owner");
        let ok = dir.join("mine");
        drop(lock_dir(&ok).unwrap());
        let refused = |d: &Path, needle: &str| match lock_dir(d) {
            Err(e @ BindError::UnsafeDir { .. }) => {
                assert!(e.to_string().contains(needle) && e.to_string().contains(&d.display().to_string()), "{e}")
            }
            other => panic!("{}: {other:?}", d.display()),
        };
        for (name, mode, needle) in
            [("world", 0o777, "mode 0777"), ("group", 0o775, "mode 0775"), ("sticky", 0o1777, "mode 1777")]
        {
            let d = dir.join(name);
            fs::create_dir(&d).unwrap();
            fs::set_permissions(&d, Permissions::from_mode(mode)).unwrap();
            refused(&d, needle);
            assert!(!d.join("csi-proxy.lock").exists(), "nothing was made in {}", d.display());
        }
        std::os::unix::fs::symlink(&ok, dir.join("link")).unwrap();
        refused(&dir.join("link"), "symbolic link");
        if rustix::process::geteuid().is_root() {
            let d = dir.join("theirs");
            fs::create_dir(&d).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
            refused(&d, "owned by uid 65534");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A regular file where the socket directory (or a directory above it) should be is named as
    /// such, instead of the system's bare "File exists" / "Not a directory".
    #[test]
    fn a_file_in_place_of_the_socket_directory_is_named() {
        let dir = tempdir("notdir");
        let file = dir.join("file");
        fs::write(&file, b"").unwrap();
        let e = lock_dir(&file).unwrap_err();
        assert!(matches!(e, BindError::NotADirectory { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            format!("socket directory {} is a regular file, but a directory is expected there", file.display())
        );
        assert!(std::error::Error::source(&e).is_none());
        let below = file.join("sub/sockets");
        let e = lock_dir(&below).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "cannot create socket directory {}: {} is a regular file, but a directory is expected there",
                below.display(),
                file.display()
            )
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn socket_is_private_and_a_second_bind_fails_while_live() {
        let dir = tempdir("live");
        let l = bind(&dir, &APIS[0]).unwrap();
        let meta = fs::metadata(l.path()).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert!(l.path().ends_with("csi-proxy-disk-v1alpha1.sock"));
        let e = bind(&dir, &APIS[0]).unwrap_err();
        assert!(matches!(e, BindError::InUse { .. }), "{e}");
        assert!(e.to_string().contains("csi-proxy-disk-v1alpha1.sock"), "{e}");
        // No staging leftovers.
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names.len(), 1, "{names:?}");
        drop(l);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn stale_socket_is_replaced_and_regular_files_are_not() {
        let dir = tempdir("stale");
        let path = APIS[1].socket_path(&dir);
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let l = bind(&dir, &APIS[1]).unwrap();
        assert!(std::os::unix::net::UnixStream::connect(l.path()).is_ok());

        let other = APIS[2].socket_path(&dir);
        fs::write(&other, b"keep me").unwrap();
        assert!(matches!(bind(&dir, &APIS[2]), Err(BindError::NotASocket { .. })));
        assert_eq!(fs::read(&other).unwrap(), b"keep me");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn directory_lock_is_exclusive() {
        let dir = tempdir("lock").join("nested");
        let first = lock_dir(&dir).unwrap();
        let e = lock_dir(&dir).unwrap_err();
        assert!(matches!(e, BindError::Locked { .. }), "{e}");
        drop(first);
        lock_dir(&dir).unwrap();
        fs::remove_dir_all(dir.parent().unwrap()).unwrap();
    }

    /// A listener removes its socket file when dropped, but not a file that replaced it; a lock
    /// removes its lock file, and the directory can be locked again at once.
    #[tokio::test]
    async fn dropping_removes_only_what_was_created() {
        let dir = tempdir("cleanup");
        let lock = lock_dir(&dir).unwrap();
        assert!(lock.path().exists());
        let a = bind(&dir, &APIS[0]).unwrap();
        let b = bind(&dir, &APIS[1]).unwrap();
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        drop(a);
        assert!(!pa.exists(), "the socket outlived its listener");
        // Someone replaced b's socket meanwhile: theirs stays.
        fs::remove_file(&pb).unwrap();
        fs::write(&pb, b"not ours").unwrap();
        drop(b);
        assert_eq!(fs::read(&pb).unwrap(), b"not ours");
        fs::remove_file(&pb).unwrap();
        let lock_path = lock.path().to_path_buf();
        drop(lock);
        assert!(!lock_path.exists(), "the lock file outlived its lock");
        let again = lock_dir(&dir).unwrap();
        assert!(matches!(lock_dir(&dir), Err(BindError::Locked { .. })));
        drop(again);
        let names: Vec<_> = fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert!(names.is_empty(), "{names:?}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
