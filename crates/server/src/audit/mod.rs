//! The audit trail: a record when a privileged call starts and another when it ends, with who
//! connected (the transport's [`Caller`]: the peer of the call's connection as the OS recorded it
//! when that peer connected), what was asked (the wire request as JSON, secrets redacted),
//! and how it ended. Where the records go is the sink's business (the
//! daemon's `-audit-log` file).
//!
//! The rule that makes the trail trustworthy: a call whose start record cannot be written is
//! not run (it fails with `Unavailable`). An end record that cannot be written is logged as an
//! error; the call's own outcome is still returned, since its work is done either way.
//!
//! The audit file must not stall the daemon (a frozen filesystem, a dead NFS server): records
//! are written by one thread of their own (`Writer`), in order, and a call only awaits its
//! record asynchronously, for at most [`RECORD_WAIT`]. A start record not written by then gets
//! the call refused like a failed write; if it reaches the file later anyway, an end record
//! saying the call was not run follows it. An end record not written by then stays queued: the
//! client gets its answer, and the record goes into the file once the file answers again (one that
//! finds the queue full is dropped, and that is logged as an error).
//!
//! This module is the records and their writer; [`call`] is one call's trail (which record, and
//! who writes its end record when the client cancels).

pub mod call;

use crate::status::go_code_name;
pub use csi_proxy_wire::is_read_only;
use csi_proxy_wire::Caller;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::oneshot;
use tonic::Code;

/// Where audit records go. Each `write` must put the record down whole (one line, not
/// interleaved with another) before it returns, or fail. It is called on the audit writer's
/// thread only (see `Writer`), never on an async worker, so it may block.
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
    /// The process that connected the call's connection, as the OS recorded it at connect time
    /// (SO_PEERCRED; the pipe's client process), not necessarily the one that sent this call: a
    /// process that connects and hands the connection on, or exits or execs, stays named. `None`
    /// when the transport attached none (in-process tests).
    pub peer_at_connect: Option<&'a Caller>,
    /// The gRPC service, `<version>.<Group>` (`v1.Disk`).
    pub service: &'a str,
    pub method: &'a str,
    /// The wire request in the protobuf JSON mapping, secrets shown as `<redacted>`, strings
    /// bounded (see [`crate::shown`]). Start records only.
    pub request: Option<&'a serde_json::Value>,
    /// The gRPC code name as Go spells it (`OK`, `InvalidArgument`): end and refused records.
    pub code: Option<&'static str>,
    /// The error message the client got; `None` on success.
    pub message: Option<&'a str>,
    /// From the start of the call (before waiting for a disk) to its end: end records.
    pub duration: Option<Duration>,
}

/// How long a call waits for its start record to be written before it is refused (and its
/// handler for its end record before answering anyway), unless the context says otherwise.
pub const RECORD_WAIT: Duration = Duration::from_secs(5);

/// Records waiting for the writer at most. The writer is only ever behind while the file does not
/// answer, and then every new call is refused once this many wait.
const QUEUE: usize = 1024;

/// The end record's message of a call cancelled before its host work began.
pub(crate) const CANCELLED_BEFORE_WORK: &str =
    "the client cancelled the call before its host work began; nothing was done";

/// The code and message of the end record of a call cancelled before its host work began.
pub(crate) fn cancelled_before_work() -> (&'static str, String) {
    (go_code_name(Code::Cancelled), CANCELLED_BEFORE_WORK.to_string())
}

/// What a call refused because its start record was not written within `wait` is told.
pub(crate) fn timed_out_message(service: &str, method: &str, wait: Duration) -> String {
    format!("{service}/{method} was not run: its audit record could not be written within {} s (the audit file is not answering)", wait.as_secs_f64())
}

/// A record with what it quotes owned, on its way to the writer thread.
pub(crate) struct Owned {
    pub event: Event,
    pub call: u64,
    pub time: SystemTime,
    pub peer_at_connect: Option<Arc<Caller>>,
    pub service: &'static str,
    pub method: &'static str,
    pub request: Option<serde_json::Value>,
    pub code: Option<&'static str>,
    pub message: Option<String>,
    pub duration: Option<Duration>,
}

impl Owned {
    /// The end record of the call whose start record this is, which did not run: `code` and
    /// `message` say why.
    fn not_run(&self, (code, message): (&'static str, String), began: Instant) -> Owned {
        Owned {
            event: Event::End,
            time: SystemTime::now(),
            peer_at_connect: self.peer_at_connect.clone(),
            request: None,
            code: Some(code),
            message: Some(message),
            duration: Some(began.elapsed()),
            ..*self
        }
    }

    fn record(&self) -> Record<'_> {
        Record {
            event: self.event,
            call: self.call,
            time: self.time,
            peer_at_connect: self.peer_at_connect.as_deref(),
            service: self.service,
            method: self.method,
            request: self.request.as_ref(),
            code: self.code,
            message: self.message.as_deref(),
            duration: self.duration,
        }
    }
}

