//! The audited call's cancellation paths that timing alone decides, driven step by step: a job
//! queued on a full pool, a job that ends as its call is cancelled, and a rescan or a volume
//! lookup cancelled part-way. Each call has one start record and exactly one end record with the
//! right outcome, and no host work starts after a cancellation where it must not.
//!
//! No sleeps: the host stops at gates and says where it is, the call is polled by hand (its future
//! dropped at the chosen point is the client's cancellation), and the records are awaited as the
//! sink takes them. A test of its own binary: it fills the process's serial pool, so its tests
//! take turns ([`one_at_a_time`]).

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::sync::LockExt;
use csi_proxy_host::types::{DiskIds, DiskLocation, VolumeStats};
use csi_proxy_host::{DiskHost, Hosts, Result as HostResult, VolumeHost};
use csi_proxy_server::audit::{AuditSink, Event, Record};
use csi_proxy_server::locks::Key;
use csi_proxy_server::{Config, Context};
use csi_proxy_wire::v1;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Wake, Waker};
use std::time::Duration;
use tokio::runtime::Runtime;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

/// How long any one step may take before the test gives up (a bound, never waited out).
const BOUND: Duration = Duration::from_secs(30);

/// Threads of the server's serial pool at most (`SERIAL_POOL` in `call.rs`).
const SERIAL_POOL_MAX: u32 = 32;

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static TURN: Mutex<()> = Mutex::new(());
    TURN.lock_ignoring_poison()
}

/// A record as the sink took it.
#[derive(Debug, Clone)]
struct Kept {
    event: Event,
    call: u64,
    method: String,
    code: Option<&'static str>,
    message: Option<String>,
}

/// Keeps the records; its writes wait while it is held (as a slow audit file's would).
#[derive(Default)]
struct Sink {
    records: Mutex<Vec<Kept>>,
    changed: Condvar,
    held: Mutex<bool>,
    released: Condvar,
}

impl AuditSink for Sink {
    fn write(&self, r: &Record<'_>) -> std::io::Result<()> {
        let held = self.held.lock_ignoring_poison();
        drop(self.released.wait_timeout_while(held, BOUND, |held| *held).unwrap_or_else(PoisonError::into_inner));
        self.records.lock_ignoring_poison().push(Kept {
            event: r.event,
            call: r.call,
            method: r.method.to_string(),
            code: r.code,
            message: r.message.map(str::to_string),
        });
        self.changed.notify_all();
        Ok(())
    }
}

impl Sink {
    /// The records once there are `n` (waits for them, within the bound).
    fn wait_for(&self, n: usize) -> Vec<Kept> {
        let records = self.records.lock_ignoring_poison();
        let (records, _) =
            self.changed.wait_timeout_while(records, BOUND, |r| r.len() < n).unwrap_or_else(PoisonError::into_inner);
        assert!(records.len() >= n, "never {n} records: {records:#?}");
        records.clone()
    }

    fn hold(&self, held: bool) {
        *self.held.lock_ignoring_poison() = held;
        self.released.notify_all();
    }
}

/// Where the host is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Step {
    Partition(u32),
    Rescan,
    Refresh(u32),
    Lookup,
    Format,
}

/// Passes host work through one permit at a time.
#[derive(Default)]
struct Gate {
    permits: Mutex<usize>,
    opened: Condvar,
}

impl Gate {
    fn open(&self, n: usize) {
        *self.permits.lock_ignoring_poison() += n;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let permits = self.permits.lock_ignoring_poison();
        let (mut permits, _) =
            self.opened.wait_timeout_while(permits, BOUND, |p| *p == 0).unwrap_or_else(PoisonError::into_inner);
        assert!(*permits > 0, "the gate never opened");
        *permits -= 1;
    }
}

/// Disks and volumes whose changing calls (and the rescan's steps, and the volume lookup) say
/// where they are, then wait at the gate; what they did is counted.
struct Host {
    inner: Arc<MemoryHost>,
    steps: UnboundedSender<Step>,
    gate: Gate,
    ran: Mutex<HashMap<Step, usize>>,
}

impl Host {
    fn new() -> (Arc<Host>, UnboundedReceiver<Step>) {
        let (steps, rx) = unbounded_channel();
        let host = Host { inner: Arc::new(MemoryHost::sample()), steps, gate: Gate::default(), ran: Mutex::default() };
        (Arc::new(host), rx)
    }

    fn step(&self, step: Step) {
        *self.ran.lock_ignoring_poison().entry(step.clone()).or_default() += 1;
        let _ = self.steps.send(step);
        self.gate.pass();
    }

    fn ran(&self, step: &Step) -> usize {
        self.ran.lock_ignoring_poison().get(step).copied().unwrap_or(0)
    }

