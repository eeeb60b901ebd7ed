//! Removal for the filesystem group's Rmdir and RmdirContents, written against [`Nt`] and
//! [`Win32`] so that it runs on the scripted platform too (`platform::fs` calls it with the real
//! ones).
//!
//! Every entry is opened relative to its held directory without following a link
//! ([`Open::Remove`]): links (symbolic links, junctions, volume mounted folders) are removed as
//! links and never descended, and a plain directory is emptied depth first, iteratively, since
//! depth is bounded only by path length.
//!
//! Upstream removes through `os.Remove` / `os.RemoveAll`, that is RemoveDirectoryW, whose first
//! step a handle-relative delete would skip: a directory that is a volume mount point (mount
//! point reparse data naming `\??\Volume{GUID}\`) is taken out of the mount manager with
//! DeleteVolumeMountPointW before the directory goes; deleting the directory alone leaves the
//! mount manager's database naming a mount point that no longer exists. A mount point the mount
//! manager no longer knows (its volume gone) is removed anyway, as RemoveDirectoryW removes it
//! ([`unknown_to_mount_manager`]). We do the same: the
//! mount point is deleted at the held entry's canonical place, spelled `C:\…\` as
//! DeleteVolumeMountPointW documents (the held parent cannot be renamed, so the place is the one
//! checked), then the directory through a handle. A junction (mount point reparse data naming a
//! directory) is no volume mount point and is just removed.
//!
//! DeleteVolumeMountPointW opens the folder itself, with an access and share mode Microsoft does
//! not document. Our DELETE handle would refuse an opener that does not share delete, and no
//! share mode of ours helps with that (CreateFileW: a requested share mode that conflicts with
//! the access of an open handle fails with ERROR_SHARING_VIOLATION). So while the mount manager
//! works we keep the entry open with attribute access only ([`Open::Peek`]), which takes part in
//! no sharing check, and then reopen it for deletion relative to the held parent, acting only if
//! the file ID is still the one checked.
//! azuredisk unstages this way: Rmdir(force) of the staging folder with the volume still
//! mounted (pkg/mounter/safe_mounter_windows.go, `Rmdir`).

use super::contain::{Containment, Nt, Open};
use super::{attr, code, failure, is_not_found, Win32};
use crate::paths::windows as wp;
use crate::{Error, Result};

/// Rmdir: `os.Remove` of an empty directory, a file or a link, or with `force` `os.RemoveAll`.
/// A missing path is NotFound, or success with `force`; a root itself is refused.
pub fn rmdir<N: Nt>(contain: &Containment<N>, win32: &dyn Win32, path: &str, force: bool) -> Result<()> {
    let loc = contain.locate(path)?;
    let missing = || if force { Ok(()) } else { Err(Error::not_found(format!("{path} does not exist"))) };
    let Some(parent) = loc.parent() else { return missing() };
    let place = loc.canonical_path();
    if loc.is_root(&place) {
        return Err(contain.roots().refuse_removal(path));
    }
    let removal = Removal { nt: contain.nt(), win32 };
    let h = match contain.nt().open_at(parent, loc.name(), Open::Remove) {
        Ok(h) => h,
        Err(e) if is_not_found(&e) => return missing(),
        Err(e) => return Err(failure(format!("opening to remove {path}"), e)),
    };
    let attrs = removal.attributes(&h, path)?;
    if force && is_plain_dir(attrs) {
        removal.contents(&h, &place, path)?;
    }
    removal.remove(parent, loc.name(), h, attrs, &place, path)
}

/// Removes what is in held directories, as RemoveDirectoryW would.
pub struct Removal<'a, N: Nt> {
    pub nt: &'a N,
    pub win32: &'a dyn Win32,
}

