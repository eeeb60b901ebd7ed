//! A scripted [`Win32`], [`Wmi`] and [`Nt`] for the backend's tests: answers are registered per call
//! (one after another for a call made repeatedly; the last one sticks), and every call made is
//! logged, so a test checks both what the backend answered and what it did, in order.
//!
//! Log lines, one per call:
//! - `volumes`, `disk_interfaces`
//! - `ioctl <path> <code as 0x…> [r|w]` (`r` opened for reading, `w` for reading and writing;
//!   the input buffers are kept apart, [`Script::ioctl_inputs`])
//! - `filesystem_name <root>`, `free_space <root>`, `flush <device>`
//! - `set_mount_point <dir> <volume>`, `delete_mount_point <dir>`
//! - `volume_path_name <path>`, `volume_name_for_mount_point <mp>`, `mount_points_of <volume>`
//! - `attributes <path>`, `connect_as <remote> <username>` (answered by `connect_as <remote>`:
//!   [`Answer::Done`], [`Answer::Win32Error`] or [`Answer::Provider`])
//! - [`Nt`]: `open <path> <how>`, `open_at <dir> <name> <how>` (`how`: [`Open::name`]),
//!   `final_path <handle>`, `attributes_of <handle>`, `system_drive`, `list <handle>`,
//!   `delete <handle>`, `mount_point_target <handle>`, `file_id <handle>`, `volume_path <handle>`,
//!   `volume_mount_points <volume>`, and `close <handle>` when a handle is
//!   dropped. A handle is named by what opened it: the path, or `<dir>\<name>`; an open
//!   answered [`Answer::Str`] names it that instead (a link followed somewhere else).
//! - `query <WQL>` (namespace omitted: the class names it)
//! - `call <target> <method> <args as Debug>` (secrets show as `<redacted>`)
//! - `associators <path> <assoc class> <result class>`
//!
//! A call nobody scripted fails (Win32: ERROR_INVALID_FUNCTION, WMI: Internal) and is logged
//! with `UNSCRIPTED ` in front; [`Script::assert_all_scripted`] catches those.

use super::contain::{Nt, Open};
use super::wmi::{Namespace, Query, Row, Value, Wmi};
use super::{os_error, Access, Win32};
use crate::{Error, Result};
use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Condvar, Mutex};

/// One scripted answer.
#[derive(Clone, Debug)]
pub enum Answer {
    /// Unit success (flush, mount point changes).
    Done,
    Strings(Vec<String>),
    Str(String),
    Bytes(Vec<u8>),
    Space(u64, u64),
    Attributes(Option<u32>),
    Rows(Vec<Row>),
    Out(Row),
    /// A Win32 failure with this error code.
    Win32Error(i32),
    /// `connect_as`'s ERROR_EXTENDED_ERROR with what WNetGetLastErrorW reported.
    Provider(super::ProviderError),
    /// A WMI failure: the error's constructor and message.
    WmiError(fn(String) -> Error, String),
    /// What [`Nt::mount_point_target`] answers: a mount point's substitute name, or `None`.
    Target(Option<String>),
    /// What [`Nt::file_id`] answers.
    Id(u64),
    /// The call waits at `Gate` until the test opens it, then answers the inner answer: a call
    /// that hangs (an unreachable server), for tests with real threads.
    Held(Gate, Box<Answer>),
}

/// Where [`Answer::Held`] calls wait. Tests follow progress through it (how many calls have
/// arrived) rather than through timings.
#[derive(Clone, Default)]
pub struct Gate(Arc<(Mutex<(usize, bool)>, Condvar)>);

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (arrived, open) = *self.0 .0.lock().unwrap();
        write!(f, "Gate(arrived {arrived}, open {open})")
    }
}

impl Gate {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lets every call waiting here, and every later one, through.
    pub fn open(&self) {
        self.0 .0.lock().unwrap().1 = true;
        self.0 .1.notify_all();
    }

    /// Blocks until `n` calls have arrived here (waiting or let through).
    pub fn wait_for(&self, n: usize) {
        let mut state = self.0 .0.lock().unwrap();
        while state.0 < n {
            state = self.0 .1.wait(state).unwrap();
        }
    }

