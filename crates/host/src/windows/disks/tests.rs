use super::*;
use crate::interlock::ProtectedDisk;
use crate::windows::interlock;
use crate::windows::ioctl::*;
use crate::windows::script::{returned, Answer, Script};
use proptest::prelude::*;

// ---- buffers, written field by field as the documented layouts place them ----

/// STORAGE_DEVICE_NUMBER.
fn device_number_buf(device_type: u32, number: u32, partition: u32) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(device_type.to_le_bytes()); // DeviceType
    b.extend(number.to_le_bytes()); // DeviceNumber
    b.extend(partition.to_le_bytes()); // PartitionNumber
    b
}

/// One STORAGE_IDENTIFIER: (CodeSet, Type, Association, Identifier bytes).
type Id<'a> = (u32, u32, u32, &'a [u8]);

/// STORAGE_DEVICE_ID_DESCRIPTOR with `ids`, each identifier padded to 4 bytes as drivers do.
fn id_descriptor(ids: &[Id]) -> Vec<u8> {
    let mut body = Vec::new();
    for (i, (code_set, kind, association, bytes)) in ids.iter().enumerate() {
        let padded = (16 + bytes.len()).div_ceil(4) * 4;
        let next = if i + 1 < ids.len() { padded as u16 } else { 0 };
        body.extend(code_set.to_le_bytes()); // CodeSet
        body.extend(kind.to_le_bytes()); // Type
        body.extend((bytes.len() as u16).to_le_bytes()); // IdentifierSize
        body.extend(next.to_le_bytes()); // NextOffset
        body.extend(association.to_le_bytes()); // Association
        body.extend(*bytes); // Identifier
        body.resize(body.len() + padded - 16 - bytes.len(), 0);
    }
    let mut b = Vec::new();
    b.extend(12u32.to_le_bytes()); // Version (sizeof the descriptor)
    b.extend((12 + body.len() as u32).to_le_bytes()); // Size
    b.extend((ids.len() as u32).to_le_bytes()); // NumberOfIdentifiers
    b.extend(body); // Identifiers
    b
}

/// STORAGE_DEVICE_DESCRIPTOR with vendor "MSFT" and, when given, `serial` (NUL-terminated).
fn device_descriptor(serial: Option<&[u8]>) -> Vec<u8> {
    let strings_at = 40u32;
    let vendor = b"MSFT    \0";
    let serial_at = strings_at + vendor.len() as u32;
    let size = serial_at + serial.map_or(0, |s| s.len() as u32 + 1);
    let mut b = Vec::new();
    b.extend(40u32.to_le_bytes()); // Version
    b.extend(size.to_le_bytes()); // Size
    b.push(0); // DeviceType (SCSI direct access)
    b.push(0); // DeviceTypeModifier
    b.push(0); // RemovableMedia
    b.push(1); // CommandQueueing
    b.extend(strings_at.to_le_bytes()); // VendorIdOffset
    b.extend(0u32.to_le_bytes()); // ProductIdOffset
    b.extend(0u32.to_le_bytes()); // ProductRevisionOffset
    b.extend(serial.map_or(0, |_| serial_at).to_le_bytes()); // SerialNumberOffset
    b.extend(1u32.to_le_bytes()); // BusType (BusTypeScsi)
    b.extend(0u32.to_le_bytes()); // RawPropertiesLength
    b.extend([0u8; 4]); // RawDeviceProperties[1] and padding
    b.extend(vendor);
    if let Some(s) = serial {
        b.extend(s);
        b.push(0);
    }
    b
}

/// GET_DISK_ATTRIBUTES.
fn attributes_buf(attributes: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(16u32.to_le_bytes()); // Version
    b.extend(0u32.to_le_bytes()); // Reserved1
    b.extend(attributes.to_le_bytes()); // Attributes
    b
}

/// DISK_GEOMETRY_EX of a disk of `size` bytes.
fn geometry_buf(size: i64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(size / (255 * 63 * 512)).to_le_bytes()); // Geometry.Cylinders
    b.extend_from_slice(&12u32.to_le_bytes()); // Geometry.MediaType: FixedMedia
    b.extend_from_slice(&255u32.to_le_bytes()); // Geometry.TracksPerCylinder
    b.extend_from_slice(&63u32.to_le_bytes()); // Geometry.SectorsPerTrack
    b.extend_from_slice(&512u32.to_le_bytes()); // Geometry.BytesPerSector
    b.extend_from_slice(&size.to_le_bytes()); // DiskSize
    b.extend_from_slice(&[0; 8]); // Data: partition and detection info, unused
    b
}

const PAGE83_BIN: &[u8] = &[0x60, 0x02, 0x24, 0x8a, 0xff, 0x00];

// ---- IOCTL codes and buffers ----

#[test]
fn ioctl_codes_are_their_ctl_codes() {
    assert_eq!(
        IOCTL_STORAGE_GET_DEVICE_NUMBER,
        ctl_code(FILE_DEVICE_MASS_STORAGE, 0x420, METHOD_BUFFERED, FILE_ANY_ACCESS)
    );
    assert_eq!(
        IOCTL_STORAGE_QUERY_PROPERTY,
        ctl_code(FILE_DEVICE_MASS_STORAGE, 0x500, METHOD_BUFFERED, FILE_ANY_ACCESS)
    );
    assert_eq!(IOCTL_DISK_GET_DRIVE_GEOMETRY_EX, ctl_code(FILE_DEVICE_DISK, 0x28, METHOD_BUFFERED, FILE_ANY_ACCESS));
    assert_eq!(IOCTL_DISK_GET_DISK_ATTRIBUTES, ctl_code(FILE_DEVICE_DISK, 0x3c, METHOD_BUFFERED, FILE_ANY_ACCESS));
    assert_eq!(
        IOCTL_DISK_SET_DISK_ATTRIBUTES,
        ctl_code(FILE_DEVICE_DISK, 0x3d, METHOD_BUFFERED, FILE_READ_ACCESS | FILE_WRITE_ACCESS)
    );
    assert_eq!(
        [IOCTL_STORAGE_GET_DEVICE_NUMBER, IOCTL_STORAGE_QUERY_PROPERTY, IOCTL_DISK_GET_DRIVE_GEOMETRY_EX],
        [0x2D1080, 0x2D1400, 0x700A0]
    );
    assert_eq!([IOCTL_DISK_GET_DISK_ATTRIBUTES, IOCTL_DISK_SET_DISK_ATTRIBUTES], [0x700F0, 0x7C0F4]);
}

#[test]
fn input_buffers_follow_the_layouts() {
    let mut want = Vec::new();
    want.extend(2u32.to_le_bytes()); // PropertyId = StorageDeviceIdProperty
    want.extend(0u32.to_le_bytes()); // QueryType = PropertyStandardQuery
    want.extend([0u8; 4]); // AdditionalParameters[1] and padding
    assert_eq!(property_query(STORAGE_DEVICE_ID_PROPERTY), want);
    assert_eq!(property_query(STORAGE_DEVICE_PROPERTY)[..4], [0, 0, 0, 0]);

    let mut want = Vec::new();
    want.extend(40u32.to_le_bytes()); // Version = sizeof(SET_DISK_ATTRIBUTES)
    want.push(1); // Persist
    want.extend([0u8; 3]); // Reserved1
    want.extend(0u64.to_le_bytes()); // Attributes
    want.extend(1u64.to_le_bytes()); // AttributesMask = OFFLINE
    want.extend([0u8; 16]); // Reserved2
    assert_eq!(set_disk_attributes(true, 0, DISK_ATTRIBUTE_OFFLINE), want);
    let offline = set_disk_attributes(false, DISK_ATTRIBUTE_OFFLINE, DISK_ATTRIBUTE_OFFLINE);
    assert_eq!((offline[4], &offline[8..16]), (0, &1u64.to_le_bytes()[..]));
}

