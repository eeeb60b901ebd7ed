//! Path containment on Windows, one implementation for every group that is handed a path: the
//! filesystem group (`platform::fs`), the volume group's mount targets ([`super::volumes`]) and
//! the SMB group's share links (`ShareLinks`, made by `platform::fs`).
//!
//! A path is first checked lexically ([`wp::parse`]) and must name a place inside a root, by
//! component and case-insensitively, so nothing outside the roots is ever opened on a caller's
//! behalf. Its deepest existing ancestor is then opened, following links, and held: the handle
//! has data access and shares read and write but not delete, so the directory cannot be renamed
//! or removed while held (and NTFS and FAT refuse to rename a directory with open handles below
//! it, so its canonical path stays valid too). The OS's canonical path of that handle, plus the
//! names not yet existing, must lie inside the canonical path of a root: that is [`Located`].
//! Windows names a volume in that canonical path by one of its DOS names of its choosing, so
//! below a volume mounted in a folder inside the roots it may say `D:\data`; a path outside the
//! roots by that name is judged again by where it is within its volume and where the mount
//! manager has the volume mounted ([`Containment::spelled_inside`]), so the answer does not
//! depend on the name Windows picked.
//! [`Containment::hold`] goes one step further for callers that act on the entry itself (mount
//! targets): the final name is opened relative to the held directory without following a link
//! there, and held the same way, so the entry checked is the entry acted on — [`Held`].
//!
//! Callers act relative to the held handles. The Win32 calls that only take a path string get
//! the canonical path of the held handles: it has no link left to follow, and nothing on it can
//! be renamed, removed or swapped for a link while the handles are held. CreateSymbolicLinkW gets
//! it as `\\?\C:\…` ([`Located::canonical_path`]); the mount-point calls (SetVolumeMountPointW,
//! DeleteVolumeMountPointW, GetVolumeNameForVolumeMountPointW) as the plain `C:\…\` their
//! documentation gives and upstream passes ([`Held::mount_point_dir`], `\\?\` only where a plain
//! path cannot name the place).
//!
//! Roots are canonicalised the same way, and the result is reused for at most [`ROOT_RECHECK`]
//! ([`RootCache`]), as they may be created or re-linked while the daemon runs. A root that does
//! not exist (or is not a drive path) matches nothing; a path lexically inside missing roots only
//! fails with FailedPrecondition naming them rather than with a misleading PermissionDenied.
//!
//! A path rooted without a drive (`\var\lib\kubelet\…`) is refused by [`wp::parse`]; callers
//! whose upstream RPC accepts it (the volume group's target paths, IsSymlink) first put it on
//! the system drive, as Win32 does ([`Containment::with_system_drive`]), and check the result.
//!
//! Design: the containment logic is written here against [`Nt`], a few handle calls (open by
//! path, open relative to a held directory, canonical path, attributes, and, for removal,
//! listing, deleting and reading a mount point), so that it builds and is tested on every OS
//! against the scripted platform, while `platform::nt::RealNt` is a thin map onto the real
//! calls. Removal ([`super::remove`]) is generic too, since what it decides (a volume mount point
//! goes through the mount manager first) must be tested; creating and linking stay with their NT
//! calls in `platform::fs`, generic code gaining nothing there. They receive the real handles,
//! since [`Containment`] is generic over the handle type rather than erasing it.

use super::{attr, failure, is_not_found};
use crate::paths::windows::{self as wp, WinPath};
use crate::paths::{within, Roots};
use crate::{Error, Result};
use csi_proxy_sync::LockExt;
use std::borrow::Cow;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long the canonical form of the roots is reused before it is looked up again.
///
/// Why reusing it keeps containment: each call still opens and canonicalises its own deepest
/// existing ancestor, so what a pod can change (names below the roots, links it makes in its
/// own directories) is judged afresh on every call. The roots and the names above them (the
/// kubelet directory, the -working-dir folders) are not the pods': only an administrator can
/// re-link, rename or replace them. Such a change is noticed at once when it moves the root away
/// from a checked path (the path is then outside the reused roots, which are looked up again
/// before anything is refused, [`Containment::locate`]), and otherwise within this time: until
/// then a path that reaches the directory that *was* the root, through a link that leads there,
/// is still taken as inside. A root that did not exist is looked up again on every call, so a
/// root created later is usable at once.
pub const ROOT_RECHECK: Duration = Duration::from_secs(1);

/// How many volumes mounted in folders of other volumes [`Containment::spelled_inside`] goes up.
pub const MAX_MOUNT_HOPS: usize = 4;

