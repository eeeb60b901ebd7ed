//! The path of every unary call, and the [`Context`] it runs in: wire request → internal
//! operation → the lock its [`Op::serial`] names → host work on a pool thread → wire response,
//! with the call's log line, metrics and audit trail ([`crate::audit::call`]) around it.

use crate::audit::call::{CallAudit, Pending};
use crate::audit::{is_read_only, AuditSink, Writer, RECORD_WAIT};
use crate::join::{Entered, Interest, Joins, Publisher};
use crate::locks::{Key, Locks, Serial};
use crate::outcome::{panicked, payload_message, Name};
use crate::policy::{Authorizer, Verdict};
use crate::pool::{Pool, Pools, Submitted, GROW_AFTER};
use crate::status::{code_of, go_code_name, to_status};
use crate::{inline, CallObserver, Config};
use csi_proxy_host::error::bound_message;
use csi_proxy_host::{Error, Hosts, Result};
use csi_proxy_wire::Caller;
use std::fmt::Debug;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::{Code, Request, Response, Status};

/// One internal, version-less operation: validates itself, then does its host work.
pub trait Op: Debug + Send + 'static {
    type Output: Send + 'static;
    /// What the operation holds while its host work runs; validates the fields it needs (an
    /// invalid request is refused before it waits for anything).
    fn serial(&self) -> Result<Serial>;
    /// Host work of a few metadata syscalls (a stat, a mkdir, a sysfs read): such a call may run
    /// on the async worker that serves it (see [`crate::inline`]) instead of a pool thread.
    fn quick(&self) -> bool {
        false
    }
    fn run(self, ctx: &Context) -> Result<Self::Output>;
    /// Every path, disk, volume, share, service and portal the request names, as the
    /// authorization policy judges them ([`crate::policy`]).
    fn args(&self) -> Vec<crate::policy::args::Arg<'_>>;
    /// A dry run's answer: what the operation would do (see [`crate::dry_run`]). Read-only
    /// operations have no plan (a dry run of one runs it).
    fn plan(&self, look: &crate::dry_run::Look<'_>) -> Result<String> {
        let _ = look;
        Err(Error::internal("a read-only operation has no plan"))
    }
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

struct Inner {
    hosts: Hosts,
    locks: Locks,
    config: Config,
    observer: Option<Arc<dyn CallObserver>>,
    audit: Option<Arc<Writer>>,
    /// Host-work threads: calls holding no lock on `unlocked`, disk and volume work on `locked`.
    pools: Pools,
    inline: inline::Inline,
    /// Numbers the audited calls, pairing start and end records.
    next_call: AtomicU64,
    /// Mutating calls in flight, which an identical call joins ([`crate::join`]).
    joins: Arc<Joins>,
    /// The authorization policy in force ([`crate::policy`]); `None`: every call is granted.
    authorizer: Option<Arc<Authorizer>>,
}

/// Shared state of every service: the host backends, configuration, observers, and what the
/// calls share (disk locks, host-work threads). Its one entry point for calls is
/// [`Context::unary`].
#[derive(Clone)]
pub struct Context(Arc<Inner>);

impl Context {
    pub fn new(hosts: Hosts, config: Config) -> Self {
        Self::build(hosts, config, None, None)
    }

    pub fn with_observer(hosts: Hosts, config: Config, observer: Arc<dyn CallObserver>) -> Self {
        Self::build(hosts, config, Some(observer), None)
    }

    fn build(
        hosts: Hosts,
        config: Config,
        observer: Option<Arc<dyn CallObserver>>,
        audit: Option<Arc<Writer>>,
    ) -> Self {
        Self::build_all(hosts, config, observer, audit, None)
    }

    fn build_all(
        hosts: Hosts,
        config: Config,
        observer: Option<Arc<dyn CallObserver>>,
        audit: Option<Arc<Writer>>,
        authorizer: Option<Arc<Authorizer>>,
    ) -> Self {
        Context(Arc::new(Inner {
            hosts,
            locks: Locks::default(),
            config,
            observer,
            audit,
            pools: Pools::default(),
            inline: inline::Inline::default(),
            next_call: AtomicU64::new(1),
            joins: Arc::default(),
            authorizer,
        }))
    }

    /// This context with an audit trail: every call that may change the host gets a start and
    /// an end record in `sink` (see [`crate::audit`]). Call before serving: the copy starts with
    /// fresh disk locks and threads.
    pub fn with_audit(self, sink: Arc<dyn AuditSink>) -> Self {
        self.with_audit_within(sink, RECORD_WAIT)
    }

