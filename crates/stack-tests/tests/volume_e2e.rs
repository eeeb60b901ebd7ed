#![cfg(unix)]
//! Every volume RPC of every version, through a real socket, against the in-memory host.

use csi_proxy_host::memory::SimVolume;
use csi_proxy_host::DiskHost;
use csi_proxy_stack_tests::{assert_status, TestServer};
use csi_proxy_wire::{v1, v1alpha1, v1beta1, v1beta2, v1beta3, v2alpha1, Group};
use tonic::Code;

const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;

/// Partitions disk `disk` (volume `vol-<disk>-1`) through the host trait and adds a second,
/// 1 MiB partition `vol-<disk>-2` by hand, so "every partition" can be told from "the first".
fn two_volumes(s: &TestServer, disk: u32) {
    s.host.partition_disk(disk).unwrap();
    s.host.with(|st| {
        let id = format!("vol-{disk}-2");
        st.disks.get_mut(&disk).unwrap().partitions.insert(2, id.clone());
        st.volumes.insert(
            id,
            SimVolume {
                disk,
                partition: 2,
                size: MIB as u64,
                used: 0,
                formatted: false,
                mounts: Default::default(),
                flushes: 0,
            },
        );
    });
}

fn mounts(s: &TestServer, volume: &str) -> Vec<String> {
    s.host.with(|st| st.volumes[volume].mounts.iter().cloned().collect())
}

fn size_of(s: &TestServer, volume: &str) -> u64 {
    s.host.with(|st| st.volumes[volume].size)
}

