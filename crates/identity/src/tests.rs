//! The identifier over a scripted runtime.

use super::*;
use crate::cri::Answer;
use std::sync::atomic::{AtomicUsize, Ordering};

const ID: &str = "3f2a9c0b7d1e4f5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c";
const UID: &str = "7b0c1f2e-3d4a-4b5c-8d6e-9f0a1b2c3d4e";

#[derive(Default)]
struct Scripted {
    containers: HashMap<String, ContainerInfo>,
    sandboxes: HashMap<String, SandboxInfo>,
    down: bool,
    asked: AtomicUsize,
}

impl Runtime for Scripted {
    fn container<'a>(&'a self, id: &'a str) -> Answer<'a, ContainerInfo> {
        self.asked.fetch_add(1, Ordering::Relaxed);
        let down = self.down;
        let answer = self.containers.get(id).cloned();
        Box::pin(async move {
            if down {
                return Err(RuntimeError::Connect { endpoint: "/run/x.sock".into(), why: "refused".into() });
            }
            Ok(answer)
        })
    }
    fn sandbox<'a>(&'a self, id: &'a str) -> Answer<'a, SandboxInfo> {
        let answer = self.sandboxes.get(id).cloned();
        Box::pin(async move { Ok(answer) })
    }
}

fn runtime(uid: &str) -> Scripted {
    let mut r = Scripted::default();
    r.containers.insert(
        ID.into(),
        ContainerInfo { sandbox_id: "sb".into(), name: "azuredisk".into(), image: "mcr/azuredisk:v1".into() },
    );
    r.sandboxes.insert(
        "sb".into(),
        SandboxInfo { name: "csi-azuredisk-node-x".into(), namespace: "kube-system".into(), uid: uid.into() },
    );
    r
}

fn in_pod() -> Caller {
    Caller { pid: Some(40), cgroup: Some(format!("/kubepods/besteffort/pod{UID}/{ID}")), ..Caller::default() }
}

#[tokio::test]
async fn a_pods_container_is_named_and_asked_for_once() {
    let runtime = Arc::new(runtime(UID));
    let id = Identifier::new(runtime.clone());
    let expected = Workload::Pod(PodContainer {
        namespace: "kube-system".into(),
        pod: "csi-azuredisk-node-x".into(),
        pod_uid: UID.into(),
        container: "azuredisk".into(),
        container_id: ID.into(),
        image: "mcr/azuredisk:v1".into(),
    });
    assert_eq!(id.workload(&in_pod()).await, expected);
    assert_eq!(id.workload(&in_pod()).await, expected);
    assert_eq!(runtime.asked.load(Ordering::Relaxed), 1, "the second connection is answered from the cache");
}

#[tokio::test]
async fn the_runtime_and_the_cgroup_must_agree_on_the_pod() {
    let id = Identifier::new(Arc::new(runtime("00000000-0000-0000-0000-000000000000")));
    let Workload::Unknown { why } = id.workload(&in_pod()).await else { panic!("named a pod the cgroup denies") };
    assert!(why.contains(UID) && why.contains("00000000-"), "{why}");
}

#[tokio::test]
async fn what_cannot_be_told_is_unknown_with_why() {
    let id = Identifier::new(Arc::new(Scripted::default()));
    let Workload::Unknown { why } = id.workload(&in_pod()).await else { panic!() };
    assert!(why.contains("knows no container") && why.contains(&ID[..12]), "{why}");
    let no_pid = Caller { uid: Some(0), ..Caller::default() };
    let Workload::Unknown { why } = id.workload(&no_pid).await else { panic!() };
    assert!(why.contains("hostPID"), "{why}");
    let host = Caller {
        pid: Some(1),
        cgroup: Some("/system.slice/kubelet.service".into()),
        host_mount_namespace: Some(true),
        ..Caller::default()
    };
    assert_eq!(id.workload(&host).await, Workload::Host);
    // In no pod's cgroup but in a mount namespace of its own: not the host.
    let elsewhere = Caller { host_mount_namespace: Some(false), ..host.clone() };
    let Workload::Unknown { why } = id.workload(&elsewhere).await else { panic!() };
    assert!(why.contains("mount namespace of its own"), "{why}");
    let down = Identifier::new(Arc::new(Scripted { down: true, ..runtime(UID) }));
    let Workload::Unknown { why } = down.workload(&in_pod()).await else { panic!() };
    assert!(why.contains("did not answer") && why.contains("refused"), "{why}");
}

#[tokio::test]
async fn an_unknown_container_is_asked_again_only_after_a_while() {
    let runtime = Arc::new(Scripted::default());
    let id = Identifier::new(runtime.clone());
    for _ in 0..10 {
        id.workload(&in_pod()).await;
    }
    assert_eq!(runtime.asked.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn the_cache_is_bounded() {
    let mut r = Scripted::default();
    for n in 0..(CACHE + 10) {
        let cid = format!("{n:064x}");
        r.containers
            .insert(cid.clone(), ContainerInfo { sandbox_id: "sb".into(), name: "c".into(), image: "i".into() });
    }
    r.sandboxes.insert("sb".into(), SandboxInfo { name: "p".into(), namespace: "n".into(), uid: UID.into() });
    let id = Identifier::new(Arc::new(r));
    for n in 0..(CACHE + 10) {
        let c = Caller { pid: Some(9), cgroup: Some(format!("/kubepods/pod{UID}/{n:064x}")), ..Caller::default() };
        assert!(matches!(id.workload(&c).await, Workload::Pod(_)));
    }
    assert!(id.cache.lock_ignoring_poison().len() <= CACHE);
}

/// A Windows pipe client as the transport names it: its pid, user SID and image, and what the OS
/// answered about its container.
fn on_windows(isolation: Option<Isolation>) -> Caller {
    Caller {
        pid: Some(4120),
        user: Some("S-1-5-93-2-1".into()),
        exe: Some(r"C:\azuredisk.exe".into()),
        isolation,
        ..Caller::default()
    }
}

#[tokio::test]
async fn a_windows_containers_process_is_named_by_its_compute_systems_id() {
    let runtime = Arc::new(runtime(UID));
    let id = Identifier::new(runtime.clone());
    let caller = on_windows(Some(Isolation::Container { id: ID.into() }));
    let Workload::Pod(p) = id.workload(&caller).await else { panic!("not named a pod") };
    assert_eq!(
        (p.namespace.as_str(), p.pod.as_str(), p.container.as_str()),
        ("kube-system", "csi-azuredisk-node-x", "azuredisk")
    );
    assert_eq!((p.pod_uid.as_str(), p.container_id.as_str()), (UID, ID));
    // The pause container's compute system (the pod's sandbox) is no container of the runtime.
    let sandbox = on_windows(Some(Isolation::Container { id: "sb".into() }));
    assert!(matches!(id.workload(&sandbox).await, Workload::Unknown { .. }));
}

#[tokio::test]
async fn a_windows_process_is_host_only_when_the_os_said_so() {
    let id = Identifier::new(Arc::new(runtime(UID)));
    assert_eq!(id.workload(&on_windows(Some(Isolation::Host))).await, Workload::Host);
    let why = "HCS could not be asked (computecore.dll: not found)";
    assert_eq!(
        id.workload(&on_windows(Some(Isolation::Unknown { why: why.into() }))).await,
        Workload::Unknown { why: why.into() }
    );
    // A pid, user and image but no answer about its container: not a guess of "host".
    let Workload::Unknown { why } = id.workload(&on_windows(None)).await else { panic!("guessed") };
    assert!(why.contains("did not say whether"), "{why}");
}
