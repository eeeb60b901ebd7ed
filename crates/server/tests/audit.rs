//! The audit trail as the server writes it: which calls get records, what the records say, that
//! secrets never reach them, and that a call whose record cannot be written is not run.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::{FilesystemHost, Hosts};
use csi_proxy_server::audit::{AuditSink, Event, Record};
use csi_proxy_server::{Config, Context};
use csi_proxy_wire::{v1, v1alpha2, Caller};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::{Code, Request};

/// A record as it was handed to the sink.
#[derive(Debug, Clone)]
struct Kept {
    event: Event,
    call: u64,
    peer_at_connect: Option<Caller>,
    service: String,
    method: String,
    request: Option<String>,
    code: Option<&'static str>,
    message: Option<String>,
    duration: Option<Duration>,
    /// Why it was written late, if it was.
    late: Option<String>,
}

#[derive(Default)]
struct Sink {
    records: Mutex<Vec<Kept>>,
    read_only_calls: bool,
    /// Every write fails while set, as on a full filesystem.
    broken: AtomicBool,
}

impl AuditSink for Sink {
    fn write(&self, r: &Record<'_>) -> std::io::Result<()> {
        if self.broken.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("disk full"));
        }
        self.records.lock().unwrap().push(Kept {
            event: r.event,
            call: r.call,
            peer_at_connect: r.peer_at_connect.cloned(),
            service: r.service.to_string(),
            method: r.method.to_string(),
            request: r.request.map(|v| v.to_string()),
            code: r.code,
            message: r.message.map(str::to_string),
            duration: r.duration,
            late: r.late.map(str::to_string),
        });
        Ok(())
    }
    fn read_only_calls(&self) -> bool {
        self.read_only_calls
    }
}

impl Sink {
    fn records(&self) -> Vec<Kept> {
        self.records.lock().unwrap().clone()
    }
}

fn caller() -> Caller {
    Caller {
        pid: Some(4242),
        uid: Some(1000),
        gid: Some(1000),
        exe: Some("/usr/bin/driver".into()),
        ..Caller::default()
    }
}

fn from_caller<T>(message: T) -> Request<T> {
    let mut r = Request::new(message);
    r.extensions_mut().insert(Arc::new(caller()));
    r
}

fn setup(sink: Sink) -> (Context, Arc<MemoryHost>, Arc<Sink>) {
    let host = Arc::new(MemoryHost::new());
    let sink = Arc::new(sink);
    let ctx = Context::new(Hosts::from_one(host.clone()), Config::default()).with_audit(sink.clone());
    (ctx, host, sink)
}

async fn mkdir(ctx: &Context, path: &str) -> Result<(), tonic::Status> {
    let req = from_caller(v1::MkdirRequest { path: path.into() });
    ctx.unary::<_, v1::MkdirResponse>("v1.Filesystem", "Mkdir", req).await.map(drop)
}

#[tokio::test]
async fn a_changing_call_gets_a_start_and_an_end_record_naming_its_caller() {
    let (ctx, host, sink) = setup(Sink::default());
    mkdir(&ctx, r"C:\var\lib\kubelet\pods\a").await.unwrap();
    assert!(host.with(|s| !s.tree.is_empty()), "the call ran");
    let r = sink.records();
    assert_eq!(r.len(), 2, "{r:#?}");
    let (start, end) = (&r[0], &r[1]);
    assert_eq!((start.event, end.event), (Event::Start, Event::End));
    assert_eq!(start.call, end.call);
    for x in [start, end] {
        assert_eq!(x.peer_at_connect, Some(caller()));
        assert_eq!((x.service.as_str(), x.method.as_str()), ("v1.Filesystem", "Mkdir"));
    }
    assert!(start.request.as_deref().unwrap().contains(r"C:\\var\\lib\\kubelet\\pods\\a"), "{start:?}");
    assert_eq!((start.code, start.duration), (None, None));
    assert_eq!((end.code, end.message.as_deref(), end.request.as_deref()), (Some("OK"), None, None));
    assert!(end.duration.is_some());

    // The next call has its own number.
    mkdir(&ctx, r"C:\var\lib\kubelet\pods\b").await.unwrap();
    let r = sink.records();
    assert_eq!(r.len(), 4);
    assert_ne!(r[2].call, r[0].call);
    assert_eq!(r[2].call, r[3].call);
}

