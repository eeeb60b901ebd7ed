//! A simulated host that keeps disks, volumes, a directory tree, SMB mappings, iSCSI portals and
//! services in memory. Tests drive every RPC through it; the daemon never uses it.
//!
//! Behaviour follows upstream's idempotency rules (docs/upstream.md#idempotency) so that tests
//! of the server exercise realistic answers, including errors.

use crate::error::DOES_NOT_EXIST;
use crate::types::*;
use crate::*;
use csi_proxy_sync::LockExt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

#[derive(Debug, Clone)]
pub struct SimDisk {
    pub location: DiskLocation,
    pub ids: DiskIds,
    pub size: u64,
    pub online: bool,
    /// Partition numbers (1-based) to volume IDs.
    pub partitions: BTreeMap<u32, String>,
}

#[derive(Debug, Clone)]
pub struct SimVolume {
    pub disk: u32,
    pub partition: u32,
    pub size: u64,
    pub used: u64,
    pub formatted: bool,
    pub mounts: BTreeSet<String>,
    pub flushes: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File,
    Link(String),
}

#[derive(Debug, Clone)]
pub struct SimTarget {
    pub connected: bool,
    pub disks: Vec<u32>,
    pub last_auth: Option<(AuthType, String)>,
}

#[derive(Debug, Clone)]
pub struct SimService {
    pub info: ServiceInfo,
    pub dependents: Vec<String>,
}

/// Everything the simulated host knows. Public so tests can arrange and inspect it.
#[derive(Debug, Default)]
pub struct State {
    pub disks: BTreeMap<u32, SimDisk>,
    pub volumes: BTreeMap<String, SimVolume>,
    pub tree: BTreeMap<String, Node>,
    pub smb: BTreeMap<String, SmbMapping>,
    pub portals: BTreeMap<TargetPortal, BTreeMap<String, SimTarget>>,
    pub registered: BTreeSet<TargetPortal>,
    pub mutual_chap_secret: Option<Secret>,
    pub services: BTreeMap<String, SimService>,
    pub bios_serial: String,
    pub rescans: u32,
    /// Per disk: how often a rescan re-read its table.
    pub refreshes: BTreeMap<u32, u32>,
}

#[derive(Debug, Default)]
pub struct MemoryHost {
    state: Mutex<State>,
}

const GIB: u64 = 1 << 30;

impl MemoryHost {
    pub fn new() -> Self {
        Self::default()
    }

    /// A host with two blank 1 GiB disks (0 and 1), a root directory `/` and one service.
    pub fn sample() -> Self {
        let h = Self::new();
        h.with(|s| {
            for n in 0..2u32 {
                s.disks.insert(
                    n,
                    SimDisk {
                        location: DiskLocation {
                            adapter: "0".into(),
                            bus: String::new(),
                            target: n.to_string(),
                            lun_id: "0".into(),
                        },
                        ids: DiskIds { page83: format!("60022480{n:024x}"), serial_number: format!("SERIAL-{n}") },
                        size: GIB,
                        online: true,
                        partitions: BTreeMap::new(),
                    },
                );
            }
            s.tree.insert("/".into(), Node::Dir);
            s.bios_serial = "SIM-SERIAL-0001".into();
            s.services.insert(
                "iscsid".into(),
                SimService {
                    info: ServiceInfo {
                        display_name: "iSCSI initiator".into(),
                        start_type: StartType::Manual,
                        status: ServiceStatus::Stopped,
                    },
                    dependents: vec![],
                },
            );
        });
        h
    }

    /// Runs `f` with the state locked: for arranging and inspecting tests.
    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // A panic while the lock was held must not poison every later call.
        let mut g = self.state.lock_ignoring_poison();
        f(&mut g)
    }
}

fn parent(path: &str) -> Option<String> {
    let t = path.trim_end_matches('/');
    let i = t.rfind('/')?;
    Some(if i == 0 { "/".into() } else { t[..i].to_string() })
}

