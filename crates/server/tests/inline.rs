//! Quick calls (a stat, a mkdir) run on the async worker that serves them, one at a time, instead
//! of being handed to a pool thread and back; every other call, and a quick call while another
//! holds the worker slot, uses the pool, and so does a quick call while others are in flight if
//! the inline calls have lately been slow. So a quick call that hangs in the host holds one
//! worker, and the server still answers.

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::{FilesystemHost, Hosts, Result};
use csi_proxy_server::{Config, Context};
use csi_proxy_wire::v1;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;
use tonic::Request;

/// The pool's threads are named so (see the server's `call` module).
const POOL_THREAD: &str = "csi-proxy-call";
/// The test runtime's workers.
const WORKER: &str = "test-worker";

/// The memory host, recording which thread ran each call; a path containing "hang" waits until
/// the gate opens.
#[derive(Default)]
struct Gated {
    mem: MemoryHost,
    ran_on: Mutex<Vec<(String, String)>>,
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gated {
    fn enter(&self, path: &str) {
        let thread = std::thread::current().name().unwrap_or("unnamed").to_string();
        self.ran_on.lock().unwrap().push((path.to_string(), thread));
        if path.contains("hang") {
            drop(self.opened.wait_while(self.open.lock().unwrap(), |open| !*open).unwrap());
        }
    }
    fn thread_of(&self, path: &str) -> Option<String> {
        self.ran_on.lock().unwrap().iter().find(|(p, _)| p == path).map(|(_, t)| t.clone())
    }
    fn release(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
    fn close(&self) {
        *self.open.lock().unwrap() = false;
    }
}

impl FilesystemHost for Gated {
    fn path_exists(&self, path: &str) -> Result<bool> {
        self.enter(path);
        self.mem.path_exists(path)
    }
    fn mkdir(&self, path: &str) -> Result<()> {
        self.enter(path);
        self.mem.mkdir(path)
    }
    fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        self.enter(path);
        self.mem.rmdir(path, force)
    }
    fn rmdir_contents(&self, path: &str) -> Result<()> {
        self.mem.rmdir_contents(path)
    }
    fn create_symlink(&self, destination: &str, link: &str) -> Result<()> {
        self.mem.create_symlink(destination, link)
    }
    fn is_symlink(&self, path: &str) -> Result<bool> {
        self.mem.is_symlink(path)
    }
}

fn setup() -> (Context, Arc<Gated>) {
    let gated = Arc::new(Gated::default());
    let mut hosts = Hosts::from_one(Arc::new(MemoryHost::new()));
    hosts.filesystem = gated.clone();
    (Context::new(hosts, Config::default()), gated)
}

/// PathExists, served by a task of the runtime (as the transport serves calls).
fn path_exists(ctx: &Context, path: &str) -> tokio::task::JoinHandle<std::result::Result<bool, tonic::Status>> {
    let (ctx, path) = (ctx.clone(), path.to_string());
    tokio::spawn(async move {
        let req = Request::new(v1::PathExistsRequest { path });
        let resp = ctx.unary::<_, v1::PathExistsResponse>("v1.Filesystem", "PathExists", req).await?;
        Ok(resp.into_inner().exists)
    })
}

async fn until(mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("not reached within 5 s");
}

// One test: the worker slot is one per process, and the tests of a binary run at once.
#[test]
fn quick_calls_run_on_their_worker_one_at_a_time() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).thread_name(WORKER).enable_all().build();
    rt.unwrap().block_on(check());
}

async fn check() {
    let (ctx, gated) = setup();

    // Alone, a quick call runs on the worker; a call that is not quick (Rmdir) on the pool.
    path_exists(&ctx, r"C:\var\lib\kubelet\a").await.unwrap().unwrap();
    assert_eq!(gated.thread_of(r"C:\var\lib\kubelet\a").as_deref(), Some(WORKER));
    let req = Request::new(v1::RmdirRequest { path: r"C:\var\lib\kubelet\gone".into(), force: false });
    let _ = tokio::spawn({
        let ctx = ctx.clone();
        async move { ctx.unary::<_, v1::RmdirResponse>("v1.Filesystem", "Rmdir", req).await }
    })
    .await
    .unwrap();
    assert_eq!(gated.thread_of(r"C:\var\lib\kubelet\gone").as_deref(), Some(POOL_THREAD));

    // A quick call that hangs holds the slot and its worker; the next one that hangs goes to the
    // pool; calls keep being answered, on the pool.
    let first = path_exists(&ctx, r"C:\var\lib\kubelet\hang-1");
    until(|| gated.thread_of(r"C:\var\lib\kubelet\hang-1").is_some()).await;
    assert_eq!(gated.thread_of(r"C:\var\lib\kubelet\hang-1").as_deref(), Some(WORKER));
    let second = path_exists(&ctx, r"C:\var\lib\kubelet\hang-2");
    until(|| gated.thread_of(r"C:\var\lib\kubelet\hang-2").is_some()).await;
    assert_eq!(gated.thread_of(r"C:\var\lib\kubelet\hang-2").as_deref(), Some(POOL_THREAD));
    for i in 0..20 {
        let path = format!(r"C:\var\lib\kubelet\ok-{i}");
        let answered = tokio::time::timeout(Duration::from_secs(5), path_exists(&ctx, &path)).await;
        assert!(matches!(answered, Ok(Ok(Ok(false)))), "call {i} while two calls hang: {answered:?}");
        assert_eq!(gated.thread_of(&path).as_deref(), Some(POOL_THREAD), "call {i}");
    }
    assert!(!first.is_finished() && !second.is_finished());

    gated.release();
    assert!(!first.await.unwrap().unwrap());
    assert!(!second.await.unwrap().unwrap());

    // The slot is free again, but the inline calls have lately been slow (the hung one): while
    // another call is in flight, a quick call goes to the pool; alone, it runs on the worker.
    gated.close();
    let req = Request::new(v1::RmdirRequest { path: r"C:\var\lib\kubelet\hang-3".into(), force: false });
    let busy = tokio::spawn({
        let ctx = ctx.clone();
        async move { ctx.unary::<_, v1::RmdirResponse>("v1.Filesystem", "Rmdir", req).await.map(drop) }
    });
    until(|| gated.thread_of(r"C:\var\lib\kubelet\hang-3").is_some()).await;
    path_exists(&ctx, r"C:\var\lib\kubelet\b").await.unwrap().unwrap();
    assert_eq!(gated.thread_of(r"C:\var\lib\kubelet\b").as_deref(), Some(POOL_THREAD));
    gated.release();
    let _ = busy.await.unwrap();
    path_exists(&ctx, r"C:\var\lib\kubelet\c").await.unwrap().unwrap();
    assert_eq!(gated.thread_of(r"C:\var\lib\kubelet\c").as_deref(), Some(WORKER));
}