#[tokio::test]
async fn read_only_calls_are_recorded_only_when_asked() {
    for read_only_calls in [false, true] {
        let (ctx, _host, sink) = setup(Sink { read_only_calls, ..Sink::default() });
        let req = from_caller(v1::PathExistsRequest { path: r"C:\var\lib\kubelet\x".into() });
        ctx.unary::<_, v1::PathExistsResponse>("v1.Filesystem", "PathExists", req).await.unwrap();
        let events: Vec<Event> = sink.records().iter().map(|r| r.event).collect();
        let expected = if read_only_calls { vec![Event::Start, Event::End] } else { vec![] };
        assert_eq!(events, expected, "read_only_calls: {read_only_calls}");
    }
}

#[tokio::test]
async fn a_request_that_cannot_be_read_is_recorded_as_refused_without_a_start() {
    let (ctx, _host, sink) = setup(Sink::default());
    let req = from_caller(csi_proxy_wire::v1beta2::PartitionDiskRequest { disk_id: "3; rm".into() });
    let e = ctx
        .unary::<_, csi_proxy_wire::v1beta2::PartitionDiskResponse>("v1beta2.Disk", "PartitionDisk", req)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let r = sink.records();
    assert_eq!(r.len(), 1, "{r:#?}");
    assert_eq!(r[0].event, Event::Refused);
    assert_eq!(r[0].code, Some("InvalidArgument"));
    assert_eq!(r[0].message.as_deref(), Some(e.message()));
    assert_eq!(r[0].peer_at_connect, Some(caller()));

    // One the operation itself refuses is a call that started and ended with the refusal.
    let e = mkdir(&ctx, "").await.unwrap_err();
    let r = sink.records();
    let tail: Vec<_> = r[1..].iter().map(|k| (k.event, k.code)).collect();
    assert_eq!(tail, [(Event::Start, None), (Event::End, Some("InvalidArgument"))]);
    assert_eq!(r[2].message.as_deref(), Some(e.message()));
}

#[tokio::test]
async fn a_call_whose_start_record_fails_is_not_run() {
    let (ctx, host, sink) = setup(Sink { broken: true.into(), ..Sink::default() });
    let e = mkdir(&ctx, r"C:\var\lib\kubelet\pods\a").await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("audit record could not be written (disk full)"), "{e:?}");
    assert!(host.with(|s| s.tree.is_empty()), "the host was touched");
    assert!(sink.records().is_empty());
}