    /// How many calls have arrived.
    pub fn arrived(&self) -> usize {
        self.0 .0.lock().unwrap().0
    }

    fn pass(&self) {
        let mut state = self.0 .0.lock().unwrap();
        state.0 += 1;
        self.0 .1.notify_all();
        while !state.1 {
            state = self.0 .1.wait(state).unwrap();
        }
    }
}

#[derive(Default)]
pub struct Script {
    answers: Mutex<HashMap<String, VecDeque<Answer>>>,
    log: Arc<Mutex<Vec<String>>>,
    /// Every I/O control's log line with the input buffer it was sent.
    ioctl_inputs: Mutex<Vec<(String, Vec<u8>)>>,
}

impl Script {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `answer` to the answers for calls whose log line, without the arguments of a WMI
    /// call, is `key` (e.g. `ioctl \\.\PhysicalDrive2 0x70140`, `call <path> Format`).
    pub fn on(&self, key: impl Into<String>, answer: Answer) -> &Self {
        self.answers.lock().unwrap().entry(key.into()).or_default().push_back(answer);
        self
    }

    /// Answers `query` (rendered to WQL) with `rows`.
    pub fn on_query(&self, query: &Query, rows: Vec<Row>) -> &Self {
        self.on(format!("query {}", query.wql().unwrap()), Answer::Rows(rows))
    }

    /// Answers `method` on `target` with out-parameters `out`.
    pub fn on_call(&self, target: &str, method: &str, out: Row) -> &Self {
        self.on(format!("call {target} {method}"), Answer::Out(out))
    }

    /// Answers the associators of `path` with `rows`.
    pub fn on_associators(&self, path: &str, assoc_class: &str, result_class: &str, rows: Vec<Row>) -> &Self {
        self.on(format!("associators {path} {assoc_class} {result_class}"), Answer::Rows(rows))
    }

    /// Drops the first answer scripted for `key` (a fixture's default that a test replaces).
    pub fn take_first(&self, key: &str) {
        if let Some(q) = self.answers.lock().unwrap().get_mut(key) {
            q.pop_front();
        }
    }

    /// Every call so far, in order.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// Calls whose line starts with `prefix`.
    pub fn calls(&self, prefix: &str) -> Vec<String> {
        self.log().into_iter().filter(|l| l.starts_with(prefix)).collect()
    }

    /// The input buffers of the I/O controls whose log line starts with `prefix`, in order.
    pub fn ioctl_inputs(&self, prefix: &str) -> Vec<Vec<u8>> {
        let all = self.ioctl_inputs.lock().unwrap();
        all.iter().filter(|(line, _)| line.starts_with(prefix)).map(|(_, input)| input.clone()).collect()
    }

    pub fn assert_all_scripted(&self) {
        let missing = self.calls("UNSCRIPTED ");
        assert!(missing.is_empty(), "calls nobody scripted: {missing:#?}");
    }

    fn answer(&self, key: String, line: String) -> Option<Answer> {
        let found = {
            let mut answers = self.answers.lock().unwrap();
            let found =
                answers.get_mut(&key).and_then(|q| if q.len() > 1 { q.pop_front() } else { q.front().cloned() });
            self.log.lock().unwrap().push(if found.is_some() { line } else { format!("UNSCRIPTED {line}") });
            found
        };
        // Logged on arrival; no lock is held while the call waits.
        match found {
            Some(Answer::Held(gate, answer)) => {
                gate.pass();
                Some(*answer)
            }
            other => other,
        }
    }

    fn win32(&self, line: String) -> io::Result<Answer> {
        match self.answer(line.clone(), line) {
            Some(Answer::Win32Error(code)) => Err(os_error(code)),
            Some(a) => Ok(a),
            None => Err(os_error(super::code::ERROR_INVALID_FUNCTION)),
        }
    }
}

fn wrong(line: &str, a: Answer) -> io::Error {
    io::Error::other(format!("script answered {line} with {a:?}"))
}