/// Why a start record is not in the file: the call must not run.
#[derive(Debug)]
pub(crate) enum StartFailed {
    /// The sink refused it.
    Write(std::io::Error),
    /// Not written within the wait (or [`QUEUE`] records already wait): the file does not answer.
    TimedOut { waited: Duration, queued: bool },
    /// The writer thread is gone.
    Stopped,
}

/// What became of a queued start record (an [`AtomicU8`]): the writer and the waiting call agree
/// on it with one compare-and-swap, so a record the call gave up on is either never written or
/// followed by an end record saying the call did not run.
const QUEUED: u8 = 0;
const WRITTEN: u8 = 1;
const TIMED_OUT: u8 = 2;
const CANCELLED: u8 = 3;

struct Job {
    record: Owned,
    /// Start records: whether the call still waits for it.
    ticket: Option<Arc<AtomicU8>>,
    /// When the call began (for the end record of a call that gave up on its start record).
    began: Instant,
    done: Option<oneshot::Sender<std::io::Result<()>>>,
}

/// The one thread that writes records to the sink, in the order they were queued, so that no
/// async worker ever waits on the audit file: calls wait for their records asynchronously and
/// for at most `wait` (see `call.rs`).
pub(crate) struct Writer {
    queue: SyncSender<Job>,
    read_only_calls: bool,
    wait: Duration,
}

impl Writer {
    pub(crate) fn start(sink: Arc<dyn AuditSink>, wait: Duration) -> Writer {
        let (queue, rx) = sync_channel(QUEUE);
        let read_only_calls = sink.read_only_calls();
        let spawned =
            std::thread::Builder::new().name("csi-proxy-audit".into()).spawn(move || write_queued(&rx, &*sink, wait));
        if let Err(e) = spawned {
            // The queue's receiver is gone with the closure: every audited call is refused.
            tracing::error!(target: "csi_proxy::audit", error = %e, "cannot start the audit writer thread");
        }
        Writer { queue, read_only_calls, wait }
    }

    pub(crate) fn read_only_calls(&self) -> bool {
        self.read_only_calls
    }

    pub(crate) fn wait(&self) -> Duration {
        self.wait
    }

    /// Queues a start record and waits until it is written, for at most the writer's wait. Given
    /// up on (timed out, or this future dropped), the record is skipped if not yet written, else
    /// followed by an end record saying the call was not run.
    pub(crate) async fn start_record(&self, record: Owned, began: Instant) -> Result<(), StartFailed> {
        let ticket = Arc::new(AtomicU8::new(QUEUED));
        let (done, written) = oneshot::channel();
        // What the end record is made from if this future is dropped after the writer took the
        // record.
        let start = Owned { request: None, message: None, peer_at_connect: record.peer_at_connect.clone(), ..record };
        let job = Job { record, ticket: Some(ticket.clone()), began, done: Some(done) };
        match self.queue.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(StartFailed::TimedOut { waited: self.wait, queued: true }),
            Err(TrySendError::Disconnected(_)) => return Err(StartFailed::Stopped),
        }
        // Dropped while waiting (the client cancelled the call): given up on as cancelled.
        let mut cancelled = GiveUp { ticket: Some(ticket.clone()), writer: self, start, began };
        let outcome = tokio::time::timeout(self.wait, written).await;
        cancelled.ticket = None;
        match outcome {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(StartFailed::Write(e)),
            Ok(Err(_)) => Err(StartFailed::Stopped),
            Err(_) => match ticket.compare_exchange(QUEUED, TIMED_OUT, Ordering::AcqRel, Ordering::Acquire) {
                // Written as the wait ran out: the call may run.
                Err(WRITTEN) => Ok(()),
                _ => Err(StartFailed::TimedOut { waited: self.wait, queued: false }),
            },
        }
    }

    /// Queues an end (or refused) record without waiting; the receiver answers once it is written
    /// or has failed (the writer logs a failure). A record that finds [`QUEUE`] records waiting
    /// (the file has not answered for a while) is dropped, and that is logged as an error.
    pub(crate) fn last_record(&self, record: Owned) -> Option<oneshot::Receiver<std::io::Result<()>>> {
        let (done, written) = oneshot::channel();
        let (call, service, method) = (record.call, record.service, record.method);
        let job = Job { record, ticket: None, began: Instant::now(), done: Some(done) };
        match self.queue.try_send(job) {
            Ok(()) => Some(written),
            Err(e) => {
                let why = match e {
                    TrySendError::Full(_) => "the audit file is not answering and the queue for it is full",
                    TrySendError::Disconnected(_) => "the audit writer has stopped",
                };
                tracing::error!(target: "csi_proxy::audit", service, method, call, why,
                    "cannot write the audit record of a finished call; it is lost");
                None
            }
        }
    }
}