/// `\\host\share`, lower-cased: one host-wide mapping serves every path below a share. The
/// remote path is checked by the rule of the real backends ([`crate::smb::remote_components`]).
fn share_root(remote: &str) -> Result<String> {
    let parts = crate::smb::remote_components(remote)?;
    Ok(format!("\\\\{}\\{}", parts[0], parts[1]).to_lowercase())
}

fn norm(path: &str) -> String {
    if path.len() > 1 {
        path.trim_end_matches('/').to_string()
    } else {
        path.to_string()
    }
}

fn children<'a>(s: &'a State, dir: &str) -> impl Iterator<Item = String> + 'a {
    let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
    s.tree
        .keys()
        .filter(move |k| k.len() > prefix.len() && k.starts_with(&prefix))
        .cloned()
        .collect::<Vec<_>>()
        .into_iter()
}

impl State {
    fn disk(&mut self, n: u32) -> Result<&mut SimDisk> {
        self.disks.get_mut(&n).ok_or_else(|| Error::not_found(format!("disk {n} not found")))
    }
    /// The volume a request names: `id` itself, or, where `by_disk` allows it and `id` is a disk
    /// number, that disk's data volume (every simulated partition holds data).
    fn volume_by(&mut self, id: &str, by_disk: data_volume::DiskNumber) -> Result<(String, &mut SimVolume)> {
        let id = match (by_disk, data_volume::disk_number_in(id)) {
            (data_volume::DiskNumber::DataVolume, Some(disk)) => {
                let found: Vec<data_volume::Candidate> = (self.disks.get(&disk).into_iter())
                    .flat_map(|d| d.partitions.iter())
                    .filter_map(|(p, id)| self.volumes.get(id).map(|v| (p, id, v.size)))
                    .map(|(p, id, size)| data_volume::Candidate {
                        id: id.clone(),
                        partition: *p,
                        kind: "simulated data partition".into(),
                        data: true,
                        size,
                    })
                    .collect();
                data_volume::data_volume(disk, &found)?
            }
            _ => id.to_owned(),
        };
        match self.volumes.get_mut(&id) {
            Some(v) => Ok((id, v)),
            None => Err(Error::not_found(format!("volume {id:?} not found"))),
        }
    }
    fn volume(&mut self, id: &str) -> Result<&mut SimVolume> {
        self.volume_by(id, data_volume::DiskNumber::Refused).map(|(_, v)| v)
    }
    fn portal_targets(&mut self, p: &TargetPortal) -> Result<&mut BTreeMap<String, SimTarget>> {
        if !self.registered.contains(p) {
            return Err(Error::not_found(format!("target portal {p} is not registered")));
        }
        Ok(self.portals.entry(p.clone()).or_default())
    }
    fn target(&mut self, p: &TargetPortal, iqn: &str) -> Result<&mut SimTarget> {
        self.portal_targets(p)?
            .get_mut(iqn)
            .ok_or_else(|| Error::not_found(format!("target {iqn:?} not found behind portal {p}")))
    }
    fn service(&mut self, name: &str) -> Result<&mut SimService> {
        self.services.get_mut(name).ok_or_else(|| Error::not_found(format!("service {name:?} not found")))
    }
}

