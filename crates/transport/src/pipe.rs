//! Windows named pipes: `\\.\pipe\csi-proxy-<group>-<version>`, as go-winio's `ListenPipe(path, nil)`
//! creates them for upstream: byte mode, remote clients rejected, unlimited
//! instances, the first instance created with `FILE_FLAG_FIRST_PIPE_INSTANCE` (so a second daemon
//! fails instead of sharing the name), and always two instances waiting for clients: one for the
//! next client and a spare, so that a client arriving before the daemon has taken the previous
//! one's connection (its accept not yet run again) still finds a free instance instead of
//! ERROR_PIPE_BUSY (CreateFile's answer "if all instances of the pipe are busy"; containerd once
//! failed a container's creation on it, csi-proxy#55).

// A platform module: the named-pipe calls.
#![allow(unsafe_code)]

use crate::Listener;
use std::ffi::c_void;
use std::future::Future as _;
use std::io;
use std::ptr;
use tokio::net::windows::named_pipe::{NamedPipeServer, PipeMode, ServerOptions};
use windows_sys::Win32::Foundation::{
    LocalFree, ERROR_ACCESS_DENIED, ERROR_PIPE_BUSY, ERROR_PIPE_CONNECTED, ERROR_SEM_TIMEOUT, HLOCAL,
};
use windows_sys::Win32::Security::Authorization::{
    ConvertStringSecurityDescriptorToSecurityDescriptorW, SDDL_REVISION_1,
};
use windows_sys::Win32::Security::{PSECURITY_DESCRIPTOR, SECURITY_ATTRIBUTES};
use windows_sys::Win32::System::Pipes::WaitNamedPipeW;

/// The pipes' security descriptor when none is configured: the DACL upstream's pipes get, less
/// its read-only ACEs for Everyone and Anonymous.
///
/// go-winio, given no descriptor, builds one whose DACL comes from `ntdll!RtlDefaultNpAcl` (the DACL
/// `CreateNamedPipeW` itself uses for a NULL `SECURITY_ATTRIBUTES`). That function adds, in this
/// order, access-allowed ACEs without inheritance flags:
///
/// | SID                                   | mask           | here        |
/// |---------------------------------------|----------------|-------------|
/// | S-1-5-18 LocalSystem                  | `GENERIC_ALL`  | `GA;;;SY`   |
/// | S-1-5-32-544 BUILTIN\Administrators   | `GENERIC_ALL`  | `GA;;;BA`   |
/// | (AppContainer SIDs, only if the caller is an AppContainer — never for csi-proxy) | | |
/// | the caller token's `TokenOwner` SID   | `GENERIC_ALL`  | `GA;;;OW`   |
/// | S-1-1-0 Everyone                      | `GENERIC_READ` | `GR;;;WD`   |
/// | S-1-5-7 Anonymous                     | `GENERIC_READ` | `GR;;;AN`   |
///
/// The token-owner ACE is the one entry that cannot be spelled as a fixed SID. `OW` is OWNER RIGHTS
/// (S-1-3-4), which matches whoever owns the object; since this descriptor carries no owner, the
/// pipe's owner is the creating token's default owner (`TokenOwner`), i.e. exactly the SID
/// `RtlDefaultNpAcl` writes. (An OWNER RIGHTS ACE also replaces the owner's implicit READ_CONTROL |
/// WRITE_DAC, which `GENERIC_ALL` includes anyway, so nothing is lost.) `CO` (CREATOR OWNER) would be
/// wrong: it is only substituted when ACEs are inherited, so in an explicit DACL it matches nobody.
///
/// `P` (protected) changes nothing for pipes — the named-pipe file system has no inheritance — and
/// states that this DACL is the whole story. Only SYSTEM, administrators and the owner may open the
/// pipe for read/write, which a gRPC client needs, as upstream.
///
/// Everyone and Anonymous are left out (upstream's `GR;;;WD` and `GR;;;AN`): read-only access
/// gives a gRPC client nothing (it must write its request), but it opens a connection, so any
/// local user could hold an endpoint's connection slots. The drivers run as SYSTEM or
/// Administrators (HostProcess containers, or via the kubelet), which keep full access.
pub const DEFAULT_SDDL: &str = "D:P(A;;GA;;;SY)(A;;GA;;;BA)(A;;GA;;;OW)";

