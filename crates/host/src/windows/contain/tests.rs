//! Containment against the scripted platform: which handles are opened, through what, what is
//! held until when, and what is refused before any call. The real calls are tested under Wine
//! (`platform::fs::tests`).

use super::*;
use crate::windows::code::*;
use crate::windows::script::{Answer, Script};
use std::time::Duration;

const ROOT: &str = r"C:\root";

fn setup() -> (Arc<Script>, Containment<Arc<Script>>) {
    let s = Arc::new(Script::new());
    s.root(ROOT);
    let c = Containment::new(s.clone(), Roots::new(vec![ROOT.into()]));
    (s, c)
}

#[test]
fn the_lexical_check_makes_no_call() {
    let (s, c) = setup();
    for outside in [r"D:\x", r"C:\rootx", r"C:\rootx\a", r"C:\", r"C:\other\root\x"] {
        match c.lexical(outside) {
            Err(Error::PermissionDenied(m)) => assert!(m.contains(outside) && m.contains(r"[C:\root]"), "{m}"),
            other => panic!("{outside}: {other:?}"),
        }
    }
    assert!(matches!(c.lexical(r"C:\root\..\x"), Err(Error::InvalidArgument(_))));
    assert!(c.lexical(r"c:\ROOT").unwrap().is_root);
    let l = c.lexical(r"C:\root\\a\").unwrap();
    assert!(!l.is_root && l.parsed.to_string() == r"C:\root\a");
    // Roots given with `/` are the same roots.
    let c2 = Containment::new(s.clone(), Roots::new(vec!["C:/root/".into()]));
    assert!(c2.lexical(r"C:\ROOT").unwrap().is_root);
    assert!(s.log().is_empty(), "{:#?}", s.log());
}

#[test]
fn locate_holds_the_deepest_existing_ancestor_and_leaves_the_rest_to_the_caller() {
    let (s, c) = setup();
    s.missing_dir(r"C:\root\a\b").held_dir(r"C:\root\a");
    let loc = c.locate(r"C:\root\a\b\c").unwrap();
    assert_eq!(
        (loc.rest.as_slice(), loc.held_path.as_str()),
        ([String::from("b"), "c".into()].as_slice(), r"C:\root\a")
    );
    assert_eq!(loc.canonical_path(), ["C:", "root", "a", "b", "c"]);
    assert!(loc.parent().is_none(), "the parent does not exist");
    s.assert_all_scripted();
    assert_eq!(
        s.log(),
        [
            r"open \\?\C:\root look",
            r"final_path \\?\C:\root",
            r"close \\?\C:\root",
            r"open \\?\C:\root\a\b hold",
            r"open \\?\C:\root\a hold",
            r"final_path \\?\C:\root\a",
            r"attributes_of \\?\C:\root\a",
        ],
        "the final name is never opened by path; the ancestor stays held"
    );
    drop(loc);
    assert_eq!(s.log().last().unwrap(), r"close \\?\C:\root\a");
}

#[test]
fn a_link_on_the_way_is_judged_by_where_it_leads() {
    // C:\root\j is a junction to D:\outside: refused, without saying where it leads.
    let (s, c) = setup();
    s.resolved_dir(r"C:\root\j", r"D:\outside");
    match c.locate(r"C:\root\j\x") {
        Err(Error::PermissionDenied(m)) => {
            assert!(m.contains(r"C:\root\j\x") && !m.contains("outside") && m.contains(ROOT), "{m}")
        }
        other => panic!("{other:?}"),
    }
    // A junction to somewhere inside is fine, and the canonical path is where it leads.
    let (s, c) = setup();
    s.resolved_dir(r"C:\root\j", r"C:\root\real");
    let loc = c.locate(r"C:\root\j\x").unwrap();
    assert_eq!(loc.canonical_path(), ["C:", "root", "real", "x"]);
    assert!(loc.parent().is_some());
    // A canonical form that can't be compared is outside.
    let (s2, c2) = setup();
    s2.on(r"open \\?\C:\root\j hold", Answer::Done)
        .on(r"final_path \\?\C:\root\j", Answer::Str(r"\Device\HarddiskVolume9\x".into()));
    assert!(matches!(c2.locate(r"C:\root\j\x"), Err(Error::PermissionDenied(_))));
    drop(s);
}

#[test]
fn missing_roots_are_a_failed_precondition_and_match_nothing() {
    let s = Arc::new(Script::new());
    s.on(r"open \\?\C:\gone look", Answer::Win32Error(ERROR_FILE_NOT_FOUND)).root(ROOT);
    let c = Containment::new(s.clone(), Roots::new(vec![r"C:\gone".into(), ROOT.into()]));
    match c.locate(r"C:\gone\x") {
        Err(Error::FailedPrecondition(m)) => assert!(m.contains(r"C:\gone") && m.contains("does not exist"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(s.calls("open ").iter().all(|l| l.ends_with(" look")), "nothing below a missing root is opened");
    s.held_dir(ROOT);
    assert!(c.locate(r"C:\root\x").is_ok(), "the other root still works");
    // A drive root has no final name to act on.
    assert!(matches!(c.locate(r"C:\"), Err(Error::InvalidArgument(m)) if m.contains("drive root")));
}

#[test]
fn hold_opens_the_entry_through_the_held_parent_without_following_it() {
    let (s, c) = setup();
    s.held_dir(r"C:\root\pv").entry(r"C:\root\pv", "mnt", attr::DIRECTORY | attr::REPARSE_POINT);
    let held = c.hold(r"C:\root\pv\mnt").unwrap();
    assert_eq!(held.attrs(), Some(attr::DIRECTORY | attr::REPARSE_POINT));
    assert!(held.is_reparse());
    assert_eq!(held.verbatim(), r"\\?\C:\root\pv\mnt");
    assert!(s.calls("open ").iter().all(|l| !l.contains("mnt")), "the target is never opened by path");
    assert_eq!(s.calls("open_at "), [r"open_at \\?\C:\root\pv mnt entry"]);
    assert!(s.calls("close ").iter().all(|l| l == r"close \\?\C:\root"), "held until dropped: {:#?}", s.log());
    // Where it leads, through the held parent.
    s.link_to(r"C:\root\pv", "mnt", r"C:\root\elsewhere");
    assert_eq!(c.follow(&held, r"C:\root\pv\mnt").unwrap(), ["C:", "root", "elsewhere"]);
    assert_eq!(s.calls("open_at ").last().unwrap(), r"open_at \\?\C:\root\pv mnt look");
    drop(held);
    let log = s.log();
    assert!(log.ends_with(&[r"close \\?\C:\root\pv".into(), r"close \\?\C:\root\pv\mnt".into()]), "{log:#?}");
    s.assert_all_scripted();

    // Nothing there; no parent either.
    let (s, c) = setup();
    s.held_dir(r"C:\root\pv").no_entry(r"C:\root\pv", "mnt");
    assert_eq!(c.hold(r"C:\root\pv\mnt").unwrap().attrs(), None);
    let (s, c) = setup();
    s.missing_dir(r"C:\root\pv").held_dir(ROOT);
    assert_eq!(c.hold(r"C:\root\pv\mnt").unwrap().attrs(), None);
    assert!(s.calls("open_at").is_empty());

    // A failure to open the entry is not taken for "nothing there".
    let (s, c) = setup();
    s.held_dir(r"C:\root\pv").on(r"open_at \\?\C:\root\pv mnt entry", Answer::Win32Error(ERROR_ACCESS_DENIED));
    assert!(matches!(c.hold(r"C:\root\pv\mnt"), Err(Error::PermissionDenied(m)) if m.contains(r"C:\root\pv\mnt")));
}

#[test]
fn the_roots_are_looked_up_again_only_when_stale_or_when_a_path_leaves_them() {
    const LOOK: &str = r"open \\?\C:\root look";
    let s = Arc::new(Script::new());
    let c = Containment::new(s.clone(), Roots::new(vec![ROOT.into()])).with_recheck(Duration::from_secs(3600));
    // The root is C:\root, until an administrator re-links it to D:\moved (second look).
    s.on(LOOK, Answer::Done)
        .on(r"final_path \\?\C:\root", Answer::Str(r"\\?\C:\root".into()))
        .on(r"final_path \\?\C:\root", Answer::Str(r"\\?\D:\moved".into()));
    s.held_dir(r"C:\root\a")
        .on(r"final_path \\?\C:\root\a", Answer::Str(r"\\?\C:\root\a".into()))
        .on(r"final_path \\?\C:\root\a", Answer::Str(r"\\?\D:\moved\a".into()));
    for _ in 0..2 {
        assert_eq!(c.locate(r"C:\root\a\x").unwrap().canonical_path(), ["C:", "root", "a", "x"]);
    }
    assert_eq!(s.calls(LOOK).len(), 1, "the second call reuses the root: {:#?}", s.log());
    assert_eq!(s.calls(r"open \\?\C:\root\a hold").len(), 2, "each call holds its own ancestor");
    // The root moved: the path is outside the reused root, so the root is looked up again and
    // the path judged by where the root is now.
    assert_eq!(c.locate(r"C:\root\a\x").unwrap().canonical_path(), ["D:", "moved", "a", "x"]);
    assert_eq!(s.calls(LOOK).len(), 2);
    // A link out of the root is refused after a fresh look, as before (E:'s volume is mounted
    // nowhere inside the roots either).
    s.resolved_dir(r"C:\root\j", r"E:\elsewhere")
        .on(r"volume_path \\?\C:\root\j", Answer::Str(format!(r"\\?\{VE}\elsewhere")))
        .on(format!(r"volume_mount_points \\?\{VE}\"), Answer::Strings(vec![r"E:\".into()]));
    assert!(matches!(c.locate(r"C:\root\j\x"), Err(Error::PermissionDenied(m)) if !m.contains("elsewhere")));
    assert_eq!(s.calls(LOOK).len(), 3);
    s.assert_all_scripted();

    // Once stale, the roots are looked up on the next call.
    let (s, c) = setup();
    let c = Containment::new(s.clone(), c.roots().clone()).with_recheck(Duration::ZERO);
    s.held_dir(r"C:\root\a");
    for _ in 0..3 {
        c.locate(r"C:\root\a\x").unwrap();
    }
    assert_eq!(s.calls(LOOK).len(), 3);
}

#[test]
fn a_root_that_did_not_exist_is_looked_up_again_at_once() {
    const GONE: &str = r"open \\?\C:\gone look";
    let s = Arc::new(Script::new());
    s.root(ROOT).held_dir(ROOT).held_dir(r"C:\gone");
    s.on(GONE, Answer::Win32Error(ERROR_FILE_NOT_FOUND))
        .on(GONE, Answer::Win32Error(ERROR_FILE_NOT_FOUND))
        .on(GONE, Answer::Done)
        .on(r"final_path \\?\C:\gone", Answer::Str(r"\\?\C:\gone".into()));
    let c = Containment::new(s.clone(), Roots::new(vec![r"C:\gone".into(), ROOT.into()]))
        .with_recheck(Duration::from_secs(3600));
    c.locate(r"C:\root\x").unwrap();
    assert!(matches!(c.locate(r"C:\gone\x"), Err(Error::FailedPrecondition(_))));
    // Created since: usable at once.
    assert_eq!(c.locate(r"C:\gone\x").unwrap().canonical_path(), ["C:", "gone", "x"]);
    assert_eq!(s.calls(GONE).len(), 3);
    // And reused from then on.
    c.locate(r"C:\gone\y").unwrap();
    c.locate(r"C:\root\y").unwrap();
    assert_eq!((s.calls(GONE).len(), s.calls(r"open \\?\C:\root look").len()), (3, 3));
    s.assert_all_scripted();
}

const VG: &str = "Volume{0a1b2c3d-0000-1111-2222-333344445555}";
const VE: &str = "Volume{0e0e0e0e-0000-1111-2222-333344445555}";

/// R7: below a volume mounted in a folder inside the roots (a staged volume), Windows's
/// GetFinalPathNameByHandleW(VOLUME_NAME_DOS) may name the volume by its drive letter (or first
/// mount point) rather than the folder: `D:\data` for `C:\root\pv\globalmount\data`. The path is
/// judged by where the object is within its volume (VOLUME_NAME_GUID) and where the mount
/// manager has that volume mounted, so it is inside whichever DOS name Windows picks. Which name
/// Windows reports shows only on Windows: conformance check
/// `paths-below-a-staged-volume-are-inside-the-roots`.
#[test]
fn a_path_below_a_mounted_folder_is_inside_whichever_dos_name_windows_reports() {
    let (s, c) = setup();
    let data = r"C:\root\pv\globalmount\data";
    s.resolved_dir(data, r"D:\data").on(format!(r"volume_path \\?\{data}"), Answer::Str(format!(r"\\?\{VG}\data"))).on(
        format!(r"volume_mount_points \\?\{VG}\"),
        Answer::Strings(vec![r"D:\".into(), r"C:\root\pv\globalmount\".into()]),
    );
    let loc = c.locate(r"C:\root\pv\globalmount\data\x").unwrap();
    assert_eq!(loc.canonical_path(), ["C:", "root", "pv", "globalmount", "data", "x"]);
    s.assert_all_scripted();

    // Nested: the volume is mounted at E:\mnt, and E's volume at C:\root\e.
    let (s, c) = setup();
    let data = r"C:\root\e\mnt\data";
    s.resolved_dir(data, r"D:\data")
        .on(format!(r"volume_path \\?\{data}"), Answer::Str(format!(r"\\?\{VG}\data")))
        .on(format!(r"volume_mount_points \\?\{VG}\"), Answer::Strings(vec![r"D:\".into(), r"E:\mnt\".into()]))
        .on(r"open \\?\E:\ look", Answer::Done)
        .on(r"volume_path \\?\E:\", Answer::Str(format!(r"\\?\{VE}\")))
        .on(format!(r"volume_mount_points \\?\{VE}\"), Answer::Strings(vec![r"E:\".into(), r"C:\root\e\".into()]));
    let loc = c.locate(r"C:\root\e\mnt\data\x").unwrap();
    assert_eq!(loc.canonical_path(), ["C:", "root", "e", "mnt", "data", "x"]);
    s.assert_all_scripted();

    // A volume mounted only outside the roots stays outside.
    let (s, c) = setup();
    let data = r"C:\root\j\data";
    s.resolved_dir(data, r"D:\data")
        .on(format!(r"volume_path \\?\{data}"), Answer::Str(format!(r"\\?\{VG}\data")))
        .on(format!(r"volume_mount_points \\?\{VG}\"), Answer::Strings(vec![r"D:\".into(), r"C:\other\mnt\".into()]))
        .on(r"open \\?\C:\other look", Answer::Done)
        .on(r"volume_path \\?\C:\other", Answer::Str(format!(r"\\?\{VE}\other")))
        .on(format!(r"volume_mount_points \\?\{VE}\"), Answer::Strings(vec![r"C:\".into()]));
    assert!(matches!(c.locate(r"C:\root\j\data\x"), Err(Error::PermissionDenied(m)) if !m.contains("D:")));
    s.assert_all_scripted();

    // And what is inside by Windows's own name costs no lookup.
    let (s, c) = setup();
    s.held_dir(r"C:\root\pv");
    c.locate(r"C:\root\pv\x").unwrap();
    assert!(s.calls("volume_").is_empty(), "{:#?}", s.log());
}

/// R7 for a followed link: RmdirContents of a staged volume's folder follows it to the volume's
/// root, which Windows may name `D:\`; through the folder it is inside.
#[test]
fn a_followed_mount_point_inside_the_roots_is_inside() {
    let (s, c) = setup();
    s.held_dir(r"C:\root\pv").entry(r"C:\root\pv", "globalmount", attr::DIRECTORY | attr::REPARSE_POINT);
    let held = c.hold(r"C:\root\pv\globalmount").unwrap();
    s.link_to(r"C:\root\pv", "globalmount", r"D:\")
        .on(r"volume_path globalmount followed", Answer::Str(format!(r"\\?\{VG}\")))
        .on(
            format!(r"volume_mount_points \\?\{VG}\"),
            Answer::Strings(vec![r"D:\".into(), r"C:\root\pv\globalmount\".into()]),
        );
    let to = c.follow(&held, r"C:\root\pv\globalmount").unwrap();
    assert_eq!(to, ["C:", "root", "pv", "globalmount"]);
    assert!(held.at.inside(&to));
    s.assert_all_scripted();
}
