//! Filesystem group on Linux, contained in the allowed roots.
//!
//! Every call resolves the path itself, one component at a time, holding an `O_PATH` descriptor
//! for each directory it passes and following links by reading them — never by letting the
//! kernel follow a path string. What it reaches is therefore known exactly, and the final step
//! (`mkdirat`, `unlinkat`, `symlinkat`, ...) acts relative to the descriptor that was checked, so
//! swapping a directory for a link after the check changes nothing.
//!
//! Containment: a path is allowed when the directory holding its final entry, plus that entry's
//! name, lies within a canonical root. The final entry itself is never followed, except where the
//! operation is about its target (IsSymlink, RmdirContents, an existing Mkdir target,
//! CreateSymlink's destination), and then the target must be inside a root too. Once resolution
//! has entered a root, any step that leaves every root (a relative link climbing out, an
//! absolute link with `..`) stops it at once: a link inside a root can't be used even to learn
//! whether something outside exists.

use super::io_err;
use crate::paths::{self, Roots};
use crate::{Error, FilesystemHost, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};

/// Links followed in one resolution before giving up, as the kernel's own limit.
const MAX_LINKS: u32 = 40;
/// Directory levels Rmdir(force) and RmdirContents descend; each level holds a descriptor.
const MAX_DEPTH: usize = 256;

pub struct Filesystem {
    roots: Roots,
}

impl FilesystemHost for Filesystem {
    fn path_exists(&self, path: &str) -> Result<bool> {
        match self.locate(path)? {
            Located::Missing { .. } => Ok(false),
            Located::Entry { dir, name, .. } => match lstat(&dir, &name) {
                Ok(_) => Ok(true),
                Err(Errno::NOENT) => Ok(false),
                Err(e) => Err(io_err(path, "checking", e)),
            },
        }
    }

    fn mkdir(&self, path: &str) -> Result<()> {
        let (mut dir, rest) = match self.locate(path)? {
            Located::Missing { through_link: Some(link), .. } => {
                return Err(Error::not_found(format!("cannot create {path}: link {link} points to a missing path")))
            }
            Located::Missing { dir, rest, .. } => (dir, rest),
            Located::Entry { dir, name, .. } => (dir, vec![name]),
        };
        let last = rest.len() - 1;
        for (i, name) in rest.iter().enumerate() {
            match rustix::fs::mkdirat(&dir, name.as_str(), Mode::from_bits_truncate(0o755)) {
                Ok(()) => {}
                Err(Errno::EXIST) => {
                    let st = lstat(&dir, name).map_err(|e| io_err(path, "checking", e))?;
                    match FileType::from_raw_mode(st.st_mode) {
                        FileType::Directory => {}
                        // An existing link is fine if it leads to a directory inside the roots.
                        FileType::Symlink if i == last => return self.existing_link_is_dir(path),
                        FileType::Symlink => {
                            return Err(Error::precondition(format!(
                                "cannot create {path}: {name} appeared as a link while creating it"
                            )))
                        }
                        other => {
                            return Err(Error::exists(format!(
                                "cannot create {path}: {name} exists and is {}",
                                kind(other)
                            )))
                        }
                    }
                }
                Err(e) => return Err(io_err(path, "creating", e)),
            }
            if i < last {
                dir = open_dir(&dir, name).map_err(|e| io_err(path, "opening", e))?;
            }
        }
        Ok(())
    }

    fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        let (dir, name, canonical, walker) = match self.locate_walker(path)? {
            (Located::Missing { .. }, _) if force => return Ok(()),
            (Located::Missing { .. }, _) => return Err(Error::not_found(format!("{path} does not exist"))),
            (Located::Entry { dir, name, canonical }, walker) => (dir, name, canonical, walker),
        };
        if walker.is_root(&canonical) {
            return Err(self.roots.refuse_removal(path));
        }
        let entry = || match lstat(&dir, &name) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) if force => Ok(None),
            Err(Errno::NOENT) => Err(Error::not_found(format!("{path} does not exist"))),
            Err(e) => Err(io_err(path, "checking", e)),
        };
        let Some(mut st) = entry()? else { return Ok(()) };
        // A mount point goes as Windows removes a mounted folder: its filesystem is unmounted
        // (the volume keeps its data) and the folder removed. Its files are never deleted: they
        // are the volume's. lstat of a mount point shows the mounted root, so its own device
        // says nothing; the mount is told against its parent.
        let parent_dev = rustix::fs::fstat(&dir).map_err(|e| io_err(path, "checking", e))?.st_dev;
        let mounted = |st: &rustix::fs::Stat| {
            Ok::<_, Error>(
                FileType::from_raw_mode(st.st_mode) == FileType::Directory
                    && is_mount_root(&dir, &name, parent_dev).map_err(|e| io_err(path, "checking", e))?,
            )
        };
        if mounted(&st)? {
            unmount_at(path, &dir, &name)?;
            st = match entry()? {
                Some(st) if mounted(&st)? => {
                    return Err(Error::precondition(format!(
                        "{path} is still a mount point after one filesystem was unmounted from it (mounts stacked \
                         there); unmount the rest first (nothing was removed)"
                    )))
                }
                Some(st) => st,
                None => return Ok(()),
            };
        }
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            // Files and links go as themselves, like Go's os.Remove; a link's target is untouched.
            return rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::empty()).map_err(|e| match e {
                Errno::ISDIR => changed(path),
                e => io_err(path, "removing", e),
            });
        }
        if force {
            let child = open_dir(&dir, &name).map_err(|e| match e {
                Errno::LOOP | Errno::NOTDIR | Errno::NOENT => changed(path),
                e => io_err(path, "opening", e),
            })?;
            remove_contents(path, child, st.st_dev)?;
        }
        match rustix::fs::unlinkat(&dir, name.as_str(), AtFlags::REMOVEDIR) {
            Ok(()) => Ok(()),
            Err(Errno::NOTEMPTY) => Err(Error::precondition(format!("directory {path} is not empty"))),
            Err(Errno::BUSY) => Err(Error::precondition(format!("{path} is a mount point; unmount it first"))),
            Err(e) => Err(io_err(path, "removing", e)),
        }
    }

    fn rmdir_contents(&self, path: &str) -> Result<()> {
        let target = self.open_existing_dir(path)?;
        if target.walker.is_root(&target.canonical) {
            return Err(self.roots.refuse_removal(path));
        }
        let dir = target.walker.top()?;
        let dev = rustix::fs::fstat(&dir).map_err(|e| io_err(path, "checking", e))?.st_dev;
        if is_mount_root(&dir, "", dev).map_err(|e| io_err(path, "checking", e))? {
            return Err(Error::precondition(format!(
                "{path} is a mount point; its contents are a mounted filesystem's, unmount it first (nothing was \
                 removed)"
            )));
        }
        remove_contents(path, dir, dev)
    }

    fn create_symlink(&self, destination: &str, link: &str) -> Result<()> {
        // The destination is judged by where it leads, since that is what the link will expose.
        self.resolve_target(destination)?;
        let (dir, name) = match self.locate(link)? {
            Located::Missing { .. } => {
                return Err(Error::not_found(format!("cannot create link {link}: its parent directory does not exist")))
            }
            Located::Entry { dir, name, .. } => (dir, name),
        };
        match rustix::fs::symlinkat(destination, &dir, name.as_str()) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => match rustix::fs::readlinkat(&dir, name.as_str(), Vec::new()) {
                Ok(existing) if existing.as_bytes() == destination.as_bytes() => Ok(()),
                // Where the existing link points is not said: it may lead anywhere on the host.
                Ok(_) => {
                    Err(Error::exists(format!("{link} already exists as a link to something else, not {destination}")))
                }
                Err(_) => Err(Error::exists(format!("{link} already exists and is not a link"))),
            },
            Err(e) => Err(io_err(link, "creating link", e)),
        }
    }

    /// True for a link whose target exists (inside the roots), and for a mount point, which is
    /// what a volume mounted at a path is on Linux (upstream: a mounted folder).
    fn is_symlink(&self, path: &str) -> Result<bool> {
        let (dir, name, mut walker) = match self.locate_walker(path)? {
            (Located::Missing { .. }, _) => return Err(Error::not_found(format!("{path} does not exist"))),
            (Located::Entry { dir, name, .. }, w) => (dir, name, w),
        };
        let st = lstat(&dir, &name).map_err(|e| io_err(path, "checking", e))?;
        match FileType::from_raw_mode(st.st_mode) {
            FileType::Symlink => {
                let walked = walker.walk(path, VecDeque::from([(name, false)]))?;
                let (target, exists) = match walked {
                    Walked::Dir => (walker.names(), true),
                    Walked::NonDir { name } => ([walker.names(), vec![name]].concat(), true),
                    Walked::Missing { rest, .. } => {
                        ([walker.names(), rest.into_iter().map(|(n, _)| n).collect()].concat(), false)
                    }
                };
                // Answered only for targets inside a root, dangling or not, so the answer can't
                // tell what exists outside.
                if !walker.inside(&target) {
                    return Err(self.roots.outside(path, Some(&display(&target))));
                }
                Ok(exists)
            }
            FileType::Directory => is_mount_root(&dir, &name, st.st_dev).map_err(|e| io_err(path, "checking", e)),
            _ => Ok(false),
        }
    }
}