impl DiskHost for MemoryHost {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        self.with(|s| Ok(s.disks.iter().map(|(n, d)| (*n, d.location.clone())).collect()))
    }
    fn partition_disk(&self, disk: u32) -> Result<()> {
        self.with(|s| {
            let d = s.disk(disk)?;
            if !d.partitions.is_empty() {
                return Ok(());
            }
            let id = format!("vol-{disk}-1");
            d.partitions.insert(1, id.clone());
            let size = d.size;
            s.volumes.insert(
                id,
                SimVolume { disk, partition: 1, size, used: 0, formatted: false, mounts: BTreeSet::new(), flushes: 0 },
            );
            Ok(())
        })
    }
    fn rescan(&self) -> Result<()> {
        self.with(|s| s.rescans += 1);
        Ok(())
    }
    fn disks_to_refresh(&self) -> Result<Vec<u32>> {
        self.with(|s| Ok(s.disks.keys().copied().collect()))
    }
    fn refresh_disk(&self, disk: u32) -> Result<()> {
        self.with(|s| {
            if s.disks.contains_key(&disk) {
                *s.refreshes.entry(disk).or_default() += 1;
            }
            Ok(())
        })
    }
    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        self.with(|s| Ok(s.disks.iter().map(|(n, d)| (*n, d.ids.clone())).collect()))
    }
    fn get_disk_stats(&self, disk: u32) -> Result<u64> {
        self.with(|s| Ok(s.disk(disk)?.size))
    }
    fn set_disk_state(&self, disk: u32, online: bool) -> Result<()> {
        self.with(|s| {
            s.disk(disk)?.online = online;
            Ok(())
        })
    }
    fn get_disk_state(&self, disk: u32) -> Result<bool> {
        self.with(|s| Ok(s.disk(disk)?.online))
    }
    fn plan_partition_disk(&self, disk: u32) -> Result<String> {
        self.with(|s| {
            Ok(match s.disk(disk)?.partitions.len() {
                0 => format!("would create partition 1 over the whole of disk {disk}"),
                n => format!("disk {disk} already has {n} partition(s): nothing would change"),
            })
        })
    }
    fn plan_set_disk_state(&self, disk: u32, online: bool) -> Result<String> {
        let state = if online { "online" } else { "offline" };
        self.with(|s| {
            Ok(if s.disk(disk)?.online == online {
                format!("disk {disk} is already {state}: nothing would change")
            } else {
                format!("would set disk {disk} {state}")
            })
        })
    }
}