/// RPCs of v1alpha1, v1beta1 and v1beta2: string disk IDs (all partitions), `path`, `size`,
/// `DismountVolume`.
macro_rules! old_shape_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::volume_client::VolumeClient::new(s.channel(Group::Volume, stringify!($v)).await);

            // ListVolumesOnDisk: `disk_id` is a decimal string and lists every partition.
            let list = |id: &str| $v::ListVolumesOnDiskRequest { disk_id: id.into() };
            assert!(c.list_volumes_on_disk(list("0")).await.unwrap().into_inner().volume_ids.is_empty());
            two_volumes(&s, 0);
            assert_eq!(
                c.list_volumes_on_disk(list("0")).await.unwrap().into_inner().volume_ids,
                vec!["vol-0-1", "vol-0-2"]
            );
            assert!(c.list_volumes_on_disk(list("1")).await.unwrap().into_inner().volume_ids.is_empty());
            s.host.partition_disk(1).unwrap();
            assert_eq!(c.list_volumes_on_disk(list("1")).await.unwrap().into_inner().volume_ids, vec!["vol-1-1"]);

            // MountVolume / DismountVolume: the target is the old `path` field.
            let mount = |v: &str, p: &str| $v::MountVolumeRequest { volume_id: v.into(), path: p.into() };
            c.mount_volume(mount("vol-0-1", "/mnt/a")).await.unwrap();
            assert_eq!(mounts(&s, "vol-0-1"), vec!["/mnt/a"]);
            c.mount_volume(mount("vol-0-1", "/mnt/a")).await.unwrap();
            assert_eq!(mounts(&s, "vol-0-1"), vec!["/mnt/a"]);
            assert_status(c.mount_volume(mount("vol-1-1", "/mnt/a")).await, Code::AlreadyExists, "vol-0-1");
            assert_status(c.mount_volume(mount("vol-9-9", "/mnt/b")).await, Code::NotFound, "vol-9-9");
            let dismount = |v: &str, p: &str| $v::DismountVolumeRequest { volume_id: v.into(), path: p.into() };
            c.dismount_volume(dismount("vol-0-1", "/mnt/a")).await.unwrap();
            assert!(mounts(&s, "vol-0-1").is_empty());
            // Again (a retry after it was dismounted): nothing mounted there is no error, as on both OSes.
            c.dismount_volume(dismount("vol-0-1", "/mnt/a")).await.unwrap();

            // IsVolumeFormatted / FormatVolume.
            let is_fmt = |v: &str| $v::IsVolumeFormattedRequest { volume_id: v.into() };
            assert!(!c.is_volume_formatted(is_fmt("vol-0-1")).await.unwrap().into_inner().formatted);
            c.format_volume($v::FormatVolumeRequest { volume_id: "vol-0-1".into() }).await.unwrap();
            assert!(s.host.with(|st| st.volumes["vol-0-1"].formatted));
            assert!(!s.host.with(|st| st.volumes["vol-0-2"].formatted));
            assert!(c.is_volume_formatted(is_fmt("vol-0-1")).await.unwrap().into_inner().formatted);
            assert_status(c.is_volume_formatted(is_fmt("nope")).await, Code::NotFound, "\"nope\"");
            assert_status(
                c.format_volume($v::FormatVolumeRequest { volume_id: "nope".into() }).await,
                Code::NotFound,
                "\"nope\"",
            );

            // ResizeVolume: the old `size` field; 0 means the whole disk; shrinking is a no-op.
            let resize = |v: &str, n: i64| $v::ResizeVolumeRequest { volume_id: v.into(), size: n };
            c.resize_volume(resize("vol-0-2", 512 * MIB)).await.unwrap();
            assert_eq!(size_of(&s, "vol-0-2"), 512 << 20);
            c.resize_volume(resize("vol-0-2", MIB)).await.unwrap();
            assert_eq!(size_of(&s, "vol-0-2"), 512 << 20);
            c.resize_volume(resize("vol-0-2", 0)).await.unwrap();
            assert_eq!(size_of(&s, "vol-0-2"), 1 << 30);
            assert_status(c.resize_volume(resize("vol-0-2", 2 * GIB)).await, Code::FailedPrecondition, "vol-0-2");
            assert_status(c.resize_volume(resize("vol-0-2", -1)).await, Code::InvalidArgument, "-1 is negative");
            assert_status(c.resize_volume(resize("vol-0-2", i64::MIN)).await, Code::InvalidArgument, "negative");
            assert_eq!(size_of(&s, "vol-0-2"), 1 << 30);

            // Empty required fields are refused before the host is asked.
            assert_status(c.mount_volume(mount("", "/mnt/a")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.mount_volume(mount("vol-0-1", "")).await, Code::InvalidArgument, "path is empty");
            assert_status(c.dismount_volume(dismount("", "/mnt/a")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.dismount_volume(dismount("vol-0-1", "")).await, Code::InvalidArgument, "path is empty");
            assert_status(c.is_volume_formatted(is_fmt("")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(
                c.format_volume($v::FormatVolumeRequest { volume_id: "".into() }).await,
                Code::InvalidArgument,
                "volume_id is empty",
            );
            assert_status(c.resize_volume(resize("", 0)).await, Code::InvalidArgument, "volume_id is empty");
            assert!(s.host.with(|st| st.volumes.values().all(|v| v.mounts.is_empty())));
        }
    };
}
old_shape_test!(v1alpha1_old_shape, v1alpha1);
old_shape_test!(v1beta1_old_shape, v1beta1);
old_shape_test!(v1beta2_old_shape, v1beta2);

/// String disk IDs of v1alpha1–v1beta2 are parsed strictly: digits only, within u32.
macro_rules! string_disk_id_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::volume_client::VolumeClient::new(s.channel(Group::Volume, stringify!($v)).await);
            let list = |id: &str| $v::ListVolumesOnDiskRequest { disk_id: id.into() };
            assert_status(c.list_volumes_on_disk(list("")).await, Code::InvalidArgument, "disk_id is empty");
            for bad in ["-1", "+1", " 1", "1 ", "0x1", "one", "1.0", "١"] {
                assert_status(
                    c.list_volumes_on_disk(list(bad)).await,
                    Code::InvalidArgument,
                    &format!("disk_id {bad:?}"),
                );
            }
            // One above u32::MAX must not be truncated to disk 0.
            s.host.partition_disk(0).unwrap();
            for big in ["4294967296", "4294967297", "18446744073709551616"] {
                assert_status(c.list_volumes_on_disk(list(big)).await, Code::InvalidArgument, "out of range");
                assert_status(
                    c.list_volumes_on_disk(list(big)).await,
                    Code::InvalidArgument,
                    &format!("disk_id {big:?}"),
                );
            }
            // Leading zeros are still a decimal number.
            assert_eq!(c.list_volumes_on_disk(list("00")).await.unwrap().into_inner().volume_ids, vec!["vol-0-1"]);
            // u32::MAX itself parses and reaches the host, which (as upstream) lists no volumes
            // for a disk it does not know.
            s.host.with(|st| {
                let d = st.disks[&0].clone();
                st.disks.insert(u32::MAX, d);
                st.disks.get_mut(&u32::MAX).unwrap().partitions = [(1, "vol-max-1".to_string())].into();
            });
            assert_eq!(
                c.list_volumes_on_disk(list("4294967295")).await.unwrap().into_inner().volume_ids,
                vec!["vol-max-1"]
            );
            assert!(c.list_volumes_on_disk(list("4294967294")).await.unwrap().into_inner().volume_ids.is_empty());
        }
    };
}
string_disk_id_test!(v1alpha1_string_disk_ids, v1alpha1);
string_disk_id_test!(v1beta1_string_disk_ids, v1beta1);
string_disk_id_test!(v1beta2_string_disk_ids, v1beta2);