#[test]
fn output_parsers_read_the_documented_fields() {
    assert_eq!(
        device_number(&device_number_buf(7, 3, 0)).unwrap(),
        DeviceNumber { device_type: 7, device_number: 3, partition_number: 0 }
    );
    assert_eq!(disk_size(&geometry_buf(10 << 30)).unwrap(), 10 << 30);
    assert!(disk_size(&geometry_buf(-1)).unwrap_err().to_string().contains("negative"));
    let a = disk_attributes(&attributes_buf(DISK_ATTRIBUTE_OFFLINE | DISK_ATTRIBUTE_READ_ONLY)).unwrap();
    assert!(a.offline() && a.read_only());
    let a = disk_attributes(&attributes_buf(DISK_ATTRIBUTE_READ_ONLY)).unwrap();
    assert!(!a.offline() && a.read_only());
}

#[test]
fn page83_binary_is_lowercase_hex_and_ascii_is_raw() {
    // A port identifier first: only the device's own counts.
    let ids = device_identifiers(&id_descriptor(&[
        (CODE_SET_BINARY, 3, 1, b"\x01\x02"),
        (CODE_SET_BINARY, 3, ASSOC_DEVICE, PAGE83_BIN),
    ]))
    .unwrap();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[1], Identifier { code_set: 1, kind: 3, association: 0, bytes: PAGE83_BIN.to_vec() });
    assert_eq!(page83(&ids).as_deref(), Some("6002248aff00"));

    let ids = device_identifiers(&id_descriptor(&[
        (3, 8, ASSOC_DEVICE, b"utf8 id"), // CodeSet UTF-8: not upstream's
        (CODE_SET_ASCII, 1, ASSOC_DEVICE, b"MSFT    Virtual Disk    "),
        (CODE_SET_BINARY, 3, ASSOC_DEVICE, PAGE83_BIN),
    ]))
    .unwrap();
    assert_eq!(page83(&ids).as_deref(), Some("MSFT    Virtual Disk    "));

    // Only target and port associations: none.
    let ids =
        device_identifiers(&id_descriptor(&[(CODE_SET_BINARY, 3, 2, PAGE83_BIN), (CODE_SET_ASCII, 8, 1, b"iqn")]))
            .unwrap();
    assert_eq!(page83(&ids), None);
    assert_eq!(page83(&device_identifiers(&id_descriptor(&[])).unwrap()), None);
}

#[test]
fn serial_numbers() {
    assert_eq!(serial_number(&device_descriptor(Some(b"  S4EW NX0R  "))).unwrap().as_deref(), Some("  S4EW NX0R  "));
    assert_eq!(serial_number(&device_descriptor(None)).unwrap(), None);
    // An offset past the descriptor: none.
    let mut b = device_descriptor(Some(b"X"));
    b[24..28].copy_from_slice(&4096u32.to_le_bytes());
    assert_eq!(serial_number(&b).unwrap(), None);
    // No NUL before the end: up to the end.
    let mut b = device_descriptor(Some(b"ABC"));
    b.pop();
    assert_eq!(serial_number(&b).unwrap().as_deref(), Some("ABC"));
}

#[test]
fn short_or_inconsistent_buffers_are_errors_naming_the_structure() {
    let name = |e: Error| e.to_string();
    assert!(name(device_number(&device_number_buf(7, 1, 0)[..11]).unwrap_err()).contains("STORAGE_DEVICE_NUMBER"));
    assert!(name(disk_size(&[0; 31]).unwrap_err()).contains("DISK_GEOMETRY_EX"));
    assert!(name(disk_attributes(&attributes_buf(1)[..15]).unwrap_err()).contains("GET_DISK_ATTRIBUTES"));
    assert!(name(serial_number(&device_descriptor(None)[..27]).unwrap_err()).contains("STORAGE_DEVICE_DESCRIPTOR"));

    let good = id_descriptor(&[(CODE_SET_BINARY, 3, 0, PAGE83_BIN), (CODE_SET_ASCII, 1, 0, b"abc")]);
    assert!(name(device_identifiers(&good[..11]).unwrap_err()).contains("STORAGE_DEVICE_ID_DESCRIPTOR"));
    // Bytes missing from the last identifier (Size claims them).
    assert!(device_identifiers(&good[..good.len() - 4]).unwrap_err().to_string().contains("IdentifierSize 3"));
    // An IdentifierSize reaching past Size.
    let mut b = good.clone();
    b[12 + 8..12 + 10].copy_from_slice(&200u16.to_le_bytes());
    assert!(device_identifiers(&b).unwrap_err().to_string().contains("IdentifierSize 200"));
    // A NextOffset of 0 with identifiers left.
    let mut b = good.clone();
    b[12 + 10..12 + 12].copy_from_slice(&0u16.to_le_bytes());
    assert!(device_identifiers(&b).unwrap_err().to_string().contains("NextOffset 0"));
    // More identifiers claimed than there are.
    let mut b = good.clone();
    b[8..12].copy_from_slice(&3u32.to_le_bytes());
    assert!(device_identifiers(&b).is_err());
    let mut b = good;
    b[4..8].copy_from_slice(&4u32.to_le_bytes());
    assert!(device_identifiers(&b).unwrap_err().to_string().contains("Size is 4"));
}

/// R5: a driver that answers a Size larger than the bytes it returned (the quirk the serial
/// path already tolerates) still gives its identifiers, so its disk keeps its page 0x83 ID.
#[test]
fn a_size_past_the_returned_bytes_is_bounded_by_them() {
    let mut b = id_descriptor(&[(CODE_SET_BINARY, 3, ASSOC_DEVICE, PAGE83_BIN), (CODE_SET_ASCII, 1, 0, b"abc")]);
    let real = b.len() as u32;
    b[4..8].copy_from_slice(&(real + 64).to_le_bytes());
    let parsed = device_identifiers(&b).unwrap();
    assert_eq!(parsed.len(), 2);
    assert_eq!(page83(&parsed).as_deref(), Some("6002248aff00"));

    // Through ListDiskIDs: the disk is listed, not logged and left out.
    let s = Arc::new(Script::new());
    script_disk(&s, 0, 4, Answer::Bytes(b), Answer::Bytes(device_descriptor(Some(b"SN1"))));
    s.on("disk_interfaces", Answer::Strings(vec![iface(0)]));
    let got = disks(&s).list_disk_ids().unwrap();
    assert_eq!(got.get(&4), Some(&ids("6002248aff00", "SN1")));
}