impl VolumeHost for MemoryHost {
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>> {
        self.with(|s| {
            // Upstream answers an unknown disk with an empty list, not an error.
            let Some(d) = s.disks.get(&disk) else { return Ok(vec![]) };
            Ok(d.partitions
                .iter()
                .filter(|(p, _)| partition == 0 || **p == partition)
                .map(|(_, v)| v.clone())
                .collect())
        })
    }
    fn mount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        let target = norm(target_path);
        self.with(|s| {
            if let Some((other, _)) = s.volumes.iter().find(|(id, v)| *id != volume_id && v.mounts.contains(&target)) {
                return Err(Error::exists(format!("{target_path} already has volume {other} mounted")));
            }
            s.volume(volume_id)?.mounts.insert(target.clone());
            s.tree.entry(target).or_insert(Node::Dir);
            Ok(())
        })
    }
    fn unmount_volume(&self, volume_id: &str, target_path: &str) -> Result<()> {
        let target = norm(target_path);
        self.with(|s| {
            // Nothing mounted there is no error, as on both OSes (a retry after the unmount).
            s.volume(volume_id)?.mounts.remove(&target);
            Ok(())
        })
    }
    fn is_volume_formatted(&self, volume_id: &str) -> Result<bool> {
        self.with(|s| Ok(s.volume(volume_id)?.formatted))
    }
    fn format_volume(&self, volume_id: &str) -> Result<()> {
        self.with(|s| {
            let v = s.volume(volume_id)?;
            if v.formatted {
                // As both OSes refuse it: never format over a filesystem.
                return Err(Error::precondition(format!(
                    "volume {volume_id} already holds a filesystem; refusing to format it, which would destroy its data"
                )));
            }
            v.formatted = true;
            v.used = v.size / 100;
            Ok(())
        })
    }
    fn plan_mount_volume(&self, volume_id: &str, target_path: &str) -> Result<String> {
        let target = norm(target_path);
        self.with(|s| {
            if let Some((other, _)) = s.volumes.iter().find(|(id, v)| *id != volume_id && v.mounts.contains(&target)) {
                return Err(Error::exists(format!("{target_path} already has volume {other} mounted")));
            }
            Ok(if s.volume(volume_id)?.mounts.contains(&target) {
                format!("volume {volume_id} is already mounted at {target_path}: nothing would change")
            } else {
                format!("would mount volume {volume_id} at {target_path}")
            })
        })
    }
    fn plan_format_volume(&self, volume_id: &str) -> Result<String> {
        self.with(|s| {
            if s.volume(volume_id)?.formatted {
                return Err(Error::precondition(format!(
                    "volume {volume_id} already holds a filesystem; refusing to format it, which would destroy its data"
                )));
            }
            Ok(format!("would format volume {volume_id}"))
        })
    }
    fn plan_resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<String> {
        self.with(|s| {
            let (id, v) = s.volume_by(volume_id, data_volume::DiskNumber::DataVolume)?;
            let (now, disk) = (v.size, v.disk);
            let max = s.disk(disk)?.size;
            let want = if size_bytes == 0 { max } else { size_bytes };
            if want > max {
                return Err(Error::precondition(format!(
                    "cannot grow volume {id} to {want} bytes: disk {disk} has {max}"
                )));
            }
            Ok(if want <= now {
                format!("volume {id} already has {now} bytes: nothing would change")
            } else {
                format!("would grow volume {id} from {now} to {want} bytes")
            })
        })
    }
    fn resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<()> {
        self.with(|s| {
            let (id, v) = s.volume_by(volume_id, data_volume::DiskNumber::DataVolume)?;
            let (volume_id, disk) = (id.as_str(), v.disk);
            let max = s.disk(disk)?.size;
            let want = if size_bytes == 0 { max } else { size_bytes };
            if want > max {
                return Err(Error::precondition(format!(
                    "cannot grow volume {volume_id} to {want} bytes: disk {disk} has {max}"
                )));
            }
            let v = s.volume(volume_id)?;
            v.size = v.size.max(want);
            Ok(())
        })
    }
    fn get_volume_stats(&self, volume_id: &str) -> Result<VolumeStats> {
        self.with(|s| {
            let v = s.volume(volume_id)?;
            Ok(VolumeStats { total_bytes: v.size, used_bytes: v.used })
        })
    }
    fn get_disk_number_from_volume_id(&self, volume_id: &str) -> Result<u32> {
        self.with(|s| Ok(s.volume(volume_id)?.disk))
    }
    fn get_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        let target = norm(target_path);
        self.with(|s| {
            s.volumes.iter().find(|(_, v)| v.mounts.contains(&target)).map(|(id, _)| id.clone()).ok_or_else(|| {
                Error::not_found(format!("{target_path} is not a mounted folder: the volume {DOES_NOT_EXIST}"))
            })
        })
    }
    fn get_closest_volume_id_from_target_path(&self, target_path: &str) -> Result<String> {
        let mut p = norm(target_path);
        self.with(|s| loop {
            if let Some((id, _)) = s.volumes.iter().find(|(_, v)| v.mounts.contains(&p)) {
                return Ok(id.clone());
            }
            match parent(&p) {
                Some(up) if up != p => p = up,
                _ => return Err(Error::not_found(format!("the volume of {target_path} {DOES_NOT_EXIST}"))),
            }
        })
    }
    fn write_volume_cache(&self, volume_id: &str) -> Result<()> {
        self.with(|s| {
            s.volume(volume_id)?.flushes += 1;
            Ok(())
        })
    }
}

