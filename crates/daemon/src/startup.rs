//! What the daemon checks about its command line before serving, beyond the form of each value:
//! the allowed roots must be absolute paths (otherwise exit 2, as for any bad flag), and a root
//! that does not exist yet is worth a warning (every path under it would be refused).

use std::path::Path;

use crate::flags::{FlagError, Options};

/// Build identity, embedded by build.rs.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the daemon was built from (12 hex digits), or `unknown`.
pub const COMMIT: &str = env!("CSI_PROXY_COMMIT");
/// Whether the work tree had uncommitted changes when it was built.
pub const DIRTY: bool = matches!(env!("CSI_PROXY_DIRTY").as_bytes(), b"true");

/// What `-version` prints: `csi-proxy 0.1.0 (commit abcdef123456)`, with `, dirty` when built
/// from a work tree with uncommitted changes.
pub fn version_line() -> String {
    format!("csi-proxy {VERSION} (commit {COMMIT}{})", if DIRTY { ", dirty" } else { "" })
}

/// How an absolute path is written on this platform, for the error message.
#[cfg(windows)]
const ABSOLUTE: &str = r"an absolute path (a drive path such as C:\var\lib\kubelet, or a UNC path \\server\share)";
#[cfg(not(windows))]
const ABSOLUTE: &str = "an absolute path (starting with /)";

/// Every allowed root with the flag (without its dash) that set it.
fn roots(opts: &Options) -> impl Iterator<Item = (&'static str, &String)> {
    std::iter::once(("kubelet-path", &opts.kubelet_path)).chain(opts.working_dirs.iter().map(|d| ("working-dir", d)))
}

/// `-kubelet-path` and every `-working-dir` must be absolute: a relative root would depend on the
/// daemon's working directory (the service control manager starts it in System32).
pub fn check_roots(opts: &Options) -> Result<(), FlagError> {
    for (flag, value) in roots(opts) {
        if !is_absolute(value, cfg!(windows)) {
            return Err(FlagError::InvalidValue { flag: flag.to_string(), value: value.clone(), expected: ABSOLUTE });
        }
    }
    Ok(())
}

/// Absolute as the host path layer understands it. Windows: a drive letter, a colon and a
/// separator (`C:\x`, `C:/x`), or a UNC path (`\\server\share`, also `\\?\C:\x`). Elsewhere: a
/// leading `/`.
fn is_absolute(path: &str, windows: bool) -> bool {
    if !windows {
        return path.starts_with('/');
    }
    let b = path.as_bytes();
    let drive = b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && matches!(b[2], b'\\' | b'/');
    let unc = b.len() > 2 && (b.starts_with(br"\\") || b.starts_with(b"//")) && !matches!(b[2], b'\\' | b'/');
    drive || unc
}

/// Warns about each allowed root that is not an existing directory: until it is created, every
/// call on a path under it fails.
pub fn warn_missing_roots(opts: &Options) {
    for (flag, root) in roots(opts) {
        let flag = format_args!("-{flag}");
        match std::fs::metadata(Path::new(root)) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                tracing::warn!("allowed root {root} ({flag}) is not a directory; calls on paths under it will fail")
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!("allowed root {root} ({flag}) does not exist; calls on paths under it will fail until it is created")
            }
            Err(e) => tracing::warn!("allowed root {root} ({flag}) cannot be inspected: {e}"),
        }
    }
}