#[tokio::test]
async fn secrets_never_reach_the_records() {
    let (ctx, _host, sink) = setup(Sink::default());
    let smb_password = "Tr0ub4dor&3-smb";
    let chap_secret = "chap-secret-9f2e41";
    let mutual_secret = "mutual-secret-77aa0c";

    let req = from_caller(v1::NewSmbGlobalMappingRequest {
        remote_path: r"\\srv\share".into(),
        local_path: r"C:\var\lib\kubelet\plugins\smb\mnt".into(),
        username: r"DOMAIN\alice".into(),
        password: smb_password.into(),
    });
    let _ = ctx.unary::<_, v1::NewSmbGlobalMappingResponse>("v1.Smb", "NewSmbGlobalMapping", req).await;
    // Invalid (no host and share): the records of the refusal must not quote the password either.
    let req = from_caller(v1::NewSmbGlobalMappingRequest {
        remote_path: "nohost".into(),
        local_path: String::new(),
        username: "alice".into(),
        password: smb_password.into(),
    });
    let refused = ctx.unary::<_, v1::NewSmbGlobalMappingResponse>("v1.Smb", "NewSmbGlobalMapping", req).await;
    assert_eq!(refused.unwrap_err().code(), Code::InvalidArgument);
    let req = from_caller(v1alpha2::SetMutualChapSecretRequest { mutual_chap_secret: mutual_secret.into() });
    ctx.unary::<_, v1alpha2::SetMutualChapSecretResponse>("v1alpha2.Iscsi", "SetMutualChapSecret", req).await.unwrap();
    let req = from_caller(v1alpha2::ConnectTargetRequest {
        target_portal: Some(v1alpha2::TargetPortal { target_address: "10.0.0.5".into(), target_port: 3260 }),
        iqn: "iqn.2024-01.com.example:t1".into(),
        auth_type: v1alpha2::AuthenticationType::MutualChap as i32,
        chap_username: "initiator".into(),
        chap_secret: chap_secret.into(),
    });
    let _ = ctx.unary::<_, v1alpha2::ConnectTargetResponse>("v1alpha2.Iscsi", "ConnectTarget", req).await;

    let r = sink.records();
    let methods: Vec<(&str, Event)> = r.iter().map(|k| (k.method.as_str(), k.event)).collect();
    assert_eq!(
        methods,
        [
            ("NewSmbGlobalMapping", Event::Start),
            ("NewSmbGlobalMapping", Event::End),
            ("NewSmbGlobalMapping", Event::Start),
            ("NewSmbGlobalMapping", Event::End),
            ("SetMutualChapSecret", Event::Start),
            ("SetMutualChapSecret", Event::End),
            ("ConnectTarget", Event::Start),
            ("ConnectTarget", Event::End),
        ]
    );
    let everything = format!("{r:?}");
    for secret in [smb_password, chap_secret, mutual_secret] {
        assert!(!everything.contains(secret), "{secret} in {everything}");
    }
    // The start records show the rest of the request and mark each secret as withheld.
    for start in r.iter().filter(|k| k.event == Event::Start) {
        let request = start.request.as_deref().unwrap();
        assert!(request.contains("<redacted>"), "{request}");
    }
    assert!(r[0].request.as_deref().unwrap().contains(r"DOMAIN\\alice"), "{:?}", r[0]);
}

/// A filesystem whose Mkdir or Rmdir of a path ending in `slow` waits until told to go on.
struct SlowMkdir {
    inner: Arc<MemoryHost>,
    entered: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
}