macro_rules! expect {
    ($self:ident, $line:expr, $pat:pat => $out:expr) => {{
        let line: String = $line;
        match $self.win32(line.clone())? {
            $pat => Ok($out),
            other => Err(wrong(&line, other)),
        }
    }};
}

impl Win32 for Script {
    fn volumes(&self) -> io::Result<Vec<String>> {
        expect!(self, "volumes".into(), Answer::Strings(v) => v)
    }
    fn disk_interfaces(&self) -> io::Result<Vec<String>> {
        expect!(self, "disk_interfaces".into(), Answer::Strings(v) => v)
    }
    fn ioctl(&self, path: &str, code: u32, input: &[u8], access: Access) -> io::Result<Vec<u8>> {
        let mode = match access {
            Access::Query => "",
            Access::Read => " r",
            Access::ReadWrite => " w",
        };
        let line = format!("ioctl {path} {code:#x}{mode}");
        self.ioctl_inputs.lock().unwrap().push((line.clone(), input.to_vec()));
        expect!(self, line, Answer::Bytes(b) => b)
    }
    fn filesystem_name(&self, root: &str) -> io::Result<String> {
        expect!(self, format!("filesystem_name {root}"), Answer::Str(s) => s)
    }
    fn free_space(&self, root: &str) -> io::Result<(u64, u64)> {
        expect!(self, format!("free_space {root}"), Answer::Space(t, f) => (t, f))
    }
    fn flush(&self, device: &str) -> io::Result<()> {
        expect!(self, format!("flush {device}"), Answer::Done => ())
    }
    fn set_mount_point(&self, dir: &str, volume: &str) -> io::Result<()> {
        expect!(self, format!("set_mount_point {dir} {volume}"), Answer::Done => ())
    }
    fn delete_mount_point(&self, dir: &str) -> io::Result<()> {
        expect!(self, format!("delete_mount_point {dir}"), Answer::Done => ())
    }
    fn volume_path_name(&self, path: &str) -> io::Result<String> {
        expect!(self, format!("volume_path_name {path}"), Answer::Str(s) => s)
    }
    fn volume_name_for_mount_point(&self, mount_point: &str) -> io::Result<String> {
        expect!(self, format!("volume_name_for_mount_point {mount_point}"), Answer::Str(s) => s)
    }
    fn mount_points_of(&self, volume: &str) -> io::Result<Vec<String>> {
        expect!(self, format!("mount_points_of {volume}"), Answer::Strings(v) => v)
    }
    fn attributes(&self, path: &str) -> io::Result<Option<u32>> {
        expect!(self, format!("attributes {path}"), Answer::Attributes(a) => a)
    }
    fn connect_as(&self, remote: &str, username: &str, _password: &crate::types::Secret) -> io::Result<()> {
        // Answered per share, whoever asks; the line names the user, never the password.
        let (key, line) = (format!("connect_as {remote}"), format!("connect_as {remote} {username}"));
        match self.answer(key, line.clone()) {
            Some(Answer::Done) => Ok(()),
            Some(Answer::Win32Error(code)) => Err(os_error(code)),
            Some(Answer::Provider(p)) => Err(p.into_io()),
            Some(other) => Err(wrong(&line, other)),
            None => Err(os_error(super::code::ERROR_INVALID_FUNCTION)),
        }
    }
}

/// A handle of the scripted [`Nt`]: its name, and the log its closing goes to.
#[derive(Debug)]
pub struct Handle {
    pub name: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.log.lock().unwrap().push(format!("close {}", self.name));
    }
}

impl Script {
    fn handle(&self, line: String, default: String) -> io::Result<Handle> {
        let name = match self.win32(line.clone())? {
            Answer::Done => default,
            Answer::Str(s) => s,
            other => return Err(wrong(&line, other)),
        };
        Ok(Handle { name, log: self.log.clone() })
    }
}

/// A filesystem layout for the scripted [`Nt`], in the calls containment makes. Paths are drive
/// paths (`C:\root\pv`); the handles are named by their `\\?\` spelling.
impl Script {
    /// The root `root` exists and is canonical (`open … look`, `final_path`).
    pub fn root(&self, root: &str) -> &Self {
        let v = format!(r"\\?\{root}");
        self.on(format!("open {v} look"), Answer::Done).on(format!("final_path {v}"), Answer::Str(v))
    }