impl FilesystemHost for MemoryHost {
    fn path_exists(&self, path: &str) -> Result<bool> {
        self.with(|s| Ok(s.tree.contains_key(&norm(path))))
    }
    fn mkdir(&self, path: &str) -> Result<()> {
        let path = norm(path);
        self.with(|s| {
            let mut chain = vec![path.clone()];
            let mut cur = path.clone();
            while let Some(p) = parent(&cur) {
                if p == cur {
                    break;
                }
                chain.push(p.clone());
                cur = p;
            }
            for p in chain.iter().rev() {
                match s.tree.get(p) {
                    None => {
                        s.tree.insert(p.clone(), Node::Dir);
                    }
                    Some(Node::Dir) => {}
                    Some(_) => return Err(Error::exists(format!("{p} exists and is not a directory"))),
                }
            }
            Ok(())
        })
    }
    fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        let path = norm(path);
        self.with(|s| {
            match s.tree.get(&path) {
                None if force => return Ok(()),
                None => return Err(Error::not_found(format!("{path} does not exist"))),
                Some(Node::Dir) => {}
                Some(_) => {
                    s.tree.remove(&path);
                    return Ok(());
                }
            }
            let kids: Vec<String> = children(s, &path).collect();
            if !kids.is_empty() && !force {
                return Err(Error::precondition(format!("directory {path} is not empty")));
            }
            for k in kids {
                s.tree.remove(&k);
            }
            s.tree.remove(&path);
            Ok(())
        })
    }
    fn rmdir_contents(&self, path: &str) -> Result<()> {
        let path = norm(path);
        self.with(|s| {
            if s.tree.get(&path) != Some(&Node::Dir) {
                return Err(Error::not_found(format!("directory {path} does not exist")));
            }
            for k in children(s, &path).collect::<Vec<_>>() {
                s.tree.remove(&k);
            }
            Ok(())
        })
    }
    fn create_symlink(&self, destination: &str, link: &str) -> Result<()> {
        let link = norm(link);
        self.with(|s| match s.tree.get(&link) {
            Some(Node::Link(d)) if d == destination => Ok(()),
            Some(_) => Err(Error::exists(format!("{link} already exists"))),
            None => {
                s.tree.insert(link, Node::Link(destination.to_string()));
                Ok(())
            }
        })
    }
    fn is_symlink(&self, path: &str) -> Result<bool> {
        let path = norm(path);
        self.with(|s| match s.tree.get(&path) {
            None => Err(Error::not_found(format!("{path} does not exist"))),
            Some(Node::Link(d)) => Ok(s.tree.contains_key(&norm(d))),
            Some(_) => Ok(false),
        })
    }
}

impl SmbHost for MemoryHost {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        let root = share_root(&mapping.remote_path)?;
        self.with(|s| {
            if !mapping.local_path.is_empty() {
                let link = norm(&mapping.local_path);
                match s.tree.get(&link) {
                    Some(Node::Link(d)) if *d == mapping.remote_path => {}
                    Some(_) => return Err(Error::exists(format!("{link} already exists"))),
                    None => {
                        s.tree.insert(link, Node::Link(mapping.remote_path.clone()));
                    }
                }
            }
            s.smb.insert(root, mapping.clone());
            Ok(())
        })
    }
    fn remove_smb_global_mapping(&self, remote_path: &str) -> Result<()> {
        self.with(|s| {
            // A mapping gone already is no error, as on both OSes.
            s.smb.remove(&share_root(remote_path)?);
            Ok(())
        })
    }
}

impl IscsiHost for MemoryHost {
    fn add_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.with(|s| {
            s.registered.insert(portal.clone());
            s.portals.entry(portal.clone()).or_default();
            Ok(())
        })
    }
    fn discover_target_portal(&self, portal: &TargetPortal) -> Result<Vec<String>> {
        self.with(|s| Ok(s.portal_targets(portal)?.keys().cloned().collect()))
    }
    fn remove_target_portal(&self, portal: &TargetPortal) -> Result<()> {
        self.with(|s| {
            // A portal gone already is no error (a retry after the call that removed it).
            s.registered.remove(portal);
            Ok(())
        })
    }
    fn list_target_portals(&self) -> Result<Vec<TargetPortal>> {
        self.with(|s| Ok(s.registered.iter().cloned().collect()))
    }
    fn connect_target(&self, r: &ConnectTarget) -> Result<()> {
        self.with(|s| {
            let mutual = s.mutual_chap_secret.is_some();
            if r.auth == AuthType::MutualChap && !mutual {
                return Err(Error::precondition("mutual CHAP requested but no initiator secret is set"));
            }
            let t = s.target(&r.portal, &r.iqn)?;
            if !t.connected {
                t.connected = true;
                t.last_auth = Some((r.auth, r.chap_username.clone()));
            }
            Ok(())
        })
    }
    fn disconnect_target(&self, portal: &TargetPortal, iqn: &str) -> Result<()> {
        self.with(|s| {
            s.target(portal, iqn)?.connected = false;
            Ok(())
        })
    }
    fn get_target_disks(&self, portal: &TargetPortal, iqn: &str) -> Result<Vec<u32>> {
        self.with(|s| {
            let t = s.target(portal, iqn)?;
            Ok(if t.connected { t.disks.clone() } else { vec![] })
        })
    }
    fn set_mutual_chap_secret(&self, secret: &Secret) -> Result<()> {
        self.with(|s| {
            s.mutual_chap_secret = Some(secret.clone());
            Ok(())
        })
    }
}

