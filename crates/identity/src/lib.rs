//! Who is calling, in Kubernetes terms: a connection's process ([`Caller`], as the transport
//! read it from the OS at accept) named as a pod's container, the host, or unknown.
//!
//! - [`cgroup`]: where a Linux process runs, read from its cgroup path: the pod UID and container
//!   ID that containerd and CRI-O put there, under the kubelet's systemd or cgroupfs driver.
//! - [`cri`]: the read-only questions asked of the node's container runtime (ListContainers,
//!   ListPodSandbox of the CRI's `runtime.v1`), messages written from the published field numbers.
//! - Windows: the transport asks the OS at accept whether the client process runs in a
//!   container and which ([`Isolation`], from the host compute service); the ID it names is
//!   looked up in the runtime as a Linux cgroup's is.
//! - [`Identifier`]: the two together, with a bounded cache: one runtime query per container, not
//!   per connection.
//!
//! A name is never guessed: what the cgroup and the runtime do not both say is
//! [`Workload::Unknown`], with why.

pub mod cgroup;
pub mod cri;

use csi_proxy_sync::LockExt;
use csi_proxy_wire::{Caller, Isolation, PodContainer, Workload};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use cri::{ContainerInfo, Runtime, RuntimeError, SandboxInfo};

/// Containers remembered at most; past this the oldest half is forgotten (a node runs at most
/// a few hundred).
pub const CACHE: usize = 1024;

/// How long "the runtime does not know this container" is remembered, so that a caller
/// reconnecting in a loop costs the runtime one query per this interval, not one per connection.
pub const NEGATIVE_TTL: Duration = Duration::from_secs(5);

/// Names callers: the cgroup (or the container ID Windows gave), then the runtime.
pub struct Identifier {
    runtime: Arc<dyn Runtime>,
    cache: Mutex<HashMap<String, Cached>>,
}

#[derive(Clone)]
enum Cached {
    Known(PodContainer),
    Unknown { why: String, until: Instant },
}

impl Identifier {
    pub fn new(runtime: Arc<dyn Runtime>) -> Self {
        Identifier { runtime, cache: Mutex::default() }
    }

    /// Who `caller` is.
    pub async fn workload(&self, caller: &Caller) -> Workload {
        let place = match (&caller.cgroup, &caller.isolation) {
            // Linux: in no pod's cgroup is a host process only if it also shares the host's
            // mount namespace; a container Kubernetes did not start (LXC, nspawn, a cgroup
            // layout not known here) does not, and its /proc/<pid>/exe is its own file.
            (Some(path), _) => match (cgroup::parse(path), caller.host_mount_namespace) {
                (cgroup::Place::Host, Some(true)) => cgroup::Place::Host,
                (cgroup::Place::Host, Some(false)) => {
                    return unknown("a process in a mount namespace of its own, in no pod's cgroup: a container not run by Kubernetes");
                }
                (cgroup::Place::Host, None) => {
                    return unknown("the connecting process's mount namespace could not be read (it may have exited)");
                }
                (place, _) => place,
            },
            // Windows: what the OS answered for the process (the transport asked it at accept).
            (None, Some(Isolation::Container { id })) => cgroup::Place::Container { id: id.clone(), pod_uid: None },
            (None, Some(Isolation::Host)) => cgroup::Place::Host,
            (None, Some(Isolation::Unknown { why })) => return unknown(why),
            (None, None) if caller.pid.is_none() => {
                return unknown("the OS did not name the connecting process (on Linux the daemon needs the host's PID namespace: hostPID)");
            }
            // Never "host" by default: only the OS's answer (above) says a process is in no
            // container.
            (None, None) if caller.user.is_some() => {
                return unknown("the OS did not say whether the connecting process runs in a container");
            }
            (None, None) => return unknown("the connecting process's cgroup could not be read (it may have exited)"),
        };
        match place {
            cgroup::Place::Host => Workload::Host,
            cgroup::Place::OutsideKubernetes { what } => {
                unknown(&format!("a container not run by Kubernetes ({what})"))
            }
            cgroup::Place::Pod { pod_uid } => {
                unknown(&format!("a process of pod {pod_uid} outside its containers (the pod's own cgroup)"))
            }
            cgroup::Place::Container { id, pod_uid } => self.container(&id, pod_uid.as_deref()).await,
        }
    }

