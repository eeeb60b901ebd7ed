//! The path of every unary call: wire request → internal operation → host → wire response.

use crate::audit::{is_read_only, timed_out_message, Event, Owned, StartFailed, Writer, CANCELLED_BEFORE_WORK};
use crate::locks::{Key, Serial};
use crate::pool::{Pool, Submitted, GROW_AFTER};
use crate::status::{code_of, go_code_name, to_status};
use crate::Context;
use csi_proxy_host::error::{bound_message, clip};
use csi_proxy_host::{Error, Result};
use csi_proxy_sync::LockExt;
use csi_proxy_wire::Caller;
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use tonic::{Code, Request, Response, Status};

/// One internal, version-less operation: validates itself, then does its host work.
pub trait Op: Debug + Send + 'static {
    type Output: Send + 'static;
    /// What the operation holds while its host work runs; validates the fields it needs (an
    /// invalid request is refused before it waits for anything).
    fn serial(&self) -> Result<Serial>;
    /// Host work of a few metadata syscalls (a stat, a mkdir, a sysfs read): such a call may run
    /// on the async worker that serves it (see [`InlineSlot`]) instead of a pool thread.
    fn quick(&self) -> bool {
        false
    }
    fn run(self, ctx: &Context) -> Result<Self::Output>;
}

/// A wire request of some version, convertible into its internal operation.
pub trait IntoOp: Send + 'static {
    type Op: Op;
    fn into_op(self) -> Result<Self::Op>;
}

/// A wire response of some version, built from its operation's output.
pub trait FromOutput<T>: Sized {
    fn from_output(output: T) -> Result<Self>;
}

/// Threads for calls that take no lock: as many kept as CPUs, grown only while work waits
/// behind slow or hung calls (see [`crate::pool`]).
fn quick_pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        Pool::new("call", cpus.max(2), 64)
    })
}

/// Threads for the serialised, slow calls (partition, format, resize, mount, rescan): at most one
/// runs per disk, so this bounds the disks worked on at once, and keeps them off the quick pool.
static SERIAL_POOL: Pool = Pool::new("serial", 1, 32);

/// Host-work threads now and most ever, of both pools (for benchmarks and diagnostics).
pub fn host_threads() -> (usize, usize) {
    let (a, b) = (quick_pool().threads(), SERIAL_POOL.threads());
    (a.0 + b.0, a.1 + b.1)
}

/// Runs `work` on `pool`; a panic in it is returned as its message. Dropping the future before
/// the work started cancels it (the work, and what it owns, such as a lock guard, is dropped
/// unrun); work already running finishes on its thread. With `pending`, the audited call's end
/// record is settled with the job: the job does not start once the call is cancelled, and a job
/// that ends after its caller has gone writes the end record itself (see [`Pending`]).
async fn run_on<R: Send + 'static>(
    pool: &'static Pool,
    pending: Option<Arc<Pending>>,
    work: impl FnOnce() -> Result<R> + Send + 'static,
) -> std::result::Result<Result<R>, String> {
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let job = Box::new(move || {
        let go = match &pending {
            Some(pending) => pending.begin(),
            None => !tx.is_closed(),
        };
        if !go {
            return;
        }
        let done = catch_unwind(AssertUnwindSafe(work)).map_err(|p| payload_message(p.as_ref()));
        if let Some(pending) = &pending {
            // May write the end record here; the pool's jobs must not panic, whatever the sink does.
            let _ = catch_unwind(AssertUnwindSafe(|| pending.worked(&done)));
        }
        let _ = tx.send(done);
    });
    if pool.submit(job) == Submitted::Queued {
        loop {
            match tokio::time::timeout(GROW_AFTER, &mut rx).await {
                Ok(done) => return done.unwrap_or_else(|_| Err("its thread stopped".to_string())),
                Err(_) => pool.grow(),
            }
        }
    }
    rx.await.unwrap_or_else(|_| Err("its thread stopped".to_string()))
}