    /// `dir` exists, is a plain directory and is canonical; opened by path and held as the
    /// deepest existing ancestor of what is asked for.
    pub fn held_dir(&self, dir: &str) -> &Self {
        self.resolved_dir(dir, dir)
    }

    /// `dir` exists and is a directory whose canonical path is `canonical` (a link on the way).
    pub fn resolved_dir(&self, dir: &str, canonical: &str) -> &Self {
        let v = format!(r"\\?\{dir}");
        self.on(format!("open {v} hold"), Answer::Done)
            .on(format!("final_path {v}"), Answer::Str(format!(r"\\?\{canonical}")))
            .on(format!("attributes_of {v}"), Answer::Attributes(Some(super::attr::DIRECTORY)))
    }

    /// `dir` does not exist (opening it by path fails).
    pub fn missing_dir(&self, dir: &str) -> &Self {
        self.on(format!(r"open \\?\{dir} hold"), Answer::Win32Error(super::code::ERROR_FILE_NOT_FOUND))
    }

    /// The entry `name` in the held directory `dir`, with `attrs`.
    pub fn entry(&self, dir: &str, name: &str, attrs: u32) -> &Self {
        self.on(format!(r"open_at \\?\{dir} {name} entry"), Answer::Done)
            .on(format!(r"attributes_of \\?\{dir}\{name}"), Answer::Attributes(Some(attrs)))
    }

    /// The system drive is `drive` (e.g. `C:`): where a path rooted without a drive is.
    pub fn system_drive_is(&self, drive: &str) -> &Self {
        self.on("system_drive", Answer::Str(drive.into()))
    }

    /// Nothing is at `name` in the held directory `dir`.
    pub fn no_entry(&self, dir: &str, name: &str) -> &Self {
        self.on(format!(r"open_at \\?\{dir} {name} entry"), Answer::Win32Error(super::code::ERROR_FILE_NOT_FOUND))
    }

    /// The link `name` in the held directory `dir` leads to `canonical` (a drive path).
    pub fn link_to(&self, dir: &str, name: &str, canonical: &str) -> &Self {
        self.on(format!(r"open_at \\?\{dir} {name} look"), Answer::Str(format!("{name} followed")))
            .on(format!("final_path {name} followed"), Answer::Str(format!(r"\\?\{canonical}")))
    }
}

impl Nt for Script {
    type Handle = Handle;
    fn open(&self, path: &str, how: Open) -> io::Result<Handle> {
        self.handle(format!("open {path} {}", how.name()), path.to_owned())
    }
    fn open_at(&self, dir: &Handle, name: &str, how: Open) -> io::Result<Handle> {
        self.handle(format!("open_at {} {name} {}", dir.name, how.name()), format!(r"{}\{name}", dir.name))
    }
    fn final_path(&self, h: &Handle) -> io::Result<String> {
        expect!(self, format!("final_path {}", h.name), Answer::Str(s) => s)
    }
    fn attributes(&self, h: &Handle) -> io::Result<u32> {
        expect!(self, format!("attributes_of {}", h.name), Answer::Attributes(Some(a)) => a)
    }
    fn system_drive(&self) -> io::Result<String> {
        expect!(self, "system_drive".into(), Answer::Str(s) => s)
    }
    fn list(&self, h: &Handle) -> io::Result<Vec<String>> {
        expect!(self, format!("list {}", h.name), Answer::Strings(v) => v)
    }
    fn delete(&self, h: &Handle) -> io::Result<()> {
        expect!(self, format!("delete {}", h.name), Answer::Done => ())
    }
    fn mount_point_target(&self, h: &Handle) -> io::Result<Option<String>> {
        expect!(self, format!("mount_point_target {}", h.name), Answer::Target(t) => t)
    }
    fn file_id(&self, h: &Handle) -> io::Result<u64> {
        expect!(self, format!("file_id {}", h.name), Answer::Id(id) => id)
    }
    fn volume_path(&self, h: &Handle) -> io::Result<String> {
        expect!(self, format!("volume_path {}", h.name), Answer::Str(s) => s)
    }
    fn volume_mount_points(&self, volume: &str) -> io::Result<Vec<String>> {
        expect!(self, format!("volume_mount_points {volume}"), Answer::Strings(v) => v)
    }
}