impl FilesystemHost for SlowMkdir {
    fn path_exists(&self, path: &str) -> csi_proxy_host::Result<bool> {
        self.inner.path_exists(path)
    }
    fn mkdir(&self, path: &str) -> csi_proxy_host::Result<()> {
        if path.ends_with("slow") {
            self.entered.lock().unwrap().send(()).unwrap();
            self.go.lock().unwrap().recv().unwrap();
        }
        self.inner.mkdir(path)
    }
    fn rmdir(&self, path: &str, force: bool) -> csi_proxy_host::Result<()> {
        if path.ends_with("slow") {
            self.entered.lock().unwrap().send(()).unwrap();
            self.go.lock().unwrap().recv().unwrap();
        }
        self.inner.rmdir(path, force)
    }
    fn rmdir_contents(&self, path: &str) -> csi_proxy_host::Result<()> {
        self.inner.rmdir_contents(path)
    }
    fn create_symlink(&self, destination: &str, link: &str) -> csi_proxy_host::Result<()> {
        self.inner.create_symlink(destination, link)
    }
    fn is_symlink(&self, path: &str) -> csi_proxy_host::Result<bool> {
        self.inner.is_symlink(path)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_call_keeps_its_start_and_end_paired_while_others_finish() {
    let host = Arc::new(MemoryHost::new());
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let mut hosts = Hosts::from_one(host.clone());
    hosts.filesystem = Arc::new(SlowMkdir { inner: host, entered: Mutex::new(entered_tx), go: Mutex::new(go_rx) });
    let sink = Arc::new(Sink::default());
    let ctx = Context::new(hosts, Config::default()).with_audit(sink.clone());

    let slow = tokio::spawn({
        let ctx = ctx.clone();
        async move { mkdir(&ctx, r"C:\var\lib\kubelet\slow").await }
    });
    tokio::task::spawn_blocking(move || entered_rx.recv().unwrap()).await.unwrap();
    for i in 0..3 {
        mkdir(&ctx, &format!(r"C:\var\lib\kubelet\fast{i}")).await.unwrap();
    }
    // The slow call has started and not ended; the fast ones have both records.
    let r = sink.records();
    assert_eq!(r.len(), 1 + 3 * 2, "{r:#?}");
    assert_eq!(r[0].event, Event::Start);
    assert!(r[0].request.as_deref().unwrap().contains("slow"));
    let slow_call = r[0].call;
    tokio::time::sleep(Duration::from_millis(50)).await;
    go_tx.send(()).unwrap();
    slow.await.unwrap().unwrap();

    let r = sink.records();
    let last = r.last().unwrap();
    assert_eq!((last.event, last.call), (Event::End, slow_call), "{r:#?}");
    assert!(last.duration.unwrap() >= Duration::from_millis(50), "{last:?}");
    // Every call has exactly one start and one end, the start first.
    for k in &r {
        let mine: Vec<Event> = r.iter().filter(|x| x.call == k.call).map(|x| x.event).collect();
        assert_eq!(mine, [Event::Start, Event::End], "call {}", k.call);
    }
}

/// Waits (a bounded time) until the sink holds `n` records.
async fn wait_for_records(sink: &Sink, n: usize) -> Vec<Kept> {
    for _ in 0..500 {
        let r = sink.records();
        if r.len() >= n {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never {n} records: {:#?}", sink.records());
}

/// A client that gives up on a call whose host work has begun does not stop that work; the
/// call's end record is written when the work ends, with its real outcome, saying the client left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_its_host_work_runs_is_recorded_when_the_work_ends() {
    let host = Arc::new(MemoryHost::new());
    host.mkdir(r"C:\var\lib\kubelet\slow").unwrap();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let mut hosts = Hosts::from_one(host.clone());
    hosts.filesystem =
        Arc::new(SlowMkdir { inner: host.clone(), entered: Mutex::new(entered_tx), go: Mutex::new(go_rx) });
    let sink = Arc::new(Sink::default());
    let ctx = Context::new(hosts, Config::default()).with_audit(sink.clone());

    let call = tokio::spawn({
        let ctx = ctx.clone();
        async move {
            let req = from_caller(v1::RmdirRequest { path: r"C:\var\lib\kubelet\slow".into(), force: false });
            ctx.unary::<_, v1::RmdirResponse>("v1.Filesystem", "Rmdir", req).await
        }
    });
    tokio::task::spawn_blocking(move || entered_rx.recv().unwrap()).await.unwrap();
    call.abort();
    assert!(call.await.unwrap_err().is_cancelled());
    let r = sink.records();
    assert_eq!(r.iter().map(|k| k.event).collect::<Vec<_>>(), [Event::Start], "{r:#?}");

    go_tx.send(()).unwrap();
    let r = wait_for_records(&sink, 2).await;
    let end = &r[1];
    assert_eq!((end.event, end.call, end.code), (Event::End, r[0].call, Some("OK")), "{r:#?}");
    assert!(
        end.message.as_deref().unwrap().contains("the client cancelled the call while its host work ran"),
        "{end:?}"
    );
    assert!(!host.path_exists(r"C:\var\lib\kubelet\slow").unwrap(), "the work ran to its end");
}

/// Delegates to the memory host; PartitionDisk waits until told to go on and counts its runs.
struct HeldDisk {
    inner: Arc<MemoryHost>,
    entered: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
    partitioned: std::sync::atomic::AtomicU32,
}

impl csi_proxy_host::DiskHost for HeldDisk {
    fn list_disk_locations(
        &self,
    ) -> csi_proxy_host::Result<std::collections::BTreeMap<u32, csi_proxy_host::types::DiskLocation>> {
        self.inner.list_disk_locations()
    }
    fn partition_disk(&self, disk: u32) -> csi_proxy_host::Result<()> {
        self.partitioned.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.entered.lock().unwrap().send(()).unwrap();
        self.go.lock().unwrap().recv().unwrap();
        self.inner.partition_disk(disk)
    }
    fn rescan(&self) -> csi_proxy_host::Result<()> {
        self.inner.rescan()
    }
    fn list_disk_ids(&self) -> csi_proxy_host::Result<std::collections::BTreeMap<u32, csi_proxy_host::types::DiskIds>> {
        self.inner.list_disk_ids()
    }
    fn get_disk_stats(&self, disk: u32) -> csi_proxy_host::Result<u64> {
        self.inner.get_disk_stats(disk)
    }
    fn set_disk_state(&self, disk: u32, online: bool) -> csi_proxy_host::Result<()> {
        self.inner.set_disk_state(disk, online)
    }
    fn get_disk_state(&self, disk: u32) -> csi_proxy_host::Result<bool> {
        self.inner.get_disk_state(disk)
    }
}

/// A call cancelled while it waits for its disk did nothing, and its end record says so at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cancelled_while_waiting_for_its_disk_is_recorded_as_not_done() {
    let host = Arc::new(MemoryHost::sample());
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let disk = Arc::new(HeldDisk {
        inner: host.clone(),
        entered: Mutex::new(entered_tx),
        go: Mutex::new(go_rx),
        partitioned: Default::default(),
    });
    let mut hosts = Hosts::from_one(host);
    hosts.disk = disk.clone();
    let sink = Arc::new(Sink::default());
    let ctx = Context::new(hosts, Config::default()).with_audit(sink.clone());
    // The second from another user: the same call of the same user would join the first
    // (crate::join) instead of waiting for the disk.
    let partition = |ctx: Context, uid: u32| async move {
        let mut req = Request::new(v1::PartitionDiskRequest { disk_number: 0 });
        req.extensions_mut().insert(Arc::new(csi_proxy_wire::Caller { uid: Some(uid), ..caller() }));
        ctx.unary::<_, v1::PartitionDiskResponse>("v1.Disk", "PartitionDisk", req).await
    };

    let first = tokio::spawn(partition(ctx.clone(), 0));
    let entered_rx = tokio::task::spawn_blocking(move || {
        entered_rx.recv().unwrap();
        entered_rx
    })
    .await
    .unwrap();
    // The second call on the same disk writes its start record, then waits for the first.
    let second = tokio::spawn(partition(ctx.clone(), 4242));
    let r = wait_for_records(&sink, 2).await;
    let second_call = r[1].call;
    second.abort();
    assert!(second.await.unwrap_err().is_cancelled());
    let r = wait_for_records(&sink, 3).await;
    let end = &r[2];
    assert_eq!((end.event, end.call, end.code), (Event::End, second_call, Some("Canceled")), "{r:#?}");
    assert!(end.message.as_deref().unwrap().contains("before its host work began; nothing was done"), "{end:?}");

    go_tx.send(()).unwrap();
    first.await.unwrap().unwrap();
    drop(entered_rx);
    let r = sink.records();
    assert_eq!(r.len(), 4, "{r:#?}");
    assert_eq!((r[3].event, r[3].call, r[3].code), (Event::End, r[0].call, Some("OK")));
    assert_eq!(disk.partitioned.load(std::sync::atomic::Ordering::SeqCst), 1, "the cancelled call did not run");
}

/// A sink whose writes wait while it is frozen, as a write to a frozen filesystem does.
#[derive(Default)]
struct Freezable {
    frozen: Mutex<bool>,
    thawed: std::sync::Condvar,
    /// Writes that have found it frozen.
    stuck: Mutex<usize>,
    stuck_changed: std::sync::Condvar,
    inner: Sink,
}

impl AuditSink for Freezable {
    fn write(&self, r: &Record<'_>) -> std::io::Result<()> {
        let mut frozen = self.frozen.lock().unwrap();
        if *frozen {
            *self.stuck.lock().unwrap() += 1;
            self.stuck_changed.notify_all();
        }
        while *frozen {
            frozen = self.thawed.wait(frozen).unwrap();
        }
        self.inner.write(r)
    }
}

impl Freezable {
    fn set(&self, frozen: bool) {
        *self.frozen.lock().unwrap() = frozen;
        self.thawed.notify_all();
    }

    /// Waits (a generous bound) until a write is stuck on the frozen sink.
    fn wait_stuck(&self) {
        let stuck = self.stuck.lock().unwrap();
        let (stuck, _) = self.stuck_changed.wait_timeout_while(stuck, Duration::from_secs(10), |n| *n == 0).unwrap();
        assert!(*stuck > 0, "no write reached the frozen sink");
    }
}

/// Thaws the sink when dropped, so that a failing test still lets the runtime stop.
struct Thaw(Arc<Freezable>);

impl Drop for Thaw {
    fn drop(&mut self) {
        self.0.set(false);
    }
}

/// Waits for a result handed over from the runtime; `what` never came within a generous bound.
fn within<T>(rx: &mpsc::Receiver<T>, what: &str) -> T {
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| panic!("{what}: no answer within 10 s"))
}

/// With the audit file not answering, more changing calls than the runtime has workers neither
/// stall it nor run: each is refused once its start record has waited the bound (named in the
/// message), while an unaudited call answers. The one record the writer was writing when the file
/// froze lands after the thaw, followed by an end record saying the call did not run; the others
/// never reach the file. Checked from outside the runtime, since a stalled runtime could not
/// time itself out.
#[test]
fn a_frozen_audit_file_refuses_changing_calls_and_stalls_nothing_else() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let host = Arc::new(MemoryHost::new());
    let sink = Arc::new(Freezable::default());
    let ctx = Context::new(Hosts::from_one(host.clone()), Config::default())
        .with_audit_within(sink.clone(), Duration::from_millis(200));
    let thaw = Thaw(sink.clone());
    sink.set(true);

    let (refused_tx, refused_rx) = mpsc::channel();
    for i in 0..4 {
        let (ctx, tx) = (ctx.clone(), refused_tx.clone());
        rt.spawn(async move { tx.send(mkdir(&ctx, &format!(r"C:\var\lib\kubelet\frozen{i}")).await).unwrap() });
    }
    // The unaudited calls come once the file holds up a write, behind the changing calls.
    sink.wait_stuck();
    let (exists_tx, exists_rx) = mpsc::channel();
    for _ in 0..4 {
        let (ctx, tx) = (ctx.clone(), exists_tx.clone());
        rt.spawn(async move {
            let req = from_caller(v1::PathExistsRequest { path: r"C:\var\lib\kubelet".into() });
            tx.send(ctx.unary::<_, v1::PathExistsResponse>("v1.Filesystem", "PathExists", req).await.is_ok()).unwrap()
        });
    }
    for _ in 0..4 {
        assert!(within(&exists_rx, "PathExists while the audit file is frozen"));
    }
    for _ in 0..4 {
        let e = within(&refused_rx, "Mkdir while the audit file is frozen").unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        assert!(e.message().contains("audit record could not be written within 0.2 s"), "{e:?}");
    }
    assert!(host.with(|s| s.tree.is_empty()), "a refused call ran");
    assert!(sink.inner.records().is_empty());

    drop(thaw);
    let (tx, rx) = mpsc::channel();
    let after = ctx.clone();
    rt.spawn(async move { tx.send(mkdir(&after, r"C:\var\lib\kubelet\thawed").await).unwrap() });
    within(&rx, "Mkdir after the thaw").unwrap();
    let r = sink.inner.records();
    let seen: Vec<_> = r.iter().map(|k| (k.event, k.code)).collect();
    assert_eq!(
        seen,
        [(Event::Start, None), (Event::End, Some("Unavailable")), (Event::Start, None), (Event::End, Some("OK"))],
        "{r:#?}"
    );
    assert_eq!(r[0].call, r[1].call);
    assert!(r[1].message.as_deref().unwrap().contains("was not run"), "{:?}", r[1]);
    assert!(r[2].request.as_deref().unwrap().contains("thawed"), "{:?}", r[2]);
}

/// An end record the file does not take holds up the answer by the bound only; the record is
/// written once the file answers again, after the records before it.
#[test]
fn an_end_record_the_frozen_file_does_not_take_is_written_after_the_thaw() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let host = Arc::new(MemoryHost::new());
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let mut hosts = Hosts::from_one(host.clone());
    hosts.filesystem = Arc::new(SlowMkdir { inner: host, entered: Mutex::new(entered_tx), go: Mutex::new(go_rx) });
    let sink = Arc::new(Freezable::default());
    let ctx = Context::new(hosts, Config::default()).with_audit_within(sink.clone(), Duration::from_millis(200));
    let thaw = Thaw(sink.clone());

