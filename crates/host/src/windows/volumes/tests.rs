use super::*;
use crate::interlock::ProtectedDisk;
use crate::paths::Roots;
use crate::windows::code::*;
use crate::windows::interlock;
use crate::windows::script::{returned, Answer, Script};

const V1: &str = r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555}\";
const V2: &str = r"\\?\Volume{9f8e7d6c-aaaa-bbbb-cccc-ddddeeeeffff}\";
const V3: &str = r"\\?\Volume{11111111-2222-3333-4444-555555555555}\";
const CDROM: &str = r"\\?\Volume{deadbeef-0000-0000-0000-000000000000}\";
const ROOT: &str = r"C:\root";
const MNT: &str = r"C:\root\pv\mnt";
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The group over `s`, where disks 0 to 7 are data disks to the interlocks and the test volumes
/// have no mount point (a test may script its own answers after these: the first scripted is
/// given first).
fn volumes(s: &Arc<Script>) -> Volumes<Arc<Script>> {
    for n in 0..8 {
        interlock::script_disk(s, n, interlock::data_disk_row(n));
    }
    for id in [V1, V2, V3] {
        s.on(format!("mount_points_of {id}"), Answer::Strings(vec![]));
    }
    Volumes::new(s.clone(), s.clone(), Containment::new(s.clone(), Roots::new(vec![ROOT.into()])))
}

/// What the interlocks log for volume `id` on disk `disk`: the disk's queries, the mount points.
fn interlock_lines(id: &str, disk: u32) -> [String; 3] {
    let [disk_row, paths] = interlock::disk_query_lines(disk);
    [disk_row, paths, format!("mount_points_of {id}")]
}

fn setup() -> (Arc<Script>, Volumes<Arc<Script>>) {
    let s = Arc::new(Script::new());
    let v = volumes(&s);
    s.root(ROOT);
    (s, v)
}

/// `path` split into its parent and its name.
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('\\').unwrap()
}

/// `\\?\{path}`, as the held target's canonical path is spelled for the Win32 calls.
fn verbatim(path: &str) -> String {
    format!(r"\\?\{path}")
}

/// The calls of the log without the handles' closing.
fn calls(s: &Script) -> Vec<String> {
    s.log().into_iter().filter(|l| !l.starts_with("close ")).collect()
}

/// What containment calls for `path` when its parent exists and is canonical: the root is
/// resolved, the parent opened by path and held, the target opened through it and held.
fn contained(path: &str) -> Vec<String> {
    let (dir, name) = split(path);
    let (d, root) = (verbatim(dir), verbatim(ROOT));
    vec![
        format!("open {root} look"),
        format!("final_path {root}"),
        format!("close {root}"),
        format!("open {d} hold"),
        format!("final_path {d}"),
        format!("attributes_of {d}"),
        format!("open_at {d} {name} entry"),
        format!(r"attributes_of {d}\{name}"),
    ]
}

/// The held target's handles closing: the parent's, then the target's.
fn released(path: &str) -> Vec<String> {
    let dir = split(path).0;
    vec![format!("close {}", verbatim(dir)), format!("close {}", verbatim(path))]
}

fn device(id: &str) -> &str {
    id.trim_end_matches('\\')
}

fn upper_guid(id: &str) -> String {
    id.replace("Volume{", "VOLUME{").to_uppercase().replace("VOLUME{", "Volume{")
}

/// VOLUME_DISK_EXTENTS, field by field.
fn extents_buf(list: &[(u32, i64, i64)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend((list.len() as u32).to_le_bytes()); // NumberOfDiskExtents
    b.extend([0; 4]); // padding
    for (disk, start, len) in list {
        b.extend(disk.to_le_bytes()); // DiskNumber
        b.extend([0; 4]); // padding
        b.extend(start.to_le_bytes()); // StartingOffset
        b.extend(len.to_le_bytes()); // ExtentLength
    }
    b
}

/// PARTITION_INFORMATION_EX of a GPT basic data partition, field by field.
fn partition_buf(number: u32, length: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(1u32.to_le_bytes()); // PartitionStyle: GPT
    b.extend([0; 4]); // padding
    b.extend((16i64 << 20).to_le_bytes()); // StartingOffset
    b.extend((length as i64).to_le_bytes()); // PartitionLength
    b.extend(number.to_le_bytes()); // PartitionNumber
    b.extend([0, 0, 0, 0]); // RewritePartition, IsServicePartition, padding
    b.extend([0xa2, 0xa0, 0xd0, 0xeb, 0xe5, 0xb9, 0x33, 0x44, 0x87, 0xc0, 0x68, 0xb6, 0xb7, 0x26, 0x99, 0xc7]); // Gpt.PartitionType
    b.extend([7; 16]); // Gpt.PartitionId
    b.extend(0u64.to_le_bytes()); // Gpt.Attributes
    b.extend([0; 72]); // Gpt.Name
    b
}

fn on_extents(s: &Script, id: &str, list: &[(u32, i64, i64)]) {
    s.on(format!("ioctl {} 0x560000", device(id)), Answer::Bytes(extents_buf(list)));
}

fn on_partition(s: &Script, id: &str, number: u32, length: u64) {
    s.on(format!("ioctl {} 0x70048", device(id)), Answer::Bytes(partition_buf(number, length)));
}

/// A plain directory at `path`, in a parent that resolves to itself.
fn plain_dir(s: &Script, path: &str) {
    let (dir, name) = split(path);
    s.held_dir(dir).entry(dir, name, attr::DIRECTORY);
}

/// A mount point of `volume` at `path` (whose parent resolves to itself).
fn mount_point(s: &Script, path: &str, volume: &str) {
    let (dir, name) = split(path);
    s.held_dir(dir).entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
    s.on(format!(r"volume_name_for_mount_point {path}\"), Answer::Str(volume.into()));
}

/// Nothing at `path`, in a parent that resolves to itself.
fn nothing_at(s: &Script, path: &str) {
    let (dir, name) = split(path);
    s.held_dir(dir).no_entry(dir, name);
}

#[test]
fn volume_ids_are_checked_before_any_host_call() {
    let bad = [
        "",
        "Volume{0a1b2c3d-0000-1111-2222-333344445555}",
        r"\\.\Volume{0a1b2c3d-0000-1111-2222-333344445555}\",
        r"\??\Volume{0a1b2c3d-0000-1111-2222-333344445555}\",
        r"\\?\volume{0a1b2c3d-0000-1111-2222-333344445555}\",
        r"\\?\Volume{0a1b2c3d-0000-1111-2222-33334444555}\",
        r"\\?\Volume{0a1b2c3d-0000-1111-2222-33334444555g}\",
        r"\\?\Volume{0a1b2c3d00000-1111-2222-333344445555}\",
        r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555}\\",
        r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555}\x",
        r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555} ",
        "\\\\?\\Volume{0a1b2c3d-0000-1111-2222-333344445555}\n",
        r"\\?\C:\",
        r"C:\",
        r"\\?\GLOBALROOT\Device\HarddiskVolume1",
    ];
    let (s, v) = setup();
    for id in bad {
        let calls: Vec<(&str, Result<()>)> = vec![
            ("mount", v.mount_volume(id, MNT)),
            ("unmount", v.unmount_volume(id, MNT)),
            ("formatted", v.is_volume_formatted(id).map(drop)),
            ("format", v.format_volume(id)),
            ("resize", v.resize_volume(id, 0)),
            ("stats", v.get_volume_stats(id).map(drop)),
            ("disk", v.get_disk_number_from_volume_id(id).map(drop)),
            ("flush", v.write_volume_cache(id)),
        ];
        for (rpc, r) in calls {
            match r {
                Err(Error::InvalidArgument(m)) => {
                    assert!(m.contains(&shown(id)) && m.contains(ID_FORM), "{rpc} {id:?}: {m}")
                }
                other => panic!("{rpc} {id:?}: {other:?}"),
            }
        }
    }
    assert_eq!(s.log(), Vec::<String>::new(), "no host call for a bad ID");

    let good = VolumeId::parse(V1).unwrap();
    assert_eq!((good.id.as_str(), good.device.as_str()), (V1, device(V1)));
    assert_eq!(VolumeId::parse(device(V1)).unwrap(), good);
    let upper = upper_guid(V1);
    assert!(upper.contains("0A1B2C3D") && upper.starts_with(r"\\?\Volume{"));
    assert_eq!(VolumeId::parse(&upper).unwrap().id, upper);
    assert!(good.is(&upper) && good.is(device(&upper)) && !good.is(V2));
}

