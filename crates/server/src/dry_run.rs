//! Dry runs: a call that may change the host, sent with the request metadata
//! `csi-proxy-dry-run: true`, answers what it would do and does nothing.
//!
//! - Its request is read and validated as for the real call ([`crate::call::Op::serial`]), then
//!   its [`Plan`] is made with a [`Look`], which offers the host's reading calls and the
//!   backends' own plans only, never a changing call. The backends' plans read (a Linux plan
//!   takes the disk's shared lock, as a reading call does, and never opens a device
//!   exclusively).
//! - The checks the real call makes before its first change and that reading can make (the
//!   interlocks, "already holds a filesystem", the allowed services, the paths' containment) run
//!   as they would: such a refusal is the real call's error. PartitionDisk, SetDiskState,
//!   FormatVolume, ResizeVolume and MountVolume are planned by the backends from the checks
//!   their real calls share. Some checks come only as the real call goes (a device in use at
//!   that moment, a Windows mount folder that is not empty, the SMB server's or the iSCSI
//!   target's answer): a plan is what would be tried, not a promise.
//! - Otherwise the answer is OK with the response message's defaults, and the response headers
//!   `csi-proxy-dry-run: true` (the daemon did dry-run it) and `csi-proxy-plan` (what it would do,
//!   percent-encoded as gRPC encodes `grpc-message`). A refusal carries `csi-proxy-dry-run: true`
//!   too. The host may change before the real call.
//! - A dry run never joins a real call in flight, nor is joined ([`crate::join`]), and takes no
//!   disk's turn. Its audit records are marked `dry_run`; the end record's message is the plan.
//! - A read-only call (List*, Get*, Is*, the stats) changes nothing: it runs as asked.
//!
//! A daemon that does not know the metadata (upstream, or an older build) would do the work:
//! clients check [`FEATURES_HEADER`] on an earlier answer before they send a dry run
//! (`csi-proxyctl --dry-run` does).

use crate::Config;
use csi_proxy_host::{Error, Hosts, Result};
use tonic::metadata::{MetadataMap, MetadataValue};

pub use csi_proxy_wire::{DRY_RUN_METADATA, FEATURES_HEADER, PLAN_METADATA};

/// Longest plan sent (bytes before encoding); a longer one is cut on a character boundary.
const MAX_PLAN: usize = 2048;

/// Whether the request asks for a dry run. Any value but `true` or `false` is refused, naming
/// it: a typo must not run the real call.
pub fn asked(metadata: &MetadataMap) -> Result<bool> {
    let values: Vec<_> = metadata.get_all(DRY_RUN_METADATA).iter().collect();
    match values.as_slice() {
        [] => Ok(false),
        [one] => match one.to_str() {
            Ok("true") => Ok(true),
            Ok("false") => Ok(false),
            other => Err(Error::invalid(format!(
                "metadata {DRY_RUN_METADATA} is {:?}: expected true or false",
                csi_proxy_host::error::clip(other.unwrap_or("<not visible ASCII>"))
            ))),
        },
        _ => Err(Error::invalid(format!("metadata {DRY_RUN_METADATA} is given {} times: expected once", values.len()))),
    }
}

/// What a plan's header encodes besides non-ASCII: controls and `%` (as `grpc-message`).
const ENCODED: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');

/// `plan` as a header value: bounded, with `%`, controls and non-ASCII bytes percent-encoded
/// (the encoding of `grpc-message`, which gRPC clients already decode).
pub fn plan_header(plan: &str) -> MetadataValue<tonic::metadata::Ascii> {
    // The plan as the call log shows it (head and tail kept), then cut to the header's bound.
    let bounded = csi_proxy_host::error::bound_message(plan);
    let plan = bounded.as_ref();
    let mut end = plan.len().min(MAX_PLAN);
    while !plan.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = percent_encoding::utf8_percent_encode(&plan[..end], ENCODED).to_string();
    if end < plan.len() {
        out.push_str("...");
    }
    // A header value must not end in whitespace (RFC 9113, 8.2.1): a last space is encoded.
    let spaces = out.len() - out.trim_end_matches(' ').len();
    out.truncate(out.len() - spaces);
    out.push_str(&"%20".repeat(spaces));
    MetadataValue::try_from(out).expect("only visible ASCII is left")
}

