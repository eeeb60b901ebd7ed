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

/// Where a failure code comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A Win32 error code: `WNetAddConnection2W`'s answer, or `MSFT_SmbGlobalMapping.Create`'s
    /// ReturnValue.
    Win32,
    /// A Linux errno from the cifs mount (or its credential check).
    Errno,
}

/// What a failure means for the caller; each kind is one [`Error`] variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Wrong credentials or no access: PermissionDenied.
    Denied,
    /// The server has no such share: NotFound.
    NoShare,
    /// The server (or what it needs, a domain controller) can't be reached: Unavailable.
    Unreachable,
    /// This host already talks to the server as another user: AlreadyExists.
    Conflict,
    /// Windows or the kernel refused a parameter of the request: InvalidArgument.
    Refused,
    /// This host or the server lacks what was asked: FailedPrecondition.
    Unsupported,
    /// The code itself says nothing; the text that comes with it does: Internal.
    Opaque,
}

/// One row of [`FAILURES`]: a code, its symbolic name, what it means in plain words and what to
/// try.
#[derive(Debug)]
pub struct Failure {
    pub source: Source,
    pub code: i32,
    pub name: &'static str,
    pub kind: Kind,
    pub plain: &'static str,
    pub hint: &'static str,
}

macro_rules! failures {
    ($($source:ident $code:literal $name:literal $kind:ident $plain:literal, $hint:literal;)*) => {
        /// The one classification of SMB connection failures, for both backends: every code a
        /// mapping, a mount or a credential check is known to fail with, by where it comes from.
        /// A code not here is reported as it is (Internal).
        pub const FAILURES: &[Failure] = &[$(Failure {
            source: Source::$source, code: $code, name: $name, kind: Kind::$kind, plain: $plain, hint: $hint,
        }),*];
    };
}

