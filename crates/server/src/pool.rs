//! The threads that run host work. Host calls block (syscalls, tools, WMI), so they run off the
//! async workers, on a pool whose size follows need rather than concurrency:
//!
//! - `core` threads are started on demand and kept: a burst of cheap calls queues onto them and
//!   creates no thread;
//! - a call whose work has not started within [`GROW_AFTER`] (every thread busy with slow or hung
//!   work) adds a thread, up to `max`; threads beyond `core` leave after [`KEEP_ALIVE`] idle. So a
//!   slow call delays others by at most that much, and hung host work holds at most `max` threads;
//! - work whose caller has gone (cancelled while queued) is skipped.

use csi_proxy_sync::LockExt;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Duration;

/// How long queued work waits for a thread before the pool adds one.
pub const GROW_AFTER: Duration = Duration::from_millis(10);
/// How long a thread beyond the core count stays idle before it exits.
pub const KEEP_ALIVE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

pub struct Pool {
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
}

/// Whether submitted work has a thread to start it right away.
#[derive(Debug, PartialEq, Eq)]
pub enum Submitted {
    Starting,
    Queued,
}

impl Pool {
    pub const fn new(name: &'static str, core: usize, max: usize) -> Pool {
        Pool {
            name,
            core,
            max,
            state: Mutex::new(State { jobs: VecDeque::new(), threads: 0, sleeping: 0, wakes: 0, peak: 0 }),
            work: Condvar::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock_ignoring_poison()
    }

    /// Queues `job`. It must not panic (callers catch panics inside it).
    pub fn submit(&'static self, job: Job) -> Submitted {
        let mut s = self.state();
        s.jobs.push_back(job);
        if s.sleeping > s.wakes {
            s.wakes += 1;
            drop(s);
            self.work.notify_one();
            return Submitted::Starting;
        }
        if s.threads < self.core.max(1) && self.spawn(&mut s) {
            return Submitted::Starting;
        }
        Submitted::Queued
    }

    /// Adds a thread if work is still queued and the pool is below its bound (called by a caller
    /// whose work has waited [`GROW_AFTER`]).
    pub fn grow(&'static self) {
        let mut s = self.state();
        if s.jobs.len() > s.wakes && s.threads < self.max {
            self.spawn(&mut s);
        }
    }

    /// Threads now and most ever.
    pub fn threads(&self) -> (usize, usize) {
        let s = self.state();
        (s.threads, s.peak)
    }

    fn spawn(&'static self, s: &mut State) -> bool {
        let started = std::thread::Builder::new().name(format!("csi-proxy-{}", self.name)).spawn(move || self.serve());
        match started {
            Ok(_) => {
                s.threads += 1;
                s.peak = s.peak.max(s.threads);
                true
            }
            Err(e) => {
                // The work stays queued for the threads there are; the caller asks again.
                tracing::warn!(pool = self.name, error = %e, "could not start a host-work thread");
                false
            }
        }
    }

    fn serve(&'static self) {
        let mut s = self.state();
        loop {
            if let Some(job) = s.jobs.pop_front() {
                drop(s);
                job();
                s = self.state();
                continue;
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
        static POOL: Pool = Pool::new("test-burst", 2, 8);
        let (tx, rx) = mpsc::channel();
        for i in 0..200 {
            let tx = tx.clone();
            POOL.submit(Box::new(move || tx.send(i).unwrap()));
        }
        let mut got: Vec<i32> = (0..200).map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
        assert_eq!(POOL.threads().1, 2, "no thread beyond the core count without a slow job");
    }

    #[test]
    fn a_stuck_job_does_not_starve_the_queue_once_grown() {
        static POOL: Pool = Pool::new("test-stuck", 1, 3);
        let (release, stuck) = mpsc::channel::<()>();
        let stuck = Mutex::new(stuck);
        let stuck: &'static Mutex<mpsc::Receiver<()>> = Box::leak(Box::new(stuck));
        assert_eq!(
            POOL.submit(Box::new(move || {
                let _ = stuck.lock().unwrap().recv();
            })),
            Submitted::Starting
        );
        let done = Arc::new(AtomicUsize::new(0));
        let d = done.clone();
        assert_eq!(
            POOL.submit(Box::new(move || {
                d.fetch_add(1, Ordering::SeqCst);
            })),
            Submitted::Queued
        );
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(done.load(Ordering::SeqCst), 0, "the only thread is stuck");
        POOL.grow();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while done.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "the grown thread ran the queued job");
            std::thread::sleep(Duration::from_millis(1));
        }
        POOL.grow();
        assert_eq!(POOL.threads().0, 2, "nothing queued: no growth");
        release.send(()).unwrap();
    }
}