proptest! {
    #[test]
    fn no_buffer_makes_a_parser_panic(buf in proptest::collection::vec(any::<u8>(), 0..160)) {
        let _ = device_number(&buf);
        let _ = disk_size(&buf);
        let _ = disk_attributes(&buf);
        let _ = serial_number(&buf);
        if let Ok(ids) = device_identifiers(&buf) {
            let _ = page83(&ids);
        }
    }

    /// Arbitrary identifier lists behind a plausible header, where the walk gets deep.
    #[test]
    fn no_identifier_list_makes_the_walk_panic(count in 0u32..6, body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut buf = Vec::new();
        buf.extend(12u32.to_le_bytes());
        buf.extend((12 + body.len() as u32).to_le_bytes());
        buf.extend(count.to_le_bytes());
        buf.extend(&body);
        if let Ok(ids) = device_identifiers(&buf) {
            prop_assert_eq!(ids.len(), count as usize);
            prop_assert!(ids.iter().all(|id| id.bytes.len() <= body.len()));
        }
    }

    #[test]
    fn well_formed_descriptors_round_trip(ids in proptest::collection::vec((0u32..4, 0u32..9, 0u32..3, proptest::collection::vec(any::<u8>(), 0..40)), 0..5)) {
        let list: Vec<Id> = ids.iter().map(|(c, t, a, b)| (*c, *t, *a, b.as_slice())).collect();
        let parsed = device_identifiers(&id_descriptor(&list)).unwrap();
        let got: Vec<_> = parsed.iter().map(|id| (id.code_set, id.kind, id.association, id.bytes.clone())).collect();
        prop_assert_eq!(got, ids);
    }
}

// ---- ListDiskIDs ----

const GDN: &str = "0x2d1080";
const QP: &str = "0x2d1400";

fn iface(n: u32) -> String {
    format!(r"\\?\scsi#disk&ven_msft&prod_virtual_disk#000{n}#{{53f56307-b6bf-11d0-94f2-00a0c91efb8b}}")
}

/// Scripts the three IOCTLs of a disk behind interface `i`: device number, device-id
/// descriptor, device descriptor.
fn script_disk(s: &Script, i: u32, number: u32, ids: Answer, descriptor: Answer) {
    s.on(format!("ioctl {} {GDN}", iface(i)), Answer::Bytes(device_number_buf(FILE_DEVICE_DISK, number, 0)));
    s.on(format!("ioctl {} {QP}", iface(i)), ids);
    s.on(format!("ioctl {} {QP}", iface(i)), descriptor);
}

/// The group over `s`, where disks 2 and 3 are data disks to the interlocks (a test may script
/// them otherwise first: the first answer scripted is the one given).
fn disks(s: &Arc<Script>) -> Disks {
    for n in [2, 3] {
        interlock::script_disk(s, n, interlock::data_disk_row(n));
    }
    Disks::new(s.clone(), s.clone())
}

/// The interlock's queries of data disk 2 or 3, as logged.
fn il(n: u32) -> Vec<String> {
    interlock::disk_query_lines(n).to_vec()
}

fn ids(page83: &str, serial: &str) -> DiskIds {
    DiskIds { page83: page83.into(), serial_number: serial.into() }
}

#[test]
fn disk_ids_of_every_kind_of_disk() {
    let s = Arc::new(Script::new());
    s.on("disk_interfaces", Answer::Strings((0..8).map(iface).collect()));
    // 0: binary page83, blank-padded serial.
    script_disk(
        &s,
        0,
        0,
        Answer::Bytes(id_descriptor(&[(CODE_SET_BINARY, 3, 0, PAGE83_BIN)])),
        Answer::Bytes(device_descriptor(Some(b"  6002248AFF00  "))),
    );
    // 1: ASCII page83, no serial.
    script_disk(
        &s,
        1,
        4,
        Answer::Bytes(id_descriptor(&[(CODE_SET_ASCII, 1, 0, b"MSFT    disk-a")])),
        Answer::Bytes(device_descriptor(None)),
    );
    // 2: NVMe without the device-id property.
    script_disk(
        &s,
        2,
        2,
        Answer::Win32Error(code::ERROR_NOT_SUPPORTED),
        Answer::Bytes(device_descriptor(Some(b"0025_3881_91B1_2345."))),
    );
    // 3: NVMe with only a target identifier.
    script_disk(
        &s,
        3,
        3,
        Answer::Bytes(id_descriptor(&[(CODE_SET_BINARY, 3, 2, PAGE83_BIN)])),
        Answer::Bytes(device_descriptor(Some(b"   "))),
    );
    // 4: answers "Incorrect function", as on GitHub's runners.
    s.on(format!("ioctl {} {GDN}", iface(4)), Answer::Win32Error(code::ERROR_INVALID_FUNCTION));
    // 5: not a disk (a CD-ROM, FILE_DEVICE_CD_ROM = 2).
    s.on(format!("ioctl {} {GDN}", iface(5)), Answer::Bytes(device_number_buf(2, 0, 0)));
    // 6: a device-id descriptor whose Size exceeds the bytes returned (R5): still listed.
    let mut big = id_descriptor(&[(CODE_SET_BINARY, 3, 0, PAGE83_BIN)]);
    big[4..8].copy_from_slice(&999u32.to_le_bytes());
    script_disk(&s, 6, 6, Answer::Bytes(big), Answer::Bytes(device_descriptor(None)));
    // 7: one whose identifier is cut short: left out.
    let mut bad = id_descriptor(&[(CODE_SET_BINARY, 3, 0, PAGE83_BIN)]);
    bad.truncate(bad.len() - 4);
    script_disk(&s, 7, 7, Answer::Bytes(bad), Answer::Bytes(device_descriptor(None)));

    let got = disks(&s).list_disk_ids().unwrap();
    let want = BTreeMap::from([
        (0, ids("6002248aff00", "6002248AFF00")),
        (2, ids("", "0025_3881_91B1_2345.")),
        (3, ids("", "")),
        (4, ids("MSFT    disk-a", "")),
        (6, ids("6002248aff00", "")),
    ]);
    assert_eq!(got, want);
    s.assert_all_scripted();
    // Nothing more is asked of a device that isn't a disk, or of one that failed.
    assert_eq!(s.calls(&format!("ioctl {}", iface(5))).len(), 1);
    assert_eq!(s.calls(&format!("ioctl {}", iface(4))).len(), 1);
    // Never opened for writing.
    assert!(s.calls("ioctl").iter().all(|l| !l.ends_with(" w")));
}

#[test]
fn disk_ids_fail_only_when_the_disks_cant_be_listed() {
    let s = Arc::new(Script::new());
    s.on("disk_interfaces", Answer::Win32Error(code::ERROR_ACCESS_DENIED));
    let err = disks(&s).list_disk_ids().unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert!(err.to_string().contains("disk interfaces"), "{err}");
}

// ---- size and state ----

#[test]
fn disk_size_and_unknown_disks() {
    let s = Arc::new(Script::new());
    s.on(r"ioctl \\.\PhysicalDrive1 0x700a0", Answer::Bytes(geometry_buf(1 << 40)));
    s.on(r"ioctl \\.\PhysicalDrive9 0x700a0", Answer::Win32Error(code::ERROR_FILE_NOT_FOUND));
    s.on(r"ioctl \\.\PhysicalDrive8 0x700a0", Answer::Win32Error(code::ERROR_PATH_NOT_FOUND));
    s.on(r"ioctl \\.\PhysicalDrive7 0x700a0", Answer::Bytes(vec![0; 4]));
    let d = disks(&s);
    assert_eq!(d.get_disk_stats(1).unwrap(), 1 << 40);
    for n in [9, 8] {
        let err = d.get_disk_stats(n).unwrap_err();
        assert!(matches!(&err, Error::NotFound(m) if m == &format!("disk {n} not found")), "{err:?}");
    }
    assert!(matches!(d.get_disk_stats(7), Err(Error::Internal(m)) if m.contains("DISK_GEOMETRY_EX")));
    s.assert_all_scripted();
}