    async fn container(&self, id: &str, pod_uid: Option<&str>) -> Workload {
        let now = Instant::now();
        match self.cache.lock_ignoring_poison().get(id).cloned() {
            Some(Cached::Known(p)) => return Workload::Pod(p),
            Some(Cached::Unknown { why, until }) if until > now => return Workload::Unknown { why },
            _ => {}
        }
        let answer = self.ask(id, pod_uid).await;
        let cached = match &answer {
            Ok(p) => Cached::Known(p.clone()),
            // A runtime that failed to answer is asked again at the next connection.
            Err(Asked::Unavailable(_)) => return unknown_of(answer),
            Err(Asked::NotNamed(why)) => Cached::Unknown { why: why.clone(), until: now + NEGATIVE_TTL },
        };
        let mut cache = self.cache.lock_ignoring_poison();
        if cache.len() >= CACHE {
            // The negative entries first, then any: a bound, not an LRU.
            cache.retain(|_, c| matches!(c, Cached::Known(_)));
            if cache.len() >= CACHE {
                let drop: Vec<String> = cache.keys().take(CACHE / 2).cloned().collect();
                for k in drop {
                    cache.remove(&k);
                }
            }
        }
        cache.insert(id.to_string(), cached);
        drop(cache);
        unknown_of(answer)
    }

    async fn ask(&self, id: &str, pod_uid: Option<&str>) -> Result<PodContainer, Asked> {
        let shown = cgroup::short(id);
        let container = match self.runtime.container(id).await {
            Ok(Some(c)) => c,
            Ok(None) => return Err(Asked::NotNamed(format!("the container runtime knows no container {shown}"))),
            Err(e) => return Err(Asked::Unavailable(format!("the container runtime did not answer: {e}"))),
        };
        let sandbox = match self.runtime.sandbox(&container.sandbox_id).await {
            Ok(Some(s)) => s,
            Ok(None) => {
                return Err(Asked::NotNamed(format!("the container runtime knows no pod of container {shown}")));
            }
            Err(e) => return Err(Asked::Unavailable(format!("the container runtime did not answer: {e}"))),
        };
        // The cgroup is the kernel's word, the runtime's answer a daemon's: they must agree.
        if let Some(uid) = pod_uid {
            if uid != sandbox.uid {
                return Err(Asked::NotNamed(format!(
                    "the runtime puts container {shown} in pod UID {:?} but its cgroup is in pod UID {uid:?}",
                    cgroup::bounded(&sandbox.uid)
                )));
            }
        }
        Ok(PodContainer {
            namespace: cgroup::bounded(&sandbox.namespace),
            pod: cgroup::bounded(&sandbox.name),
            pod_uid: cgroup::bounded(&sandbox.uid),
            container: cgroup::bounded(&container.name),
            container_id: id.to_string(),
            image: cgroup::bounded(&container.image),
        })
    }
}

enum Asked {
    /// The runtime answered, and the answer names no pod's container.
    NotNamed(String),
    /// The runtime could not be asked.
    Unavailable(String),
}

fn unknown(why: &str) -> Workload {
    Workload::Unknown { why: cgroup::bounded(why) }
}

fn unknown_of(answer: Result<PodContainer, Asked>) -> Workload {
    match answer {
        Ok(p) => Workload::Pod(p),
        Err(Asked::NotNamed(why) | Asked::Unavailable(why)) => unknown(&why),
    }
}

#[cfg(test)]
mod tests;
