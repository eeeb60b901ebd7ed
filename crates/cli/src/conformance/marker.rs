//! What a run is about to make, written down before it makes it, so that a run killed outright
//! (SIGKILL, a power cut of the tool alone) leaves nothing that a later run cannot remove.
//!
//! Each run has a marker file in `<kubelet-path>/.csi-proxyctl-conformance/` (made mode 0700;
//! trusted only while it and the file are the caller's and writable by no one else): a header
//! naming the run and the process (its pid and start time, so a reused pid is not taken for it),
//! then one line per thing the run makes, each written and synced to disk before the thing is
//! made: its two scratch directories and (Linux) each loop device's backing file. A run that ends
//! removes its own marker once it removed everything.
//!
//! [`clean_dead`] (every run, first, and `conformance -cleanup`) removes what the marker of a run
//! that is no longer running names, and nothing else: mounts below those directories (the
//! daemon's, made at the run's paths), the loop devices backed by those files, the directories.
//! A marker of a run still alive is left alone, and so is one that cannot be read or trusted, or
//! that names a directory not called after its run or a file outside its directories.

use anyhow::{Context as _, Result};
use serde_json::{json, Value};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The markers' directory in the kubelet path.
pub const DIR: &str = ".csi-proxyctl-conformance";
const SUFFIX: &str = ".marker";
/// A marker being written: renamed to `<run>.marker` once its header is whole.
const PARTIAL: &str = ".partial";

/// One run's marker, appended to before each thing it makes.
#[derive(Clone)]
pub struct Marker {
    path: PathBuf,
}

impl Marker {
    /// Writes the marker of the run `name` (the name of its scratch directories).
    pub fn create(kubelet_path: &Path, name: &str) -> Result<Marker> {
        let dir = kubelet_path.join(DIR);
        let header = json!({"marker": "csi-proxyctl conformance", "run": name, "pid": std::process::id(),
                            "start": identity(std::process::id())});
        let (partial, path) = (dir.join(format!("{name}{PARTIAL}")), dir.join(format!("{name}{SUFFIX}")));
        // Another run removes the directory when it is empty: made again if it went meanwhile.
        let mut tries = 0;
        loop {
            tries += 1;
            make_dir(&dir)?;
            match write_new(&partial, format!("{header}\n").as_bytes()) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 5 => continue,
                r => r.with_context(|| format!("writing the run's marker {}", partial.display()))?,
            }
            match std::fs::rename(&partial, &path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 5 => continue,
                r => r.with_context(|| format!("writing the run's marker {}", path.display()))?,
            }
            sync_dir(&dir);
            return Ok(Marker { path });
        }
    }

    /// Records a directory the run is about to make.
    pub fn dir(&self, dir: &Path) -> Result<()> {
        self.append("dir", dir)
    }

    /// Records a loop device's backing file the run is about to make (Linux).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub fn loop_file(&self, file: &Path) -> Result<()> {
        self.append("loop", file)
    }

    fn append(&self, kind: &str, path: &Path) -> Result<()> {
        let text = path.to_str().with_context(|| format!("{} is not valid UTF-8", path.display()))?;
        let line = format!("{}\n", json!({ kind: text }));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening the run's marker {}", self.path.display()))?;
        // One write: a kill mid-line leaves a torn last line, and the thing was not made yet.
        f.write_all(line.as_bytes())
            .and_then(|()| f.sync_data())
            .with_context(|| format!("recording {} in {}", path.display(), self.path.display()))
    }

    /// Removes the marker (once everything it names is gone), and its directory if empty.
    pub fn remove(&self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(dir) = self.path.parent() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn make_dir(dir: &Path) -> Result<()> {
    let mut b = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    match b.recursive(false).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            Err(e).with_context(|| format!("making the markers' directory {}", dir.display()))
        }
        _ => Ok(()),
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    let mut f = o.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Makes a new name in `dir` durable (unix; Windows has no handle on a directory for this).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// What a process is beyond its pid, so that a pid reused by another process is not taken for
/// it: on Linux the boot and the start time in clock ticks (`/proc/<pid>/stat`), on Windows
/// the creation time. `None`: no such process (or, elsewhere, no way to tell).
#[cfg(target_os = "linux")]
fn identity(pid: u32) -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: the fields follow the last ')'.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    // Field 22, starttime; the first field after the name is field 3.
    Some(format!("{}:{}", boot.trim(), fields.get(19)?))
}