impl<N: Nt> Removal<'_, N> {
    /// Removes everything below the directory `top`, whose canonical components are `place`
    /// (`shown` names it in messages), and keeps `top`.
    pub fn contents(&self, top: &N::Handle, place: &[String], shown: &str) -> Result<()> {
        let mut top_names = self.list(top, shown)?;
        // Directories being emptied, innermost last.
        let mut stack: Vec<Emptying<N::Handle>> = Vec::new();
        loop {
            let (dir, dir_place, dir_shown, names) = match stack.last_mut() {
                Some(d) => (&d.handle, d.place.as_slice(), d.shown.as_str(), &mut d.names),
                None => (top, place, shown, &mut top_names),
            };
            let Some(name) = names.pop() else {
                match stack.pop() {
                    Some(d) => {
                        self.delete(&d.handle, &d.shown)?;
                        continue;
                    }
                    None => return Ok(()),
                }
            };
            let entry_shown = join(dir_shown, &name);
            let entry_place: Vec<String> = dir_place.iter().cloned().chain([name.clone()]).collect();
            let h = match self.nt.open_at(dir, &name, Open::Remove) {
                Ok(h) => h,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(failure(format!("opening to remove {entry_shown}"), e)),
            };
            let attrs = self.attributes(&h, &entry_shown)?;
            if is_plain_dir(attrs) {
                let names = self.list(&h, &entry_shown)?;
                stack.push(Emptying { handle: h, place: entry_place, shown: entry_shown, names });
            } else {
                self.remove(dir, &name, h, attrs, &entry_place, &entry_shown)?;
            }
        }
    }

    /// Deletes the entry `name` of the held directory `dir`, open as `h` ([`Open::Remove`]) with
    /// attributes `attrs`, at `place`: a volume mount point is first taken out of the mount
    /// manager.
    fn remove(
        &self,
        dir: &N::Handle,
        name: &str,
        h: N::Handle,
        attrs: u32,
        place: &[String],
        shown: &str,
    ) -> Result<()> {
        let h = if attrs & attr::REPARSE_POINT != 0 && attrs & attr::DIRECTORY != 0 {
            self.release_mount_point(dir, name, h, place, shown)?
        } else {
            h
        };
        self.delete(&h, shown)
    }

    fn delete(&self, h: &N::Handle, shown: &str) -> Result<()> {
        self.nt.delete(h).map_err(|e| {
            if e.raw_os_error() == Some(code::ERROR_DIR_NOT_EMPTY) {
                Error::precondition(format!("directory {shown} is not empty"))
            } else {
                failure(format!("removing {shown}"), e)
            }
        })
    }

    /// RemoveDirectoryW's first step: DeleteVolumeMountPointW when `h` is a volume mount point.
    /// Hands back a handle to delete it through: `h`, or when the mount manager was called, a
    /// new one to the same file (see the module comment).
    fn release_mount_point(
        &self,
        dir: &N::Handle,
        name: &str,
        h: N::Handle,
        place: &[String],
        shown: &str,
    ) -> Result<N::Handle> {
        let target =
            self.nt.mount_point_target(&h).map_err(|e| failure(format!("reading the mount point {shown}"), e))?;
        let Some(target) = target else { return Ok(h) };
        let is_volume = wp::components(&target).is_some_and(|c| c.len() == 1 && wp::is_volume_guid(&c[0]));
        if !is_volume {
            return Ok(h);
        }
        // Opened while `h` still refuses delete sharing, so it is the same file.
        let kept = (self.nt.open_at(dir, name, Open::Peek)).map_err(|e| failure(format!("opening {shown}"), e))?;
        let id = self.file_id(&kept, shown)?;
        drop(h);
        let mount_point = wp::mount_point_dir(place);
        match self.win32.delete_mount_point(&mount_point) {
            Ok(()) => {
                tracing::info!(path = %crate::error::clip(shown), volume = %crate::error::clip(&target), "volume mount point removed")
            }
            Err(e) if unknown_to_mount_manager(&e) => tracing::warn!(
                path = %crate::error::clip(shown),
                volume = %crate::error::clip(&target),
                error = %e,
                "the mount manager does not know this mount point (its volume is gone); removing the folder as RemoveDirectoryW does"
            ),
            Err(e) => {
                return Err(failure(
                    format!("removing the volume mount point {shown} (of {target}) from the mount manager"),
                    e,
                ))
            }
        }
        let h =
            (self.nt.open_at(dir, name, Open::Remove)).map_err(|e| failure(format!("opening to remove {shown}"), e))?;
        if self.file_id(&h, shown)? != id {
            return Err(Error::Aborted(format!(
                "{shown} was replaced while its volume mount point was being removed; left alone"
            )));
        }
        Ok(h)
    }

    fn file_id(&self, h: &N::Handle, shown: &str) -> Result<u64> {
        self.nt.file_id(h).map_err(|e| failure(format!("reading the file ID of {shown}"), e))
    }

    fn attributes(&self, h: &N::Handle, shown: &str) -> Result<u32> {
        self.nt.attributes(h).map_err(|e| failure(format!("reading the attributes of {shown}"), e))
    }

    fn list(&self, h: &N::Handle, shown: &str) -> Result<Vec<String>> {
        self.nt.list(h).map_err(|e| failure(format!("listing {shown}"), e))
    }
}

/// A directory being emptied: its handle, canonical place, name in messages and the names left.
struct Emptying<H> {
    handle: H,
    place: Vec<String>,
    shown: String,
    names: Vec<String>,
}

/// DeleteVolumeMountPointW's answer for a mount point whose volume the mount manager no longer
/// knows (a disk detached before NodeUnstage). Its page lists no error codes. The folder exists
/// (its parent is held and it was open a moment ago), so "not found" can only be about the
/// volume its reparse data names; Microsoft's own Directory.Delete (dotnet/runtime,
/// FileSystem.Windows.cs, RemoveDirectoryRecursive) likewise goes on to RemoveDirectory when
/// DeleteVolumeMountPoint fails with ERROR_PATH_NOT_FOUND. RemoveDirectoryW (upstream's
/// os.RemoveAll) deletes such a folder, reparse point and all; the stale entry it leaves in the
/// host volume's mount manager database is what `mountvol /R` is documented to clear. Any other
/// failure keeps the folder.
fn unknown_to_mount_manager(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code::ERROR_FILE_NOT_FOUND | code::ERROR_PATH_NOT_FOUND))
}

fn is_plain_dir(attrs: u32) -> bool {
    attrs & attr::DIRECTORY != 0 && attrs & attr::REPARSE_POINT == 0
}

fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('\\') {
        format!("{dir}{name}")
    } else {
        format!("{dir}\\{name}")
    }
}

#[cfg(test)]
mod tests;
