//! Logging set up from klog-style flags (docs/upstream.md#flags), on top of `tracing-subscriber`.
//!
//! Where logs go, as with klog:
//! * `-logtostderr=true` (the default): standard error only; `-log_file`/`-log_dir` are ignored;
//! * `-logtostderr=false`: appended to `-log_file` if given, else to `<-log_dir>/csi-proxy.log`
//!   if given, else (nothing to write to) standard error; `-alsologtostderr` adds standard error.
//!
//! How much: `-v` 0-1 → INFO, 2-4 → DEBUG, 5 and up → TRACE for our own crates (targets starting
//! with `csi_proxy`); libraries (tonic, h2, ...) stay at INFO unless `-v` is 10 or more, where
//! they get TRACE too. A non-empty `RUST_LOG` replaces all of this with its own directives.
//!
//! Rotation (`-log_file_max_size`, megabytes of 1024 × 1024 as in klog; 0 = unlimited): when an
//! event would take the log file past the limit, the file is closed and renamed `<file>.1`, older
//! ones shift up (`.1` → `.2`, ...), at most [`KEEP_ROTATED`] are kept (the oldest is removed) and
//! a new file is started. An event is never split: events are written, in the order they were
//! logged, by one background thread (so a caller never waits for the disk or for other callers'
//! lines; warnings and errors wait until written), the size is checked and the file rotated
//! between whole events, and an event larger than the limit still goes whole into a fresh file. If the rename fails (say a reader holds the file open
//! without delete sharing on Windows), logging carries on in the same file, the failure is
//! reported once on standard error, and rotation is tried again after another limit's worth.
//!
//! Format (`-logging-format`): `text` (the default) is tracing-subscriber's usual line; `json`
//! is one object per line, as Kubernetes components write them: `ts` (seconds since the Unix
//! epoch as a number with microseconds), `level` (`error`, `warn`, `info`, `debug`, `trace`),
//! `v` (the klog verbosity the level stands for: info 0, debug 2, trace 5, warnings 0; absent on
//! errors, as in Kubernetes), `logger` (the tracing target), `caller` (`file:line`), `msg`, then
//! the fields of the enclosing spans and of the event as keys of their own (a field named like
//! one of those keys is written as `field_<name>`).

use std::ffi::OsString;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields, MakeWriter};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// Name of the log file inside `-log_dir`.
pub const LOG_DIR_FILE_NAME: &str = "csi-proxy.log";

/// Prefix of the tracing targets of all our crates (`csi_proxy`, `csi_proxy_server`, ...).
const OWN_TARGET: &str = "csi_proxy";

/// `-v` from which library logs are traced as well.
const LIBRARY_TRACE_V: u32 = 10;

/// Default of `-log_file_max_size`, in megabytes (klog's).
pub const DEFAULT_LOG_FILE_MAX_SIZE_MB: u64 = 1800;

/// Rotated log files kept besides the current one (`<file>.1` newest ... `<file>.5` oldest).
pub const KEEP_ROTATED: usize = 5;

/// Bytes in one `-log_file_max_size` megabyte (klog's).
const MEGABYTE: u64 = 1024 * 1024;

/// `-logging-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// tracing-subscriber's text lines.
    #[default]
    Text,
    /// One JSON object per line (see the module text).
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(()),
        }
    }
}

/// The klog flags that decide logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogOptions {
    /// `-v`
    pub v: u32,
    /// `-log_file` (`None` when empty)
    pub log_file: Option<PathBuf>,
    /// `-log_dir` (`None` when empty)
    pub log_dir: Option<PathBuf>,
    /// `-logtostderr`
    pub logtostderr: bool,
    /// `-alsologtostderr`
    pub alsologtostderr: bool,
    /// `-log_file_max_size`, megabytes; 0 = unlimited.
    pub log_file_max_size_mb: u64,
    /// `-logging-format`
    pub format: LogFormat,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            v: 0,
            log_file: None,
            log_dir: None,
            logtostderr: true,
            alsologtostderr: false,
            log_file_max_size_mb: DEFAULT_LOG_FILE_MAX_SIZE_MB,
            format: LogFormat::Text,
        }
    }
}

/// Where log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// File the logs are appended to.
    pub file: Option<PathBuf>,
    /// Whether they go to standard error.
    pub stderr: bool,
}

/// Chooses the destination from the flags (klog's rules, see the module text).
pub fn destination(opts: &LogOptions) -> Destination {
    if opts.logtostderr {
        return Destination { file: None, stderr: true };
    }
    let file = match (&opts.log_file, &opts.log_dir) {
        (Some(f), _) if !f.as_os_str().is_empty() => Some(f.clone()),
        (_, Some(d)) if !d.as_os_str().is_empty() => Some(d.join(LOG_DIR_FILE_NAME)),
        _ => None,
    };
    let stderr = file.is_none() || opts.alsologtostderr;
    Destination { file, stderr }
}

/// Level of our own crates for a klog verbosity.
pub fn level_for(v: u32) -> Level {
    match v {
        0..=1 => Level::INFO,
        2..=4 => Level::DEBUG,
        _ => Level::TRACE,
    }
}

/// `EnvFilter` directives for a klog verbosity (used when `RUST_LOG` is not set).
pub fn directives_for(v: u32) -> String {
    let own = level_for(v).as_str().to_ascii_lowercase();
    let libraries = if v >= LIBRARY_TRACE_V { "trace" } else { "info" };
    format!("{libraries},{OWN_TARGET}={own}")
}

