//! Path rules (`paths::windows`, `paths::unix`) on arbitrary strings.
//!
//! Properties: what a rule set accepts has no `.`/`..`/empty names and none of the characters
//! or device names it promises to refuse; Win32's own normalisation of an accepted path yields
//! exactly the names we parsed (no spelling means something else to the OS); parsing the
//! rendered path, and splitting the `\\?\` spelling we hand the OS, give back the same parts.
#![no_main]

use csi_proxy_host::fuzzing::{unix_paths, windows_paths as win, within};
use libfuzzer_sys::fuzz_target;
use std::path::{Component, Path};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    windows(text);
    canonical(text);
    unix(text);
});

fn windows(text: &str) {
    let Ok(p) = win::parse(text) else { return };
    assert!(matches!(p.drive.as_bytes(), [l, b':'] if l.is_ascii_uppercase()), "{p:?}");
    assert!(text.encode_utf16().count() <= win::MAX_PATH_UNITS);
    for n in &p.names {
        assert!(!n.is_empty() && n != "." && n != "..", "{text:?}: name {n:?}");
        assert!(!n.contains(['\\', '/', ':', '<', '>', '"', '|', '?', '*']), "{text:?}: name {n:?}");
        assert!(!n.chars().any(|c| c < ' '), "{text:?}: control character in {n:?}");
        assert!(!n.ends_with(['.', ' ']), "{text:?}: {n:?} would be trimmed by Win32");
        assert!(n.encode_utf16().count() <= win::MAX_NAME_UNITS);
        assert!(!is_device(n), "{text:?}: {n:?} names a device");
    }
    let parts: Vec<String> = p.parts().iter().map(|s| s.to_string()).collect();
    assert_eq!(win32_full_path(text), parts, "{text:?} means something else to Win32");
    assert_eq!(win::parse(&p.to_string()).ok().as_ref(), Some(&p), "{text:?} rendered as {p}");
    let verbatim = win::verbatim(&parts);
    assert_eq!(win::components(&verbatim).as_ref(), Some(&parts), "{text:?} as {verbatim:?}");
    // A few prefixes, not all: every one would make long paths quadratic and slow the fuzzer.
    let n = p.names.len();
    for k in [0, 1.min(n), n / 2, n.saturating_sub(1), n] {
        let prefix = win::parse(&p.prefix(k)).expect("a prefix of an accepted path");
        assert!(within(&parts, &prefix.parts(), true) && within(&parts, &prefix.parts(), false));
    }
}

/// The components the OS returns (`GetFinalPathNameByHandleW` forms): well formed, and their
/// `\\?\` spelling splits back into the same.
fn canonical(text: &str) {
    let Some(c) = win::components(text) else { return };
    let head = c[0].as_str();
    let drive = matches!(head.as_bytes(), [l, b':'] if l.is_ascii_uppercase());
    assert!(drive || head == "UNC" || win::is_volume_guid(head), "{text:?}: head {head:?}");
    assert!(head != "UNC" || c.len() >= 3, "{text:?}: UNC without share");
    assert!(c[1..].iter().all(|n| !n.is_empty() && n != "." && n != ".." && !n.contains('\\')), "{text:?}: {c:?}");
    let verbatim = win::verbatim(&c);
    assert_eq!(win::components(&verbatim).as_ref(), Some(&c), "{text:?} as {verbatim:?}");
}

fn unix(text: &str) {
    let Ok(names) = unix_paths::parse(text) else { return };
    assert!(text.starts_with('/') && !text.contains('\0') && text.len() < unix_paths::PATH_MAX);
    for n in &names {
        assert!(!n.is_empty() && *n != "." && *n != ".." && !n.contains('/'), "{text:?}: name {n:?}");
        assert!(n.len() <= unix_paths::NAME_MAX);
    }
    // What the kernel walks: the normal components, with nothing climbing up.
    let mut kernel = Vec::new();
    for c in Path::new(text).components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(n) => kernel.push(n.to_str().expect("from a str")),
            Component::ParentDir | Component::Prefix(_) => panic!("{text:?} accepted with {c:?}"),
        }
    }
    assert_eq!(kernel, names, "{text:?}");
}

/// What `GetFullPathNameW` makes of a drive path, name by name: `/` is a separator, trailing
/// dots and spaces go, `.` vanishes and `..` climbs (never above the drive).
fn win32_full_path(path: &str) -> Vec<String> {
    let path = path.replace('/', "\\");
    let (drive, rest) = path.split_at(2);
    let mut out = vec![drive.to_ascii_uppercase()];
    for name in rest.split('\\') {
        if name == ".." {
            if out.len() > 1 {
                out.pop();
            }
            continue;
        }
        match name.trim_end_matches(['.', ' ']) {
            "" => {}
            n => out.push(n.to_string()),
        }
    }
    out
}

/// Win32's reserved device names: the part before the first dot, trailing spaces ignored,
/// compared without case (ASCII only here; the rules may refuse more).
fn is_device(name: &str) -> bool {
    let stem = name.split('.').next().unwrap_or(name).trim_end_matches(' ').to_ascii_uppercase();
    let numbered = |prefix: &str| {
        stem.strip_prefix(prefix).is_some_and(|d| {
            let mut chars = d.chars();
            matches!((chars.next(), chars.next()), (Some('0'..='9' | '\u{b9}' | '\u{b2}' | '\u{b3}'), None))
        })
    };
    matches!(stem.as_str(), "CON" | "PRN" | "AUX" | "NUL" | "CONIN$" | "CONOUT$") || numbered("COM") || numbered("LPT")
}
