//! Who is on the other end of a connection, as the OS reports it. The transport learns it once
//! per connection and attaches it to every request of that connection (as an `Arc<Caller>` in
//! the request's extensions); the server records it in the audit trail.

use std::fmt;

/// The client process of a connection as the OS recorded it when the client connected (Linux:
/// SO_PEERCRED; Windows: the pipe's client process), not necessarily the process that sends a
/// given call on it. Every field is what the OS answered; a field the OS would not tell (a process
/// that exited, access denied) is `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Caller {
    /// Process ID (Linux: SO_PEERCRED; Windows: GetNamedPipeClientProcessId).
    pub pid: Option<u32>,
    /// Linux: the user and group IDs the socket was connected with (SO_PEERCRED).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    /// Windows: the SID of the user the process runs as (`S-1-5-…`), from its token. A SID
    /// rather than a name: turning it into a name may ask a domain controller.
    pub user: Option<String>,
    /// The process's executable (Linux: `/proc/<pid>/exe`; Windows: its image path).
    pub exe: Option<String>,
}

impl Caller {
    /// Whether the OS told nothing at all.
    pub fn is_unknown(&self) -> bool {
        *self == Caller::default()
    }
}

impl fmt::Display for Caller {
    /// `pid=12 uid=0 gid=0 exe=/usr/bin/x`, the fields known; `unknown` when none is.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_unknown() {
            return f.write_str("unknown");
        }
        let mut sep = "";
        let mut field = |f: &mut fmt::Formatter<'_>, name: &str, value: &dyn fmt::Display| {
            let r = write!(f, "{sep}{name}={value}");
            sep = " ";
            r
        };
        if let Some(v) = self.pid {
            field(f, "pid", &v)?;
        }
        if let Some(v) = self.uid {
            field(f, "uid", &v)?;
        }
        if let Some(v) = self.gid {
            field(f, "gid", &v)?;
        }
        if let Some(v) = &self.user {
            field(f, "user", v)?;
        }
        if let Some(v) = &self.exe {
            field(f, "exe", &format_args!("{v:?}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_known_fields() {
        assert_eq!(Caller::default().to_string(), "unknown");
        let c = Caller { pid: Some(7), uid: Some(0), gid: None, user: None, exe: Some("/bin/a b".into()) };
        assert_eq!(c.to_string(), r#"pid=7 uid=0 exe="/bin/a b""#);
    }
}