#[test]
fn volumes_are_listed_by_disk_and_partition_and_failing_ones_skipped() {
    let (s, v) = setup();
    s.on("volumes", Answer::Strings(vec![V1.into(), CDROM.into(), V2.into(), V3.into()]));
    on_extents(&s, V1, &[(1, 300 << 20, 5 << 30)]);
    on_partition(&s, V1, 2, 5 << 30);
    on_extents(&s, V2, &[(1, 16 << 20, 1 << 28)]);
    on_partition(&s, V2, 1, 1 << 28);
    on_extents(&s, V3, &[(2, 16 << 20, 1 << 30)]);
    on_partition(&s, V3, 1, 1 << 30);
    s.on(format!("ioctl {} 0x560000", device(CDROM)), Answer::Win32Error(ERROR_INVALID_FUNCTION));

    assert_eq!(v.list_volumes_on_disk(1, 0).unwrap(), [V2, V1], "sorted by partition number");
    assert_eq!(v.list_volumes_on_disk(1, 2).unwrap(), [V1]);
    assert_eq!(v.list_volumes_on_disk(1, 1).unwrap(), [V2]);
    assert_eq!(v.list_volumes_on_disk(2, 0).unwrap(), [V3]);
    assert_eq!(v.list_volumes_on_disk(1, 5).unwrap(), Vec::<String>::new());
    assert_eq!(v.list_volumes_on_disk(9, 0).unwrap(), Vec::<String>::new(), "unknown disk");
    s.assert_all_scripted();
    // The CD-ROM was asked once per listing and never for its partition.
    assert_eq!(s.calls(&format!("ioctl {}", device(CDROM))).len(), 6);
    assert!(s.calls(&format!("ioctl {} 0x70048", device(CDROM))).is_empty());
    // A volume on another disk is not asked for its partition.
    assert_eq!(s.calls(&format!("ioctl {} 0x70048", device(V3))).len(), 1, "only when listing disk 2");
}

#[test]
fn listing_keeps_a_volume_without_partition_information_last_and_skips_garbage() {
    let (s, v) = setup();
    s.on("volumes", Answer::Strings(vec![V1.into(), V2.into(), V3.into()]));
    on_extents(&s, V1, &[(4, 0, 1 << 30)]);
    s.on(format!("ioctl {} 0x70048", device(V1)), Answer::Win32Error(ERROR_NOT_SUPPORTED));
    on_extents(&s, V2, &[(3, 0, 1 << 30), (4, 0, 1 << 30)]);
    on_partition(&s, V2, 3, 1 << 30);
    // Claims two extents but holds one: skipped, not a panic and not an error.
    let mut short = extents_buf(&[(4, 0, 1 << 30)]);
    short[0] = 2;
    s.on(format!("ioctl {} 0x560000", device(V3)), Answer::Bytes(short));
    assert_eq!(v.list_volumes_on_disk(4, 0).unwrap(), [V2, V1]);
    assert_eq!(v.list_volumes_on_disk(4, 3).unwrap(), [V2]);
    s.assert_all_scripted();
}