/// Opens (creating it and its directory if needed) a log file for appending.
pub fn open_log_file(path: &Path) -> anyhow::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create directory {} for log file {}", parent.display(), path.display()))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    // Logs name volumes, paths and callers' requests: not for every local user to read.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o640);
    options.open(path).with_context(|| format!("cannot open log file {}", path.display()))
}

/// How the audit file is opened: never through a link, and only a regular file that nobody but
/// the daemon's user can change (as the socket directory is checked, by
/// `csi_proxy_transport::unix::check_private`). On Windows: without following a reparse point
/// (one at the path is refused), and without delete sharing, so that nobody renames or removes it
/// while it is open. The error says which it is.
pub fn open_audit_file(path: &Path) -> anyhow::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).with_context(|| {
            format!("cannot create directory {} for audit file {}", parent.display(), path.display())
        })?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: a FIFO planted at the path fails the open (and is refused below) instead of
        // hanging the start; it changes nothing for a regular file.
        options
            .mode(0o600)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32 | rustix::fs::OFlags::NONBLOCK.bits() as i32);
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::OpenOptionsExt;
        use windows_sys::Win32::Storage::FileSystem::{
            FILE_FLAG_OPEN_REPARSE_POINT, FILE_SHARE_READ, FILE_SHARE_WRITE,
        };
        options.custom_flags(FILE_FLAG_OPEN_REPARSE_POINT).share_mode(FILE_SHARE_READ | FILE_SHARE_WRITE);
    }
    let refused = |why: &str| {
        anyhow::anyhow!("audit file {} {why}; refusing to write the audit trail there (another user could rewrite or remove records)", path.display())
    };
    let file = match options.open(path) {
        Ok(f) => f,
        #[cfg(unix)]
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(refused("is a symbolic link"))
        }
        Err(e) => return Err(e).with_context(|| format!("cannot open audit file {}", path.display())),
    };
    let meta = file.metadata().with_context(|| format!("cannot inspect audit file {}", path.display()))?;
    #[cfg(unix)]
    if let Err(e) = csi_proxy_transport::unix::check_private(&meta, csi_proxy_transport::unix::Private::File) {
        return Err(anyhow::anyhow!(
            "{}. Use a file owned by uid {} that only it can write to (e.g. chown {} and chmod 0600 it), or remove it and let the daemon create it",
            refused(&e.why),
            e.uid,
            e.uid
        ));
    }
    #[cfg(windows)]
    {
        use std::os::windows::fs::MetadataExt;
        use windows_sys::Win32::Storage::FileSystem::FILE_ATTRIBUTE_REPARSE_POINT;
        // The handle's own attributes show a reparse point opened as such; the path's too, where
        // the flag is not honoured (Wine follows the link).
        let at_path = std::fs::symlink_metadata(path).map(|m| m.file_attributes()).unwrap_or(0);
        if (meta.file_attributes() | at_path) & FILE_ATTRIBUTE_REPARSE_POINT != 0 {
            return Err(refused("is a reparse point (a link)"));
        }
        if !meta.is_file() {
            return Err(refused("is not a regular file"));
        }
    }
    Ok(file)
}

/// Device and inode of an open file (unix), to notice that its path names another file now.
#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// An open log file, rotated by size (see the module text). Written by the one background
/// thread of [`Sink`] only (or of the audit writer, for the audit file).
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    /// `None` only while rotating, or after reopening failed (retried at the next write).
    file: Option<File>,
    /// The audit file: opened by [`open_audit_file`], written by [`Self::write_record`].
    audit: bool,
    /// Device and inode of `file` (unix, audit file), compared with the path's before each record.
    #[cfg(unix)]
    id: Option<(u64, u64)>,
    /// Bytes in the file, or since the last failed rotation.
    size: u64,
    /// Limit in bytes; 0 = unlimited.
    max_bytes: u64,
    keep: usize,
    /// Whether a failed rotation has been reported (once is enough).
    reported: bool,
}

