//! The `:authority` adapter against h2 itself: the fuzz bytes shape a client connection
//! (`csi_proxy_transport::fuzzing::build`), which is served by an in-memory h2 server once
//! directly and once through the adapter.
//!
//! Properties (see `csi_proxy_transport::fuzzing`): without a rewrite the adapter hands on the
//! exact bytes and both servers observe the same requests, resets and GOAWAYs; a rewrite keeps
//! the length, changes only what h2 would have refused for a bad `:authority`, and every
//! rejected value written on a well-formed connection is accepted through the adapter.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(mismatch) = csi_proxy_transport::fuzzing::differential(data) {
        panic!("{mismatch}");
    }
});
