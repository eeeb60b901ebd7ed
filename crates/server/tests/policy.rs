//! The authorization policy (`csi_proxy_server::policy`) through the server's call path, over
//! the memory host: every method of the 23 APIs is judged on every path, disk, volume, share,
//! service and portal its request names; a denial is PermissionDenied naming the caller and is
//! recorded as refused (a read-only call's too); warn mode runs the call and marks its record;
//! a dry run is judged as its real call; disks named by serial number are looked up.

mod common;

use common::{api, call_as, filled, input, pool, request};
use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::{DiskHost, Hosts, VolumeHost};
use csi_proxy_server::audit::{AuditSink, Event, Record};
use csi_proxy_server::policy::{parse, Authorizer, Mode};
use csi_proxy_server::{Config, Context};
use csi_proxy_wire::{Caller, PodContainer, Workload, APIS};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Code;

/// The request fields (by .proto name) that name what a policy constrains: paths, disks,
/// volumes, shares, services, portals. `disk_name` (a lookup by page 83 name) and `iqn` (always
/// with its portal) are not.
const CONSTRAINED: &[&str] = &[
    "path",
    "source_path",
    "target_path",
    "local_path",
    "mount",
    "disk_number",
    "diskID",
    "disk_id",
    "volume_id",
    "remote_path",
    "name",
    "target_portal",
];

fn pod(namespace: &str, name: &str) -> Caller {
    Caller {
        pid: Some(40),
        uid: Some(0),
        workload: Some(Workload::Pod(PodContainer {
            namespace: namespace.into(),
            pod: name.into(),
            pod_uid: "u".into(),
            container: "driver".into(),
            container_id: "c".repeat(64),
            image: "registry.example/driver:v1".into(),
        })),
        ..Caller::default()
    }
}

/// Every group's every method, to pods of `kube-system`, on `extra`'s arguments.
fn every_method(extra: &str) -> String {
    let groups = ["disk", "filesystem", "volume", "smb", "iscsi", "system"];
    let allow: Vec<String> = groups.iter().map(|g| format!("  - {{api: {g}, methods: ['*']}}")).collect();
    format!(
        "rules:\n- name: all-methods\n  callers: [{{pod: {{namespace: kube-system}}}}]\n  allow:\n{}\n{extra}",
        allow.join("\n")
    )
}

/// What a test reads of a record: event, method, code, the caller as named, the warning.
type Kept = (Event, String, Option<String>, Option<String>, Option<String>);

#[derive(Default)]
struct Sink(Mutex<Vec<Kept>>);

impl AuditSink for Sink {
    fn write(&self, r: &Record<'_>) -> std::io::Result<()> {
        let named = r.peer_at_connect.and_then(|c| c.workload.as_ref()).map(|w| w.to_string());
        let entry =
            (r.event, r.method.to_string(), r.code.map(str::to_string), named, r.would_deny.map(str::to_string));
        self.0.lock().unwrap().push(entry);
        Ok(())
    }
}

fn context(host: Arc<MemoryHost>, policy: &str, mode: Mode) -> (Context, Arc<Sink>) {
    let sink = Arc::new(Sink::default());
    let authorizer = Arc::new(Authorizer::new(parse(policy).unwrap(), mode));
    let ctx = Context::new(Hosts::from_one(host), Config::default())
        .with_authorizer(authorizer)
        .with_audit_within(sink.clone(), Duration::from_secs(5));
    (ctx, sink)
}

/// A policy granting every method but admitting no argument refuses exactly the methods whose
/// requests name something: each operation lists every path, disk, volume, share, service and
/// portal its request carries (an operation that forgot one would be granted here).
#[tokio::test]
async fn every_argument_of_every_method_is_judged() {
    let (ctx, _) = context(Arc::new(MemoryHost::sample()), &every_method(""), Mode::Enforce);
    let pool = pool();
    let mut judged = 0;
    for a in APIS {
        let service = pool.get_service_by_name(&a.service_name()).unwrap();
        for method in service.methods() {
            let descriptor = input(&pool, &a.service_name(), method.name());
            let names_something = descriptor.fields().any(|f| CONSTRAINED.contains(&f.name()));
            let bytes = prost::Message::encode_to_vec(&filled(descriptor, 0));
            let answer = call_as(&ctx, *a, method.name(), bytes, None, Some(pod("kube-system", "p"))).await;
            let denied = answer.code == Code::PermissionDenied;
            assert_eq!(
                denied,
                names_something,
                "{}/{}: {:?} {}",
                a.service_name(),
                method.name(),
                answer.code,
                answer.message
            );
            if denied {
                assert!(answer.message.contains("pod=kube-system/p container=driver"), "{}", answer.message);
                judged += 1;
            }
        }
    }
    assert!(judged > 100, "only {judged} methods name something");
}

