//! Tests of the real Win32 layer. The pure helpers are checked with made-up inputs; the calls
//! themselves run against the OS, which here is Wine 8: where Wine's answer differs from what
//! Windows would say (stubs, no real disks), the test pins Wine's answer and says so.

use super::*;
use crate::windows::{attr, code};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

const IOCTL_DISK_GET_LENGTH_INFO: u32 = 0x7405C;
const IOCTL_DISK_GET_DRIVE_GEOMETRY_EX: u32 = 0x700A0;
const IOCTL_DISK_GET_DRIVE_LAYOUT_EX: u32 = 0x70050;
const IOCTL_STORAGE_GET_DEVICE_NUMBER: u32 = 0x2D1080;
const IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS: u32 = 0x560000;
const FILE_DEVICE_DISK: u32 = 7;
const FILE_ATTRIBUTE_ARCHIVE: u32 = 0x20;
const FILE_ATTRIBUTE_NORMAL: u32 = 0x80;
const PHYSICAL_DRIVE_0: &str = r"\\.\PhysicalDrive0";

/// A fresh directory under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("csi-win32-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The drive root (`C:\`) that the temp dir is on.
fn temp_drive_root() -> String {
    let tmp = std::env::temp_dir();
    let tmp = tmp.to_str().unwrap();
    assert_eq!(&tmp[1..3], r":\", "temp dir {tmp:?} is not on a drive letter");
    tmp[..3].to_string()
}

/// `\\?\Volume{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}\`
fn is_volume_guid_path(s: &str) -> bool {
    let Some(guid) = s.strip_prefix(r"\\?\Volume{").and_then(|r| r.strip_suffix(r"}\")) else {
        return false;
    };
    let groups: Vec<&str> = guid.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.chars().all(|c| c.is_ascii_hexdigit()))
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn code_of(r: io::Result<impl std::fmt::Debug>) -> i32 {
    match r {
        Ok(v) => panic!("expected an OS error, got Ok({v:?})"),
        Err(e) => e.raw_os_error().unwrap_or_else(|| panic!("expected an OS error code, got {e}")),
    }
}

fn c_volume() -> String {
    RealWin32.volume_name_for_mount_point(r"C:\").unwrap()
}

// ---- helpers, no OS involved ----

#[test]
fn growing_buffer_doubles_until_the_answer_fits() {
    let mut sizes = Vec::new();
    let out = with_growing_buffer(4096, 1 << 20, |buf| {
        sizes.push(buf.len());
        if buf.len() < 20_000 {
            return Err(os_error(if sizes.len() % 2 == 0 { ERROR_MORE_DATA } else { ERROR_INSUFFICIENT_BUFFER }));
        }
        buf[..3].copy_from_slice(b"abc");
        Ok(3)
    })
    .unwrap();
    assert_eq!(sizes, [4096, 8192, 16384, 32768]);
    assert_eq!(out, b"abc", "truncated to the count written");
}

#[test]
fn growing_buffer_gives_up_at_the_bound_with_the_code() {
    let mut sizes = Vec::new();
    let err = with_growing_buffer(4096, 20_000, |buf| {
        sizes.push(buf.len());
        Err::<usize, _>(os_error(ERROR_MORE_DATA))
    })
    .unwrap_err();
    assert_eq!(sizes, [4096, 8192, 16384, 20_000], "doubling is capped at the bound, which is tried once");
    assert_eq!(err.raw_os_error(), Some(code::ERROR_MORE_DATA));
}

#[test]
fn growing_buffer_returns_other_errors_at_once() {
    let mut calls = 0;
    let err = with_growing_buffer(4096, 1 << 20, |_| {
        calls += 1;
        Err::<usize, _>(os_error(5))
    })
    .unwrap_err();
    assert_eq!((calls, err.raw_os_error()), (1, Some(code::ERROR_ACCESS_DENIED)));
}

#[test]
fn multi_sz_is_split_up_to_the_empty_string() {
    let units = |s: &str| s.encode_utf16().collect::<Vec<u16>>();
    assert_eq!(split_multi_sz(&units("C:\\\0D:\\mnt\\\0\0junk\0")).unwrap(), [r"C:\", r"D:\mnt\"]);
    assert_eq!(split_multi_sz(&units("\0\0")).unwrap(), Vec::<String>::new());
    assert_eq!(split_multi_sz(&[]).unwrap(), Vec::<String>::new());
    assert_eq!(split_multi_sz(&units("unterminated")).unwrap(), ["unterminated"]);
    let bad = split_multi_sz(&[0xD800, 0, 0]).unwrap_err();
    assert_eq!(bad.kind(), io::ErrorKind::InvalidData);
}

#[test]
fn until_nul_stops_at_the_first_nul() {
    let units: Vec<u16> = "NTFS\0junk".encode_utf16().collect();
    assert_eq!(until_nul(&units).unwrap(), "NTFS");
    assert_eq!(until_nul(&units[..4]).unwrap(), "NTFS");
}

#[test]
fn configret_failures_name_the_value() {
    let text = configret_error("CM_Get_Device_Interface_ListW", CR_INVALID_FLAG).to_string();
    assert!(text.contains("CM_Get_Device_Interface_ListW") && text.contains("0x4 (CR_INVALID_FLAG)"), "{text}");
    let text = configret_error("CM_Get_Device_Interface_ListW", 0x3b).to_string();
    assert!(text.contains("CONFIGRET 0x3b"), "{text}");
}

#[test]
fn a_failure_without_an_error_code_is_not_blamed_on_a_stale_one() {
    // SAFETY: sets this thread's last-error value.
    unsafe { SetLastError(ERROR_FILE_NOT_FOUND) };
    let err = call_bool("SomeStub", || 0).unwrap_err();
    assert_eq!(err.raw_os_error(), None);
    assert!(err.to_string().contains("SomeStub failed without setting an error code"), "{err}");
}

#[test]
fn a_nul_inside_a_name_is_refused() {
    assert_eq!(code_of(RealWin32.attributes("C:\\a\0b")), code::ERROR_INVALID_NAME);
    assert_eq!(code_of(RealWin32.ioctl("\\\\.\\C:\0x", IOCTL_STORAGE_GET_DEVICE_NUMBER, &[], Access::Query)), 123);
    assert_eq!(code_of(RealWin32.set_mount_point("C:\\m\\", "\\\\?\\Volume{x}\0\\")), 123);
}

// ---- the OS (Wine 8) ----

#[test]
fn volumes_are_guid_paths_and_include_c() {
    let volumes = RealWin32.volumes().unwrap();
    assert!(!volumes.is_empty());
    for v in &volumes {
        assert!(is_volume_guid_path(v), "{v:?} is not a volume GUID path");
    }
    assert!(volumes.contains(&c_volume()), "{volumes:?} lacks C:'s volume");
}

#[test]
fn c_drive_maps_to_its_volume_and_back() {
    let volume = c_volume();
    assert!(is_volume_guid_path(&volume), "{volume:?}");
    let mount_points = RealWin32.mount_points_of(&volume).unwrap();
    assert!(mount_points.iter().any(|m| m == r"C:\"), "{mount_points:?}");
}

#[test]
fn a_plain_directory_is_not_a_mount_point() {
    let dir = TempDir::new();
    let r = RealWin32.volume_name_for_mount_point(&format!("{}\\", dir.path()));
    assert_eq!(code_of(r), code::ERROR_NOT_A_REPARSE_POINT);
}

#[test]
fn filesystem_name_of_c_by_letter_and_by_guid() {
    let by_letter = RealWin32.filesystem_name(r"C:\").unwrap();
    assert_eq!(by_letter, "NTFS", "Wine reports NTFS for C:");
    assert_eq!(RealWin32.filesystem_name(&c_volume()).unwrap(), by_letter);
}

#[test]
fn free_space_of_c_is_consistent() {
    let (total, free) = RealWin32.free_space(r"C:\").unwrap();
    assert!(total >= free && free > 0, "total {total}, free {free}");
    let (total_by_guid, _) = RealWin32.free_space(&c_volume()).unwrap();
    assert_eq!(total_by_guid, total);
}

#[test]
fn volume_path_name_of_temp_paths_is_their_drive() {
    let dir = TempDir::new();
    let file = format!("{}\\f.txt", dir.path());
    std::fs::write(&file, b"x").unwrap();
    let root = temp_drive_root();
    assert_eq!(RealWin32.volume_path_name(&file).unwrap(), root);
    assert_eq!(RealWin32.volume_path_name(dir.path()).unwrap(), root);
    // Longer than MAX_PATH and not there: the buffer is sized from the input.
    let long = format!("{}\\{}\\x", dir.path(), "n".repeat(300));
    assert_eq!(RealWin32.volume_path_name(&long).unwrap(), root);
}

#[test]
fn attributes_of_a_directory_a_file_and_nothing() {
    let dir = TempDir::new();
    let file = format!("{}\\f.txt", dir.path());
    std::fs::write(&file, b"x").unwrap();
    let d = RealWin32.attributes(dir.path()).unwrap().unwrap();
    assert_ne!(d & attr::DIRECTORY, 0, "{d:#x}");
    let f = RealWin32.attributes(&file).unwrap().unwrap();
    assert_eq!(f & attr::DIRECTORY, 0, "{f:#x}");
    assert_ne!(f & (FILE_ATTRIBUTE_ARCHIVE | FILE_ATTRIBUTE_NORMAL), 0, "{f:#x}");
    assert_eq!(RealWin32.attributes(&format!("{}\\missing", dir.path())).unwrap(), None);
    assert_eq!(RealWin32.attributes(&format!("{}\\missing\\deeper", dir.path())).unwrap(), None);
}

/// Canonical paths come from containment's handles now (`Win32` has no path-taking final path).
#[test]
fn final_path_of_a_temp_dir() {
    use crate::windows::contain::{Nt, Open};
    use crate::windows::platform::real_nt::RealNt;
    let dir = TempDir::new();
    let name = dir.0.file_name().unwrap().to_str().unwrap();
    let fp = RealNt.open(dir.path(), Open::Look).and_then(|h| RealNt.final_path(&h)).unwrap();
    assert!(fp.starts_with(r"\\?\") && fp.ends_with(&format!("\\{name}")), "{fp:?}");
    assert_eq!(code_of(RealNt.open(&format!("{}\\missing", dir.path()), Open::Look)), code::ERROR_FILE_NOT_FOUND);
}

#[test]
fn ioctl_on_a_missing_device_is_file_not_found() {
    let r = RealWin32.ioctl(r"\\.\NoSuchDevice7", IOCTL_DISK_GET_LENGTH_INFO, &[], Access::Query);
    assert_eq!(code_of(r), code::ERROR_FILE_NOT_FOUND);
    let r = RealWin32.ioctl(r"\\.\PhysicalDrive1", IOCTL_DISK_GET_DRIVE_LAYOUT_EX, &[], Access::Query);
    assert_eq!(code_of(r), code::ERROR_FILE_NOT_FOUND, "Wine has one disk");
}

#[test]
fn get_length_info_needs_read_access() {
    // The code carries FILE_READ_ACCESS, so a handle without data access is refused, as on
    // Windows; with access, Wine does not implement it.
    let r = RealWin32.ioctl(PHYSICAL_DRIVE_0, IOCTL_DISK_GET_LENGTH_INFO, &[], Access::Query);
    assert_eq!(code_of(r), code::ERROR_ACCESS_DENIED);
    let r = RealWin32.ioctl(PHYSICAL_DRIVE_0, IOCTL_DISK_GET_LENGTH_INFO, &[], Access::ReadWrite);
    assert_eq!(code_of(r), code::ERROR_NOT_SUPPORTED, "Wine");
}

#[test]
fn drive_geometry_of_wines_disk() {
    // DISK_GEOMETRY_EX: cylinders u64, media type u32, tracks per cylinder u32, sectors per
    // track u32, bytes per sector u32, disk size u64. Wine's disk is made up.
    let g = RealWin32.ioctl(PHYSICAL_DRIVE_0, IOCTL_DISK_GET_DRIVE_GEOMETRY_EX, &[], Access::Query).unwrap();
    assert!(g.len() >= 32, "{} bytes", g.len());
    let (cylinders, tracks, sectors, bytes) = (u64_at(&g, 0), u32_at(&g, 12), u32_at(&g, 16), u32_at(&g, 20));
    assert_eq!(bytes, 512);
    assert_eq!(u64_at(&g, 24), cylinders * u64::from(tracks) * u64::from(sectors) * u64::from(bytes));
}

#[test]
fn device_numbers_of_the_disk_and_of_c() {
    // STORAGE_DEVICE_NUMBER: device type, device number, partition number (u32 each).
    let disk = RealWin32.ioctl(PHYSICAL_DRIVE_0, IOCTL_STORAGE_GET_DEVICE_NUMBER, &[], Access::Query).unwrap();
    assert_eq!((disk.len(), u32_at(&disk, 0), u32_at(&disk, 4), u32_at(&disk, 8)), (12, FILE_DEVICE_DISK, 0, 0));
    let c = RealWin32.ioctl(r"\\.\C:", IOCTL_STORAGE_GET_DEVICE_NUMBER, &[], Access::Query).unwrap();
    assert_eq!((u32_at(&c, 0), u32_at(&c, 4), u32_at(&c, 8)), (FILE_DEVICE_DISK, 0, 1));
}

#[test]
fn volume_disk_extents_of_c_are_empty_under_wine() {
    // VOLUME_DISK_EXTENTS with one DISK_EXTENT's room (32 bytes); Wine says zero extents.
    let device = c_volume().trim_end_matches('\\').to_string();
    let e = RealWin32.ioctl(&device, IOCTL_VOLUME_GET_VOLUME_DISK_EXTENTS, &[], Access::Query).unwrap();
    assert_eq!((e.len(), u32_at(&e, 0)), (32, 0));
}

#[test]
fn drive_layout_is_not_supported_by_wine() {
    let r = RealWin32.ioctl(PHYSICAL_DRIVE_0, IOCTL_DISK_GET_DRIVE_LAYOUT_EX, &[], Access::ReadWrite);
    assert_eq!(code_of(r), code::ERROR_NOT_SUPPORTED);
}

#[test]
fn disk_interfaces_are_a_stub_in_wine() {
    let err = RealWin32.disk_interfaces().unwrap_err();
    assert_eq!(err.raw_os_error(), None);
    let text = err.to_string();
    assert!(text.contains("CM_Get_Device_Interface_List_SizeW") && text.contains("0x13 (CR_FAILURE)"), "{text}");
}

#[test]
fn mount_point_changes_are_stubs_in_wine() {
    let dir = TempDir::new();
    let mp = format!("{}\\", dir.path());
    let r = RealWin32.set_mount_point(&mp, &c_volume());
    assert_eq!(code_of(r), 120, "ERROR_CALL_NOT_IMPLEMENTED");
    // Wine's DeleteVolumeMountPointW fails without setting an error code.
    let err = RealWin32.delete_mount_point(&mp).unwrap_err();
    assert_eq!(err.raw_os_error(), None);
    assert!(err.to_string().contains("DeleteVolumeMountPointW failed without setting an error code"), "{err}");
}

#[test]
fn flush_of_the_c_volume_is_not_implemented_by_wine() {
    let device = c_volume().trim_end_matches('\\').to_string();
    // The open for writing succeeds; FlushFileBuffers on the volume does not.
    assert_eq!(code_of(RealWin32.flush(&device)), code::ERROR_INVALID_FUNCTION);
    assert_eq!(code_of(RealWin32.flush(r"\\.\NoSuchDevice7")), code::ERROR_FILE_NOT_FOUND);
}
