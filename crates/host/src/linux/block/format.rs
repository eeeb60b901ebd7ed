//! What a volume holds, and making a filesystem on it: IsVolumeFormatted and FormatVolume.
//!
//! **Two probes.** What a partition holds is decided in one place, `Block::probe_device`: our
//! own probe (`formats/probe.rs`) first, libblkid (`blkid.rs`) only when ours finds nothing; the
//! volume is blank only when both find nothing. Ours is the one whose answer is used: it names
//! what it finds (the type MountVolume mounts and ResizeVolume grows, and the same parsers give
//! the filesystem's size and NTFS's dirty flag), and it is Rust over bytes we read, tested and
//! fuzzed on every OS, answering the same whatever util-linux the host has. But it knows the
//! common signatures only, and mke2fs `-F` and mkntfs check nothing themselves: a signature it
//! does not know would be formatted over. libblkid knows every signature util-linux does, so it
//! has the last word on "blank": when it finds anything, the answer is
//! `probe::OTHER_SIGNATURE` (logged with what libblkid saw), which makes IsVolumeFormatted true
//! and FormatVolume refuse, and which nothing mounts or grows. A libblkid failure is an error,
//! never "blank". Other places point here rather than repeat this.

use super::device::{about, check_unused, fd_path, label, Device};
use super::lookup::HeldVolume;
use super::sys::Reader;
use super::tools;
use super::{Block, Volume};
use crate::formats::probe;
use crate::types::FsType;
use crate::{Error, Result};

impl Block {
    /// What the volume's partition device holds: our probe's blkid-style type name,
    /// `probe::OTHER_SIGNATURE` when only libblkid recognises it, `None` when both find nothing
    /// (see *Two probes* in the module documentation).
    pub fn filesystem_on(&self, v: &Volume) -> Result<Option<&'static str>> {
        self.probe_device(v, &self.open_device(v)?)
    }

    /// [`Self::filesystem_on`] through a checked device: its start and end are read past stale
    /// cache (what the page cache holds of them is dropped, so that a write through the whole
    /// disk, a different cache, can't hide behind stale pages; dirty pages are kept).
    pub(super) fn probe_device(&self, v: &Volume, device: &Device) -> Result<Option<&'static str>> {
        let f = &*device.file;
        let mut reader = reader(v, device)?;
        let size = reader.len();
        let tail = probe::tail_start(size);
        for (start, len) in [(0, probe::PROBE_LEN as u64), (tail, size - tail)] {
            f.drop_cache(start, len);
        }
        if let Some(kind) = probe::probe(&mut reader).map_err(|e| Error::io(format!("reading {}", label(v)), e))? {
            return Ok(Some(kind));
        }
        // Blank to us: libblkid has the last word (*Two probes*, module documentation).
        match f.signature() {
            Ok(None) => Ok(None),
            Ok(Some(found)) => {
                tracing::info!(volume = %v.id, device = %v.node.display(), found, "libblkid finds a signature our probe does not know");
                Ok(Some(probe::OTHER_SIGNATURE))
            }
            Err(e) => Err(Error::internal(format!("probing {}: {e}", label(v)))),
        }
    }

    /// The first [`probe::PROBE_LEN`] bytes of the checked device (fewer if it is smaller).
    pub(super) fn read_head(&self, v: &Volume, device: &Device) -> Result<Vec<u8>> {
        device.file.drop_cache(0, probe::PROBE_LEN as u64);
        probe::read_at(&mut reader(v, device)?, 0, probe::PROBE_LEN)
            .map_err(|e| Error::io(format!("reading {}", label(v)), e))
    }

    /// IsVolumeFormatted on a resolved volume.
    pub(crate) fn is_formatted(&self, v: &HeldVolume) -> Result<bool> {
        // The volumes asked about are mostly formatted, and a filesystem's signature sits at its
        // start (the deepest, btrfs's, at 64 KiB): look there first, and read the whole probe
        // range (start and end of the device) only when the start shows nothing.
        const QUICK: usize = 68 * 1024;
        let device = self.open_device(v)?;
        device.file.drop_cache(0, QUICK as u64);
        let head = probe::read_at(&mut reader(v, &device)?, 0, QUICK)
            .map_err(|e| Error::io(format!("reading {}", label(v)), e))?;
        if probe::identify(&head).is_some() {
            return Ok(true);
        }
        Ok(self.probe_device(v, &device)?.is_some())
    }

    /// What FormatVolume refuses before it runs mkfs; the device to format. With `claim`, the
    /// device is also opened exclusively for a moment ([`check_unused`]), which a dry run must
    /// not do (a concurrent mount or mkfs would meet EBUSY).
    fn format_checks(&self, v: &HeldVolume, claim: bool) -> Result<Device> {
        let device = self.open_device(v)?;
        if let Some(kind) = self.probe_device(v, &device)? {
            return Err(Error::precondition(format!(
                "{} already holds {}; FormatVolume never formats over existing data \
                 (wipe the volume first if that is what you mean)",
                label(v),
                probe::describe(kind)
            )));
        }
        // Nothing may hold the device open exclusively (a mount we can't recognise or can't
        // see, a RAID or device-mapper user); mkfs would fail less clearly, or not at all.
        if claim {
            check_unused(v, &device, "refusing to format it")?;
        }
        Ok(device)
    }

    /// Dry-run of FormatVolume on a resolved volume.
    pub(crate) fn plan_format(&self, v: &HeldVolume) -> Result<String> {
        self.format_checks(v, false)?;
        let argv = tools::mkfs_argv(self.fs_type, &v.node);
        Ok(format!(
            "would format {} with {}: {} (if nothing holds the device open then)",
            label(v),
            self.fs_type.name(),
            tools::show(&argv)
        ))
    }

    /// FormatVolume on a resolved volume.
    pub(crate) fn format(&self, v: &HeldVolume) -> Result<()> {
        let device = self.format_checks(v, true)?;
        let dev_arg = fd_path(v, &device)?;
        let argv = tools::mkfs_argv(self.fs_type, &dev_arg.path());
        tracing::info!(volume = %v.id, node = %v.node.display(), argv = %tools::show(&argv), "formatting");
        self.run_checked(&argv, &[&dev_arg]).map_err(|e| about(v, e))?;
        drop(dev_arg);
        let made = self.probe_device(v, &device)?;
        let expected = match self.fs_type {
            FsType::Ext4 => "ext4",
            other => other.name(),
        };
        if made != Some(expected) {
            return Err(Error::internal(format!(
                "{} succeeded but {} now holds {}",
                tools::show(&argv),
                label(v),
                made.map_or("no filesystem".into(), probe::describe)
            )));
        }
        Ok(())
    }
}

/// The checked device read as a stream, for the probes.
pub(super) fn reader<'a>(v: &Volume, device: &'a Device) -> Result<Reader<'a>> {
    Reader::new(&*device.file).map_err(|e| Error::io(format!("reading {}", label(v)), e.into()))
}
