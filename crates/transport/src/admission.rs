//! Fair admission: who gets a connection slot when an endpoint (or the whole daemon) is full.
//!
//! Every open connection holds a slot, registered here with its endpoint, its caller's principal
//! ([`CallerKey`]) and its state (HTTP/2 handshake done, calls in flight). A new connection that
//! finds no free slot takes one from a connection that has no call in flight: first one that never
//! completed the HTTP/2 handshake, then the one idle longest. A connection with a call in flight is
//! never taken. Without this, a caller holding every slot with connections that send nothing (and
//! refilling them every `-progress-timeout`) locked every other driver out.
//!
//! One principal may hold at most [`share`] (half, rounded up) of an endpoint's slots and of the
//! daemon's; beyond that its new connection can only take the place of one of its own idle ones.
//! Half because the contest that matters is between two principals, the drivers' and a
//! misbehaving one: each keeps at least half whatever the other does, and half of the default 256
//! per endpoint is still far above what the drivers of a node use (grpc-go multiplexes every call
//! of a client on one connection). A principal is the uid on unix (`SO_PEERCRED`), the user SID
//! on Windows, or the process when the SID cannot be read: a user starting many processes is
//! still one principal.
//!
//! Refusals and evictions are counted through the [`ConnectionObserver`] (the daemon's metrics)
//! and logged at most once per [`Reports::EVERY`] per kind, with the count since the last line.

use crate::conn::InFlight;
use csi_proxy_sync::LockExt;
use csi_proxy_wire::Caller;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::Notify;

/// The principal a connection is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CallerKey {
    Uid(u32),
    /// A Windows user SID, as text.
    Sid(String),
    /// A process whose user could not be read.
    Pid(u32),
    /// The OS said nothing about the client: all such connections share one principal.
    Unknown,
}

impl CallerKey {
    pub fn of(caller: &Caller) -> CallerKey {
        match (caller.uid, &caller.user, caller.pid) {
            (Some(uid), _, _) => CallerKey::Uid(uid),
            (None, Some(sid), _) => CallerKey::Sid(sid.clone()),
            (None, None, Some(pid)) => CallerKey::Pid(pid),
            (None, None, None) => CallerKey::Unknown,
        }
    }
}

/// The most slots of `limit` one principal may hold: half, rounded up (and at least one).
pub fn share(limit: usize) -> usize {
    limit.div_ceil(2).max(1)
}

/// Where refusals, evictions and cancelled calls are reported (the daemon counts them in its
/// metrics). `endpoint` is the pipe's or socket's name without directory and `.sock`; `reason` is
/// one of a few fixed words (see [`Refused`], [`Evicted`]).
pub trait ConnectionObserver: Send + Sync + 'static {
    fn refused(&self, endpoint: &str, reason: &'static str);
    fn evicted(&self, endpoint: &str, reason: &'static str);
    /// A call cancelled by the transport (its request did not arrive in time, or too many calls).
    fn cancelled(&self, endpoint: &str, reason: &'static str);
    /// A connection on `endpoint` was admitted (it holds a slot from now on).
    fn opened(&self, _endpoint: &str) {}
    /// A connection admitted on `endpoint` has closed; once per [`Self::opened`], evicted ones
    /// included (they stay open briefly after giving up their slot).
    fn closed(&self, _endpoint: &str) {}
}

static OBSERVER: OnceLock<Arc<dyn ConnectionObserver>> = OnceLock::new();

/// Sets the process's [`ConnectionObserver`]; false if one was already set. Process-wide because
/// the daemon serves one set of endpoints, and it keeps [`crate::ServeOptions`] a plain value.
pub fn set_connection_observer(observer: Arc<dyn ConnectionObserver>) -> bool {
    OBSERVER.set(observer).is_ok()
}

fn observer() -> Option<&'static Arc<dyn ConnectionObserver>> {
    OBSERVER.get()
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its principal holds its share and none of its connections is idle.
    CallerShare,
    /// The endpoint is full and every connection on it has a call in flight.
    EndpointFull,
    /// The daemon is full and every connection has a call in flight.
    TotalFull,
}

impl Refused {
    pub fn label(self) -> &'static str {
        match self {
            Refused::CallerShare => "caller_share",
            Refused::EndpointFull => "endpoint_full",
            Refused::TotalFull => "total_full",
        }
    }
}

