//! The audit trail: a record when a privileged call starts and another when it ends, with who
//! connected (the transport's [`Caller`]: the peer of the call's connection as the OS recorded it
//! when that peer connected), what was asked (the wire request as JSON, secrets redacted),
//! and how it ended. Where the records go is the sink's business (the
//! daemon's `-audit-log` file).
//!
//! The rule that makes the trail trustworthy: a call whose start record cannot be written is
//! not run (it fails with `Unavailable`). Every call that did run gets its end record: the call's
//! own outcome is returned either way, since its work is done, and the record follows.
//!
//! The audit file must not stall the daemon (a frozen filesystem, a dead NFS server): records
//! are written by one thread of their own (`Writer`), in order, and a call only awaits its
//! record asynchronously, for at most [`RECORD_WAIT`]. A start record not written by then gets
//! the call refused like a failed write, and is taken out of the queue again; if the writer had
//! it in hand and it reaches the file later anyway, an end record saying the call was not run
//! follows it. An end record not written by then stays queued: the client gets its answer, and
//! the record goes into the file once the file answers again. It always finds room: a start
//! record is queued only with room kept for its end record, so the queue holds at most two
//! records per call in flight, and a refused call leaves nothing in it.
//!
//! An end record whose write fails (a full filesystem) is kept and written before the next
//! record that gets written (or when the writer tries again on its own, every [`LATE_RETRY`]),
//! marked with why it is late ([`Record::late`]), so that the trail tells "ran, outcome written
//! late" from "stopped mid-call". At most [`LATE`] wait so; past that they are counted, and the
//! count is written as one [`Event::Lost`] record.
//!
//! This module is the records and their writer; [`call`] is one call's trail (which record, and
//! who writes its end record when the client cancels).

pub mod call;

use crate::status::go_code_name;
use csi_proxy_host::error::clip;
use csi_proxy_sync::LockExt;
pub use csi_proxy_wire::is_read_only;
use csi_proxy_wire::Caller;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
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
    /// End (or refused) records that could not be written and could not be kept to be written
    /// late either ([`LATE`] already waited): [`Record::lost`] says how many; `call`, `service`
    /// and `method` are the last of them.
    Lost,
}

impl Event {
    pub fn name(self) -> &'static str {
        match self {
            Event::Start => "start",
            Event::End => "end",
            Event::Refused => "refused",
            Event::Lost => "lost",
        }
    }
}

/// One audit record.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub event: Event,
    /// Numbers the calls of this daemon run; a start and its end carry the same number.
    pub call: u64,
    /// When the record was made (for a late record: when its call ended, not when it was written).
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
    /// An end (or refused) record written after records that came later, because it could not
    /// be written when its call ended: why (the write's error). `None` for a record written in
    /// its turn.
    pub late: Option<&'a str>,
    /// [`Event::Lost`] records: how many records were lost.
    pub lost: Option<u64>,
    /// A dry run ([`crate::dry_run`]): nothing was done; an end record's message is the plan.
    pub dry_run: bool,
    /// Start records of calls the authorization policy does not grant, run because the daemon
    /// only warns (`-authorization-mode=warn`): why the policy would refuse it.
    pub would_deny: Option<&'a str>,
}

/// How long a call waits for its start record to be written before it is refused (and its
/// handler for its end record before answering anyway), unless the context says otherwise.
pub const RECORD_WAIT: Duration = Duration::from_secs(5);

/// Records waiting for the writer at most, counting the room kept for the end record of every
/// call whose start record is queued or written: the writer is only ever behind while the file
/// does not answer, and then new calls are refused once this is taken.
const QUEUE: usize = 1024;

/// End records kept to be written late at most (each as small as an end record: no request,
/// its message bounded); past this they are only counted (see [`Event::Lost`]).
pub const LATE: usize = 1024;

/// How long the writer waits, with records to write late and nothing else to write, before it
/// tries them again.
pub const LATE_RETRY: Duration = Duration::from_secs(1);

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
    pub dry_run: bool,
    pub would_deny: Option<Arc<str>>,
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
            would_deny: None,
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
            late: None,
            lost: None,
            dry_run: self.dry_run,
            would_deny: self.would_deny.as_deref(),
        }
    }
}

