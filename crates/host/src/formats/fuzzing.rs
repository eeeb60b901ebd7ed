//! Doors into the format readers for the fuzz targets in `fuzz/` (feature `fuzzing`, never on in
//! the daemon). The parsers stay crate-private; these wrappers only forward, and hand out plain
//! data, so that the targets can check properties without the crate opening its internals.

/// The GPT reader and editor (`gpt_table`).
pub mod gpt {
    use super::super::gpt::{self as gpt_table, BlockIo, Guid, Table};
    use std::io;

    /// A disk the target keeps (sparse, in memory): what `Table` reads and writes.
    pub trait Disk {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
        fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    }

    struct Io<'a, D: ?Sized>(&'a D);

    impl<D: Disk + ?Sized> BlockIo for Io<'_, D> {
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
            self.0.read_at(offset, buf)
        }
        fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
            self.0.write_at(offset, buf)
        }
    }

    /// A used entry, as `Table::entries` reports it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Entry {
        pub number: u32,
        pub type_guid: [u8; 16],
        pub guid: [u8; 16],
        pub first_lba: u64,
        pub last_lba: u64,
    }

    /// The header in use.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Header {
        pub current_lba: u64,
        pub backup_lba: u64,
        pub first_usable: u64,
        pub last_usable: u64,
        pub entries_lba: u64,
        pub num_entries: u32,
        pub entry_size: u32,
        pub disk_guid: [u8; 16],
    }

    pub struct Gpt(Table);

    impl Gpt {
        /// A new table without partitions (`Table::new`): in memory until [`Gpt::write`].
        pub fn new(lbs: u64, total_lbas: u64, disk_guid: [u8; 16]) -> Option<Gpt> {
            Table::new(lbs, total_lbas, Guid(disk_guid)).map(Gpt)
        }
        pub fn read(disk: &impl Disk, lbs: u64, total_lbas: u64) -> io::Result<Option<Gpt>> {
            Ok(Table::read(&Io(disk), lbs, total_lbas)?.map(Gpt))
        }
        pub fn header(&self) -> Header {
            let h = &self.0.header;
            Header {
                current_lba: h.current_lba,
                backup_lba: h.backup_lba,
                first_usable: h.first_usable,
                last_usable: h.last_usable,
                entries_lba: h.entries_lba,
                num_entries: h.num_entries,
                entry_size: h.entry_size,
                disk_guid: h.disk_guid.0,
            }
        }
        pub fn primary_ok(&self) -> bool {
            self.0.primary_ok
        }
        pub fn backup_ok(&self) -> bool {
            self.0.backup_ok
        }
        pub fn healthy(&self) -> bool {
            self.0.healthy()
        }
        pub fn entries(&self) -> Vec<Entry> {
            let e = self.0.entries();
            e.into_iter()
                .map(|e| Entry {
                    number: e.number,
                    type_guid: e.type_guid.0,
                    guid: e.guid.0,
                    first_lba: e.first_lba,
                    last_lba: e.last_lba,
                })
                .collect()
        }
        pub fn last_usable_at_end(&self) -> u64 {
            self.0.last_usable_at_end()
        }
        pub fn room_after(&self, number: u32) -> Option<u64> {
            self.0.room_after(number)
        }
        pub fn free_extents(&self) -> Vec<(u64, u64)> {
            self.0.free_extents()
        }
        pub fn free_slot(&self) -> Option<u32> {
            self.0.free_slot()
        }
        pub fn set_entry(&mut self, number: u32, type_guid: [u8; 16], guid: [u8; 16], first: u64, last: u64) {
            self.0.set_entry(number, Guid(type_guid), Guid(guid), first, last, "fuzz")
        }
        pub fn set_last_lba(&mut self, number: u32, last_lba: u64) {
            self.0.set_last_lba(number, last_lba)
        }
        pub fn write(&mut self, disk: &impl Disk, partitions_before: &[(u64, u64)]) -> io::Result<()> {
            self.0.write(&Io(disk), partitions_before)
        }
    }

    /// LBA 0 of a new table.
    pub fn protective_mbr(total_lbas: u64) -> [u8; 512] {
        gpt_table::protective_mbr(total_lbas)
    }

    /// What LBA 0 holds, by the variant's name.
    pub fn classify_mbr(sector: &[u8]) -> String {
        format!("{:?}", gpt_table::classify_mbr(sector))
    }

    pub fn aligned_extent(first: u64, last: u64, align: u64) -> Option<(u64, u64)> {
        gpt_table::aligned_extent(first, last, align)
    }

    pub fn crc32(data: &[u8]) -> u32 {
        gpt_table::crc32(data)
    }

    /// The text form of a GUID in GPT byte order, and back.
    pub fn guid_text(raw: [u8; 16]) -> String {
        Guid(raw).to_string()
    }
    pub fn guid_parse(text: &str) -> Option<[u8; 16]> {
        Guid::parse(text).map(|g| g.0)
    }
}

