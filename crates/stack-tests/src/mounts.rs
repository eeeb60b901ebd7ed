//! The mount table as the tests read it: their own small reader of `/proc/self/mountinfo`,
//! independent of the backend's.

use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Where it is mounted, unescaped (`\040` is a space).
    pub point: PathBuf,
    pub fs_type: String,
    pub source: String,
}

/// Every mount of this process's namespace.
pub fn mounts() -> Vec<Mount> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let dash = f.iter().position(|x| *x == "-").unwrap();
            Mount { point: unescape(f[4]), fs_type: f[dash + 1].to_string(), source: f[dash + 2].to_string() }
        })
        .collect()
}

/// The mounts below `base` (other tests mount elsewhere meanwhile).
pub fn mounts_below(base: &Path) -> Vec<Mount> {
    mounts().into_iter().filter(|m| m.point.starts_with(base)).collect()
}

/// The filesystem types mounted at `path`, bottom first.
pub fn mounted_at(path: impl AsRef<Path>) -> Vec<String> {
    mounts().into_iter().filter(|m| m.point == path.as_ref()).map(|m| m.fs_type).collect()
}

/// Unmounts whatever is mounted below `base`, deepest first (lazily, as `umount -l`). Tells
/// whether nothing is mounted there any more.
pub fn unmount_below(base: &Path) -> bool {
    let mut below: Vec<PathBuf> = mounts_below(base).into_iter().map(|m| m.point).collect();
    below.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in &below {
        let _ = rustix::mount::unmount(p, rustix::mount::UnmountFlags::DETACH);
    }
    mounts_below(base).is_empty()
}

/// A mountinfo field with its octal escapes (`\040`, `\134`, ...) decoded.
fn unescape(f: &str) -> PathBuf {
    let b = f.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            out.push(u8::from_str_radix(&f[i + 1..i + 4], 8).unwrap());
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}