/// Why a start record is not in the file: the call must not run.
#[derive(Debug)]
pub(crate) enum StartFailed {
    /// The sink refused it.
    Write(std::io::Error),
    /// Not written within the wait (or [`QUEUE`] is taken): the file does not answer.
    TimedOut { waited: Duration, queued: bool },
    /// The writer thread is gone.
    Stopped,
}

/// What became of a start record the writer has taken from the queue (an [`AtomicU8`]): the
/// writer and the waiting call agree on it with one compare-and-swap, so a record the call gave
/// up on is either never written or followed by an end record saying the call did not run.
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

/// An end (or refused) record that could not be written in its turn, kept to be written late.
struct Late {
    record: Owned,
    /// Why it is late (bounded: an I/O error's text or a fixed sentence).
    why: String,
}

/// What the calls and the writer thread share.
struct Queue {
    state: Mutex<State>,
    /// Something for the writer: a job, or the last [`Writer`] gone.
    changed: Condvar,
}

struct State {
    jobs: VecDeque<Job>,
    /// Calls whose start record is queued or written and whose end record is not queued yet:
    /// room kept for each of those end records (an [`EndSlot`] each). `jobs.len() + reserved`
    /// never passes `queue`.
    reserved: usize,
    /// Records at most in `jobs`, counting `reserved` ([`QUEUE`]).
    queue: usize,
    late: VecDeque<Late>,
    /// Records kept in `late` at most ([`LATE`]).
    late_max: usize,
    /// Records that found `late` full, since the last [`Event::Lost`] record; and the last of
    /// them (its call, service and method).
    lost: u64,
    last_lost: Option<(u64, &'static str, &'static str)>,
    /// Every [`Writer`] is gone: the thread writes what is queued and stops.
    closed: bool,
    /// The writer thread is not running: nothing is written any more.
    stopped: bool,
}

impl State {
    /// Keeps `late` to be written late, at the back (`first`: at the front, where a record taken
    /// from there to be written goes back). When [`LATE`] wait already, the newest one is counted
    /// as lost instead, and returned to be logged (outside the lock).
    #[must_use]
    fn keep_late(&mut self, late: Late, first: bool) -> Option<Late> {
        if first {
            self.late.push_front(late);
        } else {
            self.late.push_back(late);
        }
        if self.late.len() <= self.late_max {
            return None;
        }
        let dropped = self.late.pop_back()?;
        let r = &dropped.record;
        self.lost = self.lost.saturating_add(1);
        self.last_lost = Some((r.call, r.service, r.method));
        Some(dropped)
    }

    /// Takes the start record with `ticket` out of the queue, if the writer has not taken it.
    fn withdraw(&mut self, ticket: &Arc<AtomicU8>) -> bool {
        match self.jobs.iter().position(|j| j.ticket.as_ref().is_some_and(|t| Arc::ptr_eq(t, ticket))) {
            Some(i) => {
                self.jobs.remove(i);
                true
            }
            None => false,
        }
    }
}

impl Queue {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock_ignoring_poison()
    }

    /// [`State::keep_late`], logging a record that is lost.
    fn keep_late(&self, late: Late, first: bool) {
        let dropped = self.state().keep_late(late, first);
        if let Some(Late { record: r, .. }) = dropped {
            tracing::error!(target: "csi_proxy::audit", service = r.service, method = r.method, call = r.call,
                "cannot keep the audit record of a finished call to write it late: too many wait already; it is lost (a record counting the lost ones follows the late ones)");
        }
    }
}

/// The room kept in the queue for the end record of a call whose start record was queued:
/// [`Writer::last_record`] spends it; dropped unspent (the call did not run, or its end record is
/// written by the writer itself), it is freed.
pub(crate) struct EndSlot {
    queue: Arc<Queue>,
    spent: bool,
}

impl EndSlot {
    fn spend(mut self, state: &mut State) {
        state.reserved -= 1;
        self.spent = true;
    }
}

impl Drop for EndSlot {
    fn drop(&mut self) {
        if !self.spent {
            self.queue.state().reserved -= 1;
        }
    }
}

