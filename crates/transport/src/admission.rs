//! Fair admission: who gets a connection slot when an endpoint (or the whole daemon) is full.
//!
//! Every open connection holds a slot, registered here with its endpoint, its caller's principal
//! ([`CallerKey`]), when it was accepted and its state (HTTP/2 handshake done, calls in flight).
//! While slots are free anyone may take one. When none is, the slots are shared max-min fairly
//! among the principals present: with `n` of them (the newcomer included) each is owed
//! `limit / n` ([`fair_share`]).
//! - A newcomer below its share takes the place of an idle connection of a principal above its
//!   share, the largest holder first: so the k-th caller is never locked out by k-1 others, and a
//!   caller at or below its share is never evicted to make room for anyone. (With more
//!   principals than slots no one is owed a slot; a newcomer then takes the place of an idle
//!   connection of any principal holding more than it does.)
//! - A newcomer at or above its share may only take the place of one of its own idle
//!   connections; otherwise it is refused ([`Refused::CallerShare`]).
//!
//! Only a connection with no call in flight is ever taken, and a call is in flight only once its
//! request has arrived (see [`crate::calls`]): a call whose HEADERS came but whose body does not
//! protects nothing. Of a principal's connections, one that never completed the HTTP/2 handshake
//! within [`SILENT_AFTER`] of its accept goes first, then the one idle longest, and last one
//! accepted so recently that its preface may still be unread in the socket's buffer (the accept
//! loop can run ahead of a new connection's task). A connection that shook hands is told with
//! GOAWAY, so a gRPC client reconnects for its next call instead of failing one.
//!
//! A principal is the uid on unix (`SO_PEERCRED`), the user SID on Windows, or the process when
//! the SID cannot be read: a user starting many processes is still one principal.
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

/// What each of `principals` principals is owed of `limit` slots (or calls) when they contend
/// for all of them: an equal part, rounded down, and at least one.
pub fn fair_share(limit: usize, principals: usize) -> usize {
    (limit / principals.max(1)).max(1)
}

/// How long a new connection may take to show its handshake before it counts as silent: its
/// bytes may be in the socket's buffer while its task has not run yet.
pub const SILENT_AFTER: Duration = Duration::from_millis(500);

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
    /// Its principal holds its fair share and none of its connections is idle.
    CallerShare,
    /// The endpoint is full and every connection of the principals above their share has a call
    /// in flight.
    EndpointFull,
    /// The daemon is full and every connection of the principals above their share has a call in
    /// flight.
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
    accepted: tokio::time::Instant,
    conn: Arc<ConnShared>,
}

