//! The process's limit on open files.
//!
//! Every connection is a descriptor. systemd starts services with a soft RLIMIT_NOFILE of 1024
//! (and a hard limit far above it); Go programs, upstream's included, raise the soft limit to
//! the hard one at start (Go ≥ 1.19), and so does csi-proxy.

/// Soft and hard RLIMIT_NOFILE after [`raise_nofile_limit`]; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot raise the open-file limit (RLIMIT_NOFILE) from {from:?} to {to:?}: {source}")]
pub struct LimitError {
    pub from: Option<u64>,
    pub to: Option<u64>,
    #[source]
    pub source: std::io::Error,
}

/// Raises the soft RLIMIT_NOFILE to the hard limit, and returns the limits then in force.
#[cfg(unix)]
pub fn raise_nofile_limit() -> Result<NofileLimit, LimitError> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let now = getrlimit(Resource::Nofile);
    if now.current == now.maximum {
        return Ok(NofileLimit { soft: now.current, hard: now.maximum });
    }
    // An unlimited hard limit cannot be the soft one for NOFILE (the kernel caps it at
    // fs.nr_open): then settle for a large finite value.
    let targets: &[Option<u64>] = match now.maximum {
        Some(_) => &[now.maximum],
        None => &[Some(1 << 20), Some(1 << 16)],
    };
    let mut last = None;
    for &to in targets {
        match setrlimit(Resource::Nofile, Rlimit { current: to, maximum: now.maximum }) {
            Ok(()) => {
                let after = getrlimit(Resource::Nofile);
                return Ok(NofileLimit { soft: after.current, hard: after.maximum });
            }
            Err(e) => last = Some((to, e)),
        }
    }
    let (to, e) = last.expect("at least one target");
    Err(LimitError { from: now.current, to, source: e.into() })
}

/// Windows has no such limit on handles.
#[cfg(not(unix))]
pub fn raise_nofile_limit() -> Result<NofileLimit, LimitError> {
    Ok(NofileLimit { soft: None, hard: None })
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

    #[test]
    fn soft_limit_is_raised_to_the_hard_limit() {
        let before = getrlimit(Resource::Nofile);
        let low = before.maximum.map_or(512, |m| m.min(512));
        setrlimit(Resource::Nofile, Rlimit { current: Some(low), maximum: before.maximum }).unwrap();
        let raised = raise_nofile_limit().unwrap();
        assert_eq!(raised.hard, before.maximum);
        assert!(raised.soft > Some(low) || raised.soft.is_none(), "{raised:?}");
        if before.maximum.is_some() {
            assert_eq!(raised.soft, before.maximum);
        }
        assert_eq!(getrlimit(Resource::Nofile).current, raised.soft);
    }
}
