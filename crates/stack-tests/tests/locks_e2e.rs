#![cfg(unix)]
//! Mutating calls on one disk are serialised by the server, whatever the backend: concurrent
//! FormatVolume / MountVolume / PartitionDisk on volumes of one disk never overlap in the host,
//! while calls on different disks do; a Rescan refreshes each disk alone, and one waiting for a
//! hung disk holds up no other. Checked through the socket against a memory host whose calls take
//! time and record how many run at once per disk.

use csi_proxy_host::memory::{MemoryHost, SimVolume};
use csi_proxy_host::types::*;
use csi_proxy_host::{DiskHost, Hosts, Result, VolumeHost};
use csi_proxy_stack_tests::{assert_status, TestServer};
use csi_proxy_transport::ConnPolicy;
use csi_proxy_wire::{v1, Group};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// Delegates to the memory host; the mutating calls sleep and count overlap per disk.
struct Slow {
    mem: Arc<MemoryHost>,
    /// (running now, most ever) per disk; key ALL counts every disk together.
    load: Mutex<HashMap<u32, (u32, u32)>>,
    /// A disk whose work hangs until it is cleared.
    hung: Mutex<Option<u32>>,
    thawed: Condvar,
}

const ALL: u32 = u32::MAX;
const RESCAN: u32 = u32::MAX - 1;

impl Slow {
    fn busy<T>(&self, disk: u32, f: impl FnOnce() -> T) -> T {
        {
            let mut l = self.load.lock().unwrap();
            for key in [disk, ALL] {
                let e = l.entry(key).or_default();
                e.0 += 1;
                e.1 = e.1.max(e.0);
            }
        }
        drop(self.thawed.wait_while(self.hung.lock().unwrap(), |h| *h == Some(disk)).unwrap());
        std::thread::sleep(Duration::from_millis(40));
        let out = f();
        let mut l = self.load.lock().unwrap();
        for key in [disk, ALL] {
            l.get_mut(&key).unwrap().0 -= 1;
        }
        drop(l);
        out
    }
    fn disk_of(&self, id: &str) -> u32 {
        self.mem.get_disk_number_from_volume_id(id).unwrap()
    }
    fn most(&self, key: u32) -> u32 {
        self.load.lock().unwrap().get(&key).map_or(0, |e| e.1)
    }
    fn running(&self, key: u32) -> u32 {
        self.load.lock().unwrap().get(&key).map_or(0, |e| e.0)
    }
    fn hang(&self, disk: Option<u32>) {
        *self.hung.lock().unwrap() = disk;
        self.thawed.notify_all();
    }
}

impl DiskHost for Slow {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        self.mem.list_disk_locations()
    }
    fn partition_disk(&self, disk: u32) -> Result<()> {
        self.busy(disk, || self.mem.partition_disk(disk))
    }
    fn rescan(&self) -> Result<()> {
        self.busy(RESCAN, || self.mem.rescan())
    }
    fn disks_to_refresh(&self) -> Result<Vec<u32>> {
        self.mem.disks_to_refresh()
    }
    fn refresh_disk(&self, disk: u32) -> Result<()> {
        self.busy(disk, || self.mem.refresh_disk(disk))
    }
    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        self.mem.list_disk_ids()
    }
    fn get_disk_stats(&self, disk: u32) -> Result<u64> {
        self.mem.get_disk_stats(disk)
    }
    fn set_disk_state(&self, disk: u32, online: bool) -> Result<()> {
        self.busy(disk, || self.mem.set_disk_state(disk, online))
    }
    fn get_disk_state(&self, disk: u32) -> Result<bool> {
        self.mem.get_disk_state(disk)
    }
}

impl VolumeHost for Slow {
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>> {
        self.mem.list_volumes_on_disk(disk, partition)
    }
    fn mount_volume(&self, id: &str, target: &str) -> Result<()> {
        self.busy(self.disk_of(id), || self.mem.mount_volume(id, target))
    }
    fn unmount_volume(&self, id: &str, target: &str) -> Result<()> {
        self.busy(self.disk_of(id), || self.mem.unmount_volume(id, target))
    }
    fn is_volume_formatted(&self, id: &str) -> Result<bool> {
        self.mem.is_volume_formatted(id)
    }
    fn format_volume(&self, id: &str) -> Result<()> {
        self.busy(self.disk_of(id), || self.mem.format_volume(id))
    }
    fn resize_volume(&self, id: &str, size: u64) -> Result<()> {
        self.busy(self.disk_of(id), || self.mem.resize_volume(id, size))
    }
    fn get_volume_stats(&self, id: &str) -> Result<VolumeStats> {
        self.mem.get_volume_stats(id)
    }
    fn get_disk_number_from_volume_id(&self, id: &str) -> Result<u32> {
        self.mem.get_disk_number_from_volume_id(id)
    }
    fn get_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        self.mem.get_volume_id_from_target_path(target)
    }
    fn get_closest_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        self.mem.get_closest_volume_id_from_target_path(target)
    }
    fn write_volume_cache(&self, id: &str) -> Result<()> {
        self.busy(self.disk_of(id), || self.mem.write_volume_cache(id))
    }
}

