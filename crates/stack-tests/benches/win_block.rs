//! Per-RPC latency of the Windows disk and volume groups (not a test): the read-only calls that
//! drivers make on every stage, publish and stats poll, answered from Win32 (upstream answers
//! them through WMI: GetVolumeStats 290 ms, IsVolumeFormatted 96 ms). Two figures each:
//! - through the real named pipe, served by the native backend (the whole stack);
//! - the host call alone, without gRPC.
//!
//! Under Wine here, on Wine's C: volume and disk 0; figures from Wine are only indicative of
//! Windows. `windows-cross cargo bench -p csi-proxy-stack-tests --bench win_block`
//! (`scripts/bench.sh` runs it). `WIN_BLOCK_CALLS` (500): measured calls per RPC, after 50.

#[cfg(windows)]
fn main() {
    use csi_proxy_host::windows::platform::win32::RealWin32;
    use csi_proxy_host::windows::Win32;
    use csi_proxy_host::Config as HostConfig;
    use csi_proxy_server::{Config, Context};
    use csi_proxy_stack_tests::pipes::{self, PipeServer};
    use csi_proxy_stack_tests::{api, latency, time_rpc, Scratch};
    use csi_proxy_wire::{v1, v2alpha1, Group};

    let calls: usize = std::env::var("WIN_BLOCK_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let root = Scratch::new("csi-proxy-bench-win");
    let deep = root.dir(r"a\b");
    let host_config = || HostConfig {
        roots: csi_proxy_host::paths::Roots::new(vec![root.to_str().unwrap().to_string()]),
        ..Default::default()
    };
    let volume = RealWin32.volume_name_for_mount_point(r"C:\").unwrap();

    let mut rows = Vec::new();

    // The host calls alone.
    let host = csi_proxy_host::native(host_config());
    let mut direct = |name: &'static str, f: &dyn Fn()| rows.push((name, "host call", latency::time(calls, f)));
    direct("GetVolumeStats", &|| assert!(host.volume.get_volume_stats(&volume).unwrap().total_bytes > 0));
    direct("IsVolumeFormatted", &|| assert!(host.volume.is_volume_formatted(&volume).unwrap()));
    direct("GetClosestVolumeIDFromTargetPath", &|| {
        drop(host.volume.get_closest_volume_id_from_target_path(&deep).unwrap())
    });
    direct("GetDiskStats", &|| assert!(host.disk.get_disk_stats(0).unwrap() > 0));

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let piped = rt.block_on(async {
        let apis = [api(Group::Disk, "v1"), api(Group::Volume, "v2alpha1")];
        let server = PipeServer::start(&apis, Context::new(csi_proxy_host::native(host_config()), Config::default()));
        let mut d = v1::disk_client::DiskClient::new(pipes::channel(Group::Disk, "v1").await);
        let mut c = v2alpha1::volume_client::VolumeClient::new(pipes::channel(Group::Volume, "v2alpha1").await);
        macro_rules! measure {
            ($name:expr, $call:expr) => {
                ($name, "named pipe", time_rpc!(calls, $call))
            };
        }
        let id = volume.clone();
        let rows = vec![
            measure!("GetVolumeStats", c.get_volume_stats(v2alpha1::GetVolumeStatsRequest { volume_id: id.clone() })),
            measure!(
                "IsVolumeFormatted",
                c.is_volume_formatted(v2alpha1::IsVolumeFormattedRequest { volume_id: id.clone() })
            ),
            measure!(
                "GetClosestVolumeIDFromTargetPath",
                c.get_closest_volume_id_from_target_path(v2alpha1::GetClosestVolumeIdFromTargetPathRequest {
                    target_path: deep.clone()
                })
            ),
            measure!("GetDiskStats", d.get_disk_stats(v1::GetDiskStatsRequest { disk_number: 0 })),
        ];
        server.stop().await;
        rows
    });
    rows.extend(piped);
    drop(root);

    println!("win_block: {calls} calls per RPC on Wine's C: volume and disk 0 (Wine, indicative only)");
    println!("{:<34} {:<11} {:>10} {:>10} {:>10}", "rpc", "via", "p50 µs", "p99 µs", "max µs");
    for (name, via, figures) in rows {
        println!("{name:<34} {via:<11} {}", figures.micros());
    }
}

#[cfg(not(windows))]
fn main() {
    eprintln!("win_block bench: Windows only (run it with ../shared/tools/windows-cross)");
}