#[test]
fn mounting_in_a_fresh_directory() {
    let (s, v) = setup();
    plain_dir(&s, MNT);
    s.on(format!(r"set_mount_point {MNT}\ {V1}"), Answer::Done);
    // The target is normalised: drive upper case, trailing and doubled separators dropped (it is
    // the held target's canonical path), and held until the mount point is set.
    v.mount_volume(device(V1), r"c:\root\\pv\mnt\").unwrap();
    let mut want = contained(MNT);
    want.push(format!(r"set_mount_point {MNT}\ {V1}"));
    want.extend(released(MNT));
    assert_eq!(s.log(), want);
}

#[test]
fn mount_targets_are_acted_on_by_the_held_canonical_path() {
    // A link on the way inside the roots: C:\root\link -> C:\root\real. Every call after the
    // check names the place the held handles are on, and they are released only afterwards.
    let target = r"C:\root\link\mnt";
    let real = r"C:\root\real\mnt";
    let (s, v) = setup();
    s.resolved_dir(r"C:\root\link", r"C:\root\real").entry(r"C:\root\link", "mnt", attr::DIRECTORY);
    s.on(format!(r"set_mount_point {real}\ {V1}"), Answer::Done);
    v.mount_volume(V1, target).unwrap();
    let log = s.log();
    let set = log.iter().position(|l| l.starts_with("set_mount_point ")).unwrap();
    assert_eq!(log[set], format!(r"set_mount_point {real}\ {V1}"));
    assert_eq!(log[set + 1..], [r"close \\?\C:\root\link", r"close \\?\C:\root\link\mnt"], "{log:#?}");
    assert!(log.iter().all(|l| !l.starts_with("open ") || !l.contains("mnt")), "the target is never opened by path");
    s.assert_all_scripted();

    // Unmounting, and asking for the volume, likewise.
    let (s, v) = setup();
    s.resolved_dir(r"C:\root\link", r"C:\root\real")
        .entry(r"C:\root\link", "mnt", attr::DIRECTORY | attr::REPARSE_POINT)
        .on(format!(r"volume_name_for_mount_point {real}\"), Answer::Str(V1.into()))
        .on(format!(r"volume_name_for_mount_point \\?\{real}\"), Answer::Str(V1.into()))
        .on(format!("flush {}", device(V1)), Answer::Done)
        .on(format!(r"delete_mount_point {real}\"), Answer::Done)
        .on(format!(r"volume_path_name \\?\{real}"), Answer::Str(format!(r"\\?\{real}\")));
    v.unmount_volume(V1, target).unwrap();
    let log = s.log();
    let delete = log.iter().position(|l| l.starts_with("delete_mount_point ")).unwrap();
    assert!(log[delete + 1..].iter().all(|l| l.starts_with("close ")) && log.len() == delete + 3, "{log:#?}");
    assert_eq!(v.get_volume_id_from_target_path(target).unwrap(), V1);
    s.assert_all_scripted();
    let paths: Vec<String> = s.calls("volume_").into_iter().chain(s.calls("delete_mount_point ")).collect();
    assert!(paths.len() == 5 && paths.iter().all(|l| l.contains(real)), "{paths:#?}");
}

#[test]
fn remounting_the_same_volume_succeeds_whatever_the_case_of_its_guid() {
    let (s, v) = setup();
    mount_point(&s, MNT, &upper_guid(V1));
    v.mount_volume(V1, MNT).unwrap();
    assert!(s.calls("set_mount_point").is_empty());
    s.assert_all_scripted();

    // A plain directory that turns into the mount point before SetVolumeMountPointW.
    let (s, v) = setup();
    plain_dir(&s, MNT);
    s.on(format!(r"set_mount_point {MNT}\ {V1}"), Answer::Win32Error(ERROR_DIR_NOT_EMPTY));
    s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Str(upper_guid(V1)));
    v.mount_volume(V1, MNT).unwrap();
    assert_eq!(calls(&s).last().unwrap(), &format!(r"volume_name_for_mount_point {MNT}\"));
}

#[test]
fn mounting_over_another_volume_or_a_full_directory_is_refused() {
    let (s, v) = setup();
    mount_point(&s, MNT, V2);
    match v.mount_volume(V1, MNT) {
        Err(Error::FailedPrecondition(m)) => assert!(m.contains(V2) && m.contains(MNT) && m.contains(V1), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(s.calls("set_mount_point").is_empty());

    let (s, v) = setup();
    plain_dir(&s, MNT);
    s.on(format!(r"set_mount_point {MNT}\ {V1}"), Answer::Win32Error(ERROR_DIR_NOT_EMPTY));
    s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Win32Error(ERROR_NOT_A_REPARSE_POINT));
    match v.mount_volume(V1, MNT) {
        Err(Error::FailedPrecondition(m)) => assert!(m.contains("not empty") && m.contains(MNT), "{m}"),
        other => panic!("{other:?}"),
    }

    // A file is no place for a mount.
    let (s, v) = setup();
    let (dir, name) = split(MNT);
    s.held_dir(dir).entry(dir, name, 0x20);
    assert!(matches!(v.mount_volume(V1, MNT), Err(Error::FailedPrecondition(m)) if m.contains("not a directory")));
    assert!(s.calls("set_mount_point").is_empty());
}

/// MountVolume's dry run: the plan for a fresh directory, the real call's refusal over another
/// volume, and never a mount point set.
#[test]
fn dry_runs_of_mount_plan_or_refuse_as_the_real_call() {
    let (s, v) = setup();
    plain_dir(&s, MNT);
    let plan = v.plan_mount_volume(V1, MNT).unwrap();
    assert!(plan.starts_with(&format!("would mount volume {V1} at")), "{plan}");
    assert!(s.calls("set_mount_point").is_empty());
    let (s, v) = setup();
    mount_point(&s, MNT, V2);
    let (plan, real) = (v.plan_mount_volume(V1, MNT).unwrap_err(), v.mount_volume(V1, MNT).unwrap_err());
    assert_eq!(plan.to_string(), real.to_string());
    assert!(matches!(plan, Error::FailedPrecondition(_)), "{plan:?}");
    assert!(s.calls("set_mount_point").is_empty());
}

#[test]
fn mount_targets_outside_the_roots_are_refused_without_a_mount() {
    for target in [r"D:\x", r"C:\rootx", r"C:\rootx\mnt", r"C:\", r"C:\other\root\x", r"C:\ROOT"] {
        let (s, v) = setup();
        match v.mount_volume(V1, target) {
            Err(Error::PermissionDenied(m)) => assert!(m.contains(target) && m.contains(r"[C:\root]"), "{target}: {m}"),
            other => panic!("{target}: {other:?}"),
        }
        assert_eq!(s.log(), Vec::<String>::new(), "{target}: refused by name, before any call");
    }
    // Not a path at all.
    let (_, v) = setup();
    assert!(matches!(v.mount_volume(V1, r"root\pv"), Err(Error::InvalidArgument(_))));
    assert!(matches!(v.mount_volume(V1, r"C:\root\..\x"), Err(Error::InvalidArgument(_))));
}

#[test]
fn mount_targets_escaping_through_a_junction_are_refused() {
    // A junction on the way: C:\root\link -> D:\outside.
    let (s, v) = setup();
    let target = r"C:\root\link\mnt";
    s.resolved_dir(r"C:\root\link", r"D:\outside");
    match v.mount_volume(V1, target) {
        Err(Error::PermissionDenied(m)) => {
            // Where it leads is not told (see `Roots::outside`).
            assert!(m.contains(target) && !m.contains(r"D:\outside") && m.contains(ROOT), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert!(s.calls("set_mount_point").is_empty());
    assert!(s.calls("open_at").is_empty(), "nothing is opened below a junction leading out");

    // The target itself a junction leading out.
    let (s, v) = setup();
    let (dir, name) = split(MNT);
    s.held_dir(dir).entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
    s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Win32Error(ERROR_NOT_A_REPARSE_POINT));
    s.link_to(dir, name, r"C:\Windows");
    s.on("volume_path mnt followed", Answer::Str(format!(r"{V3}Windows")));
    s.on(format!(r"volume_mount_points {V3}"), Answer::Strings(vec![r"C:\".into()]));
    assert!(
        matches!(v.mount_volume(V1, MNT), Err(Error::PermissionDenied(m)) if m.contains(MNT) && !m.contains(r"C:\Windows"))
    );
    assert!(s.calls("set_mount_point").is_empty());
    s.assert_all_scripted();

    // A junction to the root itself is the root: the target itself one, or one on the way
    // (C:\root\pv -> C:\, so that C:\root\pv\ROOT is C:\ROOT).
    let (s, v) = setup();
    s.held_dir(dir).entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
    s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Win32Error(ERROR_NOT_A_REPARSE_POINT));
    s.link_to(dir, name, r"c:\ROOT\");
    assert!(matches!(v.mount_volume(V1, MNT), Err(Error::PermissionDenied(m)) if m.contains("itself")));
    assert!(s.calls("set_mount_point").is_empty());
    let (s, v) = setup();
    s.resolved_dir(dir, r"c:\").entry(dir, "ROOT", attr::DIRECTORY);
    assert!(matches!(v.mount_volume(V1, r"C:\root\pv\ROOT"), Err(Error::PermissionDenied(m)) if m.contains("itself")));
    assert!(s.calls("set_mount_point").is_empty());

    // A link inside the roots that is not a mount point is no mount target either.
    let (s, v) = setup();
    s.held_dir(dir).entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
    s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Win32Error(ERROR_INVALID_PARAMETER));
    s.link_to(dir, name, r"C:\root\elsewhere");
    assert!(matches!(v.mount_volume(V1, MNT), Err(Error::FailedPrecondition(m)) if m.contains("is a link")));
    assert!(s.calls("set_mount_point").is_empty());
}

/// R3: GetVolumeNameForVolumeMountPointW's page lists no error codes. For a reparse point that
/// is no volume mount point (a symbolic link, a junction) the System Error Codes that say so are
/// "not a mount point", so the target is judged as the link it is rather than failing Internal.
/// Which code Windows really gives each kind shows only there: conformance check
/// `get-volume-name-of-a-link-says-not-a-mount-point`.
#[test]
fn links_answering_any_not_a_mount_point_code_are_links() {
    let (dir, name) = split(MNT);
    for code in [ERROR_REPARSE_TAG_MISMATCH, ERROR_REPARSE_TAG_INVALID, ERROR_INVALID_REPARSE_DATA] {
        let (s, v) = setup();
        s.held_dir(dir).entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
        s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Win32Error(code));
        s.link_to(dir, name, r"C:\root\elsewhere");
        let err = v.mount_volume(V1, MNT).unwrap_err();
        assert!(matches!(&err, Error::FailedPrecondition(m) if m.contains("is a link")), "{code}: {err:?}");
        assert!(s.calls("set_mount_point").is_empty());
        // A link leading out is refused as such.
        let (s, v) = setup();
        s.held_dir(dir).entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
        s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Win32Error(code));
        s.link_to(dir, name, r"C:\Windows");
        assert!(matches!(v.mount_volume(V1, MNT), Err(Error::PermissionDenied(_))), "{code}");
    }
}

#[test]
fn mounting_needs_an_existing_target_and_root() {
    let (s, v) = setup();
    nothing_at(&s, MNT);
    match v.mount_volume(V1, MNT) {
        Err(Error::NotFound(m)) => assert!(m.contains(MNT) && m.contains(V1), "{m}"),
        other => panic!("{other:?}"),
    }
    let (mut want, (dir, name)) = (contained(MNT), split(MNT));
    want.truncate(want.len() - 1);
    want.push(format!("close {}", verbatim(dir)));
    assert_eq!(s.log(), want, "nothing but the check that {name} is not there");

    // The root itself is missing: the directory can't be checked.
    let s = Arc::new(Script::new());
    let v = volumes(&s);
    plain_dir(&s, MNT);
    s.on(format!("open {} look", verbatim(ROOT)), Answer::Win32Error(ERROR_FILE_NOT_FOUND));
    assert!(matches!(v.mount_volume(V1, MNT), Err(Error::FailedPrecondition(m)) if m.contains("does not exist")));
    assert!(s.calls("set_mount_point").is_empty());

    // An unknown volume.
    let (s, v) = setup();
    plain_dir(&s, MNT);
    s.on(format!(r"set_mount_point {MNT}\ {V1}"), Answer::Win32Error(ERROR_FILE_NOT_FOUND));
    assert!(matches!(v.mount_volume(V1, MNT), Err(Error::NotFound(m)) if m.contains(V1)));
}

#[test]
fn unmounting_flushes_then_removes_only_our_mount_point() {
    let (s, v) = setup();
    mount_point(&s, MNT, &upper_guid(V1));
    s.on(format!("flush {}", device(V1)), Answer::Done);
    s.on(format!(r"delete_mount_point {MNT}\"), Answer::Done);
    v.unmount_volume(V1, MNT).unwrap();
    let log = s.log();
    let flush = log.iter().position(|l| l.starts_with("flush ")).unwrap();
    let delete = log.iter().position(|l| l.starts_with("delete_mount_point ")).unwrap();
    assert!(flush < delete, "{log:#?}");
    // The last call, made while the target is held.
    assert_eq!(log[delete + 1..], released(MNT));
    s.assert_all_scripted();
}

#[test]
fn unmounting_is_idempotent_and_leaves_other_volumes_alone() {
    // Nothing mounted: a plain directory.
    let (s, v) = setup();
    plain_dir(&s, MNT);
    s.on(format!("flush {}", device(V1)), Answer::Done);
    v.unmount_volume(V1, MNT).unwrap();
    assert!(s.calls("delete_mount_point").is_empty());
    s.assert_all_scripted();

    // No directory at all.
    let (s, v) = setup();
    nothing_at(&s, MNT);
    s.on(format!("flush {}", device(V1)), Answer::Done);
    v.unmount_volume(V1, MNT).unwrap();
    assert!(s.calls("delete_mount_point").is_empty());

    // Another volume mounted there.
    let (s, v) = setup();
    mount_point(&s, MNT, V2);
    s.on(format!("flush {}", device(V1)), Answer::Done);
    match v.unmount_volume(V1, MNT) {
        Err(Error::FailedPrecondition(m)) => assert!(m.contains(V2) && m.contains(V1) && m.contains(MNT), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(s.calls("delete_mount_point").is_empty());

    // An unknown volume.
    let (s, v) = setup();
    plain_dir(&s, MNT);
    s.on(format!("flush {}", device(V1)), Answer::Win32Error(ERROR_FILE_NOT_FOUND));
    assert!(matches!(v.unmount_volume(V1, MNT), Err(Error::NotFound(m)) if m.contains(V1)));

    // Outside the roots: nothing touched.
    let (s, v) = setup();
    assert!(matches!(v.unmount_volume(V1, r"C:\rootx\m"), Err(Error::PermissionDenied(_))));
    assert!(s.log().is_empty());
}

#[test]
fn formatted_means_a_recognised_filesystem() {
    let (s, v) = setup();
    let key = format!("filesystem_name {V1}");
    s.on(&key, Answer::Str("RAW".into()))
        .on(&key, Answer::Str("NTFS".into()))
        .on(&key, Answer::Str("ReFS".into()))
        .on(&key, Answer::Win32Error(ERROR_UNRECOGNIZED_VOLUME))
        .on(&key, Answer::Win32Error(ERROR_FILE_NOT_FOUND));
    assert!(!v.is_volume_formatted(V1).unwrap());
    assert!(v.is_volume_formatted(device(V1)).unwrap(), "the trailing backslash is added");
    assert!(v.is_volume_formatted(V1).unwrap());
    assert!(!v.is_volume_formatted(V1).unwrap());
    assert!(matches!(v.is_volume_formatted(V1), Err(Error::NotFound(m)) if m.contains(V1)));
    s.assert_all_scripted();
}

#[test]
fn a_formatted_volume_is_never_formatted_again() {
    let (s, v) = setup();
    s.on(format!("filesystem_name {V1}"), Answer::Str("NTFS".into()));
    match v.format_volume(V1) {
        Err(Error::FailedPrecondition(m)) => assert!(m.contains(V1) && m.contains("NTFS"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(s.log(), [format!("filesystem_name {V1}")]);
}

fn volume_query() -> Query {
    Query::select(Namespace::Storage, "MSFT_Volume", &["UniqueId", "FileSystemType"]).eq("UniqueId", V1)
}

#[test]
fn formatting_calls_msft_volume_format_with_upstreams_arguments() {
    let (s, v) = setup();
    let key = format!("filesystem_name {V1}");
    s.on(&key, Answer::Str("RAW".into())).on(&key, Answer::Str("NTFS".into()));
    on_extents(&s, V1, &[(3, 16 << 20, 10 << 30)]);
    s.on_query(&volume_query(), vec![Row::new("MSFT_Volume", "VOL1").with("UniqueId", V1)]);
    s.on_call("VOL1", "Format", returned(0));
    v.format_volume(device(V1)).unwrap();
    let [disk, paths, mounted] = interlock_lines(V1, 3);
    assert_eq!(
        s.log(),
        [
            key.clone(),
            format!("ioctl {} 0x560000", device(V1)),
            disk,
            paths,
            mounted,
            format!(
                r"query SELECT UniqueId, FileSystemType FROM MSFT_Volume WHERE UniqueId = '{}'",
                V1.replace('\\', r"\\")
            ),
            r#"call VOL1 Format [("FileSystem", "NTFS"), ("FileSystemLabel", ""), ("Full", false), ("Force", true)]"#
                .into(),
            key,
        ]
    );
}

#[test]
fn formatting_failures() {
    // A non-zero ReturnValue.
    let (s, v) = setup();
    s.on(format!("filesystem_name {V1}"), Answer::Str("RAW".into()));
    on_extents(&s, V1, &[(3, 16 << 20, 10 << 30)]);
    s.on_query(&volume_query(), vec![Row::new("MSFT_Volume", "VOL1")]);
    s.on_call("VOL1", "Format", returned(43001));
    let err = v.format_volume(V1).unwrap_err().to_string();
    assert!(err.contains("Format") && err.contains("43001"), "{err}");
    assert_eq!(s.calls("filesystem_name").len(), 1, "not checked again after a failure");

    // Success reported, but still RAW.
    let (s, v) = setup();
    s.on(format!("filesystem_name {V1}"), Answer::Str("RAW".into()));
    on_extents(&s, V1, &[(3, 16 << 20, 10 << 30)]);
    s.on_query(&volume_query(), vec![Row::new("MSFT_Volume", "VOL1")]);
    s.on_call("VOL1", "Format", returned(0));
    assert!(matches!(v.format_volume(V1), Err(Error::Internal(m)) if m.contains(V1)));

    // Not in MSFT_Volume.
    let (s, v) = setup();
    s.on(format!("filesystem_name {V1}"), Answer::Win32Error(ERROR_UNRECOGNIZED_VOLUME));
    on_extents(&s, V1, &[(3, 16 << 20, 10 << 30)]);
    s.on_query(&volume_query(), vec![]);
    assert!(matches!(v.format_volume(V1), Err(Error::NotFound(m)) if m.contains(V1)));
    assert!(s.calls("call ").is_empty());
}

/// Volume V1 on disk 3, partition 2 of `current` bytes, row `PART`.
fn resizable(current: u64) -> (Arc<Script>, Volumes<Arc<Script>>) {
    let (s, v) = setup();
    on_extents(&s, V1, &[(3, 16 << 20, current as i64)]);
    on_partition(&s, V1, 2, current);
    let q = Query::select(Namespace::Storage, "MSFT_Partition", &["Size"])
        .eq("DiskNumber", 3u32)
        .eq("PartitionNumber", 2u32);
    s.on_query(&q, vec![Row::new("MSFT_Partition", "PART").with("Size", current.to_string())]);
    let disk = Query::select(Namespace::Storage, "MSFT_Disk", &["Number"]).eq("Number", 3u32);
    s.on_query(&disk, vec![Row::new("MSFT_Disk", "DISK3")]);
    s.on_call("DISK3", "Refresh", returned(0));
    (s, v)
}

#[test]
fn resizing_within_100_mib_either_way_changes_nothing() {
    for size in [10 * GIB, 10 * GIB + 50 * MIB, 10 * GIB - 50 * MIB, 10 * GIB + 100 * MIB, 10 * GIB - 100 * MIB] {
        let (s, v) = resizable(10 * GIB);
        v.resize_volume(V1, size).unwrap();
        assert!(s.calls("call ").is_empty(), "{size}: {:#?}", s.log());
    }
}

#[test]
fn shrinking_is_refused() {
    let (s, v) = resizable(10 * GIB);
    match v.resize_volume(V1, 10 * GIB - 101 * MIB) {
        Err(Error::FailedPrecondition(m)) => assert!(m.contains(V1) && m.contains("shrink"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(s.calls("call ").is_empty());
}

/// ResizeVolume's and FormatVolume's dry runs: what the call would do, the real call's refusals,
/// and no WMI method called.
#[test]
fn dry_runs_of_resize_and_format_plan_and_call_nothing() {
    let (s, v) = resizable(10 * GIB);
    let plan = v.plan_resize_volume(V1, 20 * GIB).unwrap();
    assert!(
        plan.contains(&format!("would resize partition 2 of disk 3 (volume {V1}) from {} to {}", 10 * GIB, 20 * GIB)),
        "{plan}"
    );
    let plan = v.plan_resize_volume(V1, 10 * GIB + 50 * MIB).unwrap();
    assert!(plan.contains("nothing would change"), "{plan}");
    let e = v.plan_resize_volume(V1, 10 * GIB - 101 * MIB).unwrap_err();
    assert!(e.to_string().contains("shrink"), "{e}");
    s.on(format!("filesystem_name {V1}"), Answer::Str("RAW".into()));
    s.on(format!("filesystem_name {V1}"), Answer::Str("NTFS".into()));
    let plan = v.plan_format_volume(V1).unwrap();
    assert!(plan.contains(&format!("would format volume {V1} with NTFS")), "{plan}");
    match v.plan_format_volume(V1) {
        Err(Error::FailedPrecondition(m)) => assert!(m.contains("already holds a NTFS filesystem"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(s.calls("call ").is_empty(), "{:#?}", s.log());
}

#[test]
fn growing_resizes_the_partition_then_refreshes_its_disk() {
    let (s, v) = resizable(10 * GIB);
    s.on_call("PART", "Resize", returned(0));
    v.resize_volume(V1, 20 * GIB).unwrap();
    let calls: Vec<String> =
        s.log().into_iter().filter(|l| l.starts_with("call ") || l.starts_with("query ")).collect();
    let [disk_row, paths] = interlock::disk_query_lines(3);
    assert_eq!(
        calls,
        [
            disk_row,
            paths,
            "query SELECT Size FROM MSFT_Partition WHERE DiskNumber = 3 AND PartitionNumber = 2".to_string(),
            format!(r#"call PART Resize [("Size", {})]"#, 20 * GIB),
            "query SELECT Number FROM MSFT_Disk WHERE Number = 3".into(),
            "call DISK3 Refresh []".into(),
        ]
    );
    s.assert_all_scripted();
}

/// FormatVolume and ResizeVolume (by volume ID and by disk number's data volume) on a volume of
/// the system's disk, of a protected disk, or mounted outside the working directories (a drive
/// letter: the temporary disk's `D:\`) are refused before any WMI method is called.
#[test]
fn a_volume_of_the_systems_disk_or_mounted_outside_the_roots_is_never_changed() {
    let boot = interlock::data_disk_row(3).with("IsBoot", true);
    // (the disk's row, where the volume is mounted, -protected-disk, why it is refused)
    type Case = (Option<Row>, Vec<String>, Vec<ProtectedDisk>, &'static str);
    let cases: [Case; 4] = [
        (Some(boot), vec![], vec![], "it holds the boot volume"),
        (None, vec![r"D:\".into()], vec![], r"it is mounted at D:\, outside the working directories"),
        (None, vec![format!(r"{MNT}\"), r"C:\data\".into()], vec![], r"it is mounted at C:\data\, outside"),
        (None, vec![], vec![ProtectedDisk::Number(3)], "matches -protected-disk=3"),
    ];
    for (disk_row, mounted, protected, why) in cases {
        for call in ["format", "resize"] {
            let (s, v) = resizable(10 * GIB);
            let v = v.protecting(protected.clone());
            s.on(format!("filesystem_name {V1}"), Answer::Str("RAW".into()));
            if let Some(row) = &disk_row {
                s.on_query(&interlock::disk_query(3), vec![row.clone()]);
                // The default scripted by `volumes` comes first: use it up.
                s.take_first(&interlock::disk_query_lines(3)[0]);
            }
            if !mounted.is_empty() {
                s.on(format!("mount_points_of {V1}"), Answer::Strings(mounted.clone()));
                s.take_first(&format!("mount_points_of {V1}"));
            }
            let r = if call == "format" { v.format_volume(V1) } else { v.resize_volume(V1, 0) };
            match r {
                Err(Error::FailedPrecondition(m)) => assert!(
                    m.starts_with("refusing ") && m.contains(&format!("volume {V1} (on disk 3)")) && m.contains(why),
                    "{call}: {m}"
                ),
                other => panic!("{call} ({why}): {other:?}"),
            }
            assert!(s.calls("call ").is_empty(), "{call} ({why}): {:?}", s.log());
        }
    }
}

/// Mounted only inside the working directories (a staged volume), a volume passes.
#[test]
fn a_volume_mounted_inside_the_roots_passes_the_interlocks() {
    let (s, v) = resizable(10 * GIB);
    s.on(format!("mount_points_of {V1}"), Answer::Strings(vec![format!(r"{MNT}\")]));
    s.take_first(&format!("mount_points_of {V1}"));
    v.resize_volume(V1, 10 * GIB).unwrap();
}

/// A GPT entry (PARTITION_INFORMATION_EX) at `start`.
fn entry_at(number: u32, start: u64, length: u64) -> Vec<u8> {
    let mut b = partition_buf(number, length);
    b[8..16].copy_from_slice(&(start as i64).to_le_bytes()); // StartingOffset
    b
}

/// DRIVE_LAYOUT_INFORMATION_EX of a GPT disk, field by field.
fn gpt_layout_buf(usable_end: u64, entries: &[Vec<u8>]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend(1u32.to_le_bytes()); // PartitionStyle: GPT
    b.extend((entries.len() as u32).to_le_bytes()); // PartitionCount
    b.extend([5; 16]); // Gpt.DiskId
    b.extend(17408i64.to_le_bytes()); // Gpt.StartingUsableOffset: LBA 34
    b.extend((usable_end as i64 - 17408).to_le_bytes()); // Gpt.UsableLength
    b.extend(128u32.to_le_bytes()); // Gpt.MaxPartitionCount
    b.extend([0; 4]); // padding
    for e in entries {
        b.extend(e);
    }
    b
}

/// DISK_GEOMETRY_EX of a disk of `size` bytes with 512-byte sectors.
fn geometry_buf(size: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend((size / (255 * 63 * 512)).to_le_bytes()); // Geometry.Cylinders
    b.extend(12u32.to_le_bytes()); // Geometry.MediaType: FixedMedia
    b.extend(255u32.to_le_bytes()); // Geometry.TracksPerCylinder
    b.extend(63u32.to_le_bytes()); // Geometry.SectorsPerTrack
    b.extend(512u32.to_le_bytes()); // Geometry.BytesPerSector
    b.extend(size.to_le_bytes()); // DiskSize
    b.extend([0; 8]); // Data
    b
}

/// Disk 3 of `size` bytes whose table (usable up to `usable_end`) holds the MSR, the volume's
/// partition 2 at 16 MiB and `more`; GetSupportedSize fails as it does with the defragmentation
/// service off (StorageWMI 4), so that using it fails the test.
fn on_disk_3(s: &Script, size: u64, usable_end: u64, current: u64, more: &[Vec<u8>]) {
    let mut entries = vec![entry_at(1, MIB, 15 * MIB), entry_at(2, 16 * MIB, current)];
    entries.extend(more.iter().cloned());
    s.on(r"ioctl \\.\PhysicalDrive3 0x70050", Answer::Bytes(gpt_layout_buf(usable_end, &entries)));
    s.on(r"ioctl \\.\PhysicalDrive3 0x700a0", Answer::Bytes(geometry_buf(size)));
    s.on_call("PART", "GetSupportedSize", returned(4));
}

/// GPT's end of a disk of `size` bytes: the backup array (128 entries of 128 bytes) and header.
fn gpt_end(size: u64) -> u64 {
    size - 16384 - 512
}

#[test]
fn size_zero_grows_over_the_free_space_after_the_partition_without_get_supported_size() {
    let resized = |s: &Script| -> Vec<String> { s.calls("call PART Resize") };
    // To the end of the usable area, on a 1 MiB boundary.
    let (s, v) = resizable(10 * GIB);
    on_disk_3(&s, 30 * GIB, gpt_end(30 * GIB), 10 * GIB, &[]);
    s.on_call("PART", "Resize", returned(0));
    v.resize_volume(V1, 0).unwrap();
    assert_eq!(resized(&s), [format!(r#"call PART Resize [("Size", {})]"#, 30 * GIB - MIB - 16 * MIB)]);
    assert!(s.calls("call PART GetSupportedSize").is_empty(), "{:#?}", s.log());
    s.assert_all_scripted();

    // A disk that grew since its table was written: the backup still at the old end.
    let (s, v) = resizable(10 * GIB);
    on_disk_3(&s, 30 * GIB, gpt_end(10 * GIB + 17 * MIB), 10 * GIB, &[]);
    s.on_call("PART", "Resize", returned(0));
    v.resize_volume(V1, 0).unwrap();
    assert_eq!(resized(&s), [format!(r#"call PART Resize [("Size", {})]"#, 30 * GIB - MIB - 16 * MIB)]);

    // Up to the next partition.
    let (s, v) = resizable(10 * GIB);
    on_disk_3(&s, 30 * GIB, gpt_end(30 * GIB), 10 * GIB, &[entry_at(3, 20 * GIB, 5 * GIB)]);
    s.on_call("PART", "Resize", returned(0));
    v.resize_volume(V1, 0).unwrap();
    assert_eq!(resized(&s), [format!(r#"call PART Resize [("Size", {})]"#, 20 * GIB - 16 * MIB)]);

    // Already as large as it can be (within the tolerance): nothing to do.
    let (s, v) = resizable(10 * GIB);
    on_disk_3(&s, 10 * GIB + 60 * MIB, gpt_end(10 * GIB + 60 * MIB), 10 * GIB, &[]);
    v.resize_volume(V1, 0).unwrap();
    assert!(resized(&s).is_empty());
}

#[test]
fn size_zero_refuses_a_table_it_cannot_read() {
    let (s, v) = resizable(10 * GIB);
    s.on(r"ioctl \\.\PhysicalDrive3 0x70050", Answer::Bytes(vec![1, 0, 0, 0]));
    s.on(r"ioctl \\.\PhysicalDrive3 0x700a0", Answer::Bytes(geometry_buf(30 * GIB)));
    let err = v.resize_volume(V1, 0).unwrap_err();
    assert!(
        matches!(&err, Error::Internal(m) if m.contains("disk 3") && m.contains("DRIVE_LAYOUT_INFORMATION_EX")),
        "{err:?}"
    );
    let (s, v) = resizable(10 * GIB);
    s.on(r"ioctl \\.\PhysicalDrive3 0x70050", Answer::Win32Error(ERROR_ACCESS_DENIED));
    let err = v.resize_volume(V1, 0).unwrap_err().to_string();
    assert!(err.contains("IOCTL_DISK_GET_DRIVE_LAYOUT_EX on disk 3"), "{err}");
    assert!(s.calls("call PART Resize").is_empty());
}

#[test]
fn resize_failures() {
    let (s, v) = resizable(10 * GIB);
    s.on_call("PART", "Resize", returned(4));
    let err = v.resize_volume(V1, 20 * GIB).unwrap_err().to_string();
    assert!(err.contains("MSFT_Partition.Resize") && err.contains('4'), "{err}");
    assert!(s.calls("call DISK3").is_empty(), "no refresh after a failed resize");

    // A spanned volume has no one partition to grow.
    let (s, v) = setup();
    on_extents(&s, V1, &[(3, 0, 1 << 30), (4, 0, 1 << 30)]);
    assert!(matches!(v.resize_volume(V1, 20 * GIB), Err(Error::FailedPrecondition(m)) if m.contains("2 extents")));
    assert_eq!(s.log().len(), 1);

    // An unknown volume.
    let (s, v) = setup();
    s.on(format!("ioctl {} 0x560000", device(V1)), Answer::Win32Error(ERROR_FILE_NOT_FOUND));
    assert!(matches!(v.resize_volume(V1, 20 * GIB), Err(Error::NotFound(m)) if m.contains(V1)));
}

#[test]
fn stats_are_total_and_total_minus_free() {
    let (s, v) = setup();
    s.on(format!("free_space {V1}"), Answer::Space(100 * GIB, 30 * GIB));
    assert_eq!(v.get_volume_stats(device(V1)).unwrap(), VolumeStats { total_bytes: 100 * GIB, used_bytes: 70 * GIB });

    let (s, v) = setup();
    s.on(format!("free_space {V1}"), Answer::Space(10, 11));
    assert!(matches!(v.get_volume_stats(V1), Err(Error::Internal(m)) if m.contains("11") && m.contains("10")));

    let (s, v) = setup();
    s.on(format!("free_space {V1}"), Answer::Win32Error(ERROR_PATH_NOT_FOUND));
    assert!(matches!(v.get_volume_stats(V1), Err(Error::NotFound(m)) if m.contains(V1)));
    drop(s);

    let (s, v) = setup();
    s.on(format!("free_space {V1}"), Answer::Win32Error(ERROR_UNRECOGNIZED_VOLUME));
    assert!(matches!(v.get_volume_stats(V1), Err(Error::FailedPrecondition(m)) if m.contains(V1)));
}

#[test]
fn disk_number_is_the_first_extents_disk() {
    let (s, v) = setup();
    on_extents(&s, V1, &[(5, 0, 1 << 30), (6, 0, 1 << 30)]);
    assert_eq!(v.get_disk_number_from_volume_id(V1).unwrap(), 5);
    assert_eq!(s.log(), [format!("ioctl {} 0x560000", device(V1))]);

    for code in [ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND, ERROR_INVALID_NAME] {
        let (s, v) = setup();
        s.on(format!("ioctl {} 0x560000", device(V1)), Answer::Win32Error(code));
        assert!(matches!(v.get_disk_number_from_volume_id(V1), Err(Error::NotFound(m)) if m.contains(V1)), "{code}");
    }
    let (s, v) = setup();
    on_extents(&s, V1, &[]);
    // There, but on no disk (Wine's volumes): the server then locks on the volume alone.
    assert!(
        matches!(v.get_disk_number_from_volume_id(V1), Err(Error::FailedPrecondition(m)) if m.contains("on no disk"))
    );
    let (s, v) = setup();
    s.on(format!("ioctl {} 0x560000", device(V1)), Answer::Bytes(vec![1, 0, 0, 0]));
    assert!(
        matches!(v.get_disk_number_from_volume_id(V1), Err(Error::Internal(m)) if m.contains("VOLUME_DISK_EXTENTS"))
    );
}

#[test]
fn volume_at_path_answers_a_mounted_folder_only() {
    let (s, v) = setup();
    mount_point(&s, MNT, V1);
    s.on(format!(r"volume_path_name \\?\{MNT}"), Answer::Str(format!(r"{MNT}\")));
    s.on(format!(r"volume_name_for_mount_point \\?\{MNT}\"), Answer::Str(V1.into()));
    assert_eq!(v.get_volume_id_from_target_path(MNT).unwrap(), V1);
    assert_eq!(calls(&s).last().unwrap(), &format!(r"volume_name_for_mount_point \\?\{MNT}\"));
    s.assert_all_scripted();

    // GetVolumePathNameW's answer without its trailing backslash gets one.
    let (s, v) = setup();
    mount_point(&s, MNT, V1);
    s.on(format!(r"volume_path_name \\?\{MNT}"), Answer::Str(MNT.into()));
    s.on(format!(r"volume_name_for_mount_point \\?\{MNT}\"), Answer::Str(device(V1).into()));
    assert_eq!(v.get_volume_id_from_target_path(MNT).unwrap(), V1);

    let (s, v) = setup();
    plain_dir(&s, MNT);
    assert!(
        matches!(v.get_volume_id_from_target_path(MNT), Err(Error::NotFound(m)) if m.starts_with(&format!("{MNT} is not a mounted folder")))
    );
    assert!(s.calls("volume_").is_empty());

    let (s, v) = setup();
    nothing_at(&s, MNT);
    assert!(matches!(v.get_volume_id_from_target_path(MNT), Err(Error::NotFound(m)) if m.contains(MNT)));

    let (_, v) = setup();
    assert!(matches!(v.get_volume_id_from_target_path(r"C:\Windows"), Err(Error::PermissionDenied(_))));

    // An answer that is no volume GUID path is not passed on.
    let (s, v) = setup();
    mount_point(&s, MNT, V1);
    s.on(format!(r"volume_path_name \\?\{MNT}"), Answer::Str(format!(r"{MNT}\")));
    s.on(format!(r"volume_name_for_mount_point \\?\{MNT}\"), Answer::Str(r"\\?\C:\".into()));
    assert!(matches!(v.get_volume_id_from_target_path(MNT), Err(Error::Internal(m)) if m.contains(ID_FORM)));
}

/// The kubelet hands drivers staging paths rooted without a drive (`\var\lib\kubelet\plugins\…\globalmount`),
/// and GCE PD (pkg/mount-manager/safe-mounter-v1_windows.go: MountVolume; pkg/resizefs:
/// GetVolumeIDFromTargetPath) and azuredisk (pkg/mounter/safe_mounter_windows.go:
/// WriteVolumeCache, GetVolumeStats) pass them on unchanged. Win32 puts them on the system drive,
/// and so do we; then containment is as for the drive path.
#[test]
fn target_paths_rooted_without_a_drive_are_on_the_system_drive() {
    let rooted = &MNT[2..]; // \root\pv\mnt
                            // MountVolume: the same calls as for the drive path, after asking for the system drive.
    let (s, v) = setup();
    s.system_drive_is("C:");
    plain_dir(&s, MNT);
    s.on(format!(r"set_mount_point {MNT}\ {V1}"), Answer::Done);
    v.mount_volume(V1, rooted).unwrap();
    let mut want = vec!["system_drive".to_string()];
    want.extend(contained(MNT).into_iter().filter(|l| !l.starts_with("close ")));
    want.push(format!(r"set_mount_point {MNT}\ {V1}"));
    assert_eq!(calls(&s), want);
    s.assert_all_scripted();

    // GetVolumeIDFromTargetPath, GetClosestVolumeIDFromTargetPath, UnmountVolume.
    let (s, v) = setup();
    s.system_drive_is("C:");
    mount_point(&s, MNT, V1);
    s.on(format!(r"volume_path_name \\?\{MNT}"), Answer::Str(format!(r"{MNT}\")));
    s.on(format!(r"volume_name_for_mount_point \\?\{MNT}\"), Answer::Str(V1.into()));
    s.on(format!("flush {}", device(V1)), Answer::Done);
    s.on(format!(r"delete_mount_point {MNT}\"), Answer::Done);
    assert_eq!(v.get_volume_id_from_target_path(rooted).unwrap(), V1);
    assert_eq!(v.get_closest_volume_id_from_target_path(rooted).unwrap(), V1);
    v.unmount_volume(V1, rooted).unwrap();
    assert_eq!(s.calls(r"delete_mount_point "), [format!(r"delete_mount_point {MNT}\")]);
    s.assert_all_scripted();

    // A fresh staging folder: "not mounted", in the words drivers match.
    let (s, v) = setup();
    s.system_drive_is("C:");
    nothing_at(&s, MNT);
    assert!(
        matches!(v.get_volume_id_from_target_path(rooted), Err(Error::NotFound(m)) if m.contains("because it does not exist"))
    );

    // Containment as for the drive path: on another system drive the path is outside the roots,
    // refused before anything is opened.
    let (s, v) = setup();
    s.system_drive_is("D:");
    assert!(
        matches!(v.get_volume_id_from_target_path(rooted), Err(Error::PermissionDenied(m)) if m.contains(r"D:\root\pv\mnt"))
    );
    assert_eq!(calls(&s), ["system_drive"]);
    let (s, v) = setup();
    s.system_drive_is("C:");
    assert!(matches!(v.get_volume_id_from_target_path(r"\Windows\System32"), Err(Error::PermissionDenied(_))));
    assert!(matches!(v.get_volume_id_from_target_path(r"\root\..\Windows"), Err(Error::InvalidArgument(_))));
    assert_eq!(calls(&s), ["system_drive", "system_drive"]);

    // Only a path rooted without a drive asks; the others are judged as before.
    let (s, v) = setup();
    for p in [r"\\server\share\x", r"\\?\C:\root\pv", r"\??\C:\root\pv", r"root\pv", "/root/pv"] {
        assert!(matches!(v.get_volume_id_from_target_path(p), Err(Error::InvalidArgument(_))), "{p}");
    }
    assert!(s.log().is_empty(), "{:?}", s.log());

    // A platform that can't say, or says nonsense, is an internal error naming the path.
    let (s, v) = setup();
    s.on("system_drive", Answer::Win32Error(ERROR_INVALID_FUNCTION));
    assert!(matches!(v.get_volume_id_from_target_path(rooted), Err(Error::Internal(m)) if m.contains(rooted)));
    let (s, v) = setup();
    s.system_drive_is(r"C:\Windows");
    assert!(
        matches!(v.get_volume_id_from_target_path(rooted), Err(Error::Internal(m)) if m.contains("expected a drive letter"))
    );
}

/// AWS EBS's driver (pkg/mounter/mount_windows.go, `handleGetDeviceNameFromMountError`) takes a
/// GetVolumeIDFromTargetPath error for "not mounted yet" only when its text matches
/// `(Get-Item -Path \S+).Target, output: , error: <nil>|because it does not exist`; its
/// NodeStageVolume asks on a fresh staging folder (missing or a plain directory) before mounting.
#[test]
fn not_mounted_answers_carry_the_words_aws_ebs_matches() {
    let ebs_says_not_mounted = |e: &Error| e.to_string().contains("because it does not exist");
    let deep = r"C:\root\plugins\pv\globalmount";
    type Layout = Box<dyn Fn(&Script)>;
    let cases: Vec<(&str, Layout)> = vec![
        ("missing", Box::new(|s: &Script| nothing_at(s, MNT))),
        (
            "missing with its parent",
            Box::new(move |s: &Script| {
                s.held_dir(ROOT).missing_dir(r"C:\root\plugins\pv").missing_dir(r"C:\root\plugins");
            }),
        ),
        ("a plain directory", Box::new(|s: &Script| plain_dir(s, MNT))),
        (
            "a link to no mount point",
            Box::new(|s: &Script| {
                let (dir, name) = split(MNT);
                s.held_dir(dir).entry(dir, name, attr::DIRECTORY | attr::REPARSE_POINT);
                s.on(format!(r"volume_name_for_mount_point {MNT}\"), Answer::Win32Error(ERROR_NOT_A_REPARSE_POINT));
                s.on(format!(r"volume_name_for_mount_point \\?\{MNT}\"), Answer::Win32Error(ERROR_NOT_A_REPARSE_POINT));
                s.link_to(dir, name, r"C:\root\elsewhere");
                s.on(format!(r"volume_path_name \\?\{MNT}"), Answer::Str(format!(r"{MNT}\")));
            }),
        ),
    ];
    for (what, layout) in cases {
        let (s, v) = setup();
        layout(&s);
        let target = if what == "missing with its parent" { deep } else { MNT };
        match v.get_volume_id_from_target_path(target) {
            Err(e @ Error::NotFound(_)) => assert!(ebs_says_not_mounted(&e), "{what}: {e}"),
            other => panic!("{what}: {other:?}"),
        }
        s.assert_all_scripted();
    }
    // GetClosestVolumeIDFromTargetPath of a missing path says the same.
    let (s, v) = setup();
    nothing_at(&s, MNT);
    assert!(
        matches!(v.get_closest_volume_id_from_target_path(MNT), Err(e @ Error::NotFound(_)) if ebs_says_not_mounted(&e))
    );
    // Any other failure does not: the driver must not take it for "not mounted".
    let (_, v) = setup();
    assert!(matches!(v.get_volume_id_from_target_path(r"C:\Windows"), Err(e) if !ebs_says_not_mounted(&e)));
}

#[test]
fn the_closest_volume_of_a_plain_path_is_its_drives() {
    let (s, v) = setup();
    let target = r"C:\root\a\b";
    plain_dir(&s, target);
    for p in [r"C:\root\a", ROOT, r"C:\"] {
        s.on(format!(r"attributes \\?\{p}"), Answer::Attributes(Some(attr::DIRECTORY)));
    }
    s.on(r"volume_name_for_mount_point C:\", Answer::Str(V3.into()));
    assert_eq!(v.get_closest_volume_id_from_target_path(target).unwrap(), V3);
    let mut want = contained(target);
    want.extend([
        r"attributes \\?\C:\root\a".into(),
        r"attributes \\?\C:\root".into(),
        r"attributes \\?\C:\".into(),
        r"volume_name_for_mount_point C:\".into(),
    ]);
    want.extend(released(target));
    assert_eq!(s.log(), want);
}

#[test]
fn the_closest_volume_walk_stops_at_a_mounted_folder() {
    let (s, v) = setup();
    let target = r"C:\root\pv\mnt\data";
    plain_dir(&s, target);
    s.on(format!(r"attributes \\?\{MNT}"), Answer::Attributes(Some(attr::DIRECTORY | attr::REPARSE_POINT)));
    s.on(format!(r"volume_path_name \\?\{MNT}"), Answer::Str(format!(r"{MNT}\")));
    s.on(format!(r"volume_name_for_mount_point \\?\{MNT}\"), Answer::Str(V1.into()));
    assert_eq!(v.get_closest_volume_id_from_target_path(target).unwrap(), V1);
    s.assert_all_scripted();

    // A reparse point that is no mounted folder is walked past.
    let (s, v) = setup();
    let target = r"C:\root\pv\link\data";
    plain_dir(&s, target);
    s.on(r"attributes \\?\C:\root\pv\link", Answer::Attributes(Some(attr::DIRECTORY | attr::REPARSE_POINT)));
    s.on(r"volume_path_name \\?\C:\root\pv\link", Answer::Str(r"C:\root\pv\link\".into()));
    s.on(r"volume_name_for_mount_point \\?\C:\root\pv\link\", Answer::Win32Error(ERROR_NOT_A_REPARSE_POINT));
    s.on(r"attributes \\?\C:\root\pv", Answer::Attributes(Some(attr::DIRECTORY | attr::REPARSE_POINT)));
    s.on(r"volume_path_name \\?\C:\root\pv", Answer::Str(r"C:\root\pv\".into()));
    s.on(r"volume_name_for_mount_point \\?\C:\root\pv\", Answer::Str(V2.into()));
    assert_eq!(v.get_closest_volume_id_from_target_path(target).unwrap(), V2);
    s.assert_all_scripted();
}

#[test]
fn the_closest_volume_walk_is_bounded_and_needs_an_existing_path() {
    let (s, v) = setup();
    let mut path = ROOT.to_string();
    for _ in 0..300 {
        path.push_str(r"\d");
    }
    plain_dir(&s, &path);
    let mut p = path.as_str();
    while let Some(i) = p.rfind('\\') {
        p = &path[..i];
        s.on(format!(r"attributes \\?\{p}"), Answer::Attributes(Some(attr::DIRECTORY)));
    }
    match v.get_closest_volume_id_from_target_path(&path) {
        Err(Error::NotFound(m)) => assert!(m.contains("256") && m.contains(&path), "{m}"),
        other => panic!("{other:?}"),
    }
    // The first step's attributes are the held target's own.
    assert_eq!(s.calls("attributes ").len() + 1, MAX_WALK);
    assert_eq!(s.calls(&format!(r"attributes_of {}", verbatim(&path))).len(), 1);
    assert!(s.calls("volume_name_for_mount_point").is_empty());

    let (s, v) = setup();
    nothing_at(&s, MNT);
    assert!(matches!(v.get_closest_volume_id_from_target_path(MNT), Err(Error::NotFound(m)) if m.contains(MNT)));
    let contain_calls = ["open ", "final_path ", "attributes_of ", "open_at ", "close "];
    assert!(s.log().iter().all(|l| contain_calls.iter().any(|c| l.starts_with(c))), "{:#?}", s.log());

    // Contained, as on Linux.
    let (s, v) = setup();
    assert!(matches!(v.get_closest_volume_id_from_target_path(r"C:\Windows\x"), Err(Error::PermissionDenied(_))));
    assert!(s.log().is_empty());
}

#[test]
fn flushing_names_the_volume_device() {
    let (s, v) = setup();
    s.on(format!("flush {}", device(V1)), Answer::Done);
    v.write_volume_cache(V1).unwrap();
    assert_eq!(s.log(), [format!("flush {}", device(V1))]);

    let (s, v) = setup();
    s.on(format!("flush {}", device(V1)), Answer::Win32Error(ERROR_INVALID_NAME));
    assert!(matches!(v.write_volume_cache(V1), Err(Error::NotFound(m)) if m.contains(V1)));
    let (s, v) = setup();
    s.on(format!("flush {}", device(V1)), Answer::Win32Error(ERROR_ACCESS_DENIED));
    assert!(matches!(v.write_volume_cache(V1), Err(Error::PermissionDenied(_))));
    drop(s);
}

/// `partition_buf` with another GPT partition type (Windows recovery, de94bba4-…).
fn recovery_partition_buf(number: u32, length: u64) -> Vec<u8> {
    let mut b = partition_buf(number, length);
    b[32..48].copy_from_slice(&[
        0xa4, 0xbb, 0x94, 0xde, 0xd1, 0x06, 0x40, 0x4d, 0xa1, 0x6a, 0xbf, 0xd5, 0x01, 0x79, 0xd6, 0xac,
    ]);
    b
}

#[test]
fn a_disk_number_resizes_that_disks_largest_data_volume() {
    // Disk 3: V2 a larger recovery partition, V1 the basic data one; V3 is on disk 4.
    let (s, v) = resizable(10 * GIB);
    s.on("volumes", Answer::Strings(vec![V2.into(), V1.into(), V3.into()]));
    on_extents(&s, V2, &[(3, 1 << 40, 50 << 30)]);
    s.on(format!("ioctl {} 0x70048", device(V2)), Answer::Bytes(recovery_partition_buf(3, 50 * GIB)));
    on_extents(&s, V3, &[(4, 16 << 20, 1 << 30)]);
    on_partition(&s, V3, 1, 100 * GIB);
    s.on_call("PART", "Resize", returned(0));
    v.resize_volume("3", 20 * GIB).unwrap();
    assert!(s.log().contains(&format!(r#"call PART Resize [("Size", {})]"#, 20 * GIB)), "{:#?}", s.log());
    s.assert_all_scripted();
    // The volume was found the way ListVolumesOnDisk finds it, and it answers the same.
    assert_eq!(v.list_volumes_on_disk(3, 0).unwrap(), [V1, V2]);
}

#[test]
fn a_disk_number_without_one_largest_data_volume_is_refused_naming_what_is_there() {
    // Two basic data partitions of one size: which one is meant can't be told.
    let (s, v) = setup();
    s.on("volumes", Answer::Strings(vec![V1.into(), V2.into()]));
    on_extents(&s, V1, &[(3, 16 << 20, 5 << 30)]);
    on_partition(&s, V1, 1, 5 * GIB);
    on_extents(&s, V2, &[(3, 6 << 30, 5 << 30)]);
    on_partition(&s, V2, 2, 5 * GIB);
    match v.resize_volume("3", 0) {
        Err(Error::FailedPrecondition(m)) => {
            assert!(m.contains("disk 3 has 2 data volumes") && m.contains(V1) && m.contains(V2), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert!(s.calls("call ").is_empty() && s.calls("query ").is_empty(), "nothing resized");

    // Only a recovery partition, and an unknown disk.
    let (s, v) = setup();
    s.on("volumes", Answer::Strings(vec![V2.into()]));
    on_extents(&s, V2, &[(3, 1 << 40, 50 << 30)]);
    s.on(format!("ioctl {} 0x70048", device(V2)), Answer::Bytes(recovery_partition_buf(3, 50 * GIB)));
    match v.resize_volume("3", 0) {
        Err(Error::NotFound(m)) => {
            assert!(m.contains("disk 3") && m.contains(V2) && m.contains("GPT type {de94bba4"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    match v.resize_volume("9", 0) {
        Err(Error::NotFound(m)) => assert!(m.contains("disk 9 has no volumes"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(s.calls("call ").is_empty());
}

#[test]
fn only_resize_takes_a_disk_number() {
    let (s, v) = setup();
    let calls: Vec<(&str, Result<()>)> = vec![
        ("mount", v.mount_volume("3", MNT)),
        ("unmount", v.unmount_volume("3", MNT)),
        ("formatted", v.is_volume_formatted("3").map(drop)),
        ("format", v.format_volume("3")),
        ("stats", v.get_volume_stats("3").map(drop)),
        ("disk", v.get_disk_number_from_volume_id("3").map(drop)),
        ("flush", v.write_volume_cache("3")),
    ];
    for (rpc, r) in calls {
        assert!(matches!(&r, Err(Error::InvalidArgument(m)) if m.contains(ID_FORM)), "{rpc}: {r:?}");
    }
    assert_eq!(s.log(), Vec::<String>::new());
}