const GET_ATTRS: &str = r"ioctl \\.\PhysicalDrive2 0x700f0";
const SET_ATTRS: &str = r"ioctl \\.\PhysicalDrive2 0x7c0f4 w";

#[test]
fn disk_state_reads_the_offline_attribute() {
    let s = Arc::new(Script::new());
    s.on(GET_ATTRS, Answer::Bytes(attributes_buf(DISK_ATTRIBUTE_OFFLINE | DISK_ATTRIBUTE_READ_ONLY)));
    s.on(r"ioctl \\.\PhysicalDrive3 0x700f0", Answer::Bytes(attributes_buf(DISK_ATTRIBUTE_READ_ONLY)));
    s.on(r"ioctl \\.\PhysicalDrive4 0x700f0", Answer::Win32Error(code::ERROR_FILE_NOT_FOUND));
    let d = disks(&s);
    assert!(!d.get_disk_state(2).unwrap());
    assert!(d.get_disk_state(3).unwrap());
    assert!(matches!(d.get_disk_state(4), Err(Error::NotFound(m)) if m == "disk 4 not found"));
}

#[test]
fn set_state_is_idempotent() {
    let offline_read_only = DISK_ATTRIBUTE_OFFLINE | DISK_ATTRIBUTE_READ_ONLY;
    for (attrs, online) in [(0, true), (DISK_ATTRIBUTE_OFFLINE, false), (offline_read_only, false)] {
        let s = Arc::new(Script::new());
        s.on(GET_ATTRS, Answer::Bytes(attributes_buf(attrs)));
        disks(&s).set_disk_state(2, online).unwrap();
        assert_eq!(s.log(), [GET_ATTRS], "attributes {attrs:#x}, online {online}");
    }
}

#[test]
fn set_state_changes_and_reads_back() {
    for online in [true, false] {
        let (before, after) = if online { (DISK_ATTRIBUTE_OFFLINE, 0) } else { (0, DISK_ATTRIBUTE_OFFLINE) };
        let s = Arc::new(Script::new());
        s.on(GET_ATTRS, Answer::Bytes(attributes_buf(before)));
        s.on(GET_ATTRS, Answer::Bytes(attributes_buf(after)));
        s.on(SET_ATTRS, Answer::Bytes(vec![]));
        disks(&s).set_disk_state(2, online).unwrap();
        // Taking a disk offline asks the interlock first.
        let expected: Vec<String> = if online {
            vec![GET_ATTRS.into(), SET_ATTRS.into(), GET_ATTRS.into()]
        } else {
            [vec![GET_ATTRS.into()], il(2), vec![SET_ATTRS.into(), GET_ATTRS.into()]].concat()
        };
        assert_eq!(s.log(), expected);
    }
}

/// SET_DISK_ATTRIBUTES as sent, field by field: (Version, Persist, Attributes, AttributesMask),
/// the reserved bytes checked to be zero.
fn sent_attributes(input: &[u8]) -> (u32, u8, u64, u64) {
    assert_eq!(input.len(), 40, "sizeof(SET_DISK_ATTRIBUTES)");
    assert!(input[5..8].iter().chain(&input[24..40]).all(|&b| b == 0), "Reserved1 and Reserved2: {input:?}");
    let u64_at = |at: usize| u64::from_le_bytes(input[at..at + 8].try_into().unwrap());
    (u32::from_le_bytes(input[0..4].try_into().unwrap()), input[4], u64_at(8), u64_at(16))
}

#[test]
fn online_also_clears_read_only_persistently() {
    let both = DISK_ATTRIBUTE_OFFLINE | DISK_ATTRIBUTE_READ_ONLY;
    // Re-attached read-only (csi-proxy#437), and offline and read-only (#287).
    for before in [DISK_ATTRIBUTE_READ_ONLY, both] {
        let s = Arc::new(Script::new());
        s.on(GET_ATTRS, Answer::Bytes(attributes_buf(before)));
        s.on(GET_ATTRS, Answer::Bytes(attributes_buf(0)));
        s.on(SET_ATTRS, Answer::Bytes(vec![]));
        disks(&s).set_disk_state(2, true).unwrap();
        assert_eq!(s.log(), [GET_ATTRS, SET_ATTRS, GET_ATTRS], "before {before:#x}");
        let sent = s.ioctl_inputs(SET_ATTRS);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent_attributes(&sent[0]), (40, 1, 0, both), "both bits cleared, persisted");
    }
    // Offline changes only the offline bit.
    let s = Arc::new(Script::new());
    s.on(GET_ATTRS, Answer::Bytes(attributes_buf(DISK_ATTRIBUTE_READ_ONLY)));
    s.on(GET_ATTRS, Answer::Bytes(attributes_buf(both)));
    s.on(SET_ATTRS, Answer::Bytes(vec![]));
    disks(&s).set_disk_state(2, false).unwrap();
    assert_eq!(sent_attributes(&s.ioctl_inputs(SET_ATTRS)[0]), (40, 1, DISK_ATTRIBUTE_OFFLINE, DISK_ATTRIBUTE_OFFLINE));
    // Read-only that does not clear (write-protected media): the call says so.
    let s = Arc::new(Script::new());
    s.on(GET_ATTRS, Answer::Bytes(attributes_buf(both)));
    s.on(GET_ATTRS, Answer::Bytes(attributes_buf(DISK_ATTRIBUTE_READ_ONLY)));
    s.on(SET_ATTRS, Answer::Bytes(vec![]));
    let err = disks(&s).set_disk_state(2, true).unwrap_err();
    assert!(matches!(&err, Error::Internal(m) if m.contains("disk 2 is still read-only")), "{err:?}");
}

#[test]
fn a_set_that_does_not_take_fails() {
    let s = Arc::new(Script::new());
    s.on(GET_ATTRS, Answer::Bytes(attributes_buf(DISK_ATTRIBUTE_OFFLINE)));
    s.on(SET_ATTRS, Answer::Bytes(vec![]));
    let err = disks(&s).set_disk_state(2, true).unwrap_err();
    assert!(matches!(&err, Error::Internal(m) if m.contains("disk 2 is still offline")), "{err:?}");
    assert_eq!(s.log(), [GET_ATTRS, SET_ATTRS, GET_ATTRS]);

    let s = Arc::new(Script::new());
    s.on(GET_ATTRS, Answer::Bytes(attributes_buf(0)));
    s.on(SET_ATTRS, Answer::Win32Error(code::ERROR_ACCESS_DENIED));
    let err = disks(&s).set_disk_state(2, false).unwrap_err();
    assert!(
        matches!(&err, Error::PermissionDenied(m) if m.contains("IOCTL_DISK_SET_DISK_ATTRIBUTES on disk 2")),
        "{err:?}"
    );
}

// ---- PartitionDisk ----

const DISK_PATH: &str = r#"\\H\ROOT\Microsoft\Windows\Storage:MSFT_Disk.ObjectId="{1}\\H\disk3""#;

fn disk_query(n: u32) -> Query {
    Query::select(Namespace::Storage, "MSFT_Disk", &["Number", "PartitionStyle", "IsOffline", "IsReadOnly"])
        .eq("Number", n)
}