/// v1beta1 and v1beta2: VolumeStats, GetVolumeDiskNumber (int64) and GetVolumeIDFromMount.
macro_rules! beta_names_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::volume_client::VolumeClient::new(s.channel(Group::Volume, stringify!($v)).await);
            s.host.partition_disk(1).unwrap();

            // VolumeStats → volume_size / volume_used_size.
            let stats = |v: &str| $v::VolumeStatsRequest { volume_id: v.into() };
            let r = c.volume_stats(stats("vol-1-1")).await.unwrap().into_inner();
            assert_eq!((r.volume_size, r.volume_used_size), (GIB, 0));
            c.format_volume($v::FormatVolumeRequest { volume_id: "vol-1-1".into() }).await.unwrap();
            s.host.with(|st| st.volumes.get_mut("vol-1-1").unwrap().used = 12345);
            let r = c.volume_stats(stats("vol-1-1")).await.unwrap().into_inner();
            assert_eq!((r.volume_size, r.volume_used_size), (GIB, 12345));
            assert_status(c.volume_stats(stats("")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.volume_stats(stats("vol-7-1")).await, Code::NotFound, "vol-7-1");
            // A size the wire's int64 cannot carry is an internal error, never a wrapped value.
            s.host.with(|st| st.volumes.get_mut("vol-1-1").unwrap().size = u64::MAX);
            assert_status(c.volume_stats(stats("vol-1-1")).await, Code::Internal, "int64");
            s.host.with(|st| st.volumes.get_mut("vol-1-1").unwrap().size = 1 << 30);

            // GetVolumeDiskNumber → int64 disk_number.
            let dn = |v: &str| $v::VolumeDiskNumberRequest { volume_id: v.into() };
            let r: i64 = c.get_volume_disk_number(dn("vol-1-1")).await.unwrap().into_inner().disk_number;
            assert_eq!(r, 1);
            assert_status(c.get_volume_disk_number(dn("")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.get_volume_disk_number(dn("vol-7-1")).await, Code::NotFound, "vol-7-1");

            // GetVolumeIDFromMount: the path is the `mount` field.
            let from = |m: &str| $v::VolumeIdFromMountRequest { mount: m.into() };
            assert_status(c.get_volume_id_from_mount(from("/mnt/v")).await, Code::NotFound, "/mnt/v");
            c.mount_volume($v::MountVolumeRequest { volume_id: "vol-1-1".into(), path: "/mnt/v".into() })
                .await
                .unwrap();
            assert_eq!(c.get_volume_id_from_mount(from("/mnt/v")).await.unwrap().into_inner().volume_id, "vol-1-1");
            assert_eq!(c.get_volume_id_from_mount(from("/mnt/v/")).await.unwrap().into_inner().volume_id, "vol-1-1");
            assert_status(c.get_volume_id_from_mount(from("")).await, Code::InvalidArgument, "is empty");
        }
    };
}
beta_names_test!(v1beta1_renamed_rpcs, v1beta1);
beta_names_test!(v1beta2_renamed_rpcs, v1beta2);

#[tokio::test]
async fn v1beta2_write_volume_cache() {
    let s = TestServer::start().await;
    let mut c = v1beta2::volume_client::VolumeClient::new(s.channel(Group::Volume, "v1beta2").await);
    s.host.partition_disk(0).unwrap();
    let w = |v: &str| v1beta2::WriteVolumeCacheRequest { volume_id: v.into() };
    c.write_volume_cache(w("vol-0-1")).await.unwrap();
    c.write_volume_cache(w("vol-0-1")).await.unwrap();
    assert_eq!(s.host.with(|st| st.volumes["vol-0-1"].flushes), 2);
    assert_status(c.write_volume_cache(w("")).await, Code::InvalidArgument, "volume_id is empty");
    assert_status(c.write_volume_cache(w("vol-5-1")).await, Code::NotFound, "vol-5-1");
}

