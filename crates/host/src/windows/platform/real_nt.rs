//! Containment's platform trait ([`contain::Nt`]) on the real handle calls of [`super::nt`], and,
//! for the mount points of a volume, on [`RealWin32`]. Kept apart from `nt.rs` so that the handle
//! calls, which `win32.rs` also uses, import nothing of `win32.rs`.

use super::nt::{
    attributes, delete, file_id, final_path, final_path_as, list, open_at, open_at_shared, open_path, open_path_shared,
    reparse, system_drive, Handle, Reparse, HOLD, HOLD_ENTRY, IO_REPARSE_TAG_MOUNT_POINT, REMOVE, SHARE_ALL,
};
use super::win32::RealWin32;
use crate::windows::contain::{self, Open};
use std::io;
use windows_sys::Wdk::Storage::FileSystem::{FILE_OPEN, FILE_OPEN_REPARSE_POINT};
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT, FILE_NAME_NORMALIZED, FILE_READ_ATTRIBUTES,
    VOLUME_NAME_GUID,
};

/// Containment's handle calls ([`contain::Nt`]) on the real ones: [`open_path`], [`open_at`],
/// [`final_path`] and [`attributes`], with the access and flags each [`Open`] stands for.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealNt;

impl contain::Nt for RealNt {
    type Handle = Handle;

    fn open(&self, path: &str, how: Open) -> io::Result<Handle> {
        match how {
            Open::Hold => open_path(path, HOLD, 0),
            Open::Entry => open_path(path, HOLD_ENTRY, FILE_FLAG_OPEN_REPARSE_POINT),
            Open::Look => open_path(path, FILE_READ_ATTRIBUTES, 0),
            Open::Remove => open_path(path, REMOVE, FILE_FLAG_OPEN_REPARSE_POINT),
            Open::Peek => open_path_shared(path, FILE_READ_ATTRIBUTES, SHARE_ALL, FILE_FLAG_OPEN_REPARSE_POINT),
        }
    }

    fn open_at(&self, dir: &Handle, name: &str, how: Open) -> io::Result<Handle> {
        match how {
            Open::Hold => open_at(dir, name, HOLD, FILE_OPEN, 0),
            Open::Entry => open_at(dir, name, HOLD_ENTRY, FILE_OPEN, FILE_OPEN_REPARSE_POINT),
            Open::Look => open_at(dir, name, FILE_READ_ATTRIBUTES, FILE_OPEN, 0),
            Open::Remove => open_at(dir, name, REMOVE, FILE_OPEN, FILE_OPEN_REPARSE_POINT),
            Open::Peek => {
                open_at_shared(dir, name, FILE_READ_ATTRIBUTES, SHARE_ALL, FILE_OPEN, FILE_OPEN_REPARSE_POINT)
            }
        }
    }

    fn final_path(&self, h: &Handle) -> io::Result<String> {
        final_path(h)
    }

    fn attributes(&self, h: &Handle) -> io::Result<u32> {
        attributes(h).map(|(attrs, _)| attrs)
    }

    fn system_drive(&self) -> io::Result<String> {
        system_drive()
    }

    fn list(&self, h: &Handle) -> io::Result<Vec<String>> {
        list(h)
    }

    fn delete(&self, h: &Handle) -> io::Result<()> {
        delete(h)
    }

    fn mount_point_target(&self, h: &Handle) -> io::Result<Option<String>> {
        let (attrs, tag) = attributes(h)?;
        if attrs & FILE_ATTRIBUTE_REPARSE_POINT == 0 || tag != IO_REPARSE_TAG_MOUNT_POINT {
            return Ok(None);
        }
        Ok(match reparse(h)? {
            Reparse::MountPoint { target } => Some(target),
            _ => None,
        })
    }

    fn file_id(&self, h: &Handle) -> io::Result<u64> {
        file_id(h)
    }

    fn volume_path(&self, h: &Handle) -> io::Result<String> {
        final_path_as(h, FILE_NAME_NORMALIZED | VOLUME_NAME_GUID)
    }

    fn volume_mount_points(&self, volume: &str) -> io::Result<Vec<String>> {
        crate::windows::Win32::mount_points_of(&RealWin32, volume)
    }
}
