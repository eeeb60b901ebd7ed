use super::*;
use crate::paths::Roots;
use crate::windows::code::*;
use crate::windows::script::{Answer, Script};
use std::sync::Arc;

const ROOT: &str = r"C:\root";
const V1: &str = r"\??\Volume{0a1b2c3d-0000-1111-2222-333344445555}\";
const MOUNTED: u32 = attr::DIRECTORY | attr::REPARSE_POINT;

fn setup() -> (Arc<Script>, Containment<Arc<Script>>) {
    let s = Arc::new(Script::new());
    s.root(ROOT);
    let c = Containment::new(s.clone(), Roots::new(vec![ROOT.into()]));
    (s, c)
}

/// The entry `name` of the held directory `dir`, opened for removal, with `attrs`; its handle is
/// named `\\?\{dir}\{name}`.
fn removable(s: &Script, dir: &str, name: &str, attrs: u32) {
    s.on(format!(r"open_at \\?\{dir} {name} remove"), Answer::Done)
        .on(format!(r"attributes_of \\?\{dir}\{name}"), Answer::Attributes(Some(attrs)))
        .on(format!(r"delete \\?\{dir}\{name}"), Answer::Done);
}

fn mount_point_target(s: &Script, path: &str, target: Option<&str>) {
    s.on(format!(r"mount_point_target \\?\{path}"), Answer::Target(target.map(String::from)));
}

/// The volume mount point `name` of `dir`: kept open with attribute access while the mount
/// manager works, and the same file (ID 7) when reopened.
fn volume_mount_point(s: &Script, dir: &str, name: &str) {
    removable(s, dir, name, MOUNTED);
    mount_point_target(s, &format!(r"{dir}\{name}"), Some(V1));
    s.on(format!(r"open_at \\?\{dir} {name} peek"), Answer::Done)
        .on(format!(r"file_id \\?\{dir}\{name}"), Answer::Id(7));
}

/// The removal's own calls, in order (containment's opens and the closing left out).
fn acts(s: &Script) -> Vec<String> {
    let acts = ["mount_point_target ", "delete_mount_point ", "delete ", "list "];
    s.log().into_iter().filter(|l| acts.iter().any(|a| l.starts_with(a))).collect()
}

