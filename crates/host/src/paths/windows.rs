//! Lexical rules for Windows paths.
//!
//! Only plain drive paths (`X:\a\b`) are accepted, and each name must mean the same thing to
//! every layer it meets: the Win32 layer strips trailing dots and spaces and maps device names
//! (`NUL`, `COM1.txt`) to devices, while the NT layer we act through does neither, and `:`
//! selects an alternate data stream. Refusing such names outright means that what we check is
//! what the filesystem sees.
//!
//! Upstream refuses paths longer than 260 bytes (MAX_PATH). The native backend talks to the OS
//! with `\\?\` paths and handle-relative NT names, so it has no MAX_PATH limit; the limit here is
//! the one of `\\?\` paths (32 767 UTF-16 units, rounded down).

use crate::{Error, Result};

/// Longest path accepted, in UTF-16 units.
pub const MAX_PATH_UNITS: usize = 32_000;
/// Longest single name, in UTF-16 units (NTFS, ReFS, FAT's long names).
pub const MAX_NAME_UNITS: usize = 255;

/// Names Windows maps to devices, whatever the extension (`NUL.txt`) and trailing spaces.
const DEVICE_NAMES: &[&str] = &[
    "CON",
    "PRN",
    "AUX",
    "NUL",
    "CONIN$",
    "CONOUT$",
    "COM0",
    "COM1",
    "COM2",
    "COM3",
    "COM4",
    "COM5",
    "COM6",
    "COM7",
    "COM8",
    "COM9",
    "COM\u{b9}",
    "COM\u{b2}",
    "COM\u{b3}",
    "LPT0",
    "LPT1",
    "LPT2",
    "LPT3",
    "LPT4",
    "LPT5",
    "LPT6",
    "LPT7",
    "LPT8",
    "LPT9",
    "LPT\u{b9}",
    "LPT\u{b2}",
    "LPT\u{b3}",
];

/// A drive path that passed [`parse`]: `drive` is `"C:"` (upper case), `names` its components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WinPath {
    pub drive: String,
    pub names: Vec<String>,
}

impl WinPath {
    /// The drive followed by the names: comparable with [`components`] of a canonical path.
    pub fn parts(&self) -> Vec<&str> {
        std::iter::once(self.drive.as_str()).chain(self.names.iter().map(String::as_str)).collect()
    }

    /// `X:\a\b` for the drive and the first `n` names.
    pub fn prefix(&self, n: usize) -> String {
        let mut s = format!("{}\\", self.drive);
        s.push_str(&self.names[..n].join("\\"));
        s
    }
}

impl std::fmt::Display for WinPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.prefix(self.names.len()))
    }
}

/// Splits an absolute drive path into its drive and names, refusing anything whose meaning could
/// change between this check and the filesystem (see the module comment).
pub fn parse(path: &str) -> Result<WinPath> {
    let bad = |why: &str| Err(Error::invalid(format!("path {} {why}", shown(path))));
    if path.is_empty() {
        return Err(Error::invalid("path is empty; expected an absolute path like C:\\dir"));
    }
    if path.chars().any(|c| c < ' ') {
        return bad("contains a control character");
    }
    let units = path.encode_utf16().count();
    if units > MAX_PATH_UNITS {
        return Err(Error::invalid(format!(
            "path {}… is {units} UTF-16 units long; the limit is {MAX_PATH_UNITS}",
            path.chars().take(64).collect::<String>()
        )));
    }
    for prefix in [r"\\?\", r"\\.\", r"\??\"] {
        if path.starts_with(prefix) {
            return bad(&format!("uses the {prefix} device namespace; expected a drive path like C:\\dir"));
        }
    }
    if path.starts_with(r"\\") {
        return bad("is a UNC path; expected a drive path like C:\\dir");
    }
    if path.starts_with('\\') {
        return bad("has no drive; expected a drive path like C:\\dir");
    }
    let mut chars = path.chars();
    let (letter, colon, sep) = (chars.next(), chars.next(), chars.next());
    let drive = match (letter, colon) {
        (Some(l), Some(':')) if l.is_ascii_alphabetic() => format!("{}:", l.to_ascii_uppercase()),
        _ => return bad("is not an absolute Windows path; expected a drive path like C:\\dir"),
    };
    match sep {
        Some('\\') => {}
        Some('/') => return bad("uses / as a separator; expected \\"),
        _ => return bad("is relative to the drive's current directory; expected a drive path like C:\\dir"),
    }
    let mut names = Vec::new();
    for name in path[3..].split('\\').filter(|n| !n.is_empty()) {
        check_name(path, name)?;
        names.push(name.to_string());
    }
    Ok(WinPath { drive, names })
}