fn partition_query(n: u32) -> Query {
    Query::select(Namespace::Storage, "MSFT_Partition", &["PartitionNumber", "GptType", "MbrType", "Size", "Offset"])
        .eq("DiskNumber", n)
}

fn disk_row(style: u16, offline: bool, read_only: bool) -> Row {
    Row::new("MSFT_Disk", DISK_PATH)
        .with("Number", 3u32)
        .with("PartitionStyle", style)
        .with("IsOffline", offline)
        .with("IsReadOnly", read_only)
}

fn gpt_partition(number: u32, gpt_type: &str) -> Row {
    Row::new("MSFT_Partition", format!("part{number}"))
        .with("PartitionNumber", number)
        .with("GptType", gpt_type)
        .with("MbrType", Value::Null)
        .with("Size", "1073741824")
        .with("Offset", "1048576")
}

fn mbr_partition(number: u32, mbr_type: u16) -> Row {
    Row::new("MSFT_Partition", format!("part{number}"))
        .with("PartitionNumber", number)
        .with("GptType", Value::Null)
        .with("MbrType", mbr_type)
}

const MSR_UPPER: &str = "{E3C9E316-0B5C-4DB8-817D-F92DF00215AE}";
const CREATE_GPT: &str = r#"[("UseMaximumSize", true), ("AssignDriveLetter", false), ("GptType", "{ebd0a0a2-b9e5-4433-87c0-68b6b72699c7}"), ("IsHidden", false), ("IsActive", false)]"#;
const CREATE_MBR: &str = r#"[("UseMaximumSize", true), ("AssignDriveLetter", false), ("MbrType", 7), ("IsHidden", false), ("IsActive", false)]"#;

const GET_ATTRS3: &str = r"ioctl \\.\PhysicalDrive3 0x700f0";

/// The disk's own attributes, as its MSFT_Disk `row` says they are (a cache that is current).
fn attributes_as(row: &Row) -> Answer {
    let bit = |name, bit| if row.bool(name).unwrap() { bit } else { 0 };
    Answer::Bytes(attributes_buf(
        bit("IsOffline", DISK_ATTRIBUTE_OFFLINE) | bit("IsReadOnly", DISK_ATTRIBUTE_READ_ONLY),
    ))
}

/// A disk that gets a partition: the partition list answers `before`, then `after`.
fn partitioning(disk: Row, before: Vec<Row>, after: Vec<Row>, create_code: u32) -> Arc<Script> {
    let s = Arc::new(Script::new());
    s.on(GET_ATTRS3, attributes_as(&disk));
    s.on_query(&disk_query(3), vec![disk]);
    s.on_query(&partition_query(3), before);
    s.on_query(&partition_query(3), after);
    s.on_call(DISK_PATH, "Initialize", returned(0));
    s.on_call(DISK_PATH, "CreatePartition", returned(create_code));
    s.on_call(DISK_PATH, "Refresh", returned(0));
    s.on_call("part2", "Online", returned(0));
    s
}

fn calls(s: &Script) -> Vec<String> {
    s.calls("call ")
}

/// A step that fails after an earlier one changed the disk says what was changed: CreatePartition
/// failing after Initialize, Online failing after CreatePartition.
#[test]
fn a_failure_part_way_says_what_was_already_changed() {
    // CreatePartition answers 40001 (access denied) after the disk was initialized.
    let s = partitioning(disk_row(0, false, false), vec![], vec![], 40001);
    let e = disks(&s).partition_disk(3).unwrap_err().to_string();
    assert!(
        e.contains("CreatePartition")
            && e.ends_with("; already changed before this failed: disk 3 was initialized as GPT"),
        "{e}"
    );
    // Online fails after the partition was created.
    let s = partitioning(disk_row(0, false, false), vec![], vec![gpt_partition(2, GPT_BASIC_DATA)], 0);
    s.take_first("call part2 Online");
    s.on_call("part2", "Online", returned(40001));
    let e = disks(&s).partition_disk(3).unwrap_err().to_string();
    assert!(
        e.contains("Online")
            && e.ends_with("already changed before this failed: disk 3 was initialized as GPT, a data partition was created on disk 3"),
        "{e}"
    );
    // Nothing changed yet: no such words.
    let s = partitioning(disk_row(2, false, false), vec![], vec![], 40001);
    let e = disks(&s).partition_disk(3).unwrap_err().to_string();
    assert!(!e.contains("already changed"), "{e}");
}