/// azuredisk's NodeUnstageVolume (pkg/azuredisk/nodeserver_windows.go → CleanupMountPoint →
/// pkg/mounter/safe_mounter_windows.go `Rmdir`): Rmdir(force) of the staging folder while the
/// volume is still mounted there. As RemoveDirectoryW does, the mount point is deleted from the
/// mount manager first (at the held place's canonical path), then the directory.
#[test]
fn removing_a_volume_mounted_folder_deletes_the_mount_point_first() {
    for force in [true, false] {
        let (s, c) = setup();
        let pv = r"C:\root\pv";
        s.held_dir(pv);
        volume_mount_point(&s, pv, "globalmount");
        s.on(r"delete_mount_point C:\root\pv\globalmount\", Answer::Done);
        rmdir(&c, &*s, r"C:\root\pv\globalmount", force).unwrap();
        assert_eq!(
            acts(&s),
            [
                r"mount_point_target \\?\C:\root\pv\globalmount",
                r"delete_mount_point C:\root\pv\globalmount\",
                r"delete \\?\C:\root\pv\globalmount",
            ],
            "force {force}"
        );
        // A mounted folder is a link: never listed, never descended.
        s.assert_all_scripted();
    }
}

#[test]
fn junctions_and_symbolic_links_are_removed_as_links_without_the_mount_manager() {
    let pv = r"C:\root\pv";
    for (attrs, target) in [(MOUNTED, Some(r"\??\C:\root\elsewhere")), (MOUNTED, None), (attr::REPARSE_POINT, None)] {
        let (s, c) = setup();
        s.held_dir(pv);
        removable(&s, pv, "link", attrs);
        mount_point_target(&s, r"C:\root\pv\link", target);
        rmdir(&c, &*s, r"C:\root\pv\link", true).unwrap();
        assert!(s.calls("delete_mount_point").is_empty(), "{:?}", s.log());
        assert_eq!(s.calls("delete "), [r"delete \\?\C:\root\pv\link"]);
        assert!(s.calls("list ").is_empty());
        if attrs & attr::DIRECTORY == 0 {
            // A file link is no mount point: its reparse data isn't even read.
            assert!(s.calls("mount_point_target").is_empty());
        }
        s.assert_all_scripted();
    }
}

/// Upstream's RemoveAll removes each entry with RemoveDirectoryW too: a volume mounted below
/// the tree is taken out of the mount manager before its folder goes, and its contents (the
/// volume's files) are never touched.
#[test]
fn a_forced_removal_releases_volume_mount_points_inside_the_tree() {
    let (s, c) = setup();
    let (pods, pv) = (r"C:\root\pods", r"C:\root\pods\pv");
    s.held_dir(pods);
    removable(&s, pods, "pv", attr::DIRECTORY);
    s.on(format!(r"list \\?\{pv}"), Answer::Strings(vec!["file".into(), "mnt".into()]));
    volume_mount_point(&s, pv, "mnt");
    s.on(r"delete_mount_point C:\root\pods\pv\mnt\", Answer::Done);
    removable(&s, pv, "file", 0x20);
    rmdir(&c, &*s, pv, true).unwrap();
    assert_eq!(
        acts(&s),
        [
            r"list \\?\C:\root\pods\pv",
            r"mount_point_target \\?\C:\root\pods\pv\mnt",
            r"delete_mount_point C:\root\pods\pv\mnt\",
            r"delete \\?\C:\root\pods\pv\mnt",
            r"delete \\?\C:\root\pods\pv\file",
            r"delete \\?\C:\root\pods\pv",
        ]
    );
    s.assert_all_scripted();
}

/// If the mount manager won't let go, the folder stays: removing it anyway is the stale entry
/// this avoids.
#[test]
fn a_mount_point_the_mount_manager_keeps_is_not_removed() {
    let (s, c) = setup();
    let pv = r"C:\root\pv";
    s.held_dir(pv);
    volume_mount_point(&s, pv, "globalmount");
    s.on(r"delete_mount_point C:\root\pv\globalmount\", Answer::Win32Error(ERROR_ACCESS_DENIED));
    let err = rmdir(&c, &*s, r"C:\root\pv\globalmount", true).unwrap_err();
    assert!(
        matches!(&err, Error::PermissionDenied(m) if m.contains(r"C:\root\pv\globalmount") && m.contains("mount manager")),
        "{err:?}"
    );
    assert!(s.calls("delete ").is_empty(), "{:?}", s.log());
}

/// R2: a disk detached before NodeUnstage leaves a mounted folder whose volume the mount manager
/// no longer knows. RemoveDirectoryW (upstream's os.RemoveAll) deletes it anyway; so do we, or
/// every kubelet retry of NodeUnstage would fail. Only DeleteVolumeMountPointW's "not found"
/// answers mean that (see `unknown_to_mount_manager`); which one Windows gives shows only
/// there: conformance check `mount-point-unknown-to-mount-manager-is-removed`.
#[test]
fn a_mount_point_the_mount_manager_no_longer_knows_is_removed() {
    for code in [ERROR_PATH_NOT_FOUND, ERROR_FILE_NOT_FOUND] {
        for force in [true, false] {
            let (s, c) = setup();
            let pv = r"C:\root\pv";
            s.held_dir(pv);
            volume_mount_point(&s, pv, "globalmount");
            s.on(r"delete_mount_point C:\root\pv\globalmount\", Answer::Win32Error(code));
            rmdir(&c, &*s, r"C:\root\pv\globalmount", force).unwrap();
            assert_eq!(
                acts(&s),
                [
                    r"mount_point_target \\?\C:\root\pv\globalmount",
                    r"delete_mount_point C:\root\pv\globalmount\",
                    r"delete \\?\C:\root\pv\globalmount",
                ],
                "code {code}, force {force}"
            );
            s.assert_all_scripted();
        }
    }
    // Any other failure still keeps the folder, with a message naming it and the volume.
    for code in [ERROR_INVALID_PARAMETER, ERROR_INVALID_FUNCTION, 32] {
        let (s, c) = setup();
        let pv = r"C:\root\pv";
        s.held_dir(pv);
        volume_mount_point(&s, pv, "globalmount");
        s.on(r"delete_mount_point C:\root\pv\globalmount\", Answer::Win32Error(code));
        let err = rmdir(&c, &*s, r"C:\root\pv\globalmount", true).unwrap_err();
        let m = err.to_string();
        assert!(m.contains(r"C:\root\pv\globalmount") && m.contains("mount manager") && m.contains("Volume{"), "{m}");
        assert!(s.calls("delete ").is_empty(), "{code}: {:?}", s.log());
    }
}

#[test]
fn missing_paths_roots_and_full_directories() {
    let pv = r"C:\root\pv";
    let (s, c) = setup();
    s.held_dir(pv).on(r"open_at \\?\C:\root\pv gone remove", Answer::Win32Error(ERROR_FILE_NOT_FOUND));
    rmdir(&c, &*s, r"C:\root\pv\gone", true).unwrap();
    assert!(
        matches!(rmdir(&c, &*s, r"C:\root\pv\gone", false), Err(Error::NotFound(m)) if m.contains("does not exist"))
    );
    assert!(acts(&s).is_empty());

    let (s, c) = setup();
    s.held_dir(r"C:\");
    assert!(matches!(rmdir(&c, &*s, ROOT, true), Err(Error::PermissionDenied(m)) if m.contains("refusing to remove")));
    assert!(acts(&s).is_empty());

    let (s, c) = setup();
    s.held_dir(pv);
    s.on(r"open_at \\?\C:\root\pv full remove", Answer::Done)
        .on(r"attributes_of \\?\C:\root\pv\full", Answer::Attributes(Some(attr::DIRECTORY)))
        .on(r"delete \\?\C:\root\pv\full", Answer::Win32Error(ERROR_DIR_NOT_EMPTY));
    let err = rmdir(&c, &*s, r"C:\root\pv\full", false).unwrap_err();
    assert!(matches!(&err, Error::FailedPrecondition(m) if m == r"directory C:\root\pv\full is not empty"), "{err:?}");
    assert!(s.calls("list ").is_empty() && s.calls("mount_point_target").is_empty());
}

/// R3: DeleteVolumeMountPointW opens the folder itself, with an access and share mode Microsoft
/// does not document. It gets the plain `C:\…\` path its documentation shows, and while it runs
/// no handle of ours has data or delete access to the folder (only an attribute handle, which
/// takes part in no sharing check), so it cannot fail with a sharing violation (32) whatever it
/// asks for. The folder is reopened for deletion relative to the held parent and deleted only if
/// it is still the file checked. Only Windows can show the sharing itself (Wine's
/// DeleteVolumeMountPointW is a stub): conformance check
/// `rmdir-of-a-mounted-folder-shares-with-the-mount-manager`.
#[test]
fn the_mount_manager_gets_a_plain_path_and_no_handle_of_ours_in_its_way() {
    let (s, c) = setup();
    let pv = r"C:\root\pv";
    s.held_dir(pv);
    volume_mount_point(&s, pv, "globalmount");
    s.on(r"delete_mount_point C:\root\pv\globalmount\", Answer::Done);
    rmdir(&c, &*s, r"C:\root\pv\globalmount", true).unwrap();
    let gm: Vec<String> = s.log().into_iter().filter(|l| l.contains("globalmount")).collect();
    assert_eq!(
        gm,
        [
            r"open_at \\?\C:\root\pv globalmount remove",
            r"attributes_of \\?\C:\root\pv\globalmount",
            r"mount_point_target \\?\C:\root\pv\globalmount",
            r"open_at \\?\C:\root\pv globalmount peek",
            r"file_id \\?\C:\root\pv\globalmount",
            // The DELETE handle is closed before the mount manager is called...
            r"close \\?\C:\root\pv\globalmount",
            r"delete_mount_point C:\root\pv\globalmount\",
            // ...and a new one, to the same file, deletes it.
            r"open_at \\?\C:\root\pv globalmount remove",
            r"file_id \\?\C:\root\pv\globalmount",
            r"close \\?\C:\root\pv\globalmount",
            r"delete \\?\C:\root\pv\globalmount",
            r"close \\?\C:\root\pv\globalmount",
        ]
    );
    s.assert_all_scripted();

    // Replaced in the meantime: the new file is left alone.
    let (s, c) = setup();
    s.held_dir(pv);
    volume_mount_point(&s, pv, "globalmount");
    s.on(r"delete_mount_point C:\root\pv\globalmount\", Answer::Done);
    s.on(r"file_id \\?\C:\root\pv\globalmount", Answer::Id(8));
    let err = rmdir(&c, &*s, r"C:\root\pv\globalmount", true).unwrap_err();
    assert!(matches!(&err, Error::Aborted(m) if m.contains("replaced")), "{err:?}");
    assert!(s.calls("delete ").is_empty(), "{:?}", s.log());
}