impl Filesystem {
    pub fn new(roots: Roots) -> Self {
        Filesystem { roots }
    }

    /// The roots as configured.
    pub(crate) fn roots(&self) -> &Roots {
        &self.roots
    }

    /// Canonical components of every root. A root that does not exist yet keeps its spelling,
    /// so paths below it can still be created.
    pub(crate) fn canonical_roots(&self) -> Vec<Vec<String>> {
        self.roots
            .as_slice()
            .iter()
            .filter_map(|r| {
                let canonical = std::fs::canonicalize(r).ok().and_then(|p| p.to_str().map(str::to_owned));
                let text = canonical.as_deref().unwrap_or(r);
                let names = paths::unix::parse(text).ok()?;
                Some(names.into_iter().map(str::to_owned).collect())
            })
            .collect()
    }

    /// Whether the parsed path is one of the roots as configured (not its canonical form).
    fn spells_a_root(&self, names: &[&str]) -> bool {
        self.roots.as_slice().iter().any(|r| paths::unix::parse(r).is_ok_and(|root| root == names))
    }

    fn locate(&self, path: &str) -> Result<Located> {
        self.locate_walker(path).map(|(l, _)| l)
    }

    /// Resolves everything but the final name of `path` and checks containment; returns the
    /// walker positioned at the parent, to follow the final name where an operation needs to.
    fn locate_walker(&self, path: &str) -> Result<(Located, Walker<'_>)> {
        let names = paths::unix::parse(path)?;
        let Some((last, parents)) = names.split_last() else {
            return Err(Error::invalid("path / has no final component to operate on"));
        };
        let roots = self.canonical_roots();
        let mut walker = Walker::new(&self.roots, roots)?;
        let queue = parents.iter().map(|n| (n.to_string(), false)).collect();
        let located = match walker.walk(path, queue)? {
            Walked::Dir => {
                let mut canonical = walker.names();
                canonical.push(last.to_string());
                Located::Entry { dir: walker.top()?, name: last.to_string(), canonical }
            }
            Walked::NonDir { name } => {
                let at = [walker.names(), vec![name]].concat();
                if !walker.inside(&at) {
                    return Err(self.roots.outside(path, Some(&display(&at))));
                }
                return Err(Error::precondition(format!("path {path}: {} is not a directory", display(&at))));
            }
            Walked::Missing { rest, through_link } => {
                let mut rest: Vec<String> = rest.into_iter().map(|(n, _)| n).collect();
                rest.push(last.to_string());
                let mut canonical = walker.names();
                canonical.extend(rest.iter().cloned());
                Located::Missing { dir: walker.top()?, rest, through_link, canonical }
            }
        };
        if walker.inside(located.canonical()) {
            return Ok((located, walker));
        }
        // A root given on the command line through a link (/var/lib/kubelet -> /data/kubelet),
        // named as given, stands for its target. Any other link outside the roots is outside,
        // even one pointing at a root: answering for it would tell what exists out there.
        if let (Located::Entry { dir, name, .. }, true) = (&located, self.spells_a_root(&names)) {
            if lstat(dir, name).is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink) {
                if let Ok(Target { mut walker, canonical, kind: Kind::Dir }) = self.resolve_target(path) {
                    if walker.stack.len() > 1 {
                        let (_, name) = walker.stack.pop().expect("checked length");
                        return Ok((Located::Entry { dir: walker.top()?, name, canonical }, walker));
                    }
                }
            }
        }
        Err(self.roots.outside(path, Some(&display(located.canonical()))))
    }

    /// Resolves all of `path`, following the final name too; its target must be inside a root.
    fn resolve_target(&self, path: &str) -> Result<Target<'_>> {
        let names = paths::unix::parse(path)?;
        let mut walker = Walker::new(&self.roots, self.canonical_roots())?;
        let walked = walker.walk(path, names.iter().map(|n| (n.to_string(), false)).collect())?;
        let mut canonical = walker.names();
        let kind = match walked {
            Walked::Dir => Kind::Dir,
            Walked::NonDir { name } => {
                canonical.push(name);
                Kind::NonDir
            }
            Walked::Missing { rest, .. } => {
                canonical.extend(rest.into_iter().map(|(n, _)| n));
                Kind::Missing
            }
        };
        if !walker.inside(&canonical) {
            return Err(self.roots.outside(path, Some(&display(&canonical))));
        }
        Ok(Target { walker, canonical, kind })
    }

    /// An existing directory inside the roots (a final link followed if it leads inside), as an
    /// `O_PATH` descriptor and its canonical path: for the volume group's mount targets, which
    /// obey the same containment. Act through the descriptor (e.g. `/proc/self/fd/N`), not the
    /// path, so the directory checked is the one used.
    pub fn contained_dir(&self, path: &str) -> Result<(OwnedFd, String)> {
        let target = self.open_existing_dir(path)?;
        Ok((target.walker.top()?, display(&target.canonical)))
    }

    /// An existing directory at `path`, following a final link if it leads inside the roots.
    fn open_existing_dir(&self, path: &str) -> Result<Target<'_>> {
        let target = self.resolve_target(path)?;
        match target.kind {
            Kind::Dir => Ok(target),
            Kind::NonDir => Err(Error::precondition(format!("{path} is not a directory"))),
            Kind::Missing => Err(Error::not_found(format!("directory {path} does not exist"))),
        }
    }

    fn existing_link_is_dir(&self, path: &str) -> Result<()> {
        match self.resolve_target(path)?.kind {
            Kind::Dir => Ok(()),
            Kind::NonDir => {
                Err(Error::exists(format!("cannot create {path}: it is a link to something not a directory")))
            }
            Kind::Missing => Err(Error::not_found(format!("cannot create {path}: it is a link to a missing path"))),
        }
    }
}

