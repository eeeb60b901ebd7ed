//! Filesystem group, contained in the allowed roots.
//!
//! Every operation first has the path checked and its deepest existing ancestor held by
//! [`Containment::locate`] (the one containment of the Windows backend, shared with the volume
//! group's mount targets and the SMB group's share links; see [`crate::windows::contain`]):
//! lexically inside a root (upstream's check, minus its string-prefix flaw), then by the held
//! ancestor's canonical path. Only then does the operation act, relative to the held handle, on
//! the final name, opened with FILE_OPEN_REPARSE_POINT (PathExists: looked up, not opened, by
//! the held parent's canonical path): a link there is acted on as a link, never followed. Where
//! upstream does follow a final link (RmdirContents, Mkdir over an existing link), the followed
//! handle's canonical path is checked again before anything is done through it.
//!
//! Consequence worth knowing: paths *below* a link that leads outside the roots are refused,
//! including paths below an SMB mapping link (canonically `\\?\UNC\…`). The link itself is inside
//! by name, so it can be checked, removed and used as a CreateSymlink destination, which is what
//! CSI drivers do with it.

use super::nt::{self, Handle, Reparse, HOLD, IO_REPARSE_TAG_MOUNT_POINT, IO_REPARSE_TAG_SYMLINK};
use super::real_nt::RealNt;
use super::win32::RealWin32;
use crate::paths::windows as wp;
use crate::paths::{within, Roots};
use crate::windows::contain::{self, Containment};
use crate::windows::remove::{self, Removal};
use crate::{Error, FilesystemHost, Result};
use windows_sys::Wdk::Storage::FileSystem::{FILE_DIRECTORY_FILE, FILE_OPEN, FILE_OPEN_IF, FILE_OPEN_REPARSE_POINT};
use windows_sys::Win32::Storage::FileSystem::{
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_OPEN_REPARSE_POINT, FILE_READ_ATTRIBUTES,
};

/// Access to look at a name.
const PEEK: u32 = FILE_READ_ATTRIBUTES;

pub struct Filesystem {
    contain: Containment<RealNt>,
    /// For DeleteVolumeMountPointW, when a removal meets a volume mount point.
    win32: RealWin32,
}

/// A checked path: its deepest existing ancestor, held, and the names below it.
type Located = contain::Located<Handle>;

impl FilesystemHost for Filesystem {
    /// Upstream's `Lstat`: a link counts as existing whether or not its target does. The entry is
    /// looked up without being opened ([`nt::exists`]), by the canonical path of the held parent
    /// and the final name, as CreateSymbolicLinkW is given it: while the parent is held, nothing
    /// on that path can be renamed, removed or swapped for a link, so the name looked up is the
    /// one inside the held parent, and a link there is not followed.
    fn path_exists(&self, path: &str) -> Result<bool> {
        let loc = self.locate(path)?;
        if loc.parent().is_none() {
            return Ok(false);
        }
        nt::exists(&wp::verbatim(&loc.canonical_path())).map_err(|e| Error::io(format!("checking {path}"), e))
    }

    /// `MkdirAll`: each missing name is created relative to the previous directory's handle.
    fn mkdir(&self, path: &str) -> Result<()> {
        let loc = self.locate(path)?;
        let not_dir = |shown: &str| Error::exists(format!("{shown} exists and is not a directory (creating {path})"));
        if !loc.held_is_dir {
            return Err(not_dir(&loc.held_path));
        }
        let mut shown = loc.held_path.clone();
        let mut cur: Option<Handle> = None;
        for name in &loc.rest {
            shown = join(&shown, name);
            let dir = cur.as_ref().unwrap_or(&loc.held);
            let h = nt::open_at(dir, name, HOLD, FILE_OPEN_IF, FILE_DIRECTORY_FILE | FILE_OPEN_REPARSE_POINT)
                .map_err(|e| if nt::is_not_a_directory(&e) { not_dir(&shown) } else { io(&shown, "creating", e) })?;
            let (attrs, _) = attributes(&h, &shown)?;
            // An existing link (or one swapped in since we looked) is fine if it leads to a
            // directory inside the roots; we continue below what it leads to.
            let next =
                if attrs & FILE_ATTRIBUTE_REPARSE_POINT != 0 { self.follow_dir(&loc, dir, name, &shown)? } else { h };
            cur = Some(next);
        }
        Ok(())
    }

