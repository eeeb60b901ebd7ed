//! `/proc/self/mountinfo` (proc_pid_mountinfo(5)): what is mounted where, in this mount namespace.
//!
//! A line is
//! `ID PARENT MAJOR:MINOR ROOT MOUNT_POINT OPTIONS [TAG[:VALUE]...] - FSTYPE SOURCE SUPER_OPTIONS`,
//! fields separated by single spaces; the kernel writes space, tab, newline and backslash inside
//! ROOT, MOUNT_POINT and SOURCE as octal escapes (`\040`, `\011`, `\012`, `\134`). Mounts stacked
//! on one mount point appear in mount order: the last line for a path is the one visible there.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    /// Mount ID: what `statx(STATX_MNT_ID)` reports for paths in this mount.
    pub id: u64,
    pub parent: u64,
    /// `st_dev` of files in the mount: the block device for ext4, xfs, fuseblk; an anonymous
    /// device (major 0) for btrfs, tmpfs, overlay...
    pub major: u32,
    pub minor: u32,
    /// The directory of the filesystem mounted here (`/` unless a bind mount of a subdirectory).
    pub root: PathBuf,
    pub mount_point: PathBuf,
    pub fstype: String,
    /// As the filesystem shows it: a device path for block filesystems, else anything.
    pub source: PathBuf,
}

/// Every mount of this process's namespace, in the kernel's order.
pub(crate) fn read() -> std::io::Result<Vec<Mount>> {
    let text = std::fs::read("/proc/self/mountinfo")?;
    parse(&text).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, format!("/proc/self/mountinfo: {e}")))
}

/// Parses mountinfo text; a malformed line is an error (a mount silently skipped could make a
/// mounted volume look unmounted).
pub(crate) fn parse(text: &[u8]) -> Result<Vec<Mount>, String> {
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|line| parse_line(line).ok_or_else(|| format!("malformed line {:?}", String::from_utf8_lossy(line))))
        .collect()
}

fn parse_line(line: &[u8]) -> Option<Mount> {
    let mut fields = line.split(|&b| b == b' ');
    let mut next = || fields.next();
    let number = |f: &[u8]| std::str::from_utf8(f).ok()?.parse::<u64>().ok();
    let id = number(next()?)?;
    let parent = number(next()?)?;
    let (major, minor) = std::str::from_utf8(next()?).ok()?.split_once(':')?;
    let (major, minor) = (major.parse().ok()?, minor.parse().ok()?);
    let root = path(unescape(next()?));
    let mount_point = path(unescape(next()?));
    let _options = next()?;
    // Optional fields (shared:N, master:N, propagate_from:N, unbindable), up to a lone "-".
    loop {
        if next()? == b"-" {
            break;
        }
    }
    let fstype = String::from_utf8(unescape(next()?)).ok()?;
    let source = path(unescape(next()?));
    let _super_options = next()?;
    Some(Mount { id, parent, major, minor, root, mount_point, fstype, source })
}

/// Decodes the kernel's `\ooo` octal escapes; anything else is kept as it is.
pub(crate) fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal =
            field.get(i + 1..i + 4).filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match octal {
            Some(d) => {
                let value = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                match u8::try_from(value) {
                    Ok(byte) => {
                        out.push(byte);
                        i += 4;
                    }
                    Err(_) => {
                        out.push(field[i]);
                        i += 1;
                    }
                }
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// Kernel paths are bytes; elsewhere (where this only builds and is tested) they pass as UTF-8.
fn path(bytes: Vec<u8>) -> PathBuf {
    #[cfg(unix)]
    return PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes));
    #[cfg(not(unix))]
    return PathBuf::from(String::from_utf8_lossy(&bytes).into_owned());
}

/// The mount visible at `path`: the last one mounted there.
pub(crate) fn visible_at<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    mounts.iter().rev().find(|m| m.mount_point == path)
}

/// The mount that holds `path`: the visible mount at the longest mount point that is `path` or
/// one of its ancestors (compared component by component).
pub(crate) fn holding<'a>(mounts: &'a [Mount], path: &Path) -> Option<&'a Mount> {
    path.ancestors().find_map(|a| visible_at(mounts, a))
}

pub(crate) fn by_id(mounts: &[Mount], id: u64) -> Option<&Mount> {
    mounts.iter().find(|m| m.id == id)
}

/// Whether a mount is served by a FUSE daemon (`fuse`, `fuseblk`, `fuse.<subtype>`): a lookup
/// below it waits for that daemon, for ever if it hangs.
pub(crate) fn is_fuse(m: &Mount) -> bool {
    m.fstype == "fuse" || m.fstype == "fuseblk" || m.fstype.starts_with("fuse.")
}