/// The canonical components of each root (in the order of [`Roots::as_slice`]; `None`: does
/// not exist), and when they were looked up.
struct RootCache {
    at: Instant,
    canonical: Vec<Option<Vec<String>>>,
}

/// How [`Nt`] opens something. Every open shares read and write, never delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// A directory on the way, held: listing access, which makes the share mode bind (handles
    /// with attribute access only take part in no sharing checks). Links are followed.
    Hold,
    /// The final entry itself, held: read-data access, a link opened as the link
    /// (FILE_OPEN_REPARSE_POINT), never followed.
    Entry,
    /// Only to learn where something is: attribute access, links followed. Not held.
    Look,
    /// The final entry, to remove it (or, a plain directory, its contents): delete, listing and
    /// attribute access, a link opened as the link, never followed.
    Remove,
    /// The final entry, kept open while another opener (the mount manager) needs it: attribute
    /// access only, a link opened as the link, sharing read, write and delete. A handle without
    /// data or delete access takes part in no sharing check (MS-FSA 2.1.5.1.2.2), so whatever
    /// access and share mode the other opener asks for, it gets no sharing violation (32).
    Peek,
}

impl Open {
    pub fn name(self) -> &'static str {
        match self {
            Open::Hold => "hold",
            Open::Entry => "entry",
            Open::Look => "look",
            Open::Remove => "remove",
            Open::Peek => "peek",
        }
    }
}

/// The handle calls containment is made of. Failures carry the Win32 code, as [`super::Win32`]'s.
pub trait Nt: Send + Sync {
    /// An open handle, closed on drop.
    type Handle;
    /// Opens an existing file or directory by its `\\?\` path.
    fn open(&self, path: &str, how: Open) -> io::Result<Self::Handle>;
    /// Opens the existing `name` (one component) inside the held directory `dir`: the lookup
    /// starts at `dir`, nothing above it is walked again.
    fn open_at(&self, dir: &Self::Handle, name: &str, how: Open) -> io::Result<Self::Handle>;
    /// The canonical path of what `h` refers to (GetFinalPathNameByHandleW, `\\?\` form, every
    /// link resolved, names in their on-disk spelling).
    fn final_path(&self, h: &Self::Handle) -> io::Result<String>;
    /// The FILE_ATTRIBUTE_* bits of what `h` refers to.
    fn attributes(&self, h: &Self::Handle) -> io::Result<u32>;
    /// The drive Win32 puts a path rooted without one (`\var\lib\kubelet`) on: the current
    /// drive, which for a service is the system drive (`%SystemDrive%`, the drive of
    /// GetSystemWindowsDirectoryW), e.g. `C:`.
    fn system_drive(&self) -> io::Result<String>;
    /// The names in the directory `h` ([`Open::Remove`] or [`Open::Hold`]), without `.` and `..`.
    fn list(&self, h: &Self::Handle) -> io::Result<Vec<String>>;
    /// Deletes what `h` ([`Open::Remove`]) refers to: a file, a link, an empty directory.
    fn delete(&self, h: &Self::Handle) -> io::Result<()>;
    /// Where the mount point `h` refers to leads (the substitute name of its
    /// IO_REPARSE_TAG_MOUNT_POINT reparse data: `\??\Volume{…}\` for a volume mounted folder,
    /// a directory for a junction); `None` when `h` is no mount point.
    fn mount_point_target(&self, h: &Self::Handle) -> io::Result<Option<String>>;
    /// The file ID of what `h` refers to (FileInternalInformation), unique on its volume while
    /// a handle is open: tells whether a name still refers to the object checked.
    fn file_id(&self, h: &Self::Handle) -> io::Result<u64>;
    /// Where `h` is within its volume: GetFinalPathNameByHandleW with VOLUME_NAME_GUID,
    /// `\\?\Volume{GUID}\a\b`, whichever DOS names the volume has.
    fn volume_path(&self, h: &Self::Handle) -> io::Result<String>;
    /// Every place the volume `volume` (`\\?\Volume{GUID}\`) is mounted, drive roots and folders,
    /// each ending in `\` (GetVolumePathNamesForVolumeNameW).
    fn volume_mount_points(&self, volume: &str) -> io::Result<Vec<String>>;
}

