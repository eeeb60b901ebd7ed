//! What both SMB backends (and the server) share: the one rule for a remote path, and how long a
//! share may take to answer a probe.

use crate::error::clip;
use crate::{Error, Result};
use std::time::Duration;

/// How long a share's reachability probe may take before the share counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// A request's remote path in the form the backends take: `/` accepted as a separator
/// (upstream #128) and turned into `\`, then checked by [`remote_components`]. Errors quote the
/// path as the request gave it, under the name of its `field`.
pub fn normalise_remote(field: &str, remote: &str) -> Result<String> {
    let normalised = remote.replace('/', "\\");
    check(field, remote, &normalised)?;
    Ok(normalised)
}

/// The non-empty components of a remote path (`\\host\share[\dir…]`, with `\` separators, as
/// [`normalise_remote`] gives it). At least host and share must be present. Components that
/// would change meaning on the way to the server are refused: `.` and `..` (a `\\?\` target is
/// not normalised), wildcards, and control characters.
pub fn remote_components(remote: &str) -> Result<Vec<&str>> {
    check("remote path", remote, remote)
}

fn check<'a>(name: &str, shown: &str, remote: &'a str) -> Result<Vec<&'a str>> {
    let shown = clip(shown);
    let parts: Vec<&str> = remote.split('\\').filter(|c| !c.is_empty()).collect();
    if parts.len() < 2 {
        return Err(Error::invalid(format!("{name} {shown:?} is invalid: expected \\\\host\\share[\\path]")));
    }
    if let Some(bad) = parts.iter().find(|c| **c == "." || **c == "..") {
        return Err(Error::invalid(format!(
            "{name} {shown:?} contains a `{bad}` component; expected \\\\host\\share[\\path] without relative parts"
        )));
    }
    if let Some(c) = remote.chars().find(|c| *c < ' ' || matches!(c, '?' | '*')) {
        return Err(Error::invalid(format!(
            "{name} {shown:?} contains the character {c:?}, which can't be part of a share path"
        )));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_paths_need_host_and_share_and_no_relative_parts() {
        assert_eq!(normalise_remote("remote_path", "//srv/share/sub").unwrap(), r"\\srv\share\sub");
        assert_eq!(normalise_remote("remote_path", r"\\srv\share").unwrap(), r"\\srv\share");
        assert_eq!(remote_components(r"\\srv\share\a\\b").unwrap(), ["srv", "share", "a", "b"]);
        for bad in ["", "srv", r"\\srv\", "//", r"\\srv\share\..", "//srv/./share", r"\\srv\sh*re", "\\\\srv\\s\u{1}"] {
            let e = normalise_remote("remote_path", bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}");
            assert!(e.to_string().contains(&format!("remote_path {bad:?}")), "{e}");
        }
        assert!(remote_components("srv").unwrap_err().to_string().contains(r#"remote path "srv" is invalid"#));
    }
}
