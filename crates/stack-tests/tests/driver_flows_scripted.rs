//! The Windows CSI drivers' node flows (crate::flows) against the Windows backend on the scripted
//! platform, through the real server and its v1 wire messages on unix sockets.
//!
//! The volume, disk and SMB groups are the Windows backend (`windows::volumes`, `disks`, `smb`)
//! over `windows::script::Script`. Before every call a new script is written from a small model
//! of one Windows node ([`Machine`]: the kubelet's folders, mount points and links, one data
//! disk and its volume, the SMB global mappings), with the answers Win32 and the Storage/SMB WMI
//! providers document for that state; after the call, what the backend did (SetVolumeMountPointW,
//! DeleteVolumeMountPointW, MSFT_Volume.Format, MSFT_Disk.CreatePartition, …) is applied to the
//! model. The filesystem group's Windows implementation is Windows-only (NT handle calls in
//! `windows::platform::fs`); here it is [`ModelFs`], the model's own answers in upstream's
//! semantics, and the real one runs the same flows under Wine (driver_flows_pipes.rs).

#![cfg(unix)]

use csi_proxy_host::memory::MemoryHost;
use csi_proxy_host::paths::Roots;
use csi_proxy_host::types::{DiskIds, DiskLocation, SmbMapping, VolumeStats};
use csi_proxy_host::windows::contain::Containment;
use csi_proxy_host::windows::disks::Disks;
use csi_proxy_host::windows::interlock;
use csi_proxy_host::windows::script::{returned, Answer, Script};
use csi_proxy_host::windows::smb::{ShareLinks, Smb};
use csi_proxy_host::windows::volumes::Volumes;
use csi_proxy_host::windows::wmi::{Namespace, Query, Row};
use csi_proxy_host::windows::{attr, code};
use csi_proxy_host::{DiskHost, Error, FilesystemHost, Hosts, Result, SmbHost, VolumeHost};
use csi_proxy_server::Config;
use csi_proxy_stack_tests::flows::{
    self, azuredisk, ebs, gce_pd, smb, vsphere, BlockVolume, Local, Node, Proxy, Share,
};
#[cfg(target_os = "linux")]
use csi_proxy_stack_tests::procs::{fds_and_threads, sockets_under};
use csi_proxy_stack_tests::TestServer;
use csi_proxy_transport::ConnPolicy;
use csi_proxy_wire::Group;
use csi_proxy_wire::APIS;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tonic::Code;

const ROOT: &str = r"C:\var\lib\kubelet";
const C_VOLUME: &str = r"\\?\Volume{c0c0c0c0-0000-4000-8000-00000000000c}\";
const VOLUME: &str = r"\\?\Volume{5b2c8a1e-3f4d-4e6a-9b7c-0d1e2f3a4b5c}\";
const DISK: u32 = 2;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Where the data partition starts (after the MSR), and what NTFS keeps for itself.
const DATA_OFFSET: u64 = 129 * MIB;
const NTFS_OVERHEAD: u64 = 16 * MIB;
/// The kubelet's SHA-256 of a volume handle, and a pod's UID.
const HASH: &str = "7d5f1c0a3b9e8d2f4a6c1e0b9d8f7a6c5e4d3b2a19f8e7d6c5b4a39281706f5e";
const POD: &str = "2c9b8a7f-6e5d-4c3b-a291-8f7e6d5c4b3a";

const DISK_PATH: &str = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_Disk.ObjectId="{1}\\H\Disk{2}""#;
const MSR_PATH: &str = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_Partition.ObjectId="{1}\\H\Disk{2}\Partition1""#;
const DATA_PATH: &str = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_Partition.ObjectId="{1}\\H\Disk{2}\Partition2""#;
const VOLUME_PATH: &str = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_Volume.ObjectId="{1}\\H\Volume{5b2c}""#;
const GPT_MSR: &str = "{e3c9e316-0b5c-4db8-817d-f92df00215ae}";
const GPT_BASIC_DATA: &str = "{ebd0a0a2-b9e5-4433-87c0-68b6b72699c7}";

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Dir,
    /// A volume mount point (a mounted folder) of this volume.
    Mount(String),
    /// A directory symbolic link to this canonical path (or `\\?\UNC\…`).
    Link(String),
}

/// One Windows node: what the scripts answer from, and what the backend's actions change.
#[derive(Debug)]
struct Machine {
    /// Below [`ROOT`], by canonical path (`C:\var\lib\kubelet\…`).
    tree: BTreeMap<String, Kind>,
    /// Paths the volume group may be asked about, scripted whether they exist or not.
    interest: BTreeSet<String>,
    online: bool,
    partitioned: bool,
    formatted: bool,
    disk_size: u64,
    partition_size: u64,
    used: u64,
    /// SMB global mappings, by share root (`\\srv\share`).
    mapped: BTreeSet<String>,
    /// How the attached disks identify themselves (ListDiskLocations, ListDiskIDs).
    identities: Vec<Identity>,
    /// Server names the node's resolver knows (a driver's net.ResolveIPAddr).
    dns: BTreeMap<String, String>,
}

/// One attached disk as the storage stack describes it.
#[derive(Debug, Clone)]
struct Identity {
    number: u32,
    /// MSFT_Disk.Location's LUN.
    lun: &'static str,
    /// The device-associated page 0x83 identifier: (code set, bytes); `None` for a device that
    /// has no identifiers page (NVMe answers ERROR_NOT_SUPPORTED).
    page83: Option<(u32, Vec<u8>)>,
    /// STORAGE_DEVICE_DESCRIPTOR's serial number, as the device wrote it (padding and all).
    serial: Option<&'static str>,
}

const CODE_SET_BINARY: u32 = 1;
const CODE_SET_ASCII: u32 = 2;

/// The OS disk every node has (disk 0, LUN 0 on Hyper-V's first adapter).
fn os_disk() -> Identity {
    Identity {
        number: 0,
        lun: "0",
        page83: Some((CODE_SET_ASCII, b"MSFT    Virtual Disk    0".to_vec())),
        serial: Some(""),
    }
}

/// STORAGE_DEVICE_NUMBER of a disk.
fn device_number(number: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(7u32.to_le_bytes()); // DeviceType: FILE_DEVICE_DISK
    b.extend(number.to_le_bytes()); // DeviceNumber
    b.extend(u32::MAX.to_le_bytes()); // PartitionNumber: the whole disk
    b
}

/// STORAGE_DEVICE_ID_DESCRIPTOR with one device-associated identifier, padded to 4 bytes.
fn id_descriptor(code_set: u32, id: &[u8]) -> Vec<u8> {
    let padded = (16 + id.len()).div_ceil(4) * 4;
    let mut b = Vec::new();
    b.extend(12u32.to_le_bytes()); // Version
    b.extend((12 + padded as u32).to_le_bytes()); // Size
    b.extend(1u32.to_le_bytes()); // NumberOfIdentifiers
    b.extend(code_set.to_le_bytes()); // CodeSet
    b.extend(3u32.to_le_bytes()); // Type: StorageIdTypeFCPHName (NAA) / any
    b.extend((id.len() as u16).to_le_bytes()); // IdentifierSize
    b.extend(0u16.to_le_bytes()); // NextOffset
    b.extend(0u32.to_le_bytes()); // Association: device
    b.extend(id);
    b.resize(12 + padded, 0);
    b
}

/// STORAGE_DEVICE_DESCRIPTOR with `serial` (NUL-terminated) after the fixed part.
fn device_descriptor(serial: Option<&str>) -> Vec<u8> {
    let at = 40u32;
    let size = at + serial.map_or(0, |s| s.len() as u32 + 1);
    let mut b = Vec::new();
    b.extend(40u32.to_le_bytes()); // Version
    b.extend(size.to_le_bytes()); // Size
    b.extend([0, 0, 0, 1]); // DeviceType, DeviceTypeModifier, RemovableMedia, CommandQueueing
    b.extend([0u8; 12]); // VendorIdOffset, ProductIdOffset, ProductRevisionOffset
    b.extend(serial.map_or(0, |_| at).to_le_bytes()); // SerialNumberOffset
    b.extend(1u32.to_le_bytes()); // BusType
    b.extend([0u8; 8]); // RawPropertiesLength, RawDeviceProperties
    if let Some(s) = serial {
        b.extend(s.as_bytes());
        b.push(0);
    }
    b
}

fn interface(n: u32) -> String {
    format!(r"\\?\scsi#disk&ven_msft&prod_virtual_disk#000{n}#{{53f56307-b6bf-11d0-94f2-00a0c91efb8b}}")
}

/// A request's drive path as the model keys it (drive letter upper case, no trailing `\`);
/// `None` for any other form.
fn canon(path: &str) -> Option<String> {
    let p = path.strip_prefix(r"\\?\").unwrap_or(path);
    let b = p.as_bytes();
    if b.len() < 3 || !b[0].is_ascii_alphabetic() || b[1] != b':' || b[2] != b'\\' {
        return None;
    }
    Some(format!("{}{}", p[..1].to_uppercase(), p[1..].trim_end_matches('\\')))
}

fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('\\').unwrap()
}

fn verbatim(path: &str) -> String {
    format!(r"\\?\{path}")
}