impl Context {
    /// Serves one unary call. Conversion and host work may block freely, and a panic anywhere in
    /// them fails only this call, with `Internal`. Waiting for a disk holds no thread, and a
    /// cancelled call stops waiting at once.
    pub async fn unary<Req, Resp>(
        &self,
        service: &'static str,
        method: &'static str,
        request: Request<Req>,
    ) -> Result<Response<Resp>, Status>
    where
        Req: IntoOp + prost::Message,
        Resp: FromOutput<<Req::Op as Op>::Output> + Send + 'static,
    {
        let start = Instant::now();
        let _flying = Flying::start();
        if let Some(o) = &self.0.observer {
            o.started(service, method);
        }
        let audit = self.0.audit.as_ref().filter(|a| a.read_only_calls() || !is_read_only(method)).map(|writer| {
            let peer_at_connect = request.extensions().get::<Arc<Caller>>().cloned();
            let call = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
            Audit { writer: writer.clone(), call, peer_at_connect, service, method, start }
        });
        // Also returns the request as logged, rendered only when it will be written (one line
        // per call, together with the outcome, after the work).
        let (result, shown) = self.serve::<Req, Resp>((service, method), request.into_inner(), audit).await;
        let elapsed = start.elapsed();
        let code = match &result {
            Ok(_) => Code::Ok,
            Err(e) => code_of(e),
        };
        if let Some(o) = &self.0.observer {
            o.handled(service, method, go_code_name(code), elapsed);
        }
        // Requests and errors can quote values of any size: the log line is bounded like the
        // status (see `bound_message`).
        let request = bound_message(shown.as_deref().unwrap_or("-"));
        let request = request.as_ref();
        match result {
            Ok(resp) => {
                tracing::debug!(target: "csi_proxy::call", %service, %method, request, elapsed_ms = ms(elapsed), "ok");
                Ok(Response::new(resp))
            }
            Err(e) => {
                let status = to_status(&e);
                let error = status.message();
                if code == Code::Internal {
                    tracing::error!(target: "csi_proxy::call", %service, %method, request, elapsed_ms = ms(elapsed), error, "failed");
                } else {
                    tracing::info!(target: "csi_proxy::call", %service, %method, request, elapsed_ms = ms(elapsed), code = go_code_name(code), error, "failed");
                }
                Err(status)
            }
        }
    }

    /// Conversion and validation here (cheap, no host), then the audit's start record, the lock
    /// awaited here, the host work on a pool thread holding the lock until it ends, and the end
    /// record. A panic is turned into the `Internal` error the client gets.
    async fn serve<Req, Resp>(&self, name: Name, message: Req, audit: Option<Audit>) -> (Result<Resp>, Option<String>)
    where
        Req: IntoOp + prost::Message,
        Resp: FromOutput<<Req::Op as Op>::Output> + Send + 'static,
    {
        // The request as the log and the audit record show it, rendered only when one of them
        // will be written.
        let logged = tracing::enabled!(target: "csi_proxy::call", tracing::Level::DEBUG);
        let shown = (logged || audit.is_some()).then(|| crate::shown::request_json(name.0, name.1, &message));
        let prepared = catch_unwind(AssertUnwindSafe(|| -> Result<_> {
            let op = message.into_op()?;
            let serial = op.serial()?;
            Ok((op, serial))
        }));
        let (op, serial) = match prepared.unwrap_or_else(|p| Err(panicked(name, &payload_message(p.as_ref())))) {
            Ok(prepared) => prepared,
            Err(e) => {
                if let Some(audit) = &audit {
                    audit.refused(&e).await;
                }
                return (Err(e), None);
            }
        };
        let text = logged.then(|| shown.as_ref().map(|j| j.to_string())).flatten();
        let end = match audit {
            None => None,
            Some(audit) => match audit.started(shown.unwrap_or_default()).await {
                Ok(()) => Some(EndRecord(Arc::new(Pending { audit, stage: Mutex::new(Stage::Waiting) }))),
                Err(e) => return (Err(e), text),
            },
        };
        let shown = text;
        let pending = end.as_ref().map(|e| e.0.clone());
        let result = self.work::<Req::Op, Resp>(name, op, serial, pending).await;
        if let Some(end) = end {
            end.finish(&result).await;
        }
        (result, shown)
    }