/// Disks 0 and 1 with four volumes each.
async fn start() -> (TestServer, Arc<Slow>) {
    let mem = Arc::new(MemoryHost::sample());
    mem.with(|s| {
        for disk in 0..2u32 {
            for p in 1..=4u32 {
                let id = format!("vol-{disk}-{p}");
                s.disks.get_mut(&disk).unwrap().partitions.insert(p, id.clone());
                s.volumes.insert(
                    id,
                    SimVolume {
                        disk,
                        partition: p,
                        size: 1 << 28,
                        used: 0,
                        formatted: false,
                        mounts: BTreeSet::new(),
                        flushes: 0,
                    },
                );
            }
        }
    });
    let slow =
        Arc::new(Slow { mem: mem.clone(), load: Mutex::default(), hung: Mutex::default(), thawed: Condvar::new() });
    let mut hosts = Hosts::from_one(mem.clone());
    hosts.disk = slow.clone();
    hosts.volume = slow.clone();
    (TestServer::start_with(mem, hosts, ConnPolicy::default()).await, slow)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_disk_at_a_time_different_disks_together() {
    let (s, slow) = start().await;
    let ch = s.channel(Group::Volume, "v1").await;
    let mut calls = Vec::new();
    for disk in 0..2u32 {
        for p in 1..=4u32 {
            let mut c = v1::volume_client::VolumeClient::new(ch.clone());
            let id = format!("vol-{disk}-{p}");
            calls.push(tokio::spawn(async move {
                c.format_volume(v1::FormatVolumeRequest { volume_id: id.clone() }).await.unwrap();
                c.mount_volume(v1::MountVolumeRequest { volume_id: id.clone(), target_path: format!("/m/{id}") })
                    .await
                    .unwrap();
                c.write_volume_cache(v1::WriteVolumeCacheRequest { volume_id: id }).await.unwrap();
            }));
        }
    }
    let disk_ch = s.channel(Group::Disk, "v1").await;
    for disk in 0..2u32 {
        let mut d = v1::disk_client::DiskClient::new(disk_ch.clone());
        calls.push(tokio::spawn(async move {
            d.partition_disk(v1::PartitionDiskRequest { disk_number: disk }).await.unwrap();
        }));
    }
    for c in calls {
        c.await.unwrap();
    }
    assert_eq!(slow.most(0), 1, "calls on disk 0 overlapped");
    assert_eq!(slow.most(1), 1, "calls on disk 1 overlapped");
    assert_eq!(slow.most(ALL), 2, "disks 0 and 1 should have been worked on together");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rescan_refreshes_each_disk_alone() {
    let (s, slow) = start().await;
    let disk_ch = s.channel(Group::Disk, "v1").await;
    let vol_ch = s.channel(Group::Volume, "v1").await;
    let mut calls = Vec::new();
    for i in 0..3u32 {
        let mut d = v1::disk_client::DiskClient::new(disk_ch.clone());
        calls.push(tokio::spawn(async move {
            d.rescan(v1::RescanRequest {}).await.unwrap();
        }));
        let mut c = v1::volume_client::VolumeClient::new(vol_ch.clone());
        calls.push(tokio::spawn(async move {
            c.format_volume(v1::FormatVolumeRequest { volume_id: format!("vol-{}-1", i % 2) }).await.unwrap();
        }));
    }
    for c in calls {
        c.await.unwrap();
    }
    assert_eq!(slow.most(0), 1, "a refresh overlapped other work on disk 0");
    assert_eq!(slow.most(1), 1, "a refresh overlapped other work on disk 1");
    assert_eq!(s.host.with(|st| (st.rescans, st.refreshes.clone())), (3, BTreeMap::from([(0, 3), (1, 3)])));
}

/// The rescan waits its turn on the hung disk, having refreshed the disk before it; meanwhile the
/// other disk takes new work. (With one lock over every disk, the waiting rescan held it off.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rescan_waiting_for_a_hung_disk_holds_up_no_other_disk() {
    let (s, slow) = start().await;
    let disk_ch = s.channel(Group::Disk, "v1").await;
    slow.hang(Some(1));
    let mut d = v1::disk_client::DiskClient::new(disk_ch.clone());
    let hung = tokio::spawn(async move { d.partition_disk(v1::PartitionDiskRequest { disk_number: 1 }).await });
    let refreshed = |disk| s.host.with(|st| st.refreshes.get(&disk).copied().unwrap_or(0));
    for _ in 0..500 {
        if slow.running(1) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(slow.running(1), 1, "PartitionDisk hangs on disk 1");
    let mut d = v1::disk_client::DiskClient::new(disk_ch.clone());
    let rescan = tokio::spawn(async move { d.rescan(v1::RescanRequest {}).await });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut c = v1::volume_client::VolumeClient::new(s.channel(Group::Volume, "v1").await);
    let other = tokio::time::timeout(
        Duration::from_secs(5),
        c.format_volume(v1::FormatVolumeRequest { volume_id: "vol-0-2".into() }),
    )
    .await;
    assert!(matches!(other, Ok(Ok(_))), "FormatVolume on disk 0 while a rescan waits for hung disk 1: {other:?}");
    assert!(!rescan.is_finished() && !hung.is_finished());
    assert_eq!((refreshed(0), refreshed(1)), (1, 0), "the rescan got past disk 0 and waits for disk 1");

    slow.hang(None);
    hung.await.unwrap().unwrap();
    rescan.await.unwrap().unwrap();
    assert_eq!((refreshed(0), refreshed(1)), (1, 1));
    assert_eq!(slow.most(1), 1);
}

#[tokio::test]
async fn unknown_volumes_fail_before_any_lock() {
    let (s, slow) = start().await;
    let mut c = v1::volume_client::VolumeClient::new(s.channel(Group::Volume, "v1").await);
    assert_status(
        c.format_volume(v1::FormatVolumeRequest { volume_id: "nope".into() }).await,
        tonic::Code::NotFound,
        "nope",
    );
    assert_eq!(slow.most(ALL), 0);
}
