//! The audit trail: a record when a privileged call starts and another when it ends, with who
//! asked (the transport's [`Caller`]), what was asked (the operation as its `Debug` shows it,
//! which redacts secrets), and how it ended. Where the records go is the sink's business (the
//! daemon's `-audit-log` file).
//!
//! The rule that makes the trail trustworthy: a call whose start record cannot be written is
//! not run (it fails with `Unavailable`). An end record that cannot be written is logged as an
//! error; the call's own outcome is still returned, since its work is done either way.

pub use csi_proxy_wire::is_read_only;
use csi_proxy_wire::Caller;
use std::time::{Duration, SystemTime};

/// Where audit records go. Each `write` must put the record down whole (one line, not
/// interleaved with another) before it returns, or fail.
pub trait AuditSink: Send + Sync {
    fn write(&self, record: &Record<'_>) -> std::io::Result<()>;
    /// Whether read-only calls (List*, Get*, Is*, PathExists, the stats) are recorded too;
    /// without it only calls that may change the host are.
    fn read_only_calls(&self) -> bool {
        false
    }
}

/// What a record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The request was valid and its work is about to start (waiting for its disk first, if it
    /// takes one).
    Start,
    /// The work ended (successfully or not); pairs with the start record of the same `call`.
    End,
    /// The request could not even be read as an operation (a malformed field, such as a disk
    /// number that is not a number); no start record. A request that reads but that the
    /// operation then refuses (an empty path) has a start and an end record.
    Refused,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::End => "end",
            Event::Refused => "refused",
        }
    }
}

/// One audit record.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub event: Event,
    /// Numbers the calls of this daemon run; a start and its end carry the same number.
    pub call: u64,
    pub time: SystemTime,
    /// `None` when the transport attached no caller (in-process tests).
    pub caller: Option<&'a Caller>,
    /// The gRPC service, `<version>.<Group>` (`v1.Disk`).
    pub service: &'a str,
    pub method: &'a str,
    /// The operation with its fields, secrets shown as `<redacted>`, bounded in size. Start
    /// records only.
    pub request: Option<&'a str>,
    /// The gRPC code name as Go spells it (`OK`, `InvalidArgument`): end and refused records.
    pub code: Option<&'static str>,
    /// The error message the client got; `None` on success.
    pub message: Option<&'a str>,
    /// From the start of the call (before waiting for a disk) to its end: end records.
    pub duration: Option<Duration>,
}
