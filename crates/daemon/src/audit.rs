//! `-audit-log FILE`: the server's audit records (see `csi_proxy_server::audit`) as JSON lines in
//! an append-only file that rotates like the log file (`-log_file_max_size`, five old files
//! kept). Records are written by the server's one audit writer thread, never by an async worker,
//! so a file that does not answer stalls no call but the audited ones (refused after the wait).
//! One record is one `write` of one whole line, so lines never interleave, a short write (a full
//! filesystem) is cut off again before the error is returned ([`LogFile::write_record`]), and it
//! is in the file (the OS's cache) when the call goes on: a daemon killed mid-call leaves the
//! start record behind.
//!
//! The file is opened without following links and must be a regular file with one name (no
//! other hard link), owned by the daemon's user that nobody else can write to, in a directory
//! that is the daemon's user's and that nobody else can write to, or the daemon does not start
//! ([`open_audit_file`]). A file others can read is made 0600 (logged), as are rotated files
//! left readable by others. Before
//! each record the path must still name the open file (same device and inode): one renamed or
//! removed by someone else is noticed there, and the file is opened (created) at the path again.
//!
//! A record, one line each, keys in alphabetical order (absent when they do not apply):
//! `{"api":"v1.Disk","call":7,"event":"start","method":"PartitionDisk",`
//! `"peer_at_connect":{"exe":"/usr/bin/driver","gid":0,"pid":4242,"uid":0},`
//! `"request":{"diskNumber":3},"time":"2026-11-25T02:13:24.123456Z"}` and later
//! `{"api":"v1.Disk","call":7,"code":"OK","duration_seconds":0.0123,"event":"end",…}`.
//! An end record that could not be written when its call ended (a full filesystem) is written
//! before the next record that can be, with `"written_late_because":"<the write's error>"`
//! (its `time` is still when the call ended); past the server's bound of those kept, a
//! `{"event":"lost","lost_records":N,…}` record counts the ones that are lost.
//!
//! `peer_at_connect` is what the kernel guarantees: the process that connected the call's
//! connection, with the pid, uid and gid it had then (SO_PEERCRED; on Windows the pipe's client
//! process and its user SID), and `exe` read from that pid when the daemon accepted the
//! connection. It is not necessarily who sent the call: a process that connects, then hands the
//! connection to another, execs or exits, stays named. There is no `caller` key any more (it held
//! the same values): the new name says what they are, and a reader of `caller` finds it missing
//! rather than reading a connect-time identity as the sender's.

#[cfg(doc)]
use crate::logging::private_file::open_audit_file;
use crate::logging::{LogFile, Retention};
use csi_proxy_server::audit::{AuditSink, Record};
use csi_proxy_sync::LockExt;
use csi_proxy_wire::Workload;
use serde_json::{json, Map, Value};
use std::io;
use std::path::Path;
use std::sync::Mutex;
use std::time::SystemTime;

pub struct AuditFile {
    file: Mutex<LogFile>,
    read_only_calls: bool,
}

impl AuditFile {
    /// Opens (creating) `path` for appending; `max_bytes` 0 never rotates; `retention` says which
    /// rotated files are kept. `read_only_calls`: record the read-only calls too.
    pub fn open(path: &Path, max_bytes: u64, retention: Retention, read_only_calls: bool) -> anyhow::Result<AuditFile> {
        let file = LogFile::open_audit(path, max_bytes, retention)?;
        Ok(AuditFile { file: Mutex::new(file), read_only_calls })
    }
}

/// Bytes in one `-audit-log-maxsize` megabyte (as the log file's).
const MEGABYTE: u64 = 1024 * 1024;

/// The rotation the `-audit-log-max*` flags ask for: size limit in bytes, and retention.
pub fn rotation(opts: &crate::flags::Options) -> (u64, Retention) {
    let max_bytes = opts.audit_log_max_size_mb.saturating_mul(MEGABYTE);
    let keep = usize::try_from(opts.audit_log_max_backup).unwrap_or(usize::MAX);
    let days = opts.audit_log_max_age_days;
    let retention = Retention {
        keep: (keep > 0).then_some(keep),
        max_age: (days > 0).then(|| std::time::Duration::from_secs(days.saturating_mul(86_400))),
    };
    (max_bytes, retention)
}