/// Why a connection was closed to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evicted {
    /// It had not completed the HTTP/2 handshake.
    NoHandshake,
    /// It had no call in flight.
    Idle,
}

impl Evicted {
    pub fn label(self) -> &'static str {
        match self {
            Evicted::NoHandshake => "no_handshake",
            Evicted::Idle => "idle",
        }
    }
}

/// What the admission table knows of one open connection; shared with its task.
#[derive(Debug, Default)]
pub(crate) struct ConnShared {
    pub in_flight: InFlight,
    /// Set by the frame follower once the preface and the first frame have arrived.
    pub handshake_done: Arc<AtomicBool>,
    /// Notified when the connection's slot was given to a newer one: it must close.
    pub evicted: Notify,
}

#[derive(Debug)]
struct Entry {
    endpoint: Arc<str>,
    key: CallerKey,
    conn: Arc<ConnShared>,
}

/// The slots of one [`crate::serve`] or [`crate::serve_apis`].
#[derive(Debug)]
pub(crate) struct Admission {
    per_endpoint: usize,
    total: usize,
    table: Mutex<Table>,
    pub reports: Reports,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    entries: HashMap<u64, Entry>,
}

/// A connection's slot; dropping it frees the slot.
#[derive(Debug)]
pub(crate) struct Slot {
    admission: Arc<Admission>,
    id: u64,
    endpoint: Arc<str>,
    pub conn: Arc<ConnShared>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.admission.table.lock_ignoring_poison().entries.remove(&self.id);
        if let Some(o) = observer() {
            o.closed(&self.endpoint);
        }
    }
}

impl Admission {
    pub fn new(per_endpoint: usize, total: usize) -> Arc<Self> {
        Arc::new(Admission {
            per_endpoint: per_endpoint.max(1),
            total: total.max(1),
            table: Mutex::default(),
            reports: Reports::default(),
        })
    }

    /// A slot on `endpoint` for a connection of `key`, taken from an idle connection if there is
    /// no free one (see the module documentation).
    pub fn admit(self: &Arc<Self>, endpoint: &Arc<str>, key: CallerKey) -> Result<Slot, Refused> {
        let mut table = self.table.lock_ignoring_poison();
        let (mut here, mut mine_here, mut mine) = (0, 0, 0);
        for e in table.entries.values() {
            let (same_ep, same_key) = (*e.endpoint == **endpoint, e.key == key);
            here += usize::from(same_ep);
            mine_here += usize::from(same_ep && same_key);
            mine += usize::from(same_key);
        }
        // Counts never exceed the limits (each admission keeps them), so one eviction is enough.
        let over_share = mine_here >= share(self.per_endpoint) || mine >= share(self.total);
        let endpoint_full = here >= self.per_endpoint;
        let total_full = table.entries.len() >= self.total;
        if over_share || endpoint_full || total_full {
            let must_be_here = endpoint_full || mine_here >= share(self.per_endpoint);
            let victim = table
                .entries
                .iter()
                .filter(|(_, e)| !over_share || e.key == key)
                .filter(|(_, e)| !must_be_here || *e.endpoint == **endpoint)
                .filter_map(|(id, e)| {
                    let idle = e.conn.in_flight.idle_since()?;
                    Some(((e.conn.handshake_done.load(Ordering::Acquire), idle), *id))
                })
                .min()
                .map(|((handshake, _), id)| (id, handshake));
            let Some((id, handshake)) = victim else {
                let why = if over_share {
                    Refused::CallerShare
                } else if endpoint_full {
                    Refused::EndpointFull
                } else {
                    Refused::TotalFull
                };
                drop(table);
                self.reports.refused(endpoint, why, self.per_endpoint, self.total);
                return Err(why);
            };
            let gone = table.entries.remove(&id).expect("just found");
            drop(table);
            gone.conn.evicted.notify_one();
            let why = if handshake { Evicted::Idle } else { Evicted::NoHandshake };
            self.reports.evicted(&gone.endpoint, why);
            table = self.table.lock_ignoring_poison();
        }
        let id = table.next;
        table.next += 1;
        let conn = Arc::new(ConnShared::default());
        table.entries.insert(id, Entry { endpoint: endpoint.clone(), key, conn: conn.clone() });
        drop(table);
        if let Some(o) = observer() {
            o.opened(endpoint);
        }
        Ok(Slot { admission: self.clone(), id, endpoint: endpoint.clone(), conn })
    }
}

