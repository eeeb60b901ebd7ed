//! The one error type of the host layer. Each variant is a failure kind that the server maps to
//! exactly one gRPC code; messages name the value at fault.

use std::fmt;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The request itself is wrong (bad path, bad ID, out-of-range value).
    #[error("{0}")]
    InvalidArgument(String),
    /// The named object (disk, volume, path, mapping, portal, service) does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The object to create is already there and differs from what was asked.
    #[error("{0}")]
    AlreadyExists(String),
    /// The host is not in a state that allows the operation (e.g. directory not empty).
    #[error("{0}")]
    FailedPrecondition(String),
    /// Refused by policy (path outside the allowed roots) or by the OS.
    #[error("{0}")]
    PermissionDenied(String),
    /// This build has no implementation of the operation on this OS.
    #[error("{operation} is not implemented on {os}")]
    Unimplemented { operation: &'static str, os: &'static str },
    /// The call ran into concurrent work on the same object (a disk locked by another process,
    /// a path that changed type while it was walked); retrying may succeed.
    #[error("{0}")]
    Aborted(String),
    /// A dependency of the host (service, device, tool) is temporarily unreachable.
    #[error("{0}")]
    Unavailable(String),
    /// Anything else: an unexpected OS or tool failure.
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Error::InvalidArgument(msg.to_string())
    }
    pub fn not_found(msg: impl fmt::Display) -> Self {
        Error::NotFound(msg.to_string())
    }
    pub fn exists(msg: impl fmt::Display) -> Self {
        Error::AlreadyExists(msg.to_string())
    }
    pub fn precondition(msg: impl fmt::Display) -> Self {
        Error::FailedPrecondition(msg.to_string())
    }
    pub fn denied(msg: impl fmt::Display) -> Self {
        Error::PermissionDenied(msg.to_string())
    }
    pub fn unavailable(msg: impl fmt::Display) -> Self {
        Error::Unavailable(msg.to_string())
    }
    pub fn internal(msg: impl fmt::Display) -> Self {
        Error::Internal(msg.to_string())
    }

    /// A volume call that looked its volume's disk up [`MOVED_TRIES`] times, took that disk's
    /// lock each time, and found the volume on another disk each time (disks detached and
    /// attached meanwhile). `Aborted`, the kind for concurrent work on the same object: gRPC's
    /// code for a concurrency conflict, and the code CSI gives an operation that meets another
    /// one on its volume; the caller retries the whole call, as Kubernetes does anyway.
    pub fn volume_moved(volume_id: &str) -> Self {
        Error::Aborted(format!("volume {} keeps moving between disks; retry the call", clip(volume_id)))
    }

    /// An OS error while doing `what`, classified by its kind.
    pub fn io(what: impl fmt::Display, err: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let msg = format!("{what}: {err}");
        match err.kind() {
            K::NotFound => Error::NotFound(msg),
            K::AlreadyExists => Error::AlreadyExists(msg),
            K::PermissionDenied => Error::PermissionDenied(msg),
            K::InvalidInput => Error::InvalidArgument(msg),
            K::DirectoryNotEmpty => Error::FailedPrecondition(msg),
            _ => Error::Internal(msg),
        }
    }
}

/// Rewrites an error's message, keeping its kind.
/// `e`, from a step of a call after the earlier steps `done` changed the host: its message says
/// what was changed (nothing half-done goes unsaid). `done` empty: `e` as it is.
pub fn after_changes(e: Error, done: &[String]) -> Error {
    if done.is_empty() {
        return e;
    }
    map_message(e, |m| format!("{m}; already changed before this failed: {}", done.join(", ")))
}

pub fn map_message(e: Error, f: impl FnOnce(String) -> String) -> Error {
    match e {
        Error::InvalidArgument(m) => Error::InvalidArgument(f(m)),
        Error::NotFound(m) => Error::NotFound(f(m)),
        Error::AlreadyExists(m) => Error::AlreadyExists(f(m)),
        Error::FailedPrecondition(m) => Error::FailedPrecondition(f(m)),
        Error::PermissionDenied(m) => Error::PermissionDenied(f(m)),
        Error::Aborted(m) => Error::Aborted(f(m)),
        Error::Unavailable(m) => Error::Unavailable(f(m)),
        Error::Internal(m) => Error::Internal(f(m)),
        e @ Error::Unimplemented { .. } => e,
    }
}

