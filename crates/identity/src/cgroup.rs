//! Where a Linux process runs, from its cgroup path (`/proc/<pid>/cgroup`).
//!
//! The kubelet puts each pod in a cgroup named by the pod's UID, and the runtime puts each
//! container in one named by the container's ID under it. With the kubelet's two cgroup drivers
//! and the two CRI runtimes that gives four layouts (a Guaranteed pod has no QoS level):
//!
//! | driver   | runtime    | container's cgroup                                                                 |
//! |----------|------------|------------------------------------------------------------------------------------|
//! | systemd  | containerd | `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/cri-containerd-<id>.scope` |
//! | cgroupfs | containerd | `/kubepods/burstable/pod<uid>/<id>`                                                |
//! | systemd  | CRI-O      | `/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice/crio-<id>.scope` |
//! | cgroupfs | CRI-O      | `/kubepods/besteffort/pod<uid>/crio-<id>`                                          |
//!
//! (the systemd driver writes the UID's dashes as underscores). A daemon in its own cgroup
//! namespace sees other pods' paths relative to its own (`/../../besteffort/pod<uid>/<id>`).
//! Segments below the container's (cgroups a container made inside its own) do not change which
//! container it is.

/// What a cgroup path says about its process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// In container `id`, of the pod with this UID where the path names one (Windows gives only
    /// the container).
    Container { id: String, pod_uid: Option<String> },
    /// In a pod's cgroup but in none of its containers'.
    Pod { pod_uid: String },
    /// In a container that no pod holds (`docker run`, podman, a systemd-nspawn machine).
    OutsideKubernetes { what: String },
    /// On the host: a service, a login session, the root.
    Host,
}

/// Where the process with cgroup `path` runs.
///
/// The pod segment counts only where the kubelet puts it: first in the path (after any `..` of a
/// reader in its own cgroup namespace), or below `kubepods` and a QoS level. A process that can
/// make cgroups of its own (a container with a delegated subtree, a user's systemd) could
/// otherwise name itself any pod by making `…/kubepods/pod<uid>/<id>` under its own cgroup.
pub fn parse(path: &str) -> Place {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let climbed = segments.iter().take_while(|s| **s == "..").count();
    let rest = &segments[climbed..];
    let mut i = 0;
    if rest.first().is_some_and(|s| matches!(*s, "kubepods" | "kubepods.slice")) {
        i += 1;
    }
    if rest.get(i).is_some_and(|s| is_qos(s)) {
        i += 1;
    }
    if i > 0 || climbed > 0 {
        if let Some(pod_uid) = rest.get(i).and_then(|s| pod_uid_of(s)) {
            return match rest.get(i + 1).and_then(|s| container_id_of(s)) {
                Some(Runtime { id, monitor: false }) => Place::Container { id, pod_uid: Some(pod_uid) },
                Some(Runtime { monitor: true, .. }) => {
                    Place::OutsideKubernetes { what: format!("the runtime's monitor of a container of pod {pod_uid}") }
                }
                None => Place::Pod { pod_uid },
            };
        }
    }
    match segments.iter().find_map(|s| container_id_of(s)) {
        Some(Runtime { id, .. }) => Place::OutsideKubernetes { what: format!("container {}", short(&id)) },
        None if segments.iter().any(|s| s.starts_with("kubepods") || pod_uid_of(s).is_some()) => {
            Place::OutsideKubernetes { what: format!("cgroup {}", bounded(path)) }
        }
        None => Place::Host,
    }
}

/// A QoS level's segment: `besteffort`, `burstable` (cgroupfs) or `kubepods-<qos>.slice`
/// (systemd). Guaranteed pods have none.
fn is_qos(segment: &str) -> bool {
    matches!(segment, "besteffort" | "burstable" | "kubepods-besteffort.slice" | "kubepods-burstable.slice")
}

/// The pod UID a pod cgroup's segment names: `pod<uid>` (cgroupfs) or
/// `kubepods[-<qos>]-pod<uid_>.slice` (systemd, dashes written as underscores).
fn pod_uid_of(segment: &str) -> Option<String> {
    let uid = match segment.strip_suffix(".slice") {
        Some(slice) => slice.rsplit_once("-pod").filter(|(head, _)| head.starts_with("kubepods"))?.1.replace('_', "-"),
        None => segment.strip_prefix("pod")?.to_string(),
    };
    is_uid(&uid).then_some(uid)
}

