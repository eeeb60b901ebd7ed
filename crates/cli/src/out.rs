//! Standard output and standard error without panics. `print!`/`println!` panic when a write
//! fails, which a closed pipe makes them do (`csi-proxyctl methods | head -1`: exit 101 and a
//! panic message). The crate's `print!`, `println!`, `eprint!` and `eprintln!` (macros in
//! `main.rs`, shadowing std's in every module) write through here instead:
//!
//! - standard output whose reader is gone (EPIPE, `BrokenPipe`; on Windows a closed pipe's
//!   `ERROR_NO_DATA` maps to it too): the rest of the output is dropped silently, as coreutils'
//!   programs stop silently on SIGPIPE. The command still finishes (a conformance run still
//!   removes what it made) and exits with its own status.
//! - any other failure to write standard output (a full disk): said once on standard error, and
//!   the exit status is 1 (see [`failed`]).
//! - standard error: what cannot be written is dropped (there is nowhere left to say it).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard output's reader has gone: nothing more is written to it.
static GONE: AtomicBool = AtomicBool::new(false);
/// A write to standard output failed otherwise: the run failed.
static FAILED: AtomicBool = AtomicBool::new(false);

/// Writes `args` to standard output (what `print!` and `println!` expand to).
pub fn stdout(args: std::fmt::Arguments<'_>) {
    if GONE.load(Ordering::Relaxed) || FAILED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    match out.write_fmt(args).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => GONE.store(true, Ordering::Relaxed),
        Err(e) => {
            FAILED.store(true, Ordering::Relaxed);
            stderr(format_args!("error: writing to standard output: {e}\n"));
        }
    }
}

/// Writes `args` to standard error (what `eprint!` and `eprintln!` expand to); errors dropped.
pub fn stderr(args: std::fmt::Arguments<'_>) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.flush());
}

/// Whether writing standard output failed other than by its reader leaving.
pub fn failed() -> bool {
    FAILED.load(Ordering::Relaxed)
}