/// Settles a start record given up on when dropped armed (the call's future was dropped while
/// it waited): not yet written, it is marked cancelled and the writer skips it or follows it with
/// the end record; already written (the writer got there first), this queues that end record.
struct GiveUp<'a> {
    ticket: Option<Arc<AtomicU8>>,
    writer: &'a Writer,
    /// The start record (without its request) and when the call began.
    start: Owned,
    began: Instant,
}

impl Drop for GiveUp<'_> {
    fn drop(&mut self) {
        let Some(t) = &self.ticket else { return };
        if t.compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire) == Err(WRITTEN) {
            self.writer.last_record(self.start.not_run(cancelled_before_work(), self.began));
        }
    }
}

/// The writer thread: runs until every [`Writer`] is gone.
fn write_queued(rx: &Receiver<Job>, sink: &dyn AuditSink, wait: Duration) {
    let write = |record: &Owned| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.write(&record.record())))
            .unwrap_or_else(|_| Err(std::io::Error::other("the audit sink panicked")))
    };
    while let Ok(job) = rx.recv() {
        let r = &job.record;
        if job.ticket.as_ref().is_some_and(|t| t.load(Ordering::Acquire) != QUEUED) {
            // Its call gave up before the record reached the file, and did not run.
            continue;
        }
        let result = write(r);
        match (&job.ticket, &result) {
            (Some(ticket), Ok(())) => {
                if let Err(gave_up) = ticket.compare_exchange(QUEUED, WRITTEN, Ordering::AcqRel, Ordering::Acquire) {
                    // In the file after its call gave up: say that the call did not run.
                    let (code, message) = match gave_up {
                        TIMED_OUT => (go_code_name(Code::Unavailable), timed_out_message(r.service, r.method, wait)),
                        _ => cancelled_before_work(),
                    };
                    if let Err(e) = write(&r.not_run((code, message), job.began)) {
                        tracing::error!(target: "csi_proxy::audit", service = r.service, method = r.method,
                            call = r.call, error = %e, "cannot write the audit record of a call that was not run");
                    }
                }
            }
            (None, Err(e)) => {
                tracing::error!(target: "csi_proxy::audit", service = r.service, method = r.method, call = r.call,
                    error = %e, "cannot write the audit record of a finished call");
            }
            _ => {}
        }
        if let Some(done) = job.done {
            let _ = done.send(result);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Kept(Mutex<Vec<(Event, u64, Option<String>)>>);

    impl AuditSink for Kept {
        fn write(&self, r: &Record<'_>) -> std::io::Result<()> {
            self.0.lock().unwrap().push((r.event, r.call, r.message.map(str::to_string)));
            Ok(())
        }
    }

    fn record(event: Event, call: u64) -> Owned {
        Owned {
            event,
            call,
            time: SystemTime::now(),
            peer_at_connect: None,
            service: "v1.Disk",
            method: "PartitionDisk",
            request: None,
            code: None,
            message: None,
            duration: None,
        }
    }

    /// The writer can put a start record in the file and hand it back before the waiting call
    /// is polled again; a call dropped in that gap (its client cancelled) did not run, and its
    /// end record must say so rather than leave the start record unpaired.
    #[tokio::test]
    async fn a_call_dropped_after_its_start_record_is_written_gets_its_end_record() {
        let sink = Arc::new(Kept::default());
        let writer = Writer::start(sink.clone(), RECORD_WAIT);
        let mut start = Box::pin(writer.start_record(record(Event::Start, 7), Instant::now()));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(start.as_mut().poll(&mut cx).is_pending(), "queued, not yet answered");
        // The writer works in order: once a later record is written, the start record is too,
        // and its ticket says so.
        writer.last_record(record(Event::End, 1)).unwrap().await.unwrap().unwrap();
        drop(start);
        // The end record is queued by the drop; one more record flushes it.
        writer.last_record(record(Event::End, 2)).unwrap().await.unwrap().unwrap();
        let kept = sink.0.lock().unwrap().clone();
        let calls: Vec<(Event, u64)> = kept.iter().map(|k| (k.0, k.1)).collect();
        assert_eq!(calls, [(Event::Start, 7), (Event::End, 1), (Event::End, 7), (Event::End, 2)], "{kept:?}");
        assert_eq!(kept[2].2.as_deref(), Some(CANCELLED_BEFORE_WORK));
    }
}