impl AuditSink for AuditFile {
    fn write(&self, record: &Record<'_>) -> io::Result<()> {
        let line = json_line(record);
        let mut file = self.file.lock_ignoring_poison();
        file.write_record(line.as_bytes())
    }

    fn read_only_calls(&self) -> bool {
        self.read_only_calls
    }
}

/// Who called, in Kubernetes terms: `{"kind":"pod","namespace":..,"pod":..,"pod_uid":..,
/// "container":..,"container_id":..,"image":..}`, `{"kind":"host"}` (the process is in
/// `peer_at_connect`) or `{"kind":"unknown","why":..}`. Values come bounded from the identifier;
/// JSON escapes them.
fn caller_json(w: &Workload) -> Value {
    match w {
        Workload::Pod(p) => json!({
            "kind": "pod", "namespace": p.namespace, "pod": p.pod, "pod_uid": p.pod_uid,
            "container": p.container, "container_id": p.container_id, "image": p.image,
        }),
        Workload::Host => json!({"kind": "host"}),
        Workload::Unknown { why } => json!({"kind": "unknown", "why": why}),
    }
}

/// The record as one JSON object and a newline.
pub fn json_line(r: &Record<'_>) -> String {
    let mut o = Map::new();
    o.insert("time".into(), Value::String(rfc3339(r.time)));
    o.insert("event".into(), r.event.name().into());
    o.insert("call".into(), r.call.into());
    let peer = r.peer_at_connect.filter(|c| !c.is_unknown()).map(|c| {
        let mut m = Map::new();
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(k.into(), v);
            }
        };
        put("pid", c.pid.map(Value::from));
        put("uid", c.uid.map(Value::from));
        put("gid", c.gid.map(Value::from));
        put("user", c.user.clone().map(Value::from));
        put("exe", c.exe.clone().map(Value::from));
        put("cgroup", c.cgroup.clone().map(Value::from));
        put("container_id", c.container_id().map(Value::from));
        Value::Object(m)
    });
    o.insert("peer_at_connect".into(), peer.unwrap_or(Value::Null));
    if let Some(w) = r.peer_at_connect.and_then(|c| c.workload.as_ref()) {
        o.insert("caller".into(), caller_json(w));
    }
    o.insert("api".into(), r.service.into());
    o.insert("method".into(), r.method.into());
    if let Some(v) = r.request {
        o.insert("request".into(), v.clone());
    }
    if let Some(v) = r.code {
        o.insert("code".into(), v.into());
    }
    if let Some(v) = r.message {
        o.insert("message".into(), v.into());
    }
    if let Some(d) = r.duration {
        o.insert("duration_seconds".into(), json!(d.as_secs_f64()));
    }
    if let Some(why) = r.late {
        o.insert("written_late_because".into(), why.into());
    }
    if let Some(n) = r.lost {
        o.insert("lost_records".into(), n.into());
    }
    if let Some(why) = r.would_deny {
        o.insert("authorization".into(), json!({"mode": "warn", "denied": why}));
    }
    if r.dry_run {
        o.insert("dry_run".into(), true.into());
    }
    let mut line = Value::Object(o).to_string();
    line.push('\n');
    line
}

/// `time` as RFC 3339 in UTC with microseconds (`2026-11-25T02:13:24.123456Z`).
fn rfc3339(time: SystemTime) -> String {
    crate::logging::clock::Utc::of(time).rfc3339()
}

#[cfg(test)]
mod tests {
    use super::*;
    use csi_proxy_server::audit::Event;
    use csi_proxy_wire::{Caller, PodContainer};
    use std::time::{Duration, UNIX_EPOCH};

    const FIVE: Retention = Retention { keep: Some(5), max_age: None };