#[derive(Debug, thiserror::Error)]
pub enum PipeError {
    #[error("pipe {pipe} is already served by another process (is another csi-proxy running?)")]
    InUse { pipe: String },
    #[error("invalid pipe security descriptor (SDDL) {sddl:?}: {source}")]
    BadSddl { sddl: String, source: io::Error },
    #[error("{what} {pipe}: {source}")]
    Io { what: &'static str, pipe: String, source: io::Error },
}

/// A self-relative security descriptor allocated by `ConvertStringSecurityDescriptorToSecurityDescriptorW`,
/// freed with `LocalFree`.
struct SecurityDescriptor(PSECURITY_DESCRIPTOR);

// SAFETY: the descriptor is a heap block owned exclusively by this value and never written after
// creation; Windows only reads it (CreateNamedPipeW copies it into the pipe object), so sharing or
// moving the pointer between threads is sound.
unsafe impl Send for SecurityDescriptor {}
// SAFETY: as above — all uses are reads.
unsafe impl Sync for SecurityDescriptor {}

impl SecurityDescriptor {
    fn from_sddl(sddl: &str) -> io::Result<Self> {
        let wide: Vec<u16> = sddl.encode_utf16().chain(std::iter::once(0)).collect();
        let mut sd: PSECURITY_DESCRIPTOR = ptr::null_mut();
        // SAFETY: `wide` is a NUL-terminated UTF-16 string that outlives the call; `sd` is a valid
        // out-pointer; the size out-parameter is optional (null).
        let ok = unsafe {
            ConvertStringSecurityDescriptorToSecurityDescriptorW(
                wide.as_ptr(),
                SDDL_REVISION_1,
                &mut sd,
                ptr::null_mut(),
            )
        };
        if ok == 0 || sd.is_null() {
            return Err(io::Error::last_os_error());
        }
        Ok(SecurityDescriptor(sd))
    }
}

impl Drop for SecurityDescriptor {
    fn drop(&mut self) {
        // SAFETY: the pointer came from ConvertStringSecurityDescriptorToSecurityDescriptorW, whose
        // documentation says to free it with LocalFree; it is freed exactly once, here.
        unsafe {
            LocalFree(self.0 as HLOCAL);
        }
    }
}

/// How many instances wait for clients at all times: the next client's and a spare.
pub const INSTANCES_WAITING: usize = 2;

/// Listens on one pipe name: holds [`INSTANCES_WAITING`] instances waiting for clients.
pub struct PipeListener {
    path: String,
    sd: SecurityDescriptor,
    /// The instances waiting for clients (ConnectNamedPipe pending or not yet called); fewer than
    /// [`INSTANCES_WAITING`] only if creating one failed (the next `accept` retries).
    waiting: Vec<NamedPipeServer>,
}

impl std::fmt::Debug for PipeListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PipeListener").field("path", &self.path).finish_non_exhaustive()
    }
}

impl PipeListener {
    /// The pipe's path, e.g. `\\.\pipe\csi-proxy-disk-v1`.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Creates instances until [`INSTANCES_WAITING`] wait. A failure is an error only when none
    /// waits at all; otherwise it is logged and retried at the next accept.
    fn refill(&mut self) -> io::Result<()> {
        while self.waiting.len() < INSTANCES_WAITING {
            match self.create_instance(false) {
                Ok(i) => self.waiting.push(i),
                Err(e) if self.waiting.is_empty() => return Err(e),
                Err(e) => {
                    tracing::warn!(pipe = %self.path, error = %e, "creating a spare pipe instance failed");
                    break;
                }
            }
        }
        Ok(())
    }

    fn create_instance(&self, first: bool) -> io::Result<NamedPipeServer> {
        let mut opts = ServerOptions::new();
        // Max instances: tokio's default is PIPE_UNLIMITED_INSTANCES (255), which is what go-winio
        // uses; `max_instances` only accepts limits 1..=254, so it is left alone.
        opts.first_pipe_instance(first).reject_remote_clients(true).pipe_mode(PipeMode::Byte);
        let mut attrs = SECURITY_ATTRIBUTES {
            nLength: std::mem::size_of::<SECURITY_ATTRIBUTES>() as u32,
            lpSecurityDescriptor: self.sd.0,
            bInheritHandle: 0,
        };
        // SAFETY: `attrs` is a valid SECURITY_ATTRIBUTES whose descriptor (owned by `self.sd`) lives
        // for the whole call; CreateNamedPipeW copies what it needs.
        unsafe {
            opts.create_with_security_attributes_raw(&self.path, &mut attrs as *mut SECURITY_ATTRIBUTES as *mut c_void)
        }
    }
}