/// A pod UID: hex digits in five dash-separated groups (8-4-4-4-12), as Kubernetes makes them.
fn is_uid(s: &str) -> bool {
    let groups: Vec<&str> = s.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

struct Runtime {
    id: String,
    /// CRI-O's conmon, which watches a container from beside it.
    monitor: bool,
}

/// The container ID a container cgroup's segment names: `<id>`, `crio-<id>`,
/// `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`, `libpod-<id>.scope`;
/// CRI-O's monitor is `crio-conmon-<id>[.scope]`.
fn container_id_of(segment: &str) -> Option<Runtime> {
    let s = segment.strip_suffix(".scope").unwrap_or(segment);
    let (id, monitor) = if let Some(id) = s.strip_prefix("crio-conmon-") {
        (id, true)
    } else {
        let id = ["cri-containerd-", "crio-", "docker-", "libpod-"].iter().find_map(|p| s.strip_prefix(p)).unwrap_or(s);
        (id, false)
    };
    is_container_id(id).then(|| Runtime { id: id.to_string(), monitor })
}

/// A runtime's container ID: 64 lowercase hex digits (containerd, CRI-O and Docker all make
/// them so).
fn is_container_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A container ID as logs show it: its first 12 digits, as `crictl ps` does.
pub fn short(id: &str) -> &str {
    let mut end = id.len().min(12);
    while !id.is_char_boundary(end) {
        end -= 1;
    }
    &id[..end]
}

/// The longest value of a runtime's answer (a name, an image) kept: Kubernetes names are at most
/// 253 bytes; images a little longer.
pub const MAX_VALUE: usize = 512;

/// `s` cut to [`MAX_VALUE`] bytes (on a character boundary), control characters replaced: what
/// the runtime answers reaches logs and audit records.
pub fn bounded(s: &str) -> String {
    let mut end = s.len().min(MAX_VALUE);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].chars().map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a9c0b7d1e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c";
    const UID: &str = "7b0c1f2e-3d4a-4b5c-8d6e-9f0a1b2c3d4e";

    fn container() -> Place {
        Place::Container { id: ID.into(), pod_uid: Some(UID.into()) }
    }

    #[test]
    fn the_four_layouts_name_pod_and_container() {
        let u = UID.replace('-', "_");
        for path in [
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice/cri-containerd-{ID}.scope"
            ),
            format!("/kubepods/burstable/pod{UID}/{ID}"),
            format!("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice/crio-{ID}.scope"),
            format!("/kubepods/besteffort/pod{UID}/crio-{ID}"),
            // Guaranteed pods have no QoS level.
            format!("/kubepods.slice/kubepods-pod{u}.slice/cri-containerd-{ID}.scope"),
            format!("/kubepods/pod{UID}/{ID}"),
            // Seen from a daemon in its own cgroup namespace (below the kubepods it shares with
            // the caller); a cgroup the container made.
            format!("/../../besteffort/pod{UID}/{ID}/inner"),
            format!("/../../pod{UID}/{ID}"),
        ] {
            assert_eq!(parse(&path), container(), "{path}");
        }
    }

    #[test]
    fn what_is_not_a_pods_container_is_said() {
        assert_eq!(parse(&format!("/kubepods/burstable/pod{UID}")), Place::Pod { pod_uid: UID.into() });
        assert!(matches!(
            parse(&format!("/kubepods.slice/kubepods-pod{}.slice/crio-conmon-{ID}.scope", UID.replace('-', "_"))),
            Place::OutsideKubernetes { .. }
        ));
        assert!(matches!(parse(&format!("/system.slice/docker-{ID}.scope")), Place::OutsideKubernetes { .. }));
        // A pod-like segment not under the kubelet's root is not a pod, nor one under a
        // `kubepods` that a process made below a cgroup of its own.
        assert!(matches!(parse(&format!("/user.slice/pod{UID}/{ID}")), Place::OutsideKubernetes { .. }));
        for forged in [
            format!("/system.slice/docker-{ID}.scope/kubepods/pod{UID}/{ID}"),
            format!("/user.slice/user-1000.slice/user@1000.service/kubepods/pod{UID}/{ID}"),
            format!("/../../system.slice/x.scope/kubepods/besteffort/pod{UID}/{ID}"),
            format!("/kubepods/besteffort/other/pod{UID}/{ID}"),
        ] {
            assert!(matches!(parse(&forged), Place::OutsideKubernetes { .. }), "{forged}");
        }
        // A container that made cgroups of its own is still that container.
        let nested = format!(
            "/kubepods/besteffort/pod{UID}/{ID}/kubepods/pod00000000-0000-0000-0000-000000000000/{}",
            "e".repeat(64)
        );
        assert_eq!(parse(&nested), container());
        for host in ["/", "/system.slice/kubelet.service", "/user.slice/user-0.slice/session-3.scope", "/init.scope"] {
            assert_eq!(parse(host), Place::Host, "{host}");
        }
        // Not a container ID: too short, upper case.
        assert_eq!(parse(&format!("/kubepods/pod{UID}/abc")), Place::Pod { pod_uid: UID.into() });
        assert_eq!(parse(&format!("/kubepods/pod{UID}/{}", ID.to_uppercase())), Place::Pod { pod_uid: UID.into() });
    }

    #[test]
    fn values_are_bounded_and_plain() {
        assert_eq!(bounded("a\nb"), "a\u{fffd}b");
        assert!(bounded(&"é".repeat(1000)).len() <= MAX_VALUE);
        assert_eq!(short(ID), &ID[..12]);
    }
}
