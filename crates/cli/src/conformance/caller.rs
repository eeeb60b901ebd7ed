//! `caller-identity`: what the daemon on this node names this tool's own connection. This tool
//! runs on the host (an admin's shell, a node's service), so the daemon must name it `host`
//! (not unknown, not a pod's container): on Windows that answer comes from the client's token,
//! IsProcessInJob and the host compute service's process lists, none of which Wine has in full
//! (docs/windows.md). The daemon says whom it names in each answer's `csi-proxy-caller` header
//! (the percent-encoded text of the caller's workload: `host`, `pod=ns/name container=c
//! image="i"` or `unknown (why)`); with `-audit-log` the records of this run's connections must
//! also name this process's image and its user (a SID on Windows, a uid on Linux).

use super::check::CALLER_IDENTITY;
use super::{bounded, wrong, Report, Res, StepErr};
use csi_proxy_client::v1;
use csi_proxy_flows::Proxy;
use std::path::Path;
use std::time::Duration;

/// The response header naming the caller.
pub const CALLER_HEADER: &str = "csi-proxy-caller";

/// The most of the audit log read (its end): this run's records are the latest.
const AUDIT_TAIL: u64 = 16 << 20;

const HEADER_STEP: &str = "the daemon names this tool's connection host (csi-proxy-caller)";
const AUDIT_STEP: &str = "the audit log names this process's image and user";

pub(super) async fn caller_identity(report: &mut Report, p: &mut Proxy, path: &str, audit_log: Option<&Path>) {
    let mut c = report.check(CALLER_IDENTITY);
    c.run(HEADER_STEP, async {
        let r = p.fs.path_exists(v1::PathExistsRequest { path: path.into() }).await?;
        let header = r.metadata().get(CALLER_HEADER).map(|v| v.as_bytes().to_vec());
        header_problem(header.as_deref())
    })
    .await;
    let Some(log) = audit_log else {
        c.row(AUDIT_STEP, Res::Skipped("no -audit-log <file> given".into()), Duration::ZERO);
        return;
    };
    c.run(AUDIT_STEP, async {
        let text = tail(log).map_err(|e| wrong(format!("reading {}: {e}", log.display())))?;
        let exe = std::env::current_exe().map_err(|e| wrong(format!("this tool's own image: {e}")))?;
        audit_problem(&text, std::process::id(), &exe.to_string_lossy())
    })
    .await;
}

/// Whether the `csi-proxy-caller` header (raw bytes) says `host`.
fn header_problem(header: Option<&[u8]>) -> Result<(), StepErr> {
    let Some(raw) = header else {
        return Err(StepErr::Skip(format!(
            "the daemon's answer has no {CALLER_HEADER} header (a daemon without caller identity)"
        )));
    };
    let named = percent_encoding::percent_decode(raw).decode_utf8_lossy().into_owned();
    match named.as_str() {
        "host" => Ok(()),
        n if n.starts_with("pod=") => Err(wrong(format!(
            "named this tool a pod's container ({}), but it runs on the host (unless this very tool runs in that container)",
            bounded(n)
        ))),
        n => Err(wrong(format!("named this tool {:?}, not host", bounded(n)))),
    }
}

/// The end of `log`, at most [`AUDIT_TAIL`] bytes, from a line's start.
fn tail(log: &Path) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log)?;
    let len = f.metadata()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(AUDIT_TAIL)))?;
    let mut bytes = Vec::new();
    f.take(AUDIT_TAIL).read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    Ok(if len > AUDIT_TAIL { text.split_once('\n').map_or(String::new(), |(_, rest)| rest.to_owned()) } else { text })
}

/// Whether the latest audit record of process `pid` names `exe` (case aside on Windows) and a
/// user: a SID (`S-1-…`) on Windows, a uid elsewhere.
fn audit_problem(text: &str, pid: u32, exe: &str) -> Result<(), StepErr> {
    let peer = text
        .lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| r.get("peer_at_connect").cloned())
        .find(|peer| peer.get("pid").and_then(|p| p.as_u64()) == Some(u64::from(pid)));
    let Some(peer) = peer else {
        return Err(StepErr::Skip(format!(
            "no record of process {pid} in the audit log's end (is it this daemon's -audit-log?)"
        )));
    };
    let named = peer.get("exe").and_then(|e| e.as_str()).unwrap_or("");
    let same = if cfg!(windows) { named.eq_ignore_ascii_case(exe) } else { named == exe };
    if !same {
        return Err(wrong(format!(
            "the record of process {pid} names image {:?}, not {:?}",
            bounded(named),
            bounded(exe)
        )));
    }
    let user_ok = if cfg!(windows) {
        peer.get("user").and_then(|u| u.as_str()).is_some_and(|u| u.starts_with("S-1-"))
    } else {
        peer.get("uid").is_some_and(|u| u.is_u64())
    };
    if !user_ok {
        return Err(wrong(format!("the record of process {pid} names no user: {}", bounded(&peer.to_string()))));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(r: Result<(), StepErr>) -> String {
        match r {
            Err(StepErr::Failed(why)) => why,
            Err(StepErr::Skip(why)) => panic!("skipped, not failed: {why}"),
            Ok(()) => panic!("passed, not failed"),
        }
    }

    #[test]
    fn the_header_must_say_host() {
        assert!(header_problem(Some(b"host")).is_ok());
        assert!(matches!(header_problem(None), Err(StepErr::Skip(why)) if why.contains(CALLER_HEADER)));
        let why = failed(header_problem(Some(b"unknown%20(HCS%20could%20not%20be%20asked)")));
        assert!(why.contains("unknown (HCS could not be asked)"), "{why}");
        let why = failed(header_problem(Some(b"pod=kube-system/x%20container=c%20image=%22i%22")));
        assert!(why.contains("pod=kube-system/x container=c"), "{why}");
    }

    #[test]
    fn the_audit_log_must_name_this_process_and_its_user() {
        let (exe, user) = if cfg!(windows) {
            (r"C:\k\csi-proxyctl.exe", r#""user":"S-1-5-32-544""#)
        } else {
            ("/usr/bin/csi-proxyctl", r#""uid":0"#)
        };
        let record = |pid: u32, exe: &str, user: &str| {
            format!(
                r#"{{"event":"start","peer_at_connect":{{"exe":{},"pid":{pid},{user}}}}}"#,
                serde_json::Value::from(exe)
            )
        };
        let log = format!("{}\n{}\nnot json\n", record(7, exe, user), record(8, "/other", user));
        assert!(audit_problem(&log, 7, exe).is_ok());
        assert!(failed(audit_problem(&log, 8, exe)).contains("names image"));
        assert!(matches!(audit_problem(&log, 9, exe), Err(StepErr::Skip(_))));
        let no_user = record(7, exe, r#""gid":0"#);
        assert!(failed(audit_problem(&no_user, 7, exe)).contains("names no user"));
    }
}
