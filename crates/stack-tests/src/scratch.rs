//! Scratch directories: a tree of a test's own under the temp directory.

use std::ops::Deref;
use std::path::{Path, PathBuf, MAIN_SEPARATOR};

/// `<temp>/<name>-<pid>`, emptied when made and removed on drop. On Linux, whatever a failed test
/// left mounted below it is unmounted first; a tree that still has something mounted in it is
/// left in place (with a note), since deleting would reach into the mounted filesystem.
///
/// Derefs to its path.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        remove(&path);
        std::fs::create_dir_all(&path).unwrap();
        Scratch { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `rel` below the directory, spelled as a string (with the platform's separator), as
    /// requests carry paths; `p("")` is the directory itself with a trailing separator.
    pub fn p(&self, rel: &str) -> String {
        format!("{}{MAIN_SEPARATOR}{rel}", self.path.display())
    }

    /// Creates the directory `rel` below this one (and its parents); returns it as [`Self::p`] does.
    pub fn dir(&self, rel: &str) -> String {
        let p = self.p(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }
}

impl Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove(&self.path);
    }
}

fn remove(path: &Path) {
    #[cfg(target_os = "linux")]
    if !crate::mounts::unmount_below(path) {
        eprintln!("leaving {} in place: still mounted", path.display());
        return;
    }
    let _ = std::fs::remove_dir_all(path);
}