impl SystemHost for MemoryHost {
    fn get_bios_serial_number(&self) -> Result<String> {
        self.with(|s| {
            if s.bios_serial.is_empty() {
                Err(Error::not_found("the firmware reports no system serial number"))
            } else {
                Ok(s.bios_serial.clone())
            }
        })
    }
    fn start_service(&self, name: &str) -> Result<()> {
        self.with(|s| {
            s.service(name)?.info.status = ServiceStatus::Running;
            Ok(())
        })
    }
    fn stop_service(&self, name: &str, force: bool, may_stop: &dyn Fn(&str) -> bool) -> Result<()> {
        self.with(|s| {
            s.service(name)?;
            // Running dependents, transitively, breadth-first (as upstream collects them).
            let mut running: Vec<String> = Vec::new();
            let mut queue = vec![name.to_string()];
            while let Some(cur) = queue.pop() {
                let deps = s.services.get(&cur).map(|x| x.dependents.clone()).unwrap_or_default();
                for d in deps {
                    let is_running = s.services.get(&d).is_some_and(|x| x.info.status == ServiceStatus::Running);
                    if is_running && !running.contains(&d) {
                        running.push(d.clone());
                        queue.insert(0, d);
                    }
                }
            }
            if !running.is_empty() && !force {
                return Err(Error::precondition(format!(
                    "service {name:?} has running dependents {running:?}; use force to stop them too"
                )));
            }
            crate::services::refuse_unstoppable(name, &running, may_stop)?;
            // Last found first, the requested service last.
            for d in running.iter().rev() {
                s.service(d)?.info.status = ServiceStatus::Stopped;
            }
            s.service(name)?.info.status = ServiceStatus::Stopped;
            Ok(())
        })
    }
    fn get_service(&self, name: &str) -> Result<ServiceInfo> {
        self.with(|s| Ok(s.service(name)?.info.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmdir_semantics_follow_upstream() {
        let h = MemoryHost::sample();
        h.mkdir("/a/b/c").unwrap();
        assert!(h.path_exists("/a/b").unwrap());
        assert!(matches!(h.rmdir("/a", false), Err(Error::FailedPrecondition(_))));
        h.rmdir("/a", true).unwrap();
        assert!(!h.path_exists("/a/b/c").unwrap());
        assert!(matches!(h.rmdir("/a", false), Err(Error::NotFound(_))));
        h.rmdir("/a", true).unwrap();
    }

    #[test]
    fn partition_is_idempotent_and_creates_one_volume() {
        let h = MemoryHost::sample();
        h.partition_disk(1).unwrap();
        h.partition_disk(1).unwrap();
        assert_eq!(h.list_volumes_on_disk(1, 0).unwrap(), vec!["vol-1-1".to_string()]);
        assert!(h.list_volumes_on_disk(1, 2).unwrap().is_empty());
        assert!(matches!(h.partition_disk(9), Err(Error::NotFound(m)) if m.contains("disk 9")));
    }

    #[test]
    fn resize_takes_a_disk_number_for_that_disks_data_volume() {
        let h = MemoryHost::sample();
        h.partition_disk(1).unwrap();
        // A clone restored onto a larger disk: the volume is smaller than its disk.
        h.with(|s| s.volumes.get_mut("vol-1-1").unwrap().size = GIB / 4);
        h.resize_volume("1", 0).unwrap();
        assert_eq!(h.with(|s| s.volumes["vol-1-1"].size), GIB);
        assert!(matches!(h.resize_volume("0", 0), Err(Error::NotFound(m)) if m.contains("disk 0 has no volumes")));
        assert!(matches!(h.is_volume_formatted("1"), Err(Error::NotFound(_))), "only ResizeVolume takes one");
    }
}
