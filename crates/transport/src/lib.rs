//! Transport: where the 23 APIs listen and how each accepted byte stream is prepared for HTTP/2.
//!
//! - [`unix`]: `<dir>/csi-proxy-<group>-<version>.sock` (Linux and other unixes).
//! - [`pipe`]: `\\.\pipe\csi-proxy-<group>-<version>` (Windows).
//! - [`authority`]: rewrites the `:authority` values that Go and Python clients send on pipes and
//!   sockets, which stock `h2` would reject, before the bytes reach the HTTP/2 server.
//! - [`conn`]: per-connection idle/handshake timeouts and the in-flight call count they respect.

pub mod authority;
pub mod conn;
#[cfg(windows)]
pub mod pipe;
#[cfg(unix)]
pub mod unix;