    /// `os.Remove` (empty directory, file or link) or, with `force`, `os.RemoveAll`; a volume
    /// mount point is taken out of the mount manager first, as RemoveDirectoryW does
    /// ([`remove`](crate::windows::remove)).
    fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        remove::rmdir(&self.contain, &self.win32, path, force)
    }

    /// Empties a directory and keeps it. Like upstream, a link at `path` is followed; what it
    /// leads to must be inside the roots.
    fn rmdir_contents(&self, path: &str) -> Result<()> {
        let loc = self.locate(path)?;
        let missing = || Error::not_found(format!("directory {path} does not exist"));
        let Some(parent) = loc.parent() else { return Err(missing()) };
        let h = match nt::open_at(parent, loc.name(), HOLD, FILE_OPEN, FILE_DIRECTORY_FILE) {
            Ok(h) => h,
            Err(e) if nt::is_not_found(&e) => return Err(missing()),
            Err(e) if nt::is_not_a_directory(&e) => return Err(Error::not_found(format!("{path} is not a directory"))),
            Err(e) => return Err(io(path, "opening", e)),
        };
        let canonical = self.contain.canonical_for(&loc, &h, path)?;
        if !loc.inside(&canonical) {
            return Err(self.roots().outside(path, Some(&wp::display(&canonical))));
        }
        if loc.is_root(&canonical) {
            return Err(self.roots().refuse_removal(path));
        }
        Removal { nt: self.contain.nt(), win32: &self.win32 }.contents(&h, &canonical, path)
    }

    /// Creates a symbolic link at `link` to `destination` (upstream's `os.Symlink(source_path,
    /// target_path)`): a directory link when the destination is a directory. Both must be inside
    /// the roots by their canonical names; the destination's final name is not followed, so a
    /// link inside the roots (an SMB mapping's, say) is a valid destination.
    fn create_symlink(&self, destination: &str, link: &str) -> Result<()> {
        let at = self.locate(link)?;
        let dest = self.locate(destination)?;
        let Some(parent) = at.parent() else {
            return Err(Error::not_found(format!("cannot create link {link}: its directory does not exist")));
        };
        let target = dest.parsed.to_string();
        let directory = match dest.parent() {
            Some(p) => match nt::open_at(p, dest.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT) {
                // A link to a directory carries the directory attribute itself.
                Ok(h) => attributes(&h, destination)?.0 & FILE_ATTRIBUTE_DIRECTORY != 0,
                Err(e) if nt::is_not_found(&e) => false,
                Err(e) => return Err(io(destination, "checking", e)),
            },
            None => false,
        };
        match nt::open_at(parent, at.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT) {
            Ok(h) if links_to(&h, &target) => return Ok(()),
            Ok(_) => return Err(Error::exists(format!("{link} already exists"))),
            Err(e) if nt::is_not_found(&e) => {}
            Err(e) => return Err(io(link, "checking", e)),
        }
        // CreateSymbolicLinkW takes a path, not a handle: give it the canonical path of the held
        // parent (which cannot move while held), then check through the handle that the link is
        // there and says what we asked.
        nt::create_symlink(&wp::verbatim(&at.canonical_path()), &target, directory)
            .map_err(|e| Error::io(format!("creating link {link} to {destination}"), e))?;
        match nt::open_at(parent, at.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT) {
            Ok(h) if links_to(&h, &target) => Ok(()),
            Ok(_) => {
                Err(Error::internal(format!("created link {link} to {destination}, but {link} is now something else")))
            }
            Err(e) if nt::is_not_found(&e) => Err(Error::internal(format!(
                "CreateSymbolicLinkW reported success for link {link} to {destination}, but no link exists \
                 (Wine's CreateSymbolicLinkW does nothing)"
            ))),
            Err(e) => Err(io(link, "checking the new link", e)),
        }
    }

    /// True for a symbolic link or mount point (junction, volume mounted folder) whose target
    /// exists — Go's notion of a link here, see docs/upstream.md#is-symlink. Other reparse points (dedup,
    /// cloud files, AF_UNIX sockets) are not links. A target outside the roots is refused without
    /// being looked at, except the two kinds upstream relies on: a volume (`\\?\Volume{…}\`,
    /// mounted folders) and an SMB share (mapping links).
    fn is_symlink(&self, path: &str) -> Result<bool> {
        // Upstream checks no path here, so Win32 put a path rooted without a drive on the system
        // drive, and GCE PD's mounter relies on that (see `with_system_drive`).
        let resolved = self.contain.with_system_drive(path)?;
        let path = resolved.as_ref();
        let loc = self.locate(path)?;
        let missing = || Error::not_found(format!("{path} does not exist"));
        let Some(parent) = loc.parent() else { return Err(missing()) };
        let h = match nt::open_at(parent, loc.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT) {
            Ok(h) => h,
            Err(e) if nt::is_not_found(&e) => return Err(missing()),
            Err(e) => return Err(io(path, "checking", e)),
        };
        let (attrs, tag) = attributes(&h, path)?;
        if attrs & FILE_ATTRIBUTE_REPARSE_POINT == 0
            || !matches!(tag, IO_REPARSE_TAG_SYMLINK | IO_REPARSE_TAG_MOUNT_POINT)
        {
            return Ok(false);
        }
        let (raw, resolved) = match nt::reparse(&h).map_err(|e| io(path, "reading the link", e))? {
            Reparse::Symlink { target, relative: true } => {
                let r = resolve_relative(&loc.canonical, &target);
                (target, Some(r))
            }
            Reparse::Symlink { target, .. } | Reparse::MountPoint { target } => {
                let r = wp::components(&target);
                (target, r)
            }
            Reparse::Other(_) => return Ok(false),
        };
        let Some(target) = resolved else { return Err(self.link_outside(path, &raw)) };
        if target[0] == "UNC" || wp::is_volume_guid(&target[0]) {
            return match nt::open_path(&wp::verbatim(&target), PEEK, FILE_FLAG_OPEN_REPARSE_POINT) {
                Ok(_) => Ok(true),
                Err(e) if nt::is_not_found(&e) => Ok(false),
                Err(e) => Err(Error::io(format!("checking {}, the target of link {path}", wp::display(&target)), e)),
            };
        }
        let shown = wp::display(&target);
        let t = match self.locate(&shown) {
            Ok(t) => t,
            Err(Error::PermissionDenied(_) | Error::InvalidArgument(_)) => return Err(self.link_outside(path, &shown)),
            Err(e) => return Err(e),
        };
        let Some(tparent) = t.parent() else { return Ok(false) };
        match nt::open_at(tparent, t.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT) {
            Ok(_) => Ok(true),
            Err(e) if nt::is_not_found(&e) => Ok(false),
            Err(e) => Err(Error::io(format!("checking {shown}, the target of link {path}"), e)),
        }
    }
}