    fn context(self: &Arc<Host>) -> (Context, Arc<Sink>) {
        let mut hosts = Hosts::from_one(self.inner.clone());
        hosts.disk = self.clone();
        hosts.volume = self.clone();
        let sink = Arc::new(Sink::default());
        (Context::new(hosts, Config::default()).with_audit(sink.clone()), sink)
    }
}

impl DiskHost for Host {
    fn list_disk_locations(&self) -> HostResult<BTreeMap<u32, DiskLocation>> {
        self.inner.list_disk_locations()
    }
    fn partition_disk(&self, disk: u32) -> HostResult<()> {
        self.step(Step::Partition(disk));
        Ok(())
    }
    fn rescan(&self) -> HostResult<()> {
        self.step(Step::Rescan);
        Ok(())
    }
    fn disks_to_refresh(&self) -> HostResult<Vec<u32>> {
        Ok(vec![0, 1])
    }
    fn refresh_disk(&self, disk: u32) -> HostResult<()> {
        self.step(Step::Refresh(disk));
        Ok(())
    }
    fn list_disk_ids(&self) -> HostResult<BTreeMap<u32, DiskIds>> {
        self.inner.list_disk_ids()
    }
    fn get_disk_stats(&self, disk: u32) -> HostResult<u64> {
        self.inner.get_disk_stats(disk)
    }
    fn set_disk_state(&self, disk: u32, online: bool) -> HostResult<()> {
        self.inner.set_disk_state(disk, online)
    }
    fn get_disk_state(&self, disk: u32) -> HostResult<bool> {
        self.inner.get_disk_state(disk)
    }
}

impl VolumeHost for Host {
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> HostResult<Vec<String>> {
        self.inner.list_volumes_on_disk(disk, partition)
    }
    fn mount_volume(&self, volume_id: &str, target_path: &str) -> HostResult<()> {
        self.inner.mount_volume(volume_id, target_path)
    }
    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> HostResult<()> {
        self.inner.unmount_volume(volume_id, target_path)
    }
    fn is_volume_formatted(&self, volume_id: &str) -> HostResult<bool> {
        self.inner.is_volume_formatted(volume_id)
    }
    fn format_volume(&self, _volume_id: &str) -> HostResult<()> {
        self.step(Step::Format);
        Ok(())
    }
    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> HostResult<()> {
        self.inner.resize_volume(volume_id, size_bytes)
    }
    fn get_volume_stats(&self, volume_id: &str) -> HostResult<VolumeStats> {
        self.inner.get_volume_stats(volume_id)
    }
    fn get_disk_number_from_volume_id(&self, _volume_id: &str) -> HostResult<u32> {
        self.step(Step::Lookup);
        Ok(0)
    }
    fn get_volume_id_from_target_path(&self, target_path: &str) -> HostResult<String> {
        self.inner.get_volume_id_from_target_path(target_path)
    }
    fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> HostResult<String> {
        self.inner.get_closest_volume_id_from_target_path(target_path)
    }
    fn write_volume_cache(&self, volume_id: &str) -> HostResult<()> {
        self.inner.write_volume_cache(volume_id)
    }
}

type Answer = Result<(), tonic::Status>;
type Call = Pin<Box<dyn Future<Output = Answer> + Send>>;

fn partition(ctx: &Context, disk: u32) -> Call {
    let ctx = ctx.clone();
    Box::pin(async move {
        let req = tonic::Request::new(v1::PartitionDiskRequest { disk_number: disk });
        ctx.unary::<_, v1::PartitionDiskResponse>("v1.Disk", "PartitionDisk", req).await.map(drop)
    })
}

fn rescan(ctx: &Context) -> Call {
    let ctx = ctx.clone();
    Box::pin(async move {
        let req = tonic::Request::new(v1::RescanRequest {});
        ctx.unary::<_, v1::RescanResponse>("v1.Disk", "Rescan", req).await.map(drop)
    })
}

fn format(ctx: &Context) -> Call {
    let ctx = ctx.clone();
    Box::pin(async move {
        let req = tonic::Request::new(v1::FormatVolumeRequest { volume_id: "vol".into() });
        ctx.unary::<_, v1::FormatVolumeResponse>("v1.Volume", "FormatVolume", req).await.map(drop)
    })
}

/// Runs `call` to its end within the bound.
fn finish(rt: &Runtime, call: Call) -> Answer {
    rt.block_on(async { tokio::time::timeout(BOUND, call).await.expect("the call never ended") })
}