impl LogFile {
    /// Opens `path` for appending (see [`open_log_file`]); rotates it once it would pass
    /// `max_bytes` (0: never), keeping `keep` old files.
    pub fn open(path: &Path, max_bytes: u64, keep: usize) -> anyhow::Result<LogFile> {
        let file = open_log_file(path)?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Some(file),
            audit: false,
            #[cfg(unix)]
            id: None,
            size,
            max_bytes,
            keep,
            reported: false,
        })
    }

    /// The audit file at `path` (see [`open_audit_file`]), rotated as a log file.
    pub fn open_audit(path: &Path, max_bytes: u64, keep: usize) -> anyhow::Result<LogFile> {
        let mut log = LogFile {
            path: path.to_path_buf(),
            file: None,
            audit: true,
            #[cfg(unix)]
            id: None,
            size: 0,
            max_bytes,
            keep,
            reported: false,
        };
        log.reopen()?;
        Ok(log)
    }

    /// Opens the file at the path again (as it was opened first), keeping its size and identity.
    fn reopen(&mut self) -> anyhow::Result<&mut File> {
        self.file = None;
        let f = if self.audit { open_audit_file(&self.path)? } else { open_log_file(&self.path)? };
        let meta = f.metadata();
        self.size = meta.as_ref().map(|m| m.len()).unwrap_or(0);
        #[cfg(unix)]
        {
            self.id = meta.ok().map(|m| file_id(&m));
        }
        Ok(self.file.insert(f))
    }

    /// Writes one audit record (a whole line) with one `write`, rotating first as
    /// [`Self::write_event`] does: it is in the file whole or not at all. A short write (the
    /// filesystem is full) is cut off again, back to the end of the record before it, and is an
    /// error. On unix, before each record, the path must still name the open file: one renamed
    /// or removed by someone else is noticed there, and the file at the path is opened (created)
    /// again, with the checks of the first open; a write that cannot reopen it fails.
    pub fn write_record(&mut self, line: &[u8]) -> io::Result<()> {
        let len = u64::try_from(line.len()).unwrap_or(u64::MAX);
        if self.max_bytes > 0 && self.size > 0 && self.size.saturating_add(len) > self.max_bytes {
            self.rotate();
        }
        #[cfg(unix)]
        if self.file.is_some() {
            let now = std::fs::symlink_metadata(&self.path).ok().map(|m| file_id(&m));
            if now != self.id {
                tracing::warn!(target: "csi_proxy::audit", file = %self.path.display(),
                    "the audit file was renamed or removed by someone else; opening it again");
                self.file = None;
            }
        }
        let file = match self.file.take() {
            Some(f) => self.file.insert(f),
            None => self.reopen().map_err(|e| io::Error::other(format!("{e:#}")))?,
        };
        let written = loop {
            match file.write(line) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other?,
            }
        };
        if written < line.len() {
            // O_APPEND and the only writer: the partial record is the file's last `written` bytes.
            let end = file.metadata()?.len();
            file.set_len(end.saturating_sub(written as u64))?;
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "only {written} of the record's {} bytes could be written (is the filesystem full?); they were removed again",
                    line.len()
                ),
            ));
        }
        self.size = self.size.saturating_add(len);
        Ok(())
    }

    /// Writes one whole event, rotating first if it would take the file past the limit.
    pub fn write_event(&mut self, buf: &[u8]) -> io::Result<()> {
        let len = u64::try_from(buf.len()).unwrap_or(u64::MAX);
        if self.max_bytes > 0 && self.size > 0 && self.size.saturating_add(len) > self.max_bytes {
            self.rotate();
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let f = open_log_file(&self.path).map_err(|e| io::Error::other(format!("{e:#}")))?;
                self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
                self.file.insert(f)
            }
        };
        file.write_all(buf)?;
        self.size = self.size.saturating_add(len);
        Ok(())
    }

    /// Writes whole events in order, as few writes as the limit allows: consecutive events that
    /// fit go out together, and the file rotates between events exactly where
    /// [`Self::write_event`] would rotate. Returns the first error (the other events are still
    /// tried).
    pub fn write_batch<'a>(&mut self, events: impl IntoIterator<Item = &'a [u8]>) -> io::Result<()> {
        let mut result = Ok(());
        let mut run = Vec::new();
        for event in events {
            let after = self.size.saturating_add(u64::try_from(run.len() + event.len()).unwrap_or(u64::MAX));
            let fits = self.max_bytes == 0 || after <= self.max_bytes;
            if !fits && !run.is_empty() {
                keep_first_error(&mut result, self.write_event(&run));
                run.clear();
            }
            run.extend_from_slice(event);
            if !fits {
                // Alone, so that it rotates the file (or goes whole into a fresh one).
                keep_first_error(&mut result, self.write_event(&run));
                run.clear();
            }
        }
        if !run.is_empty() {
            keep_first_error(&mut result, self.write_event(&run));
        }
        result
    }

    /// Closes the file, shifts the old ones and starts a new file. On failure logging goes on
    /// in the current file, counting size afresh so the next try comes a limit's worth later.
    fn rotate(&mut self) {
        // Closed first: renaming an open file is not portable.
        if let Some(mut f) = self.file.take() {
            let _ = f.flush();
        }
        let shifted = shift_rotated(&self.path, self.keep);
        match self.reopen() {
            Ok(_) => {
                if shifted.is_err() {
                    self.size = 0;
                }
            }
            Err(e) => {
                // Reopened at the next write.
                if !self.reported {
                    eprintln!("csi-proxy: {e:#}");
                }
            }
        }
        if let Err(e) = shifted {
            if !std::mem::replace(&mut self.reported, true) {
                eprintln!("csi-proxy: cannot rotate log file {}: {e}; logging on in it", self.path.display());
            }
        }
    }

    fn flush_and_sync(&mut self) {
        if let Some(f) = &mut self.file {
            let _ = f.flush();
            let _ = f.sync_all();
        }
    }
}

/// `<path>.<n>`.
fn rotated_name(path: &Path, n: usize) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Removes the oldest rotated file, renames `<path>.<n>` to `<path>.<n+1>` from the oldest down,
/// then `<path>` to `<path>.1` (with `keep` 0, removes `<path>`).
fn shift_rotated(path: &Path, keep: usize) -> io::Result<()> {
    let ignore_missing = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    if keep == 0 {
        return ignore_missing(std::fs::remove_file(path));
    }
    ignore_missing(std::fs::remove_file(rotated_name(path, keep)))?;
    for n in (1..keep).rev() {
        ignore_missing(std::fs::rename(rotated_name(path, n), rotated_name(path, n + 1)))?;
    }
    std::fs::rename(path, rotated_name(path, 1))
}

fn keep_first_error(result: &mut io::Result<()>, next: io::Result<()>) {
    if result.is_ok() {
        *result = next;
    }
}

/// Keeps logging set up; writes out every queued line and syncs the log file when dropped (keep
/// it alive until `main` ends).
#[derive(Debug)]
pub struct Guard {
    sink: Sink,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.sink.sync(true);
    }
}