/// A mount's source as a device node path: absolute, below `dev`, and without `.` or `..`
/// components (so it can't climb out of `dev`); `None` otherwise.
pub(crate) fn device_source<'a>(source: &'a Path, dev: &Path) -> Option<&'a Path> {
    // On unix the encoded bytes are the path's own bytes.
    let bytes = source.as_os_str().as_encoded_bytes();
    let dotted = bytes.split(|&b| b == b'/').any(|c| c == b"." || c == b"..");
    (source.has_root() && !dotted && source.starts_with(dev) && source != dev).then_some(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw,lowerdir=/a,upperdir=/b
27 22 254:0 / /tmp rw,relatime shared:7 master:3 - ext4 /dev/vda rw
44 27 259:0 / /tmp/kubelet/mnt\\040sp rw,relatime - xfs /dev/loop0p1 rw,attr2
45 27 0:41 /sub/dir /tmp/kubelet/btr rw,relatime shared:9 - btrfs /dev/loop1p1 rw,space_cache=v2
46 27 7:0 / /tmp/kubelet/nt rw,relatime - fuseblk /dev/loop2 rw,user_id=0,allow_other
47 44 259:3 / /tmp/kubelet/mnt\\040sp rw,relatime - ext4 /dev/loop3p1 rw
";

    #[test]
    fn fields() {
        let m = parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(m.len(), 6);
        assert_eq!(
            m[1],
            Mount {
                id: 27,
                parent: 22,
                major: 254,
                minor: 0,
                root: "/".into(),
                mount_point: "/tmp".into(),
                fstype: "ext4".into(),
                source: "/dev/vda".into(),
            }
        );
        // No optional fields at all.
        assert_eq!((m[2].fstype.as_str(), m[2].source.as_path()), ("xfs", Path::new("/dev/loop0p1")));
        // Several optional fields; a bind of a subdirectory; an anonymous device.
        assert_eq!(m[3].root, Path::new("/sub/dir"));
        assert_eq!((m[3].major, m[3].minor, m[3].fstype.as_str()), (0, 41, "btrfs"));
        assert_eq!(m[4].fstype, "fuseblk");
    }

    #[test]
    fn octal_escapes() {
        let m = parse(SAMPLE.as_bytes()).unwrap();
        assert_eq!(m[2].mount_point, Path::new("/tmp/kubelet/mnt sp"));
        let line = b"50 27 8:1 /a\\134b /m\\011t\\012n\\040s\\134 rw - ext4 /dev/x\\040y rw\n";
        let m = parse(line).unwrap();
        assert_eq!(m[0].root, Path::new("/a\\b"));
        assert_eq!(m[0].mount_point, Path::new("/m\tt\nn s\\"));
        assert_eq!(m[0].source, Path::new("/dev/x y"));
        // Not an escape: kept as written. Non-UTF-8 bytes survive.
        assert_eq!(unescape(b"a\\9b\\"), b"a\\9b\\");
        assert_eq!(unescape(b"\\400"), b"\\400");
        assert_eq!(unescape(b"\\377"), b"\xff");
        #[cfg(unix)]
        {
            use std::os::unix::ffi::OsStrExt;
            assert_eq!(path(unescape(b"\\377")).as_os_str().as_bytes(), b"\xff");
        }
    }

    #[test]
    fn stacked_mounts_last_wins() {
        let m = parse(SAMPLE.as_bytes()).unwrap();
        let top = visible_at(&m, Path::new("/tmp/kubelet/mnt sp")).unwrap();
        assert_eq!((top.id, top.fstype.as_str()), (47, "ext4"));
        assert_eq!(holding(&m, Path::new("/tmp/kubelet/mnt sp/a/b")).unwrap().id, 47);
        assert_eq!(holding(&m, Path::new("/tmp/kubelet")).unwrap().id, 27);
        assert_eq!(holding(&m, Path::new("/tmpx")).unwrap().id, 22, "component-wise, not by prefix");
        assert_eq!(by_id(&m, 45).unwrap().mount_point, Path::new("/tmp/kubelet/btr"));
        assert!(by_id(&m, 99).is_none());
    }

    #[test]
    fn fuse_mounts_and_device_sources() {
        let m = parse(SAMPLE.as_bytes()).unwrap();
        assert!(is_fuse(&m[4]), "fuseblk");
        assert!(!is_fuse(&m[3]) && !is_fuse(&m[0]));
        let line = b"60 27 0:50 / /m rw - fuse.sshfs u@h:/x rw\n61 27 0:51 / /n rw - fuse /dev/fuse rw\n";
        assert!(parse(line).unwrap().iter().all(is_fuse));
        let dev = Path::new("/dev");
        assert_eq!(device_source(Path::new("/dev/loop1p1"), dev), Some(Path::new("/dev/loop1p1")));
        assert_eq!(device_source(Path::new("/dev/mapper/vg-lv"), dev), Some(Path::new("/dev/mapper/vg-lv")));
        for bad in
            ["/dev/../etc/x", "/dev/a/../../x", "/dev/./loop0", "/dev/..", "/dev", "/devx/loop0", "dev/loop0", "/tmp/x"]
        {
            assert_eq!(device_source(Path::new(bad), dev), None, "{bad}");
        }
    }

    #[test]
    fn malformed_lines_are_errors() {
        for bad in [
            "22 1 0:21 / / rw - overlay",
            "22 1 0:21 / / rw shared:1 overlay overlay rw",
            "x 1 0:21 / / rw - overlay overlay rw",
            "22 1 021 / / rw - overlay overlay rw",
        ] {
            assert!(parse(bad.as_bytes()).is_err(), "{bad}");
        }
        assert_eq!(parse(b"").unwrap(), vec![]);
    }

    #[test]
    fn this_process() {
        let m = read().unwrap();
        assert!(holding(&m, Path::new("/proc/self")).is_some_and(|m| m.fstype == "proc"));
    }
}
