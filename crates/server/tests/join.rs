//! Retries that join (`crate::join`), through the server's call path: a FormatVolume whose host
//! work is slow, sent again three times while it runs (a kubelet retrying NodeStage after its
//! deadline), runs its host work once and all four calls get its answer, even when the first
//! client gives up before the work ends; a call sent after it ended runs anew; another caller's
//! identical call does not join.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::types::VolumeStats;
use csi_proxy_host::{DiskHost, Hosts, Result as HostResult, VolumeHost};
use csi_proxy_server::{CallObserver, Config, Context};
use csi_proxy_wire::{v1, Caller};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;
use tonic::Request;

/// The memory host's volumes; FormatVolume counts its runs and waits until told to go on.
struct SlowFormat {
    inner: Arc<MemoryHost>,
    formats: AtomicU32,
    entered: Mutex<mpsc::Sender<()>>,
    go: Mutex<mpsc::Receiver<()>>,
}

impl VolumeHost for SlowFormat {
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
    fn format_volume(&self, volume_id: &str) -> HostResult<()> {
        self.formats.fetch_add(1, Ordering::SeqCst);
        self.entered.lock().unwrap().send(()).unwrap();
        self.go.lock().unwrap().recv().unwrap();
        // Each run starts from a blank volume (the memory host, like both OSes, refuses to format
        // over a filesystem): every run succeeds, and only the count tells them apart.
        self.inner.with(|s| s.volumes.get_mut(volume_id).map(|v| v.formatted = false));
        self.inner.format_volume(volume_id)
    }
    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> HostResult<()> {
        self.inner.resize_volume(volume_id, size_bytes)
    }
    fn get_volume_stats(&self, volume_id: &str) -> HostResult<VolumeStats> {
        self.inner.get_volume_stats(volume_id)
    }
    fn get_disk_number_from_volume_id(&self, volume_id: &str) -> HostResult<u32> {
        self.inner.get_disk_number_from_volume_id(volume_id)
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

#[derive(Default)]
struct Joined(AtomicU32);

impl CallObserver for Joined {
    fn started(&self, _: &str, _: &str) {}
    fn handled(&self, _: &str, _: &str, _: &str, _: Duration) {}
    fn joined(&self, service: &str, method: &str) {
        assert_eq!((service, method), ("v1.Volume", "FormatVolume"));
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Waits (10 s at most) until `done`; panics naming `what` otherwise.
async fn until(done: impl Fn() -> bool, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn format(ctx: &Context, volume: &str, uid: u32) -> impl std::future::Future<Output = Result<(), tonic::Status>> {
    let (ctx, volume) = (ctx.clone(), volume.to_string());
    async move {
        let mut req = Request::new(v1::FormatVolumeRequest { volume_id: volume });
        req.extensions_mut().insert(Arc::new(Caller { uid: Some(uid), pid: Some(7), ..Caller::default() }));
        ctx.unary::<_, v1::FormatVolumeResponse>("v1.Volume", "FormatVolume", req).await.map(drop)
    }
}

/// A server over the memory host with disk 0 partitioned, its volume's FormatVolume slow.
struct Setup {
    host: Arc<MemoryHost>,
    volume: String,
    slow: Arc<SlowFormat>,
    joined: Arc<Joined>,
    ctx: Context,
    /// Told when a format has begun; `go_tx` lets it go on.
    entered_rx: mpsc::Receiver<()>,
    go_tx: mpsc::Sender<()>,
}

fn setup() -> Setup {
    let host = Arc::new(MemoryHost::sample());
    host.partition_disk(0).unwrap();
    let volume = host.list_volumes_on_disk(0, 0).unwrap().remove(0);
    let (entered_tx, entered_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    let slow = Arc::new(SlowFormat {
        inner: host.clone(),
        formats: AtomicU32::new(0),
        entered: Mutex::new(entered_tx),
        go: Mutex::new(go_rx),
    });
    let mut hosts = Hosts::from_one(host.clone());
    hosts.volume = slow.clone();
    let joined = Arc::new(Joined::default());
    let ctx = Context::with_observer(hosts, Config::default(), joined.clone());
    Setup { host, volume, slow, joined, ctx, entered_rx, go_tx }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_format_retried_three_times_runs_once_and_answers_all() {
    let Setup { host, volume, slow, joined, ctx, entered_rx, go_tx } = setup();

    let first = tokio::spawn(format(&ctx, &volume, 1000));
    let entered_rx = tokio::task::spawn_blocking(move || {
        entered_rx.recv().unwrap();
        entered_rx
    })
    .await
    .unwrap();
    // The first client's deadline passes while its format runs; three retries come meanwhile.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let retries: Vec<_> = (0..3).map(|_| tokio::spawn(format(&ctx, &volume, 1000))).collect();
    until(|| joined.0.load(Ordering::SeqCst) == 3, "the three retries joined").await;
    go_tx.send(()).unwrap();
    for r in retries {
        r.await.unwrap().expect("a retry gets the first call's answer");
    }
    assert_eq!(slow.formats.load(Ordering::SeqCst), 1, "the host work ran once");
    assert!(host.is_volume_formatted(&volume).unwrap());

    // After it ended, the same call runs anew; another caller's call never joins.
    let again = tokio::spawn(format(&ctx, &volume, 1000));
    let other = tokio::spawn(format(&ctx, &volume, 2000));
    // Both run, one after the other (one disk).
    let mut entered_rx = entered_rx;
    for _ in 0..2 {
        entered_rx = tokio::task::spawn_blocking(move || {
            entered_rx.recv().unwrap();
            entered_rx
        })
        .await
        .unwrap();
        go_tx.send(()).unwrap();
    }
    again.await.unwrap().unwrap();
    other.await.unwrap().unwrap();
    drop(entered_rx);
    assert_eq!(slow.formats.load(Ordering::SeqCst), 3);
    assert_eq!(joined.0.load(Ordering::SeqCst), 3, "only the retries joined");
}

/// The first call's client leaving while it waits for its disk (no host work yet) hands the work
/// to a retry waiting for it, which runs it: nothing is lost, nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_call_cancelled_before_its_work_hands_it_to_the_retry() {
    let Setup { volume, slow, joined, ctx, entered_rx, go_tx, .. } = setup();
    // Another user's format of the same volume holds its disk.
    let holder = tokio::spawn(format(&ctx, &volume, 3000));
    let entered_rx = tokio::task::spawn_blocking(move || {
        entered_rx.recv().unwrap();
        entered_rx
    })
    .await
    .unwrap();
    let first = tokio::spawn(format(&ctx, &volume, 1000));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let retry = tokio::spawn(format(&ctx, &volume, 1000));
    until(|| joined.0.load(Ordering::SeqCst) == 1, "the retry joined").await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    go_tx.send(()).unwrap();
    holder.await.unwrap().unwrap();
    // The retry now runs the work itself.
    let entered_rx = tokio::task::spawn_blocking(move || {
        entered_rx.recv().unwrap();
        entered_rx
    })
    .await
    .unwrap();
    go_tx.send(()).unwrap();
    retry.await.unwrap().unwrap();
    drop(entered_rx);
    assert_eq!(slow.formats.load(Ordering::SeqCst), 2, "the holder's and the retry's; the cancelled one never ran");
}