    /// The operation's host work, under the lock its `serial` names.
    async fn work<O, Resp>(&self, name: Name, op: O, serial: Serial, pending: Option<Arc<Pending>>) -> Result<Resp>
    where
        O: Op,
        Resp: FromOutput<O::Output> + Send + 'static,
    {
        let (pool, guard) = match serial {
            Serial::ReadOnly | Serial::OwnTurns => (quick_pool(), None),
            Serial::Disk(disk) => (&SERIAL_POOL, Some(self.locks().lock(Key::Disk(disk)).await)),
            Serial::EachDisk => {
                if let Some(pending) = &pending {
                    pending.stepping();
                }
                return self.run_then_refresh(op).await.unwrap_or_else(|Panicked(why)| Err(panicked(name, &why)));
            }
            Serial::Volume(volume) => {
                let disk_of = || {
                    let (ctx, volume) = (self.clone(), volume.clone());
                    async move {
                        run_on(quick_pool(), None, move || ctx.hosts().volume.disk_number_of_volume(&volume))
                            .await
                            .unwrap_or_else(|why| {
                                Err(Error::internal(format!("looking up the disk of a volume panicked ({why})")))
                            })
                    }
                };
                (&SERIAL_POOL, Some(self.locks().lock_volume(&volume, disk_of).await?))
            }
        };
        if op.quick() && guard.is_none() {
            if let Some(_slot) = InlineSlot::take() {
                // Runs to its end within this poll: a cancellation cannot land in the middle.
                let done = catch_unwind(AssertUnwindSafe(|| op.run(self).and_then(Resp::from_output)));
                return done.unwrap_or_else(|p| Err(panicked(name, &payload_message(p.as_ref()))));
            }
        }
        let ctx = self.clone();
        let done = run_on(pool, pending.clone(), move || {
            let _held = guard;
            op.run(&ctx).and_then(Resp::from_output)
        })
        .await;
        done.unwrap_or_else(|why| Err(panicked(name, &why)))
    }
}

impl Context {
    /// A rescan: `op`'s host-wide work holding no disk, then each disk's refresh in turn, under
    /// that disk's lock only, so a rescan queued behind a hung disk holds up no other disk. A
    /// failing step does not stop the others.
    async fn run_then_refresh<O, Resp>(&self, op: O) -> std::result::Result<Result<Resp>, Panicked>
    where
        O: Op,
        Resp: FromOutput<O::Output> + Send + 'static,
    {
        let (ctx, lister) = (self.clone(), self.clone());
        let rescan = async move { run_on(&SERIAL_POOL, None, move || op.run(&ctx)).await.map_err(Panicked) };
        let disks = async move {
            run_on(quick_pool(), None, move || lister.hosts().disk.disks_to_refresh()).await.map_err(Panicked)
        };
        let refresh = |disk| async move {
            let held = self.locks().lock(Key::Disk(disk)).await;
            let ctx = self.clone();
            run_on(&SERIAL_POOL, None, move || {
                let _held = held;
                ctx.hosts().disk.refresh_disk(disk)
            })
            .await
            .map_err(Panicked)
        };
        let outcome = csi_proxy_host::rescan_in_order(rescan, disks, refresh).await?;
        Ok(outcome.and_then(Resp::from_output))
    }
}

/// The one call at a time whose host work runs on the async worker that serves it, saving the two
/// thread hand-offs of the pool (to a pool thread and back), which cost more than a stat. Only
/// quick calls that hold no lock, and only on a runtime of two workers or more: host work that
/// hangs here holds one worker (the others, and the pool, serve on), and only one, since every
/// other call meanwhile uses the pool.
///
/// While other calls are in flight, a worker busy with host work is not reading, writing or
/// handing out theirs: then only host work that has lately been cheaper than a hand-off
/// ([`QUICK_ENOUGH`], a running average of what the inline calls took) runs here. Under Wine,
/// where a stat is several round trips to the wineserver, that keeps busy servers on the pool.
struct InlineSlot {
    started: Instant,
}