#[tokio::test]
async fn a_denial_names_the_caller_and_is_recorded_as_refused() {
    let host = Arc::new(MemoryHost::sample());
    let policy = every_method("  paths: [/granted]\n  disks: ['1']\n");
    let (ctx, sink) = context(host.clone(), &policy, Mode::Enforce);
    let mkdir = |path: &str| request(input(&pool(), "v1.Filesystem", "Mkdir"), &format!(r#"{{"path": "{path}"}}"#));
    let fs = api("v1.Filesystem");
    let ok = call_as(&ctx, fs, "Mkdir", mkdir("/granted/a"), None, Some(pod("kube-system", "p"))).await;
    assert_eq!(ok.code, Code::Ok, "{}", ok.message);
    let denied = call_as(&ctx, fs, "Mkdir", mkdir("/elsewhere"), None, Some(pod("kube-system", "p"))).await;
    assert_eq!(denied.code, Code::PermissionDenied);
    assert!(
        denied.message.contains(r#"rule "all-methods" does not admit path "/elsewhere" (its paths)"#),
        "{}",
        denied.message
    );
    // Another namespace's pod is named by no rule.
    let other = call_as(&ctx, fs, "Mkdir", mkdir("/granted/b"), None, Some(pod("default", "p"))).await;
    assert_eq!(other.code, Code::PermissionDenied);
    assert!(
        other.message.contains("pod=default/p") && other.message.contains("no rule names this caller"),
        "{}",
        other.message
    );
    // A caller the transport could not name, or none at all.
    let unknown = Caller { workload: Some(Workload::Unknown { why: "no runtime".into() }), ..pod("kube-system", "p") };
    let u = call_as(&ctx, fs, "Mkdir", mkdir("/granted/c"), None, Some(unknown)).await;
    assert_eq!(u.code, Code::PermissionDenied, "{}", u.message);
    assert!(u.message.contains("no runtime"), "{}", u.message);
    assert_eq!(call_as(&ctx, fs, "Mkdir", mkdir("/granted/d"), None, None).await.code, Code::PermissionDenied);
    assert!(
        host.with(|s| format!("{s:?}")).contains("/granted/a")
            && !host.with(|s| format!("{s:?}")).contains("/granted/b")
    );
    // A read-only call's denial is recorded too, though read-only calls are not.
    let exists = request(input(&pool(), "v1.Filesystem", "PathExists"), r#"{"path": "/etc"}"#);
    assert_eq!(
        call_as(&ctx, fs, "PathExists", exists, None, Some(pod("kube-system", "p"))).await.code,
        Code::PermissionDenied
    );
    let records = sink.0.lock().unwrap().clone();
    let refused: Vec<_> =
        records.iter().filter(|r| r.0 == Event::Refused).map(|r| (r.1.as_str(), r.2.as_deref())).collect();
    assert_eq!(
        refused,
        [("Mkdir", Some("PermissionDenied")); 4]
            .into_iter()
            .chain([("PathExists", Some("PermissionDenied"))])
            .collect::<Vec<_>>()
    );
    let named = records.iter().find(|r| r.0 == Event::Start).and_then(|r| r.3.clone()).unwrap();
    assert!(named.contains("pod=kube-system/p"), "{named}");
    // A dry run is judged as its real call.
    let dry = call_as(&ctx, fs, "Mkdir", mkdir("/elsewhere"), Some("true"), Some(pod("kube-system", "p"))).await;
    assert_eq!(dry.code, Code::PermissionDenied, "{}", dry.message);
}

#[tokio::test]
async fn warn_mode_runs_the_call_and_marks_its_record() {
    let host = Arc::new(MemoryHost::sample());
    let (ctx, sink) = context(host.clone(), &every_method("  paths: [/granted]\n"), Mode::Warn);
    let req = request(input(&pool(), "v1.Filesystem", "Mkdir"), r#"{"path": "/elsewhere"}"#);
    let answer = call_as(&ctx, api("v1.Filesystem"), "Mkdir", req, None, Some(pod("kube-system", "p"))).await;
    assert_eq!(answer.code, Code::Ok, "{}", answer.message);
    assert!(host.with(|s| format!("{s:?}")).contains("/elsewhere"));
    let records = sink.0.lock().unwrap().clone();
    let start = records.iter().find(|r| r.0 == Event::Start).unwrap();
    assert!(start.4.as_deref().unwrap().contains(r#"does not admit path "/elsewhere""#), "{start:?}");
    let end = records.iter().find(|r| r.0 == Event::End).unwrap();
    assert_eq!(end.4, None, "only the start record says it");
}

/// Disks a rule names by serial number are looked up with the host's reading calls; a volume is
/// judged by the disk it is on.
#[tokio::test]
async fn disks_by_serial_and_volumes_by_their_disk() {
    let host = Arc::new(MemoryHost::sample());
    host.partition_disk(1).unwrap();
    host.partition_disk(0).unwrap();
    let on_1 = host.list_volumes_on_disk(1, 0).unwrap().remove(0);
    let on_0 = host.list_volumes_on_disk(0, 0).unwrap().remove(0);
    let serial = host.list_disk_ids().unwrap()[&1].serial_number.clone();
    let (ctx, _) = context(host, &every_method(&format!("  disks: ['serial={serial}']\n")), Mode::Enforce);
    let caller = || Some(pod("kube-system", "p"));
    let stats = |n: u32| request(input(&pool(), "v1.Disk", "GetDiskStats"), &format!(r#"{{"diskNumber": {n}}}"#));
    assert_eq!(call_as(&ctx, api("v1.Disk"), "GetDiskStats", stats(1), None, caller()).await.code, Code::Ok);
    let e = call_as(&ctx, api("v1.Disk"), "GetDiskStats", stats(0), None, caller()).await;
    assert_eq!(e.code, Code::PermissionDenied);
    assert!(e.message.contains("does not admit disk 0"), "{}", e.message);
    let formatted =
        |v: &str| request(input(&pool(), "v1.Volume", "IsVolumeFormatted"), &format!(r#"{{"volumeId": "{v}"}}"#));
    assert_eq!(
        call_as(&ctx, api("v1.Volume"), "IsVolumeFormatted", formatted(&on_1), None, caller()).await.code,
        Code::Ok
    );
    let e = call_as(&ctx, api("v1.Volume"), "IsVolumeFormatted", formatted(&on_0), None, caller()).await;
    assert_eq!(e.code, Code::PermissionDenied);
    assert!(e.message.contains("on disk 0"), "{}", e.message);
}