impl Filesystem {
    pub fn new(roots: Roots) -> Self {
        Filesystem { contain: Containment::new(RealNt, roots), win32: RealWin32 }
    }

    /// Checks `path` and holds its deepest existing ancestor ([`Containment::locate`]).
    fn locate(&self, path: &str) -> Result<Located> {
        self.contain.locate(path)
    }

    fn roots(&self) -> &Roots {
        self.contain.roots()
    }

    /// Opens the directory a link at `dir\name` leads to, provided it is inside the roots.
    fn follow_dir(&self, loc: &Located, dir: &Handle, name: &str, shown: &str) -> Result<Handle> {
        let h = nt::open_at(dir, name, HOLD, FILE_OPEN, FILE_DIRECTORY_FILE).map_err(|e| {
            if nt::is_not_found(&e) {
                Error::exists(format!("{shown} is a link whose target does not exist"))
            } else if nt::is_not_a_directory(&e) {
                Error::exists(format!("{shown} is a link to something that is not a directory"))
            } else {
                io(shown, "following", e)
            }
        })?;
        let canonical = self.contain.canonical_for(loc, &h, shown)?;
        if !loc.inside(&canonical) {
            return Err(self.roots().outside(shown, Some(&wp::display(&canonical))));
        }
        Ok(h)
    }

