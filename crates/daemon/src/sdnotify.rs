//! systemd's readiness protocol (`Type=notify`): when `NOTIFY_SOCKET` is set, the daemon sends
//! `READY=1` once every socket is bound and served, and `STOPPING=1` when it starts to stop, as
//! one datagram each to that socket (a path, or `@name` for an abstract address), as
//! `sd_notify(3)` does.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;

/// Sends `state` to the service manager if there is one; a failure is logged, not fatal (the
/// daemon serves either way, and systemd reports a missing `READY=1` itself).
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else { return };
    match send(&socket, state) {
        Ok(()) => tracing::debug!(socket = %socket.to_string_lossy(), state, "notified the service manager"),
        Err(e) => tracing::warn!(
            socket = %socket.to_string_lossy(), state, error = %e,
            "cannot notify the service manager (NOTIFY_SOCKET)"
        ),
    }
}

fn send(socket: &OsStr, state: &str) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    let bytes = socket.as_bytes();
    let sent = match bytes.first() {
        Some(b'@') => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(&bytes[1..])?;
            sock.send_to_addr(state.as_bytes(), &addr)?
        }
        Some(b'/') => sock.send_to(state.as_bytes(), socket)?,
        _ => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "only an absolute path or an abstract @name is supported",
            ))
        }
    };
    if sent != state.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "the datagram was truncated"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::linux::net::SocketAddrExt;

    #[test]
    fn sends_to_a_path_and_to_an_abstract_name() {
        let path = std::env::temp_dir().join(format!("csi-proxy-notify-unit-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_file(&path).unwrap();

        let name = format!("csi-proxy-notify-unit-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        send(OsStr::new(&format!("@{name}")), "STOPPING=1").unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");

        assert!(send(OsStr::new("relative"), "READY=1").is_err());
    }
}