impl Entry {
    /// Where this connection stands in its principal's line to be taken (lowest first), or
    /// `None` while it has a call in flight: silent ones, then the longest idle, then the young
    /// ones whose handshake may be waiting in the socket's buffer.
    fn rank(&self, now: tokio::time::Instant) -> Option<(u8, tokio::time::Instant)> {
        let idle = self.conn.in_flight.idle_since()?;
        if self.conn.handshake_done.load(Ordering::Acquire) {
            Some((1, idle))
        } else if now.saturating_duration_since(self.accepted) >= SILENT_AFTER {
            Some((0, self.accepted))
        } else {
            Some((2, self.accepted))
        }
    }
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
        let here = table.entries.values().filter(|e| *e.endpoint == **endpoint).count();
        let endpoint_full = here >= self.per_endpoint;
        if endpoint_full || table.entries.len() >= self.total {
            // The contest is over this endpoint's slots when it is full (a slot taken here frees
            // one of the daemon's too), else over the daemon's.
            let (scope, limit) = if endpoint_full { (Some(endpoint), self.per_endpoint) } else { (None, self.total) };
            let chosen = table.victim(scope, &key, limit);
            let (id, handshake) = match chosen {
                Ok(v) => v,
                Err(over_share) => {
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
                }
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
        let accepted = tokio::time::Instant::now();
        table.entries.insert(id, Entry { endpoint: endpoint.clone(), key, accepted, conn: conn.clone() });
        drop(table);
        if let Some(o) = observer() {
            o.opened(endpoint);
        }
        Ok(Slot { admission: self.clone(), id, endpoint: endpoint.clone(), conn })
    }
}

impl Table {
    /// The connection to take for a newcomer of `key` among the full `limit` slots of `scope`
    /// (one endpoint, or all): its id and whether it shook hands. `Err(true)` if `key` holds its
    /// fair share and has no idle connection of its own, `Err(false)` if it is below its share
    /// but every principal above theirs is busy.
    fn victim(&self, scope: Option<&Arc<str>>, key: &CallerKey, limit: usize) -> Result<(u64, bool), bool> {
        let in_scope = |e: &Entry| scope.is_none_or(|ep| *e.endpoint == **ep);
        let mut held: HashMap<&CallerKey, usize> = HashMap::new();
        for e in self.entries.values().filter(|e| in_scope(e)) {
            *held.entry(&e.key).or_default() += 1;
        }
        let mine = held.get(key).copied().unwrap_or(0);
        let principals = held.len() + usize::from(mine == 0);
        let fair = fair_share(limit, principals);
        let over_share = mine >= fair;
        // At or above its share a principal only gives up its own; below, it takes from those
        // above theirs, the largest holder first (who keep at least their share, so no two
        // principals take the same slot back and forth). With more principals than slots no
        // one can be owed one: the newcomer then takes from anyone holding more than it does.
        let crowded = principals > limit;
        let above = |k: &CallerKey| held[k] > fair || (crowded && held[k] > mine);
        let now = tokio::time::Instant::now();
        self.entries
            .iter()
            .filter(|(_, e)| in_scope(e))
            .filter(|(_, e)| if over_share { e.key == *key } else { above(&e.key) })
            .filter_map(|(id, e)| {
                let rank = e.rank(now)?;
                Some(((std::cmp::Reverse(held[&e.key]), rank), (*id, e.conn.handshake_done.load(Ordering::Acquire))))
            })
            .min_by_key(|(rank, _)| *rank)
            .map(|(_, v)| v)
            .ok_or(over_share)
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
                Refused::CallerShare => (
                    per_endpoint,
                    "a caller holding its fair share of the connections may only replace its own idle ones",
                ),
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
    async fn a_silent_connection_goes_first_then_the_longest_idle_then_a_young_one() {
        let a = Admission::new(3, 100);
        let e = ep("fs");
        let s1 = a.admit(&e, CallerKey::Uid(1)).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let s2 = a.admit(&e, CallerKey::Uid(2)).unwrap();
        tokio::time::advance(Duration::from_secs(1)).await;
        let s3 = a.admit(&e, CallerKey::Uid(3)).unwrap();
        tokio::time::advance(Duration::from_millis(100)).await;
        s1.conn.handshake_done.store(true, Ordering::Release);
        // More principals than slots: a newcomer takes from anyone. s3 is too young to count as
        // silent (its handshake may be in the socket's buffer); s2 never shook hands and is
        // silent: it goes before s1, although s1 is older.
        let s4 = a.admit(&e, CallerKey::Uid(4)).unwrap();
        assert!(futures_notified(&s2.conn));
        assert!(!futures_notified(&s1.conn) && !futures_notified(&s3.conn));
        // A call in flight protects s1; of s3 and s4, both young, the older goes.
        let call = s1.conn.in_flight.enter();
        tokio::time::advance(Duration::from_millis(100)).await;
        let _s5 = a.admit(&e, CallerKey::Uid(5)).unwrap();
        assert!(futures_notified(&s3.conn));
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(call);
        s4.conn.handshake_done.store(true, Ordering::Release);
        _s5.conn.handshake_done.store(true, Ordering::Release);
        // All shook hands and are idle: the one idle longest goes (s4, idle since its accept,
        // before s1's call ended; s5 came after it).
        let _s6 = a.admit(&e, CallerKey::Uid(6)).unwrap();
        assert!(futures_notified(&s4.conn));
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

    /// A principal alone may take every slot; a newcomer takes one back from it, and the hog,
    /// now above its share, can only replace its own idle connections, never the newcomer's.
    #[tokio::test(start_paused = true)]
    async fn a_newcomer_takes_from_the_principal_above_its_share_and_keeps_it() {
        let a = Admission::new(4, 100);
        let e = ep("fs");
        let hog: Vec<_> = (0..4).map(|_| a.admit(&e, CallerKey::Uid(65534)).unwrap()).collect();
        tokio::time::advance(Duration::from_secs(1)).await;
        let d1 = a.admit(&e, CallerKey::Uid(0)).unwrap();
        assert_eq!(hog.iter().filter(|s| futures_notified(&s.conn)).count(), 1);
        for _ in 0..20 {
            let _churn = a.admit(&e, CallerKey::Uid(65534)).unwrap();
            tokio::time::advance(Duration::from_secs(1)).await;
        }
        assert!(!futures_notified(&d1.conn));
        // The newcomer, below its share of two, takes a second slot from the hog.
        let _d2 = a.admit(&e, CallerKey::Uid(0)).unwrap();
        assert!(!futures_notified(&d1.conn));
    }

    /// 1, 2, 3 and 10 attacking principals holding every slot with idle, silent and busy
    /// connections and churning: a victim always gets in, and its connection is never taken.
    #[tokio::test(start_paused = true)]
    async fn the_kth_caller_is_never_locked_out_or_evicted_by_the_others() {
        for attackers in [1u32, 2, 3, 10] {
            let a = Admission::new(64, 100_000);
            let e = ep("fs");
            let mut held = Vec::new();
            let mut busy = Vec::new();
            // Round-robin until every slot is taken: every third connection with a call in
            // flight, every third one silent, the rest idle after their handshake.
            for i in 0..64u32 {
                let key = CallerKey::Uid(1000 + i % attackers);
                let Ok(s) = a.admit(&e, key) else { continue };
                match i % 3 {
                    0 => busy.push(s.conn.in_flight.enter()),
                    1 => {}
                    _ => s.conn.handshake_done.store(true, Ordering::Release),
                }
                held.push(s);
            }
            tokio::time::advance(Duration::from_secs(1)).await;
            let victim =
                a.admit(&e, CallerKey::Uid(0)).unwrap_or_else(|r| panic!("{attackers}: victim refused: {r:?}"));
            victim.conn.handshake_done.store(true, Ordering::Release);
            for i in 0..500u32 {
                let _ = a.admit(&e, CallerKey::Uid(1000 + i % attackers));
                tokio::time::advance(Duration::from_millis(10)).await;
            }
            assert!(!futures_notified(&victim.conn), "{attackers}: the victim's connection was taken");
            let fresh = a.admit(&e, CallerKey::Uid(0));
            assert!(fresh.is_ok(), "{attackers}: the victim's second connection was refused");
        }
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
        assert_eq!((fair_share(256, 2), fair_share(256, 3), fair_share(3, 10), fair_share(1, 0)), (128, 85, 1, 1));
    }

    /// Whether `conn` was told to go (consumes the notification).
    fn futures_notified(conn: &ConnShared) -> bool {
        let n = conn.evicted.notified();
        tokio::pin!(n);
        let waker = std::task::Waker::noop();
        std::future::Future::poll(n, &mut std::task::Context::from_waker(waker)).is_ready()
    }
}