/// The one thread that writes records to the sink, in the order they were queued, so that no
/// async worker ever waits on the audit file: calls wait for their records asynchronously and
/// for at most `wait` (see `call.rs`).
pub(crate) struct Writer {
    queue: Arc<Queue>,
    read_only_calls: bool,
    wait: Duration,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.queue.state().closed = true;
        self.queue.changed.notify_all();
    }
}

impl Writer {
    pub(crate) fn start(sink: Arc<dyn AuditSink>, wait: Duration) -> Writer {
        Writer::with_limits(sink, wait, QUEUE, LATE)
    }

    /// [`Writer::start`] with `queue` records queued at most and `late_max` kept to be written
    /// late.
    fn with_limits(sink: Arc<dyn AuditSink>, wait: Duration, queue: usize, late_max: usize) -> Writer {
        let state = State {
            jobs: VecDeque::new(),
            reserved: 0,
            queue,
            late: VecDeque::new(),
            late_max,
            lost: 0,
            last_lost: None,
            closed: false,
            stopped: false,
        };
        let queue = Arc::new(Queue { state: Mutex::new(state), changed: Condvar::new() });
        let read_only_calls = sink.read_only_calls();
        let shared = queue.clone();
        let spawned = std::thread::Builder::new()
            .name("csi-proxy-audit".into())
            .spawn(move || write_queued(&shared, &*sink, wait));
        if let Err(e) = spawned {
            // Every audited call is refused.
            queue.state().stopped = true;
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

    /// Queues a start record, with room kept for its end record, and waits until it is written,
    /// for at most the writer's wait; written, the room is the call's ([`EndSlot`]). Given up on
    /// (timed out, or this future dropped), the record is taken out of the queue if the writer
    /// has not taken it, else skipped if not yet written, else followed by an end record saying
    /// the call was not run.
    pub(crate) async fn start_record(&self, record: Owned, began: Instant) -> Result<EndSlot, StartFailed> {
        let ticket = Arc::new(AtomicU8::new(QUEUED));
        let (done, written) = oneshot::channel();
        // What the end record is made from if this future is dropped after the writer took the
        // record.
        let start = Owned {
            request: None,
            message: None,
            peer_at_connect: record.peer_at_connect.clone(),
            would_deny: record.would_deny.clone(),
            ..record
        };
        let job = Job { record, ticket: Some(ticket.clone()), began, done: Some(done) };
        let slot = {
            let mut state = self.queue.state();
            if state.stopped {
                return Err(StartFailed::Stopped);
            }
            // Its own place and its end record's.
            if state.jobs.len() + state.reserved + 2 > state.queue {
                return Err(StartFailed::TimedOut { waited: self.wait, queued: true });
            }
            state.jobs.push_back(job);
            state.reserved += 1;
            EndSlot { queue: self.queue.clone(), spent: false }
        };
        self.queue.changed.notify_all();
        // Dropped while waiting (the client cancelled the call): given up on as cancelled.
        let mut cancelled = GiveUp { ticket: Some(ticket.clone()), writer: self, start, began, slot: Some(slot) };
        let outcome = tokio::time::timeout(self.wait, written).await;
        cancelled.ticket = None;
        let slot = cancelled.slot.take().expect("the slot is taken here only");
        match outcome {
            Ok(Ok(Ok(()))) => Ok(slot),
            Ok(Ok(Err(e))) => Err(StartFailed::Write(e)),
            Ok(Err(_)) => Err(StartFailed::Stopped),
            Err(_) => {
                if self.queue.state().withdraw(&ticket) {
                    return Err(StartFailed::TimedOut { waited: self.wait, queued: false });
                }
                match ticket.compare_exchange(QUEUED, TIMED_OUT, Ordering::AcqRel, Ordering::Acquire) {
                    // Written as the wait ran out: the call may run.
                    Err(WRITTEN) => Ok(slot),
                    // The writer, which has it in hand, writes the end record if it writes it.
                    _ => Err(StartFailed::TimedOut { waited: self.wait, queued: false }),
                }
            }
        }
    }

    /// Queues an end (or refused) record without waiting; the receiver answers once it is written
    /// or has failed. An end record spends its call's `slot`, so it always finds room; a refused
    /// record (no slot) that finds none is kept to be written late. Either way a record whose
    /// write fails is kept to be written late (see the module text).
    pub(crate) fn last_record(
        &self,
        record: Owned,
        slot: Option<EndSlot>,
    ) -> Option<oneshot::Receiver<std::io::Result<()>>> {
        let (done, written) = oneshot::channel();
        let (call, service, method) = (record.call, record.service, record.method);
        let job = Job { record, ticket: None, began: Instant::now(), done: Some(done) };
        {
            let mut state = self.queue.state();
            if state.stopped {
                drop(state);
                tracing::error!(target: "csi_proxy::audit", service, method, call,
                    "cannot write the audit record of a finished call: the audit writer has stopped; it is lost");
                return None;
            }
            match slot {
                Some(slot) => slot.spend(&mut state),
                None if state.jobs.len() + state.reserved < state.queue => {}
                None => {
                    drop(state);
                    const WHY: &str = "the audit file was not answering and the queue for it was full";
                    tracing::error!(target: "csi_proxy::audit", service, method, call, why = WHY,
                        "cannot queue the audit record of a finished call; it is kept to be written late");
                    self.queue.keep_late(Late { record: job.record, why: WHY.into() }, false);
                    return None;
                }
            }
            state.jobs.push_back(job);
        }
        self.queue.changed.notify_all();
        Some(written)
    }
}

/// Settles a start record given up on when dropped armed (the call's future was dropped while
/// it waited): still queued, it is taken out; in the writer's hands and not yet written, it is
/// marked cancelled and the writer skips it or follows it with the end record; already written
/// (the writer got there first), this queues that end record in the call's slot.
struct GiveUp<'a> {
    ticket: Option<Arc<AtomicU8>>,
    writer: &'a Writer,
    /// The start record (without its request) and when the call began.
    start: Owned,
    began: Instant,
    slot: Option<EndSlot>,
}

impl Drop for GiveUp<'_> {
    fn drop(&mut self) {
        let Some(t) = &self.ticket else { return };
        if self.writer.queue.state().withdraw(t) {
            return;
        }
        if t.compare_exchange(QUEUED, CANCELLED, Ordering::AcqRel, Ordering::Acquire) == Err(WRITTEN) {
            self.writer.last_record(self.start.not_run(cancelled_before_work(), self.began), self.slot.take());
        }
    }
}

