// The scripted Windows node the driver flows run on: the model of one node (`Machine`), the
// scripts written from it before each call, the filesystem group on the model (`ModelFs`), the
// drivers' own actions (`ModelLocal`) and the server over it all (`Win`). Included whole by
// driver_flows_scripted.rs and driver_policies_scripted.rs (`include!`), so that both run the
// flows on the same node.

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
        Win::start_as(None).await
    }

    /// The node's server with `authorizer` in force and every call made as `caller` (see
    /// [`TestServer::start_apis_as`]), or with neither.
    async fn start_as(authz: Option<(Arc<csi_proxy_wire::Caller>, Arc<csi_proxy_server::policy::Authorizer>)>) -> Win {
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
        let server = match authz {
            None => TestServer::start_apis(APIS, memory, hosts, config, ConnPolicy::default()).await,
            Some((caller, authorizer)) => {
                TestServer::start_apis_as(APIS, memory, hosts, config, ConnPolicy::default(), caller, authorizer).await
            }
        };
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

/// The node after a clone or restored snapshot of a 10 GiB disk is attached as 20 GiB: the
/// data partition and NTFS are the source's size, the disk is larger.
fn larger_clone(m: &mut Machine) {
    m.partitioned = true;
    m.formatted = true;
    m.partition_size = 10 * GIB - DATA_OFFSET - MIB;
    m.used = 3 * GIB;
    m.disk_size = 20 * GIB;
}