#[cfg(windows)]
#[allow(unsafe_code)] // three Win32 calls on a handle of its own; each block says why it is sound
fn identity(pid: u32) -> Option<String> {
    use windows_sys::Win32::Foundation::{CloseHandle, FILETIME, STILL_ACTIVE};
    use windows_sys::Win32::System::Threading::{
        GetExitCodeProcess, GetProcessTimes, OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION,
    };
    // SAFETY: OpenProcess takes no pointers; a null handle is checked before any use.
    let handle = unsafe { OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid) };
    if handle.is_null() {
        return None;
    }
    let zero = FILETIME { dwLowDateTime: 0, dwHighDateTime: 0 };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    let mut code = 0u32;
    // SAFETY: `handle` is open with PROCESS_QUERY_LIMITED_INFORMATION, which both calls need;
    // every pointer is to a local that outlives the call.
    let ok = unsafe {
        GetProcessTimes(handle, &mut created, &mut exited, &mut kernel, &mut user) != 0
            && GetExitCodeProcess(handle, &mut code) != 0
    };
    // SAFETY: `handle` came from OpenProcess above and is closed once, here.
    unsafe { CloseHandle(handle) };
    // A process that exited but whose handle someone still holds is not running.
    (ok && code == STILL_ACTIVE as u32)
        .then(|| ((u64::from(created.dwHighDateTime) << 32) | u64::from(created.dwLowDateTime)).to_string())
}

#[cfg(not(any(target_os = "linux", windows)))]
fn identity(_pid: u32) -> Option<String> {
    None
}

/// What became of one marker found.
pub enum Outcome {
    /// Its run is not running: what it named is gone (the paths), and so is the marker.
    Removed(Vec<String>),
    /// Its run is still running (or whether it is cannot be told here): left alone.
    Running(String),
    /// Left in place, with why.
    Failed(String),
}

/// The marker of the run `run` and what became of it.
pub struct Leftover {
    pub run: String,
    pub outcome: Outcome,
}

/// What a marker says.
struct Parsed {
    run: String,
    pid: u32,
    start: Option<String>,
    dirs: Vec<PathBuf>,
    loops: Vec<PathBuf>,
}

fn parse(text: &str, file_run: &str) -> Result<Parsed, String> {
    let mut lines = text.split_inclusive('\n');
    let header: Value = lines
        .next()
        .filter(|l| l.ends_with('\n'))
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or("its header is not whole")?;
    let run = header["run"].as_str().unwrap_or_default().to_owned();
    if header["marker"] != "csi-proxyctl conformance" || run != file_run {
        return Err("it is not a marker of this run".into());
    }
    let pid = header["pid"].as_u64().and_then(|p| u32::try_from(p).ok()).ok_or("it names no pid")?;
    let start = header["start"].as_str().map(str::to_owned);
    let (mut dirs, mut loops) = (Vec::new(), Vec::new());
    for line in lines {
        let Ok(entry) = serde_json::from_str::<Value>(line) else {
            // A torn last line: the kill came while it was written, before the thing was made.
            if !line.ends_with('\n') {
                break;
            }
            return Err(format!("a line of it is not an entry: {}", crate::term::bounded(line.trim(), 80)));
        };
        match (entry["dir"].as_str(), entry["loop"].as_str()) {
            (Some(d), None) => dirs.push(PathBuf::from(d)),
            (None, Some(f)) => loops.push(PathBuf::from(f)),
            _ => return Err(format!("a line of it is not an entry: {}", crate::term::bounded(line.trim(), 80))),
        }
    }
    // Only what this run could have made: directories called after it, files directly in them.
    for d in &dirs {
        if !d.is_absolute() || d.file_name().and_then(|n| n.to_str()) != Some(run.as_str()) {
            return Err(format!("it names {}, which is not a directory of this run", d.display()));
        }
    }
    for f in &loops {
        if !f.is_absolute() || !f.parent().is_some_and(|p| dirs.iter().any(|d| d == p)) {
            return Err(format!("it names {}, which is not in a directory of this run", f.display()));
        }
    }
    Ok(Parsed { run, pid, start, dirs, loops })
}