/// Where a path's final entry is, after its parents were resolved and contained.
enum Located {
    /// The parent directory exists; the final entry may or may not.
    Entry { dir: OwnedFd, name: String, canonical: Vec<String> },
    /// Resolution stopped at `dir`: `rest` (ending with the final name) does not exist.
    /// `through_link` names the link whose target is missing, when that is why.
    Missing { dir: OwnedFd, rest: Vec<String>, through_link: Option<String>, canonical: Vec<String> },
}

impl Located {
    fn canonical(&self) -> &[String] {
        match self {
            Located::Entry { canonical, .. } | Located::Missing { canonical, .. } => canonical,
        }
    }
}

/// What a path leads to once every link in it is followed.
struct Target<'r> {
    walker: Walker<'r>,
    canonical: Vec<String>,
    kind: Kind,
}

enum Kind {
    Dir,
    NonDir,
    Missing,
}

enum Walked {
    /// Every name resolved to a directory; the walker stands in the last one.
    Dir,
    /// The last name is not a directory (file, device, ...); the walker stands in its parent.
    NonDir { name: String },
    /// The first name of `rest` does not exist.
    Missing { rest: VecDeque<(String, bool)>, through_link: Option<String> },
}

/// Resolves directory names one at a time, keeping the descriptor of every directory passed.
struct Walker<'r> {
    given: &'r Roots,
    roots: Vec<Vec<String>>,
    /// `/` first, then one open directory per name.
    stack: Vec<(OwnedFd, String)>,
    links: u32,
    /// Set once resolution reaches a root; from then on, leaving every root is refused.
    entered: bool,
}