/// The label of an endpoint: its pipe's or socket's name, without directory and `.sock`.
pub(crate) fn endpoint_label(describe: &str) -> Arc<str> {
    let name = describe.rsplit(['/', '\\']).next().unwrap_or(describe);
    name.strip_suffix(".sock").unwrap_or(name).into()
}

/// Rate-limited log lines (the first at once, then at most one per [`Reports::EVERY`] with the
/// count since), and the observer's counters, for refusals, evictions and cancelled calls.
#[derive(Debug, Default)]
pub(crate) struct Reports {
    refused: Throttle,
    evicted: Throttle,
    cancelled: Throttle,
}

#[derive(Debug, Default)]
struct Throttle {
    count: AtomicU64,
    last_log: Mutex<Option<tokio::time::Instant>>,
}

impl Throttle {
    /// Counts one event; `Some(count since the last line)` when a line is due.
    fn tick(&self) -> Option<u64> {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.last_log.lock_ignoring_poison();
        let now = tokio::time::Instant::now();
        if last.is_none_or(|t| now - t >= Reports::EVERY) {
            *last = Some(now);
            self.count.store(0, Ordering::Relaxed);
            Some(n)
        } else {
            None
        }
    }
}

impl Reports {
    pub const EVERY: Duration = Duration::from_secs(10);

    pub fn refused(&self, endpoint: &str, why: Refused, per_endpoint: usize, total: usize) {
        if let Some(o) = observer() {
            o.refused(endpoint, why.label());
        }
        if let Some(n) = self.refused.tick() {
            let (limit, hint) = match why {
                Refused::CallerShare => (share(per_endpoint), "one caller may hold half of an endpoint's connections"),
                Refused::EndpointFull => (per_endpoint, "raise -max-connections-per-endpoint"),
                Refused::TotalFull => (total, "raise -max-connections"),
            };
            tracing::warn!(
                endpoint,
                reason = why.label(),
                limit,
                refused_since_last_report = n,
                "refusing a connection: no slot is free and every candidate has a call in flight ({hint})"
            );
        }
    }

    pub fn evicted(&self, endpoint: &str, why: Evicted) {
        if let Some(o) = observer() {
            o.evicted(endpoint, why.label());
        }
        if let Some(n) = self.evicted.tick() {
            tracing::warn!(
                endpoint,
                reason = why.label(),
                evicted_since_last_report = n,
                "closing an idle connection to make room for a new one (connection limit reached)"
            );
        }
    }