static INLINE_BUSY: AtomicBool = AtomicBool::new(false);
/// Running average of the inline calls' host work, in ns (written only by the slot's holder).
static INLINE_COST_NS: AtomicU64 = AtomicU64::new(0);
/// Calls of this process between their request and their answer.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// Host work at most this long (on average) runs inline even while other calls are in flight.
const QUICK_ENOUGH: Duration = Duration::from_micros(20);

impl InlineSlot {
    fn take() -> Option<InlineSlot> {
        let workers = tokio::runtime::Handle::try_current().map_or(0, |h| h.metrics().num_workers());
        if workers < 2 {
            return None;
        }
        let alone = IN_FLIGHT.load(Ordering::Relaxed) <= 1;
        if !alone && INLINE_COST_NS.load(Ordering::Relaxed) > QUICK_ENOUGH.as_nanos() as u64 {
            return None;
        }
        INLINE_BUSY.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).ok()?;
        Some(InlineSlot { started: Instant::now() })
    }
}

impl Drop for InlineSlot {
    fn drop(&mut self) {
        let took = u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let average = INLINE_COST_NS.load(Ordering::Relaxed);
        // Each new sample counts for an eighth: the average follows the last few dozen calls.
        let average = average - average / 8 + took / 8;
        INLINE_COST_NS.store(average, Ordering::Relaxed);
        INLINE_BUSY.store(false, Ordering::Release);
    }
}

/// Counts a call in flight until dropped (also when the call is cancelled).
struct Flying;

impl Flying {
    fn start() -> Flying {
        IN_FLIGHT.fetch_add(1, Ordering::Relaxed);
        Flying
    }
}

impl Drop for Flying {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Numbers the audited calls of this process, pairing start and end records.
static NEXT_CALL: AtomicU64 = AtomicU64::new(1);

/// A call's service and method (`v1.Disk`, `PartitionDisk`).
type Name = (&'static str, &'static str);

/// A duration as logged: milliseconds as a number, under a key ending in `_ms` (never `Debug`'s
/// `1.2ms` text, which log pipelines cannot compare).
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The `Internal` error of a call whose conversion or host work panicked.
fn panicked((service, method): Name, why: &str) -> Error {
    Error::internal(format!("{service}/{method} failed: the handler panicked ({why})"))
}

/// The code (as Go names it) and message a client gets for `result`.
fn outcome_of<T>(result: &Result<T>) -> (&'static str, Option<String>) {
    match result {
        Ok(_) => (go_code_name(Code::Ok), None),
        Err(e) => error_outcome(e),
    }
}

fn error_outcome(e: &Error) -> (&'static str, Option<String>) {
    (go_code_name(code_of(e)), Some(to_status(e).message().to_string()))
}

/// One audited call: where its records go and what they all say.
struct Audit {
    writer: Arc<Writer>,
    call: u64,
    /// The connection's peer as the OS recorded it when it connected.
    peer_at_connect: Option<Arc<Caller>>,
    service: &'static str,
    method: &'static str,
    start: Instant,
}

impl Audit {
    fn record(&self, event: Event) -> Owned {
        Owned {
            event,
            call: self.call,
            time: SystemTime::now(),
            peer_at_connect: self.peer_at_connect.clone(),
            service: self.service,
            method: self.method,
            request: None,
            code: None,
            message: None,
            duration: None,
        }
    }