    let (tx, rx) = mpsc::channel();
    let slow = ctx.clone();
    rt.spawn(async move { tx.send(mkdir(&slow, r"C:\var\lib\kubelet\slow").await).unwrap() });
    within(&entered_rx, "the slow Mkdir's host work");
    sink.set(true);
    go_tx.send(()).unwrap();
    within(&rx, "the slow Mkdir, its end record frozen").unwrap();
    let (tx, rx) = mpsc::channel();
    let other = ctx.clone();
    rt.spawn(async move {
        let req = from_caller(v1::PathExistsRequest { path: r"C:\var\lib\kubelet\slow".into() });
        tx.send(other.unary::<_, v1::PathExistsResponse>("v1.Filesystem", "PathExists", req).await.unwrap()).unwrap()
    });
    assert!(within(&rx, "PathExists with an end record frozen").into_inner().exists);
    assert_eq!(sink.inner.records().len(), 1);

    drop(thaw);
    let (tx, rx) = mpsc::channel();
    rt.spawn(async move { tx.send(mkdir(&ctx, r"C:\var\lib\kubelet\after").await).unwrap() });
    within(&rx, "Mkdir after the thaw").unwrap();
    let r = sink.inner.records();
    let seen: Vec<_> = r.iter().map(|k| (k.event, k.code)).collect();
    assert_eq!(seen, [(Event::Start, None), (Event::End, Some("OK")), (Event::Start, None), (Event::End, Some("OK"))]);
    assert_eq!(r[0].call, r[1].call);
}

