//! The threads that run host work. Host calls block (syscalls, tools, WMI), so they run off the
//! async workers, on a pool whose size follows need rather than concurrency:
//!
//! - `core` threads are started on demand and kept: a burst of cheap calls queues onto them and
//!   creates no thread;
//! - a call whose work has not started within [`GROW_AFTER`] (every thread busy with slow or hung
//!   work) adds a thread, up to `max`; threads beyond `core` leave after [`KEEP_ALIVE`] idle. So a
//!   slow call delays others by at most that much, and hung host work holds at most `max` threads;
//! - work whose caller has gone (cancelled while queued) is skipped.
//!
//! A pool belongs to the server's [`crate::Context`] ([`Pools`]); once it is dropped its threads
//! leave as they run out of queued work.

use csi_proxy_sync::LockExt;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long queued work waits for a thread before the pool adds one.
pub const GROW_AFTER: Duration = Duration::from_millis(10);
/// How long a thread beyond the core count stays idle before it exits.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

/// The two pools of a server (see [`crate::call`] for which calls use which).
pub struct Pools {
    /// Calls that hold no server lock: read-only calls and those that take their own turns (SMB
    /// mounts, iSCSI logins, service control), which may be slow or hang on the network. As
    /// many threads kept as CPUs.
    pub unlocked: Pool,
    /// Calls that hold a disk (partition, format, resize, mount, a rescan's refreshes): at most
    /// one runs per disk, so this bounds the disks worked on at once.
    pub locked: Pool,
}

impl Default for Pools {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        // The thread names ("csi-proxy-call", "csi-proxy-serial") are what diagnostics show.
        Pools { unlocked: Pool::new("call", cpus.max(2), 64), locked: Pool::new("serial", 1, 32) }
    }
}

/// A pool of host-work threads; its threads hold its shared state, the owner this handle.
pub struct Pool(Arc<Shared>);

struct Shared {
    name: &'static str,
    core: usize,
    max: usize,
    state: Mutex<State>,
    work: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    threads: usize,
    /// Threads waiting on `work`, and wake-ups sent to them not yet taken: a job is handed to a
    /// sleeping thread only if one is left unclaimed, so every notify wakes a thread with work.
    sleeping: usize,
    wakes: usize,
    /// Most threads ever (for benchmarks and diagnostics).
    peak: usize,
    /// The owner is gone: threads leave once no work is queued.
    closed: bool,
}

/// Whether submitted work has a thread to start it right away.
#[derive(Debug, PartialEq, Eq)]
pub enum Submitted {
    Starting,
    Queued,
}

impl Pool {
    pub fn new(name: &'static str, core: usize, max: usize) -> Pool {
        Pool(Arc::new(Shared { name, core, max, state: Mutex::default(), work: Condvar::new() }))
    }

    /// Queues `job`. It must not panic (callers catch panics inside it).
    pub fn submit(&self, job: Job) -> Submitted {
        let mut s = self.0.state();
        s.jobs.push_back(job);
        if s.sleeping > s.wakes {
            s.wakes += 1;
            drop(s);
            self.0.work.notify_one();
            return Submitted::Starting;
        }
        if s.threads < self.0.core.max(1) && Shared::spawn(&self.0, &mut s) {
            return Submitted::Starting;
        }
        Submitted::Queued
    }

    /// Adds a thread if work is still queued and the pool is below its bound (called by a caller
    /// whose work has waited [`GROW_AFTER`]).
    pub fn grow(&self) {
        let mut s = self.0.state();
        if s.jobs.len() > s.wakes && s.threads < self.0.max {
            Shared::spawn(&self.0, &mut s);
        }
    }

    /// Threads now and most ever.
    pub fn threads(&self) -> (usize, usize) {
        let s = self.0.state();
        (s.threads, s.peak)
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.0.state().closed = true;
        self.0.work.notify_all();
    }
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock_ignoring_poison()
    }

    fn spawn(this: &Arc<Shared>, s: &mut State) -> bool {
        let shared = this.clone();
        let started =
            std::thread::Builder::new().name(format!("csi-proxy-{}", this.name)).spawn(move || shared.serve());
        match started {
            Ok(_) => {
                s.threads += 1;
                s.peak = s.peak.max(s.threads);
                true
            }
            Err(e) => {
                // The work stays queued for the threads there are; the caller asks again.
                tracing::warn!(pool = this.name, error = %e, "could not start a host-work thread");
                false
            }
        }
    }

    fn serve(&self) {
        let mut s = self.state();
        loop {
            if let Some(job) = s.jobs.pop_front() {
                drop(s);
                job();
                s = self.state();
                continue;
            }
            if s.closed {
                s.threads -= 1;
                return;
            }
            s.sleeping += 1;
            let (next, timeout) = self.work.wait_timeout(s, KEEP_ALIVE).unwrap_or_else(PoisonError::into_inner);
            s = next;
            s.sleeping -= 1;
            s.wakes = s.wakes.saturating_sub(1).min(s.sleeping);
            if timeout.timed_out() && s.jobs.is_empty() && s.threads > self.core {
                s.threads -= 1;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};

    #[test]
    fn a_burst_runs_on_the_core_threads() {
        let pool = Pool::new("test-burst", 2, 8);
        let (tx, rx) = mpsc::channel();
        for i in 0..200 {
            let tx = tx.clone();
            pool.submit(Box::new(move || tx.send(i).unwrap()));
        }
        let mut got: Vec<i32> = (0..200).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
        assert_eq!(pool.threads().1, 2, "no thread beyond the core count without a slow job");
    }

    #[test]
    fn a_stuck_job_does_not_starve_the_queue_once_grown() {
        let pool = Pool::new("test-stuck", 1, 3);
        let (release, stuck) = mpsc::channel::<()>();
        let stuck = Mutex::new(stuck);
        let stuck: &'static Mutex<mpsc::Receiver<()>> = Box::leak(Box::new(stuck));
        assert_eq!(
            pool.submit(Box::new(move || {
                let _ = stuck.lock().unwrap().recv();
            })),
            Submitted::Starting
        );
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        assert_eq!(
            pool.submit(Box::new(move || {
                d.fetch_add(1, Ordering::SeqCst);
            })),
            Submitted::Queued
        );
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(done.load(Ordering::SeqCst), 0, "the only thread is stuck");
        pool.grow();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while done.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "the grown thread ran the queued job");
            std::thread::sleep(Duration::from_millis(1));
        }
        pool.grow();
        assert_eq!(pool.threads().0, 2, "nothing queued: no growth");
        release.send(()).unwrap();
    }

    #[test]
    fn a_dropped_pool_lets_its_threads_go() {
        let pool = Pool::new("test-drop", 2, 4);
        let (tx, rx) = mpsc::channel();
        for _ in 0..2 {
            let tx = tx.clone();
            pool.submit(Box::new(move || tx.send(()).unwrap()));
        }
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(5)).unwrap();
        }
        let shared = pool.0.clone();
        assert!(shared.state().threads >= 1);
        drop(pool);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while shared.state().threads > 0 {
            assert!(std::time::Instant::now() < deadline, "the threads of a dropped pool leave");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
