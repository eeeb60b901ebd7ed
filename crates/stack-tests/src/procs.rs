//! Whether a secret shows in any process's argv or environment (what `ps` and
//! `/proc/<pid>/environ` show), watched by a thread while the calls that carry it run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Every process's argv and environment, scanned over and over until stopped; the hits.
pub struct Scanner {
    stop: Arc<AtomicBool>,
    hits: Arc<Mutex<Vec<String>>>,
    scans: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Scanner {
    pub fn start(needles: &[&str]) -> Self {
        let needles: Vec<Vec<u8>> = needles.iter().map(|n| n.as_bytes().to_vec()).collect();
        let (stop, hits, scans) = (Arc::new(AtomicBool::new(false)), Arc::default(), Arc::default());
        let (stop2, hits2, scans2): (_, Arc<Mutex<Vec<String>>>, Arc<AtomicU64>) =
            (stop.clone(), Arc::clone(&hits), Arc::clone(&scans));
        let thread = std::thread::spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                for entry in std::fs::read_dir("/proc").unwrap().flatten() {
                    for file in ["cmdline", "environ"] {
                        let Ok(bytes) = std::fs::read(entry.path().join(file)) else { continue };
                        for n in &needles {
                            if bytes.windows(n.len()).any(|w| w == n.as_slice()) {
                                let what = String::from_utf8_lossy(&bytes).replace('\0', " ");
                                hits2.lock().unwrap().push(format!("{}/{file}: {what}", entry.path().display()));
                            }
                        }
                    }
                }
                scans2.fetch_add(1, Ordering::Relaxed);
            }
        });
        Scanner { stop, hits, scans, thread: Some(thread) }
    }

    /// Stops; the hits, after at least one whole scan.
    pub fn finish(mut self) -> Vec<String> {
        let first = self.scans.load(Ordering::Relaxed);
        while self.scans.load(Ordering::Relaxed) < first + 1 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.hits.lock().unwrap().clone()
    }
}

/// How many unix sockets bound below `dir` are open on the machine (`/proc/net/unix`, which
/// names a socket by the path it was bound at, a server's staging name included): listening
/// sockets and every connection they accepted carry that path, the clients' ends don't.
pub fn sockets_under(dir: &std::path::Path) -> usize {
    let table = std::fs::read_to_string("/proc/net/unix").unwrap();
    let dir = format!("{}/", dir.to_str().unwrap());
    table.lines().skip(1).filter(|l| l.split_whitespace().nth(7).is_some_and(|p| p.starts_with(&dir))).count()
}

/// This process' open file descriptors and threads.
pub fn fds_and_threads() -> (usize, usize) {
    let count = |d: &str| std::fs::read_dir(d).unwrap().count();
    (count("/proc/self/fd"), count("/proc/self/task"))
}