impl<'r> Walker<'r> {
    fn new(given: &'r Roots, roots: Vec<Vec<String>>) -> Result<Self> {
        let slash = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| io_err("/", "opening", e))?;
        Ok(Walker { given, roots, stack: vec![(slash, String::new())], links: 0, entered: false })
    }

    fn names(&self) -> Vec<String> {
        self.stack[1..].iter().map(|(_, n)| n.clone()).collect()
    }

    fn inside(&self, canonical: &[String]) -> bool {
        self.roots.iter().any(|r| paths::within(canonical, r, false))
    }

    /// Whether `canonical` is a root itself: removing or emptying one is refused.
    fn is_root(&self, canonical: &[String]) -> bool {
        self.roots.iter().any(|r| r.as_slice() == canonical)
    }

    fn top(&self) -> Result<OwnedFd> {
        // Duplicating keeps the walker usable; both descriptors name the same directory.
        let (fd, _) = self.stack.last().expect("stack starts with /");
        fd.try_clone().map_err(|e| Error::io("duplicating a directory descriptor", e))
    }

    /// Records whether the position is inside a root; refuses leaving one once entered.
    fn check_position(&mut self, path: &str) -> Result<()> {
        let names = self.names();
        if self.inside(&names) {
            self.entered = true;
        } else if self.entered {
            return Err(self.given.outside(path, Some(&display(&names))));
        }
        Ok(())
    }

    /// Resolves `queue` (names, each flagged when it came from a link's target) from the
    /// current position.
    fn walk(&mut self, path: &str, mut queue: VecDeque<(String, bool)>) -> Result<Walked> {
        let mut last_link: Option<String> = None;
        while let Some((name, from_link)) = queue.pop_front() {
            match name.as_str() {
                "" | "." => continue,
                ".." => {
                    if self.stack.len() > 1 {
                        self.stack.pop();
                    }
                    self.check_position(path)?;
                    continue;
                }
                _ => {}
            }
            let dir = &self.stack.last().expect("stack starts with /").0;
            let st = match lstat(dir, &name) {
                Ok(st) => st,
                Err(Errno::NOENT) => {
                    // What is missing may later be made a link to anywhere, so a `..` after it
                    // (from a link's target) can't be resolved now, nor compared as text.
                    if queue.iter().any(|(n, _)| n == "..") {
                        if !self.entered {
                            return Err(self.given.outside(path, None));
                        }
                        let at = display(&[self.names(), vec![name.clone()]].concat());
                        return Err(Error::denied(format!(
                            "path {path}: {at} does not exist, and the path goes on with `..` (from the target of \
                             link {}); where that leads can't be known until it exists",
                            last_link.as_deref().unwrap_or("?")
                        )));
                    }
                    let through_link = if from_link { last_link } else { None };
                    queue.push_front((name, from_link));
                    return Ok(Walked::Missing { rest: queue, through_link });
                }
                Err(e) => return Err(self.stopped(path, &name, e)),
            };
            match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    let fd = open_dir(dir, &name).map_err(|e| self.raced(path, &name, e))?;
                    self.stack.push((fd, name));
                    self.check_position(path)?;
                }
                FileType::Symlink => {
                    self.links += 1;
                    // Outside the roots a loop is just "outside": what is out there is not told.
                    if self.links > MAX_LINKS && !self.entered {
                        return Err(self.given.outside(path, None));
                    }
                    if self.links > MAX_LINKS {
                        return Err(Error::precondition(format!(
                            "path {path}: more than {MAX_LINKS} links while resolving it (a link loop?)"
                        )));
                    }
                    let target = rustix::fs::readlinkat(dir, name.as_str(), Vec::new())
                        .map_err(|e| self.raced(path, &name, e))?;
                    let target = target.to_str().map_err(|_| {
                        Error::invalid(format!("path {path}: link {name} has a target that is not UTF-8"))
                    })?;
                    let link_at = display(&[self.names(), vec![name.clone()]].concat());
                    if target.starts_with('/') {
                        if self.entered && target.split('/').any(|n| n == "..") {
                            return Err(Error::denied(format!(
                                "path {path}: link {link_at} points to {target}, an absolute target with `..`"
                            )));
                        }
                        // Resolution starts again at /, and must enter a root again.
                        self.stack.truncate(1);
                        self.entered = false;
                    }
                    for part in target.split('/').rev() {
                        queue.push_front((part.to_string(), true));
                    }
                    last_link = Some(link_at);
                }
                _ if queue.iter().all(|(n, _)| n.is_empty() || n == ".") => return Ok(Walked::NonDir { name }),
                other => {
                    let at = display(&[self.names(), vec![name.clone()]].concat());
                    if !self.entered {
                        return Err(self.given.outside(path, Some(&at)));
                    }
                    return Err(Error::precondition(format!("path {path}: {at} is {}, not a directory", kind(other))));
                }
            }
        }
        Ok(Walked::Dir)
    }

    /// An error while resolving: outside the roots it only says "outside", so a failure there
    /// reveals nothing about what exists.
    /// An error acting on `name` after lstat said what it is: errors that mean it is no longer
    /// that (a directory swapped for a link: ELOOP or ENOTDIR; a link for a directory: EINVAL
    /// from readlink; gone: ENOENT) are a race with another writer, which a retry resolves.
    fn raced(&self, path: &str, name: &str, e: Errno) -> Error {
        if self.entered && matches!(e, Errno::LOOP | Errno::NOTDIR | Errno::INVAL | Errno::NOENT) {
            let at = display(&[self.names(), vec![name.to_string()]].concat());
            return Error::Aborted(format!("path {path}: {at} changed while it was being resolved; retry the call"));
        }
        self.stopped(path, name, e)
    }

    fn stopped(&self, path: &str, name: &str, e: Errno) -> Error {
        let at = display(&[self.names(), vec![name.to_string()]].concat());
        if !self.entered {
            return self.given.outside(path, Some(&at));
        }
        match e {
            Errno::NOTDIR => Error::precondition(format!("path {path}: {at} is not a directory")),
            e => io_err(path, &format!("resolving {at}"), e),
        }
    }
}