/// Withholds an error text that contains `secret`. The whole text goes rather than just the
/// secret, since masking each occurrence would show where a short secret's characters are.
pub fn scrub(e: Error, secret: &crate::types::Secret) -> Error {
    if secret.is_empty() {
        return e;
    }
    map_message(e, |m| {
        if m.contains(secret.expose()) {
            "(the error text was withheld because it contained the credential)".to_owned()
        } else {
            m
        }
    })
}

/// How many times a volume call looks its volume's disk up and locks it before it gives up with
/// [`Error::volume_moved`].
pub const MOVED_TRIES: usize = 3;

/// The words every "nothing is mounted there" and "no such path" answer of the volume group
/// carries. AWS EBS's driver (pkg/mounter/mount_windows.go, `handleGetDeviceNameFromMountError`)
/// decides that a staging folder is not mounted yet by matching a GetVolumeIDFromTargetPath
/// error against `(Get-Item -Path \S+).Target, output: , error: <nil>|because it does not exist`
/// (the text of upstream's PowerShell era); any other text fails its NodeStageVolume.
pub const DOES_NOT_EXIST: &str = "because it does not exist";

/// The longest value an error or log quotes whole; longer ones are cut (see [`clip`]).
pub const QUOTED_MAX: usize = 512;

/// `value` as an error message or a log line quotes it: whole when it is at most [`QUOTED_MAX`]
/// bytes, else its start, cut on a character boundary, and a marker saying how much was left out.
pub fn clip(value: &str) -> std::borrow::Cow<'_, str> {
    if value.len() <= QUOTED_MAX {
        return value.into();
    }
    let mut end = QUOTED_MAX;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[{} more bytes cut]", &value[..end], value.len() - end).into()
}

/// The longest message an error carries out of the daemon (a gRPC status, a log line).
pub const MESSAGE_MAX: usize = 2048;

/// `message` bounded to about [`MESSAGE_MAX`] bytes: a longer one keeps its start and its end
/// (where the reason usually is) around a marker saying how much was cut. The last line of
/// defence: a request value quoted whole (a 4 MB path) must not come back as a 4 MB status,
/// which clients refuse, nor fill the log.
pub fn bound_message(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MESSAGE_MAX {
        return message.into();
    }
    let mut head = MESSAGE_MAX * 3 / 4;
    while !message.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = message.len() - MESSAGE_MAX / 4;
    while !message.is_char_boundary(tail) {
        tail += 1;
    }
    format!("{}…[{} bytes cut]…{}", &message[..head], tail - head, &message[tail..]).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_keep_their_start_and_end() {
        assert_eq!(bound_message("short"), "short");
        let long = format!("start {} end: the reason", "é".repeat(3_000_000));
        let bounded = bound_message(&long);
        assert!(bounded.len() <= MESSAGE_MAX + 40, "{}", bounded.len());
        assert!(bounded.starts_with("start é") && bounded.ends_with("é end: the reason"), "{bounded}");
        assert!(bounded.contains(" bytes cut]…"), "{bounded}");
    }

    #[test]
    fn long_values_are_cut_on_a_character_boundary_with_a_marker() {
        assert_eq!(clip("short"), "short");
        let exact = "a".repeat(QUOTED_MAX);
        assert_eq!(clip(&exact), exact);
        let long = format!("{}é{}", "a".repeat(QUOTED_MAX - 1), "b".repeat(1000));
        let cut = clip(&long);
        assert!(cut.starts_with(&"a".repeat(QUOTED_MAX - 1)), "{cut}");
        assert!(cut.ends_with("…[1002 more bytes cut]"), "{cut}");
    }
}
