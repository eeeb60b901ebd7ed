//! What the daemon's integration tests share: running the real binary until its sockets exist,
//! and a call that stays half open on the wire.
#![allow(dead_code)] // each test file uses part of it

use csi_proxy_transport::frame::{write_frame, FLAG_END_HEADERS, TYPE_HEADERS};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `daemon` until `socket` exists (20 s at most), stops it, and returns its standard error.
pub fn stderr_until_socket(daemon: &mut Command, socket: &Path) -> String {
    let mut child = daemon.stderr(Stdio::piped()).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "daemon did not create its sockets");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    reader.join().unwrap()
}

/// A HEADERS frame opening stream `id` for a PathExists call, without END_STREAM: the call stays
/// in flight until its body comes (never) or the progress timeout ends it.
pub fn half_open_headers(id: u32) -> Vec<u8> {
    let path = b"/v1.Filesystem/PathExists";
    // HPACK: :method POST, :scheme http, then literals without indexing (:path, :authority,
    // content-type).
    let mut block = vec![0x83, 0x86, 0x04, path.len() as u8];
    block.extend_from_slice(path);
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    block.extend_from_slice(&[0x0f, 0x10, 16]);
    block.extend_from_slice(b"application/grpc");
    let mut frame = Vec::new();
    write_frame(TYPE_HEADERS, FLAG_END_HEADERS, id, &block, &mut frame);
    frame
}