/// Polls `call` inside `rt` (timers run) until the host reports `step`; the call must not end
/// before.
fn drive_until(rt: &Runtime, call: &mut Call, steps: &mut UnboundedReceiver<Step>, step: Step) {
    let reached = rt.block_on(async {
        let reached = std::future::poll_fn(|cx| {
            while let Poll::Ready(got) = steps.poll_recv(cx) {
                if got.as_ref() == Some(&step) {
                    return Poll::Ready(Ok(()));
                }
            }
            call.as_mut().poll(cx).map(Err)
        });
        tokio::time::timeout(BOUND, reached).await
    });
    match reached {
        Ok(Ok(())) => {}
        Ok(Err(answer)) => panic!("the call ended before the host reached {step:?}: {answer:?}"),
        Err(_) => panic!("the host never reached {step:?}"),
    }
}

/// The next step the host reports, within the bound.
fn next_step(rt: &Runtime, steps: &mut UnboundedReceiver<Step>) -> Step {
    rt.block_on(async { tokio::time::timeout(BOUND, steps.recv()).await }).expect("no step within the bound").unwrap()
}

/// A waker that tells a channel, to poll a call by hand outside the runtime.
struct Told(mpsc::Sender<()>);

impl Wake for Told {
    fn wake(self: Arc<Self>) {
        let _ = self.0.send(());
    }
}

fn told() -> (Waker, mpsc::Receiver<()>) {
    let (tx, rx) = mpsc::channel();
    (Waker::from(Arc::new(Told(tx))), rx)
}

/// Each call's events, in the order written; every call must have exactly `[Start, End]`.
fn paired(records: &[Kept]) -> BTreeMap<u64, Vec<&Kept>> {
    let mut calls: BTreeMap<u64, Vec<&Kept>> = BTreeMap::new();
    for r in records {
        calls.entry(r.call).or_default().push(r);
    }
    for (call, mine) in &calls {
        let events: Vec<Event> = mine.iter().map(|k| k.event).collect();
        assert_eq!(events, [Event::Start, Event::End], "call {call}: {records:#?}");
    }
    calls
}

/// A call whose job waits in the queue of a full pool (every thread busy with a disk that hangs)
/// and is cancelled there: its end record says nothing was done, written at once, not when the
/// pool frees up; the job, reached later, does not run; and the disk lock it held is passed on.
#[test]
fn a_call_queued_on_a_full_pool_and_cancelled_never_runs() {
    let _turn = one_at_a_time();
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (host, mut steps) = Host::new();
    let (ctx, sink) = host.context();

    // Every thread the serial pool may have, each in a PartitionDisk of its own disk.
    let held: Vec<_> = (0..SERIAL_POOL_MAX).map(|disk| rt.spawn(partition(&ctx, disk))).collect();
    for _ in 0..SERIAL_POOL_MAX {
        assert!(matches!(next_step(&rt, &mut steps), Step::Partition(_)));
    }
    let busy = SERIAL_POOL_MAX as usize;
    sink.wait_for(busy);

    // One more, polled by hand: its start record is written, its disk taken and its job queued.
    let queued = SERIAL_POOL_MAX;
    let (waker, woken) = told();
    let mut call = partition(&ctx, queued);
    {
        let _in = rt.enter();
        let mut cx = std::task::Context::from_waker(&waker);
        loop {
            assert!(call.as_mut().poll(&mut cx).is_pending(), "the queued call ended");
            if ctx.locks().held().contains(&Key::Disk(queued)) {
                // Taken in the poll that then queued the job (nothing awaited in between).
                break;
            }
            woken.recv_timeout(BOUND).expect("the queued call was never woken");
        }
    }
    let r = sink.wait_for(busy + 1);
    let call_no = r[busy].call;
    assert_eq!(r[busy].event, Event::Start);

    drop(call);
    let r = sink.wait_for(busy + 2);
    let end = &r[busy + 1];
    assert_eq!((end.event, end.call, end.code), (Event::End, call_no, Some("Canceled")), "{r:#?}");
    assert!(end.message.as_deref().unwrap().contains("before its host work began; nothing was done"), "{end:?}");

    host.gate.open(busy);
    for call in held {
        rt.block_on(call).unwrap().unwrap();
    }
    // The same disk again: its lock is free only once the pool has reached the cancelled job
    // (which holds it) and dropped it, unrun.
    host.gate.open(1);
    finish(&rt, partition(&ctx, queued)).unwrap();
    assert_eq!(host.ran(&Step::Partition(queued)), 1, "the cancelled job ran");

    let r = sink.wait_for(2 * busy + 4);
    let calls = paired(&r);
    assert_eq!(calls.len(), busy + 2);
    assert_eq!(calls[&call_no][1].code, Some("Canceled"));
    assert!(r.iter().filter(|k| k.call != call_no).all(|k| k.event == Event::Start || k.code == Some("OK")), "{r:#?}");
}