/// `\\srv\share` of a remote path.
fn share_root(remote: &str) -> String {
    remote.trim_start_matches('\\').split('\\').take(2).fold(String::from(r"\"), |acc, c| format!(r"{acc}\{c}"))
}

fn mapping_path(root: &str) -> String {
    format!(r#"\\H\ROOT\Microsoft\Windows\SMB:MSFT_SmbGlobalMapping.RemotePath="{}""#, root.replace('\\', r"\\"))
}

impl Machine {
    fn new() -> Machine {
        Machine {
            tree: BTreeMap::new(),
            interest: BTreeSet::new(),
            // Attached and online (the clouds' images bring new disks online), not laid out.
            online: true,
            partitioned: false,
            formatted: false,
            disk_size: 10 * GIB,
            partition_size: 0,
            used: 0,
            mapped: BTreeSet::new(),
            identities: vec![os_disk()],
            dns: BTreeMap::new(),
        }
    }

    fn inside(path: &str) -> bool {
        path.len() > ROOT.len() && path[..ROOT.len()].eq_ignore_ascii_case(ROOT) && path.as_bytes()[ROOT.len()] == b'\\'
    }

    fn exists(&self, path: &str) -> bool {
        path.eq_ignore_ascii_case(ROOT) || self.tree.contains_key(path)
    }

    /// Directories `path` and its parents (below the root), as `mkdir -p`.
    fn mkdir_all(&mut self, path: &str) {
        let mut p = path.to_owned();
        while Self::inside(&p) {
            self.tree.entry(p.clone()).or_insert(Kind::Dir);
            p = split(&p).0.to_owned();
        }
    }

    /// `path` and its parents below the root are scripted on every call.
    fn watch(&mut self, path: &str) {
        let mut p = canon(path).unwrap();
        while Self::inside(&p) {
            self.interest.insert(p.clone());
            p = split(&p).0.to_owned();
        }
    }

    fn fs_size(&self) -> u64 {
        self.partition_size.saturating_sub(NTFS_OVERHEAD)
    }

    fn supported_size(&self) -> u64 {
        self.disk_size - DATA_OFFSET - MIB
    }

    /// The answers for the next call (`line`, as the flow recorded it).
    fn script(&self, line: &str) -> Script {
        let s = Script::new();
        s.on("system_drive", Answer::Str("C:".into()));
        s.root(ROOT);
        s.held_dir(ROOT);
        // Every folder the call may be about, present or not.
        let paths: BTreeSet<&String> = self.interest.iter().chain(self.tree.keys()).collect();
        for p in paths {
            let (dir, name) = split(p);
            // Mounting and unmounting name the folder as the mount-point calls' pages document,
            // the plain drive path with its trailing backslash; the lookup by target path (as
            // upstream's) asks GetVolumeNameForVolumeMountPointW with the verbatim form that
            // GetVolumePathNameW answered. Both spellings get the same answer.
            let mount_point = format!(r"{p}\");
            let volume_path = format!(r"{}\", verbatim(p));
            let volume_name = |answer: Answer| {
                s.on(format!("volume_name_for_mount_point {mount_point}"), answer.clone());
                s.on(format!("volume_name_for_mount_point {volume_path}"), answer);
            };
            s.on(format!("set_mount_point {mount_point} {VOLUME}"), Answer::Done);
            s.on(format!("delete_mount_point {mount_point}"), Answer::Done);
            match self.tree.get(p.as_str()) {
                None => {
                    s.missing_dir(p);
                    s.no_entry(dir, name);
                }
                Some(Kind::Dir) => {
                    s.held_dir(p);
                    s.entry(dir, name, attr::DIRECTORY);
                    volume_name(Answer::Win32Error(code::ERROR_NOT_A_REPARSE_POINT));
                    s.on(format!("volume_path_name {}", verbatim(p)), Answer::Str(r"C:\".into()));
                }
                // (Not scripted as held directories: the handle's attributes would answer for both.)
                Some(Kind::Mount(v)) => {
                    s.entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
                    volume_name(Answer::Str(v.clone()));
                    s.on(format!("volume_path_name {}", verbatim(p)), Answer::Str(volume_path.clone()));
                }
                Some(Kind::Link(t)) => {
                    s.entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
                    // A symbolic link is no mount point; GetVolumePathNameW resolves it.
                    volume_name(Answer::Win32Error(code::ERROR_NOT_A_REPARSE_POINT));
                    s.link_to(dir, name, t);
                    let at = match self.tree.get(t.as_str()) {
                        Some(Kind::Mount(_)) => format!(r"{}\", verbatim(t)),
                        _ => r"C:\".into(),
                    };
                    s.on(format!("volume_path_name {}", verbatim(p)), Answer::Str(at));
                }
            }
        }
        s.on(r"volume_name_for_mount_point C:\", Answer::Str(C_VOLUME.into()));
        self.script_volumes(&s);
        self.script_disk(&s, line);
        self.script_smb(&s);
        self.script_identities(&s);
        s
    }

    fn script_volumes(&self, s: &Script) {
        let mut all = vec![C_VOLUME.to_owned()];
        on_volume(s, C_VOLUME, 0, MIB, 100 * GIB, 1);
        if self.partitioned {
            all.push(VOLUME.to_owned());
            on_volume(s, VOLUME, DISK, DATA_OFFSET, self.partition_size, 2);
        }
        s.on("volumes", Answer::Strings(all));
        // Where the data volume is mounted (the interlocks of FormatVolume and ResizeVolume), and
        // what the interlocks read of the data disk and of the OS disk, which is the system's.
        let mounted = (self.tree.iter())
            .filter(|(_, k)| **k == Kind::Mount(VOLUME.into()))
            .map(|(p, _)| format!(r"{p}\"))
            .collect();
        s.on(format!("mount_points_of {VOLUME}"), Answer::Strings(mounted));
        interlock::script_disk(s, DISK, interlock::data_disk_row(DISK));
        let os = interlock::data_disk_row(0).with("IsBoot", true).with("IsSystem", true).with("BootFromDisk", true);
        s.on_query(&interlock::disk_query(0), vec![os]);
        let fs = format!("filesystem_name {VOLUME}");
        if self.formatted {
            s.on(fs, Answer::Str("NTFS".into()));
        } else {
            s.on(fs.clone(), Answer::Str("RAW".into())).on(fs, Answer::Str("NTFS".into()));
        }
        s.on(format!("free_space {VOLUME}"), Answer::Space(self.fs_size(), self.fs_size() - self.used));
        s.on(format!("flush {}", VOLUME.trim_end_matches('\\')), Answer::Done);
        let q =
            Query::select(Namespace::Storage, "MSFT_Volume", &["UniqueId", "FileSystemType"]).eq("UniqueId", VOLUME);
        s.on_query(&q, vec![Row::new("MSFT_Volume", VOLUME_PATH).with("UniqueId", VOLUME)]);
        s.on_call(VOLUME_PATH, "Format", returned(0));
        // ResizeVolume: the data partition, what it may grow to, the disk refreshed.
        let q = Query::select(Namespace::Storage, "MSFT_Partition", &["Size"])
            .eq("DiskNumber", DISK)
            .eq("PartitionNumber", 2u32);
        s.on_query(&q, vec![Row::new("MSFT_Partition", DATA_PATH).with("Size", self.partition_size)]);
        let supported = Row::new("__PARAMETERS", "")
            .with("ReturnValue", 0u32)
            .with("SizeMin", self.partition_size)
            .with("SizeMax", self.supported_size());
        s.on_call(DATA_PATH, "GetSupportedSize", supported);
        s.on_call(DATA_PATH, "Resize", returned(0));
        let q = Query::select(Namespace::Storage, "MSFT_Disk", &["Number"]).eq("Number", DISK);
        s.on_query(&q, vec![Row::new("MSFT_Disk", DISK_PATH).with("Number", DISK)]);
        s.on_call(DISK_PATH, "Refresh", returned(0));
    }

    fn script_disk(&self, s: &Script, line: &str) {
        let q =
            Query::select(Namespace::Storage, "MSFT_Disk", &["Number", "PartitionStyle", "IsOffline", "IsReadOnly"])
                .eq("Number", DISK);
        let row = Row::new("MSFT_Disk", DISK_PATH)
            .with("Number", DISK)
            .with("PartitionStyle", 2u16)
            .with("IsOffline", !self.online)
            .with("IsReadOnly", false);
        s.on_query(&q, vec![row]);
        let q = Query::select(
            Namespace::Storage,
            "MSFT_Partition",
            &["PartitionNumber", "GptType", "MbrType", "Size", "Offset"],
        )
        .eq("DiskNumber", DISK);
        let msr = Row::new("MSFT_Partition", MSR_PATH)
            .with("PartitionNumber", 1u32)
            .with("GptType", GPT_MSR)
            .with("Size", 128 * MIB)
            .with("Offset", MIB);
        let data = Row::new("MSFT_Partition", DATA_PATH)
            .with("PartitionNumber", 2u32)
            .with("GptType", GPT_BASIC_DATA)
            .with("Size", self.supported_size())
            .with("Offset", DATA_OFFSET);
        if !self.partitioned {
            s.on_query(&q, vec![msr.clone()]);
        }
        s.on_query(&q, vec![msr, data]);
        s.on_call(DISK_PATH, "CreatePartition", returned(0));
        s.on_call(DATA_PATH, "Online", returned(0));
        s.on_call("MSFT_StorageSetting", "UpdateHostStorageCache", returned(0));
        // IOCTL_DISK_GET_DISK_ATTRIBUTES before and, for SetDiskState, after the change.
        let drive = format!(r"\\.\PhysicalDrive{DISK}");
        let attributes = |online: bool| {
            let mut b = vec![0u8; 16];
            b[0] = 16; // Version: sizeof(GET_DISK_ATTRIBUTES)
            b[8] = u8::from(!online); // DISK_ATTRIBUTE_OFFLINE
            Answer::Bytes(b)
        };
        s.on(format!("ioctl {drive} 0x700f0"), attributes(self.online));
        if line.starts_with("disk/v1.SetDiskState") || line.starts_with("disk/v1beta2.SetAttachState") {
            s.on(format!("ioctl {drive} 0x700f0"), attributes(line.ends_with(" online")));
        }
        s.on(format!("ioctl {drive} 0x7c0f4 w"), Answer::Bytes(Vec::new()));
        // DISK_GEOMETRY_EX: the geometry (BytesPerSector at 20), then DiskSize.
        let mut geometry = vec![0u8; 32];
        geometry[20..24].copy_from_slice(&512u32.to_le_bytes());
        geometry[24..32].copy_from_slice(&self.disk_size.to_le_bytes());
        s.on(format!("ioctl {drive} 0x700a0"), Answer::Bytes(geometry));
        // DRIVE_LAYOUT_INFORMATION_EX: GPT, the usable area of the table as written for the
        // disk's size, the MSR and (once made) the data partition.
        let mut layout = Vec::new();
        layout.extend(1u32.to_le_bytes()); // PartitionStyle: GPT
        layout.extend((1 + u32::from(self.partitioned)).to_le_bytes()); // PartitionCount
        layout.extend([7u8; 16]); // DiskId
        layout.extend((34 * 512u64).to_le_bytes()); // StartingUsableOffset
        layout.extend((self.disk_size - 34 * 512 - 33 * 512).to_le_bytes()); // UsableLength
        layout.extend(128u32.to_le_bytes()); // MaxPartitionCount
        layout.extend([0u8; 4]);
        layout.extend(partition_entry(MIB, 128 * MIB, 1, GPT_MSR_BYTES));
        if self.partitioned {
            layout.extend(partition_entry(DATA_OFFSET, self.partition_size, 2, GPT_BASIC_DATA_BYTES));
        }
        s.on(format!("ioctl {drive} 0x70050"), Answer::Bytes(layout));
    }

    /// ListDiskLocations (MSFT_Disk.Location) and ListDiskIDs (the disk interfaces' IOCTLs).
    fn script_identities(&self, s: &Script) {
        let q = Query::select(Namespace::Storage, "MSFT_Disk", &["Number", "Location"]);
        let rows = (self.identities.iter())
            .map(|d| {
                Row::new("MSFT_Disk", format!("MSFT_Disk{}", d.number))
                    .with("Number", d.number)
                    .with("Location", format!("Integrated : Adapter 0 : Port 0 : Target 0 : LUN {}", d.lun))
            })
            .collect();
        s.on_query(&q, rows);
        s.on("disk_interfaces", Answer::Strings((0..self.identities.len() as u32).map(interface).collect()));
        for (i, d) in self.identities.iter().enumerate() {
            let iface = interface(i as u32);
            s.on(format!("ioctl {iface} 0x2d1080"), Answer::Bytes(device_number(d.number)));
            let ids = match &d.page83 {
                Some((code_set, id)) => Answer::Bytes(id_descriptor(*code_set, id)),
                None => Answer::Win32Error(code::ERROR_NOT_SUPPORTED),
            };
            s.on(format!("ioctl {iface} 0x2d1400"), ids);
            s.on(format!("ioctl {iface} 0x2d1400"), Answer::Bytes(device_descriptor(d.serial)));
        }
    }

    fn script_smb(&self, s: &Script) {
        let resolved = self.dns.values().map(|ip| format!(r"\\{ip}\share"));
        let roots: Vec<String> = [r"\\fileserver\share", r"\\acct.file.core.windows.net\share"]
            .map(String::from)
            .into_iter()
            .chain(resolved)
            .collect();
        for root in roots.iter().map(String::as_str) {
            let q = Query::select(Namespace::Smb, "MSFT_SmbGlobalMapping", &["RemotePath", "Status", "LocalPath"])
                .eq("RemotePath", root);
            let rows = if self.mapped.contains(root) {
                vec![Row::new("MSFT_SmbGlobalMapping", mapping_path(root))
                    .with("RemotePath", root)
                    .with("Status", 0u32)]
            } else {
                Vec::new()
            };
            s.on_query(&q, rows);
            s.on(format!(r"attributes {root}\"), Answer::Attributes(Some(attr::DIRECTORY)));
            s.on_call(&mapping_path(root), "Remove", returned(0));
        }
        s.on_call("MSFT_SmbGlobalMapping", "Create", returned(0));
    }

    /// What the backend did during the call `line` (its platform calls in `log`).
    fn apply(&mut self, line: &str, log: &[String]) {
        for l in log {
            if let Some(rest) = l.strip_prefix("set_mount_point ") {
                let (dir, volume) = rest.rsplit_once(' ').unwrap();
                self.tree.insert(canon(dir).unwrap(), Kind::Mount(volume.to_owned()));
            } else if let Some(dir) = l.strip_prefix("delete_mount_point ") {
                self.tree.insert(canon(dir).unwrap(), Kind::Dir);
            } else if l.starts_with(&format!("call {VOLUME_PATH} Format")) {
                self.formatted = true;
            } else if l.starts_with(&format!("call {DISK_PATH} CreatePartition")) {
                self.partitioned = true;
                self.partition_size = self.supported_size();
            } else if l.starts_with(&format!("call {DATA_PATH} Resize")) {
                self.partition_size = self.supported_size();
            } else if l.starts_with(r"ioctl \\.\PhysicalDrive2 0x7c0f4") {
                self.online = line.ends_with(" online");
            } else if l.starts_with("call MSFT_SmbGlobalMapping Create") {
                let remote = line.split(' ').nth(1).unwrap();
                self.mapped.insert(share_root(remote));
            } else if let Some(rest) = l.strip_prefix("call ") {
                if let Some(root) =
                    self.mapped.iter().find(|r| rest.starts_with(&format!("{} Remove", mapping_path(r))))
                {
                    let root = root.clone();
                    self.mapped.remove(&root);
                }
            }
        }
    }
}

/// VOLUME_DISK_EXTENTS (one extent) and PARTITION_INFORMATION_EX (GPT) of a volume.
fn on_volume(s: &Script, id: &str, disk: u32, offset: u64, length: u64, number: u32) {
    let device = id.trim_end_matches('\\');
    let mut extents = Vec::new();
    extents.extend(1u32.to_le_bytes()); // NumberOfDiskExtents
    extents.extend([0; 4]);
    extents.extend(disk.to_le_bytes()); // DiskNumber
    extents.extend([0; 4]);
    extents.extend(offset.to_le_bytes()); // StartingOffset
    extents.extend(length.to_le_bytes()); // ExtentLength
    s.on(format!("ioctl {device} 0x560000"), Answer::Bytes(extents));
    s.on(
        format!("ioctl {device} 0x70048"),
        Answer::Bytes(partition_entry(offset, length, number, GPT_BASIC_DATA_BYTES)),
    );
}

/// The GPT types' GUIDs as stored (the first three fields little-endian).
const GPT_BASIC_DATA_BYTES: [u8; 16] =
    [0xa2, 0xa0, 0xd0, 0xeb, 0xe5, 0xb9, 0x33, 0x44, 0x87, 0xc0, 0x68, 0xb6, 0xb7, 0x26, 0x99, 0xc7];
const GPT_MSR_BYTES: [u8; 16] =
    [0x16, 0xe3, 0xc9, 0xe3, 0x5c, 0x0b, 0xb8, 0x4d, 0x81, 0x7d, 0xf9, 0x2d, 0xf0, 0x02, 0x15, 0xae];

/// PARTITION_INFORMATION_EX (GPT), 144 bytes.
fn partition_entry(offset: u64, length: u64, number: u32, kind: [u8; 16]) -> Vec<u8> {
    let mut info = Vec::new();
    info.extend(1u32.to_le_bytes()); // PartitionStyle: GPT
    info.extend([0; 4]);
    info.extend(offset.to_le_bytes()); // StartingOffset
    info.extend(length.to_le_bytes()); // PartitionLength
    info.extend(number.to_le_bytes()); // PartitionNumber
    info.extend([0; 4]); // RewritePartition, IsServicePartition
    info.extend(kind); // PartitionType
    info.extend([9; 16]); // PartitionId
    info.extend(0u64.to_le_bytes()); // Attributes
    info.extend([0; 72]); // Name
    info
}

/// The filesystem group in upstream's semantics over the model: drive paths only (upstream's
/// filesystem group refuses `\var\…`; the drivers add `c:` for it), links counted as links.
struct ModelFs(Arc<Mutex<Machine>>);

fn drive_path(path: &str) -> Result<String> {
    let p = canon(path).ok_or_else(|| Error::invalid(format!("path {path} has no drive; expected a drive path")))?;
    if !Machine::inside(&p) {
        return Err(Error::denied(format!("path {path} is not within the working directories [{ROOT}]")));
    }
    Ok(p)
}

impl FilesystemHost for ModelFs {
    fn path_exists(&self, path: &str) -> Result<bool> {
        let p = drive_path(path)?;
        Ok(self.0.lock().unwrap().exists(&p))
    }
    fn mkdir(&self, path: &str) -> Result<()> {
        let p = drive_path(path)?;
        self.0.lock().unwrap().mkdir_all(&p);
        Ok(())
    }
    /// A mounted folder goes as RemoveDirectoryW removes one: the mount point, then the folder.
    fn rmdir(&self, path: &str, force: bool) -> Result<()> {
        let p = drive_path(path)?;
        let mut m = self.0.lock().unwrap();
        if !m.tree.contains_key(&p) {
            return if force { Ok(()) } else { Err(Error::not_found(format!("{path} does not exist"))) };
        }
        let below = format!(r"{p}\");
        let kids: Vec<String> = m.tree.keys().filter(|k| k.starts_with(&below)).cloned().collect();
        if !kids.is_empty() && !force {
            return Err(Error::precondition(format!("{path} is not empty")));
        }
        for k in kids {
            m.tree.remove(&k);
        }
        m.tree.remove(&p);
        Ok(())
    }
    fn rmdir_contents(&self, _path: &str) -> Result<()> {
        Err(Error::internal("no driver flow empties a folder"))
    }
    fn create_symlink(&self, destination: &str, link: &str) -> Result<()> {
        let (d, l) = (drive_path(destination)?, drive_path(link)?);
        let mut m = self.0.lock().unwrap();
        if m.exists(&l) {
            return Err(Error::exists(format!("{link} already exists")));
        }
        if !m.exists(split(&l).0) {
            return Err(Error::not_found(format!("the parent of {link} does not exist")));
        }
        m.tree.insert(l, Kind::Link(d));
        Ok(())
    }
    fn is_symlink(&self, path: &str) -> Result<bool> {
        let p = drive_path(path)?;
        match self.0.lock().unwrap().tree.get(&p) {
            None => Err(Error::not_found(format!("{path} does not exist"))),
            Some(Kind::Dir) => Ok(false),
            Some(_) => Ok(true),
        }
    }
}

/// The SMB group's share links on the model (the real ones are the filesystem group's).
struct ModelLinks(Arc<Mutex<Machine>>);

impl ShareLinks for ModelLinks {
    fn check(&self, local: &str, target: &str) -> Result<bool> {
        let p = drive_path(local)?;
        match self.0.lock().unwrap().tree.get(&p) {
            None => Ok(false),
            Some(Kind::Link(t)) if t == target => Ok(true),
            Some(_) => Err(Error::exists(format!("{local} already exists"))),
        }
    }
    fn link(&self, local: &str, target: &str) -> Result<()> {
        let p = drive_path(local)?;
        self.0.lock().unwrap().tree.insert(p, Kind::Link(target.to_owned()));
        Ok(())
    }
}

/// What the drivers do themselves, on the model: their containers see the host's C: (a path
/// without a drive is on C:, their current drive); os.Readlink turns `\??\UNC\` into `\\`.
struct ModelLocal(Arc<Mutex<Machine>>);

impl Local for ModelLocal {
    fn mkdir_all(&self, path: &str) {
        let p = canon(path).or_else(|| canon(&format!("C:{path}"))).unwrap();
        self.0.lock().unwrap().mkdir_all(&p);
    }
    fn readlink(&self, path: &str) -> Option<String> {
        let p = canon(path).or_else(|| canon(&format!("C:{path}"))).unwrap();
        match self.0.lock().unwrap().tree.get(&p) {
            Some(Kind::Link(t)) => Some(t.strip_prefix(r"\\?\UNC\").map_or(t.clone(), |unc| format!(r"\\{unc}"))),
            _ => None,
        }
    }
    /// A link to a share that is no longer mapped, or to a folder that is gone, can't be read;
    /// nor can the volume of a disk that went offline.
    fn read_dir(&self, path: &str) -> std::result::Result<(), String> {
        let mut p = canon(path).or_else(|| canon(&format!("C:{path}"))).unwrap();
        let m = self.0.lock().unwrap();
        // Links are followed, as opening the folder does (a pod's link to a staged share link).
        for _ in 0..8 {
            match m.tree.get(&p) {
                None => return Err("The system cannot find the file specified.".into()),
                Some(Kind::Dir) => return Ok(()),
                Some(Kind::Mount(_)) if m.online => return Ok(()),
                Some(Kind::Mount(_)) => return Err("The device is not ready.".into()),
                Some(Kind::Link(t)) => match t.strip_prefix(r"\\?\UNC\") {
                    Some(unc) if m.mapped.contains(&share_root(&format!(r"\\{unc}"))) => return Ok(()),
                    Some(_) => return Err("The network path was not found.".into()),
                    None if m.tree.contains_key(t.as_str()) => p = t.clone(),
                    None => return Err("The system cannot find the path specified.".into()),
                },
            }
        }
        Err("The name of the file cannot be resolved by the system.".into())
    }
    fn remove(&self, path: &str) -> std::result::Result<(), String> {
        let p = canon(path).or_else(|| canon(&format!("C:{path}"))).unwrap();
        let mut m = self.0.lock().unwrap();
        let below = format!(r"{p}\");
        if m.tree.keys().any(|k| k.starts_with(&below)) {
            return Err("The directory is not empty.".into());
        }
        m.tree.remove(&p).map(drop).ok_or_else(|| "The system cannot find the file specified.".into())
    }
    fn resolve_ipv4(&self, host: &str) -> Option<String> {
        self.0.lock().unwrap().dns.get(host).cloned()
    }
}

/// The Windows groups of the current call, swapped in before each call.
struct Current {
    volume: Arc<dyn VolumeHost>,
    disk: Arc<dyn DiskHost>,
    smb: Arc<dyn SmbHost>,
}

struct Swap(Mutex<Current>);

impl Swap {
    fn volume(&self) -> Arc<dyn VolumeHost> {
        self.0.lock().unwrap().volume.clone()
    }
    fn disk(&self) -> Arc<dyn DiskHost> {
        self.0.lock().unwrap().disk.clone()
    }
    fn smb(&self) -> Arc<dyn SmbHost> {
        self.0.lock().unwrap().smb.clone()
    }
}

impl VolumeHost for Swap {
    fn list_volumes_on_disk(&self, disk: u32, partition: u32) -> Result<Vec<String>> {
        self.volume().list_volumes_on_disk(disk, partition)
    }
    fn mount_volume(&self, id: &str, target: &str) -> Result<()> {
        self.volume().mount_volume(id, target)
    }
    fn unmount_volume(&self, id: &str, target: &str) -> Result<()> {
        self.volume().unmount_volume(id, target)
    }
    fn is_volume_formatted(&self, id: &str) -> Result<bool> {
        self.volume().is_volume_formatted(id)
    }
    fn format_volume(&self, id: &str) -> Result<()> {
        self.volume().format_volume(id)
    }
    fn resize_volume(&self, id: &str, size: u64) -> Result<()> {
        self.volume().resize_volume(id, size)
    }
    fn get_volume_stats(&self, id: &str) -> Result<VolumeStats> {
        self.volume().get_volume_stats(id)
    }
    fn get_disk_number_from_volume_id(&self, id: &str) -> Result<u32> {
        self.volume().get_disk_number_from_volume_id(id)
    }
    fn get_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        self.volume().get_volume_id_from_target_path(target)
    }
    fn get_closest_volume_id_from_target_path(&self, target: &str) -> Result<String> {
        self.volume().get_closest_volume_id_from_target_path(target)
    }
    fn write_volume_cache(&self, id: &str) -> Result<()> {
        self.volume().write_volume_cache(id)
    }
}

impl DiskHost for Swap {
    fn list_disk_locations(&self) -> Result<BTreeMap<u32, DiskLocation>> {
        self.disk().list_disk_locations()
    }
    fn partition_disk(&self, disk: u32) -> Result<()> {
        self.disk().partition_disk(disk)
    }
    fn rescan(&self) -> Result<()> {
        self.disk().rescan()
    }
    fn list_disk_ids(&self) -> Result<BTreeMap<u32, DiskIds>> {
        self.disk().list_disk_ids()
    }
    fn get_disk_stats(&self, disk: u32) -> Result<u64> {
        self.disk().get_disk_stats(disk)
    }
    fn set_disk_state(&self, disk: u32, online: bool) -> Result<()> {
        self.disk().set_disk_state(disk, online)
    }
    fn get_disk_state(&self, disk: u32) -> Result<bool> {
        self.disk().get_disk_state(disk)
    }
}

impl SmbHost for Swap {
    fn new_smb_global_mapping(&self, mapping: &SmbMapping) -> Result<()> {
        self.smb().new_smb_global_mapping(mapping)
    }
    fn remove_smb_global_mapping(&self, remote: &str) -> Result<()> {
        self.smb().remove_smb_global_mapping(remote)
    }
}

/// The server over the scripted Windows groups, the model behind them and the script of the
/// call in flight.
struct Win {
    machine: Arc<Mutex<Machine>>,
    /// The current call's line and script.
    call: Arc<Mutex<(String, Arc<Script>)>>,
    /// Every platform call the backend made that no answer was written for.
    unscripted: Arc<Mutex<Vec<String>>>,
    swap: Arc<Swap>,
    server: TestServer,
    node: Node,
}

/// The Windows groups over `script`, confined to the kubelet's directory.
fn windows_groups(script: &Arc<Script>, machine: &Arc<Mutex<Machine>>) -> Current {
    let roots = Roots::new(vec![ROOT.into()]);
    Current {
        volume: Arc::new(Volumes::new(script.clone(), script.clone(), Containment::new(script.clone(), roots))),
        disk: Arc::new(Disks::new(script.clone(), script.clone())),
        smb: Arc::new(Smb::new(script.clone(), script.clone(), Arc::new(ModelLinks(machine.clone())))),
    }
}

impl Win {
    async fn start() -> Win {
        let machine = Arc::new(Mutex::new(Machine::new()));
        let script = Arc::new(Script::new());
        let swap = Arc::new(Swap(Mutex::new(windows_groups(&script, &machine))));
        let memory = Arc::new(MemoryHost::sample());
        let mut hosts = Hosts::from_one(memory.clone());
        hosts.volume = swap.clone();
        hosts.disk = swap.clone();
        hosts.smb = swap.clone();
        hosts.filesystem = Arc::new(ModelFs(machine.clone()));
        // Credentials travel as given; the server's privacy setting is not what is tested here.
        let config = Config { require_privacy: false, ..Config::default() };
        let server = TestServer::start_apis(APIS, memory, hosts, config, ConnPolicy::default()).await;
        let call = Arc::new(Mutex::new((String::new(), script)));
        let unscripted = Arc::new(Mutex::new(Vec::new()));
        Win { machine, call, unscripted, swap, server, node: Node::windows(ROOT) }
    }

    /// A client whose every call first settles the previous call on the model and scripts the
    /// next one from it.
    async fn proxy(&self) -> Proxy {
        let server = &self.server;
        let mut p = Proxy::connect(|g, v| server.channel(g, v)).await;
        let (machine, call, unscripted) = (self.machine.clone(), self.call.clone(), self.unscripted.clone());
        let swap = self.swap.clone();
        p.before_call = Some(Box::new(move |line: &str| {
            let mut m = machine.lock().unwrap();
            let mut c = call.lock().unwrap();
            settle(&mut m, &c, &unscripted);
            let script = Arc::new(m.script(line));
            *swap.0.lock().unwrap() = windows_groups(&script, &machine);
            *c = (line.to_owned(), script);
        }));
        p
    }

    /// [`Win::proxy`] with the fallback versions' clients too.
    async fn legacy_proxy(&self) -> Proxy {
        let mut p = self.proxy().await;
        p.connect_legacy(|g, v| self.server.channel(g, v)).await;
        p
    }

    /// Applies the last call's effects to the model.
    fn settle(&self) {
        let mut m = self.machine.lock().unwrap();
        let c = self.call.lock().unwrap();
        settle(&mut m, &c, &self.unscripted);
    }

    fn machine(&self) -> std::sync::MutexGuard<'_, Machine> {
        self.settle();
        self.machine.lock().unwrap()
    }

    /// A block volume of `driver`, its kubelet folders there (the staging path's parent, with
    /// vol_data.json, and the pod's volume folder).
    fn block_volume(&self, driver: &str, pv: &str) -> BlockVolume {
        let v =
            BlockVolume { disk: DISK, staging: self.node.staging(driver, HASH), publish: self.node.publish(POD, pv) };
        let mut m = self.machine.lock().unwrap();
        m.watch(&self.node.n(&v.staging));
        m.watch(&v.publish);
        // The kubelet makes the staging folder (csi_attacher's MountDevice) and the pod's volume
        // folder (csi_mounter's SetUpAt; older kubelets made the target itself, as here).
        m.mkdir_all(&canon(&self.node.n(&v.staging)).unwrap());
        m.mkdir_all(&canon(&v.publish).unwrap());
        v
    }

    fn share(&self, driver: &str, source: &str, username: &str) -> Share {
        let v = self.block_volume(driver, "pv-share");
        Share {
            source: source.into(),
            username: username.into(),
            password: "Quartz-Heron-4471".into(),
            staging: v.staging,
            publish: v.publish,
        }
    }

    /// Where the kubelet's path `path` is in the model.
    fn at(&self, path: &str) -> Option<Kind> {
        let p = canon(&self.node.n(path)).unwrap();
        self.machine().tree.get(&p).cloned()
    }

    /// Fails with the flow's outcome, the backend's last platform calls and what was unscripted.
    #[track_caller]
    fn ok<T: std::fmt::Debug>(&self, what: &str, r: flows::Outcome<T>) -> T {
        match r {
            Ok(v) => v,
            Err(f) => {
                let log = self.call.lock().unwrap().1.log();
                panic!(
                    "{what} failed as the driver would report it: {f}\nlast call's platform log: {log:#?}\n\
                     unscripted: {:#?}\nthe node: {:#?}",
                    self.unscripted.lock().unwrap(),
                    self.machine.lock().unwrap()
                )
            }
        }
    }
}

fn settle(m: &mut Machine, call: &(String, Arc<Script>), unscripted: &Mutex<Vec<String>>) {
    let log = call.1.log();
    unscripted.lock().unwrap().extend(log.iter().filter(|l| l.starts_with("UNSCRIPTED ")).cloned());
    m.apply(&call.0, &log);
}

fn assert_no_warnings(p: &Proxy) {
    assert!(p.warnings.is_empty(), "the driver logged: {:#?}\ncalls: {:#?}", p.warnings, p.calls);
}

/// azuredisk-csi-driver v1.31 in csi-proxy mode (pkg/mounter/safe_mounter_windows.go,
/// pkg/azuredisk/azure_common_windows.go, pkg/azuredisk/nodeserver.go): stage, publish, stats,
/// expand, unpublish, unstage. Its unstage and stats look the volume up by the staging and
/// publish paths as the kubelet sent them (the staging path without a drive).
#[tokio::test]
async fn azuredisk_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("disk.csi.azure.com", "pvc-azuredisk");

    w.ok("NodeStageVolume", azuredisk::stage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert!(w.machine().formatted);
    // Staged again (a kubelet retry): nothing is formatted or mounted twice.
    let before = p.calls.len();
    w.ok("NodeStageVolume again", azuredisk::stage(&mut p, &w.node, &v).await);
    assert!(
        p.calls[before..].iter().all(|c| !c.contains("Format") && !c.contains("MountVolume")),
        "{:#?}",
        &p.calls[before..]
    );

    w.ok("NodePublishVolume", azuredisk::publish(&mut p, &w.node, &v).await);
    let staged = canon(&w.node.n(&v.staging)).unwrap();
    assert_eq!(w.at(&v.publish), Some(Kind::Link(staged)));

    let (total, used) = w.ok("NodeGetVolumeStats", azuredisk::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());
    assert_eq!(used, 0);

    w.machine().disk_size = 20 * GIB;
    let capacity = w.ok("NodeExpandVolume", azuredisk::expand(&mut p, &w.node, &v, 19 * GIB as i64).await);
    assert_eq!(capacity as u64, 20 * GIB - DATA_OFFSET - MIB - NTFS_OVERHEAD);

    w.ok("NodeUnpublishVolume", azuredisk::unpublish(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.publish), None);
    w.ok("NodeUnstageVolume", azuredisk::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    // The cache was flushed before the folder went: GetVolumeIDFromTargetPath answered for the
    // kubelet's drive-less path.
    assert_eq!(p.called("volume/v1.WriteVolumeCache"), [format!("volume/v1.WriteVolumeCache {VOLUME}")]);
    assert_no_warnings(&p);
}

/// gcp-compute-persistent-disk-csi-driver (pkg/mount-manager/safe-mounter-v1_windows.go,
/// pkg/resizefs/resizefs_windows.go, pkg/mount-manager/statter_windows.go,
/// pkg/gce-pd-csi-driver/node.go): MountVolume and the resize's GetVolumeIDFromTargetPath get the
/// staging path without a drive.
#[tokio::test]
async fn gce_pd_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("pd.csi.storage.gke.io", "pvc-gce");

    w.ok("NodeStageVolume", gce_pd::stage(&mut p, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert!(w.machine().online);
    let mounted = format!("volume/v1.MountVolume {VOLUME} {}", v.staging);
    assert_eq!(p.called("volume/v1.MountVolume"), [mounted.as_str()]);
    assert_eq!(p.called("volume/v1.ResizeVolume"), [format!("volume/v1.ResizeVolume {VOLUME} 0")]);

    w.ok("NodePublishVolume", gce_pd::publish(&mut p, &w.node, &ModelLocal(w.machine.clone()), &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    let (total, _) = w.ok("NodeGetVolumeStats", gce_pd::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());

    w.machine().disk_size = 20 * GIB;
    let size = w.ok("NodeExpandVolume", gce_pd::expand(&mut p, &v, 20 * GIB as i64).await);
    assert_eq!(size as u64, 20 * GIB);
    assert_eq!(w.machine().partition_size, 20 * GIB - DATA_OFFSET - MIB);

    w.ok("NodeUnpublishVolume", gce_pd::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", gce_pd::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online, "the disk is taken offline");
    assert_no_warnings(&p);
}

/// aws-ebs-csi-driver (pkg/mounter/mount_windows_proxyV1.go, pkg/mounter/mount_windows.go,
/// pkg/driver/node.go): NodeStageVolume asks GetVolumeIDFromTargetPath about the fresh staging
/// folder and goes on only when the error text matches its pattern; NodeUnstageVolume of a
/// volume that is gone must find the same words.
#[tokio::test]
async fn ebs_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("ebs.csi.aws.com", "pvc-ebs");

    w.ok("NodeStageVolume", ebs::stage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    // Staged again: the mounted disk is recognised, nothing else is done.
    let before = p.calls.len();
    w.ok("NodeStageVolume again", ebs::stage(&mut p, &w.node, &v).await);
    assert!(!p.calls[before..].iter().any(|c| c.contains("PartitionDisk")), "{:#?}", &p.calls[before..]);

    w.ok("NodePublishVolume", ebs::publish(&mut p, &w.node, &v).await);
    w.ok("NodeGetVolumeStats", ebs::stats_exists(&mut p, &w.node, &v).await);
    w.machine().disk_size = 20 * GIB;
    let size = w.ok("NodeExpandVolume", ebs::expand(&mut p, &w.node, &v).await);
    assert_eq!(size as u64, 20 * GIB);

    w.ok("NodeUnpublishVolume", ebs::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", ebs::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online);
    // Unstaged again (a retry): the folder is gone, which must read as "not mounted".
    let before = p.calls.len();
    w.ok("NodeUnstageVolume again", ebs::unstage(&mut p, &w.node, &v).await);
    assert_eq!(p.calls.len(), before + 1, "{:#?}", &p.calls[before..]);
    assert_no_warnings(&p);
}

/// vsphere-csi-driver v3.4 (pkg/csi/service/mounter/mounter_windows.go,
/// pkg/csi/service/osutils/windows_os_utils.go, pkg/csi/service/node.go): NodeGetVolumeStats
/// passes the publish path as the kubelet sent it.
#[tokio::test]
async fn vsphere_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("csi.vsphere.vmware.com", "pvc-vsphere");

    w.ok("NodeStageVolume", vsphere::stage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    w.ok("NodePublishVolume", vsphere::publish(&mut p, &w.node, &v).await);
    let (total, _) = w.ok("NodeGetVolumeStats", vsphere::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());
    w.machine().disk_size = 20 * GIB;
    w.ok("NodeExpandVolume", vsphere::expand(&mut p, &w.node, &v, 20 * GIB as i64).await);
    // The driver compares the request with the disk's size (GetDiskStats), which the cloud
    // already grew: within 1 MiB, it resizes nothing.
    assert!(p.called("volume/v1.ResizeVolume").is_empty(), "{:#?}", p.calls);
    assert_eq!(p.called("disk/v1.GetDiskStats"), ["disk/v1.GetDiskStats 2"]);
    w.ok("NodeUnpublishVolume", vsphere::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", vsphere::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online);
    assert_no_warnings(&p);
}

/// csi-driver-smb (pkg/mounter/safe_mounter_windows.go, pkg/smb/smb_common_windows.go,
/// pkg/smb/nodeserver.go): the global mapping's local path is the staging path with `c:`.
#[tokio::test]
async fn smb_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("smb.csi.k8s.io", "//fileserver/share/dir/", r"CONTOSO\kube");

    w.ok("NodeStageVolume", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(w.machine().mapped.contains(r"\\fileserver\share"));
    assert_eq!(w.at(&s.staging), Some(Kind::Link(r"\\?\UNC\fileserver\share\dir\".into())));
    let mapped = format!(r"smb/v1.NewSmbGlobalMapping \\fileserver\share\dir {} CONTOSO\kube", w.node.n(&s.staging));
    assert_eq!(p.called("smb/v1.NewSmbGlobalMapping"), [mapped.as_str()]);
    // Staged again: the link is there, nothing is mapped again.
    let before = p.calls.len();
    w.ok("NodeStageVolume again", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(!p.calls[before..].iter().any(|c| c.contains("NewSmbGlobalMapping")));

    w.ok("NodePublishVolume", smb::publish(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(matches!(w.at(&s.publish), Some(Kind::Link(_))));
    w.ok("NodeUnpublishVolume", smb::unpublish(&mut p, &w.node, &s).await);
    w.ok("NodeUnstageVolume", smb::unstage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert_eq!(p.called("smb/v1.RemoveSmbGlobalMapping"), [r"smb/v1.RemoveSmbGlobalMapping \\fileserver\share\dir"]);
    assert!(w.machine().mapped.is_empty());
    assert_eq!(w.at(&s.staging), None);
    assert_no_warnings(&p);
}

/// azurefile-csi-driver (pkg/mounter/safe_mounter_windows.go,
/// pkg/azurefile/azure_common_windows.go, pkg/azurefile/nodeserver.go): the share's path is
/// built with `\`, the user is `AZURE\<account>`, unstaging removes the folder only.
#[tokio::test]
async fn azurefile_node_flows() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("file.csi.azure.com", r"\\acct.file.core.windows.net\share", r"AZURE\acct");

    w.ok("NodeStageVolume", smb::stage(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await);
    assert!(w.machine().mapped.contains(r"\\acct.file.core.windows.net\share"));
    w.ok("NodePublishVolume", smb::publish(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await);
    // azurefile v1.35.7: a published link whose share went away fails the republish, and is
    // left for NodeUnpublishVolume (no Rmdir).
    quiet(&w, &mut p).await;
    w.machine().mapped.clear();
    let before = p.calls.len();
    let r = smb::publish(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await.unwrap_err();
    assert!(r.message.contains("The network path was not found"), "{r}");
    assert!(p.calls[before..].iter().all(|c| !c.contains("Rmdir")), "{:#?}", &p.calls[before..]);
    assert!(matches!(w.at(&s.publish), Some(Kind::Link(_))), "the stale link is kept");
    p.warnings.clear();
    w.machine().mapped.insert(r"\\acct.file.core.windows.net\share".into());
    w.ok("NodeUnpublishVolume", smb::unpublish(&mut p, &w.node, &s).await);
    w.ok("NodeUnstageVolume", smb::unstage(&mut p, &w.node, &local, smb::Driver::AzureFile, &s).await);
    assert_eq!(w.at(&s.staging), None);
    assert!(p.called("smb/v1.RemoveSmbGlobalMapping").is_empty());
    assert_no_warnings(&p);
}

/// The node after a clone or restored snapshot of a 10 GiB disk is attached as 20 GiB: the
/// data partition and NTFS are the source's size, the disk is larger.
fn larger_clone(m: &mut Machine) {
    m.partitioned = true;
    m.formatted = true;
    m.partition_size = 10 * GIB - DATA_OFFSET - MIB;
    m.used = 3 * GIB;
    m.disk_size = 20 * GIB;
}

/// azuredisk-csi-driver v1.34.5 (pkg/azuredisk/nodeserver.go, azure_common_windows.go,
/// pkg/mounter/safe_mounter_windows.go): the disk is found by its LUN, and NodeStageVolume ends
/// with ResizeVolume whose volume ID is the disk number: a larger clone's volume grows there.
/// NodeExpandVolume's size check compares the filesystem before resizing, so an online
/// expansion is Unavailable in csi-proxy mode (the driver's, not the daemon's, doing); a stale
/// pod link whose ReadDir fails is removed by the next publish, which fails for the retry.
#[tokio::test]
async fn azuredisk_v1_34_stage_resizes_a_larger_clone() {
    let w = Win::start().await;
    {
        let mut m = w.machine();
        larger_clone(&mut m);
        m.identities.push(Identity { number: DISK, lun: "3", page83: None, serial: None });
    }
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let v = w.block_volume("disk.csi.azure.com", "pvc-azuredisk-clone");

    let disk = w.ok("getDevicePathWithLUN", azuredisk::v1_34::find_disk_by_lun(&mut p, "3").await);
    assert_eq!(disk, DISK);
    assert_eq!(p.calls, ["disk/v1.Rescan", "disk/v1.ListDiskLocations"]);
    let r = azuredisk::v1_34::find_disk_by_lun(&mut p, "7").await.unwrap_err();
    assert_eq!(r.code, Code::Internal);
    assert!(r.message.contains("could not find disk id for lun: 7"), "{r}");

    let before = w.machine().partition_size;
    w.ok("NodeStageVolume", azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.called("volume/v1.ResizeVolume"), ["volume/v1.ResizeVolume 2 0"]);
    assert!(p.called("volume/v1.FormatVolume").is_empty(), "the clone's NTFS is kept");
    let after = w.machine().partition_size;
    assert!(after > before + 9 * GIB, "the volume grew over the larger disk: {before} -> {after}");

    w.ok("NodePublishVolume", azuredisk::v1_34::publish(&mut p, &w.node, &local, &v).await);
    let staged = canon(&w.node.n(&v.staging)).unwrap();
    assert_eq!(w.at(&v.publish), Some(Kind::Link(staged.clone())));
    let (total, _) = w.ok("NodeGetVolumeStats", azuredisk::stats(&mut p, &v).await);
    assert_eq!(total as u64, w.machine().fs_size());

    // The cloud grows the disk to 30 GiB; NodeExpandVolume for 29 GiB.
    w.machine().disk_size = 30 * GIB;
    let before = p.calls.len();
    let r = azuredisk::v1_34::expand(&mut p, &w.node, &v, 29 * GIB as i64).await.unwrap_err();
    assert_eq!(r.code, Code::Unavailable, "{r}");
    assert!(r.message.contains("size check failed: current 20 GiB < requested 29 GiB"), "{r}");
    assert!(!p.calls[before..].iter().any(|c| c.contains("ResizeVolume")), "{:#?}", &p.calls[before..]);

    w.ok("NodeUnpublishVolume", azuredisk::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", azuredisk::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    // The kubelet restages (the pod moved back): the stage-resize grows the volume to 30 GiB.
    w.machine().mkdir_all(&canon(&w.node.n(&v.staging)).unwrap());
    w.ok("NodeStageVolume again", azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await);
    assert_eq!(w.machine().partition_size, 30 * GIB - DATA_OFFSET - MIB);
    assert_no_warnings(&p);

    // The disk went offline under the mounted staging folder (a re-attach, upstream
    // csi-proxy#437): its ReadDir fails, the driver unmounts it (the cache flush by the path as
    // sent, then Rmdir) and fails this call; once the disk is back the retry stages again.
    quiet(&w, &mut p).await;
    w.machine().online = false;
    let before = p.calls.len();
    let r = azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await.unwrap_err();
    assert_eq!(r.code, Code::Internal);
    assert!(r.message.contains("The device is not ready"), "{r}");
    assert_eq!(w.at(&v.staging), None, "the unreadable mount was removed: {:#?}", &p.calls[before..]);
    let names: Vec<&str> = p.calls[before..].iter().map(|c| c.split(' ').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "filesystem/v1.PathExists",
            "filesystem/v1.IsSymlink",
            "volume/v1.GetVolumeIDFromTargetPath",
            "volume/v1.WriteVolumeCache",
            "filesystem/v1.Rmdir"
        ]
    );
    assert!(p.warnings.iter().any(|w| w.starts_with("ReadDir")), "{:#?}", p.warnings);
    w.machine().online = true;
    w.machine().mkdir_all(&staged);
    w.ok("NodeStageVolume retried", azuredisk::v1_34::stage(&mut p, &w.node, &local, &v, "3").await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
}

/// Makes a call without effects, so that the model's state can be changed by the test (the
/// model applies the last call's effects whenever it is settled).
async fn quiet(w: &Win, p: &mut Proxy) {
    p.path_exists(&format!(r"{ROOT}\quiet")).await.unwrap();
    w.settle();
    p.calls.pop();
}

/// azuredisk-csi-driver v1.34.5 with `--use-csiproxy-ga-interface=false`
/// (pkg/mounter/safe_mounter_v1beta_windows.go): filesystem v1beta1, disk and volume v1beta2,
/// the disk named by its number as a string, ResizeVolume with that string at stage.
#[tokio::test]
async fn azuredisk_v1beta_node_flows() {
    let w = Win::start().await;
    {
        let mut m = w.machine();
        larger_clone(&mut m);
        m.identities.push(Identity { number: DISK, lun: "3", page83: None, serial: None });
    }
    let mut p = w.legacy_proxy().await;
    let v = w.block_volume("disk.csi.azure.com", "pvc-azuredisk-beta");

    let disk = w.ok("getDevicePathWithLUN", azuredisk::v1beta::find_disk_by_lun(&mut p, "3").await);
    assert_eq!(disk, DISK.to_string());
    w.ok("NodeStageVolume", azuredisk::v1beta::stage(&mut p, &w.node, &disk, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.called("volume/v1beta2.ResizeVolume"), ["volume/v1beta2.ResizeVolume 2 0"]);
    assert_eq!(w.machine().partition_size, 20 * GIB - DATA_OFFSET - MIB);
    w.ok("NodePublishVolume", azuredisk::v1beta::publish(&mut p, &w.node, &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    let (total, used) = w.ok("NodeGetVolumeStats", azuredisk::v1beta::stats(&mut p, &v).await);
    // The v1beta mounter takes VolumeSize for the free bytes and adds the used ones to it.
    assert_eq!((total as u64, used as u64), (w.machine().fs_size() + 3 * GIB, 3 * GIB));
    w.ok("NodeUnpublishVolume", azuredisk::v1beta::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", azuredisk::v1beta::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert_eq!(p.called("volume/v1beta2.WriteVolumeCache"), [format!("volume/v1beta2.WriteVolumeCache {VOLUME}")]);
    assert!(p.calls.iter().all(|c| !c.contains("/v1.")), "only the fallback versions: {:#?}", p.calls);
    assert_no_warnings(&p);
}

/// gcp-compute-persistent-disk-csi-driver master (safe-mounter-v1_windows.go, node.go): disks
/// found by page 83 (the last word is the device name) and, on NVMe, by the EUI in the serial
/// number Windows reports (`…_0000.`, trailing `.` and `_` as the device wrote them); the
/// disk-size check before formatting; publish's IsSymlink first, and the check after a failed
/// link.
#[tokio::test]
async fn gce_pd_master_node_flows() {
    let w = Win::start().await;
    w.machine().identities = vec![
        Identity {
            number: 0,
            lun: "0",
            page83: Some((CODE_SET_ASCII, b"Google  persistent-disk-0".to_vec())),
            serial: Some("persistent-disk-0   "),
        },
        Identity {
            number: DISK,
            lun: "2",
            page83: Some((CODE_SET_ASCII, b"Google  pvc-gce".to_vec())),
            serial: Some("pvc-gce"),
        },
        Identity { number: 5, lun: "1", page83: None, serial: Some("10CC_9636_B6E3_CE3B_0000_0000_0000_0000.") },
    ];
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let v = w.block_volume("pd.csi.storage.gke.io", "pvc-gce");

    assert_eq!(w.ok("GetDiskNumber", gce_pd::master::disk_number_by_page83(&mut p, "pvc-gce").await), DISK);
    let nvme = gce_pd::master::disk_number_nvme(&mut p, "pvc-nvme", 0x10CC_9636_B6E3_CE3B).await;
    assert_eq!(w.ok("GetDiskNumber (NVMe)", nvme), 5, "the serial's EUI matched");
    let r = gce_pd::master::disk_number_by_page83(&mut p, "pvc-missing").await.unwrap_err();
    assert!(r.message.contains("could not find disk number for device pvc-missing"), "{r}");

    // The controller says 11 GiB; the disk is 10: refused before anything is written.
    let before = p.calls.len();
    let r = gce_pd::master::stage(&mut p, &v, Some(11)).await.unwrap_err();
    assert_eq!(r.code, Code::Internal);
    assert_eq!(r.message, r"expected block size '\v', got '\n'");
    assert_eq!(
        &p.calls[before..],
        [format!(r"filesystem/v1.IsSymlink {}", v.staging), "disk/v1.GetDiskStats 2".into()]
    );
    w.ok("NodeStageVolume", gce_pd::master::stage(&mut p, &v, Some(10)).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));

    w.ok("NodePublishVolume", gce_pd::master::publish(&mut p, &w.node, &local, &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    let before = p.calls.len();
    w.ok("NodePublishVolume again", gce_pd::master::publish(&mut p, &w.node, &local, &v).await);
    assert_eq!(p.calls[before..], [format!("filesystem/v1.IsSymlink {}", v.publish)]);
    w.ok("NodeUnpublishVolume", gce_pd::unpublish(&mut p, &w.node, &v).await);

    // A staging path outside the kubelet's directory (a misconfigured kubelet root): the link
    // is refused; IsSymlink of the target that was never made fails, and so does the call.
    let stray = BlockVolume { staging: r"\var\lib\other\globalmount".into(), ..v.clone() };
    let before = p.calls.len();
    let r = gce_pd::master::publish(&mut p, &w.node, &local, &stray).await.unwrap_err();
    assert!(r.message.starts_with("NodePublishVolume failed to check whether target path is a mount point:"), "{r}");
    assert!(r.message.contains("PermissionDenied"), "the link's own error is reported: {r}");
    let tail: Vec<&str> = p.calls[before..].iter().rev().take(2).map(|c| c.split(' ').next().unwrap()).collect();
    assert_eq!(tail, ["filesystem/v1.IsSymlink", "filesystem/v1.CreateSymlink"]);
    assert_eq!(w.at(&v.publish), None);
    p.warnings.clear();

    w.ok("NodeUnstageVolume", gce_pd::unstage(&mut p, &w.node, &v).await);
    assert!(!w.machine().online);
    assert_no_warnings(&p);
}

/// gcp-compute-persistent-disk-csi-driver master's fallback (safe-mounter-v1beta_windows.go,
/// resizefs_windows.go): disk v1beta2 (ListDiskIDs' `page83` identifier, SetAttachState),
/// filesystem and volume v1beta1.
#[tokio::test]
async fn gce_pd_v1beta_node_flows() {
    let w = Win::start().await;
    w.machine().identities.push(Identity {
        number: DISK,
        lun: "2",
        page83: Some((CODE_SET_ASCII, b"Google  pvc-gce-beta".to_vec())),
        serial: Some("pvc-gce-beta"),
    });
    let mut p = w.legacy_proxy().await;
    let local = ModelLocal(w.machine.clone());
    let v = w.block_volume("pd.csi.storage.gke.io", "pvc-gce-beta");

    let disk = w.ok("GetDiskNumber", gce_pd::v1beta::disk_number_by_page83(&mut p, "pvc-gce-beta").await);
    assert_eq!(disk, "2");
    w.ok("NodeStageVolume", gce_pd::v1beta::stage(&mut p, &disk, &v).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.called("volume/v1beta1.ResizeVolume"), [format!("volume/v1beta1.ResizeVolume {VOLUME} 0")]);
    w.ok("NodePublishVolume", gce_pd::v1beta::publish(&mut p, &w.node, &local, &v).await);
    assert!(matches!(w.at(&v.publish), Some(Kind::Link(_))));
    w.ok("NodeUnpublishVolume", gce_pd::v1beta::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", gce_pd::v1beta::unstage(&mut p, &w.node, &v).await);
    assert_eq!(w.at(&v.staging), None);
    assert!(!w.machine().online, "SetAttachState took the disk offline");
    assert!(p.calls.iter().all(|c| !c.contains("/v1.")), "only the fallback versions: {:#?}", p.calls);
    assert_no_warnings(&p);
}

/// aws-ebs-csi-driver v1.64.0 (mount_windows_proxyV1.go FindDevicePath, node.go): the disk is
/// found by the serial number containing the volume ID without dashes, on a disk v1 connection
/// made for that call and closed after it; NodeExpandVolume with nothing mounted at the path
/// still finds the disk and fails the resize's lookup (Internal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ebs_v1_64_node_flows() {
    let w = Win::start().await;
    w.machine().identities.push(Identity {
        number: DISK,
        lun: "1",
        page83: Some((CODE_SET_BINARY, vec![0x60, 0x0d, 0x02, 0x31])),
        serial: Some("vol0123456789abcdef0"),
    });
    let mut p = w.proxy().await;
    let v = w.block_volume("ebs.csi.aws.com", "pvc-ebs-164");
    let id = "vol-0123456789abcdef0";
    let open = || w.server.channel(Group::Disk, "v1");

    w.ok("NodeStageVolume", ebs::v1_64::stage(&mut p, open(), &w.node, &v, "/dev/xvdba", id).await);
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert_eq!(p.calls[0], "disk/v1.ListDiskIDs (a connection of its own)");
    let r = ebs::v1_64::stage(&mut p, open(), &w.node, &v, "/dev/xvdbb", "vol-0fffffffffffffff0").await.unwrap_err();
    assert_eq!(r.code, Code::NotFound);
    assert!(r.message.contains(r#"volume id "vol-0fffffffffffffff0" not found"#), "{r}");

    // NodeExpandVolume of a volume not published here: the pattern reads "not mounted", the disk
    // is found, Rescan, and the resize's GetVolumeIDFromTargetPath fails.
    let before = p.calls.len();
    let r = ebs::v1_64::expand(&mut p, open(), &w.node, &v, id).await.unwrap_err();
    assert_eq!(r.code, Code::Internal, "{r}");
    assert!(r.message.starts_with(&format!("Could not resize volume {id:?}")), "{r}");
    let names: Vec<&str> = p.calls[before..].iter().map(|c| c.split(' ').next().unwrap()).collect();
    assert_eq!(
        names,
        [
            "volume/v1.GetVolumeIDFromTargetPath",
            "disk/v1.ListDiskIDs",
            "disk/v1.Rescan",
            "volume/v1.GetVolumeIDFromTargetPath"
        ]
    );

    w.ok("NodePublishVolume", ebs::publish(&mut p, &w.node, &v).await);
    w.machine().disk_size = 20 * GIB;
    let size = w.ok("NodeExpandVolume", ebs::v1_64::expand(&mut p, open(), &w.node, &v, id).await);
    assert_eq!(size as u64, 20 * GIB);
    w.ok("NodeUnpublishVolume", ebs::unpublish(&mut p, &w.node, &v).await);
    w.ok("NodeUnstageVolume", ebs::unstage(&mut p, &w.node, &v).await);
    assert_no_warnings(&p);

    // A connection per call, 200 times: nothing stays open in the server (this process).
    #[cfg(target_os = "linux")]
    {
        let warm = w.ok(
            "FindDevicePath",
            ebs::v1_64::find_device_path(&mut p, open(), "", id)
                .await
                .map_err(|m| flows::Failure { code: Code::NotFound, message: m }),
        );
        assert_eq!(warm, DISK);
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let socket = w.server.socket(Group::Disk, "v1").parent().unwrap().to_owned();
        let (held, (fds, threads)) = (sockets_under(&socket), fds_and_threads());
        for _ in 0..200 {
            let n = ebs::v1_64::find_device_path(&mut p, open(), "", id).await.unwrap();
            assert_eq!(n, DISK);
        }
        // Closed connections are torn down by tasks of their own: wait for them, bounded.
        let mut now = sockets_under(&socket);
        for _ in 0..100 {
            if now <= held {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            now = sockets_under(&socket);
        }
        let (fds_after, threads_after) = fds_and_threads();
        println!(
            "200 connections: the server's sockets {held} -> {now}; this process \
             (the server and other tests) fds {fds} -> {fds_after}, threads {threads} -> {threads_after}"
        );
        assert_eq!(now, held, "the server still holds {} of the 200 connections", now - held);
        // The other tests in this process come and go: a thread per call would be 200 more.
        assert!(threads_after < threads + 50, "threads: {threads} before, {threads_after} after");
    }
}

/// vsphere-csi-driver v3.4.0 GetDiskNumber (mounter_windows.go): the disk whose page 83 ID is
/// the publish context's disk UUID, as VMware's NAA identifier renders in hex.
#[tokio::test]
async fn vsphere_disk_discovery() {
    let w = Win::start().await;
    let naa = [0x60, 0x00, 0xc2, 0x9b, 0x1a, 0x2b, 0x3c, 0x4d, 0x5e, 0x6f, 0x70, 0x81, 0x92, 0xa3, 0xb4, 0xc5];
    w.machine().identities.push(Identity {
        number: DISK,
        lun: "1",
        page83: Some((CODE_SET_BINARY, naa.to_vec())),
        serial: Some("6000c29b1a2b3c4d5e6f708192a3b4c5"),
    });
    let mut p = w.proxy().await;
    let disk = w.ok("GetDiskNumber", vsphere::disk_number(&mut p, "6000c29b1a2b3c4d5e6f708192a3b4c5").await);
    assert_eq!(disk, DISK);
    let r = vsphere::disk_number(&mut p, "6000C29B1A2B3C4D5E6F708192A3B4C5").await.unwrap_err();
    assert!(r.message.contains("no matching disks found"), "the match is exact: {r}");
}

/// csi-driver-smb v1.20.3 (safe_mounter_windows.go SMBMount, nodeserver.go): one trailing
/// backslash trimmed, a `*.svc.cluster.local` server mapped by its IPv4 address, an ephemeral
/// inline volume mapped straight at the pod's path and unpublished with Rmdir only, and a
/// staged link whose share went away removed (ReadDir fails) so the retry maps again.
#[tokio::test]
async fn smb_v1_20_node_flows() {
    let w = Win::start().await;
    w.machine().dns.insert("smb-server.default.svc.cluster.local".into(), "10.96.0.7".into());
    let mut p = w.proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("smb.csi.k8s.io", "//smb-server.default.svc.cluster.local/share/dir//", r"CONTOSO\kube");

    w.ok("NodeStageVolume", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    let mapped = format!(r"smb/v1.NewSmbGlobalMapping \\10.96.0.7\share\dir\ {} CONTOSO\kube", w.node.n(&s.staging));
    assert_eq!(p.called("smb/v1.NewSmbGlobalMapping"), [mapped.as_str()]);
    assert!(w.machine().mapped.contains(r"\\10.96.0.7\share"));

    // The mapping went away (the node rebooted): the link is there but can't be read.
    quiet(&w, &mut p).await;
    w.machine().mapped.clear();
    let before = p.calls.len();
    let r = smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await.unwrap_err();
    assert!(r.message.contains("The network path was not found"), "{r}");
    assert_eq!(p.calls.last().unwrap(), &format!("filesystem/v1.Rmdir {} force", w.node.n(&s.staging)));
    assert_eq!(w.at(&s.staging), None, "{:#?}", &p.calls[before..]);
    w.ok("NodeStageVolume retried", smb::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    assert!(w.machine().mapped.contains(r"\\10.96.0.7\share"));
    p.warnings.clear();
    w.ok("NodeUnstageVolume", smb::unstage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    // os.Readlink gives `\\10.96.0.7\share\dir\`; one backslash goes.
    assert_eq!(p.called("smb/v1.RemoveSmbGlobalMapping"), [r"smb/v1.RemoveSmbGlobalMapping \\10.96.0.7\share\dir"]);

    // An ephemeral inline volume: no staging, the pod's folder is the mapping's local path.
    let e = w.share("smb.csi.k8s.io", "//fileserver/share/inline", r"CONTOSO\kube");
    w.ok("NodePublishVolume (ephemeral)", smb::publish_ephemeral(&mut p, &w.node, &local, &e).await);
    assert_eq!(w.at(&e.publish), Some(Kind::Link(r"\\?\UNC\fileserver\share\inline\".into())));
    let before = p.calls.len();
    w.ok("NodeUnpublishVolume (ephemeral)", smb::unpublish(&mut p, &w.node, &e).await);
    assert_eq!(p.calls[before..], [format!("filesystem/v1.Rmdir {} force", e.publish)]);
    assert_eq!(w.at(&e.publish), None);
    assert!(
        w.machine().mapped.contains(r"\\fileserver\share"),
        "the mapping stays (the driver only removes the folder)"
    );
    assert_no_warnings(&p);
}

/// The fallback mounters of csi-driver-smb v1.20.3 and azurefile v1.35.7
/// (safe_mounter_v1beta_windows.go): filesystem and smb v1beta1; the trailing backslash is
/// kept, and unstaging removes the folder only.
#[tokio::test]
async fn smb_and_azurefile_v1beta_node_flows() {
    let w = Win::start().await;
    let mut p = w.legacy_proxy().await;
    let local = ModelLocal(w.machine.clone());
    let s = w.share("smb.csi.k8s.io", "//fileserver/share/dir/", r"CONTOSO\kube");

    w.ok("NodeStageVolume", smb::v1beta::stage(&mut p, &w.node, &local, smb::Driver::Smb, &s).await);
    let mapped =
        format!(r"smb/v1beta1.NewSmbGlobalMapping \\fileserver\share\dir\ {} CONTOSO\kube", w.node.n(&s.staging));
    assert_eq!(p.called("smb/v1beta1.NewSmbGlobalMapping"), [mapped.as_str()]);
    w.ok("NodePublishVolume", smb::v1beta::publish(&mut p, &w.node, &local, &s).await);
    assert!(matches!(w.at(&s.publish), Some(Kind::Link(_))));
    w.ok("NodeUnpublishVolume", smb::v1beta::unpublish(&mut p, &w.node, &s).await);
    w.ok("NodeUnstageVolume", smb::v1beta::unstage(&mut p, &w.node, &s).await);
    assert_eq!(w.at(&s.staging), None);
    assert!(w.machine().mapped.contains(r"\\fileserver\share"), "v1beta unmount leaves the mapping");

    let a = w.share("file.csi.azure.com", r"\\acct.file.core.windows.net\share", r"AZURE\acct");
    w.ok("NodeStageVolume (azurefile)", smb::v1beta::stage(&mut p, &w.node, &local, smb::Driver::AzureFile, &a).await);
    assert!(w.machine().mapped.contains(r"\\acct.file.core.windows.net\share"));
    w.ok("NodeUnstageVolume (azurefile)", smb::v1beta::unstage(&mut p, &w.node, &a).await);
    assert!(p.calls.iter().all(|c| !c.contains("/v1.")), "only the fallback versions: {:#?}", p.calls);
    assert_no_warnings(&p);
}

/// A FormatVolume and then a MountVolume of the volume (every disk driver's stage when the
/// volume is new): the mount reads the volume's disk extents once, under its disk's lock, on
/// the disk the format found it on (the server's locks.rs remembers it); the first sight of the
/// volume reads them twice, before the lock and under it, and FormatVolume once more in the
/// host, for its interlock (the disk whose flags it checks).
#[tokio::test]
async fn mount_volume_reads_the_volume_disk_once() {
    let w = Win::start().await;
    let mut p = w.proxy().await;
    let v = w.block_volume("disk.csi.azure.com", "pvc-lookups");
    let extents_read = |w: &Win| {
        let (line, script) = w.call.lock().unwrap().clone();
        let device = VOLUME.trim_end_matches('\\');
        let n = script.log().iter().filter(|l| l.starts_with(&format!("ioctl {device} 0x560000"))).count();
        (line, n)
    };
    p.partition_disk(DISK).await.unwrap();
    let id = p.list_volumes_on_disk(DISK).await.unwrap().remove(0);
    assert_eq!(id, VOLUME);
    p.format_volume(&id).await.unwrap();
    let (line, n) = extents_read(&w);
    assert!(line.contains("FormatVolume") && n == 3, "{line}: {n} reads");
    p.mount_volume(&id, &w.node.n(&v.staging)).await.unwrap();
    let (line, n) = extents_read(&w);
    assert!(line.contains("MountVolume") && n == 1, "{line}: {n} reads");
    assert_eq!(w.at(&v.staging), Some(Kind::Mount(VOLUME.into())));
    assert!(w.unscripted.lock().unwrap().is_empty());
}
