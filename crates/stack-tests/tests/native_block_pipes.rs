#![cfg(windows)]
//! The disk, volume, SMB and iSCSI APIs on their real named pipes, served by the native Windows
//! backend, doing what Wine implements for real:
//! - volume enumeration, GetVolumeInformationW, GetDiskFreeSpaceExW, GetVolumeNameForVolumeMountPointW
//!   and GetFileAttributesW behind IsVolumeFormatted, FormatVolume's refusal, GetVolumeStats,
//!   GetVolumeIDFromTargetPath and GetClosestVolumeIDFromTargetPath on the C: volume;
//! - IOCTL_DISK_GET_DRIVE_GEOMETRY_EX behind GetDiskStats on Wine's one disk;
//! - WMI over COM: Wine has no MSFT_* classes, and the calls that need them must say so
//!   (FailedPrecondition naming the class), never answer as if there were nothing.
//!
//! Pipe names are global, so this file serves them once, from its single test.

use csi_proxy_host::paths::Roots;
use csi_proxy_host::windows::platform::win32::RealWin32;
use csi_proxy_host::windows::{Access, Win32};
use csi_proxy_host::Config as HostConfig;
use csi_proxy_server::{Config, Context};
use csi_proxy_stack_tests::pipes::{channel, PipeServer};
use csi_proxy_stack_tests::{api, assert_status, Scratch};
use csi_proxy_wire::{v1, v1alpha2, v2alpha1, Group};
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_block_smb_and_iscsi_apis_on_their_pipes() {
    let base = Scratch::new("csi-native-block");
    base.dir(r"root\deep\er");
    let root = base.p("root");
    let hosts = csi_proxy_host::native(HostConfig { roots: Roots::new(vec![root.clone()]), ..Default::default() });
    let apis =
        [api(Group::Disk, "v1"), api(Group::Volume, "v2alpha1"), api(Group::Smb, "v1"), api(Group::Iscsi, "v1alpha2")];
    let server = PipeServer::start(&apis, Context::new(hosts, Config::default()));

    // What the test knows about the C: volume, straight from Win32.
    let c_volume = RealWin32.volume_name_for_mount_point(r"C:\").unwrap();
    let (c_total, c_free) = RealWin32.free_space(r"C:\").unwrap();

    let mut vol = v2alpha1::volume_client::VolumeClient::new(channel(Group::Volume, "v2alpha1").await);
    let formatted = |id: &str| v2alpha1::IsVolumeFormattedRequest { volume_id: id.into() };
    assert!(vol.is_volume_formatted(formatted(&c_volume)).await.unwrap().into_inner().formatted);
    // The same volume without its trailing backslash, and in upper case, is the same volume.
    let spelled = c_volume.trim_end_matches('\\').to_uppercase().replace(r"\\?\VOLUME", r"\\?\Volume");
    assert!(vol.is_volume_formatted(formatted(&spelled)).await.unwrap().into_inner().formatted);
    assert_status(vol.is_volume_formatted(formatted("C:")).await, Code::InvalidArgument, "volume ID C: is not");
    let unknown = r"\\?\Volume{0badc0de-0000-4000-8000-000000000001}\";
    assert_status(vol.is_volume_formatted(formatted(unknown)).await, Code::NotFound, "0badc0de");

    let stats = vol.get_volume_stats(v2alpha1::GetVolumeStatsRequest { volume_id: c_volume.clone() }).await.unwrap();
    let stats = stats.into_inner();
    assert_eq!(stats.total_bytes as u64, c_total);
    let used = (c_total - c_free) as i64;
    assert!((stats.used_bytes - used).abs() < 64 << 20, "used {} vs {used} from Win32", stats.used_bytes);

    // NTFS is there: FormatVolume refuses before WMI is asked (upstream would reformat C:).
    let r = vol.format_volume(v2alpha1::FormatVolumeRequest { volume_id: c_volume.clone() }).await;
    assert_status(r, Code::FailedPrecondition, "NTFS");

    // A plain directory is not a mounted folder; its closest volume is C:'s, found by walking up.
    let deep = format!(r"{root}\deep\er");
    let r =
        vol.get_volume_id_from_target_path(v2alpha1::GetVolumeIdFromTargetPathRequest { target_path: deep.clone() });
    assert_status(r.await, Code::NotFound, "not a mounted folder");
    let r = vol
        .get_closest_volume_id_from_target_path(v2alpha1::GetClosestVolumeIdFromTargetPathRequest { target_path: deep })
        .await
        .unwrap();
    assert_eq!(r.into_inner().volume_id, c_volume);
    let r = vol.get_volume_id_from_target_path(v2alpha1::GetVolumeIdFromTargetPathRequest {
        target_path: base.join("elsewhere").to_str().unwrap().into(),
    });
    assert_status(r.await, Code::PermissionDenied, "elsewhere");

    // Wine's one disk, sized by IOCTL_DISK_GET_DRIVE_GEOMETRY_EX (DiskSize at offset 24).
    let geometry = RealWin32.ioctl(r"\\.\PhysicalDrive0", 0x700A0, &[], Access::Query).unwrap();
    let size = i64::from_le_bytes(geometry[24..32].try_into().unwrap());
    let mut disk = v1::disk_client::DiskClient::new(channel(Group::Disk, "v1").await);
    let r = disk.get_disk_stats(v1::GetDiskStatsRequest { disk_number: 0 }).await.unwrap().into_inner();
    assert_eq!(r.total_bytes, size);
    assert!(size > 0);
    assert_status(disk.get_disk_stats(v1::GetDiskStatsRequest { disk_number: 9999 }).await, Code::NotFound, "9999");
    // MSFT_Disk is missing under Wine: the answer says so (a missing capability, not a broken
    // connection) rather than listing no disks.
    let r = disk.list_disk_locations(v1::ListDiskLocationsRequest {}).await;
    assert_status(r, Code::FailedPrecondition, "MSFT_Disk");
    assert_status(disk.rescan(v1::RescanRequest {}).await, Code::FailedPrecondition, "MSFT_StorageSetting");

    // SMB: the local path is checked before anything is mapped; then the missing class is named,
    // and the password appears nowhere.
    let mut smb = v1::smb_client::SmbClient::new(channel(Group::Smb, "v1").await);
    let map = |local: String| v1::NewSmbGlobalMappingRequest {
        remote_path: r"\\fileserver\share\sub".into(),
        local_path: local,
        username: r"CORP\svc".into(),
        password: "Pa55-w0rd-never-shown".into(),
    };
    let outside = base.join("outside").to_str().unwrap().to_string();
    let e = smb.new_smb_global_mapping(map(outside)).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let e = smb.new_smb_global_mapping(map(format!(r"{root}\share"))).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("MSFT_SmbGlobalMapping"), "{e:?}");
    assert!(!e.message().contains("Pa55-w0rd"), "{e:?}");
    assert!(!base.join(r"root\share").exists(), "no link without a mapping");

    // iSCSI: the same for its classes; a request without a portal is refused by the server.
    let mut iscsi = v1alpha2::iscsi_client::IscsiClient::new(channel(Group::Iscsi, "v1alpha2").await);
    let r = iscsi.list_target_portals(v1alpha2::ListTargetPortalsRequest {}).await;
    assert_status(r, Code::FailedPrecondition, "MSFT_iSCSITargetPortal");
    let r = iscsi.add_target_portal(v1alpha2::AddTargetPortalRequest { target_portal: None }).await;
    assert_status(r, Code::InvalidArgument, "target_portal");

    server.stop().await;
}