/// The superblock probe (`probe`).
pub mod probe {
    use super::super::probe::{self, Sample};
    use std::io::{self, Read, Seek};

    pub const PROBE_LEN: usize = probe::PROBE_LEN;

    pub fn tail_start(size: u64) -> u64 {
        probe::tail_start(size)
    }
    pub fn probe(r: &mut (impl Read + Seek)) -> io::Result<Option<&'static str>> {
        probe::probe(r)
    }
    pub fn identify(head: &[u8]) -> Option<&'static str> {
        probe::identify(head)
    }
    /// `identify_sample` of a device of `size` bytes of which `head` (from 0) and `tail` (from
    /// `tail_start`) were read.
    pub fn identify_sample(size: u64, head: &[u8], tail_start: u64, tail: &[u8]) -> Option<&'static str> {
        probe::identify_sample(&Sample { size, head, tail_start, tail })
    }
    pub fn fs_size(kind: &str, head: &[u8]) -> Option<u64> {
        probe::fs_size(kind, head)
    }
    pub fn ntfs_dirty(r: &mut (impl Read + Seek)) -> io::Result<Option<bool>> {
        probe::ntfs_dirty(r)
    }
    pub fn describe(kind: &str) -> String {
        probe::describe(kind)
    }
}

/// The `/proc/self/mountinfo` parser (`mountinfo`).
pub mod mountinfo {
    use super::super::mountinfo;
    use std::path::{Path, PathBuf};

    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct Mount {
        pub id: u64,
        pub parent: u64,
        pub major: u32,
        pub minor: u32,
        pub root: PathBuf,
        pub mount_point: PathBuf,
        pub fstype: String,
        pub source: PathBuf,
    }

    fn inner(m: &Mount) -> mountinfo::Mount {
        let Mount { id, parent, major, minor, root, mount_point, fstype, source } = m.clone();
        mountinfo::Mount { id, parent, major, minor, root, mount_point, fstype, source }
    }

    pub fn parse(text: &[u8]) -> Result<Vec<Mount>, String> {
        Ok(mountinfo::parse(text)?
            .into_iter()
            .map(|m| {
                let mountinfo::Mount { id, parent, major, minor, root, mount_point, fstype, source } = m;
                Mount { id, parent, major, minor, root, mount_point, fstype, source }
            })
            .collect())
    }

    /// Index of the mount `mountinfo::holding` picks for `path`.
    pub fn holding(mounts: &[Mount], path: &Path) -> Option<usize> {
        let all: Vec<_> = mounts.iter().map(inner).collect();
        let found = mountinfo::holding(&all, path)?;
        all.iter().position(|m| std::ptr::eq(m, found))
    }

    pub fn is_fuse(m: &Mount) -> bool {
        mountinfo::is_fuse(&inner(m))
    }

    pub fn device_source<'a>(source: &'a Path, dev: &Path) -> Option<&'a Path> {
        mountinfo::device_source(source, dev)
    }
}