failures! {
    Win32 5 "ERROR_ACCESS_DENIED" Denied "access to the share is denied",
        "give the user access to the share on the server";
    Win32 53 "ERROR_BAD_NETPATH" Unreachable "the network path was not found",
        "check that the server's name resolves from this node and that it answers SMB on TCP port 445 (a firewall may drop it)";
    Win32 64 "ERROR_NETNAME_DELETED" Unreachable "the server closed the connection",
        "check the server is up and reachable on TCP port 445";
    Win32 67 "ERROR_BAD_NET_NAME" NoShare "the server has no share of that name",
        "check the share's name in the volume's source (\\\\host\\share)";
    Win32 86 "ERROR_INVALID_PASSWORD" Denied "the password is not correct",
        "check the password in the volume's secret";
    Win32 87 "ERROR_INVALID_PARAMETER" Refused "Windows refused a parameter of the mapping",
        "check the source is \\\\host\\share[\\path], the user name DOMAIN\\user or user@domain, and that the server supports the mapping's options (RequirePrivacy needs SMB 3 encryption)";
    Win32 121 "ERROR_SEM_TIMEOUT" Unreachable "the server did not answer in time",
        "check the server is up and reachable on TCP port 445";
    Win32 1208 "ERROR_EXTENDED_ERROR" Opaque "the network provider reported an error of its own",
        "the provider's code and text say what failed";
    Win32 1219 "ERROR_SESSION_CREDENTIAL_CONFLICT" Conflict "this host is already connected to the server as another user, and Windows allows one user per server",
        "map every share of this server with the same user, or remove the other mappings of the server first (Get-SmbGlobalMapping lists them)";
    Win32 1222 "ERROR_NO_NETWORK" Unreachable "the network is not present or not started",
        "check the node's network and its Workstation (LanmanWorkstation) service";
    Win32 1231 "ERROR_NETWORK_UNREACHABLE" Unreachable "the network location cannot be reached",
        "check the node's routes to the server";
    Win32 1232 "ERROR_HOST_UNREACHABLE" Unreachable "the server cannot be reached",
        "check the node's routes to the server";
    Win32 1311 "ERROR_NO_LOGON_SERVERS" Unreachable "no domain controller is available to check the user",
        "check the domain in the user name and that the server reaches a domain controller of it";
    Win32 1326 "ERROR_LOGON_FAILURE" Denied "the user name or password is not correct",
        "check the user name (DOMAIN\\user) and the password in the volume's secret";
    Win32 1323 "ERROR_WRONG_PASSWORD" Denied "the current password is not correct",
        "check the password in the volume's secret";
    Win32 1327 "ERROR_ACCOUNT_RESTRICTION" Denied "the account may not log on this way",
        "check the account's restrictions (logon hours, workstations, blank password)";
    Win32 1328 "ERROR_INVALID_LOGON_HOURS" Denied "the account may not log on at this time",
        "check the account's logon hours";
    Win32 1329 "ERROR_INVALID_WORKSTATION" Denied "the account may not log on from this computer",
        "check the account's allowed workstations";
    Win32 1330 "ERROR_PASSWORD_EXPIRED" Denied "the account's password has expired",
        "set a new password for the account and update the volume's secret";
    Win32 1331 "ERROR_ACCOUNT_DISABLED" Denied "the account is disabled",
        "enable the account or use another";
    Win32 1385 "ERROR_LOGON_TYPE_NOT_GRANTED" Denied "the account is not granted network logon on the server",
        "grant the account \"Access this computer from the network\" on the server";
    Win32 1907 "ERROR_PASSWORD_MUST_CHANGE" Denied "the account's password must be changed before it can log on",
        "change the account's password and update the volume's secret";
    Win32 1909 "ERROR_ACCOUNT_LOCKED_OUT" Denied "the account is locked out",
        "wait for the lockout to end or unlock the account; a wrong password retried by the kubelet may have locked it";
    Errno 1 "EPERM" Denied "the server refused the user or the share",
        "check the user name, the password and the user's access to the share";
    Errno 2 "ENOENT" NoShare "the server has no share of that name",
        "check the share's name in the volume's source (//host/share)";
    Errno 6 "ENXIO" NoShare "the server has no share of that name",
        "check the share's name in the volume's source (//host/share)";
    Errno 11 "EAGAIN" Unreachable "the server did not answer in time",
        "check the server is up and reachable on TCP port 445";
    Errno 13 "EACCES" Denied "the user name or password is not correct, or the user has no access to the share",
        "check the user name, the password in the volume's secret and the user's access to the share";
    Errno 19 "ENODEV" Unsupported "this kernel has no cifs filesystem",
        "load the cifs module (modprobe cifs)";
    Errno 22 "EINVAL" Refused "the kernel's cifs refused an option of the mount",
        "the kernel's log (dmesg) names the option; an older kernel may lack it";
    Errno 93 "EPROTONOSUPPORT" Unsupported "the server does not support what was asked",
        "encryption (seal) needs SMB 3 on the server";
    Errno 95 "EOPNOTSUPP" Unsupported "the server does not support what was asked",
        "encryption (seal) needs SMB 3 on the server";
    Errno 99 "EADDRNOTAVAIL" Unreachable "the server's name does not resolve to an address",
        "check the server's name resolves from this node";
    Errno 101 "ENETUNREACH" Unreachable "the server's network cannot be reached",
        "check the node's routes to the server";
    Errno 103 "ECONNABORTED" Unreachable "the server ended the connection",
        "check the server is up and reachable on TCP port 445";
    Errno 104 "ECONNRESET" Unreachable "the server ended the connection",
        "check the server is up and reachable on TCP port 445";
    Errno 110 "ETIMEDOUT" Unreachable "the server did not answer in time",
        "check the server is up and reachable on TCP port 445";
    Errno 111 "ECONNREFUSED" Unreachable "the server refused the connection",
        "check the server runs SMB on TCP port 445";
    Errno 112 "EHOSTDOWN" Unreachable "the server is down",
        "check the server is up and reachable on TCP port 445";
    Errno 113 "EHOSTUNREACH" Unreachable "the server cannot be reached",
        "check the node's routes to the server";
    Errno 126 "ENOKEY" Denied "no key for the user was found",
        "check the user name and the password in the volume's secret";
    Errno 127 "EKEYEXPIRED" Denied "the user's key has expired",
        "renew the user's credentials";
    Errno 129 "EKEYREJECTED" Denied "the server rejected the user's key",
        "check the user name and the password in the volume's secret";
}

/// The row of [`FAILURES`] for `code` from `source`, if there is one.
pub fn failure(source: Source, code: i32) -> Option<&'static Failure> {
    FAILURES.iter().find(|f| f.source == source && f.code == code)
}

