//! The rotating log file (`-log_file_max_size`), also the audit file's (with its own limits).
//!
//! When an event would take the file past its limit, the file is closed and renamed `<file>.1`,
//! older ones shift up (`.1` → `.2`, ...), the oldest beyond the retention are removed, and a new
//! file is started. An event is never split: the size is checked and the file rotated between
//! whole events, and an event larger than the limit still goes whole into a fresh file. If the
//! rename fails (say a reader holds the file open without delete sharing on Windows), logging
//! carries on in the same file, the failure is reported once on standard error, and rotation is
//! tried again after another limit's worth.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::private_file::open_audit_file;

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
    pub(super) path: PathBuf,
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
    retention: Retention,
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
            retention: Retention { keep: Some(keep), max_age: None },
            reported: false,
        })
    }

    /// The audit file at `path` (see [`open_audit_file`]), rotated as a log file.
    pub fn open_audit(path: &Path, max_bytes: u64, retention: Retention) -> anyhow::Result<LogFile> {
        let mut log = LogFile {
            path: path.to_path_buf(),
            file: None,
            audit: true,
            #[cfg(unix)]
            id: None,
            size: 0,
            max_bytes,
            retention,
            reported: false,
        };
        log.reopen()?;
        #[cfg(unix)]
        super::private_file::make_rotated_private(path);
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
        let shifted = shift_rotated(&self.path, self.retention);
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

    pub(super) fn flush_and_sync(&mut self) {
        if let Some(f) = &mut self.file {
            let _ = f.flush();
            let _ = f.sync_all();
        }
    }
}

/// `<path>.<n>`.
pub(super) fn rotated_name(path: &Path, n: usize) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Which rotated files are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Rotated files kept at most (`<file>.1` newest ... `<file>.<keep>` oldest); `None`: any
    /// number.
    pub keep: Option<usize>,
    /// Rotated files last written longer ago than this are removed at each rotation; `None`:
    /// none is removed for its age.
    pub max_age: Option<std::time::Duration>,
}

/// Renames `<path>.<n>` to `<path>.<n+1>` from the oldest down, then `<path>` to `<path>.1`,
/// removing what the retention does not keep: beyond `keep` files, and (from the first one
/// last written longer than `max_age` ago, older ones being further down) by age. With `keep`
/// 0, removes `<path>`.
fn shift_rotated(path: &Path, retention: Retention) -> io::Result<()> {
    let ignore_missing = |r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    };
    let keep = retention.keep.unwrap_or(usize::MAX);
    if keep == 0 {
        return ignore_missing(std::fs::remove_file(path));
    }
    // The rotated files there are now: `.1` up to the first missing number.
    let mut last = 0;
    while last < keep && rotated_name(path, last + 1).exists() {
        last += 1;
    }
    if last == keep {
        ignore_missing(std::fs::remove_file(rotated_name(path, keep)))?;
        last -= 1;
    }
    for n in (1..=last).rev() {
        ignore_missing(std::fs::rename(rotated_name(path, n), rotated_name(path, n + 1)))?;
    }
    std::fs::rename(path, rotated_name(path, 1))?;
    if let Some(max_age) = retention.max_age {
        remove_older_than(path, last + 1, max_age);
    }
    Ok(())
}

/// Removes `<path>.<n>` for every `n` from the first, in `1..=last`, last written longer than
/// `max_age` ago. A file whose time cannot be read is kept.
fn remove_older_than(path: &Path, last: usize, max_age: std::time::Duration) {
    let now = std::time::SystemTime::now();
    let old = |n: usize| {
        std::fs::metadata(rotated_name(path, n))
            .and_then(|m| m.modified())
            .is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > max_age))
    };
    if let Some(first) = (1..=last).find(|&n| old(n)) {
        for n in first..=last {
            let _ = std::fs::remove_file(rotated_name(path, n));
        }
    }
}

fn keep_first_error(result: &mut io::Result<()>, next: io::Result<()>) {
    if result.is_ok() {
        *result = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logging::testutil::{read, temp_dir};
    use crate::logging::{max_bytes, Retention, KEEP_ROTATED};

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

    /// `keep: None` keeps every rotated file (kube-apiserver's `-audit-log-maxbackup=0`).
    #[test]
    fn any_number_of_old_files_can_be_kept() {
        let dir = temp_dir("keep-all");
        let path = dir.join("audit.log");
        let all = Retention { keep: None, max_age: None };
        let mut log = LogFile::open(&path, 10, 0).unwrap();
        log.retention = all;
        for i in 0..12 {
            log.write_event(format!("event {i:02}\n").as_bytes()).unwrap();
        }
        for n in 1..=11 {
            assert_eq!(read(&rotated_name(&path, n)), format!("event {:02}\n", 11 - n));
        }
        assert!(!rotated_name(&path, 12).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// With a maximum age, a rotation removes the rotated files last written longer ago than
    /// that (and the older ones after them), keeping the recent ones.
    #[test]
    fn old_files_are_removed_by_age_at_rotation() {
        let dir = temp_dir("max-age");
        let path = dir.join("audit.log");
        let day = std::time::Duration::from_secs(86_400);
        for (n, age_days) in [(1, 0), (2, 2), (3, 5), (4, 9)] {
            let p = rotated_name(&path, n);
            std::fs::write(&p, format!("old {n}\n")).unwrap();
            let f = File::options().write(true).open(&p).unwrap();
            f.set_modified(std::time::SystemTime::now() - day * age_days).unwrap();
        }
        std::fs::write(&path, "current\n").unwrap();
        let mut log = LogFile::open(&path, 10, 0).unwrap();
        log.retention = Retention { keep: None, max_age: Some(day * 3) };
        log.write_event(b"next\n").unwrap();
        // current -> .1, old 1 -> .2, old 2 (2 days) -> .3; old 3 (5 days) and 4 (9 days) removed.
        assert_eq!(read(&path), "next\n");
        assert_eq!(read(&rotated_name(&path, 1)), "current\n");
        assert_eq!(read(&rotated_name(&path, 2)), "old 1\n");
        assert_eq!(read(&rotated_name(&path, 3)), "old 2\n");
        assert!(!rotated_name(&path, 4).exists() && !rotated_name(&path, 5).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