/// Removes what the markers of runs no longer running name (see the module's doc); what was
/// found, in the markers' order by name.
pub fn clean_dead(kubelet_path: &Path) -> Vec<Leftover> {
    let dir = kubelet_path.join(DIR);
    let failed = |why: String| vec![Leftover { run: dir.display().to_string(), outcome: Outcome::Failed(why) }];
    match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => return failed(format!("reading the markers' directory: {e}")),
        Ok(m) if !m.is_dir() => return failed("the markers' directory is not a directory: left alone".into()),
        Ok(m) => {
            if let Err(why) = trusted(&m) {
                return failed(format!("the markers' directory {why}: left alone"));
            }
        }
    }
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(entries) => entries.flatten().filter_map(|e| e.file_name().into_string().ok()).collect(),
        Err(e) => return failed(format!("reading the markers' directory: {e}")),
    };
    names.sort();
    let mut found = Vec::new();
    for name in names {
        let (run, partial) = match (name.strip_suffix(SUFFIX), name.strip_suffix(PARTIAL)) {
            (Some(run), _) => (run.to_owned(), false),
            (None, Some(run)) => (run.to_owned(), true),
            // Not a marker: not ours to touch.
            (None, None) => continue,
        };
        let path = dir.join(&name);
        if let Some(outcome) = clean_one(&path, &run, partial) {
            found.push(Leftover { run, outcome });
        }
    }
    // Gone once it is empty (another run may have written a marker meanwhile: then it stays).
    let _ = std::fs::remove_dir(&dir);
    found
}

/// What became of the marker `path` of the run `run`; `None` for this run's own marker and
/// for a partial one of a dead run (it names nothing yet: removed without a word).
fn clean_one(path: &Path, run: &str, partial: bool) -> Option<Outcome> {
    let read = std::fs::symlink_metadata(path)
        .map_err(|e| e.to_string())
        .and_then(|m| if m.is_file() { trusted(&m) } else { Err("is not a file".into()) })
        .and_then(|()| std::fs::read_to_string(path).map_err(|e| e.to_string()));
    let text = match read {
        Ok(t) => t,
        Err(why) => return Some(Outcome::Failed(format!("the marker {} {why}: left alone", path.display()))),
    };
    let parsed = match parse(&text, run) {
        Ok(p) => p,
        // A partial marker's header may still be being written: its run's business.
        Err(_) if partial => return None,
        Err(why) => return Some(Outcome::Failed(format!("the marker {}: {why}; left alone", path.display()))),
    };
    let (run, pid) = (&parsed.run, parsed.pid);
    let (Some(start), Some(mine)) = (&parsed.start, identity(std::process::id())) else {
        return Some(Outcome::Running(format!("run {run} (pid {pid}): cannot tell whether it still runs")));
    };
    if pid == std::process::id() && *start == mine {
        return None;
    }
    // The same pid with another start time is another process: the run is gone.
    if identity(pid).as_ref() == Some(start) {
        return Some(Outcome::Running(format!("run {run} (pid {pid}) is still running")));
    }
    if partial {
        let _ = std::fs::remove_file(path);
        return None;
    }
    let problems = remove_named(&parsed);
    if !problems.is_empty() {
        return Some(Outcome::Failed(problems.join("; ")));
    }
    let _ = std::fs::remove_file(path);
    let mut named: Vec<String> = parsed.dirs.iter().map(|d| d.display().to_string()).collect();
    named.dedup();
    Some(Outcome::Removed(named))
}

/// Removes what `m` names: mounts below its directories, its loop devices and their files,
/// then the directories. Returns what could not be removed.
fn remove_named(m: &Parsed) -> Vec<String> {
    let mut problems = Vec::new();
    let mut dirs = Vec::new();
    for d in &m.dirs {
        match std::fs::symlink_metadata(d) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Ok(meta) if meta.is_dir() => dirs.push(d.clone()),
            Ok(_) => problems.push(format!("{} is not a directory: left alone", d.display())),
            Err(e) => problems.push(format!("{}: {e}", d.display())),
        }
    }
    for d in &dirs {
        problems.extend(super::scratch::unmount_below(d));
    }
    for f in &m.loops {
        // Its directory is one of the run's (parse checked): released when that is a directory,
        // or gone (a loop device can outlive its deleted file); not through anything else.
        let parent = f.parent().unwrap_or(f);
        if dirs.iter().any(|d| d == parent) || std::fs::symlink_metadata(parent).is_err() {
            if let Err(e) = super::scratch::detach_backing(f) {
                problems.push(format!("{e:#}"));
            }
        }
    }
    for d in &dirs {
        if !super::scratch::mounts_below(d).is_empty() {
            problems.push(format!("{} still has mounts below it; left in place", d.display()));
            continue;
        }
        match std::fs::remove_dir_all(d) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                problems.push(format!("removing {}: {e}", d.display()))
            }
            _ => {}
        }
    }
    problems
}