    /// Past the size limit the file rotates as the log file does, whole lines on each side.
    #[test]
    fn the_file_rotates_by_size_keeping_whole_records() {
        let dir = std::env::temp_dir().join(format!("csi-proxy-audit-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("audit.log");
        let sink = AuditFile::open(&path, 2_000, FIVE, false).unwrap();
        let request = json!({"path": "x".repeat(100)});
        for call in 0..24 {
            let r = Record {
                event: Event::Start,
                call,
                time: UNIX_EPOCH,
                peer_at_connect: None,
                service: "v1.Filesystem",
                method: "Mkdir",
                request: Some(&request),
                code: None,
                message: None,
                duration: None,
                late: None,
                lost: None,
                dry_run: false,
                would_deny: None,
            };
            sink.write(&r).unwrap();
        }
        let mut calls = Vec::new();
        let mut names: Vec<String> = (1..=5).rev().map(|n| format!("audit.log.{n}")).collect();
        names.push("audit.log".into());
        assert!(dir.join("audit.log.2").exists(), "rotated at least twice");
        for name in names.iter().filter(|n| dir.join(n).exists()) {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            assert!(text.len() <= 2_000, "{name}: {} bytes", text.len());
            for line in text.lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                calls.push(v["call"].as_u64().unwrap());
            }
        }
        // Oldest file first: the calls in order, none lost.
        assert_eq!(calls, (0..24).collect::<Vec<u64>>());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    fn record(call: u64, request: &Value) -> Record<'_> {
        Record {
            event: Event::Start,
            call,
            time: UNIX_EPOCH,
            peer_at_connect: None,
            service: "v1.Filesystem",
            method: "Mkdir",
            request: Some(request),
            code: None,
            message: None,
            duration: None,
            late: None,
            lost: None,
            dry_run: false,
            would_deny: None,
        }
    }

    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("csi-proxy-audit-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[cfg(unix)]
    /// The calls of the records in `text`, each line parsed whole.
    fn calls(text: &str) -> Vec<u64> {
        text.lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["call"].as_u64().unwrap()).collect()
    }

    /// A link at the path is not followed (it was: the records went wherever it pointed).
    #[test]
    fn a_link_at_the_path_is_refused() {
        let dir = temp_dir("link");
        let target = dir.join("elsewhere");
        std::fs::write(&target, "").unwrap();
        let path = dir.join("audit.log");
        #[cfg(unix)]
        std::os::unix::fs::symlink(&target, &path).unwrap();
        #[cfg(windows)]
        {
            let made = std::os::windows::fs::symlink_file(&target, &path).is_ok();
            if !made || !std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                // Making links needs a privilege, and Wine's make no link: nothing to check then.
                eprintln!("skipped: no symbolic link could be made here");
                return;
            }
        }
        let e = AuditFile::open(&path, 0, FIVE, false).err().expect("a link was opened").to_string();
        assert!(e.contains("is a symbolic link") || e.contains("reparse point"), "{e}");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "", "written through the link");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file others may write to, or owned by another user, is refused (it was used as it was).
    #[cfg(unix)]
    #[test]
    fn a_file_others_can_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("mode");
        let path = dir.join("audit.log");
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = AuditFile::open(&path, 0, FIVE, false).err().expect("a 0666 file was opened").to_string();
        assert!(e.contains("has mode 0666: others can write to it") && e.contains(&path.display().to_string()), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        AuditFile::open(&path, 0, FIVE, false).unwrap();
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            let e = AuditFile::open(&path, 0, FIVE, false).err().expect("another user's file was opened").to_string();
            assert!(e.contains("is owned by uid 65534"), "{e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The mode bits of `path` (not following a link).
    #[cfg(unix)]
    fn mode(path: &std::path::Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// An existing file others may read (but not write) is made the daemon's alone, its records
    /// kept (it was used as it was, world-readable).
    #[cfg(unix)]
    #[test]
    fn a_file_others_can_read_is_made_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("readable");
        let path = dir.join("audit.log");
        for was in [0o644, 0o604, 0o640] {
            std::fs::write(&path, "{\"call\":1}\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(was)).unwrap();
            let sink = AuditFile::open(&path, 0, FIVE, false).unwrap();
            assert_eq!(mode(&path), 0o600, "was {was:04o}");
            sink.write(&record(2, &json!("x"))).unwrap();
            assert_eq!(calls(&std::fs::read_to_string(&path).unwrap()), [1, 2], "was {was:04o}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file with a second name (a hard link) is refused, naming the path and the count, at the
    /// first open and when the file is opened again at the path (it was accepted).
    #[cfg(unix)]
    #[test]
    fn a_hard_linked_file_is_refused() {
        let dir = temp_dir("hardlink");
        let path = dir.join("audit.log");
        std::fs::write(&path, "").unwrap();
        std::fs::hard_link(&path, dir.join("other-name")).unwrap();
        let e = format!("{:#}", AuditFile::open(&path, 0, FIVE, false).err().expect("a hard-linked file was opened"));
        assert!(e.contains(&format!("audit file {} has 2 hard links", path.display())), "{e}");
        assert!(e.contains("Expected 1 link"), "{e}");
        std::fs::remove_file(dir.join("other-name")).unwrap();
        let sink = AuditFile::open(&path, 0, FIVE, false).unwrap();
        // One put in its place later is refused when the file is opened again.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(dir.join("planted"), "").unwrap();
        std::fs::hard_link(dir.join("planted"), &path).unwrap();
        let e = sink.write(&record(1, &json!("x"))).unwrap_err().to_string();
        assert!(e.contains("has 2 hard links"), "{e}");
        assert_eq!(std::fs::read_to_string(dir.join("planted")).unwrap(), "", "written to the planted file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The file's directory must be the daemon's and writable by it alone, as the socket
    /// directory must: one others can write to, one owned by another user (root only), and a
    /// link are refused, naming the directory, what it is and what is expected (any was used).
    /// A directory the daemon creates is its own alone.
    #[cfg(unix)]
    #[test]
    fn a_directory_others_can_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("dir");
        let logs = dir.join("logs");
        std::fs::create_dir(&logs).unwrap();
        let path = logs.join("audit.log");
        for (dir_mode, needle) in [(0o777, "has mode 0777"), (0o1777, "has mode 1777"), (0o775, "has mode 0775")] {
            std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(dir_mode)).unwrap();
            let e = format!("{:#}", AuditFile::open(&path, 0, FIVE, false).err().expect("an open directory was used"));
            assert!(
                e.contains(&format!("directory {} of audit file {} {needle}", logs.display(), path.display())),
                "{e}"
            );
            assert!(e.contains("Expected a directory owned by uid"), "{e}");
            assert!(!path.exists(), "a file was created in it");
        }
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o755)).unwrap();
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&logs, Some(65534), None).unwrap();
            let e = format!(
                "{:#}",
                AuditFile::open(&path, 0, FIVE, false).err().expect("another user's directory was used")
            );
            assert!(e.contains("is owned by uid 65534") && e.contains(&logs.display().to_string()), "{e}");
            std::os::unix::fs::chown(&logs, Some(0), None).unwrap();
        }
        AuditFile::open(&path, 0, FIVE, false).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&logs, &link).unwrap();
        let e =
            format!("{:#}", AuditFile::open(&link.join("audit.log"), 0, FIVE, false).err().expect("a link was used"));
        assert!(e.contains("is a symbolic link"), "{e}");
        let created = dir.join("new/sub");
        AuditFile::open(&created.join("audit.log"), 0, FIVE, false).unwrap();
        assert_eq!((mode(&dir.join("new")), mode(&created)), (0o700, 0o700));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Rotated files are the daemon's alone like the file, also when the file and an older
    /// rotated one were readable by others before the daemon started (their records stayed
    /// readable after the rotation).
    #[cfg(unix)]
    #[test]
    fn rotated_files_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("rotated-mode");
        let path = dir.join("audit.log");
        std::fs::write(&path, format!("{}\n", json!({"call": 0}))).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        // One rotated before, also readable by others.
        let old = dir.join("audit.log.1");
        std::fs::write(&old, format!("{}\n", json!({"call": -1}))).unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o640)).unwrap();
        let sink = AuditFile::open(&path, 300, FIVE, false).unwrap();
        let request = json!("z".repeat(150));
        for call in 1..=4 {
            sink.write(&record(call, &request)).unwrap();
        }
        let rotated: Vec<_> = (1..=5).map(|n| dir.join(format!("audit.log.{n}"))).filter(|p| p.exists()).collect();
        assert!(rotated.len() >= 3, "{rotated:?}");
        for p in rotated.iter().chain([&path]) {
            assert_eq!(mode(p), 0o600, "{}", p.display());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A new file is the daemon's own, readable and writable by it alone.
    #[cfg(unix)]
    #[test]
    fn a_new_file_is_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_dir("new");
        let path = dir.join("sub/audit.log");
        AuditFile::open(&path, 0, FIVE, false).unwrap().write(&record(1, &json!("x"))).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file renamed or removed by someone else is noticed at the next record, which goes into a
    /// new file at the path (it went into the moved or removed file).
    #[cfg(unix)]
    #[test]
    fn a_renamed_or_removed_file_is_opened_again() {
        let dir = temp_dir("moved");
        let path = dir.join("audit.log");
        let sink = AuditFile::open(&path, 0, FIVE, false).unwrap();
        sink.write(&record(1, &json!("x"))).unwrap();
        std::fs::rename(&path, dir.join("moved.log")).unwrap();
        sink.write(&record(2, &json!("x"))).unwrap();
        assert_eq!(calls(&std::fs::read_to_string(dir.join("moved.log")).unwrap()), [1]);
        assert_eq!(calls(&std::fs::read_to_string(&path).unwrap()), [2]);
        std::fs::remove_file(&path).unwrap();
        sink.write(&record(3, &json!("x"))).unwrap();
        assert_eq!(calls(&std::fs::read_to_string(&path).unwrap()), [3]);
        // What took its place must pass the checks of the first open.
        std::fs::rename(&path, dir.join("moved-again.log")).unwrap();
        std::os::unix::fs::symlink(dir.join("moved.log"), &path).unwrap();
        let e = sink.write(&record(4, &json!("x"))).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        assert_eq!(calls(&std::fs::read_to_string(dir.join("moved.log")).unwrap()), [1]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A record that does not fit on a full filesystem is not left half-written (the next record
    /// was glued to it): the file keeps its whole records only, and the write fails. Root only
    /// (a small tmpfs); CI runs as root.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_short_write_leaves_no_partial_record() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: needs root to mount a small tmpfs (CI runs as root)");
            return;
        }
        let dir = temp_dir("full");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs"])
            .arg(&dir)
            .status()
            .unwrap();
        assert!(status.success());
        struct Unmount<'a>(&'a std::path::Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
                let _ = std::fs::remove_dir_all(self.0);
            }
        }
        let _unmount = Unmount(&dir);
        let path = dir.join("audit.log");
        let sink = AuditFile::open(&path, 0, FIVE, false).unwrap();
        sink.write(&record(1, &json!("first"))).unwrap();
        // Fill the rest of the filesystem: only the audit file's last page has room left.
        let mut filler = std::fs::File::create(dir.join("filler")).unwrap();
        while std::io::Write::write(&mut filler, &[0; 4096]).is_ok_and(|n| n > 0) {}
        let big = json!("y".repeat(6000));
        let e = sink.write(&record(2, &big)).unwrap_err();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n'), "a partial record was left: {} bytes", text.len());
        assert_eq!(calls(&text), [1]);
        assert!(e.to_string().contains("could be written (is the filesystem full?)"), "{e}");
        // The next record that fits (in the room left in the file's last page) follows the last
        // whole one.
        sink.write(&record(3, &json!("small"))).unwrap();
        assert_eq!(calls(&std::fs::read_to_string(&path).unwrap()), [1, 3]);
    }