/// `-linux-smb-dir`, if it exists already, gets the socket directory's check
/// (`csi_proxy_transport::unix::check_private`): whoever else can write to it could swap a
/// share's mount folder for a link or a mount of their own, and pods would be handed that. Then
/// it is made owner-only: the shares below are mounted open to every user (pods reach them
/// through the kubelet's bind mounts), so this directory is what keeps other local users out of
/// them; one others can read or enter (the kubelet makes a missing hostPath directory 0755) is
/// chmod-ed 0700, and said so. A directory that does not exist yet is made by the daemon itself,
/// owner-only, at the first mount.
#[cfg(target_os = "linux")]
pub fn check_smb_dir(dir: &Path) -> anyhow::Result<()> {
    use csi_proxy_transport::unix::{check_private, Private};
    if dir.as_os_str().is_empty() {
        return Ok(());
    }
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(anyhow::anyhow!("cannot inspect -linux-smb-dir {}: {e}", dir.display())),
    };
    check_private(&meta, Private::Dir).map_err(|e| {
        anyhow::anyhow!(
            "-linux-smb-dir {} {}; refusing to mount shares there (another user could replace a share's folder). Use a \
             directory owned by uid {} that only it can write to (e.g. chown {} and chmod 0700 it), or remove it and let \
             the daemon create it",
            dir.display(),
            e.why,
            e.uid,
            e.uid
        )
    })?;
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            anyhow::anyhow!(
                "-linux-smb-dir {} has mode {mode:04o} (other users can reach the shares mounted in it) and cannot be \
                 made 0700: {e}",
                dir.display()
            )
        })?;
        tracing::warn!(
            dir = %dir.display(),
            was = format!("{mode:04o}"),
            "made -linux-smb-dir owner-only (0700): other users could read and enter it, and so reach the shares mounted in it"
        );
    }
    Ok(())
}

/// An error and its causes, `outer: inner: …`, leaving out a cause whose text the message before
/// it already ends with (many errors print their source in their own message and also return it
/// as `source()`, which anyhow's `{:#}` would print a second time).
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.is_empty() {
            out = text;
        } else if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths() {
        for p in [r"C:\var\lib\kubelet", "c:/var", r"\\server\share", r"\\?\C:\x", "//server/share"] {
            assert!(is_absolute(p, true), "{p}");
        }
        for p in ["", "kubelet", r"var\lib", "C:", r"C:var", r"\var", "/var", r"\\", r"\\\x", "1:\\x"] {
            assert!(!is_absolute(p, true), "{p}");
        }
        assert!(is_absolute("/var/lib/kubelet", false));
        for p in ["", "var/lib/kubelet", "./x", r"C:\var"] {
            assert!(!is_absolute(p, false), "{p}");
        }
    }

    #[test]
    fn roots_are_checked_with_their_flag() {
        let root = if cfg!(windows) { r"C:\k" } else { "/k" };
        let mut o = Options { kubelet_path: root.into(), working_dirs: vec![root.into()], ..Options::default() };
        check_roots(&o).unwrap();
        o.working_dirs.push("rel".into());
        let e = check_roots(&o).unwrap_err().to_string();
        assert!(e.contains("-working-dir") && e.contains("\"rel\"") && e.contains("absolute path"), "{e}");
        o.kubelet_path = "kubelet".into();
        let e = check_roots(&o).unwrap_err().to_string();
        assert!(e.contains("-kubelet-path") && e.contains("\"kubelet\""), "{e}");
    }

    #[test]
    fn repeated_causes_are_printed_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("creating /x: {source}")]
        struct Outer {
            source: std::io::Error,
        }
        let io = std::io::Error::new(std::io::ErrorKind::AlreadyExists, "File exists");
        let e = anyhow::Error::new(Outer { source: io }).context("cannot serve");
        assert_eq!(format!("{e:#}"), "cannot serve: creating /x: File exists: File exists");
        assert_eq!(error_chain(&e), "cannot serve: creating /x: File exists");
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_chain(&e), "outer: inner");
    }

    #[test]
    fn version_line_form() {
        let v = version_line();
        assert!(v.starts_with(&format!("csi-proxy {VERSION} (commit {COMMIT}")), "{v}");
        assert_eq!(v.ends_with(", dirty)"), DIRTY, "{v}");
        assert!(COMMIT == "unknown" || COMMIT.len() == 12, "{COMMIT}");
    }
}

#[cfg(test)]
mod version_flag_tests {
    use crate::flags::{parse, FlagError, ParseOutcome};

    fn outcome(args: &[&str]) -> Result<ParseOutcome, FlagError> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn version_flag_forms() {
        for args in [&["-version"][..], &["--version"], &["-version=true"], &["-v=2", "-version", "-bogus"]] {
            assert_eq!(outcome(args), Ok(ParseOutcome::Version), "{args:?}");
        }
        assert!(matches!(outcome(&["-version=false"]), Ok(ParseOutcome::Run(_))));
        assert!(matches!(outcome(&["-version=maybe"]), Err(FlagError::InvalidValue { .. })));
        assert!(crate::flags::usage().contains("  -version\n"));
    }
}
