use super::op;
use crate::dry_run::{Look, Plan};
use crate::locks::Serial;
use crate::policy::args::{Arg, Args};
use csi_proxy_host::types::{DiskIds, DiskLocation};
use csi_proxy_host::Error;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct ListDiskLocations {}
op!(ListDiskLocations -> BTreeMap<u32, DiskLocation>, read_only, |_s, ctx| ctx.hosts().disk.list_disk_locations());

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionDisk {
    pub disk: u32,
}
op!(PartitionDisk -> (), serial |s| Ok(Serial::Disk(s.disk)),
    |s, ctx| ctx.hosts().disk.partition_disk(s.disk));

/// The host-wide part; the server then refreshes each disk under its own lock.
#[derive(Debug, Clone, PartialEq)]
pub struct Rescan {}
op!(Rescan -> (), serial |_s| Ok(Serial::EachDisk), |_s, ctx| ctx.hosts().disk.rescan());

#[derive(Debug, Clone, PartialEq)]
pub struct ListDiskIds {}
op!(ListDiskIds -> BTreeMap<u32, DiskIds>, read_only, |_s, ctx| ctx.hosts().disk.list_disk_ids());

#[derive(Debug, Clone, PartialEq)]
pub struct GetDiskStats {
    pub disk: u32,
}
op!(GetDiskStats -> u64, read_only quick, |s, ctx| ctx.hosts().disk.get_disk_stats(s.disk));

#[derive(Debug, Clone, PartialEq)]
pub struct SetDiskState {
    pub disk: u32,
    pub online: bool,
}
op!(SetDiskState -> (), serial |s| Ok(Serial::Disk(s.disk)),
    |s, ctx| ctx.hosts().disk.set_disk_state(s.disk, s.online));

#[derive(Debug, Clone, PartialEq)]
pub struct GetDiskState {
    pub disk: u32,
}
op!(GetDiskState -> bool, read_only, |s, ctx| ctx.hosts().disk.get_disk_state(s.disk));

/// v1alpha1 only: the disk whose page 0x83 identifier equals `page83`.
#[derive(Debug, Clone, PartialEq)]
pub struct GetDiskNumberByName {
    pub page83: String,
}
op!(GetDiskNumberByName -> u32, read_only, |s, ctx| {
    let name = crate::fields::required("disk_name", &s.page83)?;
    ctx.hosts()
        .disk
        .list_disk_ids()?
        .into_iter()
        .find(|(_, ids)| ids.page83 == name)
        .map(|(n, _)| n)
        .ok_or_else(|| Error::not_found(format!("no disk has page 0x83 identifier {name:?}")))
});

// Dry runs (crate::dry_run).

impl Plan for PartitionDisk {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        look.plan_partition_disk(self.disk)
    }
}

impl Plan for Rescan {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        let disks = look.disks_to_refresh()?;
        let then = match disks.as_slice() {
            [] => String::new(),
            d => format!(", then re-read the partition tables of disks {d:?}, one at a time"),
        };
        Ok(format!("would rescan the host's storage for new disks and sizes{then}"))
    }
}

impl Plan for SetDiskState {
    fn plan(&self, look: &Look<'_>) -> csi_proxy_host::Result<String> {
        look.plan_set_disk_state(self.disk, self.online)
    }
}

// What each operation names, for the authorization policy (crate::policy).

impl Args for ListDiskLocations {
    fn args(&self) -> Vec<Arg<'_>> {
        vec![]
    }
}

impl Args for PartitionDisk {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Disk(s.disk)]
    }
}

impl Args for Rescan {
    fn args(&self) -> Vec<Arg<'_>> {
        vec![]
    }
}

impl Args for ListDiskIds {
    fn args(&self) -> Vec<Arg<'_>> {
        vec![]
    }
}

impl Args for GetDiskStats {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Disk(s.disk)]
    }
}

impl Args for SetDiskState {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Disk(s.disk)]
    }
}

impl Args for GetDiskState {
    fn args(&self) -> Vec<Arg<'_>> {
        let s = self;
        vec![Arg::Disk(s.disk)]
    }
}

impl Args for GetDiskNumberByName {
    fn args(&self) -> Vec<Arg<'_>> {
        vec![]
    }
}
