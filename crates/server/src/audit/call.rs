//! The audit trail of one call: its start record before any host work, and exactly one end
//! record, whoever ends up writing it. The call path ([`crate::call`]) reports the call's stages
//! here (started, its host work begun and done, a rescan stepping, finished), and this decides,
//! when the client cancels, whether the record says nothing was done or waits for the work's
//! outcome.

use super::{cancelled_before_work, timed_out_message, EndSlot, Event, Owned, StartFailed, Writer};
use crate::outcome::{error_outcome, outcome_of, panicked, Name};
use crate::status::go_code_name;
use csi_proxy_host::{Error, Result};
use csi_proxy_sync::LockExt;
use csi_proxy_wire::Caller;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};
use tonic::Code;

/// One audited call: where its records go and what they all say.
pub(crate) struct CallAudit {
    writer: Arc<Writer>,
    call: u64,
    /// The connection's peer as the OS recorded it when it connected.
    peer_at_connect: Option<Arc<Caller>>,
    service: &'static str,
    method: &'static str,
    start: Instant,
    /// A dry run: every record says so ([`crate::dry_run`]).
    dry_run: bool,
    /// Why the authorization policy would refuse this call, run because it only warns.
    would_deny: Option<Arc<str>>,
}

impl CallAudit {
    pub(crate) fn new(
        writer: Arc<Writer>,
        call: u64,
        peer_at_connect: Option<Arc<Caller>>,
        (service, method): Name,
        start: Instant,
    ) -> Self {
        CallAudit { writer, call, peer_at_connect, service, method, start, dry_run: false, would_deny: None }
    }

    /// This call's records say it is a dry run.
    pub(crate) fn dry_run(self) -> Self {
        CallAudit { dry_run: true, ..self }
    }

    /// The start record says the policy would refuse this call (`-authorization-mode=warn`).
    pub(crate) fn would_deny(self, why: &str) -> Self {
        CallAudit { would_deny: Some(why.into()), ..self }
    }

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
            dry_run: self.dry_run,
            would_deny: if event == Event::Start { self.would_deny.clone() } else { None },
        }
    }

    /// Writes the start record; failing, or not written within the writer's wait, the call must
    /// not run. Waits without holding the worker. Written, the call's end record is pending, with
    /// room kept for it in the writer's queue.
    pub(crate) async fn started(self, request: serde_json::Value) -> Result<EndRecord> {
        let slot = self.write_start(request).await?;
        let stage = Mutex::new(Stage::Waiting);
        Ok(EndRecord(Arc::new(Pending { audit: self, stage, slot: Mutex::new(Some(slot)) })))
    }

    async fn write_start(&self, request: serde_json::Value) -> Result<EndSlot> {
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
    pub(crate) async fn refused(&self, e: &Error) {
        let (code, message) = error_outcome(e);
        self.write_last(Event::Refused, code, message, None).await;
    }

    /// Queues the end (or refused) record and waits, at most the writer's wait, until it is
    /// written, so that it is normally in the file before the client has its answer. Past the
    /// wait the answer goes out anyway; the record stays queued (see [`Writer::last_record`]).
    async fn write_last(&self, event: Event, code: &'static str, message: Option<String>, slot: Option<EndSlot>) {
        if let Some(written) = self.queue_last(event, code, message, slot) {
            let _ = tokio::time::timeout(self.writer.wait(), written).await;
        }
    }

    /// Queues the end (or refused) record without waiting: for the paths that cannot wait (a
    /// handler being dropped, a pool thread), which must not block on the file either. An end
    /// record spends the room its start record kept (`slot`).
    fn queue_last(
        &self,
        event: Event,
        code: &'static str,
        message: Option<String>,
        slot: Option<EndSlot>,
    ) -> Option<tokio::sync::oneshot::Receiver<std::io::Result<()>>> {
        let duration = Some(self.start.elapsed());
        self.writer.last_record(Owned { code: Some(code), message, duration, ..self.record(event) }, slot)
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
pub(crate) struct Pending {
    audit: CallAudit,
    stage: Mutex<Stage>,
    /// The room kept for the end record, spent by whoever writes it.
    slot: Mutex<Option<EndSlot>>,
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

    fn slot(&self) -> Option<EndSlot> {
        self.slot.lock_ignoring_poison().take()
    }

    /// The host work's thread, about to start it: false if the call was cancelled meanwhile
    /// (its end record says nothing was done, so nothing may be).
    pub(crate) fn begin(&self) -> bool {
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
    pub(crate) fn worked<R>(&self, done: &std::result::Result<Result<R>, String>) {
        let (code, message) = match done {
            Ok(result) => outcome_of(result),
            Err(why) => error_outcome(&panicked((self.audit.service, self.audit.method), why)),
        };
        let mut stage = self.stage();
        if matches!(*stage, Stage::Abandoned) {
            *stage = Stage::Ended;
            drop(stage);
            self.audit.queue_last(Event::End, code, Some(after_client_left(message)), self.slot());
        } else {
            *stage = Stage::Finished(code, message);
        }
    }

    /// A rescan's handler, about to start its steps.
    pub(crate) fn stepping(&self) {
        *self.stage() = Stage::Stepping;
    }
}

/// The handler's hold on a pending end record: [`EndRecord::finish`] writes it with the call's
/// outcome; dropped unfinished (the client cancelled), it settles the record by the call's stage.
pub(crate) struct EndRecord(Arc<Pending>);

impl EndRecord {
    /// What the call's host work settles the record with (see [`Pending::begin`] and
    /// [`Pending::worked`]).
    pub(crate) fn pending(&self) -> Arc<Pending> {
        self.0.clone()
    }

    pub(crate) async fn finish<T>(self, result: &Result<T>) {
        *self.0.stage() = Stage::Ended;
        let (code, message) = outcome_of(result);
        self.0.audit.write_last(Event::End, code, message, self.0.slot()).await;
    }

    /// The end record of a dry run: its plan as the message, or the error it would answer.
    pub(crate) async fn finish_plan(self, result: &Result<String>) {
        *self.0.stage() = Stage::Ended;
        let (code, message) = match result {
            Ok(plan) => (go_code_name(Code::Ok), Some(csi_proxy_host::error::bound_message(plan).into_owned())),
            Err(e) => error_outcome(e),
        };
        self.0.audit.write_last(Event::End, code, message, self.0.slot()).await;
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
            Stage::Waiting => cancelled_before_work(),
            Stage::Stepping => (
                go_code_name(Code::Cancelled),
                "the client cancelled the rescan part-way: a step under way runs to its end, later ones are not \
                 done, and their outcome is not recorded"
                    .to_string(),
            ),
            Stage::Finished(code, message) => (code, after_client_left(message)),
        };
        drop(stage);
        self.0.audit.queue_last(Event::End, code, Some(message), self.0.slot());
    }
}