/// The error of a failed connection to `root`: `doing` says what was being done ("creating the
/// SMB global mapping of"), `shown` how the code is shown ("Windows error 53", the errno's
/// text), `detail` what else is known (the provider's text, the other connection), bounded here.
/// It names the share, never a credential; callers scrub it of the password still.
pub fn connect_error(doing: &str, root: &str, source: Source, code: i32, shown: &str, detail: Option<&str>) -> Error {
    let detail = detail.map(|d| format!(": {}", clip(d))).unwrap_or_default();
    let Some(f) = failure(source, code) else {
        return Error::internal(format!("{doing} {root} failed ({shown}){detail}"));
    };
    let msg = format!("{doing} {root} failed ({shown}, {}): {}{detail}; hint: {}", f.name, f.plain, f.hint);
    match f.kind {
        Kind::Denied => Error::denied(msg),
        Kind::NoShare => Error::not_found(msg),
        Kind::Unreachable => Error::unavailable(msg),
        Kind::Conflict => Error::exists(msg),
        Kind::Refused => Error::invalid(msg),
        Kind::Unsupported => Error::precondition(msg),
        Kind::Opaque => Error::internal(msg),
    }
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

    #[test]
    fn the_failure_table_has_each_code_once_with_words_and_a_hint() {
        for (i, f) in FAILURES.iter().enumerate() {
            assert!(!f.plain.is_empty() && !f.hint.is_empty() && !f.name.is_empty(), "{f:?}");
            assert!(
                FAILURES[..i].iter().all(|g| (g.source, g.code) != (f.source, f.code)),
                "{:?} {} is in the table twice",
                f.source,
                f.code
            );
        }
        for code in [53, 67, 86, 87, 1208, 1219, 1311, 1326] {
            assert!(failure(Source::Win32, code).is_some(), "Windows error {code} is unclassified");
        }
    }

    #[test]
    fn a_classified_failure_names_the_code_its_meaning_and_a_hint() {
        let e = connect_error("mapping", r"\\srv\share", Source::Win32, 53, "Windows error 53", None);
        assert!(matches!(e, Error::Unavailable(_)), "{e:?}");
        let m = e.to_string();
        assert!(m.contains("Windows error 53, ERROR_BAD_NETPATH") && m.contains("hint: check that the server"), "{m}");
        let e = connect_error("mapping", "r", Source::Win32, 1219, "Windows error 1219", Some("x as CORP\\alice"));
        assert!(matches!(&e, Error::AlreadyExists(m) if m.contains(": x as CORP")), "{e:?}");
        // Unknown codes stay Internal, as they are; long details are cut.
        let long = "d".repeat(10_000);
        let e = connect_error("mapping", "r", Source::Errno, 5, "Input/output error (os error 5)", Some(&long));
        assert!(matches!(&e, Error::Internal(m) if m.len() < 1000 && m.contains("os error 5")), "{e:?}");
    }

    /// The errno numbers are the kernel's (the table is compiled on every OS, so it holds them as
    /// numbers); rustix knows their names on Linux.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_errnos_are_the_kernels() {
        use rustix::io::Errno;
        let known = [
            ("EPERM", Errno::PERM),
            ("ENOENT", Errno::NOENT),
            ("ENXIO", Errno::NXIO),
            ("EAGAIN", Errno::AGAIN),
            ("EACCES", Errno::ACCESS),
            ("ENODEV", Errno::NODEV),
            ("EINVAL", Errno::INVAL),
            ("EPROTONOSUPPORT", Errno::PROTONOSUPPORT),
            ("EOPNOTSUPP", Errno::OPNOTSUPP),
            ("EADDRNOTAVAIL", Errno::ADDRNOTAVAIL),
            ("ENETUNREACH", Errno::NETUNREACH),
            ("ECONNABORTED", Errno::CONNABORTED),
            ("ECONNRESET", Errno::CONNRESET),
            ("ETIMEDOUT", Errno::TIMEDOUT),
            ("ECONNREFUSED", Errno::CONNREFUSED),
            ("EHOSTDOWN", Errno::HOSTDOWN),
            ("EHOSTUNREACH", Errno::HOSTUNREACH),
            ("ENOKEY", Errno::NOKEY),
            ("EKEYEXPIRED", Errno::KEYEXPIRED),
            ("EKEYREJECTED", Errno::KEYREJECTED),
        ];
        let errnos: Vec<_> = FAILURES.iter().filter(|f| f.source == Source::Errno).collect();
        assert_eq!(errnos.len(), known.len());
        for f in errnos {
            let (_, e) = known.iter().find(|(n, _)| *n == f.name).unwrap_or_else(|| panic!("{f:?}"));
            assert_eq!(e.raw_os_error(), f.code, "{}", f.name);
        }
    }
}
