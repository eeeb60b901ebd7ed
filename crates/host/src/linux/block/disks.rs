//! Whole disks from sysfs: enumeration, locations, IDs, size and SCSI state.
//!
//! Everything comes from sysfs below `self.sysfs` (tests point it at a fake tree); no tool is run
//! and no request value reaches anything but a number comparison.
//!
//! - Which devices are disks: `<sysfs>/class/block/*` without a `partition` file, named `sd*`,
//!   `vd*`, `xvd*`, `nvme<N>n<M>`, or `loop<N>` with a `loop/backing_file`; not `hidden`, size not
//!   0. Device-mapper, md, ram, zram, optical (`sr*`) and anything else are left out.
//! - Disk number: `(major << 20) | minor` from the `dev` file ([`disk_number`]); stable while the
//!   device exists, but dynamic majors (nvme, virtio, loop partitions) may change across reboots.
//! - One entry that cannot be read is logged and skipped; it never fails a listing.

mod vpd;

#[cfg(test)]
mod tests;

use super::{disk_number, split_disk_number, Block, Disk};
use crate::interlock::Action;
use crate::types::{DiskIds, DiskLocation};
use crate::{DiskHost, Error, Result};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The unit of sysfs `size` (and `start`): always 512 bytes, whatever the logical block size.
const SYSFS_SECTOR: u64 = 512;

/// How long [`Block::rescan_scsi`] waits for the sd driver to attach to SCSI devices a scan
/// found (sd probes asynchronously, after the scan itself has returned).
const SD_PROBE_WAIT: Duration = Duration::from_secs(10);

/// How a kind of disk is attached, from its kernel name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bus {
    /// `sd*`: any disk the SCSI disk driver serves (SCSI, SAS, FC, iSCSI, virtio-scsi, SATA, USB).
    Scsi,
    /// `vd*`: virtio-blk.
    Virtio,
    /// `xvd*`: Xen blkfront.
    Xen,
    /// `nvme<N>n<M>`, and `nvme<N>c<C>n<M>` (a multipath path, which is hidden).
    Nvme,
    /// `loop<N>`.
    Loop,
}

fn bus_of(name: &str) -> Option<Bus> {
    fn letters(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_lowercase())
    }
    fn digits(s: &str) -> bool {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
    }
    if let Some(rest) = name.strip_prefix("xvd") {
        return letters(rest).then_some(Bus::Xen);
    }
    if let Some(rest) = name.strip_prefix("sd") {
        return letters(rest).then_some(Bus::Scsi);
    }
    if let Some(rest) = name.strip_prefix("vd") {
        return letters(rest).then_some(Bus::Virtio);
    }
    if let Some(rest) = name.strip_prefix("loop") {
        return digits(rest).then_some(Bus::Loop);
    }
    if let Some(rest) = name.strip_prefix("nvme") {
        let (controller, namespace) = rest.split_once('n')?;
        let controller_ok =
            digits(controller) || controller.split_once('c').is_some_and(|(s, c)| digits(s) && digits(c));
        return (controller_ok && digits(namespace)).then_some(Bus::Nvme);
    }
    None
}

/// What one `class/block` entry is.
enum Entry {
    Disk(Disk),
    /// Not a disk this backend serves, and why (completes "<name> is …").
    Skipped(&'static str),
}

/// `"M:m"` (a sysfs `dev` file).
fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    let (major, minor) = (major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?);
    (major < 1 << 12 && minor < 1 << 20).then_some((major, minor))
}

/// `"H:C:T:L"` (the name of a SCSI device), as decimal numbers.
fn parse_hctl(text: &str) -> Option<[u64; 4]> {
    let mut parts = text.split(':').map(|p| p.parse::<u64>().ok());
    let hctl = [parts.next()??, parts.next()??, parts.next()??, parts.next()??];
    parts.next().is_none().then_some(hctl)
}

/// The decimal number at the end of a device name (`virtio3` → 3, `vbd-51712` → 51712).
fn trailing_number(name: &str) -> Option<u64> {
    let start = name.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
    name[start..].parse().ok()
}

fn read_text(path: &Path) -> io::Result<String> {
    fs::read_to_string(path)
}

/// An optional attribute: `None` when absent; other failures are logged and also give `None`
/// (identity data is best effort per disk, never a reason to fail a listing).
fn read_optional(path: &Path) -> Option<Vec<u8>> {
    match fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!("cannot read {}: {e}", path.display());
            None
        }
    }
}

