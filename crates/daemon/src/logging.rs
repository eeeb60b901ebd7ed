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

use std::fs::File;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

/// Name of the log file inside `-log_dir`.
pub const LOG_DIR_FILE_NAME: &str = "csi-proxy.log";

/// Prefix of the tracing targets of all our crates (`csi_proxy`, `csi_proxy_server`, ...).
const OWN_TARGET: &str = "csi_proxy";

/// `-v` from which library logs are traced as well.
const LIBRARY_TRACE_V: u32 = 10;

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
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions { v: 0, log_file: None, log_dir: None, logtostderr: true, alsologtostderr: false }
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

/// Keeps logging set up; flushes the log file when dropped (keep it alive until `main` ends).
#[derive(Debug)]
pub struct Guard {
    file: Option<Arc<Mutex<File>>>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(file) = &self.file {
            if let Ok(mut f) = file.lock() {
                let _ = f.flush();
                let _ = f.sync_all();
            }
        }
    }
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
        Some(path) => Some(Arc::new(Mutex::new(open_log_file(path)?))),
        None => None,
    };
    let ansi = file.is_none() && io::stderr().is_terminal();
    let writer = Sink { file: file.clone(), stderr: destination.stderr };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(ansi)
        .with_target(true)
        .try_init()
        .map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))?;
    tracing::debug!(
        file = ?destination.file,
        stderr = destination.stderr,
        filter = %filter_text,
        "logging set up"
    );
    Ok(Guard { file })
}

/// Writes every formatted event to the file and/or standard error.
#[derive(Clone)]
struct Sink {
    file: Option<Arc<Mutex<File>>>,
    stderr: bool,
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = Sink;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        // The formatter hands over one whole event per call; write it whole so lines from
        // different threads never interleave in the file.
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut result = Ok(());
        if let Some(file) = &self.file {
            // A poisoned lock only means another thread panicked mid-write; keep logging.
            let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
            result = f.write_all(buf);
        }
        if self.stderr {
            let stderr_result = io::stderr().lock().write_all(buf);
            if result.is_ok() {
                result = stderr_result;
            }
        }
        result
    }

    fn flush(&mut self) -> io::Result<()> {
        if let Some(file) = &self.file {
            file.lock().unwrap_or_else(|p| p.into_inner()).flush()?;
        }
        if self.stderr {
            io::stderr().flush()?;
        }
        Ok(())
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
        let file = Arc::new(Mutex::new(open_log_file(&path).unwrap()));
        let mut sink = Sink { file: Some(file), stderr: false };
        sink.write_all(b"new line\n").unwrap();
        sink.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old line\nnew line\n");

        let fresh = dir.join("a").join("b").join("c.log");
        open_log_file(&fresh).unwrap();
        assert!(fresh.is_file());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The only test that installs the global subscriber (one per test process).
    #[test]
    fn init_writes_to_the_log_file() {
        // RUST_LOG would override -v; this test checks -v, so skip if the caller set it.
        if std::env::var("RUST_LOG").is_ok_and(|v| !v.trim().is_empty()) {
            return;
        }
        let dir = temp_dir("init");
        let opts =
            LogOptions { v: 2, log_file: None, log_dir: Some(dir.clone()), logtostderr: false, alsologtostderr: false };
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
