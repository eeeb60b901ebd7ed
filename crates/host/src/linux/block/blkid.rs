//! libblkid (util-linux's prober, through the libblkid-rs bindings): does a device hold any
//! signature? Asked only when our own probe finds nothing; why both are asked, and how their
//! answers combine: *Two probes* in `format.rs`.

use libblkid_rs::{BlkidProbe, BlkidSafeprobeRet};
use std::os::fd::{AsRawFd, BorrowedFd};

/// What libblkid finds on the device behind `fd`: a filesystem or other superblock (`TYPE`), a
/// partition table (`PTTYPE`), or several at once; `None` when it finds nothing. The descriptor
/// stays ours: a probe given a descriptor does not close it.
pub(crate) fn signature(fd: BorrowedFd<'_>) -> Result<Option<String>, String> {
    let err = |what: &str, e: libblkid_rs::BlkidErr| format!("libblkid {what}: {e}");
    let mut p = BlkidProbe::new().map_err(|e| err("probe", e))?;
    p.set_device(fd.as_raw_fd(), 0, 0).map_err(|e| err("set_device", e))?;
    p.enable_superblocks(true).map_err(|e| err("superblocks", e))?;
    p.enable_partitions(true).map_err(|e| err("partitions", e))?;
    match p.do_safeprobe().map_err(|e| err("probing", e))? {
        BlkidSafeprobeRet::None => Ok(None),
        BlkidSafeprobeRet::Ambiguous => Ok(Some("several signatures at once".to_string())),
        BlkidSafeprobeRet::Success => Ok(Some(
            p.lookup_value("TYPE")
                .or_else(|_| p.lookup_value("PTTYPE").map(|t| format!("a {t} partition table")))
                .unwrap_or_else(|_| "a signature".to_string()),
        )),
    }
}
