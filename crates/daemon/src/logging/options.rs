//! The klog flags that decide where logs go and how much is logged.
//!
//! Where logs go, as with klog:
//! * `-logtostderr=true` (the default): standard error only; `-log_file`/`-log_dir` have no
//!   effect (a `-log_file` given anyway is warned about once at start, not silently dropped);
//! * `-logtostderr=false`: appended to `-log_file` if given, else to `<-log_dir>/csi-proxy.log`
//!   if given, else (nothing to write to) standard error; `-alsologtostderr` adds standard error.
//!
//! How much: `-v` 0-1 → INFO, 2-4 → DEBUG, 5 and up → TRACE for our own crates (targets starting
//! with `csi_proxy`); libraries (tonic, h2, ...) stay at INFO unless `-v` is 10 or more, where
//! they get TRACE too. A non-empty `RUST_LOG` replaces all of this with its own directives.

use std::path::PathBuf;

use tracing::Level;

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
pub(super) const MEGABYTE: u64 = 1024 * 1024;

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

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::EnvFilter;

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
    fn formats_parse() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert_eq!("xml".parse::<LogFormat>(), Err(()));
        assert_eq!(LogOptions::default().format, LogFormat::Text);
        assert_eq!(LogOptions::default().log_file_max_size_mb, 1800);
    }
}
