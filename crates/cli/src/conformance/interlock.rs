//! `interlock-dry-run`: the node's own system disk, through dry runs only. Every disk the daemon
//! lists gets a PartitionDisk dry run: the disk holding the running system must be refused by
//! the interlock (any other answers its plan); then each of that disk's volumes gets a
//! FormatVolume dry run, and the disk's number a ResizeVolume dry run, and each must be refused.
//! Nothing is sent unless the daemon says it understands dry runs: one that does not would do
//! the work.

use super::{bounded, check, wrong, Report, StepErr};
use crate::dynamic::understands_dry_run;
use csi_proxy_client::wire::DRY_RUN_METADATA;
use csi_proxy_client::{v1, Code, Status};
use csi_proxy_flows::Proxy;

/// Whether the running system's root is on a block device (on Windows it always is: the boot
/// volume). On Linux, `/`'s device number must name one in /sys/dev/block.
fn root_on_a_disk() -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let Ok(dev) = std::fs::metadata("/").map(|m| m.dev()) else { return true };
        // glibc's major() and minor() of a dev_t.
        let major = ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0xfff);
        let minor = ((dev >> 12) & 0xffff_ff00) | (dev & 0xff);
        std::path::Path::new(&format!("/sys/dev/block/{major}:{minor}")).exists()
    }
    #[cfg(not(unix))]
    {
        true
    }
}

/// `message` as a dry run.
fn dry<T>(message: T) -> tonic::Request<T> {
    let mut r = tonic::Request::new(message);
    r.metadata_mut().insert(DRY_RUN_METADATA, tonic::metadata::MetadataValue::from_static("true"));
    r
}

/// What a dry run answered: its plan, or the status (an OK without the dry-run header is an
/// error: the daemon may have run the call).
fn outcome<T>(answer: Result<tonic::Response<T>, Status>, what: &str) -> Result<Result<(), Status>, StepErr> {
    match answer {
        Ok(r) if r.metadata().get(DRY_RUN_METADATA).is_some_and(|v| v == "true") => Ok(Ok(())),
        Ok(_) => Err(wrong(format!("{what} answered OK without {DRY_RUN_METADATA}: true: it may have run for real"))),
        Err(s) if s.metadata().get(DRY_RUN_METADATA).is_some_and(|v| v == "true") => Ok(Err(s)),
        Err(s) => Err(wrong(format!(
            "{what} answered {:?} without {DRY_RUN_METADATA}: true: it may have been tried for real: {}",
            s.code(),
            bounded(s.message())
        ))),
    }
}

/// Whether a refusal is an interlock's for the running system (Linux: "holds the running
/// system"; Windows: "is the system's").
fn refused_as_the_systems(s: &Status) -> bool {
    s.code() == Code::FailedPrecondition
        && s.message().starts_with("refusing ")
        && (s.message().contains("holds the running system") || s.message().contains("is the system's"))
}

pub(super) async fn interlock_dry_run(report: &mut Report, p: &mut Proxy) {
    let mut c = report.check(check::INTERLOCK_DRY_RUN);
    let disks = c
        .run("the daemon lists dry-run in csi-proxy-features", async {
            let r = p.disk.list_disk_locations(v1::ListDiskLocationsRequest {}).await?;
            if !understands_dry_run(r.metadata()) {
                return Err(StepErr::Skip(
                    "the daemon does not list dry-run: a dry run would run for real, so none is sent".into(),
                ));
            }
            // Every disk: ListDiskLocations leaves out those without a location (virtio, NVMe).
            let mut disks: std::collections::BTreeSet<u32> = r.into_inner().disk_locations.into_keys().collect();
            disks.extend(p.disk.list_disk_i_ds(v1::ListDiskIDsRequest {}).await?.into_inner().disk_i_ds.into_keys());
            Ok(disks.into_iter().collect::<Vec<u32>>())
        })
        .await;
    let Some(disks) = disks else {
        c.block(super::Res::Skipped("no dry run is sent".into()));
        return;
    };
    let system = c
        .run("PartitionDisk dry runs: the system's disk is refused", async {
            let mut refused = Vec::new();
            for &n in &disks {
                let answer = p.disk.partition_disk(dry(v1::PartitionDiskRequest { disk_number: n })).await;
                match outcome(answer, &format!("PartitionDisk({n})"))? {
                    Err(s) if refused_as_the_systems(&s) => refused.push(n),
                    _ => {}
                }
            }
            match refused.first() {
                Some(&n) => Ok(n),
                None if !root_on_a_disk() => Err(StepErr::Skip(
                    "/ is on no block device here (a network or memory root), so no disk holds the running system"
                        .into(),
                )),
                None => Err(wrong(format!("no disk of {disks:?} was refused as the system's"))),
            }
        })
        .await;
    let Some(system) = system else { return };
    c.run("FormatVolume dry runs on its volumes are refused", async {
        let volumes = match p
            .volume
            .list_volumes_on_disk(v1::ListVolumesOnDiskRequest { disk_number: system, partition_number: 0 })
            .await
        {
            Ok(r) => r.into_inner().volume_ids,
            Err(s) => {
                return Err(StepErr::Skip(format!(
                    "ListVolumesOnDisk({system}) answered {:?}: {}",
                    s.code(),
                    bounded(s.message())
                )))
            }
        };
        for v in &volumes {
            let answer = p.volume.format_volume(dry(v1::FormatVolumeRequest { volume_id: v.clone() })).await;
            match outcome(answer, &format!("FormatVolume({v})"))? {
                // Windows checks for a filesystem first (the system's volumes all hold one).
                Err(s) if refused_as_the_systems(&s) || s.message().contains("already holds") => {}
                Err(s) => {
                    return Err(wrong(format!(
                        "FormatVolume of volume {v} of the system's disk {system} was refused, but not by the interlock: {:?}: {}",
                        s.code(),
                        bounded(s.message())
                    )))
                }
                Ok(()) => return Err(wrong(format!("FormatVolume of volume {v} of the system's disk {system} would run"))),
            }
        }
        Ok(())
    })
    .await;
    c.run("ResizeVolume dry run by its number is refused", async {
        let req = v1::ResizeVolumeRequest { volume_id: system.to_string(), size_bytes: 0 };
        match outcome(p.volume.resize_volume(dry(req)).await, &format!("ResizeVolume({system})"))? {
            Err(s) if refused_as_the_systems(&s) => Ok(()),
            Err(s) => Err(StepErr::Skip(format!(
                "refused, though not by an interlock: {:?}: {}",
                s.code(),
                bounded(s.message())
            ))),
            Ok(()) => Err(wrong(format!("ResizeVolume of the system's disk {system} would run"))),
        }
    })
    .await;
}
