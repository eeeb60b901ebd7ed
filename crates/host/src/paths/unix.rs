//! Lexical rules for paths on Linux and other unix hosts.

use crate::{Error, Result};

/// Longest path the kernel accepts (`PATH_MAX`, including the terminating NUL).
pub const PATH_MAX: usize = 4096;
/// Longest single name (`NAME_MAX`).
pub const NAME_MAX: usize = 255;

/// Splits an absolute path into its names, refusing what could change its meaning once it
/// meets the filesystem. `.` and repeated or trailing slashes are dropped; `..` is refused
/// outright, because resolving it lexically would disagree with the kernel whenever a link
/// precedes it.
pub fn parse(path: &str) -> Result<Vec<&str>> {
    if path.is_empty() {
        return Err(Error::invalid("path is empty; expected an absolute path"));
    }
    if path.contains('\0') {
        return Err(Error::invalid(format!("path {path:?} contains a NUL byte")));
    }
    if !path.starts_with('/') {
        return Err(Error::invalid(format!("path {path} is not absolute; expected a path starting with /")));
    }
    if path.len() >= PATH_MAX {
        return Err(Error::invalid(format!(
            "path {}… is {} bytes long; the limit is {}",
            truncate(path, 64),
            path.len(),
            PATH_MAX - 1
        )));
    }
    let mut names = Vec::new();
    for name in path.split('/') {
        match name {
            "" | "." => {}
            ".." => return Err(Error::invalid(format!("path {path} contains a `..` component"))),
            n if n.len() > NAME_MAX => {
                return Err(Error::invalid(format!(
                    "path {path} has a component of {} bytes; the limit is {NAME_MAX}",
                    n.len()
                )))
            }
            n => names.push(n),
        }
    }
    Ok(names)
}

/// The canonical components of an absolute path the OS returned (no `.`/`..` to expect).
pub fn components(canonical: &str) -> Vec<&str> {
    canonical.split('/').filter(|c| !c.is_empty()).collect()
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(p: &str) -> String {
        match parse(p) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{p:?} was not refused: {other:?}"),
        }
    }

    #[test]
    fn names_are_split_and_dots_dropped() {
        assert_eq!(parse("/var/lib/kubelet").unwrap(), ["var", "lib", "kubelet"]);
        assert_eq!(parse("//var/./lib//kubelet/").unwrap(), ["var", "lib", "kubelet"]);
        assert_eq!(parse("/").unwrap(), Vec::<&str>::new());
        assert_eq!(parse("/a/...").unwrap(), ["a", "..."]);
        assert_eq!(parse("/a/..b/c..").unwrap(), ["a", "..b", "c.."]);
    }

    #[test]
    fn tricks_are_refused_naming_the_path() {
        assert!(refused("").contains("empty"));
        assert!(refused("var/lib/kubelet").contains("not absolute"));
        assert!(refused("./x").contains("not absolute"));
        assert!(refused("/var/lib/kubelet/../../etc").contains("`..`"));
        assert!(refused("/var/lib/kubelet/..").contains("/var/lib/kubelet/.."));
        assert!(refused("/var/lib/kubelet/x\0/etc").contains("NUL"));
        assert!(refused(&format!("/var/{}", "a".repeat(256))).contains("256 bytes"));
        assert!(refused(&"/a".repeat(2048)).contains("limit is 4095"));
        let long_multibyte = format!("/{}", "é/".repeat(1400));
        assert!(refused(&long_multibyte).contains("bytes long"));
    }
}
