//! Logging set up from klog-style flags (docs/upstream.md#flags), on top of `tracing-subscriber`.
//!
//! Where logs go and how much is logged: [`options`]. The rotating file: [`file`]. The writer
//! thread that keeps callers from waiting for the disk: [`sink`]. The two line formats
//! (`-logging-format`): [`klog`] (`text`, the default) and [`json`], both built on the typed
//! field values of [`values`]. The audit file's private opening: [`private_file`].

#[cfg(windows)]
pub mod audit_acl;
pub mod clock;
pub mod file;
pub mod json;
pub mod klog;
pub mod options;
pub mod private_file;
pub mod sink;
pub mod values;

use anyhow::Context as _;
use tracing::Subscriber;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

pub use file::{LogFile, Retention};
use options::MEGABYTE;
pub use options::{destination, directives_for, LogFormat, LogOptions, KEEP_ROTATED};
use sink::Sink;

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
    let sink = Sink::start(file, destination.stderr).context("cannot start the log writer thread")?;
    tracing::subscriber::set_global_default(subscriber(opts.format, filter, sink.clone()))
        .map_err(|e| anyhow::anyhow!("cannot install the log subscriber: {e}"))?;
    let file = destination.file.as_ref().map(|f| f.display().to_string()).unwrap_or_default();
    tracing::debug!(file, stderr = destination.stderr, filter = %filter_text, "logging set up");
    if let Some(ignored) = opts.log_file.as_ref().filter(|f| opts.logtostderr && !f.as_os_str().is_empty()) {
        // klog's rule: -log_file has no effect while -logtostderr is true (its default). Kept, as
        // upstream deployments may pass both, but said once rather than silently.
        tracing::warn!(
            log_file = %ignored.display(),
            "-log_file has no effect while -logtostderr is true (klog's default); add -logtostderr=false to log to the file"
        );
    }
    Ok(Guard { sink })
}

/// The subscriber for a format: klog's text lines or Kubernetes' JSON lines. Neither has colours:
/// log pipelines parse these lines.
fn subscriber<W>(format: LogFormat, filter: EnvFilter, writer: W) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(writer).with_ansi(false);
    match format {
        LogFormat::Text => Box::new(
            builder
                .fmt_fields(klog::KlogFields::default())
                .event_format(values::Lines(klog::KlogFormat::new()))
                .finish(),
        ),
        LogFormat::Json => Box::new(
            builder.fmt_fields(json::JsonFields::default()).event_format(values::Lines(json::JsonFormat)).finish(),
        ),
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use std::path::{Path, PathBuf};

    pub(crate) fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("csi-proxy-logging-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub(crate) fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::file::rotated_name;
    use super::options::LOG_DIR_FILE_NAME;
    use super::testutil::{read, temp_dir};
    use super::*;
    #[cfg(unix)]
    use std::fs::File;
    #[cfg(unix)]
    use std::sync::mpsc;

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
            let dispatch = tracing::Dispatch::new(subscriber(format, EnvFilter::new("trace"), sink.clone()));
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
                    let tail = format!(" t={} i={} pad=\"{}\"", v["t"], v["i"], v["pad"].as_str().unwrap());
                    (v["msg"].as_str().unwrap().to_string(), tail)
                } else {
                    let start = line.find("line Text ").unwrap_or_else(|| panic!("not whole: {line:?}"));
                    let end = line.find(" end\"").unwrap_or_else(|| panic!("not whole: {line:?}"));
                    (line[start..end + 4].to_string(), line[end + 5..].to_string())
                };
                // The line's end matches its start: nothing of another line in between.
                let mut words = key.split(' ').skip(2);
                let (t, i): (usize, usize) =
                    (words.next().unwrap().parse().unwrap(), words.next().unwrap().parse().unwrap());
                assert_eq!(tail, format!(" t={t} i={i} pad=\"{}\"", "p".repeat((t * 7 + i) % 40)), "{line:?}");
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
        let dispatch = tracing::Dispatch::new(subscriber(LogFormat::Text, EnvFilter::new("trace"), sink.clone()));
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
            assert!(
                line.contains(&format!("line {i} end")) && line.ends_with(&format!("{}\"", "p".repeat(1000))),
                "{i}: {line:?}"
            );
        }
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
        assert!(text.contains(r#"filter="info,csi_proxy=debug""#), "{text}");
        assert!(text.contains("visible at v=2"), "{text}");
        assert!(text.contains("library info shown"), "{text}");
        assert!(!text.contains("hidden"), "{text}");
        assert!(!text.contains('\x1b'), "no colour codes in files: {text:?}");
        // A second install fails instead of silently doing nothing.
        assert!(init(&opts).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