/// An optional text attribute without surrounding whitespace and NUL padding; `None` when absent,
/// unreadable or blank.
fn read_optional_text(path: &Path) -> Option<String> {
    let bytes = read_optional(path)?;
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim_matches(|c: char| c == '\0' || c.is_whitespace());
    (!text.is_empty()).then(|| text.to_string())
}

/// What "disk number" means here, for NotFound messages.
const NUMBER_HINT: &str = "on Linux a disk number is the device number of a whole disk, (major << 20) | minor; \
     whole disks are sd*, vd*, xvd*, nvme namespaces and loop devices with a backing file";

impl DiskHost for Block {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        Ok(self.disks()?.into_iter().map(|d| (d.number, self.location(&d))).collect())
    }

    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        Ok(self.disks()?.into_iter().map(|d| (d.number, self.ids(&d))).collect())
    }

    /// Size in bytes.
    fn get_disk_stats(&self, disk: u32) -> Result<u64> {
        let disk = self.disk(disk)?;
        let sectors = self.size_sectors(&disk.name)?;
        sectors
            .checked_mul(SYSFS_SECTOR)
            .ok_or_else(|| Error::internal(format!("{}: size of {sectors} sectors overflows", disk.name)))
    }

    /// Online = the SCSI device state `running`; offline = `offline`. Idempotent. Only a disk in
    /// one of those two states can be switched (the kernel refuses the others).
    fn set_disk_state(&self, disk: u32, online: bool) -> Result<()> {
        let disk = self.disk(disk)?;
        let want = if online { "running" } else { "offline" };
        let now = self.scsi_state(&disk)?;
        if now == want {
            return Ok(());
        }
        self.state_checks(&disk, &now, online)?;
        let path = self.scsi_state_file(&disk)?;
        // The kernel compares the value with a trailing newline.
        write_attr(&path, format!("{want}\n").as_bytes()).map_err(|e| {
            let msg = format!("setting {} (disk {}) {want}: {e}", disk.name, disk.number);
            if e.kind() == io::ErrorKind::InvalidInput {
                Error::precondition(msg) // the state changed under us to one that cannot switch
            } else {
                Error::io(msg, e)
            }
        })
    }

    fn get_disk_state(&self, disk: u32) -> Result<bool> {
        let disk = self.disk(disk)?;
        Ok(self.scsi_state(&disk)? == "running")
    }

    fn plan_set_disk_state(&self, disk: u32, online: bool) -> Result<String> {
        let disk = self.disk(disk)?;
        let want = if online { "running" } else { "offline" };
        let now = self.scsi_state(&disk)?;
        if now == want {
            return Ok(format!("{} (disk {}) is already {want}: nothing would change", disk.name, disk.number));
        }
        self.state_checks(&disk, &now, online)?;
        Ok(format!("would set the SCSI state of {} (disk {}) from {now} to {want}", disk.name, disk.number))
    }

    fn plan_partition_disk(&self, disk: u32) -> Result<String> {
        let disk = self.disk(disk)?;
        self.interlock(&disk, None, Action::PartitionDisk)?;
        self.plan_partition(&disk)
    }

    fn partition_disk(&self, disk: u32) -> Result<()> {
        let disk = self.disk(disk)?;
        self.interlock(&disk, None, Action::PartitionDisk)?;
        self.partition(&disk)
    }

    /// SCSI host scans and capacity re-reads (`rescan_scsi`); each disk's table is re-read
    /// afterwards by `refresh_disk`, under that disk's lock.
    fn rescan(&self) -> Result<()> {
        self.rescan_scsi().inspect_err(|e| tracing::warn!("rescan: {e}"))
    }

    fn disks_to_refresh(&self) -> Result<Vec<u32>> {
        Ok(self.disks()?.iter().map(|d| d.number).collect())
    }

    /// A disk gone since it was listed is skipped; so is one this process may not open at all
    /// (EPERM/EACCES: a device cgroup, a sandbox): it is not ours to serve, and it must not make
    /// every Rescan fail.
    fn refresh_disk(&self, disk: u32) -> Result<()> {
        let found = match self.disk(disk) {
            Ok(found) => found,
            Err(Error::NotFound(e)) => {
                tracing::debug!("rescan: skipping disk {disk}: {e}");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        match self.refresh(&found) {
            Err(Error::PermissionDenied(e)) => {
                tracing::debug!("rescan: skipping {}: {e}", found.name);
                Ok(())
            }
            Err(e) => {
                tracing::warn!("rescan: {e}");
                Err(e)
            }
            Ok(()) => Ok(()),
        }
    }
}

impl Block {
    /// What SetDiskState refuses before it writes the SCSI state (`now`, not the one asked for).
    fn state_checks(&self, disk: &Disk, now: &str, online: bool) -> Result<()> {
        if !online {
            self.interlock(disk, None, Action::SetDiskOffline)?;
        }
        if now != "running" && now != "offline" {
            return Err(Error::precondition(format!(
                "{} (disk {}) is in SCSI state {now:?}; only a running or offline disk can be set {}",
                disk.name,
                disk.number,
                if online { "online" } else { "offline" }
            )));
        }
        Ok(())
    }

    /// `<sysfs>/class/block/<name>`.
    pub(super) fn block_dir(&self, name: &str) -> PathBuf {
        self.sysfs.join("class/block").join(name)
    }

    /// Classifies one `class/block` entry. Errors are entries that look like disks but whose
    /// attributes cannot be read or make no sense.
    fn entry(&self, name: &str) -> Result<Entry> {
        let dir = self.block_dir(name);
        if dir.join("partition").exists() {
            return Ok(Entry::Skipped("a partition (partitions are volumes)"));
        }
        let Some(bus) = bus_of(name) else {
            return Ok(Entry::Skipped(
                "not a kind of disk served here (sd, vd, xvd, nvme namespaces, loop devices with a backing file)",
            ));
        };
        if read_optional_text(&dir.join("hidden")).as_deref() == Some("1") {
            return Ok(Entry::Skipped("hidden (a path of an NVMe multipath namespace)"));
        }
        if bus == Bus::Loop && !dir.join("loop/backing_file").exists() {
            return Ok(Entry::Skipped("a loop device without a backing file"));
        }
        let dev_file = dir.join("dev");
        let dev = read_text(&dev_file).map_err(|e| Error::io(format!("reading {}", dev_file.display()), e))?;
        let (major, minor) = parse_dev(&dev)
            .ok_or_else(|| Error::internal(format!("{} holds {:?}, not \"major:minor\"", dev_file.display(), dev)))?;
        if self.size_sectors(name)? == 0 {
            return Ok(Entry::Skipped("empty (size 0)"));
        }
        Ok(Entry::Disk(Disk { number: disk_number(major, minor), name: name.to_string(), major, minor }))
    }

    /// sysfs `size` of a block device, in 512-byte units.
    fn size_sectors(&self, name: &str) -> Result<u64> {
        let path = self.block_dir(name).join("size");
        let text = read_text(&path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        text.trim()
            .parse()
            .map_err(|_| Error::internal(format!("{} holds {:?}, not a number of sectors", path.display(), text)))
    }

    /// Every whole disk, in disk-number order.
    pub(crate) fn disks(&self) -> Result<Vec<Disk>> {
        let root = self.sysfs.join("class/block");
        let entries =
            fs::read_dir(&root).map_err(|e| Error::internal(format!("cannot list {}: {e}", root.display())))?;
        let mut disks = Vec::new();
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::warn!("listing {}: {e}", root.display());
                    continue;
                }
            };
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue; // kernel names are ASCII; anything else is no disk of ours
            };
            match self.entry(&name) {
                Ok(Entry::Disk(disk)) => disks.push(disk),
                Ok(Entry::Skipped(_)) => {}
                Err(e) => tracing::warn!("skipping block device {name}: {e}"),
            }
        }
        disks.sort_by_key(|d| d.number);
        Ok(disks)
    }

    /// The whole disk with this number; NotFound naming it otherwise.
    pub(crate) fn disk(&self, number: u32) -> Result<Disk> {
        let (major, minor) = split_disk_number(number);
        let what = format!("disk {number} (device {major}:{minor})");
        // The kernel's own index of device numbers: <sysfs>/dev/block/M:m -> …/<name>.
        let link = self.sysfs.join(format!("dev/block/{major}:{minor}"));
        let name = match fs::read_link(&link) {
            Ok(target) => target.file_name().and_then(|n| n.to_str()).map(str::to_string),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::internal(format!("{what}: reading {}: {e}", link.display()))),
        };
        let Some(name) = name else {
            return Err(Error::not_found(format!("{what} not found: no block device has that number ({NUMBER_HINT})")));
        };
        match self.entry(&name)? {
            Entry::Disk(disk) if disk.number == number => Ok(disk),
            Entry::Disk(disk) => Err(Error::internal(format!(
                "{what}: {} points to {name}, whose number is {}",
                link.display(),
                disk.number
            ))),
            Entry::Skipped(why) => {
                Err(Error::not_found(format!("{what} not found: {major}:{minor} is {name}, {why} ({NUMBER_HINT})")))
            }
        }
    }

    /// The name of the device a disk hangs off (the last component of its `device` link), e.g.
    /// `2:0:1:3` for a SCSI disk, `nvme0`, `virtio1`, `vbd-51712`.
    fn parent_device(&self, disk: &Disk) -> Option<String> {
        let link = self.block_dir(&disk.name).join("device");
        match fs::read_link(&link) {
            Ok(target) => target.file_name().and_then(|n| n.to_str()).map(str::to_string),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!("cannot read {}: {e}", link.display());
                None
            }
        }
    }

    /// Where a disk is attached. Upstream's fields are SCSI's; per bus:
    /// - SCSI (`sd*`): adapter, bus, target, LUN = host, channel, target, LUN of the SCSI device
    ///   the disk belongs to (the `device` link ends in `H:C:T:L`), as `lsblk -o HCTL` shows them;
    /// - NVMe: adapter = N of `nvme<N>n<M>` (the controller, or the subsystem with native
    ///   multipath), LUN = the namespace ID (`nsid`); bus and target empty;
    /// - virtio-blk: adapter = N of the `virtio<N>` device it hangs off; the rest empty;
    /// - Xen: target = the virtual block device number (the `vbd-<N>` it hangs off); the rest empty;
    /// - loop: nothing identifies a place, so everything is empty.
    ///
    /// Whatever cannot be read is left empty (and logged).
    pub(super) fn location(&self, disk: &Disk) -> DiskLocation {
        let mut loc = DiskLocation::default();
        match bus_of(&disk.name) {
            Some(Bus::Scsi) => match self.parent_device(disk).as_deref().map(|d| (d, parse_hctl(d))) {
                Some((_, Some([h, c, t, l]))) => {
                    loc = DiskLocation {
                        adapter: h.to_string(),
                        bus: c.to_string(),
                        target: t.to_string(),
                        lun_id: l.to_string(),
                    }
                }
                Some((other, None)) => {
                    tracing::warn!("{}: SCSI device {other:?} is not named host:channel:target:lun", disk.name)
                }
                None => tracing::warn!("{}: no SCSI device link", disk.name),
            },
            Some(Bus::Nvme) => {
                let head = disk.name.strip_prefix("nvme").unwrap_or_default();
                let instance = head.split(['c', 'n']).next().unwrap_or_default();
                loc.adapter = instance.to_string();
                loc.lun_id = read_optional_text(&self.block_dir(&disk.name).join("nsid")).unwrap_or_default();
            }
            Some(Bus::Virtio) => {
                if let Some(n) =
                    self.parent_device(disk).filter(|d| d.starts_with("virtio")).and_then(|d| trailing_number(&d))
                {
                    loc.adapter = n.to_string();
                }
            }
            Some(Bus::Xen) => {
                if let Some(n) =
                    self.parent_device(disk).filter(|d| d.starts_with("vbd-")).and_then(|d| trailing_number(&d))
                {
                    loc.target = n.to_string();
                }
            }
            Some(Bus::Loop) | None => {}
        }
        loc
    }

    /// A disk's IDs; empty strings where it has none.
    /// - page83: VPD page 0x83 (`device/vpd_pg83`) by upstream's rule (see [`vpd::page83`]);
    ///   without a usable page, the kernel's `wwid` (`device/wwid` for SCSI, `wwid` for NVMe
    ///   namespaces), which prefers a SCSI name, NAA, EUI-64, then T10 designator and writes it
    ///   as `naa.…`, `eui.…`, `t10.…` (so it can differ from what upstream's rule picks);
    /// - serial: VPD page 0x80 (`device/vpd_pg80`), else `device/serial` (NVMe controllers and
    ///   subsystems), else the disk's own `serial` (virtio-blk); trimmed.
    pub(super) fn ids(&self, disk: &Disk) -> DiskIds {
        let dir = self.block_dir(&disk.name);
        if bus_of(&disk.name) == Some(Bus::Loop) {
            return DiskIds::default();
        }
        let page83 = read_optional(&dir.join("device/vpd_pg83"))
            .and_then(|page| vpd::page83(&page))
            .or_else(|| read_optional_text(&dir.join("device/wwid")))
            .or_else(|| read_optional_text(&dir.join("wwid")))
            .unwrap_or_default();
        let serial_number = read_optional(&dir.join("device/vpd_pg80"))
            .and_then(|page| vpd::serial(&page))
            .or_else(|| read_optional_text(&dir.join("device/serial")))
            .or_else(|| read_optional_text(&dir.join("serial")))
            .unwrap_or_default();
        DiskIds { page83, serial_number }
    }

    /// Asks every SCSI host to scan for new devices and every SCSI disk to re-read its capacity;
    /// returns when the kernel has done so (and the sd driver has attached to what it found).
    /// Without SCSI hosts there is nothing to do.
    pub(crate) fn rescan_scsi(&self) -> Result<()> {
        let mut failed = Vec::new();
        let hosts_dir = self.sysfs.join("class/scsi_host");
        let mut hosts: Vec<String> = match fs::read_dir(&hosts_dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.starts_with("host"))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(Error::internal(format!("cannot list {}: {e}", hosts_dir.display()))),
        };
        hosts.sort();
        for host in &hosts {
            // "- - -": every channel, target and LUN. The write returns when the scan is done.
            let scan = hosts_dir.join(host).join("scan");
            match write_attr(&scan, b"- - -") {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::OPNOTSUPP.raw_os_error()) => {
                    tracing::warn!("{host} cannot be scanned from user space: {e}")
                }
                Err(e) => failed.push(format!("{}: {e}", scan.display())),
            }
        }
        if !hosts.is_empty() {
            self.wait_for_sd_probes(SD_PROBE_WAIT);
        }
        for disk in self.disks()?.iter().filter(|d| bus_of(&d.name) == Some(Bus::Scsi)) {
            let rescan = self.block_dir(&disk.name).join("device/rescan");
            if let Err(e) = write_attr(&rescan, b"1") {
                failed.push(format!("{}: {e}", rescan.display()));
            }
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Error::internal(format!("SCSI rescan failed: {}", failed.join("; "))))
        }
    }

    /// Waits (at most `limit`) until every SCSI device of a type the sd driver serves has its
    /// block device: the sd driver probes asynchronously, so a disk found by a scan may appear a
    /// moment after the scan returned. A device still without one at the end is logged.
    fn wait_for_sd_probes(&self, limit: Duration) {
        // SPC peripheral device types sd attaches to: disk, optical memory, RBC, zoned block.
        const SD_TYPES: [&str; 4] = ["0", "7", "14", "20"];
        if !self.sysfs.join("bus/scsi/drivers/sd").exists() {
            return; // sd is not loaded: nothing will attach
        }
        let devices = self.sysfs.join("bus/scsi/devices");
        let pending = || -> Vec<String> {
            let Ok(entries) = fs::read_dir(&devices) else { return Vec::new() };
            entries
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| parse_hctl(name).is_some())
                .filter(|name| {
                    let dir = devices.join(name);
                    let state = read_optional_text(&dir.join("state"));
                    read_optional_text(&dir.join("type")).is_some_and(|t| SD_TYPES.contains(&t.as_str()))
                        && state.as_deref() != Some("deleted")
                        && !dir.join("block").exists()
                })
                .collect()
        };
        let deadline = Instant::now() + limit;
        loop {
            let waiting = pending();
            if waiting.is_empty() {
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!("SCSI devices {} have no block device {limit:?} after the scan", waiting.join(", "));
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The `device/state` file of a SCSI disk; FailedPrecondition for any other disk.
    fn scsi_state_file(&self, disk: &Disk) -> Result<PathBuf> {
        if bus_of(&disk.name) != Some(Bus::Scsi) {
            return Err(Error::precondition(format!(
                "{} (disk {}) is not a SCSI disk; only SCSI disks have an online state on Linux",
                disk.name, disk.number
            )));
        }
        Ok(self.block_dir(&disk.name).join("device/state"))
    }

    fn scsi_state(&self, disk: &Disk) -> Result<String> {
        let path = self.scsi_state_file(disk)?;
        let state = read_text(&path).map_err(|e| Error::io(format!("reading the state of {}", disk.name), e))?;
        Ok(state.trim().to_string())
    }
}

/// One write of `value` to an existing sysfs attribute (never created).
fn write_attr(path: &Path, value: &[u8]) -> io::Result<()> {
    fs::OpenOptions::new().write(true).open(path)?.write_all(value)
}