    pub fn cancelled(&self, endpoint: &str, reason: &'static str) {
        if let Some(o) = observer() {
            o.cancelled(endpoint, reason);
        }
        if let Some(n) = self.cancelled.tick() {
            tracing::warn!(endpoint, reason, cancelled_since_last_report = n, "cancelling a call");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(name: &str) -> Arc<str> {
        name.into()
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_connection_without_handshake_goes_first_then_the_longest_idle() {
        let a = Admission::new(3, 100);
        let e = ep("fs");
        let s1 = a.admit(&e, CallerKey::Uid(1)).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let s2 = a.admit(&e, CallerKey::Uid(2)).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let s3 = a.admit(&e, CallerKey::Uid(3)).unwrap();
        s1.conn.handshake_done.store(true, Ordering::Release);
        // s2 never shook hands: it goes before s1, although s1 is older.
        let _s4 = a.admit(&e, CallerKey::Uid(4)).unwrap();
        assert!(futures_notified(&s2.conn));
        assert!(!futures_notified(&s1.conn));
        // A call in flight protects s1; s3 (no handshake) goes next.
        let call = s1.conn.in_flight.enter();
        let _s5 = a.admit(&e, CallerKey::Uid(5)).unwrap();
        assert!(futures_notified(&s3.conn));
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(call);
        s1.conn.handshake_done.store(true, Ordering::Release);
        _s4.conn.handshake_done.store(true, Ordering::Release);
        _s5.conn.handshake_done.store(true, Ordering::Release);
        // All shook hands and are idle: the one idle longest goes (s4, idle since its accept,
        // before s1's call ended; s5 came after it).
        let _s6 = a.admit(&e, CallerKey::Uid(6)).unwrap();
        assert!(futures_notified(&_s4.conn));
    }

    #[tokio::test(start_paused = true)]
    async fn busy_connections_are_never_taken() {
        let a = Admission::new(2, 100);
        let e = ep("fs");
        let s1 = a.admit(&e, CallerKey::Uid(1)).unwrap();
        let s2 = a.admit(&e, CallerKey::Uid(2)).unwrap();
        let _c1 = s1.conn.in_flight.enter();
        let _c2 = s2.conn.in_flight.enter();
        assert_eq!(a.admit(&e, CallerKey::Uid(3)).unwrap_err(), Refused::EndpointFull);
        // Another endpoint is not full.
        a.admit(&ep("disk"), CallerKey::Uid(3)).unwrap();
        drop(s2);
        a.admit(&e, CallerKey::Uid(3)).unwrap();
    }

    /// One principal holding its half with calls in flight cannot take more, and cannot take
    /// anyone else's idle connection; another principal still gets in.
    #[tokio::test(start_paused = true)]
    async fn one_caller_holds_at_most_half_of_an_endpoint() {
        let a = Admission::new(4, 100);
        let e = ep("fs");
        let hog: Vec<_> = (0..2).map(|_| a.admit(&e, CallerKey::Uid(65534)).unwrap()).collect();
        let _busy: Vec<_> = hog.iter().map(|s| s.conn.in_flight.enter()).collect();
        assert_eq!(a.admit(&e, CallerKey::Uid(65534)).unwrap_err(), Refused::CallerShare);
        let d1 = a.admit(&e, CallerKey::Uid(0)).unwrap();
        let _d2 = a.admit(&e, CallerKey::Uid(0)).unwrap();
        // The hog cannot evict the drivers' idle connections.
        assert_eq!(a.admit(&e, CallerKey::Uid(65534)).unwrap_err(), Refused::CallerShare);
        assert!(!futures_notified(&d1.conn));
        // Over its share, a principal takes its own idle connection's place.
        let _d3 = a.admit(&e, CallerKey::Uid(0)).unwrap();
        assert!(futures_notified(&d1.conn));
    }

    #[tokio::test(start_paused = true)]
    async fn the_total_limit_evicts_across_endpoints() {
        let a = Admission::new(10, 2);
        let s1 = a.admit(&ep("a"), CallerKey::Uid(1)).unwrap();
        let _s2 = a.admit(&ep("b"), CallerKey::Uid(2)).unwrap();
        let _busy = _s2.conn.in_flight.enter();
        let _s3 = a.admit(&ep("c"), CallerKey::Uid(3)).unwrap();
        assert!(futures_notified(&s1.conn));
    }

    #[test]
    fn keys_and_labels() {
        let c = Caller { pid: Some(7), uid: Some(0), ..Caller::default() };
        assert_eq!(CallerKey::of(&c), CallerKey::Uid(0));
        let c = Caller { pid: Some(7), user: Some("S-1-5-18".into()), ..Caller::default() };
        assert_eq!(CallerKey::of(&c), CallerKey::Sid("S-1-5-18".into()));
        assert_eq!(CallerKey::of(&Caller { pid: Some(7), ..Caller::default() }), CallerKey::Pid(7));
        assert_eq!(CallerKey::of(&Caller::default()), CallerKey::Unknown);
        assert_eq!(&*endpoint_label("/run/csi-proxy/csi-proxy-filesystem-v1.sock"), "csi-proxy-filesystem-v1");
        assert_eq!(&*endpoint_label(r"\\.\pipe\csi-proxy-disk-v1"), "csi-proxy-disk-v1");
        assert_eq!((share(256), share(3), share(1)), (128, 2, 1));
    }

    /// Whether `conn` was told to go (consumes the notification).
    fn futures_notified(conn: &ConnShared) -> bool {
        let n = conn.evicted.notified();
        tokio::pin!(n);
        let waker = std::task::Waker::noop();
        std::future::Future::poll(n, &mut std::task::Context::from_waker(waker)).is_ready()
    }
}