impl<T: Nt + ?Sized> Nt for Arc<T> {
    type Handle = T::Handle;
    fn open(&self, path: &str, how: Open) -> io::Result<Self::Handle> {
        (**self).open(path, how)
    }
    fn open_at(&self, dir: &Self::Handle, name: &str, how: Open) -> io::Result<Self::Handle> {
        (**self).open_at(dir, name, how)
    }
    fn final_path(&self, h: &Self::Handle) -> io::Result<String> {
        (**self).final_path(h)
    }
    fn attributes(&self, h: &Self::Handle) -> io::Result<u32> {
        (**self).attributes(h)
    }
    fn system_drive(&self) -> io::Result<String> {
        (**self).system_drive()
    }
    fn list(&self, h: &Self::Handle) -> io::Result<Vec<String>> {
        (**self).list(h)
    }
    fn delete(&self, h: &Self::Handle) -> io::Result<()> {
        (**self).delete(h)
    }
    fn mount_point_target(&self, h: &Self::Handle) -> io::Result<Option<String>> {
        (**self).mount_point_target(h)
    }
    fn file_id(&self, h: &Self::Handle) -> io::Result<u64> {
        (**self).file_id(h)
    }
    fn volume_path(&self, h: &Self::Handle) -> io::Result<String> {
        (**self).volume_path(h)
    }
    fn volume_mount_points(&self, volume: &str) -> io::Result<Vec<String>> {
        (**self).volume_mount_points(volume)
    }
}

/// A path that passed the lexical check.
#[derive(Debug, Clone)]
pub struct Lexical {
    pub parsed: WinPath,
    /// The path is one of the roots itself, by name.
    pub is_root: bool,
    /// The roots (as given) the path is inside by name.
    roots: Vec<String>,
}

/// A checked path: its deepest existing ancestor, held, and the names below it.
#[derive(Debug)]
pub struct Located<H> {
    pub parsed: WinPath,
    /// The deepest existing ancestor of the final name, held ([`Open::Hold`]).
    pub held: H,
    /// `held` as the caller spelled it, for messages.
    pub held_path: String,
    pub held_is_dir: bool,
    /// Canonical components of `held`.
    pub canonical: Vec<String>,
    /// Names below `held` that did not exist; the last is the final name. Never empty.
    pub rest: Vec<String>,
    /// Canonical components of the roots that exist.
    roots: Vec<Vec<String>>,
}

impl<H> Located<H> {
    /// The held parent directory, when the parent exists.
    pub fn parent(&self) -> Option<&H> {
        (self.held_is_dir && self.rest.len() == 1).then_some(&self.held)
    }

    pub fn name(&self) -> &str {
        self.rest.last().expect("a located path has a final name")
    }

    /// The canonical spelling of the path, its final name not resolved.
    pub fn canonical_path(&self) -> Vec<String> {
        self.canonical.iter().chain(&self.rest).cloned().collect()
    }

    /// Whether canonical components lie inside a root.
    pub fn inside(&self, canonical: &[String]) -> bool {
        self.roots.iter().any(|r| within(canonical, r, true))
    }

    /// Whether canonical components are a root itself.
    pub fn is_root(&self, canonical: &[String]) -> bool {
        self.roots.iter().any(|r| r.len() == canonical.len() && within(canonical, r, true))
    }
}

/// A checked path whose entry is held too: what a caller acting on the entry itself (a mount
/// target) needs. Dropping it releases the handles, so keep it until the act is done.
#[derive(Debug)]
pub struct Held<H> {
    /// The held parent (or deepest existing ancestor) and the canonical components.
    pub at: Located<H>,
    /// The entry, held ([`Open::Entry`]: a link there is the link), and its attributes; `None`
    /// when nothing is there.
    pub entry: Option<(H, u32)>,
}

impl<H> Held<H> {
    /// The canonical components of the entry's place (its parent's canonical path and its name;
    /// a link there is not followed).
    pub fn canonical(&self) -> Vec<String> {
        self.at.canonical_path()
    }

    /// [`Held::canonical`] spelled for Win32 calls that take a path: `\\?\C:\…`.
    pub fn verbatim(&self) -> String {
        wp::verbatim(&self.canonical())
    }

    /// [`Held::canonical`] spelled for the mount-point calls: `C:\…\` ([`wp::mount_point_dir`]),
    /// from the held parent's canonical path, so it names the place that was checked.
    pub fn mount_point_dir(&self) -> String {
        wp::mount_point_dir(&self.canonical())
    }

    /// The entry's attributes; `None` when it does not exist.
    pub fn attrs(&self) -> Option<u32> {
        self.entry.as_ref().map(|(_, a)| *a)
    }