/// A call whose job has just ended (its outcome handed over, the handler not yet polled for it),
/// or whose handler has taken the outcome and waits for its end record, when the client cancels:
/// one end record, with the work's real outcome, whichever of the two writes it.
#[test]
fn a_call_cancelled_as_its_job_ends_gets_exactly_one_end_record() {
    let _turn = one_at_a_time();
    // One thread and no worker: between block_on calls the runtime stands still, its timers too,
    // so the only wake-up of a call polled by hand is its job's outcome.
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for handler_took_it in [false, true] {
        let (host, mut steps) = Host::new();
        let (ctx, sink) = host.context();
        let mut call = partition(&ctx, 0);
        drive_until(&rt, &mut call, &mut steps, Step::Partition(0));

        let (waker, woken) = told();
        let mut cx = std::task::Context::from_waker(&waker);
        {
            let _in = rt.enter();
            assert!(call.as_mut().poll(&mut cx).is_pending(), "ended while its host work waits at the gate");
        }
        host.gate.open(1);
        // The job has ended and handed over its outcome (the wake-up is that hand-over).
        woken.recv_timeout(BOUND).expect("the job's outcome never came");
        if handler_took_it {
            // The handler takes the outcome and queues the end record, which the sink holds up.
            sink.hold(true);
            let _in = rt.enter();
            assert!(call.as_mut().poll(&mut cx).is_pending(), "the end record was not held up");
        }
        drop(call);
        sink.hold(false);

        // A later call's records come after anything the cancellation queued.
        host.gate.open(1);
        finish(&rt, partition(&ctx, 1)).unwrap();
        let r = sink.wait_for(4);
        let calls = paired(&r);
        assert_eq!(calls.len(), 2, "{r:#?}");
        let end = calls[&r[0].call][1];
        assert_eq!(end.code, Some("OK"), "{r:#?}");
        if handler_took_it {
            assert_eq!(end.message, None, "the handler's record: {end:?}");
        } else {
            let message = end.message.as_deref().unwrap();
            assert!(message.contains("the client cancelled the call while its host work ran"), "{end:?}");
        }
        assert_eq!(host.ran(&Step::Partition(0)), 1);
    }
}

/// A rescan cancelled while it refreshes its first disk: that step runs to its end, the next disk
/// is not refreshed, and the end record (written at once) says the rescan was cancelled part-way.
#[test]
fn a_rescan_cancelled_part_way_does_no_later_step() {
    let _turn = one_at_a_time();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (host, mut steps) = Host::new();
    let (ctx, sink) = host.context();
    let mut call = rescan(&ctx);
    host.gate.open(1);
    drive_until(&rt, &mut call, &mut steps, Step::Rescan);
    drive_until(&rt, &mut call, &mut steps, Step::Refresh(0));
    drop(call);

    let r = sink.wait_for(2);
    assert_eq!((r[1].event, r[1].call, r[1].code), (Event::End, r[0].call, Some("Canceled")), "{r:#?}");
    assert!(r[1].message.as_deref().unwrap().contains("cancelled the rescan part-way"), "{:?}", r[1]);

    // The refresh under way ends; a later call's records come after anything else of the rescan.
    host.gate.open(2);
    finish(&rt, partition(&ctx, 1)).unwrap();
    let r = sink.wait_for(4);
    assert_eq!(paired(&r).len(), 2, "{r:#?}");
    assert_eq!((r[2].method.as_str(), r[2].event), ("PartitionDisk", Event::Start), "{r:#?}");
    assert_eq!(host.ran(&Step::Refresh(0)), 1);
    assert_eq!(host.ran(&Step::Refresh(1)), 0, "a step after the cancellation ran");
}

/// A volume call cancelled while its disk is looked up (before its lock, or in the check once it
/// holds it): nothing was done, its end record says so at once, and the volume is never touched.
#[test]
fn a_volume_call_cancelled_during_its_disk_lookup_does_nothing() {
    let _turn = one_at_a_time();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    for lookups_done in [0, 1] {
        let (host, mut steps) = Host::new();
        let (ctx, sink) = host.context();
        let mut call = format(&ctx);
        host.gate.open(lookups_done);
        for _ in 0..=lookups_done {
            drive_until(&rt, &mut call, &mut steps, Step::Lookup);
        }
        drop(call);
        let r = sink.wait_for(2);
        assert_eq!((r[1].event, r[1].call, r[1].code), (Event::End, r[0].call, Some("Canceled")), "{r:#?}");
        assert!(r[1].message.as_deref().unwrap().contains("nothing was done"), "{:?}", r[1]);

        // The lookup under way ends. The same volume again (two lookups and the format) runs
        // once its disk is free, and its records follow.
        host.gate.open(1 + 3);
        finish(&rt, format(&ctx)).unwrap();
        let r = sink.wait_for(4);
        assert_eq!(paired(&r).len(), 2, "{r:#?}");
        assert_eq!(host.ran(&Step::Format), 1, "the cancelled call formatted the volume");
    }
}
