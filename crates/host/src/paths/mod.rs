//! Path containment shared by every native backend: the allowed roots, the lexical rules a path
//! must pass before it touches the filesystem, and the component-wise "inside a root" test.
//!
//! The lexical rules are pure functions of the string, so both OS rule sets are tested on any
//! build host. Resolving links is the backends' job: they open the existing part of a path,
//! ask the OS for the canonical path of what they opened, and test that with [`within`] against
//! the [`Roots`] before acting relative to the open handle.

pub mod unix;
pub mod windows;

use crate::Error;
use std::fmt;

/// The roots paths must stay inside: every `-working-dir`, then `-kubelet-path`, as given on the
/// command line. Backends canonicalise them per call, since a root may be created or
/// re-linked after the daemon starts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Roots(Vec<String>);

impl Roots {
    pub fn new(roots: Vec<String>) -> Self {
        Roots(roots)
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    /// The refusal to remove or empty a root itself: it would take every pod's data with it,
    /// and no driver asks for it.
    pub fn refuse_removal(&self, path: &str) -> Error {
        Error::denied(format!("refusing to remove {path}: it is one of the working directories {self}"))
    }

    /// The refusal for a path whose canonical form (`resolved`, when known) is outside every root.
    ///
    /// The text names the path as given and the roots, never where the path led: it is the same
    /// whatever exists outside (a file, a directory, nothing, a link and its target), so a link
    /// inside a root can't be used to explore the host (the daemon's own `/proc/self/cwd`,
    /// `/proc/self/fd/N`, what is in `/etc`). The resolution goes to the debug log, for the
    /// operator.
    pub fn outside(&self, path: &str, resolved: Option<&str>) -> Error {
        if let Some(r) = resolved {
            tracing::debug!(path = %crate::error::clip(path), resolved = %crate::error::clip(r), "refused: outside the working directories");
        }
        Error::denied(format!("path {} is not within the working directories {self}", crate::error::clip(path)))
    }
}

/// `[root1, root2]`, as given (no escaping, so Windows paths read as typed).
impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]", self.0.join(", "))
    }
}

/// True when `path` equals `root` or lies below it, comparing whole components (so
/// `kubelet-evil` is not inside `kubelet`). Both must be canonical component lists.
pub fn within<S: AsRef<str>, R: AsRef<str>>(path: &[S], root: &[R], fold_case: bool) -> bool {
    path.len() >= root.len()
        && root.iter().zip(path).all(|(r, p)| {
            let (r, p) = (r.as_ref(), p.as_ref());
            if fold_case {
                crate::same_ignoring_case(r, p)
            } else {
                r == p
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_compares_whole_components() {
        let root = ["var", "lib", "kubelet"];
        assert!(within(&["var", "lib", "kubelet"], &root, false));
        assert!(within(&["var", "lib", "kubelet", "pods"], &root, false));
        assert!(!within(&["var", "lib", "kubelet-evil"], &root, false));
        assert!(!within(&["var", "lib"], &root, false));
        assert!(!within(&["var", "lib", "Kubelet"], &root, false));
        assert!(within(&["VAR", "Lib", "KUBELET", "x"], &root, true));
        assert!(!within(&["var", "lib", "kubelet\u{0131}"], &root, true));
    }

    #[test]
    fn case_folding_is_one_to_one() {
        assert!(crate::same_ignoring_case("straße", "STRAßE"));
        assert!(!crate::same_ignoring_case("straße", "STRASSE"));
        assert!(crate::same_ignoring_case("ÄÖÜ", "äöü"));
        // Look-alikes stay different: Cyrillic а is not Latin a.
        assert!(!crate::same_ignoring_case("kubelet", "kubelet\u{200b}"));
        assert!(!crate::same_ignoring_case("k\u{0430}", "ka"));
    }

    #[test]
    fn outside_names_path_and_roots_never_the_resolution() {
        let roots = Roots::new(vec!["/a".into(), "/var/lib/kubelet".into()]);
        let e = roots.outside("/var/lib/kubelet/l/x", Some("/etc/x")).to_string();
        assert!(e.contains("/var/lib/kubelet/l/x") && !e.contains("/etc"), "{e}");
        assert_eq!(e, roots.outside("/var/lib/kubelet/l/x", Some("/proc/1/cwd")).to_string());
        let e = roots.outside("/etc", None).to_string();
        assert_eq!(e, "path /etc is not within the working directories [/a, /var/lib/kubelet]");
        let win = Roots::new(vec![r"C:\var\lib\kubelet".into()]);
        assert!(win.outside(r"D:\x", None).to_string().ends_with(r"[C:\var\lib\kubelet]"));
        assert!(win.refuse_removal(r"C:\var\lib\kubelet").to_string().contains("refusing to remove"));
    }
}