/// Creates the first instance of `pipe_path` with the security descriptor `sddl` (`None`:
/// [`DEFAULT_SDDL`]). Fails with [`PipeError::InUse`] if the name already exists. Must run inside a
/// tokio runtime.
pub fn bind(pipe_path: &str, sddl: Option<&str>) -> Result<PipeListener, PipeError> {
    let sddl = sddl.unwrap_or(DEFAULT_SDDL);
    let sd =
        SecurityDescriptor::from_sddl(sddl).map_err(|source| PipeError::BadSddl { sddl: sddl.to_string(), source })?;
    let in_use = || PipeError::InUse { pipe: pipe_path.to_string() };
    // FILE_FLAG_FIRST_PIPE_INSTANCE below is the real (atomic) guard. Wine's CreateNamedPipeW
    // ignores that flag (it always opens-or-creates), so look first too: this makes a second
    // daemon fail under Wine as well, and is redundant but harmless on Windows.
    if pipe_exists(pipe_path) {
        return Err(in_use());
    }
    let mut listener = PipeListener { path: pipe_path.to_string(), sd, waiting: Vec::new() };
    let first = listener.create_instance(true).map_err(|e| match e.raw_os_error().map(|c| c as u32) {
        // FILE_FLAG_FIRST_PIPE_INSTANCE: "If this flag is specified and a pipe of the same name
        // already exists, CreateNamedPipe fails with ERROR_ACCESS_DENIED". ERROR_PIPE_BUSY: a pipe of
        // that name exists and has no free instance. Either way, someone else has the name.
        Some(ERROR_ACCESS_DENIED) | Some(ERROR_PIPE_BUSY) => in_use(),
        _ => PipeError::Io { what: "creating named pipe", pipe: pipe_path.to_string(), source: e },
    })?;
    listener.waiting.push(first);
    listener.refill().map_err(|source| PipeError::Io {
        what: "creating named pipe",
        pipe: pipe_path.to_string(),
        source,
    })?;
    Ok(listener)
}

/// Whether a pipe named `path` exists (with a free instance or not), without connecting to it.
fn pipe_exists(path: &str) -> bool {
    let wide: Vec<u16> = path.encode_utf16().chain(std::iter::once(0)).collect();
    // SAFETY: `wide` is a NUL-terminated UTF-16 string that outlives the call. WaitNamedPipeW only
    // waits (here at most 1 ms) for an instance to be free; it does not connect to or consume it.
    if unsafe { WaitNamedPipeW(wide.as_ptr(), 1) } != 0 {
        return true; // an instance is waiting for clients
    }
    // ERROR_SEM_TIMEOUT: the pipe exists but all its instances are busy. ERROR_FILE_NOT_FOUND:
    // no such pipe. Anything else (a malformed name, …) is left to CreateNamedPipeW to report.
    io::Error::last_os_error().raw_os_error() == Some(ERROR_SEM_TIMEOUT as i32)
}

impl Listener for PipeListener {
    type Io = NamedPipeServer;

    /// Waits for a client on any waiting instance (a client takes whichever is free) and, before
    /// handing it out, creates its replacement, so that [`INSTANCES_WAITING`] wait again.
    ///
    /// Cancel-safe: `serve` drops this future whenever a connection ends; the instances stay in
    /// `self.waiting` with their overlapped ConnectNamedPipe still pending (tokio's `connect` is
    /// cancel-safe: no connection is lost), and the next call picks up their completion.
    fn caller(io: &NamedPipeServer) -> csi_proxy_wire::Caller {
        crate::caller::of_pipe(io)
    }

    async fn accept(&mut self) -> io::Result<NamedPipeServer> {
        let mut failures = 0;
        loop {
            self.refill()?;
            // The first instance to connect; the others keep waiting.
            let (index, connected) = {
                let mut pending: Vec<_> = self.waiting.iter().map(|i| Box::pin(i.connect())).collect();
                std::future::poll_fn(|cx| {
                    for (index, f) in pending.iter_mut().enumerate() {
                        if let std::task::Poll::Ready(r) = f.as_mut().poll(cx) {
                            return std::task::Poll::Ready((index, r));
                        }
                    }
                    std::task::Poll::Pending
                })
                .await
            };
            let connected = match connected {
                Ok(()) => Ok(()),
                // Already connected (a client got in between CreateNamedPipeW and ConnectNamedPipe):
                // success. mio already maps this (and ERROR_NO_DATA: the client came and went, which
                // then reads as EOF) to Ok; kept here in case that ever changes.
                Err(e) if e.raw_os_error() == Some(ERROR_PIPE_CONNECTED as i32) => Ok(()),
                Err(e) => Err(e),
            };
            // No await from here on: the hand-over below cannot be interrupted.
            let current = self.waiting.swap_remove(index);
            if let Err(e) = self.refill() {
                // Serve the client we have; the next accept retries (and reports it if it fails
                // again).
                tracing::warn!(pipe = %self.path, error = %e, "creating the next pipe instance failed");
            }
            match connected {
                Ok(()) => return Ok(current),
                Err(e) => {
                    // This instance is broken (the client vanished mid-connect, …); it is dropped
                    // and the others wait: not a failure of the listener. Only a persistent
                    // error is reported (then `serve` logs it and pauses before the next accept).
                    failures += 1;
                    if failures >= 16 {
                        return Err(e);
                    }
                    tracing::debug!(pipe = %self.path, error = %e, "pipe connect failed; waiting for the next client");
                }
            }
        }
    }

    fn describe(&self) -> String {
        self.path.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sddl_parses() {
        SecurityDescriptor::from_sddl(DEFAULT_SDDL).unwrap();
    }
}