    pub fn is_reparse(&self) -> bool {
        self.attrs().is_some_and(|a| a & attr::REPARSE_POINT != 0)
    }
}

/// The allowed roots and the handle calls to check paths against them.
pub struct Containment<N: Nt> {
    nt: N,
    roots: Roots,
    cache: Mutex<Option<RootCache>>,
    recheck: Duration,
}

impl<N: Nt> Containment<N> {
    pub fn new(nt: N, roots: Roots) -> Self {
        Containment { nt, roots, cache: Mutex::new(None), recheck: ROOT_RECHECK }
    }

    /// Reuses the canonical roots for `recheck` rather than [`ROOT_RECHECK`]; zero looks them up
    /// on every call. For tests, which must not depend on timing.
    #[cfg(test)]
    pub fn with_recheck(mut self, recheck: Duration) -> Self {
        self.recheck = recheck;
        self
    }

    pub fn roots(&self) -> &Roots {
        &self.roots
    }

    /// The handle calls, for callers acting on what was checked ([`super::remove`]).
    pub fn nt(&self) -> &N {
        &self.nt
    }

    /// `path` as Win32 reads it when it is rooted without a drive (`\var\lib\kubelet\…`, as the
    /// kubelet hands drivers their staging paths): on the system drive, the current drive of a
    /// service. Any other path comes back unchanged, for [`wp::parse`] to judge.
    pub fn with_system_drive<'p>(&self, path: &'p str) -> Result<Cow<'p, str>> {
        let rooted = path.starts_with('\\') && !path.starts_with(r"\\") && !path.starts_with(r"\??\");
        if !rooted {
            return Ok(Cow::Borrowed(path));
        }
        let drive =
            (self.nt.system_drive()).map_err(|e| failure(format!("finding the system drive (for {path})"), e))?;
        match drive.as_bytes() {
            [l, b':'] if l.is_ascii_alphabetic() => Ok(Cow::Owned(format!("{drive}{path}"))),
            _ => Err(Error::internal(format!(
                "the system drive is {}; expected a drive letter and a colon (for {path})",
                crate::error::clip(&drive)
            ))),
        }
    }

    /// The lexical check alone, which makes no call: the path must be a drive path inside a root
    /// by name (PermissionDenied naming the path and the roots otherwise).
    pub fn lexical(&self, path: &str) -> Result<Lexical> {
        let parsed = wp::parse(path)?;
        let parts = parsed.parts();
        let mut is_root = false;
        let mut roots = Vec::new();
        for r in self.roots.as_slice() {
            if let Some(root) = parse_root(r).filter(|p| within(&parts, &p.parts(), true)) {
                is_root |= root.parts().len() == parts.len();
                roots.push(r.clone());
            }
        }
        if roots.is_empty() {
            return Err(self.roots.outside(path, None));
        }
        Ok(Lexical { parsed, is_root, roots })
    }

    /// Checks `path` lexically, holds its deepest existing ancestor and checks that ancestor's
    /// canonical path (plus the missing names) against the canonical roots. A drive root is
    /// refused: there is no final name to act on.
    pub fn locate(&self, path: &str) -> Result<Located<N::Handle>> {
        if wp::parse(path)?.names.is_empty() {
            return Err(Error::invalid(format!(
                "path {path} is a drive root; expected a path inside the working directories {}",
                self.roots
            )));
        }
        self.locate_checked(path, self.lexical(path)?)
    }

    /// [`Containment::locate`], then the entry itself opened relative to the held parent without
    /// following a link there, and held.
    pub fn hold(&self, path: &str) -> Result<Held<N::Handle>> {
        let at = self.locate(path)?;
        let Some(parent) = at.parent() else { return Ok(Held { at, entry: None }) };
        let entry = match self.nt.open_at(parent, at.name(), Open::Entry) {
            Ok(h) => h,
            Err(e) if is_not_found(&e) => return Ok(Held { at, entry: None }),
            Err(e) => return Err(failure(format!("opening {path}"), e)),
        };
        let attrs = self.nt.attributes(&entry).map_err(|e| failure(format!("reading the attributes of {path}"), e))?;
        Ok(Held { at, entry: Some((entry, attrs)) })
    }

    /// Where the held entry, a link, leads: its canonical components, through the held parent.
    /// The caller decides what may be there ([`Located::inside`], [`Located::is_root`]).
    pub fn follow(&self, held: &Held<N::Handle>, path: &str) -> Result<Vec<String>> {
        let parent = held.at.parent().expect("a held entry has a held parent");
        let h = (self.nt.open_at(parent, held.at.name(), Open::Look))
            .map_err(|e| failure(format!("resolving {path}"), e))?;
        self.canonical_for(&held.at, &h, path)
    }

    /// [`Containment::canonical_of`], spelled inside `loc`'s roots when the object is reachable
    /// there through a mount point ([`Containment::spelled_inside`]): what callers that check
    /// where a followed link leads compare with [`Located::inside`].
    pub fn canonical_for(&self, loc: &Located<N::Handle>, h: &N::Handle, path: &str) -> Result<Vec<String>> {
        let canonical = self.canonical_of(h, path)?;
        Ok(self.spelled_inside(h, canonical, &[], &loc.roots))
    }

    /// The canonical components of an open handle; a form we cannot compare is refused.
    pub fn canonical_of(&self, h: &N::Handle, path: &str) -> Result<Vec<String>> {
        let raw = self.nt.final_path(h).map_err(|e| failure(format!("resolving {path}"), e))?;
        // A form we cannot compare is outside as far as the caller is told.
        wp::components(&raw).ok_or_else(|| self.roots.outside(path, Some(&raw)))
    }

    fn locate_checked(&self, path: &str, lexical: Lexical) -> Result<Located<N::Handle>> {
        let exists = |canonical: &[Option<Vec<String>>]| {
            (self.roots.as_slice().iter().zip(canonical)).any(|(r, c)| c.is_some() && lexical.roots.contains(r))
        };
        // Reused roots first; looked up afresh when none of the path's roots existed then.
        let (mut canonical_roots, reused) = match self.reused_roots() {
            Some(c) if exists(&c) => (c, true),
            _ => (self.fresh_roots(), false),
        };
        if !exists(&canonical_roots) {
            return Err(Error::precondition(format!(
                "path {path} is in the working directory {}, which does not exist",
                lexical.roots.join(", ")
            )));
        }
        let parsed = lexical.parsed;
        let parts = parsed.parts();
        for n in (0..parsed.names.len()).rev() {
            let held_path = parsed.prefix(n);
            let held = match self.nt.open(&wp::verbatim(&parts[..=n]), Open::Hold) {
                Ok(h) => h,
                Err(e) if is_not_found(&e) && n > 0 => continue,
                Err(e) => return Err(failure(format!("opening {held_path} (for {path})"), e)),
            };
            let mut canonical = self.canonical_of(&held, path)?;
            let attrs = (self.nt.attributes(&held))
                .map_err(|e| failure(format!("reading the attributes of {held_path}"), e))?;
            let rest = parsed.names[n..].to_vec();
            let full = |c: &[String]| -> Vec<String> { c.iter().chain(&rest).cloned().collect() };
            let inside = |c: &[String], roots: &[Option<Vec<String>>]| {
                let f = full(c);
                roots.iter().flatten().any(|r| within(&f, r, true))
            };
            // Outside the reused roots: a root may have been re-linked since; refuse only what
            // is outside the roots as they are now.
            if reused && !inside(&canonical, &canonical_roots) {
                canonical_roots = self.fresh_roots();
            }
            if !inside(&canonical, &canonical_roots) {
                // Below a mounted folder Windows may name the volume by another of its DOS
                // names: judged by where the object is within its volume.
                let roots: Vec<Vec<String>> = canonical_roots.iter().flatten().cloned().collect();
                canonical = self.spelled_inside(&held, canonical, &rest, &roots);
            }
            let roots: Vec<Vec<String>> = canonical_roots.into_iter().flatten().collect();
            if !roots.iter().any(|r| within(&full(&canonical), r, true)) {
                return Err(self.roots.outside(path, Some(&wp::display(&full(&canonical)))));
            }
            let held_is_dir = attrs & attr::DIRECTORY != 0;
            return Ok(Located { parsed, held, held_path, held_is_dir, canonical, rest, roots });
        }
        unreachable!("the drive root either opens or fails");
    }

    /// `canonical` (what GetFinalPathNameByHandleW says `h` is) when it, followed by the names
    /// `rest`, lies inside `roots`; otherwise the same object spelled through a mount point that
    /// puts it inside them, when there is one.
    ///
    /// Why: GetFinalPathNameByHandleW(VOLUME_NAME_DOS) names a volume by one DOS name of its
    /// choosing, its drive letter or a mount point, so below a volume mounted in a folder inside
    /// the roots (a staged volume) it may answer `D:\data` for `C:\root\pv\globalmount\data`. What
    /// does not depend on that choice is where the object is within its volume
    /// (VOLUME_NAME_GUID: `\\?\Volume{GUID}\data`) and where the mount manager says that volume
    /// is mounted (GetVolumePathNamesForVolumeNameW); every such spelling names the same object,
    /// since the names within the volume are a canonical path (no link on it). A mount point on
    /// a volume itself mounted in a folder is followed the same way, up to [`MAX_MOUNT_HOPS`].
    /// Only mount points the mount manager registered count (SetVolumeMountPointW, which needs
    /// administrators); a junction someone made to a volume does not. Containment is then as on
    /// Linux, where a path below a mount inside the roots is inside. Lookups that fail leave
    /// `canonical` as it was, which then is refused.
    fn spelled_inside(
        &self,
        h: &N::Handle,
        canonical: Vec<String>,
        rest: &[String],
        roots: &[Vec<String>],
    ) -> Vec<String> {
        let inside = |c: &[String]| {
            let full: Vec<&String> = c.iter().chain(rest).collect();
            roots.iter().any(|r| within(&full, r, true))
        };
        if inside(&canonical) {
            return canonical;
        }
        let place = match self.nt.volume_path(h) {
            Ok(raw) => wp::components(&raw).filter(|c| wp::is_volume_guid(&c[0])),
            Err(e) => {
                tracing::debug!(error = %e, "no volume GUID path");
                None
            }
        };
        // Places to spell, each a volume and the names within it.
        let mut pending: Vec<Vec<String>> = place.into_iter().collect();
        for _ in 0..MAX_MOUNT_HOPS {
            let mut next = Vec::new();
            for place in pending.drain(..) {
                let (volume, names) = place.split_first().expect("a volume place has its volume");
                let mount_points = match self.nt.volume_mount_points(&format!(r"\\?\{volume}\")) {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::debug!(volume = %volume, error = %e, "mount points not listed");
                        continue;
                    }
                };
                for m in mount_points.iter().filter_map(|m| wp::components(m)) {
                    let spelled: Vec<String> = m.iter().chain(names).cloned().collect();
                    if inside(&spelled) {
                        return spelled;
                    }
                    // A mounted folder is on another volume: where it is within that one.
                    if let Some(host) = self.volume_place_of_folder(&m) {
                        next.push(host.into_iter().chain(names.iter().cloned()).collect());
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            pending = next;
        }
        canonical
    }

    /// The volume place of the mount point `folder` (DOS components, not a drive root): its
    /// parent's, plus its name. The parent is opened by path only to learn that.
    fn volume_place_of_folder(&self, folder: &[String]) -> Option<Vec<String>> {
        let (name, parent) = folder.split_last().filter(|(_, p)| !p.is_empty())?;
        let h = self.nt.open(&wp::verbatim(parent), Open::Look).ok()?;
        let raw = self.nt.volume_path(&h).ok()?;
        let mut place = wp::components(&raw).filter(|c| wp::is_volume_guid(&c[0]))?;
        place.push(name.clone());
        Some(place)
    }

    /// The canonical roots looked up less than `recheck` ago, if any.
    fn reused_roots(&self) -> Option<Vec<Option<Vec<String>>>> {
        let cache = self.cache.lock_ignoring_poison();
        cache.as_ref().filter(|c| c.at.elapsed() < self.recheck).map(|c| c.canonical.clone())
    }

    /// The canonical roots looked up now, and kept for the next calls.
    fn fresh_roots(&self) -> Vec<Option<Vec<String>>> {
        let at = Instant::now();
        let canonical: Vec<_> = self.roots.as_slice().iter().map(|r| self.canonical_root(r)).collect();
        *self.cache.lock_ignoring_poison() = Some(RootCache { at, canonical: canonical.clone() });
        canonical
    }

    /// A root's canonical components; `None` when it does not exist (or can't be resolved), so
    /// that it matches nothing.
    fn canonical_root(&self, root: &str) -> Option<Vec<String>> {
        let r = parse_root(root)?;
        let resolved = (self.nt.open(&wp::verbatim(&r.parts()), Open::Look)).and_then(|h| self.nt.final_path(&h));
        match resolved {
            Ok(raw) => wp::components(&raw),
            Err(e) => {
                tracing::debug!(root = %root, error = %e, "working directory does not resolve");
                None
            }
        }
    }
}

/// Roots come from the command line, where `/` may have been used.
fn parse_root(root: &str) -> Option<WinPath> {
    wp::parse(&root.replace('/', "\\")).ok()
}

#[cfg(test)]
mod tests;