    /// The same, waiting at most `wait` for each record (see [`crate::audit`]) instead of
    /// [`RECORD_WAIT`].
    pub fn with_audit_within(self, sink: Arc<dyn AuditSink>, wait: Duration) -> Self {
        let inner = &self.0;
        let writer = Arc::new(Writer::start(sink, wait));
        let (hosts, config, observer) = (inner.hosts.clone(), inner.config.clone(), inner.observer.clone());
        Self::build_all(hosts, config, observer, Some(writer), inner.authorizer.clone())
    }

    /// This context with an authorization policy: every call is judged by `authorizer` before it
    /// waits for anything (see [`crate::policy`]). Call before serving: the copy starts with
    /// fresh disk locks and threads.
    pub fn with_authorizer(self, authorizer: Arc<Authorizer>) -> Self {
        let inner = &self.0;
        let (hosts, config, observer) = (inner.hosts.clone(), inner.config.clone(), inner.observer.clone());
        Self::build_all(hosts, config, observer, inner.audit.clone(), Some(authorizer))
    }

    pub fn hosts(&self) -> &Hosts {
        &self.0.hosts
    }

    /// Per-disk serialisation of mutating calls.
    pub fn locks(&self) -> &Locks {
        &self.0.locks
    }

    pub fn config(&self) -> &Config {
        &self.0.config
    }

    /// Host-work threads now and most ever, of both pools (for benchmarks and diagnostics).
    pub fn host_threads(&self) -> (usize, usize) {
        let (a, b) = (self.0.pools.unlocked.threads(), self.0.pools.locked.threads());
        (a.0 + b.0, a.1 + b.1)
    }
}

