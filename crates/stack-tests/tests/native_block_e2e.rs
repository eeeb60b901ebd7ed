#![cfg(target_os = "linux")]
//! The disk and volume groups on the native Linux backend, through the socket, on loop disks over
//! sparse files: the whole life of a volume with the v1 and v2alpha1 clients, idempotency, bad
//! input, and eight disks at once. Needs root (CI runs as root); skipped with a note otherwise.

use csi_proxy_host::types::FsType;
use csi_proxy_stack_tests::disks::LoopDisk;
use csi_proxy_stack_tests::{assert_status, mounts, needs_root, Scratch, TestServer};
use csi_proxy_wire::{v1, v2alpha1, Group};
use std::fs;
use tonic::Code;

const MIB: u64 = 1 << 20;

/// A kubelet root under /tmp for mount targets (what a failed test left mounted there goes too).
fn kubelet_root(tag: &str) -> Scratch {
    Scratch::new(&format!("csi-proxy-blk-{tag}"))
}

fn mounted_at(target: &str) -> bool {
    !mounts::mounted_at(target).is_empty()
}

macro_rules! volume_life {
    ($name:ident, $v:ident, $fs:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            needs_root!();
            let root = kubelet_root(stringify!($name));
            let s = TestServer::start_native(vec![root.p("")], $fs).await;
            let disk = LoopDisk::new(stringify!($name), 512 * MIB);
            let number = disk.number();
            let mut d = v1::disk_client::DiskClient::new(s.channel(Group::Disk, "v1").await);
            let mut c = $v::volume_client::VolumeClient::new(s.channel(Group::Volume, stringify!($v)).await);

            // The disk is listed, blank; partitioning twice changes nothing the second time.
            let locations = d.list_disk_locations(v1::ListDiskLocationsRequest {}).await.unwrap().into_inner();
            assert!(locations.disk_locations.contains_key(&number), "{number} not in {locations:?}");
            let stats = d.get_disk_stats(v1::GetDiskStatsRequest { disk_number: number }).await.unwrap().into_inner();
            assert_eq!(stats.total_bytes, (512 * MIB) as i64);
            d.partition_disk(v1::PartitionDiskRequest { disk_number: number }).await.unwrap();
            d.partition_disk(v1::PartitionDiskRequest { disk_number: number }).await.unwrap();
            let list = |n| $v::ListVolumesOnDiskRequest { disk_number: number, partition_number: n };
            let ids = c.list_volumes_on_disk(list(0)).await.unwrap().into_inner().volume_ids;
            assert_eq!(ids.len(), 1, "{ids:?}");
            let id = ids[0].clone();
            assert!(id.starts_with(r"\\?\Volume{") && id.ends_with(r"}\"), "{id}");
            assert_eq!(c.list_volumes_on_disk(list(1)).await.unwrap().into_inner().volume_ids, ids);
            let n = c.get_disk_number_from_volume_id($v::GetDiskNumberFromVolumeIdRequest { volume_id: id.clone() });
            assert_eq!(n.await.unwrap().into_inner().disk_number, number);

            // Format once; a second format is refused and changes nothing.
            let formatted = |c: &mut $v::volume_client::VolumeClient<_>| {
                let id = id.clone();
                let mut c = c.clone();
                async move {
                    c.is_volume_formatted($v::IsVolumeFormattedRequest { volume_id: id })
                        .await
                        .unwrap()
                        .into_inner()
                        .formatted
                }
            };
            assert!(!formatted(&mut c).await);
            c.format_volume($v::FormatVolumeRequest { volume_id: id.clone() }).await.unwrap();
            assert!(formatted(&mut c).await);
            assert_status(
                c.format_volume($v::FormatVolumeRequest { volume_id: id.clone() }).await,
                Code::FailedPrecondition,
                "",
            );

            // Mount (twice), write, stats, volume lookups by path.
            let target = root.p("pods/p1/volumes/v");
            fs::create_dir_all(&target).unwrap();
            let mount = || $v::MountVolumeRequest { volume_id: id.clone(), target_path: target.clone() };
            let unmount = || $v::UnmountVolumeRequest { volume_id: id.clone(), target_path: target.clone() };
            c.mount_volume(mount()).await.unwrap();
            c.mount_volume(mount()).await.unwrap();
            assert!(mounted_at(&target));
            fs::write(format!("{target}/data"), vec![7u8; 8 << 20]).unwrap();
            c.write_volume_cache($v::WriteVolumeCacheRequest { volume_id: id.clone() }).await.unwrap();
            let stats = || $v::GetVolumeStatsRequest { volume_id: id.clone() };
            let before = c.get_volume_stats(stats()).await.unwrap().into_inner();
            assert!(before.total_bytes > (400 * MIB) as i64 && before.used_bytes >= (8 << 20), "{before:?}");
            let at =
                c.get_volume_id_from_target_path($v::GetVolumeIdFromTargetPathRequest { target_path: target.clone() });
            assert_eq!(at.await.unwrap().into_inner().volume_id, id);

            // Grow the disk, rescan, resize to all the space; the filesystem grew.
            disk.grow_file(768 * MIB);
            d.rescan(v1::RescanRequest {}).await.unwrap();
            let stats_now =
                d.get_disk_stats(v1::GetDiskStatsRequest { disk_number: number }).await.unwrap().into_inner();
            assert_eq!(stats_now.total_bytes, (768 * MIB) as i64);
            let resize = |size: i64| $v::ResizeVolumeRequest { volume_id: id.clone(), size_bytes: size };
            match c.resize_volume(resize(0)).await {
                Ok(_) => {}
                // ext4 grows online only with CAP_SYS_RESOURCE; without it, offline.
                Err(s) if s.code() == Code::FailedPrecondition => {
                    c.unmount_volume(unmount()).await.unwrap();
                    c.resize_volume(resize(0)).await.unwrap();
                    c.mount_volume(mount()).await.unwrap();
                }
                Err(s) => panic!("resize: {s:?}"),
            }
            c.resize_volume(resize(0)).await.unwrap();
            let after = c.get_volume_stats(stats()).await.unwrap().into_inner();
            assert!(after.total_bytes > before.total_bytes + (200 * MIB) as i64, "{before:?} -> {after:?}");

            // Unmount (twice), remount: the data is there.
            c.unmount_volume(unmount()).await.unwrap();
            c.unmount_volume(unmount()).await.unwrap();
            assert!(!mounted_at(&target));
            c.mount_volume(mount()).await.unwrap();
            assert_eq!(fs::metadata(format!("{target}/data")).unwrap().len(), 8 << 20);
            c.unmount_volume(unmount()).await.unwrap();
        }
    };
}

volume_life!(v1_volume_life_ext4, v1, FsType::Ext4);
volume_life!(v2alpha1_volume_life_xfs, v2alpha1, FsType::Xfs);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_changes_nothing() {
    needs_root!();
    let root = kubelet_root("bad");
    let s = TestServer::start_native(vec![root.p("")], FsType::Ext4).await;
    let disk = LoopDisk::new("bad", 64 * MIB);
    let mut d = v1::disk_client::DiskClient::new(s.channel(Group::Disk, "v1").await);
    let mut c = v2alpha1::volume_client::VolumeClient::new(s.channel(Group::Volume, "v2alpha1").await);

    assert_status(d.partition_disk(v1::PartitionDiskRequest { disk_number: 12345 }).await, Code::NotFound, "12345");
    assert_status(d.get_disk_stats(v1::GetDiskStatsRequest { disk_number: 12345 }).await, Code::NotFound, "12345");
    let fmt = |id: &str| v2alpha1::FormatVolumeRequest { volume_id: id.into() };
    assert_status(c.format_volume(fmt("not-a-volume")).await, Code::InvalidArgument, "not-a-volume");
    let unknown = r"\\?\Volume{01234567-89ab-cdef-0123-456789abcdef}\";
    assert_status(c.format_volume(fmt(unknown)).await, Code::NotFound, "01234567-89ab-cdef-0123-456789abcdef");

    d.partition_disk(v1::PartitionDiskRequest { disk_number: disk.number() }).await.unwrap();
    let req = v2alpha1::ListVolumesOnDiskRequest { disk_number: disk.number(), partition_number: 0 };
    let id = c.list_volumes_on_disk(req).await.unwrap().into_inner().volume_ids.remove(0);
    c.format_volume(fmt(&id)).await.unwrap();
    // A target outside the roots: refused, nothing mounted.
    let outside = Scratch::new("csi-proxy-blk-outside");
    let target = outside.to_str().unwrap().to_string();
    let mount = v2alpha1::MountVolumeRequest { volume_id: id.clone(), target_path: target.clone() };
    assert_status(c.mount_volume(mount).await, Code::PermissionDenied, &target);
    assert!(!mounted_at(&target));
    drop(outside);
    let none = root.p("none");
    let r = c.get_volume_id_from_target_path(v2alpha1::GetVolumeIdFromTargetPathRequest { target_path: none }).await;
    assert!(r.is_err(), "{r:?}");
}

/// Eight disks partitioned, formatted and mounted at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_disks_at_once() {
    needs_root!();
    let root = kubelet_root("eight");
    let s = TestServer::start_native(vec![root.p("")], FsType::Ext4).await;
    let disks: Vec<LoopDisk> = (0..8).map(|i| LoopDisk::new(&format!("eight{i}"), 64 * MIB)).collect();
    let mut tasks = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let number = disk.number();
        let (dch, vch) = (s.channel(Group::Disk, "v1").await, s.channel(Group::Volume, "v1").await);
        let target = root.p(&format!("m{i}"));
        fs::create_dir_all(&target).unwrap();
        tasks.push(tokio::spawn(async move {
            let mut d = v1::disk_client::DiskClient::new(dch);
            let mut c = v1::volume_client::VolumeClient::new(vch);
            d.partition_disk(v1::PartitionDiskRequest { disk_number: number }).await.unwrap();
            let req = v1::ListVolumesOnDiskRequest { disk_number: number, partition_number: 0 };
            let id = c.list_volumes_on_disk(req).await.unwrap().into_inner().volume_ids.remove(0);
            c.format_volume(v1::FormatVolumeRequest { volume_id: id.clone() }).await.unwrap();
            c.mount_volume(v1::MountVolumeRequest { volume_id: id.clone(), target_path: target.clone() })
                .await
                .unwrap();
            (id, target)
        }));
    }
    let mut mounted = Vec::new();
    for t in tasks {
        mounted.push(t.await.unwrap());
    }
    let mut c = v1::volume_client::VolumeClient::new(s.channel(Group::Volume, "v1").await);
    let ids: std::collections::BTreeSet<_> = mounted.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids.len(), 8, "eight distinct volume IDs");
    for (id, target) in mounted {
        assert!(mounted_at(&target), "{target}");
        let at = c.get_volume_id_from_target_path(v1::GetVolumeIdFromTargetPathRequest { target_path: target.clone() });
        assert_eq!(at.await.unwrap().into_inner().volume_id, id);
        c.unmount_volume(v1::UnmountVolumeRequest { volume_id: id, target_path: target }).await.unwrap();
    }
}