/// `-log_file_max_size` in bytes.
pub(crate) fn max_bytes(megabytes: u64) -> u64 {
    megabytes.saturating_mul(MEGABYTE)
}

/// Installs the global subscriber. Fails if the log file cannot be opened (the error names it),
/// if `RUST_LOG` is malformed, or if a subscriber is already installed.
pub fn init(opts: &LogOptions) -> anyhow::Result<Guard> {
    let (filter, filter_text) = match std::env::var("RUST_LOG") {
        Ok(text) if !text.trim().is_empty() => {
            (EnvFilter::try_new(&text).with_context(|| format!("invalid RUST_LOG {text:?}"))?, text)
        }
        _ => {
            let text = directives_for(opts.v);
            (EnvFilter::try_new(&text)?, text)
        }
    };
    let destination = destination(opts);
    let file = match &destination.file {
        Some(path) => Some(LogFile::open(path, max_bytes(opts.log_file_max_size_mb), KEEP_ROTATED)?),
        None => None,
    };
    let ansi = file.is_none() && io::stderr().is_terminal();
    let sink = Sink::start(file, destination.stderr).context("cannot start the log writer thread")?;
    tracing::subscriber::set_global_default(subscriber(opts.format, filter, sink.clone(), ansi))
        .map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))?;
    tracing::debug!(
        file = ?destination.file,
        stderr = destination.stderr,
        filter = %filter_text,
        "logging set up"
    );
    Ok(Guard { sink })
}

/// The subscriber for a format: text is tracing-subscriber's default line with targets (and
/// colours on a terminal), JSON our [`JsonFormat`].
fn subscriber<W>(format: LogFormat, filter: EnvFilter, writer: W, ansi: bool) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).with_target(true).finish()),
        LogFormat::Json => Box::new(builder.with_ansi(false).fmt_fields(JsonFields).event_format(JsonFormat).finish()),
    }
}

/// Hands every formatted event to the writer thread, which writes them to the file and/or
/// standard error in order, whole, batching what has queued up into one write. Callers never
/// wait for each other or for the disk, except when the queue is full (then they wait for room:
/// no line is dropped), and warnings and errors, which wait until they are written (so a line
/// logged just before the process ends is not lost).
#[derive(Clone, Debug)]
struct Sink {
    queue: SyncSender<Message>,
}

/// Events queued for the writer thread at most (about a megabyte of ordinary lines).
const QUEUE: usize = 4096;
/// Events written together at most.
const BATCH: usize = 512;

enum Message {
    Event(Vec<u8>),
    /// Answered once everything queued before it is written (and, if `true`, synced to disk).
    Sync(SyncSender<()>, bool),
}

impl Sink {
    fn start(file: Option<LogFile>, stderr: bool) -> io::Result<Sink> {
        let (queue, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new().name("csi-proxy-log".into()).spawn(move || write_queued(rx, file, stderr))?;
        Ok(Sink { queue })
    }

    /// Waits until every event queued so far is written (and synced to disk with `fsync`).
    fn sync(&self, fsync: bool) {
        let (done, wait) = mpsc::sync_channel(1);
        if self.queue.send(Message::Sync(done, fsync)).is_ok() {
            let _ = wait.recv();
        }
    }
}

/// The writer thread: runs until every [`Sink`] is gone.
fn write_queued(rx: Receiver<Message>, mut file: Option<LogFile>, stderr: bool) {
    let mut events: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
    let mut syncs = Vec::new();
    let mut reported = false;
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Event(e) => events.push(e),
                Message::Sync(done, fsync) => syncs.push((done, fsync)),
            }
            if events.len() < BATCH {
                next = rx.try_recv().ok();
            }
        }
        if let Some(f) = &mut file {
            if let Err(e) = f.write_batch(events.iter().map(Vec::as_slice)) {
                // Nobody to return the error to: say so once, on standard error.
                if !std::mem::replace(&mut reported, true) {
                    eprintln!("csi-proxy: cannot write to log file {}: {e}", f.path.display());
                }
            }
        }
        if stderr && !events.is_empty() {
            let mut err = io::stderr().lock();
            for e in &events {
                let _ = err.write_all(e);
            }
            let _ = err.flush();
        }
        events.clear();
        for (done, fsync) in syncs.drain(..) {
            if fsync {
                if let Some(f) = &mut file {
                    f.flush_and_sync();
                }
            }
            let _ = done.send(());
        }
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter { sink: self.clone(), wait: false }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SinkWriter {
        SinkWriter { sink: self.clone(), wait: *meta.level() <= Level::WARN }
    }
}

/// One event's writer (the formatter hands over one whole event per write).
struct SinkWriter {
    sink: Sink,
    /// Return only once the event is written.
    wait: bool,
}

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.sink
            .queue
            .send(Message::Event(buf.to_vec()))
            .map_err(|_| io::Error::other("the log writer thread has stopped"))?;
        if self.wait {
            self.sink.sync(false);
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.sync(false);
        Ok(())
    }
}

/// Keys of a JSON line that event and span fields may not take.
const JSON_RESERVED: &[&str] = &["ts", "level", "v", "logger", "caller", "msg"];

/// Formats events as JSON lines (see the module text).
struct JsonFormat;

/// Formats span fields as `,"key":value` pieces for [`JsonFormat`] to append.
struct JsonFields;