/// What the writer thread does next.
enum Next {
    /// Boxed: a job is a whole record, the other variants nothing.
    Job(Box<Job>),
    /// Records wait to be written late and nothing else came for [`LATE_RETRY`].
    Retry,
    /// Every [`Writer`] is gone and nothing is queued.
    Stop,
}

impl Queue {
    fn next(&self) -> Next {
        let mut state = self.state();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                return Next::Job(Box::new(job));
            }
            if state.closed {
                return Next::Stop;
            }
            if state.late.is_empty() && state.lost == 0 {
                state = self.changed.wait(state).unwrap_or_else(std::sync::PoisonError::into_inner);
            } else {
                let (s, waited) =
                    self.changed.wait_timeout(state, LATE_RETRY).unwrap_or_else(std::sync::PoisonError::into_inner);
                state = s;
                if waited.timed_out() && state.jobs.is_empty() {
                    return Next::Retry;
                }
            }
        }
    }
}

/// Marks the writer stopped when its thread ends (or unwinds), so that calls are refused at once
/// instead of after the wait.
struct Stopped<'a>(&'a Queue);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.state().stopped = true;
    }
}

/// The writer thread: runs until every [`Writer`] is gone.
fn write_queued(queue: &Queue, sink: &dyn AuditSink, wait: Duration) {
    let _stopped = Stopped(queue);
    let write = |record: &Record<'_>| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.write(record)))
            .unwrap_or_else(|_| Err(std::io::Error::other("the audit sink panicked")))
    };
    // An end (or refused) record: one that cannot be written is kept to be written late.
    let write_last = |record: Owned| {
        if let Err(e) = write(&record.record()) {
            tracing::error!(target: "csi_proxy::audit", service = record.service, method = record.method,
                call = record.call, error = %e, "cannot write the audit record of a finished call; it is kept to be written late");
            queue.keep_late(Late { record, why: clip(&e.to_string()).into_owned() }, false);
            return Err(e);
        }
        Ok(())
    };
    loop {
        let job = match queue.next() {
            Next::Job(job) => *job,
            Next::Retry => {
                write_late(queue, &write);
                continue;
            }
            Next::Stop => {
                if !write_late(queue, &write) {
                    let state = queue.state();
                    tracing::error!(target: "csi_proxy::audit", late = state.late.len(), lost = state.lost,
                        "the audit writer stops with records it could not write; they are lost");
                }
                return;
            }
        };
        if job.ticket.as_ref().is_some_and(|t| t.load(Ordering::Acquire) != QUEUED) {
            // Its call gave up before the record reached the file, and did not run.
            continue;
        }
        // The late records first, so that they come before what follows them.
        write_late(queue, &write);
        let Job { record, ticket, began, done } = job;
        let result = match &ticket {
            Some(ticket) => {
                let result = write(&record.record());
                if result.is_ok() {
                    if let Err(gave_up) = ticket.compare_exchange(QUEUED, WRITTEN, Ordering::AcqRel, Ordering::Acquire)
                    {
                        // In the file after its call gave up: say that the call did not run.
                        let (code, message) = match gave_up {
                            TIMED_OUT => (
                                go_code_name(Code::Unavailable),
                                timed_out_message(record.service, record.method, wait),
                            ),
                            _ => cancelled_before_work(),
                        };
                        let _ = write_last(record.not_run((code, message), began));
                    }
                }
                result
            }
            None => write_last(record),
        };
        if let Some(done) = done {
            let _ = done.send(result);
        }
    }
}