/// Every call that started has exactly one end record after its start record (which `code`
/// and `late`, when given, it has is checked by the caller).
fn assert_paired(r: &[Kept]) {
    for k in r.iter().filter(|k| k.event == Event::Start) {
        let mine: Vec<Event> = r.iter().filter(|x| x.call == k.call).map(|x| x.event).collect();
        assert_eq!(mine, [Event::Start, Event::End], "call {}: {r:#?}", k.call);
    }
}

/// While the file does not answer, more calls than the queue holds are refused, and a call that
/// had started before, and ran, finishes: its end record is not lost (it was dropped for a full
/// queue, which the refused calls' start records filled), and it is in the trail with its real
/// outcome once the file answers again. The refused calls leave nothing behind: the trail holds
/// the call that ran, the one start record the writer had in hand (followed by its "not run"),
/// and the call after the thaw.
#[test]
fn a_call_that_ran_keeps_its_end_record_while_refused_calls_fill_the_queue() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let host = Arc::new(MemoryHost::new());
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let mut hosts = Hosts::from_one(host.clone());
    hosts.filesystem =
        Arc::new(SlowMkdir { inner: host.clone(), entered: Mutex::new(entered_tx), go: Mutex::new(go_rx) });
    let sink = Arc::new(Freezable::default());
    let ctx = Context::new(hosts, Config::default()).with_audit_within(sink.clone(), Duration::from_millis(200));
    let thaw = Thaw(sink.clone());

    let (ran_tx, ran_rx) = mpsc::channel();
    let slow = ctx.clone();
    rt.spawn(async move { ran_tx.send(mkdir(&slow, r"C:\var\lib\kubelet\slow").await).unwrap() });
    within(&entered_rx, "the slow Mkdir's host work");
    sink.set(true);
    let (refused_tx, refused_rx) = mpsc::channel();
    let (stuck, tx) = (ctx.clone(), refused_tx.clone());
    rt.spawn(async move { tx.send(mkdir(&stuck, r"C:\var\lib\kubelet\stuck").await).unwrap() });
    sink.wait_stuck();
    // More than the queue's 1,024 records.
    const REFUSED: usize = 1100;
    for i in 0..REFUSED {
        let (ctx, tx) = (ctx.clone(), refused_tx.clone());
        rt.spawn(async move { tx.send(mkdir(&ctx, &format!(r"C:\var\lib\kubelet\refused{i}")).await).unwrap() });
    }
    for _ in 0..=REFUSED {
        let e = within(&refused_rx, "Mkdir while the audit file is frozen").unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    }
    go_tx.send(()).unwrap();
    within(&ran_rx, "the slow Mkdir, its end record frozen").unwrap();
    assert!(host.path_exists(r"C:\var\lib\kubelet\slow").unwrap(), "the slow Mkdir ran");

    drop(thaw);
    let (tx, rx) = mpsc::channel();
    rt.spawn(async move { tx.send(mkdir(&ctx, r"C:\var\lib\kubelet\after").await).unwrap() });
    within(&rx, "Mkdir after the thaw").unwrap();
    let r = sink.inner.records();
    let seen: Vec<_> = r.iter().map(|k| (k.event, k.code, k.request.as_deref().map(|q| q.contains("slow")))).collect();
    assert_eq!(
        seen,
        [
            (Event::Start, None, Some(true)),
            (Event::Start, None, Some(false)),
            (Event::End, Some("Unavailable"), None),
            (Event::End, Some("OK"), None),
            (Event::Start, None, Some(false)),
            (Event::End, Some("OK"), None),
        ],
        "{r:#?}"
    );
    assert_eq!((r[3].call, r[3].late.as_deref()), (r[0].call, None), "the slow Mkdir's end record: {r:#?}");
    assert!(r[4].request.as_deref().unwrap().contains("after"), "{:?}", r[4]);
    assert_paired(&r);
}