impl<'w> FormatFields<'w> for JsonFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        mut writer: Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        let mut visitor = JsonVisitor::default();
        fields.record(&mut visitor);
        if let Some(msg) = visitor.msg {
            // A span field called `message`: keep it, under its own name.
            push_key(&mut visitor.out, "message");
            push_str_value(&mut visitor.out, &msg);
        }
        writer.write_str(&visitor.out)
    }

    fn add_fields(&self, current: &'w mut FormattedFields<Self>, fields: &tracing::span::Record<'_>) -> fmt::Result {
        self.format_fields(current.as_writer(), fields)
    }
}

impl<S> FormatEvent<S, JsonFields> for JsonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut visitor = JsonVisitor::default();
        event.record(&mut visitor);
        let mut spans = String::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                if let Some(fields) = span.extensions().get::<FormattedFields<JsonFields>>() {
                    spans.push_str(fields);
                }
            }
        }
        writer.write_str(&json_line(SystemTime::now(), event.metadata(), visitor.msg.as_deref(), &spans, &visitor.out))
    }
}

/// One JSON line: the fixed keys, then `fields` (already `,"key":value` pieces).
fn json_line(now: SystemTime, meta: &tracing::Metadata<'_>, msg: Option<&str>, spans: &str, fields: &str) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let level = *meta.level();
    let mut line = format!("{{\"ts\":{}.{:06},\"level\":", since.as_secs(), since.subsec_micros());
    push_str_value(&mut line, &level.as_str().to_ascii_lowercase());
    let v = match level {
        Level::ERROR => None,
        Level::WARN | Level::INFO => Some(0),
        Level::DEBUG => Some(2),
        Level::TRACE => Some(5),
    };
    if let Some(v) = v {
        let _ = write!(line, ",\"v\":{v}");
    }
    line.push_str(",\"logger\":");
    push_str_value(&mut line, meta.target());
    if let (Some(file), Some(n)) = (meta.file(), meta.line()) {
        line.push_str(",\"caller\":");
        push_str_value(&mut line, &format!("{file}:{n}"));
    }
    line.push_str(",\"msg\":");
    push_str_value(&mut line, msg.unwrap_or(""));
    line.push_str(spans);
    line.push_str(fields);
    line.push_str("}\n");
    line
}

/// Appends `,"name":` (a reserved name as `field_<name>`).
fn push_key(out: &mut String, name: &str) {
    out.push(',');
    if JSON_RESERVED.contains(&name) {
        push_str_value(out, &format!("field_{name}"));
    } else {
        push_str_value(out, name);
    }
    out.push(':');
}