    fn link_outside(&self, link: &str, target: &str) -> Error {
        let target = target.strip_prefix(r"\??\").unwrap_or(target);
        Error::denied(format!(
            "link {link} points to {target}, which is not within the working directories {}",
            self.roots()
        ))
    }
}

/// A relative symlink target, resolved against the canonical components of the link's directory
/// (a leading `\` means the root of that volume).
fn resolve_relative(base: &[String], target: &str) -> Vec<String> {
    let mut out: Vec<String> = if target.starts_with('\\') { base[..1].to_vec() } else { base.to_vec() };
    for part in target.split('\\') {
        match part {
            "" | "." => {}
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
            }
            p => out.push(p.to_string()),
        }
    }
    out
}

/// Whether `h` is a symbolic link to exactly `target` (compared as Windows compares names).
fn links_to(h: &Handle, target: &str) -> bool {
    let Ok(Reparse::Symlink { target: stored, relative: false }) = nt::reparse(h) else { return false };
    match (wp::components(&stored), wp::components(target)) {
        (Some(a), Some(b)) => a.len() == b.len() && within(&a, &b, true),
        _ => false,
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('\\') {
        format!("{dir}{name}")
    } else {
        format!("{dir}\\{name}")
    }
}

fn io(path: &str, doing: &str, e: std::io::Error) -> Error {
    Error::io(format!("{doing} {path}"), e)
}

fn attributes(h: &Handle, path: &str) -> Result<(u32, u32)> {
    nt::attributes(h).map_err(|e| io(path, "reading the attributes of", e))
}

#[cfg(test)]
mod tests;

/// The SMB group's local link: made under the same containment as CreateSymlink, pointing out of
/// the roots on purpose, since its target is the share.
impl crate::windows::smb::ShareLinks for Filesystem {
    fn check(&self, local: &str, target: &str) -> Result<bool> {
        let at = self.locate(local)?;
        if let Some(h) =
            at.parent().and_then(|p| nt::open_at(p, at.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT).ok())
        {
            if links_to(&h, target) {
                return Ok(true);
            }
        }
        share_link_parent(&at, local).map(|_| false)
    }

    fn link(&self, local: &str, target: &str) -> Result<()> {
        // Only a share may be the target: this trait must not become a way to link out of the
        // roots to anything else.
        if wp::components(target).is_none_or(|t| t[0] != "UNC") {
            return Err(Error::internal(format!("SMB link target {target} is not a \\\\?\\UNC\\ share path")));
        }
        let at = self.locate(local)?;
        let parent = share_link_parent(&at, local)?;
        nt::create_symlink(&wp::verbatim(&at.canonical_path()), target, true)
            .map_err(|e| Error::io(format!("creating link {local} to {target}"), e))?;
        // As in create_symlink: check through the held parent that the link is ours.
        match nt::open_at(parent, at.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT) {
            Ok(h) if links_to(&h, target) => Ok(()),
            Ok(_) => {
                Err(Error::internal(format!("created link {local} to {target}, but {local} is now something else")))
            }
            Err(e) if nt::is_not_found(&e) => Err(Error::internal(format!(
                "CreateSymbolicLinkW reported success for link {local} to {target}, but no link exists \
                 (Wine's CreateSymbolicLinkW does nothing)"
            ))),
            Err(e) => Err(io(local, "checking the new link", e)),
        }
    }
}

/// The held parent of a share link's place, once nothing is there yet.
fn share_link_parent<'a>(at: &'a Located, local: &str) -> Result<&'a Handle> {
    let Some(parent) = at.parent() else {
        return Err(Error::not_found(format!("cannot create link {local}: its directory does not exist")));
    };
    match nt::open_at(parent, at.name(), PEEK, FILE_OPEN, FILE_OPEN_REPARSE_POINT) {
        Ok(_) => Err(Error::exists(format!("{local} already exists; expected nothing there for the SMB share link"))),
        Err(e) if nt::is_not_found(&e) => Ok(parent),
        Err(e) => Err(io(local, "checking", e)),
    }
}
