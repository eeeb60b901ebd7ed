use super::op;
use crate::locks::Serial;
use csi_proxy_host::types::{DiskIds, DiskLocation};
use csi_proxy_host::Error;
use std::collections::BTreeMap;

op!(ListDiskLocations {} -> BTreeMap<u32, DiskLocation>, |_s, ctx| ctx.hosts().disk.list_disk_locations());
op!(PartitionDisk { disk: u32 } -> (), serial |s| Ok(Serial::Disk(s.disk)),
    |s, ctx| ctx.hosts().disk.partition_disk(s.disk));
op!(
    /// The host-wide part; the server then refreshes each disk under its own lock.
    Rescan {} -> (), serial |_s| Ok(Serial::EachDisk), |_s, ctx| ctx.hosts().disk.rescan()
);
op!(ListDiskIds {} -> BTreeMap<u32, DiskIds>, |_s, ctx| ctx.hosts().disk.list_disk_ids());
op!(GetDiskStats { disk: u32 } -> u64, quick |s, ctx| ctx.hosts().disk.disk_size(s.disk));
op!(SetDiskState { disk: u32, online: bool } -> (), serial |s| Ok(Serial::Disk(s.disk)),
    |s, ctx| ctx.hosts().disk.set_disk_online(s.disk, s.online));
op!(GetDiskState { disk: u32 } -> bool, |s, ctx| ctx.hosts().disk.disk_online(s.disk));
op!(
    /// v1alpha1 only: the disk whose page 0x83 identifier equals `page83`.
    GetDiskNumberByName { page83: String } -> u32,
    |s, ctx| {
        let name = crate::call::required("disk_name", &s.page83)?;
        ctx.hosts()
            .disk
            .list_disk_ids()?
            .into_iter()
            .find(|(_, ids)| ids.page83 == name)
            .map(|(n, _)| n)
            .ok_or_else(|| Error::not_found(format!("no disk has page 0x83 identifier {name:?}")))
    }
);