/// End records that cannot be written (a full filesystem) are written once writes work again,
/// before the next record, with the outcome they would have had and marked late with why; a call
/// whose start record could not be written did not run and needs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_records_that_fail_to_write_are_written_late_and_marked() {
    let host = Arc::new(MemoryHost::new());
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let mut hosts = Hosts::from_one(host.clone());
    hosts.filesystem =
        Arc::new(SlowMkdir { inner: host.clone(), entered: Mutex::new(entered_tx), go: Mutex::new(go_rx) });
    let sink = Arc::new(Sink::default());
    let ctx = Context::new(hosts, Config::default()).with_audit(sink.clone());

    let slow: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            let ctx = ctx.clone();
            tokio::spawn(async move { mkdir(&ctx, &format!(r"C:\var\lib\kubelet\{name}\slow")).await })
        })
        .collect();
    let entered_rx = tokio::task::spawn_blocking(move || {
        entered_rx.recv().unwrap();
        entered_rx.recv().unwrap();
        entered_rx
    })
    .await
    .unwrap();
    sink.broken.store(true, Ordering::SeqCst);
    let e = mkdir(&ctx, r"C:\var\lib\kubelet\refused").await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    go_tx.send(()).unwrap();
    go_tx.send(()).unwrap();
    for call in slow {
        call.await.unwrap().unwrap();
    }
    drop(entered_rx);
    assert_eq!(sink.records().len(), 2, "only the start records: {:#?}", sink.records());

    sink.broken.store(false, Ordering::SeqCst);
    mkdir(&ctx, r"C:\var\lib\kubelet\after").await.unwrap();
    let r = sink.records();
    let seen: Vec<_> = r.iter().map(|k| (k.event, k.code, k.late.as_deref())).collect();
    assert_eq!(
        seen,
        [
            (Event::Start, None, None),
            (Event::Start, None, None),
            (Event::End, Some("OK"), Some("disk full")),
            (Event::End, Some("OK"), Some("disk full")),
            (Event::Start, None, None),
            (Event::End, Some("OK"), None),
        ],
        "{r:#?}"
    );
    assert!(r[4].request.as_deref().unwrap().contains("after"), "{:?}", r[4]);
    assert!(r.iter().all(|k| !k.request.as_deref().is_some_and(|q| q.contains("refused"))), "{r:#?}");
    assert!(!host.path_exists(r"C:\var\lib\kubelet\refused").unwrap(), "a refused call ran");
    assert_paired(&r);
}