#[test]
fn a_raw_disk_is_initialized_as_gpt_and_partitioned() {
    let s = partitioning(
        disk_row(0, false, false),
        vec![gpt_partition(1, MSR_UPPER)],
        vec![gpt_partition(1, MSR_UPPER), gpt_partition(2, GPT_BASIC_DATA)],
        0,
    );
    disks(&s).partition_disk(3).unwrap();
    s.assert_all_scripted();
    let [disk_row, paths] = interlock::disk_query_lines(3);
    assert_eq!(
        s.log(),
        [
            disk_row,
            paths,
            "query SELECT Number, PartitionStyle, IsOffline, IsReadOnly FROM MSFT_Disk WHERE Number = 3".to_owned(),
            GET_ATTRS3.to_owned(),
            format!(r#"call {DISK_PATH} Initialize [("PartitionStyle", 2)]"#),
            "query SELECT PartitionNumber, GptType, MbrType, Size, Offset FROM MSFT_Partition WHERE DiskNumber = 3"
                .to_owned(),
            format!("call {DISK_PATH} CreatePartition {CREATE_GPT}"),
            format!("call {DISK_PATH} Refresh []"),
            "query SELECT PartitionNumber, GptType, MbrType, Size, Offset FROM MSFT_Partition WHERE DiskNumber = 3"
                .to_owned(),
            "call part2 Online []".to_owned(),
        ]
    );
}

#[test]
fn a_gpt_disk_with_only_an_msr_gets_a_partition() {
    let s = partitioning(
        disk_row(2, false, false),
        vec![gpt_partition(1, GPT_MSR)],
        vec![gpt_partition(1, GPT_MSR), gpt_partition(2, "{EBD0A0A2-B9E5-4433-87C0-68B6B72699C7}")],
        0,
    );
    disks(&s).partition_disk(3).unwrap();
    assert_eq!(
        calls(&s),
        [
            format!("call {DISK_PATH} CreatePartition {CREATE_GPT}"),
            format!("call {DISK_PATH} Refresh []"),
            "call part2 Online []".to_owned(),
        ]
    );
}

#[test]
fn a_partitioned_disk_is_left_alone() {
    let cases = [
        (2, vec![gpt_partition(1, GPT_MSR), gpt_partition(2, GPT_BASIC_DATA)]),
        // An EFI system partition counts too: the disk was laid out by someone.
        (2, vec![gpt_partition(1, "{c12a7328-f81f-11d2-ba4b-00a0c93ec93b}")]),
        (1, vec![mbr_partition(1, 7)]),
        (1, vec![mbr_partition(1, 0x83)]),
    ];
    for (style, parts) in cases {
        // Offline and read-only don't matter when there is nothing to do.
        let s = partitioning(disk_row(style, true, true), parts, vec![], 0);
        disks(&s).partition_disk(3).unwrap();
        assert_eq!(calls(&s), Vec::<String>::new(), "style {style}");
        assert_eq!(s.calls("query").len(), 4, "the interlock's two, the disk's and the partitions'");
    }
}

#[test]
fn an_mbr_disk_gets_an_ifs_partition() {
    let s = partitioning(disk_row(1, false, false), vec![], vec![mbr_partition(2, 7)], 0);
    disks(&s).partition_disk(3).unwrap();
    assert_eq!(
        calls(&s),
        [
            format!("call {DISK_PATH} CreatePartition {CREATE_MBR}"),
            format!("call {DISK_PATH} Refresh []"),
            "call part2 Online []".to_owned(),
        ]
    );
}

#[test]
fn access_path_in_use_is_tolerated() {
    let s = partitioning(disk_row(2, false, false), vec![], vec![gpt_partition(2, GPT_BASIC_DATA)], 42002);
    disks(&s).partition_disk(3).unwrap();
    assert_eq!(calls(&s).last().unwrap(), "call part2 Online []");
}

#[test]
fn create_partition_failures() {
    // Another code fails, naming it, and nothing follows.
    let s = partitioning(disk_row(2, false, false), vec![], vec![], 41004);
    let err = disks(&s).partition_disk(3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "WMI MSFT_Disk.CreatePartition on disk 3 failed: 41004 (the disk's partition limit has been reached)"
    );
    assert!(matches!(err, Error::FailedPrecondition(_)));
    assert_eq!(calls(&s).len(), 1);

    // Success, but still no data partition afterwards.
    let s = partitioning(disk_row(2, false, false), vec![], vec![gpt_partition(1, GPT_MSR)], 0);
    let err = disks(&s).partition_disk(3).unwrap_err();
    assert!(matches!(&err, Error::Internal(m) if m.contains("disk 3 has no data partition")), "{err:?}");
    assert!(s.calls("call part").is_empty());
}

#[test]
fn initialize_failure_names_the_code() {
    let s = Arc::new(Script::new());
    s.on_query(&disk_query(3), vec![disk_row(0, false, false)]);
    s.on(GET_ATTRS3, Answer::Bytes(attributes_buf(0)));
    s.on_call(DISK_PATH, "Initialize", returned(41001));
    let err = disks(&s).partition_disk(3).unwrap_err();
    assert_eq!(
        err.to_string(),
        "WMI MSFT_Disk.Initialize on disk 3 failed: 41001 (the disk has already been initialized)"
    );
    assert!(matches!(err, Error::FailedPrecondition(_)));
    assert_eq!(calls(&s).len(), 1);
}

#[test]
fn offline_or_read_only_disks_that_need_work_are_refused_before_any_write() {
    for (style, offline, read_only, why) in [
        (0, true, false, "offline"),
        (0, false, true, "read-only"),
        (2, true, false, "offline"),
        (1, false, true, "read-only"),
    ] {
        let s = partitioning(disk_row(style, offline, read_only), vec![], vec![], 0);
        let err = disks(&s).partition_disk(3).unwrap_err();
        assert!(matches!(&err, Error::FailedPrecondition(m) if m.contains(&format!("disk 3 is {why}"))), "{err:?}");
        assert!(calls(&s).is_empty());
    }
}

const RESCAN: &str = "call MSFT_StorageSetting UpdateHostStorageCache []";

/// R4: right after SetDiskState brought a disk online by IOCTL, the Storage provider's cached
/// MSFT_Disk can still say offline. PartitionDisk goes by the disk's own attribute, updates the
/// provider's cache (whose Initialize/CreatePartition would refuse an offline disk) and goes on.
/// That the cache lags, and that UpdateHostStorageCache refreshes IsOffline, shows only on
/// Windows (Wine has no Storage provider).
#[test]
fn a_disk_brought_online_by_ioctl_is_partitioned_though_the_cache_says_offline() {
    for style in [0u16, 2] {
        let s = Arc::new(Script::new());
        // The cache: stale (offline) first, current once updated.
        s.on_query(&disk_query(3), vec![disk_row(style, true, false)]);
        s.on_query(&disk_query(3), vec![disk_row(style, false, false)]);
        s.on(GET_ATTRS3, Answer::Bytes(attributes_buf(0)));
        s.on_call("MSFT_StorageSetting", "UpdateHostStorageCache", returned(0));
        s.on_query(&partition_query(3), vec![gpt_partition(1, GPT_MSR)]);
        s.on_query(&partition_query(3), vec![gpt_partition(1, GPT_MSR), gpt_partition(2, GPT_BASIC_DATA)]);
        s.on_call(DISK_PATH, "Initialize", returned(0));
        s.on_call(DISK_PATH, "CreatePartition", returned(0));
        s.on_call(DISK_PATH, "Refresh", returned(0));
        s.on_call("part2", "Online", returned(0));
        disks(&s).partition_disk(3).unwrap();
        s.assert_all_scripted();
        let log = s.log();
        let at = |line: &str| log.iter().position(|l| l.starts_with(line)).unwrap_or_else(|| panic!("{line}: {log:?}"));
        assert!(at(GET_ATTRS3) < at(RESCAN), "{log:?}");
        let first_write = if style == 0 { "Initialize" } else { "CreatePartition" };
        assert!(at(RESCAN) < at(&format!("call {DISK_PATH} {first_write}")), "{log:?}");
        assert_eq!(log.iter().filter(|l| l.starts_with("query SELECT Number, PartitionStyle")).count(), 2, "{log:?}");
        assert_eq!(calls(&s).last().unwrap(), "call part2 Online []");
    }
}

/// The other way round: a disk taken offline by IOCTL is refused although the cache still says
/// online; a read-only flag only the provider knows of (write-protected media) is refused too.
#[test]
fn the_disk_attribute_and_the_refreshed_cache_decide_before_any_write() {
    let s = Arc::new(Script::new());
    s.on_query(&disk_query(3), vec![disk_row(2, false, false)]);
    s.on_query(&disk_query(3), vec![disk_row(2, true, false)]);
    s.on(GET_ATTRS3, Answer::Bytes(attributes_buf(DISK_ATTRIBUTE_OFFLINE)));
    s.on_query(&partition_query(3), vec![]);
    s.on_call("MSFT_StorageSetting", "UpdateHostStorageCache", returned(0));
    let err = disks(&s).partition_disk(3).unwrap_err();
    assert!(matches!(&err, Error::FailedPrecondition(m) if m.contains("disk 3 is offline")), "{err:?}");
    assert_eq!(calls(&s), [RESCAN]);

    let s = Arc::new(Script::new());
    s.on_query(&disk_query(3), vec![disk_row(2, false, true)]);
    s.on(GET_ATTRS3, Answer::Bytes(attributes_buf(0)));
    s.on_query(&partition_query(3), vec![]);
    s.on_call("MSFT_StorageSetting", "UpdateHostStorageCache", returned(0));
    let err = disks(&s).partition_disk(3).unwrap_err();
    assert!(matches!(&err, Error::FailedPrecondition(m) if m.contains("disk 3 is read-only")), "{err:?}");
    assert_eq!(calls(&s), [RESCAN]);
}

#[test]
fn unknown_disks_and_styles() {
    let s = Arc::new(Script::new());
    s.on_query(&disk_query(3), vec![]);
    let err = disks(&s).partition_disk(3).unwrap_err();
    assert!(matches!(&err, Error::NotFound(m) if m == "disk 3 not found"), "{err:?}");

    let s = partitioning(disk_row(3, false, false), vec![], vec![], 0);
    assert!(matches!(disks(&s).partition_disk(3), Err(Error::Internal(m)) if m.contains("partition style 3")));
    assert!(calls(&s).is_empty());
}

#[test]
fn data_partition_rules() {
    assert!(!is_data_partition(2, &gpt_partition(1, GPT_MSR)).unwrap());
    assert!(!is_data_partition(2, &gpt_partition(1, MSR_UPPER)).unwrap());
    assert!(!is_data_partition(2, &gpt_partition(1, "e3c9e316-0b5c-4db8-817d-f92df00215ae")).unwrap());
    assert!(is_data_partition(2, &gpt_partition(1, GPT_BASIC_DATA)).unwrap());
    assert!(is_data_partition(2, &Row::new("MSFT_Partition", "p")).unwrap(), "unknown GPT type counts");
    assert!(!is_data_partition(1, &mbr_partition(1, 0)).unwrap());
    assert!(is_data_partition(1, &mbr_partition(1, 5)).unwrap());
}

// ---- Rescan and method errors ----

#[test]
fn rescan() {
    let s = Arc::new(Script::new());
    s.on_call("MSFT_StorageSetting", "UpdateHostStorageCache", returned(0));
    disks(&s).rescan().unwrap();
    assert_eq!(s.log(), ["call MSFT_StorageSetting UpdateHostStorageCache []"]);

    let s = Arc::new(Script::new());
    s.on_call("MSFT_StorageSetting", "UpdateHostStorageCache", returned(40001));
    let err = disks(&s).rescan().unwrap_err();
    assert!(matches!(err, Error::PermissionDenied(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        "WMI MSFT_StorageSetting.UpdateHostStorageCache on the host failed: 40001 (access denied)"
    );

    let s = Arc::new(Script::new());
    s.on(
        "call MSFT_StorageSetting UpdateHostStorageCache",
        Answer::WmiError(Error::FailedPrecondition, "no provider".into()),
    );
    assert!(matches!(disks(&s).rescan(), Err(Error::FailedPrecondition(_))));
}

#[test]
fn storage_method_errors_are_classified() {
    let kind = |code| match storage_method_error("MSFT_Volume", "Format", "volume x", code) {
        Error::FailedPrecondition(_) => "precondition",
        Error::PermissionDenied(_) => "denied",
        Error::Internal(_) => "internal",
        other => panic!("{other:?}"),
    };
    for code in [6, 4099, 41000, 41001, 41002, 41003, 41009, 42008, 42009, 42010, 43006] {
        assert_eq!(kind(code), "precondition", "{code}");
    }
    assert_eq!(kind(40001), "denied");
    for code in [1, 2, 4, 5, 41006, 43001, 99999] {
        assert_eq!(kind(code), "internal", "{code}");
    }
    assert_eq!(
        storage_method_error("MSFT_Partition", "Resize", "partition 2 of disk 1", 42009).to_string(),
        "WMI MSFT_Partition.Resize on partition 2 of disk 1 failed: 42009 (cannot resize a partition containing an unknown file system)"
    );
    assert!(storage_method_error("A", "B", "c", 12345).to_string().ends_with("12345 (undocumented return code)"));
}

// ---- ListDiskLocations ----

#[test]
fn locations_parse_upstreams_way() {
    let loc = |adapter: &str, bus: &str, target: &str, lun: &str| {
        Some(DiskLocation { adapter: adapter.into(), bus: bus.into(), target: target.into(), lun_id: lun.into() })
    };
    let cases = [
        // MSFT_Disk.Location as documented (a SCSI disk in a PCI slot).
        ("PCI Slot 3 : Adapter 0 : Port 0 : Target 1 : LUN 0", loc("0", "", "1", "0")),
        // Hyper-V / Azure data disk on storvsc (azuredisk-csi-driver#2365).
        ("Integrated : Adapter 3 : Port 0 : Target 0 : LUN 12", loc("3", "", "0", "12")),
        // Azure NVMe data disk (azuredisk-csi-driver#3632): Bus is taken, Device and Function
        // are unknown fields.
        ("Integrated : Bus 12606208 : Device 0 : Function 0 : Adapter 0", loc("0", "12606208", "", "")),
        // iSCSI initiator disk: the initiator's virtual adapter.
        ("Integrated : Adapter 2 : Port 1 : Target 0 : LUN 5", loc("2", "", "0", "5")),
        // IDE disk of a Hyper-V generation 1 VM.
        ("Integrated : Adapter 0 : Port 0 : Target 1 : LUN 0", loc("0", "", "1", "0")),
        // USB disks carry their hub port: too few parts.
        ("Port_#0002.Hub_#0004", None),
        ("", None),
        // Four parts are not enough.
        ("PCI Slot 3 : Adapter 0 : Target 1 : LUN 0", None),
        // Five parts but none of exactly two tokens.
        ("PCI Slot 3 : a b c : d e f : g h i : j k l", None),
        // Doubled spaces make three tokens; only "LUN 4" is read.
        ("x : Adapter  1 : Target  2 : LUN 4 : y", loc("", "", "", "4")),
        // Only unknown two-token fields: found, everything empty (as upstream).
        ("a : Port 0 : b : c : d", loc("", "", "", "")),
    ];
    for (location, want) in cases {
        assert_eq!(parse_location(location), want, "{location:?}");
    }
}

#[test]
fn list_disk_locations_leaves_out_what_does_not_parse() {
    let s = Arc::new(Script::new());
    s.on_query(
        &Query::select(Namespace::Storage, "MSFT_Disk", &["Number", "Location"]),
        vec![
            Row::new("MSFT_Disk", "d0")
                .with("Number", 0u32)
                .with("Location", "Integrated : Adapter 0 : Port 0 : Target 0 : LUN 0"),
            Row::new("MSFT_Disk", "d1").with("Number", 1u32).with("Location", "Port_#0002.Hub_#0004"),
            Row::new("MSFT_Disk", "d2").with("Number", 2u32),
            Row::new("MSFT_Disk", "d5")
                .with("Number", 5u32)
                .with("Location", "PCI Slot 3 : Adapter 1 : Port 0 : Target 2 : LUN 3"),
        ],
    );
    let got = disks(&s).list_disk_locations().unwrap();
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), [0, 5]);
    assert_eq!(got[&5], DiskLocation { adapter: "1".into(), bus: "".into(), target: "2".into(), lun_id: "3".into() });
    assert_eq!(s.log(), ["query SELECT Number, Location FROM MSFT_Disk"]);
}

// ---- interlocks ----

/// PartitionDisk and SetDiskState(offline) on the system's disks (MSFT_Disk's IsBoot, IsSystem,
/// BootFromDisk) and on a `-protected-disk` are refused before any write: the interlock's query
/// is the first call, and no method or attribute change follows.
#[test]
fn the_systems_disks_and_protected_ones_are_never_changed() {
    let flagged = |flag: &str| interlock::data_disk_row(3).with(flag, true);
    let located = interlock::data_disk_row(3)
        .with("SerialNumber", "  OS-DISK-7  ")
        .with("Location", "PCI Slot 3 : Adapter 0 : Port 0 : Target 0 : LUN 0");
    let cases: [(Row, Vec<ProtectedDisk>, &str); 6] = [
        (flagged("IsBoot"), vec![], "it holds the boot volume"),
        (flagged("IsSystem"), vec![], "it holds the system partition"),
        (flagged("BootFromDisk"), vec![], "the firmware boots from it"),
        (interlock::data_disk_row(3), vec![ProtectedDisk::Number(3)], "matches -protected-disk=3"),
        (
            located.clone(),
            vec!["serial=OS-*".parse().unwrap()],
            r#"matches -protected-disk=serial=OS-* (serial "OS-DISK-7""#,
        ),
        (located, vec!["location=0:*:0:0".parse().unwrap()], "matches -protected-disk=location=0:*:0:0"),
    ];
    for (row, protected, why) in cases {
        let s = partitioning(disk_row(0, false, false), vec![], vec![], 0);
        interlock::script_disk(&s, 3, row);
        s.on(GET_ATTRS3, Answer::Bytes(attributes_buf(0)));
        let d = Disks::new(s.clone(), s.clone()).protecting(protected);
        for (name, r) in [("PartitionDisk", d.partition_disk(3)), ("SetDiskState(offline)", d.set_disk_state(3, false))]
        {
            match r {
                Err(Error::FailedPrecondition(m)) => assert!(
                    m.starts_with(&format!("refusing {name} on disk 3: "))
                        && m.contains(why)
                        && m.ends_with("nothing was changed"),
                    "{name}: {m}"
                ),
                other => panic!("{name} ({why}): {other:?}"),
            }
        }
        assert_eq!(calls(&s), Vec::<String>::new(), "{why}");
        assert!(!s.log().iter().any(|l| l.contains("0x7c0f4")), "an attribute was set ({why}): {:?}", s.log());
    }
}

/// A disk whose volume holds a page file (the temporary disk's `D:\pagefile.sys` on Azure) or
/// the crash dump is the system's too: PartitionDisk and SetDiskState(offline) are refused, by
/// the real call and by its dry run, before anything is written. A page file elsewhere, or the
/// default dump path under `%SystemRoot%`, leaves a data disk alone.
#[test]
fn a_disk_holding_a_page_file_or_the_crash_dump_is_never_changed() {
    const VOL: &str = r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555}\";
    let paths = Row::new("MSFT_Partition", "p1").with("AccessPaths", Value::StrArray(vec![r"D:\".into(), VOL.into()]));
    let page_on =
        |letter: &str, id: &str| Row::new("Win32_Volume", "v").with("DriveLetter", letter).with("DeviceID", id);
    let dump = |path: &str, kind: u32| {
        Row::new("Win32_OSRecoveryConfiguration", "r").with("ExpandedDebugFilePath", path).with("DebugInfoType", kind)
    };
    type Case = (Vec<Row>, Vec<Row>, Option<&'static str>);
    let cases: [Case; 6] = [
        (
            vec![page_on("D:", r"\\?\Volume{other}\")],
            vec![dump(r"C:\Windows\MEMORY.DMP", 2)],
            Some("a page file is on its volume D:"),
        ),
        (vec![page_on("", VOL)], vec![], Some("a page file is on its volume \\\\?\\Volume{0a1b2c3d")),
        (vec![page_on("C:", r"\\?\Volume{c}\")], vec![dump(r"d:\dumps\MEMORY.DMP", 1)], Some("the crash dump file")),
        // No dump is written (DebugInfoType 0): its path does not matter.
        (vec![page_on("C:", r"\\?\Volume{c}\")], vec![dump(r"D:\MEMORY.DMP", 0)], None),
        (vec![page_on("C:", r"\\?\Volume{c}\")], vec![dump(r"C:\Windows\MEMORY.DMP", 2)], None),
        (vec![], vec![dump(r"E:\MEMORY.DMP", 2)], None),
    ];
    for (pages, dumps, why) in cases {
        let s = partitioning(disk_row(2, false, false), vec![gpt_partition(2, GPT_BASIC_DATA)], vec![], 0);
        s.on_query(&interlock::disk_query(3), vec![interlock::data_disk_row(3)]);
        s.on_query(&interlock::access_paths_query(3), vec![paths.clone()]);
        s.on_query(&interlock::page_file_query(), pages);
        s.on_query(&interlock::dump_query(), dumps);
        let d = Disks::new(s.clone(), s.clone());
        let results = [
            ("PartitionDisk", d.plan_partition_disk(3).map(drop)),
            ("PartitionDisk", d.partition_disk(3)),
            ("SetDiskState(offline)", d.set_disk_state(3, false)),
        ];
        for (name, r) in results {
            match (why, r) {
                (Some(why), Err(Error::FailedPrecondition(m))) => assert!(
                    m.starts_with(&format!("refusing {name} on disk 3: disk 3 is the system's: ")) && m.contains(why),
                    "{name}: {m}"
                ),
                (None, Err(Error::FailedPrecondition(m))) => panic!("{name} refused a data disk: {m}"),
                (None, _) => {}
                (Some(why), other) => panic!("{name} ({why}): {other:?}"),
            }
        }
        if why.is_some() {
            assert_eq!(calls(&s), Vec::<String>::new(), "{why:?}");
            assert!(!s.log().iter().any(|l| l.contains("0x7c0f4")), "an attribute was set ({why:?}): {:?}", s.log());
        }
    }
}

/// PartitionDisk's and SetDiskState's dry runs say what the call would do, and call no WMI
/// method and set no attribute: a raw disk would be initialized, a partitioned one left.
#[test]
fn dry_runs_of_the_disk_calls_plan_and_write_nothing() {
    let s = partitioning(disk_row(0, false, false), vec![], vec![], 0);
    let d = disks(&s);
    let plan = d.plan_partition_disk(3).unwrap();
    assert!(plan.contains("would initialize disk 3 as GPT"), "{plan}");
    let s2 = partitioning(disk_row(2, false, false), vec![gpt_partition(2, GPT_BASIC_DATA)], vec![], 0);
    let plan = disks(&s2).plan_partition_disk(3).unwrap();
    assert!(plan.contains("already has a data partition: nothing would change"), "{plan}");
    let s3 = partitioning(disk_row(0, true, false), vec![], vec![], 0);
    let e = disks(&s3).plan_partition_disk(3).unwrap_err();
    assert!(e.to_string().contains("disk 3 is offline"), "{e}");
    s.on(GET_ATTRS3, Answer::Bytes(attributes_buf(0)));
    let plan = d.plan_set_disk_state(3, false).unwrap();
    assert!(plan.contains("would set disk 3 offline") && plan.contains("it is now online"), "{plan}");
    let plan = d.plan_set_disk_state(3, true).unwrap();
    assert!(plan.contains("already online and writable: nothing would change"), "{plan}");
    for s in [&s, &s2, &s3] {
        assert_eq!(calls(s), Vec::<String>::new());
        assert!(!s.log().iter().any(|l| l.contains("0x7c0f4")), "an attribute was set: {:?}", s.log());
    }
}

/// A data disk, protected or not by a pattern that names another, is partitioned as before.
#[test]
fn a_data_disk_not_named_by_a_protection_is_partitioned() {
    let s = partitioning(
        disk_row(2, false, false),
        vec![gpt_partition(1, GPT_MSR)],
        vec![gpt_partition(1, GPT_MSR), gpt_partition(2, GPT_BASIC_DATA)],
        0,
    );
    interlock::script_disk(&s, 3, interlock::data_disk_row(3).with("SerialNumber", "DATA-1"));
    let d = Disks::new(s.clone(), s.clone()).protecting(vec!["serial=OS-*".parse().unwrap(), ProtectedDisk::Number(0)]);
    d.partition_disk(3).unwrap();
    assert_eq!(calls(&s).last().unwrap(), "call part2 Online []");
}