    /// Writes the start record; failing, or not written within the writer's wait, the call must
    /// not run. Waits without holding the worker.
    async fn started(&self, request: serde_json::Value) -> Result<()> {
        let record = Owned { request: Some(request), ..self.record(Event::Start) };
        self.writer.start_record(record, self.start).await.map_err(|failed| {
            let (service, method) = (self.service, self.method);
            let message = match &failed {
                StartFailed::Write(e) => {
                    format!("{service}/{method} was not run: its audit record could not be written ({e})")
                }
                StartFailed::TimedOut { waited, .. } => timed_out_message(service, method, *waited),
                StartFailed::Stopped => {
                    format!("{service}/{method} was not run: its audit record could not be written (the audit writer has stopped)")
                }
            };
            let queue_full = matches!(failed, StartFailed::TimedOut { queued: true, .. });
            tracing::error!(target: "csi_proxy::audit", service, method, error = %message, queue_full,
                "cannot write the audit record; the call is refused");
            Error::unavailable(message)
        })
    }

    /// The record of a request that could not be read as an operation (no start record).
    async fn refused(&self, e: &Error) {
        let (code, message) = error_outcome(e);
        self.write_last(Event::Refused, code, message).await;
    }

    /// Queues the end (or refused) record and waits, at most the writer's wait, until it is
    /// written, so that it is normally in the file before the client has its answer. Past the
    /// wait the answer goes out anyway; the record stays queued (see [`Writer::last_record`]).
    async fn write_last(&self, event: Event, code: &'static str, message: Option<String>) {
        if let Some(written) = self.queue_last(event, code, message) {
            let _ = tokio::time::timeout(self.writer.wait(), written).await;
        }
    }

    /// Queues the end (or refused) record without waiting: for the paths that cannot wait (a
    /// handler being dropped, a pool thread), which must not block on the file either.
    fn queue_last(
        &self,
        event: Event,
        code: &'static str,
        message: Option<String>,
    ) -> Option<tokio::sync::oneshot::Receiver<std::io::Result<()>>> {
        let duration = Some(self.start.elapsed());
        self.writer.last_record(Owned { code: Some(code), message, duration, ..self.record(event) })
    }
}

/// Where an audited call is, for whoever writes its end record: the call when it ends, or, when
/// its client cancels it (the handler is dropped), the handler's drop if no host work is running,
/// else the host work's thread once that work ends. Exactly one of them writes it.
enum Stage {
    /// Before its host work (or waiting for its disk): cancelling it means nothing was done.
    Waiting,
    /// Its host work runs on a pool thread.
    Running,
    /// Its host work ended with this outcome, not yet taken by the handler.
    Finished(&'static str, Option<String>),
    /// Cancelled while its host work ran: that work's thread writes the end record.
    Abandoned,
    /// A rescan, stepping through its host-wide work and the disks one by one.
    Stepping,
    /// The end record is written.
    Ended,
}

/// The end record of an audited call whose start record is written.
struct Pending {
    audit: Audit,
    stage: Mutex<Stage>,
}

/// The message of an end record whose client did not wait for the outcome it records.
fn after_client_left(message: Option<String>) -> String {
    const CLIENT_GONE: &str = "the client cancelled the call while its host work ran; the work ran to its end";
    match message {
        Some(m) => format!("{m} ({CLIENT_GONE})"),
        None => CLIENT_GONE.to_string(),
    }
}

impl Pending {
    fn stage(&self) -> std::sync::MutexGuard<'_, Stage> {
        self.stage.lock_ignoring_poison()
    }

    /// The host work's thread, about to start it: false if the call was cancelled meanwhile
    /// (its end record says nothing was done, so nothing may be).
    fn begin(&self) -> bool {
        let mut stage = self.stage();
        match *stage {
            Stage::Waiting => {
                *stage = Stage::Running;
                true
            }
            _ => false,
        }
    }

    /// The host work's thread, its work done: keeps the outcome for the handler, or writes it
    /// when the handler is gone.
    fn worked<R>(&self, done: &std::result::Result<Result<R>, String>) {
        let (code, message) = match done {
            Ok(result) => outcome_of(result),
            Err(why) => error_outcome(&panicked((self.audit.service, self.audit.method), why)),
        };
        let mut stage = self.stage();
        if matches!(*stage, Stage::Abandoned) {
            *stage = Stage::Ended;
            drop(stage);
            self.audit.queue_last(Event::End, code, Some(after_client_left(message)));
        } else {
            *stage = Stage::Finished(code, message);
        }
    }