/// Writes the records kept to be written late, oldest first, each marked with why it is late,
/// then the count of those lost; stops at the first that fails (it stays first). True when none
/// is left.
fn write_late(queue: &Queue, write: &dyn Fn(&Record<'_>) -> std::io::Result<()>) -> bool {
    loop {
        let Some(late) = queue.state().late.pop_front() else { break };
        let record = Record { late: Some(&late.why), ..late.record.record() };
        if write(&record).is_err() {
            queue.keep_late(late, true);
            return false;
        }
    }
    let (lost, last) = {
        let state = queue.state();
        (state.lost, state.last_lost)
    };
    let Some((call, service, method)) = last.filter(|_| lost > 0) else { return true };
    let message = format!(
        "the audit records of {lost} finished calls (the last of them this one) could not be written, nor kept to be written late ({} were kept already): they are lost",
        queue.state().late_max
    );
    let record = Record {
        event: Event::Lost,
        call,
        time: SystemTime::now(),
        peer_at_connect: None,
        service,
        method,
        request: None,
        code: None,
        message: Some(&message),
        duration: None,
        late: None,
        lost: Some(lost),
        dry_run: false,
        would_deny: None,
    };
    if write(&record).is_err() {
        return false;
    }
    // Those counted since are told by the next one.
    let mut state = queue.state();
    state.lost -= lost;
    if state.lost == 0 {
        state.last_lost = None;
    }
    state.late.is_empty()
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

    /// [`Kept`], whose writes wait until [`Gated::open`]: the writer is held before its first
    /// write, whatever the machine's load.
    #[derive(Default)]
    struct Gated {
        kept: Kept,
        opened: Mutex<bool>,
        wake: Condvar,
    }

    impl Gated {
        fn open(&self) {
            *self.opened.lock().unwrap() = true;
            self.wake.notify_all();
        }
    }

    impl AuditSink for Gated {
        fn write(&self, r: &Record<'_>) -> std::io::Result<()> {
            let mut opened = self.opened.lock().unwrap();
            while !*opened {
                opened = self.wake.wait(opened).unwrap();
            }
            drop(opened);
            self.kept.write(r)
        }
    }

    /// A record as [`Full`] keeps it: its event, call, late marker and lost count.
    type Written = (Event, u64, Option<String>, Option<u64>);

    /// Fails every write while `full` is set, as a full filesystem does.
    #[derive(Default)]
    struct Full {
        full: std::sync::atomic::AtomicBool,
        kept: Mutex<Vec<Written>>,
    }

    impl AuditSink for Full {
        fn write(&self, r: &Record<'_>) -> std::io::Result<()> {
            if self.full.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("No space left on device"));
            }
            self.kept.lock().unwrap().push((r.event, r.call, r.late.map(str::to_string), r.lost));
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
            dry_run: false,
            would_deny: None,
        }
    }

    /// The writer can put a start record in the file and hand it back before the waiting call
    /// is polled again; a call dropped in that gap (its client cancelled) did not run, and its
    /// end record must say so rather than leave the start record unpaired.
    #[tokio::test]
    async fn a_call_dropped_after_its_start_record_is_written_gets_its_end_record() {
        let sink = Arc::new(Gated::default());
        let writer = Writer::start(sink.clone(), RECORD_WAIT);
        let mut start = Box::pin(writer.start_record(record(Event::Start, 7), Instant::now()));
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        // The sink holds the writer until opened: the record cannot have been answered yet.
        assert!(start.as_mut().poll(&mut cx).is_pending(), "queued, not yet answered");
        sink.open();
        // The writer works in order: once a later record is written, the start record is too,
        // and its ticket says so.
        writer.last_record(record(Event::End, 1), None).unwrap().await.unwrap().unwrap();
        drop(start);
        // The end record is queued by the drop; one more record flushes it.
        writer.last_record(record(Event::End, 2), None).unwrap().await.unwrap().unwrap();
        let kept = sink.kept.0.lock().unwrap().clone();
        let calls: Vec<(Event, u64)> = kept.iter().map(|k| (k.0, k.1)).collect();
        assert_eq!(calls, [(Event::Start, 7), (Event::End, 1), (Event::End, 7), (Event::End, 2)], "{kept:?}");
        assert_eq!(kept[2].2.as_deref(), Some(CANCELLED_BEFORE_WORK));
    }

    /// End records whose writes fail are written at the next write that works, before it, each
    /// marked with the error that made it late; past the bound they are counted, and the count
    /// is written after the late ones (they were logged as lost and never written).
    #[tokio::test]
    async fn end_records_that_cannot_be_written_are_written_late_and_counted_past_the_bound() {
        let sink = Arc::new(Full::default());
        let writer = Writer::with_limits(sink.clone(), RECORD_WAIT, QUEUE, 2);
        sink.full.store(true, Ordering::SeqCst);
        for call in 1..=3 {
            let e = writer.last_record(record(Event::End, call), None).unwrap().await.unwrap().unwrap_err();
            assert!(e.to_string().contains("No space left"), "{e}");
        }
        sink.full.store(false, Ordering::SeqCst);
        writer.last_record(record(Event::End, 4), None).unwrap().await.unwrap().unwrap();
        let kept = sink.kept.lock().unwrap().clone();
        let late = Some("No space left on device".to_string());
        assert_eq!(
            kept,
            [
                (Event::End, 1, late.clone(), None),
                (Event::End, 2, late, None),
                (Event::Lost, 3, None, Some(1)),
                (Event::End, 4, None, None)
            ],
            "{kept:?}"
        );
    }

    /// Late records wait for no further call: with nothing else to write, the writer tries them
    /// again by itself.
    #[tokio::test]
    async fn late_records_are_tried_again_without_another_record() {
        let sink = Arc::new(Full::default());
        let writer = Writer::start(sink.clone(), RECORD_WAIT);
        sink.full.store(true, Ordering::SeqCst);
        writer.last_record(record(Event::End, 1), None).unwrap().await.unwrap().unwrap_err();
        sink.full.store(false, Ordering::SeqCst);
        let deadline = Instant::now() + LATE_RETRY * 10;
        while sink.kept.lock().unwrap().is_empty() {
            assert!(Instant::now() < deadline, "the late record was not tried again");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let kept = sink.kept.lock().unwrap().clone();
        assert_eq!(kept, [(Event::End, 1, Some("No space left on device".to_string()), None)]);
    }
}