fn lstat(dir: impl AsFd, name: &str) -> rustix::io::Result<rustix::fs::Stat> {
    rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
}

/// Opens a directory entry for resolution only; fails on a link, so nothing is followed.
fn open_dir(dir: impl AsFd, name: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(dir, name, OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
}

/// Whether `name` in `dir` (`""`: `dir` itself) is the root of a mount. `dev`: the device of the
/// filesystem it would be on if it were not (the parent's; for `dir` itself, its own).
fn is_mount_root(dir: impl AsFd, name: &str, dev: u64) -> rustix::io::Result<bool> {
    use rustix::fs::{StatxAttributes, StatxFlags};
    let dir = dir.as_fd();
    let flags = if name.is_empty() { AtFlags::EMPTY_PATH } else { AtFlags::SYMLINK_NOFOLLOW };
    match rustix::fs::statx(dir, name, flags, StatxFlags::BASIC_STATS) {
        Ok(stx) if stx.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT) => {
            Ok(stx.stx_attributes.contains(StatxAttributes::MOUNT_ROOT))
        }
        // Kernels before 5.8 lack the attribute; a different device than the parent's is the
        // classic test.
        _ if name.is_empty() => Ok(lstat(dir, "..")?.st_dev != dev),
        _ => Ok(lstat(dir, name)?.st_dev != dev),
    }
}

/// Unmounts the filesystem mounted at `name` in `dir` (Rmdir of a mount point). Refused for a
/// filesystem whose data lives only in the mount (tmpfs, ramfs: the kubelet's secret and
/// emptyDir-in-memory volumes), since there unmounting would be deleting.
fn unmount_at(path: &str, dir: &OwnedFd, name: &str) -> Result<()> {
    const TMPFS_MAGIC: u64 = 0x0102_1994;
    const RAMFS_MAGIC: u64 = 0x8584_58f6;
    let root = open_dir(dir, name).map_err(|e| match e {
        Errno::LOOP | Errno::NOTDIR | Errno::NOENT => changed(path),
        e => io_err(path, "opening", e),
    })?;
    let kind = rustix::fs::fstatfs(&root).map_err(|e| io_err(path, "checking", e))?.f_type as u64;
    drop(root);
    if matches!(kind, TMPFS_MAGIC | RAMFS_MAGIC) {
        return Err(Error::precondition(format!(
            "{path} is a mount point of an in-memory filesystem, whose files would be lost with the mount; \
             unmount it yourself if that is meant (nothing was removed)"
        )));
    }
    // umount(2) takes a path: the checked parent's descriptor and the name, the name not followed.
    let at = format!("/proc/self/fd/{}/{name}", std::os::fd::AsRawFd::as_raw_fd(dir));
    tracing::info!(path = %crate::error::clip(path), "unmounting the filesystem mounted at a folder being removed");
    super::unmount_waiting(std::path::Path::new(&at)).map_err(|e| match e {
        Errno::BUSY => Error::precondition(format!(
            "{path} is a mount point in use (files open in it, or mounts below it); nothing was removed"
        )),
        e => io_err(path, "unmounting", e),
    })
}