    /// A rescan's handler, about to start its steps.
    fn stepping(&self) {
        *self.stage() = Stage::Stepping;
    }
}

/// The handler's hold on a pending end record: [`EndRecord::finish`] writes it with the call's
/// outcome; dropped unfinished (the client cancelled), it settles the record by the call's stage.
struct EndRecord(Arc<Pending>);

impl EndRecord {
    async fn finish<T>(self, result: &Result<T>) {
        *self.0.stage() = Stage::Ended;
        let (code, message) = outcome_of(result);
        self.0.audit.write_last(Event::End, code, message).await;
    }
}

impl Drop for EndRecord {
    fn drop(&mut self) {
        let mut stage = self.0.stage();
        let (code, message) = match std::mem::replace(&mut *stage, Stage::Ended) {
            // Only this drop abandons a call, so Abandoned is not seen here; either way the
            // record is someone else's to write.
            Stage::Ended | Stage::Abandoned => return,
            Stage::Running => {
                *stage = Stage::Abandoned;
                return;
            }
            Stage::Waiting => (go_code_name(Code::Cancelled), CANCELLED_BEFORE_WORK.to_string()),
            Stage::Stepping => (
                go_code_name(Code::Cancelled),
                "the client cancelled the rescan part-way: a step under way runs to its end, later ones are not \
                 done, and their outcome is not recorded"
                    .to_string(),
            ),
            Stage::Finished(code, message) => (code, after_client_left(message)),
        };
        drop(stage);
        self.0.audit.queue_last(Event::End, code, Some(message));
    }
}

/// The message of a panic in a call's conversion or host work.
struct Panicked(String);

fn payload_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Parses a disk number that older versions carry as a decimal string. Only plain ASCII digits
/// are accepted (no sign, no blanks) and values beyond u32 are refused rather than truncated.
pub fn parse_disk_number(field: &str, value: &str) -> Result<u32> {
    if value.is_empty() {
        return Err(Error::invalid(format!("{field} is empty: expected a decimal disk number")));
    }
    if !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Error::invalid(format!(
            "{field} {:?} is not a decimal disk number (expected digits 0-9 only)",
            clip(value)
        )));
    }
    value.parse::<u32>().map_err(|_| {
        Error::invalid(format!("{field} {:?} is out of range: disk numbers go up to {}", clip(value), u32::MAX))
    })
}

/// Converts a size or count that the wire carries as int64 into the host's unsigned form.
pub fn non_negative(field: &str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::invalid(format!("{field} {value} is negative: expected 0 or more")))
}

/// Converts an unsigned host value into the wire's int64, refusing silent wrap-around.
pub fn to_i64(field: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::internal(format!("{field} {value} does not fit the wire's int64")))
}

/// Rejects an empty required string field.
pub fn required<'a>(field: &str, value: &'a str) -> Result<&'a str> {
    if value.is_empty() {
        Err(Error::invalid(format!("{field} is empty")))
    } else {
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disk_numbers_parse_strictly() {
        assert_eq!(parse_disk_number("diskID", "0").unwrap(), 0);
        assert_eq!(parse_disk_number("diskID", "4294967295").unwrap(), u32::MAX);
        for bad in ["", "-1", "+1", " 1", "1 ", "0x10", "abc", "4294967296", "99999999999999999999999"] {
            let e = parse_disk_number("diskID", bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad:?}");
            assert!(e.to_string().contains("diskID"), "{e}");
            if !bad.is_empty() {
                assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
            }
        }
        assert!(parse_disk_number("diskID", "4294967296").unwrap_err().to_string().contains("out of range"));
    }

    #[test]
    fn sizes_refuse_negative_values() {
        assert_eq!(non_negative("size_bytes", 5).unwrap(), 5);
        assert!(non_negative("size_bytes", -1).unwrap_err().to_string().contains("size_bytes -1"));
        assert!(to_i64("total_bytes", u64::MAX).is_err());
    }
}