/// A marker or its directory is trusted only while it is the caller's and writable by no one
/// else: it directs what is removed. (Elsewhere than Linux no marker is acted on unless its run
/// can be told gone, which only Windows can, and there the kubelet path's ACL decides.)
#[cfg(target_os = "linux")]
fn trusted(m: &std::fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if m.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!("belongs to uid {}, not to this user", m.uid()));
    }
    if m.mode() & 0o022 != 0 {
        return Err(format!("is writable by others (mode {:o})", m.mode() & 0o777));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn trusted(_m: &std::fs::Metadata) -> Result<(), String> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A kubelet path and a scratch base of a test's own, removed on drop.
    struct Bases(PathBuf);

    impl Bases {
        fn new(tag: &str) -> Bases {
            let root = std::env::temp_dir().join(format!("csi-proxyctl-marker-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            std::fs::create_dir_all(root.join("kubelet")).unwrap();
            std::fs::create_dir_all(root.join("scratch")).unwrap();
            Bases(root)
        }
        fn kubelet(&self) -> PathBuf {
            self.0.join("kubelet")
        }
        fn scratch(&self) -> PathBuf {
            self.0.join("scratch")
        }
    }

    impl Drop for Bases {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Writes the marker of a run `name` of process `pid` started at `start`, with `lines`.
    fn marker(kubelet: &Path, name: &str, pid: u32, start: &str, lines: &[Value], tail: &str) -> PathBuf {
        let dir = kubelet.join(DIR);
        make_dir(&dir).unwrap();
        let mut text =
            format!("{}\n", json!({"marker": "csi-proxyctl conformance", "run": name, "pid": pid, "start": start}));
        for l in lines {
            text.push_str(&format!("{l}\n"));
        }
        text.push_str(tail);
        let path = dir.join(format!("{name}{SUFFIX}"));
        std::fs::write(&path, text).unwrap();
        path
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    #[test]
    fn a_made_run_records_its_directories_before_making_them_and_removes_its_marker() {
        let b = Bases::new("made");
        let mut made = super::super::scratch::Made::new(&b.kubelet(), &b.scratch()).unwrap();
        let markers = entries(&b.kubelet().join(DIR));
        assert_eq!(markers.len(), 1, "{markers:?}");
        let text = std::fs::read_to_string(b.kubelet().join(DIR).join(&markers[0])).unwrap();
        let run = markers[0].strip_suffix(SUFFIX).unwrap();
        let parsed = parse(&text, run).unwrap();
        assert_eq!(parsed.pid, std::process::id());
        assert_eq!(parsed.start, identity(std::process::id()));
        assert_eq!(parsed.dirs, [b.kubelet().join(run), b.scratch().join(run)]);
        // Its own marker is left alone by a cleanup (this process is the run).
        assert!(clean_dead(&b.kubelet()).is_empty());
        assert!(b.kubelet().join(run).is_dir());
        assert_eq!(made.clean(), Vec::<String>::new());
        assert_eq!(entries(&b.kubelet()), Vec::<String>::new(), "the marker and its directory are gone");
        assert_eq!(entries(&b.scratch()), Vec::<String>::new());
    }

    /// A run whose process is gone (here: this pid with another start time, as after pid reuse):
    /// what its marker names goes, a torn last line is ignored, and nothing else is touched.
    #[test]
    fn a_dead_runs_directories_go_and_nothing_else() {
        let b = Bases::new("dead");
        let run = "csi-proxy-conformance-1-2";
        let (k, s) = (b.kubelet().join(run), b.scratch().join(run));
        std::fs::create_dir_all(k.join("pods/x/volume")).unwrap();
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join("disk-0.img"), b"").unwrap();
        // Another run's directory, and one called like a run without a marker: not named.
        std::fs::create_dir(b.kubelet().join("csi-proxy-conformance-3-4")).unwrap();
        std::fs::create_dir(b.kubelet().join("pods")).unwrap();
        let lines = [
            json!({"dir": k}),
            json!({"dir": s}),
            json!({"loop": s.join("disk-0.img")}),
            json!({"loop": s.join("disk-1.img")}),
        ];
        marker(&b.kubelet(), run, std::process::id(), "not-this-process", &lines, r#"{"dir": "/torn"#);
        let found = clean_dead(&b.kubelet());
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].run, run);
        assert!(matches!(&found[0].outcome, Outcome::Removed(d) if d.len() == 2), "{:?}", outcome(&found[0]));
        assert_eq!(entries(&b.kubelet()), ["csi-proxy-conformance-3-4", "pods"]);
        assert_eq!(entries(&b.scratch()), Vec::<String>::new());
    }

    fn outcome(l: &Leftover) -> String {
        match &l.outcome {
            Outcome::Removed(d) => format!("removed {d:?}"),
            Outcome::Running(w) => format!("running: {w}"),
            Outcome::Failed(w) => format!("failed: {w}"),
        }
    }

    /// A run still running (a child process standing for it, its start time recorded) keeps
    /// everything; once it is gone, its directories go.
    #[test]
    fn a_running_runs_marker_is_left_alone() {
        let b = Bases::new("alive");
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let run = "csi-proxy-conformance-5-6";
        let dir = b.kubelet().join(run);
        std::fs::create_dir(&dir).unwrap();
        let start = identity(child.id()).unwrap();
        marker(&b.kubelet(), run, child.id(), &start, &[json!({"dir": dir})], "");
        let found = clean_dead(&b.kubelet());
        assert!(
            matches!(&found[0].outcome, Outcome::Running(w) if w.contains("still running")),
            "{}",
            outcome(&found[0])
        );
        assert!(dir.is_dir());
        child.kill().unwrap();
        child.wait().unwrap();
        let found = clean_dead(&b.kubelet());
        assert!(matches!(&found[0].outcome, Outcome::Removed(_)), "{}", outcome(&found[0]));
        assert!(!dir.exists());
        assert_eq!(entries(&b.kubelet()), Vec::<String>::new());
    }

    /// A marker that names what its run could not have made is refused whole: nothing of it is
    /// removed, and it stays.
    #[test]
    fn a_marker_naming_what_is_not_its_runs_is_refused() {
        let b = Bases::new("refused");
        let run = "csi-proxy-conformance-7-8";
        let (own, victim) = (b.kubelet().join(run), b.kubelet().join("plugins"));
        std::fs::create_dir(&own).unwrap();
        std::fs::create_dir(&victim).unwrap();
        std::fs::write(b.scratch().join("precious.img"), b"x").unwrap();
        let cases = [
            vec![json!({"dir": own}), json!({"dir": victim})],
            vec![json!({"dir": own}), json!({"loop": b.scratch().join("precious.img")})],
            vec![json!({"dir": own}), json!({"rm": "/"})],
            vec![json!({"dir": format!("{}/../plugins/{run}", b.kubelet().display())}), json!({"dir": "relative"})],
        ];
        for lines in cases {
            let path = marker(&b.kubelet(), run, std::process::id(), "gone", &lines, "");
            let found = clean_dead(&b.kubelet());
            assert!(
                matches!(&found[0].outcome, Outcome::Failed(w) if w.contains("left alone")),
                "{}",
                outcome(&found[0])
            );
            assert!(own.is_dir() && victim.is_dir() && b.scratch().join("precious.img").exists());
            assert!(path.exists(), "the marker stays");
        }
        // Nor is a marker anyone else may write trusted.
        let path = marker(&b.kubelet(), run, std::process::id(), "gone", &[json!({"dir": own})], "");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
        let found = clean_dead(&b.kubelet());
        assert!(
            matches!(&found[0].outcome, Outcome::Failed(w) if w.contains("writable by others")),
            "{}",
            outcome(&found[0])
        );
        assert!(own.is_dir());
    }
}