/// Runs `work` on `pool`; a panic in it is returned as its message. Dropping the future before
/// the work started cancels it (the work, and what it owns, such as a lock guard, is dropped
/// unrun); work already running finishes on its thread. With `pending`, the audited call's end
/// record is settled with the job: the job does not start once the call is cancelled, and a job
/// that ends after its caller has gone writes the end record itself (see [`Pending`]).
/// `joined`, when given, must agree to the work's start (see [`Publisher::begin`]).
async fn run_on<R: Send + 'static>(
    pool: &Pool,
    pending: Option<Arc<Pending>>,
    joined: Option<Publisher>,
    work: impl FnOnce() -> Result<R> + Send + 'static,
) -> std::result::Result<Result<R>, String> {
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    let job = Box::new(move || {
        let go = match &pending {
            Some(pending) => pending.begin(),
            None => !tx.is_closed(),
        };
        if !go || joined.is_some_and(|p| !p.begin()) {
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
        Resp: FromOutput<<Req::Op as Op>::Output> + Default + Clone + Send + Sync + 'static,
    {
        let start = Instant::now();
        let _flying = self.0.inline.flying();
        if let Some(o) = &self.0.observer {
            o.started(service, method);
        }
        let peer_at_connect = request.extensions().get::<Arc<Caller>>().cloned();
        // A dry run of a read-only call is the call itself: it changes nothing either way.
        let dry_run = match crate::dry_run::asked(request.metadata()) {
            Ok(asked) => asked && !is_read_only(method),
            Err(e) => return Err(to_status(&e)),
        };
        // Mutating calls may join an identical one in flight, by the same principal.
        let principal = (!is_read_only(method)).then(|| principal(peer_at_connect.as_deref()));
        let caller = peer_at_connect.clone();
        let audit = self.0.audit.as_ref().filter(|a| a.read_only_calls() || !is_read_only(method)).map(|writer| {
            let call = self.0.next_call.fetch_add(1, Ordering::Relaxed);
            let audit = CallAudit::new(writer.clone(), call, peer_at_connect, (service, method), start);
            if dry_run {
                audit.dry_run()
            } else {
                audit
            }
        });
        // Also returns the request as logged, rendered only when it will be written (one line
        // per call, together with the outcome, after the work).
        let (result, shown) = if dry_run {
            self.dry_run::<Req, Resp>((service, method), request.into_inner(), audit, caller).await
        } else {
            let (result, shown) =
                self.serve::<Req, Resp>((service, method), request.into_inner(), audit, principal, caller).await;
            (result.map(|r| (r, None)), shown)
        };
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
            Ok((resp, None)) => {
                tracing::debug!(target: "csi_proxy::call", %service, %method, request, elapsed_ms = ms(elapsed), "ok");
                Ok(Response::new(resp))
            }
            Ok((resp, Some(plan))) => {
                let plan = bound_message(&plan);
                tracing::debug!(target: "csi_proxy::call", %service, %method, request, elapsed_ms = ms(elapsed),
                    plan = plan.as_ref(), "dry run: nothing was done");
                let mut response = Response::new(resp);
                let headers = response.metadata_mut();
                headers.insert(crate::dry_run::DRY_RUN_METADATA, tonic::metadata::MetadataValue::from_static("true"));
                headers.insert(crate::dry_run::PLAN_METADATA, crate::dry_run::plan_header(&plan));
                Ok(response)
            }
            Err(e) => {
                let mut status = to_status(&e);
                if dry_run {
                    // A refused dry run says it was one, as its plan would: the client can tell
                    // this refusal from a real call's failure.
                    status
                        .metadata_mut()
                        .insert(crate::dry_run::DRY_RUN_METADATA, tonic::metadata::MetadataValue::from_static("true"));
                }
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
    async fn serve<Req, Resp>(
        &self,
        name: Name,
        message: Req,
        audit: Option<CallAudit>,
        principal: Option<String>,
        caller: Option<Arc<Caller>>,
    ) -> (Result<Resp>, Option<String>)
    where
        Req: IntoOp + prost::Message,
        Resp: FromOutput<<Req::Op as Op>::Output> + Clone + Send + Sync + 'static,
    {
        // The request as the log and the audit record show it, rendered only when one of them
        // will be written.
        let logged = tracing::enabled!(target: "csi_proxy::call", tracing::Level::DEBUG);
        let shown = (logged || audit.is_some()).then(|| crate::shown::request_json(name.0, name.1, &message));
        let join_key = principal.map(|principal| crate::join::Key {
            principal,
            service: name.0,
            method: name.1,
            request: message.encode_to_vec(),
        });
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
                return (Err(e), logged.then(|| shown.map(|j| j.to_string())).flatten());
            }
        };
        let text = logged.then(|| shown.as_ref().map(|j| j.to_string())).flatten();
        let audit = match self.authorize(name, &op, caller.as_deref(), audit).await {
            Ok(audit) => audit,
            Err(e) => return (Err(e), text),
        };
        // A rescan (every disk, step by step) is cheap to repeat and not joined.
        let join_key = join_key.filter(|_| !matches!(serial, Serial::EachDisk));
        let mut interest = None;
        if let Some(key) = join_key {
            // Until this call either gets the result of an identical one or is the one to run.
            loop {
                match self.0.joins.enter(key.clone()) {
                    Entered::Full => {
                        let e = Error::Unavailable(format!(
                            "{} identical {}.{} calls already wait for the one in flight; try again",
                            crate::join::MAX_WAITERS,
                            name.0,
                            name.1
                        ));
                        if let Some(audit) = &audit {
                            audit.refused(&e).await;
                        }
                        return (Err(e), text);
                    }
                    Entered::Joined(joined) => {
                        // It does nothing itself: the log says it waits, the audit trail has
                        // the call that ran.
                        if let Some(o) = &self.0.observer {
                            o.joined(name.0, name.1);
                        }
                        tracing::info!(target: "csi_proxy::call", service = name.0, method = name.1,
                            "an identical call is in flight; waiting for its result instead of running again");
                        match joined.result::<Result<Resp>>().await {
                            Some(result) => return (result, text),
                            // Its client left before any host work began: run it here.
                            None => continue,
                        }
                    }
                    Entered::First(first) => {
                        interest = Some(first);
                        break;
                    }
                }
            }
        }
        let end = match audit {
            None => None,
            Some(audit) => match audit.started(shown.unwrap_or_default()).await {
                Ok(end) => Some(end),
                Err(e) => return (Err(e), text),
            },
        };
        let pending = end.as_ref().map(|e| e.pending());
        let result = self.work::<Req::Op, Resp>(name, op, serial, pending, interest.as_ref()).await;
        if let Some(interest) = &interest {
            // For the calls waiting for it (the host work's thread may have done so already).
            interest.publish(result.clone());
        }
        if let Some(end) = end {
            end.finish(&result).await;
        }
        (result, text)
    }

    /// A dry run ([`crate::dry_run`]): the request read and validated as for [`Self::serve`],
    /// then the operation's plan made on a pool thread with the host's reading calls only. It
    /// joins nothing and takes no disk's turn. Answers the response's defaults with the plan, or
    /// the error the real call would answer.
    async fn dry_run<Req, Resp>(
        &self,
        name: Name,
        message: Req,
        audit: Option<CallAudit>,
        caller: Option<Arc<Caller>>,
    ) -> (Result<(Resp, Option<String>)>, Option<String>)
    where
        Req: IntoOp + prost::Message,
        Resp: Default,
    {
        let logged = tracing::enabled!(target: "csi_proxy::call", tracing::Level::DEBUG);
        let shown = (logged || audit.is_some()).then(|| crate::shown::request_json(name.0, name.1, &message));
        let text = logged.then(|| shown.as_ref().map(|j| j.to_string())).flatten();
        let prepared = catch_unwind(AssertUnwindSafe(|| -> Result<_> {
            let op = message.into_op()?;
            op.serial()?;
            Ok(op)
        }));
        let op = match prepared.unwrap_or_else(|p| Err(panicked(name, &payload_message(p.as_ref())))) {
            Ok(op) => op,
            Err(e) => {
                if let Some(audit) = &audit {
                    audit.refused(&e).await;
                }
                return (Err(e), text);
            }
        };
        // A dry run is judged as the real call would be: its plan is not for a caller who may
        // not make the call.
        let audit = match self.authorize(name, &op, caller.as_deref(), audit).await {
            Ok(audit) => audit,
            Err(e) => return (Err(e), text),
        };
        let end = match audit {
            None => None,
            Some(audit) => match audit.started(shown.unwrap_or_default()).await {
                Ok(end) => Some(end),
                Err(e) => return (Err(e), text),
            },
        };
        let ctx = self.clone();
        let plan = run_on(&self.0.pools.unlocked, None, None, move || {
            op.plan(&crate::dry_run::Look::new(ctx.hosts(), ctx.config()))
        })
        .await
        .unwrap_or_else(|why| Err(panicked(name, &why)));
        if let Some(end) = end {
            end.finish_plan(&plan).await;
        }
        (plan.map(|plan| (Resp::default(), Some(plan))), text)
    }

    /// The operation's host work, under the lock its `serial` names.
    /// With `joined`, the host work marks when it begins and publishes its result to the calls
    /// that joined this one as soon as it ends, whether this call's client is still there or not.
    async fn work<O, Resp>(
        &self,
        name: Name,
        op: O,
        serial: Serial,
        pending: Option<Arc<Pending>>,
        joined: Option<&Interest>,
    ) -> Result<Resp>
    where
        O: Op,
        Resp: FromOutput<O::Output> + Clone + Send + Sync + 'static,
    {
        let pools = &self.0.pools;
        let (pool, guard) = match serial {
            Serial::ReadOnly | Serial::OwnTurns => (&pools.unlocked, None),
            Serial::Disk(disk) => (&pools.locked, Some(self.locks().lock(Key::Disk(disk)).await)),
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
                        let lookup = move || ctx.hosts().volume.get_disk_number_from_volume_id(&volume);
                        run_on(&self.0.pools.unlocked, None, None, lookup).await.unwrap_or_else(|why| {
                            Err(Error::internal(format!("looking up the disk of a volume panicked ({why})")))
                        })
                    }
                };
                let host_follows = self.hosts().volume.finds_volumes_under_own_lock();
                (&pools.locked, Some(self.locks().lock_volume(&volume, host_follows, disk_of).await?))
            }
        };
        if op.quick() && guard.is_none() {
            if let Some(_slot) = self.0.inline.take() {
                // Runs to its end within this poll: a cancellation cannot land in the middle.
                let done = catch_unwind(AssertUnwindSafe(|| op.run(self).and_then(Resp::from_output)));
                return done.unwrap_or_else(|p| Err(panicked(name, &payload_message(p.as_ref()))));
            }
        }
        let ctx = self.clone();
        let publisher = joined.map(Interest::publisher);
        let done = run_on(pool, pending.clone(), joined.map(Interest::publisher), move || {
            let _held = guard;
            let Some(publisher) = publisher else { return op.run(&ctx).and_then(Resp::from_output) };
            // Published from here, for the calls that joined this one, even if its client left;
            // a panic too, as the error its caller would get.
            let run = || op.run(&ctx).and_then(Resp::from_output);
            let result = catch_unwind(AssertUnwindSafe(run))
                .unwrap_or_else(|p| Err(panicked(name, &payload_message(p.as_ref()))));
            publisher.publish(result.clone());
            result
        })
        .await;
        done.unwrap_or_else(|why| Err(panicked(name, &why)))
    }

    /// A rescan: `op`'s host-wide work holding no disk, then each disk's refresh in turn, under
    /// that disk's lock only, so a rescan queued behind a hung disk holds up no other disk. A
    /// failing step does not stop the others.
    async fn run_then_refresh<O, Resp>(&self, op: O) -> std::result::Result<Result<Resp>, Panicked>
    where
        O: Op,
        Resp: FromOutput<O::Output> + Send + 'static,
    {
        let pools = &self.0.pools;
        let (ctx, lister) = (self.clone(), self.clone());
        let rescan = async move { run_on(&pools.locked, None, None, move || op.run(&ctx)).await.map_err(Panicked) };
        let disks = async move {
            run_on(&pools.unlocked, None, None, move || lister.hosts().disk.disks_to_refresh()).await.map_err(Panicked)
        };
        let refresh = |disk| async move {
            let held = self.locks().lock(Key::Disk(disk)).await;
            let ctx = self.clone();
            run_on(&pools.locked, None, None, move || {
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

impl Context {
    /// The authorization policy's verdict on `op` for `caller` ([`crate::policy`]): the audit
    /// trail to go on with, or the PermissionDenied the call ends with (recorded as refused).
    /// Disks and volumes a rule names by serial number or location are looked up on a pool
    /// thread, with the host's reading calls.
    async fn authorize<O: Op>(
        &self,
        (service, method): Name,
        op: &O,
        caller: Option<&Caller>,
        audit: Option<CallAudit>,
    ) -> Result<Option<CallAudit>> {
        let Some(authorizer) = &self.0.authorizer else { return Ok(audit) };
        let args = op.args();
        let mut facts = crate::policy::Gathered::default();
        let verdict = loop {
            let verdict = authorizer.check(caller, service, method, &args, &facts);
            let wanted = facts.wanted();
            // Each pass may want more (a volume's disk, then that disk's serial); at most one
            // per argument.
            if wanted.is_empty() || facts.passes() > args.len() {
                break verdict;
            }
            let ctx = self.clone();
            facts = run_on(&self.0.pools.unlocked, None, None, move || Ok(facts.gather(ctx.hosts(), wanted)))
                .await
                .unwrap_or_else(|why| {
                    Err(Error::internal(format!("looking up disks for the policy panicked ({why})")))
                })?;
        };
        if let Verdict::Denied { why, .. } = &verdict {
            authorizer.report(caller, service, method, why);
        }
        match verdict {
            Verdict::Granted { .. } => Ok(audit),
            Verdict::Denied { why, enforced: false } => Ok(audit.map(|a| a.would_deny(&why))),
            Verdict::Denied { why, enforced: true } => {
                let e = Error::PermissionDenied(why);
                // A denial is recorded even for a read-only call, which the trail otherwise
                // leaves out: someone tried something the policy does not grant.
                let audit = audit.or_else(|| {
                    let writer = self.0.audit.clone()?;
                    let call = self.0.next_call.fetch_add(1, Ordering::Relaxed);
                    let peer = caller.map(|c| Arc::new(c.clone()));
                    Some(CallAudit::new(writer, call, peer, (service, method), Instant::now()))
                });
                if let Some(audit) = &audit {
                    audit.refused(&e).await;
                }
                Err(e)
            }
        }
    }
}

/// The principal a call is joined by: who connected (the uid on unix, the user SID on Windows,
/// else the process), as the transport's fair admission counts callers.
fn principal(caller: Option<&Caller>) -> String {
    match caller {
        Some(Caller { uid: Some(uid), .. }) => format!("uid {uid}"),
        Some(Caller { user: Some(sid), .. }) => format!("sid {sid}"),
        Some(Caller { pid: Some(pid), .. }) => format!("pid {pid}"),
        _ => "unknown".to_string(),
    }
}

/// The message of a panic in a rescan's step.
struct Panicked(String);

/// A duration as logged: milliseconds as a number, under a key ending in `_ms` (never `Debug`'s
/// `1.2ms` text, which log pipelines cannot compare), to the microsecond: one division of whole
/// microseconds, so the number prints as short as it is (`0.537`, not the `0.5375580000000001`
/// that seconds times 1000 can give).
pub fn ms(d: Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

#[cfg(test)]
mod ms_tests {
    use super::ms;
    use std::time::Duration;

    #[test]
    fn milliseconds_print_as_short_as_they_are() {
        for (nanos, shown) in
            [(537_558_000, "537.558"), (537_558, "0.537"), (9_410_000, "9.41"), (0, "0"), (1_000, "0.001")]
        {
            assert_eq!(ms(Duration::from_nanos(nanos)).to_string(), shown, "{nanos} ns");
        }
    }
}