fn check_name(path: &str, name: &str) -> Result<()> {
    let bad = |why: String| Err(Error::invalid(format!("path {path} {why}")));
    if name == "." || name == ".." {
        return bad(format!("contains a `{name}` component"));
    }
    if let Some(c) = name.chars().find(|c| matches!(c, '<' | '>' | '"' | '/' | '|' | '?' | '*')) {
        return bad(format!("contains the character {c:?}, which Windows does not allow in names"));
    }
    if name.contains(':') {
        return bad(format!("contains ':' in {name:?}; alternate data streams are not allowed"));
    }
    if name.ends_with('.') || name.ends_with(' ') {
        return bad(format!("has a name ending in a dot or space ({name:?}), which Windows would strip"));
    }
    let stem = name.split('.').next().unwrap_or(name).trim_end_matches(' ');
    if let Some(dev) = DEVICE_NAMES.iter().find(|d| crate::same_ignoring_case(d, stem)) {
        return bad(format!("contains {name:?}, which Windows maps to the device {dev}"));
    }
    let units = name.encode_utf16().count();
    if units > MAX_NAME_UNITS {
        return bad(format!("has a name of {units} UTF-16 units; the limit is {MAX_NAME_UNITS}"));
    }
    Ok(())
}

/// The comparable components of a path the OS returned (`GetFinalPathNameByHandleW`, a reparse
/// target): the first is the volume — `C:`, `UNC` followed by server and share, or
/// `Volume{GUID}` — then the names. A share is recognised in each spelling Windows resolves:
/// `\\server\share`, `\\?\UNC\server\share` (`\??\UNC\…` stored) and upstream's
/// `\\?\\\server\share` (`\??\\\server\…` stored). None for forms we do not recognise,
/// which therefore never match a root.
pub fn components(canonical: &str) -> Option<Vec<String>> {
    let rest = [r"\\?\", r"\??\"].iter().find_map(|p| canonical.strip_prefix(p));
    let (head, names): (String, &str) = match rest {
        // `\\?\` + `\\host\share\…`, stored by a link as `\??\\\host\share\…`: what upstream
        // (v1.3) gives CreateSymbolicLinkW for an SMB mapping's link. Windows resolves it as the
        // UNC path it spells, so it is one; a `?` or `.` server would be a device namespace.
        Some(r) if r.starts_with(r"\\") => match r[2..].split('\\').next() {
            Some("" | "?" | ".") | None => return None,
            Some(_) => ("UNC".into(), &r[2..]),
        },
        Some(r) => match r.split_once('\\').unwrap_or((r, "")) {
            (unc, tail) if unc.eq_ignore_ascii_case("UNC") => ("UNC".into(), tail),
            (vol, tail) if is_volume_guid(vol) => (vol.into(), tail),
            (drive, tail) if is_drive(drive) => (drive.to_ascii_uppercase(), tail),
            _ => return None,
        },
        None => match canonical.strip_prefix(r"\\") {
            Some(unc) => ("UNC".into(), unc),
            None => match canonical.split_once('\\') {
                Some((drive, tail)) if is_drive(drive) => (drive.to_ascii_uppercase(), tail),
                _ if is_drive(canonical) => (canonical.to_ascii_uppercase(), ""),
                _ => return None,
            },
        },
    };
    let names: Vec<String> = names.split('\\').filter(|n| !n.is_empty()).map(String::from).collect();
    if names.iter().any(|n| n == "." || n == "..") || (head == "UNC" && names.len() < 2) {
        return None;
    }
    Some(std::iter::once(head).chain(names).collect())
}

/// Renders [`components`] back into the usual Win32 spelling, for messages.
pub fn display(components: &[String]) -> String {
    match components.split_first() {
        Some((head, names)) if head == "UNC" => format!(r"\\{}", names.join("\\")),
        Some((head, names)) if is_drive(head) => format!("{head}\\{}", names.join("\\")),
        Some((head, names)) => format!(r"\\?\{head}\{}", names.join("\\")),
        None => String::new(),
    }
}

/// The path as sent, escaped only when it holds control characters (backslashes stay single).
fn shown(path: &str) -> String {
    if path.chars().any(|c| c < ' ') {
        format!("{path:?}")
    } else {
        path.to_string()
    }
}

/// The `\\?\` spelling of [`components`], which the Win32 file calls take without reinterpreting
/// names or limiting the length (a volume root keeps its trailing backslash).
pub fn verbatim<S: AsRef<str>>(components: &[S]) -> String {
    let mut s = String::from(r"\\?\");
    for (i, c) in components.iter().enumerate() {
        if i > 0 {
            s.push('\\');
        }
        s.push_str(c.as_ref());
    }
    if components.len() == 1 {
        s.push('\\');
    }
    s
}

/// MAX_PATH: what a path without the `\\?\` prefix may hold, the terminating NUL included.
const MAX_PATH: usize = 260;

/// The plain spelling `C:\a\b\` of drive-path [`components`], with the trailing backslash: the
/// form SetVolumeMountPointW, DeleteVolumeMountPointW and GetVolumeNameForVolumeMountPointW
/// document for a mounted folder ("Y:\MountX\"), and what upstream passes them. `None` when
/// Win32 would not read the plain path back as these components: a first component that is no
/// drive (a volume without a drive letter), a name [`parse`] refuses (Win32 strips trailing dots
/// and spaces and maps device names in plain paths; the OS may report such names), or a path
/// that does not fit in MAX_PATH. Callers then keep the `\\?\` spelling.
pub fn plain_dir<S: AsRef<str>>(components: &[S]) -> Option<String> {
    let (drive, names) = components.split_first()?;
    let reread = |n: &str| !n.chars().any(|c| c < ' ') && check_name("", n).is_ok();
    if !is_drive(drive.as_ref()) || !names.iter().all(|n| reread(n.as_ref())) {
        return None;
    }
    let mut s = format!("{}\\", drive.as_ref().to_ascii_uppercase());
    for n in names {
        s.push_str(n.as_ref());
        s.push('\\');
    }
    (s.encode_utf16().count() < MAX_PATH).then_some(s)
}

/// The argument for the mount-point calls: [`plain_dir`], or where there is none the `\\?\`
/// spelling with the trailing backslash they require.
pub fn mount_point_dir<S: AsRef<str>>(components: &[S]) -> String {
    plain_dir(components).unwrap_or_else(|| format!("{}\\", verbatim(components).trim_end_matches('\\')))
}

fn is_drive(s: &str) -> bool {
    matches!(s.as_bytes(), [l, b':'] if l.is_ascii_alphabetic())
}

/// `Volume{xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx}`, as the mount manager names volumes.
pub fn is_volume_guid(s: &str) -> bool {
    let Some(guid) = s.strip_prefix("Volume{").and_then(|g| g.strip_suffix('}')) else { return false };
    guid.len() == 36
        && guid
            .char_indices()
            .all(|(i, c)| if matches!(i, 8 | 13 | 18 | 23) { c == '-' } else { c.is_ascii_hexdigit() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::within;

    const ROOT: &str = r"C:\var\lib\kubelet";

    fn refused(p: &str) -> String {
        match parse(p) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{p:?} was not refused: {other:?}"),
        }
    }

    /// Parses and tests containment in `C:\var\lib\kubelet`, as the backend does lexically.
    fn inside_root(p: &str) -> bool {
        let (p, r) = (parse(p).unwrap(), parse(ROOT).unwrap());
        within(&p.parts(), &r.parts(), true)
    }

    #[test]
    fn accepted_paths_and_their_components() {
        let cases: &[(&str, &[&str])] = &[
            (r"C:\var\lib\kubelet", &["C:", "var", "lib", "kubelet"]),
            (r"c:\var\lib\kubelet", &["C:", "var", "lib", "kubelet"]),
            (r"C:\var\\lib\kubelet\\", &["C:", "var", "lib", "kubelet"]),
            (r"C:\", &["C:"]),
            (r"C:\\\", &["C:"]),
            (r"z:\a b\c.d", &["Z:", "a b", "c.d"]),
            (r"C:\a\...x", &["C:", "a", "...x"]),
            (r"C:\a\.hidden", &["C:", "a", ".hidden"]),
            (r"C:\a\ lead", &["C:", "a", " lead"]),
            (r"C:\a\CONSOLE", &["C:", "a", "CONSOLE"]),
            (r"C:\a\COM10", &["C:", "a", "COM10"]),
            (r"C:\a\LPT", &["C:", "a", "LPT"]),
            (r"C:\a\xNUL", &["C:", "a", "xNUL"]),
            (r"C:\a\pods~1", &["C:", "a", "pods~1"]),
            (r"C:\a\$MFT-ish", &["C:", "a", "$MFT-ish"]),
            (r"C:\a\ünïcödé", &["C:", "a", "ünïcödé"]),
            // Look-alikes of separators and colons are ordinary characters to the W APIs.
            ("C:\\a\\x\u{ff1a}y", &["C:", "a", "x\u{ff1a}y"]),
            ("C:\\a\\x\u{ff0f}..\u{ff0f}y", &["C:", "a", "x\u{ff0f}..\u{ff0f}y"]),
            ("C:\\a\\x\u{ff3c}y", &["C:", "a", "x\u{ff3c}y"]),
            ("C:\\a\\kubelet\u{200b}", &["C:", "a", "kubelet\u{200b}"]),
            ("C:\\a\\\u{2024}\u{2024}", &["C:", "a", "\u{2024}\u{2024}"]),
        ];
        for (p, want) in cases {
            let got = parse(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            assert_eq!(got.parts(), *want, "{p:?}");
        }
        assert_eq!(parse(r"c:\a\\b\").unwrap().to_string(), r"C:\a\b");
        assert_eq!(parse(r"c:\").unwrap().to_string(), r"C:\");
        assert_eq!(parse(r"C:\a\b\c").unwrap().prefix(1), r"C:\a");
    }

    #[test]
    fn refused_paths_name_the_path_and_the_reason() {
        let long_name = format!(r"C:\a\{}", "n".repeat(256));
        let long_wide_name = format!(r"C:\a\{}", "\u{1f600}".repeat(128)); // 256 UTF-16 units
        let long_path = format!(r"C:{}", r"\abcdefgh".repeat(3600));
        let cases: &[(&str, &str)] = &[
            ("", "empty"),
            ("C:\\a\0b", "control character"),
            ("C:\\a\tb", "control character"),
            ("C:\\a\nb", "control character"),
            ("C:\\a\u{1f}b", "control character"),
            ("var\\lib", "not an absolute"),
            ("kubelet", "not an absolute"),
            ("1:\\x", "not an absolute"),
            ("CC:\\x", "not an absolute"),
            ("C:", "relative to the drive"),
            ("C:foo", "relative to the drive"),
            ("C:..\\x", "relative to the drive"),
            ("C:/var/lib", "uses / as a separator"),
            ("/var/lib/kubelet", "not an absolute"),
            ("\\var\\lib", "has no drive"),
            ("\\..\\x", "has no drive"),
            ("\\\\server\\share\\x", "UNC"),
            ("\\\\127.0.0.1\\c$\\x", "UNC"),
            ("\\\\?\\C:\\var\\lib\\kubelet", "\\\\?\\ device namespace"),
            ("\\\\?\\UNC\\server\\share", "\\\\?\\ device namespace"),
            ("\\\\.\\C:\\x", "\\\\.\\ device namespace"),
            ("\\\\.\\PhysicalDrive0", "\\\\.\\ device namespace"),
            ("\\??\\C:\\x", "\\??\\ device namespace"),
            ("C:\\var\\lib\\kubelet\\..", "`..` component"),
            ("C:\\var\\lib\\kubelet\\..\\..\\Windows", "`..` component"),
            ("C:\\var\\lib\\kubelet\\.\\x", "`.` component"),
            ("C:\\var\\lib\\kubelet\\a/../../x", "'/'"),
            ("C:\\a\\b:stream", "alternate data streams"),
            ("C:\\a\\b::$DATA", "alternate data streams"),
            ("C:\\a\\b:$I30:$INDEX_ALLOCATION", "alternate data streams"),
            ("C:\\a\\x<y", "'<'"),
            ("C:\\a\\x>y", "'>'"),
            ("C:\\a\\x\"y", "'\"'"),
            ("C:\\a\\x|y", "'|'"),
            ("C:\\a\\x?", "'?'"),
            ("C:\\a\\*", "'*'"),
            ("C:\\a\\CON", "device CON"),
            ("C:\\a\\con", "device CON"),
            ("C:\\a\\nul.txt", "device NUL"),
            ("C:\\a\\NUL.tar.gz", "device NUL"),
            ("C:\\a\\aux .log", "device AUX"),
            ("C:\\a\\PRN\\x", "device PRN"),
            ("C:\\a\\com1", "device COM1"),
            ("C:\\a\\COM0.x", "device COM0"),
            ("C:\\a\\lpt9", "device LPT9"),
            ("C:\\a\\COM\u{b9}", "device COM\u{b9}"),
            ("C:\\a\\lpt\u{b3}.txt", "device LPT\u{b3}"),
            ("C:\\a\\CONIN$", "device CONIN$"),
            ("C:\\a\\conout$.x", "device CONOUT$"),
            ("C:\\a\\CON.", "ending in a dot or space"),
            ("C:\\a\\NUL ", "ending in a dot or space"),
            ("C:\\a\\kubelet.", "ending in a dot or space"),
            ("C:\\a\\kubelet ", "ending in a dot or space"),
            ("C:\\a\\kubelet. . ", "ending in a dot or space"),
            ("C:\\a\\...", "ending in a dot or space"),
            (&long_name, "256 UTF-16 units"),
            (&long_wide_name, "256 UTF-16 units"),
            (&long_path, "the limit is 32000"),
        ];
        for (p, needle) in cases {
            let m = refused(p);
            assert!(m.contains(needle), "{p:?}: {m:?} should mention {needle:?}");
            if !p.is_empty() && p.len() < 300 {
                assert!(m.contains(&shown(p)), "{p:?}: {m:?} should name the path");
            }
        }
        // The exact limits are accepted.
        parse(&format!(r"C:\a\{}", "n".repeat(255))).unwrap();
        parse(&format!(r"C:{}", r"\abcdefgh".repeat(3555))).unwrap();
    }

    #[test]
    fn lexical_containment_is_by_component_and_case_insensitive() {
        let cases: &[(&str, bool)] = &[
            (r"C:\var\lib\kubelet", true),
            (r"C:\var\lib\kubelet\pods\x", true),
            (r"c:\VAR\LIB\KUBELET\x", true),
            (r"C:\Var\Lib\Kubelet\\", true),
            (r"C:\var\lib\kubelet-evil", false),
            (r"C:\var\lib\kubelet-evil\x", false),
            (r"C:\var\lib\kubeletx", false),
            (r"C:\var\lib\kube", false),
            (r"C:\var\lib", false),
            (r"D:\var\lib\kubelet\x", false),
            (r"C:\var\lib\KUBELE~1\x", false),
            ("C:\\var\\lib\\kubelet\u{200b}\\x", false),
            ("C:\\var\\lib\\\u{200b}kubelet\\x", false),
            ("C:\\var\\lib\\kubel\u{0435}t\\x", false),
            ("C:\\var\\lib\\\u{ff2b}ubelet\\x", false),
            ("C:\\var\\lib\\kubelet\u{ff3c}x", false),
            ("C:\\var\\lib\\kubelet\u{ff0f}x", false),
        ];
        for (p, want) in cases {
            assert_eq!(inside_root(p), *want, "{p:?}");
        }
    }

    #[test]
    fn canonical_paths_from_the_os_split_into_comparable_components() {
        let guid = "Volume{0a1b2c3d-0000-1111-2222-333344445555}";
        let cases: Vec<(String, Option<Vec<&str>>)> = vec![
            (r"\\?\C:\var\lib\kubelet".into(), Some(vec!["C:", "var", "lib", "kubelet"])),
            (r"\\?\c:\var\".into(), Some(vec!["C:", "var"])),
            (r"\\?\C:\".into(), Some(vec!["C:"])),
            (r"\??\C:\x".into(), Some(vec!["C:", "x"])),
            (r"C:\x\y".into(), Some(vec!["C:", "x", "y"])),
            (r"C:".into(), Some(vec!["C:"])),
            (r"\\?\UNC\server\share\dir".into(), Some(vec!["UNC", "server", "share", "dir"])),
            (r"\\?\unc\server\share".into(), Some(vec!["UNC", "server", "share"])),
            (r"\\server\share\d".into(), Some(vec!["UNC", "server", "share", "d"])),
            (format!(r"\\?\{guid}\"), Some(vec![guid])),
            (format!(r"\??\{guid}\a\b"), Some(vec![guid, "a", "b"])),
            (r"\\?\Volume{nope}\a".into(), None),
            (r"\\?\GLOBALROOT\Device\HarddiskVolume1\x".into(), None),
            (r"\\?\UNC\server".into(), None),
            // Upstream v1.3's SMB link target, as given and as the link stores it.
            (r"\\?\\\host\share\pv\".into(), Some(vec!["UNC", "host", "share", "pv"])),
            (r"\??\\\host\share\pv".into(), Some(vec!["UNC", "host", "share", "pv"])),
            (r"\??\\\host\share".into(), Some(vec!["UNC", "host", "share"])),
            (r"\??\\\host".into(), None),
            (r"\??\\\host\share\..\x".into(), None),
            (r"\??\\\?\C:\x".into(), None),
            (r"\??\\\.\C:\x".into(), None),
            (r"\??\\\\host\share".into(), None),
            (r"\??\\\".into(), None),
            (r"\\?\C:\a\..\b".into(), None),
            (r"relative\x".into(), None),
            (r"\Device\HarddiskVolume1\x".into(), None),
        ];
        for (p, want) in cases {
            let got = components(&p);
            assert_eq!(got.as_ref().map(|v| v.iter().map(String::as_str).collect::<Vec<_>>()), want, "{p:?}");
        }
        // A canonical path and a parsed request compare on the same terms.
        let canon = components(r"\\?\C:\VAR\lib\kubelet\pods").unwrap();
        assert!(within(&canon, &parse(ROOT).unwrap().parts(), true));
        let evil = components(r"\\?\C:\var\lib\kubelet-evil").unwrap();
        assert!(!within(&evil, &parse(ROOT).unwrap().parts(), true));
        let share = components(r"\\?\UNC\C:\var\lib\kubelet").unwrap_or_default();
        assert!(!within(&share, &parse(ROOT).unwrap().parts(), true));
        // A link made by upstream and the one we make name the same share: a retried
        // NewSmbGlobalMapping after an in-place upgrade finds its own link.
        let (theirs, ours) =
            (components(r"\??\\\Host\Share\pv").unwrap(), components(r"\\?\UNC\host\share\pv\").unwrap());
        assert!(theirs.len() == ours.len() && within(&theirs, &ours, true));
        assert!(!within(&theirs, &parse(ROOT).unwrap().parts(), true));
        assert_eq!(display(&theirs), r"\\Host\Share\pv");
        assert_eq!(verbatim(&theirs), r"\\?\UNC\Host\Share\pv");
    }

    #[test]
    fn display_renders_components() {
        let show = |p: &str| display(&components(p).unwrap());
        assert_eq!(show(r"\\?\c:\a\b"), r"C:\a\b");
        assert_eq!(show(r"\\?\C:\"), r"C:\");
        assert_eq!(show(r"\\?\UNC\srv\share\x"), r"\\srv\share\x");
        let vol = r"\\?\Volume{0a1b2c3d-0000-1111-2222-333344445555}\d";
        assert_eq!(show(vol), vol);
    }

    #[test]
    fn verbatim_spelling() {
        assert_eq!(verbatim(&parse(r"c:\a\b\").unwrap().parts()), r"\\?\C:\a\b");
        assert_eq!(verbatim(&["C:"]), r"\\?\C:\");
        assert_eq!(verbatim(&components(r"\\srv\share\d").unwrap()), r"\\?\UNC\srv\share\d");
        let vol = "Volume{0a1b2c3d-0000-1111-2222-333344445555}";
        assert_eq!(verbatim(&[vol]), format!(r"\\?\{vol}\"));
    }
}

#[cfg(test)]
mod property {
    //! Whatever string passes [`parse`] and lies inside a root by name also lies inside it after
    //! Win32's own normalisation (`/` as `\`, `.` and `..` folded, trailing dots and spaces
    //! dropped, case ignored): no spelling gets a different meaning once it meets the OS.
    use super::*;
    use crate::paths::within;
    use proptest::prelude::*;

    /// What `GetFullPathNameW` does to a drive path's names, as far as containment goes.
    fn win32_normalise(path: &str) -> Option<Vec<String>> {
        let path = path.replace('/', "\\");
        let (drive, rest) = path.split_at_checked(2)?;
        let mut out = vec![drive.to_ascii_uppercase()];
        for name in rest.split('\\') {
            let name = name.trim_end_matches(['.', ' ']);
            match name {
                "" => {}
                ".." if out.len() > 1 => {
                    out.pop();
                }
                ".." => {}
                n => out.push(n.to_string()),
            }
        }
        Some(out)
    }

    const STARTS: &[&str] = &[
        r"C:\var\lib\kubelet",
        r"c:\VAR\Lib\KUBELET",
        r"C:\var\lib",
        r"C:\var\lib\kubelet-evil",
        r"C:\",
        r"D:\var\lib\kubelet",
        "C:",
        r"\\?\C:\var\lib\kubelet",
        "C:/var/lib/kubelet",
        r"\var\lib\kubelet",
    ];
    const SEPARATORS: &[&str] = &["\\", "\\", "\\", "/", "\\\\"];
    const NAMES: &[&str] = &[
        "kubelet",
        "KUBELET",
        "kubelet-evil",
        "kubelet.",
        "kubelet ",
        "..",
        ".",
        "...",
        "x",
        "pods",
        "CON",
        "nul.txt",
        "a:b",
        "::$DATA",
        "\u{200b}",
        "\u{ff0f}..",
        "kube\u{0131}let",
        "?",
        "*",
        "a b",
        "\u{0}",
    ];

    #[test]
    fn accepted_paths_mean_the_same_to_windows() {
        let root = ["C:", "var", "lib", "kubelet"];
        let config = ProptestConfig { cases: 4096, failure_persistence: None, ..ProptestConfig::default() };
        let mut runner = proptest::test_runner::TestRunner::new(config);
        let (accepted, inside) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let tail =
            proptest::collection::vec((proptest::sample::select(SEPARATORS), proptest::sample::select(NAMES)), 0..6);
        let strategy = (proptest::sample::select(STARTS), tail);
        runner
            .run(&strategy, |(start, tail)| {
                let path: String = std::iter::once(start).chain(tail.iter().flat_map(|(s, n)| [*s, *n])).collect();
                if let Ok(p) = parse(&path) {
                    accepted.set(accepted.get() + 1);
                    let ours = within(&p.parts(), &root, true);
                    inside.set(inside.get() + ours as u32);
                    let theirs = win32_normalise(&path).is_some_and(|n| within(&n, &root, true));
                    prop_assert_eq!(ours, theirs, "{:?} parsed as {:?}", path, p);
                    prop_assert!(!p.names.iter().any(|n| n == ".." || n == "." || n.contains(':')));
                }
                Ok(())
            })
            .unwrap();
        // The generator must reach both sides of the question, or the property says nothing.
        assert!(accepted.get() > 300 && inside.get() > 100, "accepted {}, inside {}", accepted.get(), inside.get());
    }

    /// R3: the mount-point calls get `C:\a\b\`, as documented and as upstream passes them; the
    /// `\\?\` form stays only for what a plain path cannot name.
    #[test]
    fn mount_point_arguments_are_plain_drive_paths_with_a_trailing_backslash() {
        let dir = |c: &[&str]| mount_point_dir(c);
        assert_eq!(dir(&["C:", "var", "lib", "kubelet", "globalmount"]), r"C:\var\lib\kubelet\globalmount\");
        assert_eq!(dir(&["c:"]), r"C:\");
        // No drive letter, a name Win32 would change, a path beyond MAX_PATH: verbatim.
        let guid = "Volume{0a1b2c3d-0000-1111-2222-333344445555}";
        assert_eq!(dir(&[guid, "pv"]), format!(r"\\?\{guid}\pv\"));
        assert_eq!(dir(&["C:", "pv", "x."]), r"\\?\C:\pv\x.\");
        assert_eq!(dir(&["C:", "pv", "NUL"]), r"\\?\C:\pv\NUL\");
        let long = "n".repeat(150);
        assert_eq!(plain_dir(&["C:", &long, &long]), None);
        assert!(plain_dir(&["C:", &long, &long[..100]]).is_some());
    }
}