/// v1beta3, v1 and v2alpha1: numeric disk and partition, `target_path`, `size_bytes`, current names.
macro_rules! current_shape_test {
    ($name:ident, $v:ident) => {
        #[tokio::test]
        async fn $name() {
            let s = TestServer::start().await;
            let mut c = $v::volume_client::VolumeClient::new(s.channel(Group::Volume, stringify!($v)).await);

            // ListVolumesOnDisk: partition 0 = every partition, otherwise exactly that one.
            let list = |d: u32, p: u32| $v::ListVolumesOnDiskRequest { disk_number: d, partition_number: p };
            assert!(c.list_volumes_on_disk(list(0, 0)).await.unwrap().into_inner().volume_ids.is_empty());
            two_volumes(&s, 0);
            assert_eq!(
                c.list_volumes_on_disk(list(0, 0)).await.unwrap().into_inner().volume_ids,
                vec!["vol-0-1", "vol-0-2"]
            );
            assert_eq!(c.list_volumes_on_disk(list(0, 1)).await.unwrap().into_inner().volume_ids, vec!["vol-0-1"]);
            assert_eq!(c.list_volumes_on_disk(list(0, 2)).await.unwrap().into_inner().volume_ids, vec!["vol-0-2"]);
            assert!(c.list_volumes_on_disk(list(0, 3)).await.unwrap().into_inner().volume_ids.is_empty());
            s.host.partition_disk(1).unwrap();
            assert_eq!(c.list_volumes_on_disk(list(1, 0)).await.unwrap().into_inner().volume_ids, vec!["vol-1-1"]);

            // MountVolume / UnmountVolume with `target_path`.
            let mount = |v: &str, p: &str| $v::MountVolumeRequest { volume_id: v.into(), target_path: p.into() };
            let unmount = |v: &str, p: &str| $v::UnmountVolumeRequest { volume_id: v.into(), target_path: p.into() };
            c.mount_volume(mount("vol-0-1", "/mnt/t")).await.unwrap();
            c.mount_volume(mount("vol-0-1", "/mnt/t")).await.unwrap();
            assert_eq!(mounts(&s, "vol-0-1"), vec!["/mnt/t"]);
            assert!(s.host.with(|st| st.tree.contains_key("/mnt/t")));
            assert_status(c.mount_volume(mount("vol-0-2", "/mnt/t")).await, Code::AlreadyExists, "vol-0-1");
            assert_status(c.mount_volume(mount("", "/mnt/t")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.mount_volume(mount("vol-0-1", "")).await, Code::InvalidArgument, "target_path is empty");

            // GetVolumeIDFromTargetPath.
            let from = |p: &str| $v::GetVolumeIdFromTargetPathRequest { target_path: p.into() };
            assert_eq!(
                c.get_volume_id_from_target_path(from("/mnt/t")).await.unwrap().into_inner().volume_id,
                "vol-0-1"
            );
            assert_status(c.get_volume_id_from_target_path(from("/mnt")).await, Code::NotFound, "/mnt");
            assert_status(
                c.get_volume_id_from_target_path(from("")).await,
                Code::InvalidArgument,
                "target_path is empty",
            );

            assert_status(c.unmount_volume(unmount("", "/mnt/t")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(
                c.unmount_volume(unmount("vol-0-1", "")).await,
                Code::InvalidArgument,
                "target_path is empty",
            );
            assert_eq!(mounts(&s, "vol-0-1"), vec!["/mnt/t"]);
            c.unmount_volume(unmount("vol-0-1", "/mnt/t")).await.unwrap();
            assert!(mounts(&s, "vol-0-1").is_empty());
            // Again (a retry after it was unmounted): nothing mounted there is no error, as on both OSes.
            c.unmount_volume(unmount("vol-0-1", "/mnt/t")).await.unwrap();

            // IsVolumeFormatted / FormatVolume.
            let is_fmt = |v: &str| $v::IsVolumeFormattedRequest { volume_id: v.into() };
            assert!(!c.is_volume_formatted(is_fmt("vol-1-1")).await.unwrap().into_inner().formatted);
            c.format_volume($v::FormatVolumeRequest { volume_id: "vol-1-1".into() }).await.unwrap();
            assert!(c.is_volume_formatted(is_fmt("vol-1-1")).await.unwrap().into_inner().formatted);
            assert!(s.host.with(|st| st.volumes["vol-1-1"].formatted));
            assert_status(c.is_volume_formatted(is_fmt("")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(
                c.format_volume($v::FormatVolumeRequest { volume_id: "".into() }).await,
                Code::InvalidArgument,
                "volume_id is empty",
            );

            // GetVolumeStats → total_bytes / used_bytes (format leaves 1% used in the memory host).
            let stats = |v: &str| $v::GetVolumeStatsRequest { volume_id: v.into() };
            let r = c.get_volume_stats(stats("vol-1-1")).await.unwrap().into_inner();
            assert_eq!((r.total_bytes, r.used_bytes), (GIB, GIB / 100));
            let r = c.get_volume_stats(stats("vol-0-2")).await.unwrap().into_inner();
            assert_eq!((r.total_bytes, r.used_bytes), (MIB, 0));
            assert_status(c.get_volume_stats(stats("")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.get_volume_stats(stats("vol-8-1")).await, Code::NotFound, "vol-8-1");
            s.host.with(|st| st.volumes.get_mut("vol-0-2").unwrap().used = u64::MAX);
            assert_status(c.get_volume_stats(stats("vol-0-2")).await, Code::Internal, "used_bytes");
            s.host.with(|st| st.volumes.get_mut("vol-0-2").unwrap().used = 0);

            // ResizeVolume with `size_bytes`.
            let resize = |v: &str, n: i64| $v::ResizeVolumeRequest { volume_id: v.into(), size_bytes: n };
            c.resize_volume(resize("vol-0-2", 100 * MIB)).await.unwrap();
            assert_eq!(size_of(&s, "vol-0-2"), 100 << 20);
            c.resize_volume(resize("vol-0-2", 0)).await.unwrap();
            assert_eq!(size_of(&s, "vol-0-2"), 1 << 30);
            assert_status(c.resize_volume(resize("vol-0-2", GIB + 1)).await, Code::FailedPrecondition, "vol-0-2");
            assert_status(
                c.resize_volume(resize("vol-0-2", -5)).await,
                Code::InvalidArgument,
                "size_bytes -5 is negative",
            );
            assert_status(c.resize_volume(resize("", 5)).await, Code::InvalidArgument, "volume_id is empty");

            // GetDiskNumberFromVolumeID → uint32 disk_number.
            let dn = |v: &str| $v::GetDiskNumberFromVolumeIdRequest { volume_id: v.into() };
            let n: u32 = c.get_disk_number_from_volume_id(dn("vol-1-1")).await.unwrap().into_inner().disk_number;
            assert_eq!(n, 1);
            assert_eq!(c.get_disk_number_from_volume_id(dn("vol-0-2")).await.unwrap().into_inner().disk_number, 0);
            assert_status(c.get_disk_number_from_volume_id(dn("")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.get_disk_number_from_volume_id(dn("vol-3-1")).await, Code::NotFound, "vol-3-1");

            // WriteVolumeCache.
            let w = |v: &str| $v::WriteVolumeCacheRequest { volume_id: v.into() };
            c.write_volume_cache(w("vol-1-1")).await.unwrap();
            assert_eq!(s.host.with(|st| (st.volumes["vol-1-1"].flushes, st.volumes["vol-0-1"].flushes)), (1, 0));
            assert_status(c.write_volume_cache(w("")).await, Code::InvalidArgument, "volume_id is empty");
            assert_status(c.write_volume_cache(w("vol-3-1")).await, Code::NotFound, "vol-3-1");
        }
    };
}
current_shape_test!(v1beta3_current_shape, v1beta3);
current_shape_test!(v1_current_shape, v1);
current_shape_test!(v2alpha1_current_shape, v2alpha1);

#[tokio::test]
async fn v2alpha1_closest_volume_walks_up() {
    let s = TestServer::start().await;
    let mut c = v2alpha1::volume_client::VolumeClient::new(s.channel(Group::Volume, "v2alpha1").await);
    s.host.partition_disk(0).unwrap();
    s.host.partition_disk(1).unwrap();
    let mount = |v: &str, p: &str| v2alpha1::MountVolumeRequest { volume_id: v.into(), target_path: p.into() };
    c.mount_volume(mount("vol-0-1", "/mnt/outer")).await.unwrap();
    c.mount_volume(mount("vol-1-1", "/mnt/outer/inner")).await.unwrap();
    let closest = |p: &str| v2alpha1::GetClosestVolumeIdFromTargetPathRequest { target_path: p.into() };
    let id = |r: tonic::Response<v2alpha1::GetClosestVolumeIdFromTargetPathResponse>| r.into_inner().volume_id;
    assert_eq!(id(c.get_closest_volume_id_from_target_path(closest("/mnt/outer")).await.unwrap()), "vol-0-1");
    assert_eq!(id(c.get_closest_volume_id_from_target_path(closest("/mnt/outer/a/b")).await.unwrap()), "vol-0-1");
    assert_eq!(id(c.get_closest_volume_id_from_target_path(closest("/mnt/outer/inner/x")).await.unwrap()), "vol-1-1");
    assert_status(
        c.get_closest_volume_id_from_target_path(closest("/elsewhere/x")).await,
        Code::NotFound,
        "/elsewhere/x",
    );
    assert_status(
        c.get_closest_volume_id_from_target_path(closest("")).await,
        Code::InvalidArgument,
        "target_path is empty",
    );
}
