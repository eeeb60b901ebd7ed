//! Who is calling and what they may do, wired into the daemon: the caller identifier the
//! transport asks once per connection (`-cri-endpoint`), and the authorization policy
//! (`-authorization-policy`, `-authorization-mode`), read at start and again whenever its file
//! changes.

use crate::flags::Options;
use anyhow::Context as _;
use csi_proxy_identity::{cri::Cri, Identifier, Runtime};
use csi_proxy_server::policy::{self, Authorizer, Mode, Policy};
use csi_proxy_wire::{Caller, Workload};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// The transport's [`csi_proxy_transport::Identify`] over the identity crate.
struct Identify(Identifier);

impl csi_proxy_transport::Identify for Identify {
    fn identify(&self, caller: &Caller) -> Pin<Box<dyn Future<Output = Workload> + Send + 'static>> {
        // The identifier is shared by every connection; the future owns what it reads.
        let (me, caller) = (IDENTIFIER.get().cloned(), caller.clone());
        Box::pin(async move {
            match me {
                Some(me) => me.0.workload(&caller).await,
                None => Workload::Unknown { why: "no identifier".into() },
            }
        })
    }
}

static IDENTIFIER: std::sync::OnceLock<Arc<Identify>> = std::sync::OnceLock::new();

/// A runtime that is not asked: without `-cri-endpoint` a container's process is named by
/// container ID only.
struct NoRuntime;

impl Runtime for NoRuntime {
    fn container<'a>(&'a self, _id: &'a str) -> csi_proxy_identity::cri::Answer<'a, csi_proxy_identity::ContainerInfo> {
        Box::pin(async { Err(no_runtime()) })
    }
    fn sandbox<'a>(&'a self, _id: &'a str) -> csi_proxy_identity::cri::Answer<'a, csi_proxy_identity::SandboxInfo> {
        Box::pin(async { Err(no_runtime()) })
    }
}

fn no_runtime() -> csi_proxy_identity::RuntimeError {
    csi_proxy_identity::RuntimeError::Connect { endpoint: "(none)".into(), why: "-cri-endpoint is empty".into() }
}

/// Names every connection's caller from now on.
pub fn start_identifier(opts: &Options) {
    let runtime: Arc<dyn Runtime> = match &opts.cri_endpoint {
        Some(endpoint) => Arc::new(Cri::new(endpoint.clone())),
        None => Arc::new(NoRuntime),
    };
    let identify = Arc::new(Identify(Identifier::new(runtime)));
    if IDENTIFIER.set(identify.clone()).is_ok() {
        csi_proxy_transport::set_identifier(identify);
    }
    let endpoint = opts.cri_endpoint.as_ref().map_or("(none)".to_string(), |p| p.display().to_string());
    tracing::info!(cri_endpoint = %endpoint, "callers are named by pod and container through the container runtime");
}

/// The policy file as last read: its text's fingerprint, to tell a change from a touch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    modified: Option<SystemTime>,
    len: u64,
    text: String,
}

fn read(path: &Path) -> anyhow::Result<(Policy, Seen)> {
    let meta = std::fs::metadata(path).with_context(|| format!("cannot read {}", path.display()))?;
    if meta.len() > policy::file::MAX_BYTES as u64 {
        anyhow::bail!("{}: {} bytes; at most {} are read", path.display(), meta.len(), policy::file::MAX_BYTES);
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let policy = policy::parse(&text).with_context(|| format!("{}", path.display()))?;
    Ok((policy, Seen { modified: meta.modified().ok(), len: meta.len(), text }))
}

/// How often the policy file is looked at for a change.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// The authorizer of `-authorization-policy`, if given: read and checked now (a fault stops the
/// daemon from starting, naming the line), then watched for changes by a task of its own.
pub fn start_authorizer(opts: &Options) -> anyhow::Result<Option<Arc<Authorizer>>> {
    let Some(path) = opts.authorization_policy.clone() else {
        tracing::warn!(
            "no -authorization-policy: any caller that can reach the pipes or sockets may call every method; \
             callers are still named in the audit trail"
        );
        return Ok(None);
    };
    let (policy, seen) = read(&path).context("-authorization-policy")?;
    let mode = if opts.authorization_warn_only { Mode::Warn } else { Mode::Enforce };
    tracing::info!(file = %path.display(), rules = policy.rule_count(), mode = ?mode, "authorization policy in force");
    let authorizer = Arc::new(Authorizer::new(policy, mode));
    tokio::spawn(watch(path, seen, authorizer.clone()));
    Ok(Some(authorizer))
}

/// Reloads the policy whenever its file's text changes; a file that does not read or check
/// leaves the policy in force as it is, and says so (once per change).
async fn watch(path: PathBuf, mut seen: Seen, authorizer: Arc<Authorizer>) {
    let mut failed: Option<String> = None;
    loop {
        tokio::time::sleep(RELOAD_EVERY).await;
        let meta = std::fs::metadata(&path).ok();
        let unchanged = meta.as_ref().is_some_and(|m| m.modified().ok() == seen.modified && m.len() == seen.len);
        if unchanged && failed.is_none() {
            continue;
        }
        match read(&path) {
            Ok((_, now)) if now.text == seen.text => {
                seen = now;
                failed = None;
            }
            Ok((policy, now)) => {
                tracing::info!(file = %path.display(), rules = policy.rule_count(), "authorization policy reloaded");
                authorizer.replace(policy);
                seen = now;
                failed = None;
            }
            Err(e) => {
                let why = format!("{e:#}");
                if failed.as_deref() != Some(why.as_str()) {
                    tracing::error!(file = %path.display(), error = %why,
                        "the changed authorization policy was not taken: the one read before stays in force");
                    failed = Some(why);
                }
            }
        }
    }
}