impl Script {
    /// The scripted WMI answer for `key`, its failures already turned into errors.
    fn wmi(&self, key: String, line: &str) -> Result<Answer> {
        match self.answer(key, line.to_owned()) {
            Some(Answer::WmiError(make, msg)) => Err(make(msg)),
            Some(a) => Ok(a),
            None => Err(Error::internal(format!("unscripted {line}"))),
        }
    }
}

fn wrong_wmi(line: &str, a: Answer) -> Error {
    Error::internal(format!("script answered {line} with {a:?}"))
}

impl Wmi for Script {
    fn query(&self, query: &Query) -> Result<Vec<Row>> {
        let line = format!("query {}", query.wql()?);
        match self.wmi(line.clone(), &line)? {
            Answer::Rows(rows) => Ok(rows),
            other => Err(wrong_wmi(&line, other)),
        }
    }

    fn call(&self, _namespace: Namespace, target: &str, method: &str, args: &[(&'static str, Value)]) -> Result<Row> {
        let key = format!("call {target} {method}");
        let line = format!("{key} {args:?}");
        match self.wmi(key, &line)? {
            Answer::Out(row) => Ok(row),
            other => Err(wrong_wmi(&line, other)),
        }
    }

    fn associators(
        &self,
        _namespace: Namespace,
        path: &str,
        assoc_class: &'static str,
        result_class: &'static str,
        _props: &[&'static str],
    ) -> Result<Vec<Row>> {
        let line = format!("associators {path} {assoc_class} {result_class}");
        match self.wmi(line.clone(), &line)? {
            Answer::Rows(rows) => Ok(rows),
            other => Err(wrong_wmi(&line, other)),
        }
    }
}

/// Out-parameters with just a `ReturnValue`.
pub fn returned(code: u32) -> Row {
    Row::new("__PARAMETERS", "").with("ReturnValue", code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::windows::code::ERROR_NOT_READY;

    #[test]
    fn answers_in_order_then_the_last_sticks_and_everything_is_logged() {
        let s = Script::new();
        s.on("filesystem_name C:\\", Answer::Str("RAW".into()))
            .on("filesystem_name C:\\", Answer::Str("NTFS".into()))
            .on("flush X", Answer::Win32Error(ERROR_NOT_READY));
        assert_eq!(s.filesystem_name("C:\\").unwrap(), "RAW");
        assert_eq!(s.filesystem_name("C:\\").unwrap(), "NTFS");
        assert_eq!(s.filesystem_name("C:\\").unwrap(), "NTFS");
        assert_eq!(s.flush("X").unwrap_err().raw_os_error(), Some(ERROR_NOT_READY));
        assert!(s.volumes().is_err());
        let q = Query::select(Namespace::Storage, "MSFT_Disk", &["Number"]);
        s.on_query(&q, vec![Row::new("MSFT_Disk", "p").with("Number", 1u32)]);
        assert_eq!(s.query(&q).unwrap()[0].u32("Number").unwrap(), 1);
        s.on_call("p", "Online", returned(0));
        let args = [("Secret", Value::Secret(crate::types::Secret::new("pw")))];
        assert_eq!(s.call(Namespace::Storage, "p", "Online", &args).unwrap().return_value().unwrap(), 0);
        assert_eq!(
            s.log(),
            [
                "filesystem_name C:\\",
                "filesystem_name C:\\",
                "filesystem_name C:\\",
                "flush X",
                "UNSCRIPTED volumes",
                "query SELECT Number FROM MSFT_Disk",
                "call p Online [(\"Secret\", <redacted>)]",
            ]
        );
        assert!(std::panic::catch_unwind(|| s.assert_all_scripted()).is_err());
    }
}
