//! The Linux filesystem group on a real filesystem: behaviour, the attack table, and a property
//! test of containment. Each attack asserts the error *and* that nothing outside the roots
//! changed. Cases needing mounts run when the test runs as root (CI does).
#![cfg(target_os = "linux")]

use csi_proxy_host::linux::fs::Filesystem;
use csi_proxy_host::paths::Roots;
use csi_proxy_host::{Error, FilesystemHost};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// A scratch tree: `kubelet` and `work` are the roots; everything else is outside.
struct Fixture {
    base: PathBuf,
    host: Filesystem,
}

impl Fixture {
    fn new(tag: &str) -> Self {
        let base = std::env::temp_dir().join(format!("csi-proxy-fs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        for d in ["kubelet/pods/p1/volumes", "work", "outside/dir", "kubelet-evil"] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        fs::write(base.join("outside/secret"), "s3cret").unwrap();
        fs::write(base.join("outside/dir/file"), "data").unwrap();
        fs::write(base.join("kubelet-evil/file"), "evil").unwrap();
        let roots = Roots::new(vec![s(&base.join("work")), s(&base.join("kubelet"))]);
        Fixture { base, host: Filesystem::new(roots) }
    }

    fn p(&self, rel: &str) -> String {
        format!("{}/{rel}", self.base.display())
    }

    fn link(&self, target: &str, at: &str) {
        symlink(target, self.base.join(at)).unwrap();
    }

    /// Everything outside the roots: names, kinds, file contents and link targets.
    fn outside(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for top in ["outside", "kubelet-evil"] {
            snapshot(&self.base.join(top), &mut out);
        }
        out
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.base);
    }
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn snapshot(dir: &Path, out: &mut BTreeMap<String, String>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        let ft = e.file_type().unwrap();
        let v = if ft.is_symlink() {
            format!("link {}", fs::read_link(&p).unwrap().display())
        } else if ft.is_dir() {
            snapshot(&p, out);
            "dir".to_string()
        } else {
            format!("file {}", fs::read_to_string(&p).unwrap_or_default())
        };
        out.insert(s(&p), v);
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// What an attack is expected to produce.
#[derive(Debug, Clone, Copy)]
enum Want {
    Invalid,
    Denied,
    Precondition,
    Exists,
    NotFound,
    /// The call succeeds, but only ever inside the roots.
    Ok,
}

fn matches(r: &Result<(), Error>, want: Want) -> bool {
    matches!(
        (r, want),
        (Err(Error::InvalidArgument(_)), Want::Invalid)
            | (Err(Error::PermissionDenied(_)), Want::Denied)
            | (Err(Error::FailedPrecondition(_)), Want::Precondition)
            | (Err(Error::AlreadyExists(_)), Want::Exists)
            | (Err(Error::NotFound(_)), Want::NotFound)
            | (Ok(()), Want::Ok)
    )
}

type Attack = (&'static str, &'static str, fn(&Fixture) -> Result<(), Error>, Want);

/// Links the attacks use, all inside the `kubelet` root.
fn plant_links(f: &Fixture) {
    let outside = f.p("outside");
    f.link(&outside, "kubelet/esc-abs");
    f.link("../outside", "kubelet/esc-rel");
    f.link("../../../outside", "kubelet/pods/p1/esc-deep");
    f.link(&f.p("outside/nonexistent"), "kubelet/dangling-out");
    f.link(&f.p("outside/secret"), "kubelet/file-link");
    f.link(&f.p("kubelet/../outside"), "kubelet/abs-dotdot");
    f.link("loop-b", "kubelet/loop-a");
    f.link("loop-a", "kubelet/loop-b");
    f.link(&f.p("work"), "kubelet/to-work");
    f.link("/dev/null", "kubelet/devnull");
    f.link("pods/../../outside", "kubelet/rel-climb");
    f.link(&f.p("kubelet-evil"), "kubelet/to-sibling");
    f.link("esc-abs", "kubelet/chain");
    // Dangling: `missing` does not exist, so the `..` after it can't be resolved yet; once it
    // exists (or is made a link) the target leads wherever it then leads.
    f.link("missing/../../outside/cs", "kubelet/dangling-dotdot");
    fs::create_dir_all(f.base.join("kubelet/pods/p2/keep")).unwrap();
    f.link(&outside, "kubelet/pods/p2/esc");
    f.link(&f.p("outside/secret"), "kubelet/pods/p2/keep/secret-link");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        f.base.join("kubelet/fifo").as_path(),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_bits_truncate(0o600),
        0,
    )
    .unwrap();
}

fn attacks() -> Vec<Attack> {
    vec![
        // --- prefix siblings ---
        ("prefix sibling", "Mkdir kubelet-evil/x", |f| f.host.mkdir(&f.p("kubelet-evil/x")), Want::Denied),
        (
            "prefix sibling",
            "PathExists kubelet-evil/file",
            |f| f.host.path_exists(&f.p("kubelet-evil/file")).map(drop),
            Want::Denied,
        ),
        ("prefix sibling", "Rmdir(force) kubelet-evil", |f| f.host.rmdir(&f.p("kubelet-evil"), true), Want::Denied),
        ("prefix sibling", "RmdirContents kubelet-evil", |f| f.host.rmdir_contents(&f.p("kubelet-evil")), Want::Denied),
        (
            "prefix sibling",
            "CreateSymlink at kubelet-evil/l",
            |f| f.host.create_symlink(&f.p("kubelet/pods"), &f.p("kubelet-evil/l")),
            Want::Denied,
        ),
        (
            "prefix sibling",
            "IsSymlink kubelet-evil/file",
            |f| f.host.is_symlink(&f.p("kubelet-evil/file")).map(drop),
            Want::Denied,
        ),
        ("prefix sibling", "Mkdir kubelet2 (longer name)", |f| f.host.mkdir(&f.p("kubelet2/x")), Want::Denied),
        ("prefix sibling", "Mkdir outside entirely", |f| f.host.mkdir(&f.p("outside/new")), Want::Denied),
        // --- lexical tricks ---
        ("dot-dot", "Mkdir kubelet/../outside/x", |f| f.host.mkdir(&f.p("kubelet/../outside/x")), Want::Invalid),
        (
            "dot-dot",
            "Rmdir(force) kubelet/pods/../../outside",
            |f| f.host.rmdir(&f.p("kubelet/pods/../../outside"), true),
            Want::Invalid,
        ),
        ("dot-dot", "PathExists kubelet/..", |f| f.host.path_exists(&f.p("kubelet/..")).map(drop), Want::Invalid),
        (
            "relative",
            "Mkdir relative path",
            |_| FilesystemHost::mkdir(&Filesystem::new(Default::default()), "kubelet/x"),
            Want::Invalid,
        ),
        ("NUL byte", "Mkdir with NUL", |f| f.host.mkdir(&format!("{}\0/../outside", f.p("kubelet"))), Want::Invalid),
        (
            "long path",
            "Mkdir 5000-byte path",
            |f| f.host.mkdir(&format!("{}/{}", f.p("kubelet"), "d/".repeat(2500))),
            Want::Invalid,
        ),
        (
            "long path",
            "Mkdir 300-byte name",
            |f| f.host.mkdir(&format!("{}/{}", f.p("kubelet"), "n".repeat(300))),
            Want::Invalid,
        ),
        ("root", "Mkdir /", |f| f.host.mkdir("/"), Want::Invalid),
        // --- links: create through them ---
        (
            "link escape: create",
            "Mkdir kubelet/esc-abs/new",
            |f| f.host.mkdir(&f.p("kubelet/esc-abs/new")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "Mkdir kubelet/esc-rel/new",
            |f| f.host.mkdir(&f.p("kubelet/esc-rel/new")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "Mkdir kubelet/pods/p1/esc-deep/new",
            |f| f.host.mkdir(&f.p("kubelet/pods/p1/esc-deep/new")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "Mkdir kubelet/chain/new (link to link)",
            |f| f.host.mkdir(&f.p("kubelet/chain/new")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "Mkdir kubelet/esc-abs (existing link to outside)",
            |f| f.host.mkdir(&f.p("kubelet/esc-abs")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "Mkdir kubelet/dangling-out/x",
            |f| f.host.mkdir(&f.p("kubelet/dangling-out/x")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "CreateSymlink at kubelet/esc-abs/l",
            |f| f.host.create_symlink(&f.p("kubelet/pods"), &f.p("kubelet/esc-abs/l")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "CreateSymlink to outside",
            |f| f.host.create_symlink(&f.p("outside"), &f.p("kubelet/l")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "CreateSymlink to kubelet/esc-abs/dir",
            |f| f.host.create_symlink(&f.p("kubelet/esc-abs/dir"), &f.p("kubelet/l")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "CreateSymlink to /etc",
            |f| f.host.create_symlink("/etc", &f.p("kubelet/l")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "CreateSymlink to a dangling link whose target has `..` after the missing part",
            |f| f.host.create_symlink(&f.p("kubelet/dangling-dotdot"), &f.p("kubelet/l")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "Mkdir kubelet/dangling-dotdot/x",
            |f| f.host.mkdir(&f.p("kubelet/dangling-dotdot/x")),
            Want::Denied,
        ),
        (
            "link escape: create",
            "Mkdir kubelet/to-sibling/x",
            |f| f.host.mkdir(&f.p("kubelet/to-sibling/x")),
            Want::Denied,
        ),
        // --- links: delete through them ---
        (
            "link escape: delete",
            "Rmdir(force) kubelet/esc-abs/dir",
            |f| f.host.rmdir(&f.p("kubelet/esc-abs/dir"), true),
            Want::Denied,
        ),
        (
            "link escape: delete",
            "Rmdir kubelet/esc-rel/secret",
            |f| f.host.rmdir(&f.p("kubelet/esc-rel/secret"), false),
            Want::Denied,
        ),
        (
            "link escape: delete",
            "RmdirContents kubelet/esc-abs",
            |f| f.host.rmdir_contents(&f.p("kubelet/esc-abs")),
            Want::Denied,
        ),
        (
            "link escape: delete",
            "RmdirContents kubelet/rel-climb",
            |f| f.host.rmdir_contents(&f.p("kubelet/rel-climb")),
            Want::Denied,
        ),
        (
            "link escape: delete",
            "Rmdir(force) kubelet/esc-abs removes only the link",
            |f| f.host.rmdir(&f.p("kubelet/esc-abs"), true),
            Want::Ok,
        ),
        (
            "link escape: delete",
            "Rmdir kubelet/file-link removes only the link",
            |f| f.host.rmdir(&f.p("kubelet/file-link"), false),
            Want::Ok,
        ),
        (
            "link escape: delete",
            "Rmdir(force) tree with links out",
            |f| f.host.rmdir(&f.p("kubelet/pods/p2"), true),
            Want::Ok,
        ),
        (
            "link escape: delete",
            "RmdirContents tree with links out",
            |f| f.host.rmdir_contents(&f.p("kubelet/pods/p2")),
            Want::Ok,
        ),
        (
            "link escape: delete",
            "Rmdir kubelet/devnull removes only the link",
            |f| f.host.rmdir(&f.p("kubelet/devnull"), false),
            Want::Ok,
        ),
        // --- links: probe through them ---
        (
            "link escape: probe",
            "PathExists kubelet/esc-abs/secret",
            |f| f.host.path_exists(&f.p("kubelet/esc-abs/secret")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "PathExists kubelet/esc-abs/missing",
            |f| f.host.path_exists(&f.p("kubelet/esc-abs/missing")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "PathExists kubelet/dangling-out/x",
            |f| f.host.path_exists(&f.p("kubelet/dangling-out/x")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "PathExists kubelet/abs-dotdot/secret",
            |f| f.host.path_exists(&f.p("kubelet/abs-dotdot/secret")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "PathExists kubelet/esc-rel/secret",
            |f| f.host.path_exists(&f.p("kubelet/esc-rel/secret")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "IsSymlink kubelet/esc-abs",
            |f| f.host.is_symlink(&f.p("kubelet/esc-abs")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "IsSymlink kubelet/dangling-out",
            |f| f.host.is_symlink(&f.p("kubelet/dangling-out")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "IsSymlink kubelet/file-link",
            |f| f.host.is_symlink(&f.p("kubelet/file-link")).map(drop),
            Want::Denied,
        ),
        (
            "link escape: probe",
            "IsSymlink kubelet/devnull",
            |f| f.host.is_symlink(&f.p("kubelet/devnull")).map(drop),
            Want::Denied,
        ),
        // --- link loops ---
        ("link loop", "Mkdir kubelet/loop-a/x", |f| f.host.mkdir(&f.p("kubelet/loop-a/x")), Want::Precondition),
        (
            "link loop",
            "PathExists kubelet/loop-a/x",
            |f| f.host.path_exists(&f.p("kubelet/loop-a/x")).map(drop),
            Want::Precondition,
        ),
        (
            "link loop",
            "IsSymlink kubelet/loop-a",
            |f| f.host.is_symlink(&f.p("kubelet/loop-a")).map(drop),
            Want::Precondition,
        ),
        // --- look-alikes and case ---
        ("look-alike", "Mkdir kubelet<ZWSP>/x", |f| f.host.mkdir(&f.p("kubelet\u{200b}/x")), Want::Denied),
        ("look-alike", "Mkdir kubeIet/x (capital i)", |f| f.host.mkdir(&f.p("kubeIet/x")), Want::Denied),
        ("look-alike", "Mkdir kubel\u{0435}t/x (Cyrillic e)", |f| f.host.mkdir(&f.p("kubel\u{0435}t/x")), Want::Denied),
        ("case", "Mkdir KUBELET/x (case matters on Linux)", |f| f.host.mkdir(&f.p("KUBELET/x")), Want::Denied),
        (
            "look-alike",
            "Mkdir kubelet/a\u{ff0f}..\u{ff0f}outside stays one name inside",
            |f| f.host.mkdir(&f.p("kubelet/a\u{ff0f}..\u{ff0f}outside")),
            Want::Ok,
        ),
        // --- roots themselves ---
        ("root removal", "Rmdir(force) the kubelet root", |f| f.host.rmdir(&f.p("kubelet"), true), Want::Denied),
        ("root removal", "RmdirContents the work root", |f| f.host.rmdir_contents(&f.p("work")), Want::Denied),
        (
            "root removal",
            "Rmdir(force) a root through a link",
            |f| f.host.rmdir_contents(&f.p("kubelet/to-work")),
            Want::Denied,
        ),
        // --- special files and clashes ---
        ("special file", "Mkdir kubelet/fifo/x", |f| f.host.mkdir(&f.p("kubelet/fifo/x")), Want::Precondition),
        (
            "special file",
            "RmdirContents kubelet/fifo",
            |f| f.host.rmdir_contents(&f.p("kubelet/fifo")),
            Want::Precondition,
        ),
        (
            "missing",
            "CreateSymlink in a missing directory",
            |f| f.host.create_symlink(&f.p("kubelet/pods"), &f.p("kubelet/none/l")),
            Want::NotFound,
        ),
        (
            "missing",
            "Rmdir of a missing path through a link out",
            |f| f.host.rmdir(&f.p("kubelet/esc-abs/missing"), false),
            Want::Denied,
        ),
        (
            "clash",
            "CreateSymlink over a different link",
            |f| f.host.create_symlink(&f.p("kubelet/pods"), &f.p("kubelet/esc-rel")),
            Want::Exists,
        ),
        (
            "clash",
            "CreateSymlink over a directory",
            |f| f.host.create_symlink(&f.p("work"), &f.p("kubelet/pods")),
            Want::Exists,
        ),
        (
            "clash",
            "Mkdir over a file",
            |f| {
                fs::write(f.base.join("kubelet/plain"), "x").unwrap();
                f.host.mkdir(&f.p("kubelet/plain"))
            },
            Want::Exists,
        ),
        // --- races: a directory swapped for a link before the call ---
        (
            "swap",
            "Mkdir below a dir swapped for a link out",
            |f| {
                fs::create_dir(f.base.join("kubelet/swap")).unwrap();
                fs::remove_dir(f.base.join("kubelet/swap")).unwrap();
                f.link(&f.p("outside"), "kubelet/swap");
                f.host.mkdir(&f.p("kubelet/swap/x"))
            },
            Want::Denied,
        ),
        // --- allowed crossings between roots ---
        (
            "cross-root",
            "Mkdir kubelet/to-work/new lands in work",
            |f| f.host.mkdir(&f.p("kubelet/to-work/new")),
            Want::Ok,
        ),
    ]
}

#[test]
fn attack_table() {
    let table = attacks();
    assert!(table.len() >= 40, "only {} cases", table.len());
    let mut failures = Vec::new();
    for (i, (category, name, attack, want)) in table.into_iter().enumerate() {
        // A fresh tree per case, so no case depends on what an earlier one removed.
        let f = Fixture::new(&format!("attack{i}"));
        plant_links(&f);
        let before = f.outside();
        let result = attack(&f);
        let after = f.outside();
        if !matches(&result, want) {
            failures.push(format!("[{category}] {name}: wanted {want:?}, got {result:?}"));
        }
        if before != after {
            failures.push(format!("[{category}] {name}: changed outside the roots: {before:?} -> {after:?}"));
        }
        if let Err(e) = &result {
            // Every refusal names what it refused.
            let msg = e.to_string();
            if !msg.contains('/') && !matches!(want, Want::Invalid) {
                failures.push(format!("[{category}] {name}: error names no path: {msg}"));
            }
        }
        if name.contains("lands in work") {
            assert!(f.base.join("work/new").is_dir(), "the cross-root Mkdir landed in work");
        }
    }
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn denial_names_path_and_roots() {
    let f = Fixture::new("denial");
    plant_links(&f);
    let e = f.host.mkdir(&f.p("kubelet/esc-abs/new")).unwrap_err().to_string();
    assert!(e.contains(&f.p("kubelet/esc-abs/new")), "{e}");
    assert!(e.contains(&f.p("kubelet")) && e.contains(&f.p("work")), "{e}");
}

/// A refusal for a path that leads outside the roots is the same text whatever is out there
/// (a file, a directory, nothing, a link loop, the daemon's own working directory or
/// descriptors), apart from the path as given: nothing about the outside is learnt from it.
/// (Texts used to say where the path resolved to, and told a file from an absent entry.)
#[test]
fn refusals_tell_nothing_about_the_outside() {
    let f = Fixture::new("tell");
    plant_links(&f);
    fs::create_dir_all(f.base.join("outside/dir/sub")).unwrap();
    symlink("loop2", f.base.join("outside/loop1")).unwrap();
    symlink("loop1", f.base.join("outside/loop2")).unwrap();
    f.link("/proc/self/cwd", "kubelet/cwd");
    f.link("/proc/self/fd/0", "kubelet/fd0");
    let outside_targets = [
        "esc-abs/secret",
        "esc-abs/missing",
        "esc-abs/dir",
        "esc-abs/dir/sub",
        "esc-abs/secret/x",
        "esc-abs/missing/x",
        "esc-abs/loop1",
        "esc-abs/loop1/x",
        "cwd",
        "cwd/x",
        "fd0",
        "fd0/x",
    ];
    type Op = fn(&Fixture, &str) -> Result<(), Error>;
    let ops: [(&str, Op); 6] = [
        ("PathExists", |f, p| f.host.path_exists(p).map(drop)),
        ("Mkdir", |f, p| f.host.mkdir(p)),
        ("Rmdir", |f, p| f.host.rmdir(p, false)),
        ("IsSymlink", |f, p| f.host.is_symlink(p).map(drop)),
        ("RmdirContents", |f, p| f.host.rmdir_contents(p)),
        ("CreateSymlink source", |f, p| f.host.create_symlink(p, &f.p("kubelet/new-link"))),
    ];
    let cwd = std::env::current_dir().unwrap();
    for (op, call) in ops {
        let mut texts = BTreeMap::new();
        for rel in outside_targets {
            // PathExists and Rmdir take a final link as itself: only paths below one lead out.
            if matches!(op, "Rmdir" | "PathExists") && !rel.contains('/') {
                continue;
            }
            let path = f.p(&format!("kubelet/{rel}"));
            let e = match call(&f, &path) {
                Err(e @ Error::PermissionDenied(_)) => e.to_string(),
                other => panic!("{op} {rel}: {other:?}"),
            };
            assert!(!e.contains(&f.p("outside")) && !e.contains(&s(&cwd)), "{op} {rel}: {e}");
            texts.entry(e.replace(&path, "<path>")).or_insert_with(Vec::new).push(rel);
        }
        assert_eq!(texts.len(), 1, "{op} answers differently depending on the outside: {texts:#?}");
    }
}

#[test]
fn operations_and_idempotency() {
    let f = Fixture::new("ops");
    let h = &f.host;
    let dir = f.p("kubelet/pods/p1/volumes/a/b/c");
    assert!(!h.path_exists(&dir).unwrap());
    h.mkdir(&dir).unwrap();
    h.mkdir(&dir).unwrap();
    assert!(h.path_exists(&dir).unwrap());
    assert!(!h.is_symlink(&dir).unwrap());

    // Rmdir without force: empty dirs only; missing is an error; with force missing is fine.
    let a = f.p("kubelet/pods/p1/volumes/a");
    assert!(matches!(h.rmdir(&a, false), Err(Error::FailedPrecondition(m)) if m.contains("not empty")));
    h.rmdir(&dir, false).unwrap();
    assert!(matches!(h.rmdir(&dir, false), Err(Error::NotFound(m)) if m.contains(&dir)));
    h.rmdir(&dir, true).unwrap();

    // CreateSymlink: link at target_path pointing to source_path; same link again is fine.
    let global = f.p("kubelet/plugins/globalmount");
    let publish = f.p("kubelet/pods/p1/volumes/mount");
    h.mkdir(&global).unwrap();
    fs::write(f.base.join("kubelet/plugins/globalmount/data"), "d").unwrap();
    h.create_symlink(&global, &publish).unwrap();
    h.create_symlink(&global, &publish).unwrap();
    assert_eq!(fs::read_link(&publish).unwrap(), PathBuf::from(&global));
    assert!(h.is_symlink(&publish).unwrap());
    assert!(h.path_exists(&format!("{publish}/data")).unwrap());
    // Mkdir on a link to a directory inside the roots is "already there".
    h.mkdir(&publish).unwrap();
    // A dangling link exists (PathExists) but is not a usable link (IsSymlink).
    let dangling = f.p("kubelet/pods/p1/volumes/dangling");
    h.create_symlink(&f.p("kubelet/plugins/gone"), &dangling).unwrap();
    assert!(h.path_exists(&dangling).unwrap());
    assert!(!h.is_symlink(&dangling).unwrap());
    // Rmdir removes the link, never the target.
    h.rmdir(&publish, false).unwrap();
    assert!(f.base.join("kubelet/plugins/globalmount/data").is_file());

    // RmdirContents keeps the directory.
    h.mkdir(&f.p("kubelet/pods/p1/volumes/x/y")).unwrap();
    h.rmdir_contents(&f.p("kubelet/pods/p1/volumes")).unwrap();
    assert!(f.base.join("kubelet/pods/p1/volumes").is_dir());
    assert_eq!(fs::read_dir(f.base.join("kubelet/pods/p1/volumes")).unwrap().count(), 0);
    assert!(matches!(h.rmdir_contents(&f.p("kubelet/none")), Err(Error::NotFound(_))));
    assert!(matches!(h.is_symlink(&f.p("kubelet/none")), Err(Error::NotFound(_))));

    // Mkdir creates the root's missing children, and the roots themselves are usable paths.
    assert!(h.path_exists(&f.p("kubelet")).unwrap());
    assert!(h.path_exists(&f.p("work")).unwrap());
}

#[test]
fn deep_trees_are_removed_without_recursion_limits_hurting() {
    let f = Fixture::new("deep");
    let mut p = f.base.join("kubelet/deep");
    for _ in 0..100 {
        p = p.join("d");
    }
    fs::create_dir_all(&p).unwrap();
    f.host.rmdir(&f.p("kubelet/deep"), true).unwrap();
    assert!(!f.base.join("kubelet/deep").exists());

    // Deeper than the bound: refused with a clear error, the daemon stays up.
    let mut p = f.base.join("kubelet/deeper");
    for _ in 0..300 {
        p = p.join("d");
    }
    fs::create_dir_all(&p).unwrap();
    let e = f.host.rmdir(&f.p("kubelet/deeper"), true).unwrap_err();
    assert!(matches!(&e, Error::FailedPrecondition(m) if m.contains("deep")), "{e:?}");
}

#[test]
fn root_given_through_a_link() {
    let f = Fixture::new("rootlink");
    fs::create_dir(f.base.join("data")).unwrap();
    f.link(&f.p("data"), "linked-root");
    let host = Filesystem::new(Roots::new(vec![f.p("linked-root")]));
    host.mkdir(&f.p("linked-root/pods/x")).unwrap();
    assert!(f.base.join("data/pods/x").is_dir());
    assert!(host.path_exists(&f.p("data/pods/x")).unwrap(), "the canonical spelling is inside too");
    assert!(host.path_exists(&f.p("linked-root")).unwrap());
    assert!(matches!(host.mkdir(&f.p("outside/x")), Err(Error::PermissionDenied(_))));
}

/// A link outside the roots that points at a root is still outside: only a root's own spelling
/// stands for its target. (Found by the property test below: PathExists answered `true` for it.)
#[test]
fn a_link_outside_pointing_at_a_root_is_outside() {
    let f = Fixture::new("outlink");
    f.link(&f.p("kubelet"), "outside/to-root");
    let before = f.outside();
    for (op, r) in [
        ("PathExists", f.host.path_exists(&f.p("outside/to-root")).map(drop)),
        ("IsSymlink", f.host.is_symlink(&f.p("outside/to-root")).map(drop)),
        ("Rmdir", f.host.rmdir(&f.p("outside/to-root"), true)),
        ("Mkdir", f.host.mkdir(&f.p("outside/to-root"))),
    ] {
        assert!(matches!(r, Err(Error::PermissionDenied(_))), "{op}: {r:?}");
    }
    assert_eq!(before, f.outside());
    // Through it, the path is below a root and so inside, as any link leading into one.
    assert!(f.host.path_exists(&f.p("outside/to-root/pods")).unwrap());
}

/// Mount points: never descended into by Rmdir(force), an in-memory one (tmpfs) never unmounted
/// by Rmdir, and reported by IsSymlink (a volume mounted at a path, as upstream's mounted
/// folders). Needs root for mount(2).
#[test]
fn mount_points() {
    if !is_root() {
        eprintln!("skipped: needs root for mount(2) (CI runs as root)");
        return;
    }
    use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
    let f = Fixture::new("mounts");
    let m = f.base.join("kubelet/pods/p1/volumes/vol");
    fs::create_dir_all(&m).unwrap();
    mount("tmpfs", &m, "tmpfs", MountFlags::empty(), None).unwrap();
    fs::write(m.join("precious"), "keep").unwrap();
    let checks = || {
        assert!(f.host.is_symlink(&s(&m)).unwrap(), "a mount point counts as a link");
        let e = f.host.rmdir(&f.p("kubelet/pods"), true).unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(msg) if msg.contains("mount point")), "{e:?}");
        assert_eq!(fs::read_to_string(m.join("precious")).unwrap(), "keep");
        let e = f.host.rmdir(&s(&m), false).unwrap_err();
        assert!(matches!(&e, Error::FailedPrecondition(_)), "{e:?}");
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(checks));
    unmount(&m, UnmountFlags::DETACH).unwrap();
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
}

/// Rmdir of a mounted folder, with or without force, does what Windows does for one (azuredisk's
/// NodeUnstageVolume relies on it): the mount goes, the folder goes, the volume's files stay.
/// The "volume" here is a bind mount of a folder outside the roots. Needs root for mount(2).
#[test]
fn rmdir_of_a_mount_point_unmounts_it_and_keeps_the_data() {
    if !is_root() {
        eprintln!("skipped: needs root for mount(2) (CI runs as root)");
        return;
    }
    use rustix::mount::{mount_bind, unmount, UnmountFlags};
    let f = Fixture::new("rmdir-mounted");
    if rustix::fs::statfs(&f.base).unwrap().f_type as u64 == 0x0102_1994 {
        eprintln!("skipped: the temporary directory is on tmpfs, which Rmdir rightly refuses to unmount");
        return;
    }
    let volume = f.base.join("outside/volume");
    fs::create_dir_all(&volume).unwrap();
    fs::write(volume.join("data"), "keep").unwrap();
    for (force, name) in [(false, "plain"), (true, "forced")] {
        let m = f.base.join("kubelet/pods/p1/volumes").join(name);
        fs::create_dir_all(&m).unwrap();
        mount_bind(&volume, &m).unwrap();
        let outcome = f.host.rmdir(&s(&m), force);
        if m.exists() {
            let _ = unmount(&m, UnmountFlags::DETACH);
        }
        outcome.unwrap_or_else(|e| panic!("Rmdir(force={force}) of a mounted folder: {e:?}"));
        assert!(!m.exists(), "the folder is gone");
        assert_eq!(fs::read_to_string(volume.join("data")).unwrap(), "keep", "the volume's files stay");
    }
}

/// Rmdir(force) and RmdirContents never delete a mounted filesystem's files, at the top of the
/// tree or anywhere below, and a refusal deletes nothing at all: the tree is checked before
/// anything is removed. (Rmdir(force) of a mount point used to empty the mounted volume, then
/// answer "is a mount point"; a mount deep in a tree stopped the removal only after the entries
/// walked before it were gone.) Needs root for mount(2).
#[test]
fn refusals_for_mount_points_remove_nothing() {
    if !is_root() {
        eprintln!("skipped: needs root for mount(2) (CI runs as root)");
        return;
    }
    use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
    let f = Fixture::new("mounts-keep");
    let pods = f.base.join("kubelet/pods");
    let m = pods.join("p1/volumes/vol");
    fs::create_dir_all(&m).unwrap();
    for sibling in ["a", "p0", "p1/x", "zz"] {
        fs::create_dir_all(pods.join(sibling)).unwrap();
        fs::write(pods.join(sibling).join("file"), "sibling").unwrap();
    }
    mount("tmpfs", &m, "tmpfs", MountFlags::empty(), None).unwrap();
    fs::create_dir_all(m.join("sub/deeper")).unwrap();
    fs::write(m.join("precious"), "keep").unwrap();
    fs::write(m.join("sub/deeper/data"), "keep").unwrap();
    let checks = || {
        let intact = || {
            assert_eq!(fs::read_to_string(m.join("precious")).unwrap(), "keep");
            assert_eq!(fs::read_to_string(m.join("sub/deeper/data")).unwrap(), "keep");
            for sibling in ["a", "p0", "p1/x", "zz"] {
                assert_eq!(fs::read_to_string(pods.join(sibling).join("file")).unwrap(), "sibling", "{sibling}");
            }
        };
        let refused = |e: Error, needle: &str| {
            intact();
            assert!(
                matches!(&e, Error::FailedPrecondition(msg) if msg.contains(needle) && msg.contains("nothing was removed")),
                "{e:?}"
            );
        };
        refused(f.host.rmdir(&s(&m), true).unwrap_err(), "is a mount point");
        refused(f.host.rmdir_contents(&s(&m)).unwrap_err(), "is a mount point");
        refused(f.host.rmdir(&s(&pods), true).unwrap_err(), "mount point at p1/volumes/vol");
        refused(f.host.rmdir_contents(&s(&pods)).unwrap_err(), "mount point at p1/volumes/vol");
        refused(f.host.rmdir(&s(&pods.join("p1")), true).unwrap_err(), "mount point at volumes/vol");
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(checks));
    unmount(&m, UnmountFlags::DETACH).unwrap();
    if let Err(p) = outcome {
        std::panic::resume_unwind(p);
    }
    // Unmounted: the same tree goes.
    f.host.rmdir(&s(&pods), true).unwrap();
    assert!(!pods.exists());
}

/// A path component that another writer keeps swapping between a directory and a link (an
/// atomic exchange, as fast as it can) while calls walk through it: a call either succeeds or
/// answers a code that says what happened — Aborted ("changed, retry") for the race itself —
/// never InvalidArgument (it used to be "Invalid argument (os error 22)": readlink of what had
/// just become a directory) nor Internal.
#[test]
fn a_component_changing_type_mid_call_is_a_retryable_error() {
    let f = Fixture::new("swap-race");
    let k = f.base.join("kubelet");
    fs::create_dir_all(k.join("pods/a/b")).unwrap();
    fs::create_dir_all(k.join("swap/a/b")).unwrap();
    symlink("pods", k.join("other")).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, k) = (stop.clone(), k.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    k.join("swap").as_path(),
                    rustix::fs::CWD,
                    k.join("other").as_path(),
                    rustix::fs::RenameFlags::EXCHANGE,
                )
                .unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut calls = 0u32;
    while std::time::Instant::now() < deadline && calls < 200_000 {
        let path = f.p("kubelet/swap/a/b");
        let outcome = match calls % 3 {
            0 => f.host.path_exists(&path).map(drop),
            1 => f.host.is_symlink(&f.p("kubelet/swap/a")).map(drop),
            _ => f.host.mkdir(&path),
        };
        let key = match outcome {
            Ok(()) => "ok".to_string(),
            Err(Error::Aborted(_)) => "aborted".to_string(),
            Err(Error::NotFound(_)) => "not found".to_string(),
            Err(e) => format!("{e:?}"),
        };
        *seen.entry(key).or_default() += 1;
        calls += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("{calls} calls during {swaps} swaps: {seen:?}");
    let unexpected: Vec<_> = seen.keys().filter(|k| !["ok", "aborted", "not found"].contains(&k.as_str())).collect();
    assert!(unexpected.is_empty(), "{unexpected:#?}");
    assert!(seen.get("ok").copied().unwrap_or(0) > 0, "{seen:?}");
}

mod property {
    //! Random trees of directories and links, random paths through them: whatever the
    //! operations answer, nothing outside the roots ever changes, and whatever Mkdir or
    //! CreateSymlink made really is inside a root.
    use super::*;
    use proptest::prelude::*;

    const NAMES: &[&str] = &["a", "b", "r0", "r1", "o", "..", ".", "l0", "l1", "l2", "x"];

    fn target() -> impl Strategy<Value = String> {
        prop_oneof![
            // relative, possibly climbing
            proptest::collection::vec(proptest::sample::select(NAMES), 1..5).prop_map(|v| v.join("/")),
            // absolute, into or out of the base
            proptest::collection::vec(proptest::sample::select(NAMES), 0..4)
                .prop_map(|v| format!("@BASE@/{}", v.join("/"))),
            // a second outside tree, reached only by absolute links (stands in for `/`: a bug
            // here must not be able to damage the machine running the test)
            Just("@OUT@".to_string()),
            Just("@OUT@/d".to_string()),
        ]
    }

    fn rel_path() -> impl Strategy<Value = String> {
        proptest::collection::vec(proptest::sample::select(NAMES), 1..6).prop_map(|v| v.join("/"))
    }

    #[derive(Debug, Clone)]
    enum Op {
        Exists(String),
        Mkdir(String),
        Rmdir(String, bool),
        RmdirContents(String),
        Symlink(String, String),
        IsSymlink(String),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            rel_path().prop_map(Op::Exists),
            rel_path().prop_map(Op::Mkdir),
            (rel_path(), any::<bool>()).prop_map(|(p, f)| Op::Rmdir(p, f)),
            rel_path().prop_map(Op::RmdirContents),
            (rel_path(), rel_path()).prop_map(|(a, b)| Op::Symlink(a, b)),
            rel_path().prop_map(Op::IsSymlink),
        ]
    }

    /// Where the entry `p` itself is (its final name not followed) lies inside a root.
    fn entry_inside(base: &Path, p: &Path) -> bool {
        let Ok(parent) = fs::canonicalize(p.parent().unwrap()) else { return false };
        let c = parent.join(p.file_name().unwrap());
        let roots = [base.join("r0"), base.join("r1")].map(|r| fs::canonicalize(r).unwrap());
        roots.iter().any(|r| c.starts_with(r))
    }

    fn inside(base: &Path, p: &Path) -> bool {
        let Ok(c) = fs::canonicalize(p) else { return false };
        let roots = [base.join("r0"), base.join("r1")].map(|r| fs::canonicalize(r).unwrap());
        roots.iter().any(|r| c.starts_with(r))
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]
        #[test]
        fn nothing_outside_the_roots_changes(
            links in proptest::collection::vec((proptest::sample::select(&["r0", "r1", "r0/a", "r1/b", "o"][..]),
                                                 proptest::sample::select(&["l0", "l1", "l2"][..]), target()), 0..8),
            ops in proptest::collection::vec(op(), 1..12),
        ) {
            let base = std::env::temp_dir().join(format!("csi-proxy-prop-{}", std::process::id()));
            let out = std::env::temp_dir().join(format!("csi-proxy-prop-out-{}", std::process::id()));
            let _ = fs::remove_dir_all(&base);
            let _ = fs::remove_dir_all(&out);
            fs::create_dir_all(out.join("d/e")).unwrap();
            fs::write(out.join("d/f"), "f").unwrap();
            for d in ["r0/a", "r1/b", "o/a", "o/r0"] {
                fs::create_dir_all(base.join(d)).unwrap();
            }
            fs::write(base.join("o/secret"), "s").unwrap();
            let b = s(&base);
            for (dir, name, t) in &links {
                let _ = symlink(t.replace("@BASE@", &b).replace("@OUT@", &s(&out)), base.join(dir).join(name));
            }
            let host = Filesystem::new(Roots::new(vec![format!("{b}/r0"), format!("{b}/r1")]));
            let mut outside_before = BTreeMap::new();
            snapshot(&base.join("o"), &mut outside_before);
            snapshot(&out, &mut outside_before);
            for op in &ops {
                let abs = |p: &str| format!("{b}/{p}");
                match op {
                    Op::Exists(p) => {
                        if matches!(host.path_exists(&abs(p)), Ok(true)) {
                            prop_assert!(entry_inside(&base, Path::new(&abs(p))), "PathExists {p} answered outside the roots");
                        }
                    }
                    Op::Mkdir(p) => {
                        if host.mkdir(&abs(p)).is_ok() {
                            prop_assert!(inside(&base, Path::new(&abs(p))), "Mkdir {p} succeeded outside the roots");
                        }
                    }
                    Op::Rmdir(p, force) => { let _ = host.rmdir(&abs(p), *force); }
                    Op::RmdirContents(p) => { let _ = host.rmdir_contents(&abs(p)); }
                    Op::Symlink(src, link) => {
                        if host.create_symlink(&abs(src), &abs(link)).is_ok() {
                            let parent = Path::new(&abs(link)).parent().unwrap().to_path_buf();
                            prop_assert!(inside(&base, &parent), "link {link} made outside the roots");
                        }
                    }
                    Op::IsSymlink(p) => {
                        if matches!(host.is_symlink(&abs(p)), Ok(true)) {
                            prop_assert!(inside(&base, Path::new(&abs(p))), "IsSymlink {p} probed outside the roots");
                        }
                    }
                }
                let mut now = BTreeMap::new();
                snapshot(&base.join("o"), &mut now);
                snapshot(&out, &mut now);
                prop_assert_eq!(&outside_before, &now, "after {:?}", op);
                prop_assert!(base.join("r0").is_dir() && base.join("r1").is_dir(), "a root was removed by {:?}", op);
            }
            fs::remove_dir_all(&base).unwrap();
            fs::remove_dir_all(&out).unwrap();
        }
    }
}
