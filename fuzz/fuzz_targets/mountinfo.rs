//! The mountinfo parser (`mountinfo`) on arbitrary text, and on lines written from the input the
//! way the kernel writes them.
//!
//! Properties: one mount per non-empty line or an error; what was parsed, written again with the
//! kernel's octal escapes, parses to the same mounts; mounts written from arbitrary fields parse
//! back field for field; the mount holding a path is the last one at its deepest mounted
//! ancestor; a device source never climbs out of /dev.
#![no_main]

use csi_proxy_host::fuzzing::mountinfo::{self, Mount};
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

fuzz_target!(|data: &[u8]| {
    if let Ok(mounts) = mountinfo::parse(data) {
        assert_eq!(mounts.len(), data.split(|&b| b == b'\n').filter(|l| !l.is_empty()).count());
        let text: Vec<u8> = mounts.iter().flat_map(line).collect();
        assert_eq!(mountinfo::parse(&text).as_ref(), Ok(&mounts), "{:?}", String::from_utf8_lossy(&text));
        lookups(&mounts, data);
    }
    let _ = written(&mut Unstructured::new(data));
});

fn written(u: &mut Unstructured) -> Result<()> {
    let mut mounts = Vec::new();
    for _ in 0..u.int_in_range(1..=4)? {
        mounts.push(Mount {
            id: u.arbitrary()?,
            parent: u.arbitrary()?,
            major: u.arbitrary()?,
            minor: u.arbitrary()?,
            root: path(u)?,
            mount_point: path(u)?,
            fstype: u.arbitrary()?,
            source: path(u)?,
        });
    }
    let text: Vec<u8> = mounts.iter().flat_map(line).collect();
    assert_eq!(mountinfo::parse(&text).as_ref(), Ok(&mounts), "{:?}", String::from_utf8_lossy(&text));
    lookups(&mounts, &text);
    Ok(())
}

fn path(u: &mut Unstructured) -> Result<PathBuf> {
    let bytes: Vec<u8> = u.arbitrary()?;
    Ok(PathBuf::from(OsStr::from_bytes(&bytes)))
}

/// One line as `show_mountinfo` writes it: space, tab, newline and backslash in names as `\ooo`.
fn line(m: &Mount) -> Vec<u8> {
    let mut out = format!("{} {} {}:{} ", m.id, m.parent, m.major, m.minor).into_bytes();
    escape(&mut out, m.root.as_os_str().as_bytes());
    out.push(b' ');
    escape(&mut out, m.mount_point.as_os_str().as_bytes());
    out.extend_from_slice(b" rw,relatime shared:1 - ");
    escape(&mut out, m.fstype.as_bytes());
    out.push(b' ');
    escape(&mut out, m.source.as_os_str().as_bytes());
    out.extend_from_slice(b" rw\n");
    out
}

fn escape(out: &mut Vec<u8>, field: &[u8]) {
    for &b in field {
        if matches!(b, b' ' | b'\t' | b'\n' | b'\\') {
            out.extend(format!("\\{b:03o}").bytes());
        } else {
            out.push(b);
        }
    }
}

fn lookups(mounts: &[Mount], data: &[u8]) {
    let mut paths: Vec<PathBuf> = mounts.iter().map(|m| m.mount_point.join("below")).collect();
    paths.extend(mounts.iter().map(|m| m.mount_point.clone()));
    paths.push(PathBuf::from(OsStr::from_bytes(data.split(|&b| b == b'\n').next().unwrap_or_default())));
    // The kernel writes absolute mount points; the model below assumes them.
    let absolute = mounts.iter().all(|m| m.mount_point.is_absolute());
    for p in paths.iter().filter(|p| absolute && p.is_absolute()) {
        assert_eq!(mountinfo::holding(mounts, p), holder(mounts, p), "{p:?} in {mounts:?}");
    }
    let dev = Path::new("/dev");
    for m in mounts {
        let _ = mountinfo::is_fuse(m);
        if let Some(s) = mountinfo::device_source(&m.source, dev) {
            assert!(s.starts_with(dev) && s != dev && s.is_absolute(), "{s:?}");
            assert!(s.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_))), "{s:?}");
            assert!(!s.as_os_str().as_bytes().split(|&b| b == b'/').any(|c| c == b"." || c == b".."), "{s:?}");
        }
    }
}

/// The last mount whose mount point has the most components among those `path` starts with.
fn holder(mounts: &[Mount], path: &Path) -> Option<usize> {
    let depth = |m: &Mount| path.starts_with(&m.mount_point).then(|| m.mount_point.components().count());
    let best = mounts.iter().filter_map(depth).max()?;
    mounts.iter().rposition(|m| depth(m) == Some(best))
}
