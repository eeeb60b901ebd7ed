//! Per-RPC latency of the Linux disk and volume groups through the socket (not a test), with
//! eight loop disks present, each partitioned, formatted (ext4) and mounted: p50, p99 and max of
//! ListDiskIDs, GetVolumeStats, IsVolumeFormatted and GetVolumeIDFromTargetPath (the calls
//! upstream answers through WMI in 585, 290, 96 and 9 ms). Needs root (loop devices, mounts).
//!
//! `cargo bench -p csi-proxy-stack-tests --bench block` (`scripts/bench.sh` runs it as root).
//! `BLOCK_CALLS` (500): measured calls per RPC, after 50 unmeasured ones.

#[cfg(target_os = "linux")]
fn main() {
    use csi_proxy_host::types::FsType;
    use csi_proxy_stack_tests::disks::{is_root, LoopDisk};
    use csi_proxy_stack_tests::{time_rpc, Scratch, TestServer};
    use csi_proxy_wire::{v1, v2alpha1, Group};

    if !is_root() {
        eprintln!("block bench: needs root (loop devices and mounts); skipped");
        return;
    }
    let calls: usize = std::env::var("BLOCK_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(500);
    let root = Scratch::new("csi-proxy-bench-block");
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let server = rt.block_on(TestServer::start_native(vec![root.to_str().unwrap().to_string()], FsType::Ext4));

    let disks: Vec<LoopDisk> = (0..8).map(|i| LoopDisk::new(&format!("bench{i}"), 64 << 20)).collect();
    let rows = rt.block_on(async {
        let mut d = v1::disk_client::DiskClient::new(server.channel(Group::Disk, "v1").await);
        let mut c = v2alpha1::volume_client::VolumeClient::new(server.channel(Group::Volume, "v2alpha1").await);
        let mut mounted = Vec::new();
        for (i, disk) in disks.iter().enumerate() {
            d.partition_disk(v1::PartitionDiskRequest { disk_number: disk.number() }).await.unwrap();
            let req = v2alpha1::ListVolumesOnDiskRequest { disk_number: disk.number(), partition_number: 0 };
            let id = c.list_volumes_on_disk(req).await.unwrap().into_inner().volume_ids.remove(0);
            c.format_volume(v2alpha1::FormatVolumeRequest { volume_id: id.clone() }).await.unwrap();
            let target = root.join(format!("m{i}")).to_str().unwrap().to_string();
            std::fs::create_dir_all(&target).unwrap();
            c.mount_volume(v2alpha1::MountVolumeRequest { volume_id: id.clone(), target_path: target.clone() })
                .await
                .unwrap();
            mounted.push((id, target));
        }
        let (id, target) = mounted[7].clone();

        macro_rules! measure {
            ($name:expr, $call:expr) => {
                ($name, time_rpc!(calls, $call))
            };
        }
        let rows = vec![
            measure!("ListDiskIDs", d.list_disk_i_ds(v1::ListDiskIDsRequest {})),
            measure!("GetVolumeStats", c.get_volume_stats(v2alpha1::GetVolumeStatsRequest { volume_id: id.clone() })),
            measure!(
                "IsVolumeFormatted",
                c.is_volume_formatted(v2alpha1::IsVolumeFormattedRequest { volume_id: id.clone() })
            ),
            measure!(
                "GetVolumeIDFromTargetPath",
                c.get_volume_id_from_target_path(v2alpha1::GetVolumeIdFromTargetPathRequest {
                    target_path: target.clone()
                })
            ),
        ];
        for (id, target) in mounted {
            c.unmount_volume(v2alpha1::UnmountVolumeRequest { volume_id: id, target_path: target }).await.unwrap();
        }
        rows
    });
    rt.block_on(server.stop());
    drop(disks);
    drop(root);

    println!("block: {calls} calls per RPC, 8 loop disks partitioned, formatted (ext4) and mounted, unix socket");
    println!("{:<28} {:>10} {:>10} {:>10}", "rpc", "p50 µs", "p99 µs", "max µs");
    for (name, figures) in rows {
        println!("{name:<28} {}", figures.micros());
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("block bench: Linux only");
}
