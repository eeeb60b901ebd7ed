//! The client of a connection, as the OS reports it: asked once when the connection is accepted
//! and attached to each of its requests (see [`csi_proxy_wire::Caller`]).

#[cfg(unix)]
use csi_proxy_wire::Caller;

/// The executable and cgroup of process `pid`, from procfs, and only if `pid` is still the
/// process that connected once they are read: a pidfd opened first tells whether it has exited
/// since (its pid could then be another process's), in which case both are `None`. What is left is
/// a client that exits and whose pid is reused between `SO_PEERCRED` and `pidfd_open`, within
/// microseconds; the kernel's `SO_PEERPIDFD` (Linux 6.5) would close it, but not every node's
/// kernel has it.
#[cfg(target_os = "linux")]
fn procfs_of(pid: u32) -> Procfs {
    use rustix::event::{poll, PollFd, PollFlags};
    let Some(raw) = rustix::process::Pid::from_raw(pid as i32) else { return Procfs::default() };
    let Ok(pidfd) = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) else {
        return Procfs::default();
    };
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok().map(|p| p.to_string_lossy().into_owned());
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok().and_then(|text| pod_cgroup(&text));
    let host_mount_namespace = same_namespace(&format!("/proc/{pid}/ns/mnt"), host_mount_namespace_link());
    // A pidfd polls readable once its process has exited.
    let mut fds = [PollFd::new(&pidfd, PollFlags::IN)];
    let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
    match poll(&mut fds, Some(&zero)) {
        Ok(0) => Procfs { exe, cgroup, host_mount_namespace },
        _ => Procfs::default(),
    }
}

/// What procfs said of a connecting process.
#[cfg(target_os = "linux")]
#[derive(Default)]
struct Procfs {
    exe: Option<String>,
    cgroup: Option<String>,
    host_mount_namespace: Option<bool>,
}

/// The host's mount namespace: PID 1's, the host's init when the daemon sees the host's PIDs;
/// where PID 1's cannot be read (a sandbox that hides it), the daemon's own, which is the host's
/// when the daemon runs on the host (the systemd unit).
#[cfg(target_os = "linux")]
fn host_mount_namespace_link() -> &'static str {
    static LINK: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    LINK.get_or_init(
        || if std::fs::metadata("/proc/1/ns/mnt").is_ok() { "/proc/1/ns/mnt" } else { "/proc/self/ns/mnt" },
    )
}

/// Whether two `/proc/<pid>/ns/<kind>` links name one namespace (the same nsfs inode).
#[cfg(target_os = "linux")]
fn same_namespace(a: &str, b: &str) -> Option<bool> {
    use std::os::unix::fs::MetadataExt;
    let (a, b) = (std::fs::metadata(a).ok()?, std::fs::metadata(b).ok()?);
    Some((a.dev(), a.ino()) == (b.dev(), b.ino()))
}

/// The one cgroup path of `/proc/<pid>/cgroup` that says where the process runs: the unified
/// hierarchy's (`0::/path`) when it names a pod or there is nothing else, else the first v1
/// controller's line naming a pod (cgroup v1 nodes), else the unified one. Bounded.
#[cfg(any(target_os = "linux", test))]
pub fn pod_cgroup(text: &str) -> Option<String> {
    let paths: Vec<(&str, &str)> = text
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some((controllers, path))
        })
        .collect();
    let unified = paths.iter().find(|(c, _)| c.is_empty()).map(|(_, p)| *p);
    let names_pod = |p: &&str| p.contains("kubepods");
    let chosen = unified
        .filter(names_pod)
        .or_else(|| paths.iter().map(|(_, p)| *p).find(names_pod))
        .or(unified)
        .or_else(|| paths.first().map(|(_, p)| *p))?;
    let mut end = chosen.len().min(csi_proxy_wire::caller::MAX_CGROUP);
    while !chosen.is_char_boundary(end) {
        end -= 1;
    }
    Some(chosen[..end].to_string())
}

/// The peer of a unix socket connection as it connected: SO_PEERCRED's pid, uid and gid (fixed by
/// the kernel at connect, whoever writes on the connection later), and that pid's executable and
/// cgroup, read now (at accept). Linux would also give each write's sender (SO_PASSCRED), but the
/// bytes reach HTTP/2 through plain reads, and tying a request's frames back to the writes that
/// carried them would take a transport of its own; so the audit trail names this connect-time
/// peer only.
#[cfg(unix)]
pub fn of_unix_stream(stream: &tokio::net::UnixStream) -> Caller {
    let Ok(cred) = stream.peer_cred() else { return Caller::default() };
    // 0 when the peer is in no PID namespace this process can see (a daemon in a container
    // without the host's PID namespace): no process to read.
    let pid = cred.pid().and_then(|p| u32::try_from(p).ok()).filter(|&p| p != 0);
    #[cfg(target_os = "linux")]
    let Procfs { exe, cgroup, host_mount_namespace } = pid.map(procfs_of).unwrap_or_default();
    #[cfg(not(target_os = "linux"))]
    let (exe, cgroup, host_mount_namespace) = (None, None, None);
    Caller { pid, uid: Some(cred.uid()), gid: Some(cred.gid()), exe, cgroup, host_mount_namespace, ..Caller::default() }
}

#[cfg(any(windows, test))]
pub mod pipe_client;

#[cfg(windows)]
pub use windows::of_pipe;

#[cfg(windows)]
#[allow(unsafe_code)] // the pipe, process, token and HCS queries
mod windows;

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_unix_peer_is_this_process() {
        let (a, _b) = tokio::net::UnixStream::pair().unwrap();
        let c = of_unix_stream(&a);
        assert_eq!(c.pid, Some(std::process::id()));
        assert_eq!(c.uid, Some(rustix::process::getuid().as_raw()));
        assert_eq!(c.gid, Some(rustix::process::getgid().as_raw()));
        let me = std::env::current_exe().unwrap();
        assert_eq!(c.exe.as_deref(), Some(me.to_str().unwrap()));
        let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        assert_eq!(c.cgroup, pod_cgroup(&mine));
        assert!(c.cgroup.is_some());
        assert_eq!(c.host_mount_namespace, same_namespace("/proc/self/ns/mnt", host_mount_namespace_link()));
        assert!(c.host_mount_namespace.is_some());
    }

    #[test]
    fn the_cgroup_that_names_the_pod_is_kept() {
        let v2 =
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podab_cd.slice/cri-containerd-12.scope\n";
        assert_eq!(pod_cgroup(v2).unwrap(), v2[3..].trim_end());
        let v1 = "12:pids:/kubepods/burstable/podab/34\n1:name=systemd:/kubepods/burstable/podab/34\n0::/\n";
        assert_eq!(pod_cgroup(v1).unwrap(), "/kubepods/burstable/podab/34");
        assert_eq!(
            pod_cgroup("0::/user.slice/user-0.slice/session-1.scope\n").unwrap(),
            "/user.slice/user-0.slice/session-1.scope"
        );
        let long = format!("0::/{}\n", "é".repeat(2000));
        assert!(pod_cgroup(&long).unwrap().len() <= csi_proxy_wire::caller::MAX_CGROUP);
        assert_eq!(pod_cgroup(""), None);
    }
}
