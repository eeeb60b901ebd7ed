//! Who is on the other end of a connection, as the OS reports it. The transport learns it once
//! per connection and attaches it to every request of that connection (as an `Arc<Caller>` in
//! the request's extensions); the server records it in the audit trail.

use std::fmt;

/// The client process of a connection as the OS recorded it when the client connected (Linux:
/// SO_PEERCRED; Windows: the pipe's client process), not necessarily the process that sends a
/// given call on it. Every field is what the OS answered; a field the OS would not tell (a process
/// that exited, access denied) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// Process ID (Linux: SO_PEERCRED; Windows: GetNamedPipeClientProcessId).
    pub pid: Option<u32>,
    /// Linux: the user and group IDs the socket was connected with (SO_PEERCRED).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Windows: the SID of the user the process runs as (`S-1-5-…`), from its token. A SID
    /// rather than a name: turning it into a name may ask a domain controller.
    pub user: Option<String>,
    /// The process's executable (Linux: `/proc/<pid>/exe`; Windows: its image path).
    pub exe: Option<String>,
    /// Linux: the process's cgroup (the unified hierarchy's path, else the first v1 line naming a
    /// pod), read at accept while the process was known to be the one that connected; it names
    /// the pod and container for the container runtimes Kubernetes uses. Bounded to
    /// [`MAX_CGROUP`] bytes.
    pub cgroup: Option<String>,
    /// Linux: whether the process shares the host's mount namespace (PID 1's, the host's init
    /// when the daemon sees the host's PIDs; the daemon's own where PID 1's cannot be read): a
    /// process in no container does, a container's does not. Read with the cgroup; `None` when it
    /// could not be.
    pub host_mount_namespace: Option<bool>,
    /// Windows: whether the process runs in a container, as the OS answered when the client
    /// connected (see [`Isolation`]); `None` where nothing asked (Linux, where the cgroup says
    /// it; in-process tests).
    pub isolation: Option<Isolation>,
    /// Who the caller is in Kubernetes terms, resolved once per connection by the daemon's
    /// identifier; `None` where none ran (in-process tests, a transport used alone).
    pub workload: Option<Workload>,
}

/// Whether a Windows process runs in a container, as the OS answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Isolation {
    /// In no container: in no job object at all, or in none that a compute system of the host
    /// (HCS) holds. A HostProcess container's process is one of these: a host process in a job
    /// object, with the host's view of everything.
    Host,
    /// In the process-isolated container (HCS compute system) with this ID; containerd names
    /// the compute system by the CRI container ID.
    Container { id: String },
    /// It could not be told; `why` says what failed (bounded text).
    Unknown { why: String },
}

/// The longest cgroup path a [`Caller`] keeps: a real one is under 300 bytes.
pub const MAX_CGROUP: usize = 1024;

/// The caller of a connection in the terms an operator thinks in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Workload {
    /// A container of a pod, as the node's container runtime names them (CRI).
    Pod(PodContainer),
    /// A process of the host, in no container: [`Caller::exe`] and the user say which.
    Host,
    /// It could not be told who this is; `why` says what was missing (bounded text). Never a
    /// guess: a policy grants nothing to an unknown caller but what it grants to anyone.
    Unknown { why: String },
}

/// A pod's container, as the container runtime answered for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodContainer {
    pub namespace: String,
    pub pod: String,
    pub pod_uid: String,
    /// The container's name in the pod spec.
    pub container: String,
    /// The runtime's container ID (64 hex digits for containerd and CRI-O).
    pub container_id: String,
    /// The image as the pod spec names it (`registry/name:tag`).
    pub image: String,
}

impl fmt::Display for Workload {
    /// `pod=ns/name container=c image=i`, `host` or `unknown (why)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::Pod(p) => {
                write!(f, "pod={}/{} container={} image={:?}", p.namespace, p.pod, p.container, p.image)
            }
            Workload::Host => f.write_str("host"),
            Workload::Unknown { why } => write!(f, "unknown ({why})"),
        }
    }
}

impl Caller {
    /// Windows: the ID of the container the process runs in, when the OS named one.
    pub fn container_id(&self) -> Option<&str> {
        match &self.isolation {
            Some(Isolation::Container { id }) => Some(id),
            _ => None,
        }
    }

    /// Whether the OS told nothing at all.
    pub fn is_unknown(&self) -> bool {
        *self == Caller::default()
    }
}

impl fmt::Display for Caller {
    /// `pid=12 uid=0 gid=0 exe=/usr/bin/x`, the fields known; `unknown` when none is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unknown() {
            return f.write_str("unknown");
        }
        let mut sep = "";
        let mut field = |f: &mut fmt::Formatter<'_>, name: &str, value: &dyn fmt::Display| {
            let r = write!(f, "{sep}{name}={value}");
            sep = " ";
            r
        };
        if let Some(v) = self.pid {
            field(f, "pid", &v)?;
        }
        if let Some(v) = self.uid {
            field(f, "uid", &v)?;
        }
        if let Some(v) = self.gid {
            field(f, "gid", &v)?;
        }
        if let Some(v) = &self.user {
            field(f, "user", v)?;
        }
        if let Some(v) = &self.exe {
            field(f, "exe", &format_args!("{v:?}"))?;
        }
        if let Some(v) = self.container_id() {
            // A container ID is 64 hex digits; the first 12 name it (as `crictl ps` does).
            field(f, "container", &v.chars().take(12).collect::<String>())?;
        }
        if let Some(v) = &self.workload {
            field(f, "as", v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_known_fields() {
        assert_eq!(Caller::default().to_string(), "unknown");
        let c = Caller { pid: Some(7), uid: Some(0), exe: Some("/bin/a b".into()), ..Caller::default() };
        assert_eq!(c.to_string(), r#"pid=7 uid=0 exe="/bin/a b""#);
        let pod = PodContainer {
            namespace: "kube-system".into(),
            pod: "p".into(),
            container: "c".into(),
            ..Default::default()
        };
        let c = Caller { pid: Some(7), workload: Some(Workload::Pod(pod)), ..Caller::default() };
        assert_eq!(c.to_string(), r#"pid=7 as=pod=kube-system/p container=c image="""#);
        let id = "3f2a9c0b7d1e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c".to_string();
        let c = Caller { pid: Some(7), isolation: Some(Isolation::Container { id }), ..Caller::default() };
        assert_eq!(c.to_string(), "pid=7 container=3f2a9c0b7d1e");
        assert_eq!(c.container_id().map(str::len), Some(64));
        assert_eq!(Caller { isolation: Some(Isolation::Host), ..c }.container_id(), None);
    }
}