/// What a mutating operation would do, found by reading only. Each one has a plan: the
/// operation's [`crate::call::Op`] does not compile without it.
pub trait Plan {
    fn plan(&self, look: &Look<'_>) -> Result<String>;
}

/// The host as a plan sees it: its reading calls, and the backends' own plans, nothing else.
pub struct Look<'a> {
    hosts: &'a Hosts,
    config: &'a Config,
}

impl<'a> Look<'a> {
    pub fn new(hosts: &'a Hosts, config: &'a Config) -> Self {
        Look { hosts, config }
    }

    pub fn config(&self) -> &Config {
        self.config
    }

    pub fn plan_partition_disk(&self, disk: u32) -> Result<String> {
        self.hosts.disk.plan_partition_disk(disk)
    }
    pub fn plan_set_disk_state(&self, disk: u32, online: bool) -> Result<String> {
        self.hosts.disk.plan_set_disk_state(disk, online)
    }
    pub fn disks_to_refresh(&self) -> Result<Vec<u32>> {
        self.hosts.disk.disks_to_refresh()
    }
    pub fn plan_mount_volume(&self, volume_id: &str, target_path: &str) -> Result<String> {
        self.hosts.volume.plan_mount_volume(volume_id, target_path)
    }
    pub fn plan_format_volume(&self, volume_id: &str) -> Result<String> {
        self.hosts.volume.plan_format_volume(volume_id)
    }
    pub fn plan_resize_volume(&self, volume_id: &str, size_bytes: u64) -> Result<String> {
        self.hosts.volume.plan_resize_volume(volume_id, size_bytes)
    }
    pub fn disk_of_volume(&self, volume_id: &str) -> Result<u32> {
        self.hosts.volume.get_disk_number_from_volume_id(volume_id)
    }
    /// The volume mounted at `target_path`, `None` when none is (the backends' NotFound).
    pub fn volume_at(&self, target_path: &str) -> Result<Option<String>> {
        match self.hosts.volume.get_volume_id_from_target_path(target_path) {
            Ok(v) => Ok(Some(v)),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
    /// PathExists: the path's form and containment are checked as for every filesystem call.
    pub fn path_exists(&self, path: &str) -> Result<bool> {
        self.hosts.filesystem.path_exists(path)
    }
    pub fn is_symlink(&self, path: &str) -> Result<bool> {
        self.hosts.filesystem.is_symlink(path)
    }
    pub fn target_portals(&self) -> Result<Vec<csi_proxy_host::types::TargetPortal>> {
        self.hosts.iscsi.list_target_portals()
    }
    pub fn service(&self, name: &str) -> Result<csi_proxy_host::types::ServiceInfo> {
        self.hosts.system.get_service(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&str]) -> MetadataMap {
        let mut m = MetadataMap::new();
        for v in values {
            m.append(DRY_RUN_METADATA, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn only_true_asks_and_anything_unclear_is_refused() {
        assert!(!asked(&with(&[])).unwrap());
        assert!(!asked(&with(&["false"])).unwrap());
        assert!(asked(&with(&["true"])).unwrap());
        for bad in [&["yes"][..], &["TRUE"], &["1"], &["true", "true"], &[""]] {
            let e = asked(&with(bad)).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains(DRY_RUN_METADATA), "{e}");
        }
    }

    #[test]
    fn plans_are_encoded_and_bounded() {
        assert_eq!(plan_header("would format /dev/sdb1").to_str().unwrap(), "would format /dev/sdb1");
        assert_eq!(plan_header("100% é\n").to_str().unwrap(), "100%25 %C3%A9%0A");
        assert_eq!(plan_header("at /mnt/a ").to_str().unwrap(), "at /mnt/a%20");
        let long = plan_header(&"é".repeat(MAX_PLAN));
        let text = long.to_str().unwrap();
        assert!(text.ends_with("...") && text.len() <= 3 * MAX_PLAN + 3, "{}", text.len());
    }
}