/// Appends a JSON string.
fn push_str_value(out: &mut String, s: &str) {
    // Serialising a str cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Collects `message` and the other fields as `,"key":value` pieces.
#[derive(Default)]
struct JsonVisitor {
    msg: Option<String>,
    out: String,
}

impl JsonVisitor {
    fn raw(&mut self, field: &Field, value: fmt::Arguments<'_>) {
        push_key(&mut self.out, field.name());
        let _ = self.out.write_fmt(value);
    }
}

impl Visit for JsonVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.msg = Some(value.to_string());
            return;
        }
        push_key(&mut self.out, field.name());
        push_str_value(&mut self.out, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.raw(field, format_args!("{value}"));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        match serde_json::Number::from_f64(value) {
            Some(n) => self.raw(field, format_args!("{n}")),
            // NaN and infinities have no JSON number.
            None => self.record_str(field, &value.to_string()),
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(s) = source {
            let _ = write!(text, ": {s}");
            source = s.source();
        }
        self.record_str(field, &text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("csi-proxy-logging-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A new log file is readable by its owner and group only (it was world-readable).
    #[cfg(unix)]
    #[test]
    fn new_log_files_are_not_world_readable() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("mode");
        let path = dir.join("sub/csi-proxy.log");
        drop(open_log_file(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "mode {mode:o}");
        assert_eq!(mode & 0o600, 0o600, "mode {mode:o}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn levels() {
        assert_eq!(level_for(0), Level::INFO);
        assert_eq!(level_for(1), Level::INFO);
        assert_eq!(level_for(2), Level::DEBUG);
        assert_eq!(level_for(4), Level::DEBUG);
        assert_eq!(level_for(5), Level::TRACE);
        assert_eq!(level_for(10), Level::TRACE);
        assert_eq!(directives_for(0), "info,csi_proxy=info");
        assert_eq!(directives_for(2), "info,csi_proxy=debug");
        assert_eq!(directives_for(6), "info,csi_proxy=trace");
        assert_eq!(directives_for(10), "trace,csi_proxy=trace");
        for v in [0, 2, 5, 10] {
            EnvFilter::try_new(directives_for(v)).unwrap();
        }
    }

    #[test]
    fn destinations() {
        let file = PathBuf::from("/x/csi-proxy.log");
        let dir = PathBuf::from("/logs");
        let opts = |log_file: Option<&PathBuf>, log_dir: Option<&PathBuf>, to: bool, also: bool| LogOptions {
            v: 0,
            log_file: log_file.cloned(),
            log_dir: log_dir.cloned(),
            logtostderr: to,
            alsologtostderr: also,
            ..LogOptions::default()
        };
        let stderr_only = Destination { file: None, stderr: true };
        // Default: stderr, whatever files are named.
        assert_eq!(destination(&LogOptions::default()), stderr_only);
        assert_eq!(destination(&opts(Some(&file), Some(&dir), true, true)), stderr_only);
        // -logtostderr=false: file wins over dir; dir gets csi-proxy.log.
        assert_eq!(
            destination(&opts(Some(&file), Some(&dir), false, false)),
            Destination { file: Some(file.clone()), stderr: false }
        );
        assert_eq!(
            destination(&opts(None, Some(&dir), false, false)),
            Destination { file: Some(dir.join("csi-proxy.log")), stderr: false }
        );
        assert_eq!(
            destination(&opts(Some(&file), None, false, true)),
            Destination { file: Some(file.clone()), stderr: true }
        );
        // Nothing to write to: fall back to stderr.
        assert_eq!(destination(&opts(None, None, false, false)), stderr_only);
        let empty = PathBuf::new();
        assert_eq!(destination(&opts(Some(&empty), Some(&empty), false, false)), stderr_only);
    }

    #[test]
    fn log_file_errors_name_the_path() {
        let dir = temp_dir("errors");
        // A directory cannot be opened as a log file.
        let err = open_log_file(&dir).unwrap_err();
        assert!(format!("{err:#}").contains(&dir.display().to_string()), "{err:#}");
        // Neither can a file below a regular file.
        let blocker = dir.join("plain");
        std::fs::write(&blocker, b"x").unwrap();
        let path = blocker.join("sub").join("csi-proxy.log");
        let err = open_log_file(&path).unwrap_err();
        assert!(format!("{err:#}").contains(&path.display().to_string()), "{err:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sink_appends_and_creates_directories() {
        let dir = temp_dir("sink");
        let path = dir.join("nested").join("csi-proxy.log");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"old line\n").unwrap();
        let sink = Sink::start(Some(LogFile::open(&path, 0, KEEP_ROTATED).unwrap()), false).unwrap();
        let mut writer = sink.make_writer();
        writer.write_all(b"new line\n").unwrap();
        writer.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old line\nnew line\n");

        let fresh = dir.join("a").join("b").join("c.log");
        open_log_file(&fresh).unwrap();
        assert!(fresh.is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// A file at the limit stays; the event that would pass it goes to a new file, the old one
    /// becomes `<file>.1`.
    #[test]
    fn rotates_when_an_event_would_pass_the_limit() {
        let dir = temp_dir("rotate");
        let path = dir.join("csi-proxy.log");
        let mut log = LogFile::open(&path, 100, 3).unwrap();
        for i in 0..10 {
            log.write_event(format!("line {i:03}\n").as_bytes()).unwrap(); // 9 bytes each
        }
        log.write_event(b"0123456789\n").unwrap(); // 90 + 11 = 101 > 100
        assert_eq!(read(&path), "0123456789\n");
        let old = read(&rotated_name(&path, 1));
        assert_eq!(old.len(), 90);
        assert!(old.starts_with("line 000\n") && old.ends_with("line 009\n"), "{old}");
        // Exactly at the limit is allowed.
        log.write_event(&[b'x'; 88]).unwrap();
        log.write_event(b"\n").unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 100);
        assert!(!rotated_name(&path, 2).exists());
        // An event larger than the limit goes whole into a fresh file.
        let big = format!("{}\n", "y".repeat(250));
        log.write_event(big.as_bytes()).unwrap();
        assert_eq!(read(&path), big);
        assert_eq!(std::fs::metadata(rotated_name(&path, 1)).unwrap().len(), 100);
        assert_eq!(read(&rotated_name(&path, 2)), old);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An existing file already past the limit is rotated at the first write; 0 never rotates.
    #[test]
    fn existing_file_and_unlimited() {
        let dir = temp_dir("existing");
        let path = dir.join("a.log");
        std::fs::write(&path, "z".repeat(500)).unwrap();
        let mut log = LogFile::open(&path, 100, 2).unwrap();
        log.write_event(b"new\n").unwrap();
        assert_eq!(read(&path), "new\n");
        assert_eq!(read(&rotated_name(&path, 1)).len(), 500);

        let path = dir.join("b.log");
        let mut log = LogFile::open(&path, 0, 2).unwrap();
        for _ in 0..100 {
            log.write_event(&[b'q'; 1000]).unwrap();
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 100_000);
        assert!(!rotated_name(&path, 1).exists());
        assert_eq!(max_bytes(1800), 1800 * 1024 * 1024);
        assert_eq!(max_bytes(u64::MAX), u64::MAX);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// However many rotations, only `keep` old files remain, newest first.
    #[test]
    fn keeps_a_bounded_number_of_old_files() {
        let dir = temp_dir("keep");
        let path = dir.join("csi-proxy.log");
        let mut log = LogFile::open(&path, 10, KEEP_ROTATED).unwrap();
        for i in 0..50 {
            log.write_event(format!("event {i:02}\n").as_bytes()).unwrap(); // 9 bytes: one per file
        }
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        names.sort();
        let mut expected = vec!["csi-proxy.log".to_string()];
        expected.extend((1..=KEEP_ROTATED).map(|n| format!("csi-proxy.log.{n}")));
        assert_eq!(names, expected);
        assert_eq!(read(&path), "event 49\n");
        for n in 1..=KEEP_ROTATED {
            assert_eq!(read(&rotated_name(&path, n)), format!("event {:02}\n", 49 - n));
        }
        // keep 0: the full file is simply replaced.
        let path = dir.join("none.log");
        let mut log = LogFile::open(&path, 10, 0).unwrap();
        for i in 0..5 {
            log.write_event(format!("event {i:02}\n").as_bytes()).unwrap();
        }
        assert_eq!(read(&path), "event 04\n");
        assert!(!rotated_name(&path, 1).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Many threads log through the real formatter while the file rotates under them: every
    /// line ends up whole, exactly once, in one of the files.
    #[test]
    fn concurrent_writers_lose_and_split_nothing_across_rotations() {
        const THREADS: usize = 8;
        const LINES: usize = 400;
        let dir = temp_dir("concurrent");
        let path = dir.join("csi-proxy.log");
        // Enough old files kept that nothing is removed: the test counts every line.
        let sink = Sink::start(Some(LogFile::open(&path, 4096, 1000).unwrap()), false).unwrap();
        for format in [LogFormat::Text, LogFormat::Json] {
            let dispatch = tracing::Dispatch::new(subscriber(format, EnvFilter::new("trace"), sink.clone(), false));
            let threads: Vec<_> = (0..THREADS)
                .map(|t| {
                    let dispatch = dispatch.clone();
                    std::thread::spawn(move || {
                        tracing::dispatcher::with_default(&dispatch, || {
                            for i in 0..LINES {
                                // Lines of different lengths, so rotation points vary.
                                let pad = "p".repeat((t * 7 + i) % 40);
                                tracing::info!(target: "csi_proxy::t", t, i, pad = %pad, "line {format:?} {t} {i} end");
                            }
                        })
                    })
                })
                .collect();
            for t in threads {
                t.join().unwrap();
            }
        }
        sink.sync(false);
        let mut seen = std::collections::HashMap::new();
        let mut files = 0;
        let mut n = 0;
        loop {
            let p = if n == 0 { path.clone() } else { rotated_name(&path, n) };
            if !p.exists() {
                break;
            }
            files += 1;
            let text = read(&p);
            assert!(text.is_empty() || text.ends_with('\n'), "{} ends mid-line", p.display());
            // Rotated files are within the limit (no single line is near it).
            assert!(text.len() <= 4096, "{} has {} bytes", p.display(), text.len());
            for line in text.lines() {
                let (key, tail) = if line.starts_with('{') {
                    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
                    assert_eq!(v["logger"], "csi_proxy::t", "{line}");
                    let tail = format!(" t={} i={} pad={}", v["t"], v["i"], v["pad"].as_str().unwrap());
                    (v["msg"].as_str().unwrap().to_string(), tail)
                } else {
                    let start = line.find("line Text ").unwrap_or_else(|| panic!("not whole: {line:?}"));
                    let end = line.find(" end ").unwrap_or_else(|| panic!("not whole: {line:?}"));
                    (line[start..end + 4].to_string(), line[end + 4..].to_string())
                };
                // The line's end matches its start: nothing of another line in between.
                let mut words = key.split(' ').skip(2);
                let (t, i): (usize, usize) =
                    (words.next().unwrap().parse().unwrap(), words.next().unwrap().parse().unwrap());
                assert_eq!(tail, format!(" t={t} i={i} pad={}", "p".repeat((t * 7 + i) % 40)), "{line:?}");
                *seen.entry(key).or_insert(0) += 1;
            }
            n += 1;
        }
        assert!(files > 20, "rotated only {files} times");
        assert!(files < 1000, "some old files may have been removed");
        for format in ["Text", "Json"] {
            for t in 0..THREADS {
                for i in 0..LINES {
                    let key = format!("line {format} {t} {i} end");
                    assert_eq!(seen.remove(&key), Some(1), "{key}");
                }
            }
        }
        assert!(seen.is_empty(), "unexpected lines: {seen:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Batches rotate exactly where event-by-event writing does.
    #[test]
    fn batches_rotate_like_single_events() {
        let dir = temp_dir("batch");
        let events: Vec<Vec<u8>> =
            (0..200).map(|i| format!("{}\n", "e".repeat(i * 13 % 70)).into_bytes()).chain([vec![b'z'; 300]]).collect();
        let one = dir.join("one.log");
        let mut log = LogFile::open(&one, 256, 1000).unwrap();
        for e in &events {
            log.write_event(e).unwrap();
        }
        let batched = dir.join("batched.log");
        let mut log = LogFile::open(&batched, 256, 1000).unwrap();
        for chunk in events.chunks(37) {
            log.write_batch(chunk.iter().map(Vec::as_slice)).unwrap();
        }
        let mut n = 0;
        loop {
            let (a, b) = if n == 0 {
                (one.clone(), batched.clone())
            } else {
                (rotated_name(&one, n), rotated_name(&batched, n))
            };
            assert_eq!(a.exists(), b.exists(), "{n}");
            if !a.exists() {
                break;
            }
            assert_eq!(read(&a), read(&b), "file {n}");
            n += 1;
        }
        assert!(n > 10, "rotated {n} times");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Callers do not wait for the file: with the log file stuck (a FIFO nobody reads, full),
    /// info lines are still logged at once; they are all written, whole and in order, once it
    /// drains. (Written synchronously, the caller blocked at the first full pipe buffer.)
    #[cfg(unix)]
    #[test]
    fn a_stuck_log_file_does_not_hold_up_callers() {
        use std::io::Read;
        const LINES: usize = 200;
        let dir = temp_dir("fifo");
        let path = dir.join("csi-proxy.log");
        let made = std::process::Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(made.success());
        let opener = {
            let path = path.clone();
            std::thread::spawn(move || File::open(path).unwrap())
        };
        let log = LogFile::open(&path, 0, KEEP_ROTATED).unwrap();
        let mut reader = opener.join().unwrap();
        let sink = Sink::start(Some(log), false).unwrap();
        let dispatch =
            tracing::Dispatch::new(subscriber(LogFormat::Text, EnvFilter::new("trace"), sink.clone(), false));
        let (done, logged) = mpsc::channel();
        let caller = std::thread::spawn(move || {
            tracing::dispatcher::with_default(&dispatch, || {
                for i in 0..LINES {
                    // 200 lines of 1 KB: three times what a pipe holds.
                    tracing::info!(target: "csi_proxy::t", pad = %"p".repeat(1000), "line {i} end");
                }
            });
            done.send(()).unwrap();
        });
        let waited = logged.recv_timeout(std::time::Duration::from_secs(10));
        let drain = std::thread::spawn(move || {
            let mut text = String::new();
            reader.read_to_string(&mut text).unwrap();
            text
        });
        assert!(waited.is_ok(), "the caller waited for the stuck log file");
        caller.join().unwrap();
        sink.sync(false);
        drop(sink);
        let text = drain.join().unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), LINES);
        for (i, line) in lines.iter().enumerate() {
            assert!(line.contains(&format!("line {i} end")) && line.ends_with(&"p".repeat(1000)), "{i}: {line:?}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// JSON lines parse, and carry ts, level, v, logger, caller, msg and the fields as keys.
    #[test]
    fn json_lines_carry_msg_and_fields() {
        let dir = temp_dir("json");
        let path = dir.join("csi-proxy.log");
        let sink = Sink::start(Some(LogFile::open(&path, 0, KEEP_ROTATED).unwrap()), false).unwrap();
        let subscriber = subscriber(LogFormat::Json, EnvFilter::new("trace"), sink.clone(), false);
        let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("call", method = "FormatVolume", id = 7u64);
            let _entered = span.enter();
            let err = io::Error::other("disk gone");
            tracing::info!(
                target: "csi_proxy::test",
                volume = "vol-\"1\"\n",
                size = 42u64,
                delta = -3i64,
                ratio = 0.5,
                ok = true,
                path = ?PathBuf::from("/x"),
                msg = "clashes",
                "formatted {}", "here"
            );
            tracing::debug!(target: "csi_proxy::test", "debug");
            tracing::trace!(target: "csi_proxy::test", "trace");
            tracing::warn!(target: "csi_proxy::test", "warn");
            tracing::error!(target: "csi_proxy::test", error = &err as &dyn std::error::Error, "failed");
        });
        sink.sync(false);
        let text = read(&path);
        let lines: Vec<serde_json::Value> =
            text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
        assert_eq!(lines.len(), 5, "{text}");
        let first = &lines[0];
        let ts = first["ts"].as_f64().unwrap();
        assert!(ts >= before.floor() && ts < before + 60.0, "{ts} vs {before}");
        assert_eq!(first["level"], "info");
        assert_eq!(first["v"], 0);
        assert_eq!(first["logger"], "csi_proxy::test");
        assert!(first["caller"].as_str().unwrap().contains("logging.rs:"), "{first}");
        assert_eq!(first["msg"], "formatted here");
        assert_eq!(first["volume"], "vol-\"1\"\n");
        assert_eq!(first["size"], 42);
        assert_eq!(first["delta"], -3);
        assert_eq!(first["ratio"], 0.5);
        assert_eq!(first["ok"], true);
        assert_eq!(first["path"], "\"/x\"");
        assert_eq!(first["field_msg"], "clashes");
        assert_eq!(first["method"], "FormatVolume", "span fields: {first}");
        assert_eq!(first["id"], 7);
        let levels: Vec<_> = lines.iter().map(|l| (l["level"].as_str().unwrap(), l.get("v").cloned())).collect();
        assert_eq!(
            levels,
            [
                ("info", Some(0.into())),
                ("debug", Some(2.into())),
                ("trace", Some(5.into())),
                ("warn", Some(0.into())),
                ("error", None)
            ]
        );
        assert_eq!(lines[4]["error"], "disk gone");
        assert!(text.ends_with("}\n") && !text.contains('\x1b'), "{text:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn formats_parse() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("xml".parse::<LogFormat>(), Err(()));
        assert_eq!(LogOptions::default().format, LogFormat::Text);
        assert_eq!(LogOptions::default().log_file_max_size_mb, 1800);
    }

    /// The only test that installs the global subscriber (one per test process).
    #[test]
    fn init_writes_to_the_log_file() {
        // RUST_LOG would override -v; this test checks -v, so skip if the caller set it.
        if std::env::var("RUST_LOG").is_ok_and(|v| !v.trim().is_empty()) {
            return;
        }
        let dir = temp_dir("init");
        let opts = LogOptions { v: 2, log_dir: Some(dir.clone()), logtostderr: false, ..LogOptions::default() };
        let guard = init(&opts).unwrap();
        let path = dir.join(LOG_DIR_FILE_NAME);
        tracing::debug!(target: "csi_proxy::test", "visible at v=2");
        tracing::trace!(target: "csi_proxy::test", "hidden at v=2");
        tracing::debug!(target: "h2::codec", "library debug hidden");
        tracing::info!(target: "h2::codec", "library info shown");
        drop(guard);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("logging set up"), "{text}");
        assert!(text.contains("filter=info,csi_proxy=debug"), "{text}");
        assert!(text.contains("visible at v=2"), "{text}");
        assert!(text.contains("library info shown"), "{text}");
        assert!(!text.contains("hidden"), "{text}");
        assert!(!text.contains('\x1b'), "no colour codes in files: {text:?}");
        // A second install fails instead of silently doing nothing.
        assert!(init(&opts).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