/// Empties the directory `top`, never following a link and never descending into another
/// filesystem: a mount point anywhere below, a tree deeper than [`MAX_DEPTH`] or a name that is
/// not UTF-8 refuses the whole call. The tree is checked first and only then removed, so a
/// refusal deletes nothing (a mount made between the two walks still stops the second one).
/// Iterative, so a deep tree can't exhaust the stack.
fn remove_contents(path: &str, top: OwnedFd, dev: u64) -> Result<()> {
    let again = rustix::fs::openat(&top, ".", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| io_err(path, "opening", e))?;
    walk_tree(path, again, dev, false)?;
    walk_tree(path, top, dev, true)
}

/// One walk of [`remove_contents`]: `remove` false only checks.
fn walk_tree(path: &str, top: OwnedFd, dev: u64, remove: bool) -> Result<()> {
    struct Level {
        fd: OwnedFd,
        name: String,
        pending: Vec<String>,
    }
    let open_level = |fd: OwnedFd, name: String| -> Result<Level> {
        let mut pending = Vec::new();
        // Resolution descriptors are O_PATH, which can't be read; reopen this one for listing.
        let readable =
            rustix::fs::openat(&fd, ".", OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())
                .map_err(|e| io_err(path, "listing", e))?;
        let entries = rustix::fs::Dir::new(readable).map_err(|e| io_err(path, "listing", e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io_err(path, "listing", e))?;
            let n = entry.file_name().to_bytes();
            if n != b"." && n != b".." {
                let n = String::from_utf8(n.to_vec()).map_err(|e| {
                    Error::invalid(format!("{path} holds a name that is not UTF-8: {:?}", e.as_bytes()))
                })?;
                pending.push(n);
            }
        }
        Ok(Level { fd, name, pending })
    };
    let mut levels = vec![open_level(top, String::new())?];
    while let Some(level) = levels.last_mut() {
        let Some(name) = level.pending.pop() else {
            let done = levels.pop().expect("non-empty");
            if let (Some(parent), true) = (levels.last(), remove) {
                rustix::fs::unlinkat(&parent.fd, done.name.as_str(), AtFlags::REMOVEDIR)
                    .map_err(|e| io_err(path, &format!("removing {}", done.name), e))?;
            }
            continue;
        };
        let st = match lstat(&level.fd, &name) {
            Ok(st) => st,
            Err(Errno::NOENT) => continue,
            Err(e) => return Err(io_err(path, &format!("checking {name}"), e)),
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            if remove {
                rustix::fs::unlinkat(&level.fd, name.as_str(), AtFlags::empty())
                    .map_err(|e| io_err(path, &format!("removing {name}"), e))?;
            }
            continue;
        }
        let nothing = if remove { "" } else { " (nothing was removed)" };
        if st.st_dev != dev || is_mount_root(&level.fd, &name, dev).unwrap_or(false) {
            let below: Vec<&str> = levels.iter().skip(1).map(|l| l.name.as_str()).chain([name.as_str()]).collect();
            return Err(Error::precondition(format!(
                "{path} contains a mount point at {}; unmount it before removing the tree{nothing}",
                crate::error::clip(&below.join("/"))
            )));
        }
        if levels.len() >= MAX_DEPTH {
            return Err(Error::precondition(format!(
                "{path} is more than {MAX_DEPTH} directories deep; refusing to remove it{nothing}"
            )));
        }
        let child = open_dir(&levels.last().expect("non-empty").fd, &name)
            .map_err(|e| io_err(path, &format!("opening {name}"), e))?;
        levels.push(open_level(child, name)?);
    }
    Ok(())
}

fn display(names: &[String]) -> String {
    format!("/{}", names.join("/"))
}

fn kind(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a link",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of unknown type",
    }
}

/// The entry at `path` is no longer what it was a moment ago (another writer swapped it).
fn changed(path: &str) -> Error {
    Error::Aborted(format!("{path} changed while it was being removed; retry the call"))
}
