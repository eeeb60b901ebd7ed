//! Soak benchmark (not a test): the real daemon binary, 64 clients each on its own connection
//! calling a mix of read-only RPCs back to back, for a long time; the daemon's resident memory
//! (VmRSS), thread count and open descriptors are sampled at a fixed interval and printed as a
//! series, with the calls served per interval. Memory must flatten: a leak or an unbounded cache
//! shows as a series that keeps climbing.
//!
//!   cargo bench -p csi-proxy --bench soak                       30 minutes, a sample every 30 s
//!   SOAK_SECONDS=120 SOAK_SAMPLE_SECONDS=10 cargo bench -p csi-proxy --bench soak
//!   SOAK_CLIENTS=16 …                                           fewer clients
//!
//! Linux only (unix sockets and /proc). Figures are printed, never asserted.

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("the soak benchmark runs on Linux only");
}

#[cfg(target_os = "linux")]
fn main() {
    linux::main()
}

#[cfg(target_os = "linux")]
mod linux {
    use csi_proxy_wire::{v1, v1alpha1, Group};
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    const BIN: &str = env!("CARGO_BIN_EXE_csi-proxy");

    fn env_u64(name: &str, default: u64) -> u64 {
        std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
    }

    /// (VmRSS in KiB, threads, open descriptors) of a process.
    fn sample(pid: u32) -> (u64, u64, usize) {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0);
        (field("VmRSS:"), field("Threads:"), fds)
    }

    async fn channel(path: PathBuf) -> tonic::transport::Channel {
        csi_proxy_client::connect_socket(path, Duration::ZERO).await.expect("connect")
    }

    fn socket(dir: &Path, group: Group, version: &str) -> PathBuf {
        let api = csi_proxy_client::find_api(group.name(), version).expect("a served API");
        api.socket_path(dir)
    }

    /// One client: its own connections, a fixed mix of read-only calls, until `stop`.
    async fn client(
        i: usize,
        dir: PathBuf,
        root: PathBuf,
        calls: Arc<AtomicU64>,
        failures: Arc<AtomicU64>,
        stop: Instant,
    ) {
        let mut fs = v1::filesystem_client::FilesystemClient::new(channel(socket(&dir, Group::Filesystem, "v1")).await);
        let mut disk = v1::disk_client::DiskClient::new(channel(socket(&dir, Group::Disk, "v1")).await);
        let mut volume = v1::volume_client::VolumeClient::new(channel(socket(&dir, Group::Volume, "v1")).await);
        let mut system =
            v1alpha1::system_client::SystemClient::new(channel(socket(&dir, Group::System, "v1alpha1")).await);
        let existing = root.join("pods").display().to_string();
        let missing = root.join(format!("pods/none-{i}")).display().to_string();
        let mut n = 0u64;
        while Instant::now() < stop {
            let ok = match n % 6 {
                0 => fs.path_exists(v1::PathExistsRequest { path: existing.clone() }).await.is_ok(),
                1 => fs.path_exists(v1::PathExistsRequest { path: missing.clone() }).await.is_ok(),
                2 => fs.is_symlink(v1::IsSymlinkRequest { path: existing.clone() }).await.is_ok(),
                3 => disk.list_disk_i_ds(v1::ListDiskIDsRequest {}).await.is_ok(),
                // A refusal is a read too: the error path must not leak either.
                4 => volume
                    .get_volume_id_from_target_path(v1::GetVolumeIdFromTargetPathRequest {
                        target_path: existing.clone(),
                    })
                    .await
                    .is_err(),
                // No serial in a VM or a container (NotFound) is an answer as well.
                _ => !matches!(
                    system.get_bios_serial_number(v1alpha1::GetBiosSerialNumberRequest {}).await,
                    Err(s) if s.code() != tonic::Code::NotFound
                ),
            };
            calls.fetch_add(1, Ordering::Relaxed);
            if !ok {
                failures.fetch_add(1, Ordering::Relaxed);
            }
            n += 1;
        }
    }

    pub fn main() {
        let seconds = env_u64("SOAK_SECONDS", 1800);
        let every = env_u64("SOAK_SAMPLE_SECONDS", 30).max(1);
        let clients = env_u64("SOAK_CLIENTS", 64) as usize;
        let base = std::env::temp_dir().join(format!("csi-proxy-soak-{}", std::process::id()));
        let (dir, root) = (base.join("sockets"), base.join("kubelet"));
        std::fs::create_dir_all(root.join("pods")).unwrap();
        let mut daemon = Command::new(BIN)
            .arg("-socket-dir")
            .arg(&dir)
            .arg("-kubelet-path")
            .arg(&root)
            .arg("-v=0")
            .stderr(Stdio::null())
            .spawn()
            .expect("start the daemon");
        let pid = daemon.id();
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket(&dir, Group::System, "v1alpha1").exists() {
            assert!(Instant::now() < deadline, "the daemon did not create its sockets");
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        let (calls, failures) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let start = Instant::now();
        let stop = start + Duration::from_secs(seconds);
        let (rss0, threads0, fds0) = sample(pid);
        println!("soak: {clients} clients, {seconds} s, a sample every {every} s; daemon pid {pid}");
        println!("{:>7} {:>10} {:>8} {:>6} {:>12} {:>9}", "t (s)", "RSS (KiB)", "threads", "fds", "calls", "calls/s");
        println!("{:>7} {rss0:>10} {threads0:>8} {fds0:>6} {:>12} {:>9}", 0, 0, "-");
        let tasks: Vec<_> = (0..clients)
            .map(|i| rt.spawn(client(i, dir.clone(), root.clone(), calls.clone(), failures.clone(), stop)))
            .collect();
        let mut series = vec![rss0];
        let mut last_calls = 0;
        let mut t = 0;
        while t < seconds {
            let step = every.min(seconds - t);
            std::thread::sleep(Duration::from_secs(step));
            t += step;
            let (rss, threads, fds) = sample(pid);
            let total = calls.load(Ordering::Relaxed);
            println!(
                "{t:>7} {rss:>10} {threads:>8} {fds:>6} {total:>12} {:>9.0}",
                (total - last_calls) as f64 / step as f64
            );
            last_calls = total;
            series.push(rss);
        }
        for task in tasks {
            let _ = rt.block_on(task);
        }
        let (rss_end, _, fds_end) = sample(pid);
        let _ = daemon.kill();
        let _ = daemon.wait();
        let _ = std::fs::remove_dir_all(&base);
        // Growth over the second half of the run against the first half: a flat series stays near 0.
        let n = series.len();
        let (first, last) = (series[1.min(n - 1)], series[n - 1]);
        let mid = series[n / 2];
        println!(
            "soak: {} calls, {} failed; RSS {} KiB at the first sample, {} KiB at the middle, {} KiB at the end \
             (second half {:+} KiB); {} KiB, {} fds after the clients stopped",
            calls.load(Ordering::Relaxed),
            failures.load(Ordering::Relaxed),
            first,
            mid,
            last,
            last as i64 - mid as i64,
            rss_end,
            fds_end
        );
    }
}
