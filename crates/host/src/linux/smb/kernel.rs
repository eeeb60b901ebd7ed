//! The real [`Kernel`]: the new mount API (`fsopen("cifs")`, one `fsconfig` per option,
//! `fsmount`, `move_mount`), `umount2`, `statfs` and `/proc/self/mountinfo`.
//!
//! [`Kernel::verify`] is the same mount with `nosharesock`, left detached: the kernel opens a
//! connection and a session of its own for it (without `nosharesock` it would reuse the existing
//! mount's session and check nothing), authenticates, and the mount goes when its fd is closed.

use super::{CifsMount, Found, Kernel, MountRequest};
use crate::formats::mountinfo;
use crate::{Error, Result};
use rustix::io::Errno;
use rustix::mount::{FsMountFlags, FsOpenFlags, MountAttrFlags, MoveMountFlags, UnmountFlags};
use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;

pub struct RealKernel;

/// The options of a mount, in order, as `fsconfig` gets them: `(key, Some(value))` for a string,
/// `(key, None)` for a flag. The password is one value of its own, so nothing in it (commas,
/// `=`) can be read as another option; it is the only secret, under the key `password`.
pub(crate) fn options<'a>(request: &'a MountRequest, ip: &'a str) -> Vec<(&'static str, Option<&'a str>)> {
    let mut o = vec![("source", Some(request.source.as_str())), ("ip", Some(ip))];
    if request.username.is_empty() {
        o.push(("guest", None));
    } else {
        o.push(("username", Some(request.username.as_str())));
        o.push(("password", Some(request.password.expose())));
        if !request.domain.is_empty() {
            o.push(("domain", Some(request.domain.as_str())));
        }
    }
    o.push(("file_mode", Some("0777")));
    o.push(("dir_mode", Some("0777")));
    if request.seal {
        o.push(("seal", None));
    }
    o
}

/// The options of a credential check ([`Kernel::verify`]): the mount's, plus `nosharesock`.
pub(crate) fn verify_options<'a>(request: &'a MountRequest, ip: &'a str) -> Vec<(&'static str, Option<&'a str>)> {
    let mut o = options(request, ip);
    o.push(("nosharesock", None));
    o
}

/// A cifs filesystem context configured with `options`, created (connected and authenticated:
/// the one step that talks to the server) and made into a detached mount.
fn detached(options: &[(&'static str, Option<&str>)]) -> std::result::Result<std::os::fd::OwnedFd, Errno> {
    let fs = rustix::mount::fsopen("cifs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    for (key, value) in options {
        match value {
            Some(v) => rustix::mount::fsconfig_set_string(&fs, *key, *v)?,
            None => rustix::mount::fsconfig_set_flag(&fs, *key)?,
        }
    }
    rustix::mount::fsconfig_create(&fs)?;
    rustix::mount::fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, MountAttrFlags::empty())
}

/// The server's address: an IP literal as is, else the first address the resolver gives;
/// EADDRNOTAVAIL when the name does not resolve.
fn address(host: &str) -> std::result::Result<String, Errno> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    match (bare, 445).to_socket_addrs() {
        Ok(mut addrs) => addrs.next().map(|a| a.ip().to_string()).ok_or(Errno::ADDRNOTAVAIL),
        Err(_) => Err(Errno::ADDRNOTAVAIL),
    }
}

impl Kernel for RealKernel {
    fn mount(&self, request: &MountRequest, target: &Path) -> std::result::Result<(), Errno> {
        let ip = address(&request.host)?;
        let mnt = detached(&options(request, &ip))?;
        rustix::mount::move_mount(&mnt, "", rustix::fs::CWD, target, MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH)
    }

    fn verify(&self, request: &MountRequest) -> std::result::Result<(), Errno> {
        let ip = address(&request.host)?;
        // Never attached anywhere: closing the fd unmounts it, and the kernel drops its own
        // connection and session with it.
        detached(&verify_options(request, &ip)).map(drop)
    }

    fn unmount(&self, target: &Path, lazy: bool) -> std::result::Result<(), Errno> {
        if lazy {
            match rustix::mount::unmount(target, UnmountFlags::DETACH | UnmountFlags::NOFOLLOW) {
                Ok(()) | Err(Errno::INVAL) => Ok(()),
                Err(e) => Err(e),
            }
        } else {
            super::super::unmount_waiting(target)
        }
    }

    fn probe(&self, target: &Path) -> std::result::Result<(), Errno> {
        rustix::fs::statfs(target).map(drop)
    }

    fn mounted(&self, target: &Path) -> Result<Found> {
        let text = std::fs::read("/proc/self/mountinfo").map_err(|e| Error::io("reading /proc/self/mountinfo", e))?;
        Ok(found(&text, target))
    }
}

/// The mount visible at `target` in mountinfo text (the last one mounted there).
pub(crate) fn found(text: &[u8], target: &Path) -> Found {
    for line in text.split(|&b| b == b'\n').rev().filter(|l| !l.is_empty()) {
        let Ok(mut parsed) = mountinfo::parse(line) else { continue };
        let Some(m) = parsed.pop() else { continue };
        if m.mount_point != target {
            continue;
        }
        if m.fstype != "cifs" && m.fstype != "smb3" {
            return Found::Other(m.fstype);
        }
        // The super options are the last field.
        let options = line.rsplit(|&b| b == b' ').next().unwrap_or_default();
        return Found::Cifs(CifsMount {
            source: m.source.to_string_lossy().into_owned(),
            options: String::from_utf8_lossy(options).into_owned(),
        });
    }
    Found::Nothing
}