    /// The -audit-log-max* flags become the file's limit and retention with kube-apiserver's
    /// meanings: megabytes, a count (0: all), days (0: no limit).
    #[test]
    fn the_rotation_flags_become_the_files_limits() {
        let mut opts = crate::flags::Options::default();
        assert_eq!(rotation(&opts), (100 * 1024 * 1024, Retention { keep: Some(5), max_age: None }));
        opts.audit_log_max_size_mb = 3;
        opts.audit_log_max_backup = 0;
        opts.audit_log_max_age_days = 7;
        let (bytes, retention) = rotation(&opts);
        assert_eq!(bytes, 3 * 1024 * 1024);
        assert_eq!(retention, Retention { keep: None, max_age: Some(Duration::from_secs(7 * 86_400)) });
        opts.audit_log_max_size_mb = 0;
        assert_eq!(rotation(&opts).0, 0, "0: never rotated by size");
    }

    #[test]
    fn a_record_is_one_json_line() {
        let caller =
            Caller { pid: Some(9), uid: Some(0), gid: Some(0), exe: Some("/x\n\"y".into()), ..Caller::default() };
        let r = Record {
            event: Event::End,
            call: 3,
            time: UNIX_EPOCH,
            peer_at_connect: Some(&caller),
            service: "v1.Disk",
            method: "PartitionDisk",
            request: None,
            code: Some("NotFound"),
            message: Some("disk 3 \"x\"\nnot found"),
            duration: Some(Duration::from_millis(1500)),
            late: None,
            lost: None,
            dry_run: false,
            would_deny: None,
        };
        let line = json_line(&r);
        assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["event"], "end");
        assert_eq!(v["call"], 3);
        assert_eq!(v["peer_at_connect"], json!({"pid": 9, "uid": 0, "gid": 0, "exe": "/x\n\"y"}));
        assert_eq!(v.get("caller"), None, "no identifier named the caller");
        assert_eq!(v["api"], "v1.Disk");
        assert_eq!(v["code"], "NotFound");
        assert_eq!(v["message"], "disk 3 \"x\"\nnot found");
        assert_eq!(v["duration_seconds"], 1.5);
        assert!(v.get("request").is_none());
        assert!(v.get("written_late_because").is_none() && v.get("lost_records").is_none(), "{line}");
        let late: Value =
            serde_json::from_str(&json_line(&Record { late: Some("No space left on device"), ..r.clone() })).unwrap();
        assert_eq!(late["written_late_because"], "No space left on device");
        assert_eq!((late["event"].clone(), late["code"].clone()), (json!("end"), json!("NotFound")));
        let lost = Record { event: Event::Lost, lost: Some(4), ..r.clone() };
        let lost: Value = serde_json::from_str(&json_line(&lost)).unwrap();
        assert_eq!((lost["event"].clone(), lost["lost_records"].clone()), (json!("lost"), json!(4)));
        let warned: Value =
            serde_json::from_str(&json_line(&Record { would_deny: Some("no rule"), ..r.clone() })).unwrap();
        assert_eq!(warned["authorization"], json!({"mode": "warn", "denied": "no rule"}));
        let unknown = Caller::default();
        let v: Value =
            serde_json::from_str(&json_line(&Record { peer_at_connect: Some(&unknown), ..r.clone() })).unwrap();
        assert_eq!(v["peer_at_connect"], Value::Null);
        // The caller as the identifier named it, its values escaped by JSON.
        let pod = PodContainer {
            namespace: "kube-system".into(),
            pod: "csi-node-\"x\"".into(),
            pod_uid: "u".into(),
            container: "c".into(),
            container_id: "id".into(),
            image: "i".into(),
        };
        let named =
            Caller { workload: Some(Workload::Pod(pod)), cgroup: Some("/kubepods/pod-u/id".into()), ..caller.clone() };
        let v: Value =
            serde_json::from_str(&json_line(&Record { peer_at_connect: Some(&named), ..r.clone() })).unwrap();
        assert_eq!(
            v["caller"],
            json!({"kind": "pod", "namespace": "kube-system", "pod": "csi-node-\"x\"", "pod_uid": "u", "container": "c",
                   "container_id": "id", "image": "i"})
        );
        assert_eq!(v["peer_at_connect"]["cgroup"], "/kubepods/pod-u/id");
        let unnamed = Caller { workload: Some(Workload::Unknown { why: "no runtime".into() }), ..Caller::default() };
        let v: Value = serde_json::from_str(&json_line(&Record { peer_at_connect: Some(&unnamed), ..r })).unwrap();
        assert_eq!(v["caller"], json!({"kind": "unknown", "why": "no runtime"}));
    }
}
