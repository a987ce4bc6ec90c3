//! The memory HTTP response bodies hold, and the connections holding it.
//!
//! Every piece of a file read for a response is charged, from the read
//! until its connection has written it out (hyper drops it), to a
//! daemon-wide budget (`limits.body_memory_bytes`) and to its connection's
//! window (`limits.body_window_bytes`, which an HTTP/2 connection's
//! streams share). A client that does not read holds at most its window;
//! a response whose connection or the daemon has no room waits before it
//! reads, instead of growing the daemon. Pieces shrink as the budget
//! fills ([`Flows::piece`]), so that many slow clients hold less each.
//!
//! A connection is closed ([`Flow::closed`]):
//! - when it has held response bytes for `limits.send_timeout_secs`
//!   without sending a piece (a client that stopped reading, an HTTP/2
//!   stream whose flow-control window stays shut);
//! - under pressure, when it has gone [`MIN_STALL`] without progress: a
//!   response that waited [`EVICT_AFTER`] for the budget closes every
//!   connection that has held bytes that long without sending a piece
//!   (under pressure a client must take a piece, 64 KiB then, a second),
//!   and a request waiting for a connection slot closes the one stalled
//!   longest, or idle between requests longest. Slow clients then cannot
//!   keep a good one waiting for long.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus::{IntCounterVec, IntGauge, Registry};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::server::config::LimitsConfig;
use crate::server::families::{counter_vec, gauge, register};
use crate::server::store::READ_CHUNK;

/// How long a response waits for the budget before it closes the
/// stalled connections (and again after each such search).
pub(crate) const EVICT_AFTER: Duration = Duration::from_millis(100);

/// The least time without progress that makes a connection one to close
/// under pressure.
pub(crate) const MIN_STALL: Duration = Duration::from_secs(1);

/// The least time between two searches for a connection to close,
/// daemon-wide: thousands of waiters each searching every
/// [`EVICT_AFTER`] would otherwise keep the workers scanning.
const CLOSE_EVERY: Duration = Duration::from_millis(5);

/// The smallest piece a response reads, however full the budget.
const MIN_PIECE: u64 = 64 << 10;

/// Daemon-wide: the budget, and every open connection's flow.
#[derive(Debug)]
pub(crate) struct Flows {
    /// The budget, in KiB permits.
    budget: Arc<Semaphore>,
    budget_kib: u32,
    window_kib: u32,
    send_timeout: Duration,
    epoch: Instant,
    open: Mutex<HashMap<u64, Weak<Flow>>>,
    next_id: AtomicU64,
    /// When the last search for connections to close began, for each
    /// kind of [`Pressure`].
    last_search: [AtomicU64; 2],
    held: IntGauge,
    closed: IntCounterVec,
}

/// Why a connection was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pressure {
    /// A response waited for the budget: close those holding bytes.
    Budget = 0,
    /// A request waited for a connection slot: close one holding bytes,
    /// or one idle between requests.
    Slots = 1,
}

impl Pressure {
    fn label(self) -> &'static str {
        match self {
            Pressure::Budget => "budget",
            Pressure::Slots => "slots",
        }
    }
}

fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX)
}

impl Flows {
    pub(crate) fn new(limits: &LimitsConfig) -> Arc<Flows> {
        let window_kib = kib(limits.body_window_bytes.max(MIN_PIECE));
        let budget_kib = kib(limits.body_memory_bytes).max(window_kib);
        let closed = counter_vec(
            "ztserve_http_connections_closed_total",
            "HTTP connections the daemon closed for holding response bytes without sending them (send_timeout), or as the most stalled under pressure (budget, slots).",
            &["reason"],
        );
        // Every reason shows, at 0, from the start.
        for reason in ["send_timeout", "budget", "slots"] {
            closed.with_label_values(&[reason]).reset();
        }
        Arc::new(Flows {
            budget: Arc::new(Semaphore::new(budget_kib as usize)),
            budget_kib,
            window_kib,
            send_timeout: Duration::from_secs(limits.send_timeout_secs.max(1)),
            epoch: Instant::now(),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            last_search: [AtomicU64::new(0), AtomicU64::new(0)],
            held: gauge(
                "ztserve_http_body_bytes_held",
                "Bytes read for HTTP responses and not yet written to their connections (limits.body_memory_bytes bounds it).",
            ),
            closed,
        })
    }

    /// Registers the `ztserve_http_body_*` and connection families.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.held, &self.closed])
    }

    /// A new connection's flow, registered until it is dropped.
    pub(crate) fn open(self: &Arc<Self>) -> Arc<Flow> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let flow = Arc::new(Flow {
            id,
            flows: Arc::clone(self),
            window: Arc::new(Semaphore::new(self.window_kib as usize)),
            held: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
            since: AtomicU64::new(self.now()),
            cut: Notify::new(),
            cut_for: OnceLock::new(),
            waiting: AtomicUsize::new(0),
        });
        self.lock().insert(id, Arc::downgrade(&flow));
        flow
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<Flow>>> {
        self.open
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Milliseconds since the daemon started.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Bytes a response reads at once: a window's half while the budget
    /// is mostly free, less as it fills (a 128th of what is free, a power
    /// of two, at least 64 KiB), at most [`READ_CHUNK`].
    pub(crate) fn piece(&self) -> u64 {
        let free = (self.budget.available_permits() as u64) << 10;
        let most = (u64::from(self.window_kib) << 9).clamp(MIN_PIECE, READ_CHUNK);
        let share = (free / 128).max(MIN_PIECE);
        // The largest power of two not above the share.
        let share = 1u64 << share.ilog2();
        share.clamp(MIN_PIECE, most)
    }

    /// Charges `bytes` (a piece about to be read) to `flow`'s window (at
    /// most `1/ahead` of it: an object's pieces are read `ahead` at once)
    /// and to the budget, waiting for room in each; while the budget has
    /// none, closes the most stalled connection every [`EVICT_AFTER`].
    pub(crate) async fn charge(&self, flow: &Arc<Flow>, bytes: u64, ahead: usize) -> Charge {
        let share = self.window_kib / u32::try_from(ahead.max(1)).unwrap_or(u32::MAX);
        let want = kib(bytes).max(1);
        let window = Arc::clone(&flow.window)
            .acquire_many_owned(want.min(share.max(1)))
            .await
            .ok();
        let want = want.min(self.budget_kib);
        let budget = match Arc::clone(&self.budget).try_acquire_many_owned(want) {
            Ok(p) => Some(p),
            Err(_) => {
                let _waiting = Waiting::on(flow);
                loop {
                    let wait = Arc::clone(&self.budget).acquire_many_owned(want);
                    match tokio::time::timeout(EVICT_AFTER, wait).await {
                        Ok(p) => break p.ok(),
                        Err(_) => self.close_stalled(Pressure::Budget),
                    };
                }
            }
        };
        flow.held.fetch_add(bytes, Ordering::Relaxed);
        self.held.add(i64::try_from(bytes).unwrap_or(i64::MAX));
        Charge {
            flow: Arc::clone(flow),
            bytes,
            _window: window,
            _budget: budget,
        }
    }

    /// Under `pressure`, closes the connections that have gone at least
    /// [`MIN_STALL`] without progress: for the budget, every one holding
    /// response bytes it has not sent (their bytes go to the responses
    /// waiting, oldest first); for a slot, the one stalled longest of
    /// those, or of those idle between requests. At most one search per
    /// [`CLOSE_EVERY`] for each kind of pressure. How many it closed.
    pub(crate) fn close_stalled(&self, pressure: Pressure) -> usize {
        self.close_stalled_for(pressure, MIN_STALL)
    }

    fn close_stalled_for(&self, pressure: Pressure, least: Duration) -> usize {
        let now = self.now();
        let last_search = &self.last_search[pressure as usize];
        let last = last_search.load(Ordering::Relaxed);
        let every = u64::try_from(CLOSE_EVERY.as_millis()).unwrap_or(u64::MAX);
        // 0: none yet.
        let turn = (last == 0 || now >= last.saturating_add(every))
            && last_search
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok();
        if !turn {
            return 0;
        }
        let stall = u64::try_from(least.as_millis()).unwrap_or(u64::MAX);
        let mut stalled: Vec<Arc<Flow>> = {
            let mut open = self.lock();
            open.retain(|_, f| f.strong_count() > 0);
            open.values()
                .filter_map(Weak::upgrade)
                .filter(|f| f.closable(pressure) && now.saturating_sub(f.since()) >= stall)
                .collect()
        };
        if pressure == Pressure::Slots {
            stalled.sort_by_key(|f| f.since());
            stalled.truncate(1);
        }
        for flow in &stalled {
            flow.close(pressure.label());
        }
        stalled.len()
    }
}

/// One connection's flow: its window, what it holds, and when it last
/// made progress.
#[derive(Debug)]
pub(crate) struct Flow {
    id: u64,
    flows: Arc<Flows>,
    /// The window, in KiB permits.
    window: Arc<Semaphore>,
    /// Bytes charged and not yet written.
    held: AtomicU64,
    /// Requests in hand (read, and their response not yet all written).
    busy: AtomicUsize,
    /// When it last made progress (a piece written, a request begun or
    /// ended), in [`Flows::now`]'s milliseconds.
    since: AtomicU64,
    cut: Notify,
    /// Why it was closed, once it is.
    cut_for: OnceLock<&'static str>,
    /// Its responses waiting for the budget.
    waiting: AtomicUsize,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.flows.lock().remove(&self.id);
    }
}

impl Flow {
    fn since(&self) -> u64 {
        self.since.load(Ordering::Relaxed)
    }

    fn touch(&self) {
        self.since.store(self.flows.now(), Ordering::Relaxed);
    }

    /// Whether it is one to close for `pressure` (how long it has been so
    /// is the caller's to judge).
    fn closable(&self, pressure: Pressure) -> bool {
        if self.cut_for.get().is_some() {
            return false;
        }
        let holds = self.held.load(Ordering::Relaxed) > 0;
        let idle = self.busy.load(Ordering::Relaxed) == 0;
        match pressure {
            Pressure::Budget => holds && self.waiting.load(Ordering::Relaxed) == 0,
            Pressure::Slots => holds || idle,
        }
    }

    fn close(&self, reason: &'static str) {
        if self.cut_for.set(reason).is_ok() {
            self.flows.closed.with_label_values(&[reason]).inc();
        }
        self.cut.notify_one();
    }

    /// A request begins; it is in hand until the returned guard drops
    /// (with its response's body).
    pub(crate) fn begin(self: &Arc<Self>) -> Busy {
        self.busy.fetch_add(1, Ordering::Relaxed);
        self.touch();
        Busy(Arc::clone(self))
    }

    /// Resolves when the connection is to be closed: the reason. It has
    /// held response bytes for `limits.send_timeout_secs` without sending
    /// a piece, or it was the most stalled under pressure.
    pub(crate) async fn closed(&self) -> &'static str {
        let timeout = self.flows.send_timeout;
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let stalled = async {
            loop {
                let quiet = self.flows.now().saturating_sub(self.since());
                let holds = self.held.load(Ordering::Relaxed) > 0;
                if holds && quiet >= timeout_ms {
                    return;
                }
                let left = timeout_ms.saturating_sub(quiet).max(1);
                let wait = match holds {
                    true => Duration::from_millis(left),
                    false => timeout,
                };
                tokio::time::sleep(wait).await;
            }
        };
        tokio::select! {
            () = self.cut.notified() => {}
            () = stalled => self.close("send_timeout"),
        }
        self.cut_for.get().copied().unwrap_or("send_timeout")
    }
}

/// A response of a flow waiting for the budget, until dropped.
struct Waiting<'a>(&'a Flow);

impl<'a> Waiting<'a> {
    fn on(flow: &'a Flow) -> Waiting<'a> {
        flow.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(flow)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A request in hand ([`Flow::begin`]).
#[derive(Debug)]
pub(crate) struct Busy(Arc<Flow>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.busy.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// A piece's charge ([`Flows::charge`]), given back when the piece is
/// written out (the last [`Bytes`] of it dropped).
#[derive(Debug)]
pub(crate) struct Charge {
    flow: Arc<Flow>,
    bytes: u64,
    _window: Option<OwnedSemaphorePermit>,
    _budget: Option<OwnedSemaphorePermit>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.flow.held.fetch_sub(self.bytes, Ordering::Relaxed);
        self.flow
            .flows
            .held
            .sub(i64::try_from(self.bytes).unwrap_or(i64::MAX));
        self.flow.touch();
    }
}

impl Charge {
    /// `bytes`, holding this charge until the last of them is dropped.
    pub(crate) fn hold(self, bytes: Bytes) -> Bytes {
        Bytes::from_owner(Charged {
            bytes,
            _charge: self,
        })
    }
}

struct Charged {
    bytes: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flows(budget: u64, window: u64) -> Arc<Flows> {
        Flows::new(&LimitsConfig {
            body_memory_bytes: budget,
            body_window_bytes: window,
            ..LimitsConfig::default()
        })
    }

    #[tokio::test]
    async fn pieces_shrink_as_the_budget_fills() {
        let f = flows(128 << 20, 1 << 20);
        let half = 512 << 10;
        assert_eq!(f.piece(), half, "half a window while the budget is free");
        let other = f.open();
        let some = f.charge(&other, 32 << 20, 1).await;
        assert_eq!(f.piece(), half, "half a window while most is free");
        drop((some, other));
        let flow = f.open();
        let mut held = Vec::new();
        // Other connections' charges, until 1 MiB is left.
        while f.budget.available_permits() > 1024 {
            let other = f.open();
            held.push((f.charge(&other, 1 << 20, 1).await, other));
        }
        assert_eq!(f.piece(), MIN_PIECE);
        drop(held);
        assert_eq!(f.piece(), half);
        drop(flow);
        assert!(f.lock().is_empty(), "a dropped flow stays registered");
    }

    #[tokio::test]
    async fn a_connection_holds_at_most_its_window() {
        let f = flows(64 << 20, 256 << 10);
        let flow = f.open();
        let first = f.charge(&flow, 256 << 10, 1).await;
        let second = f.charge(&flow, 64 << 10, 1);
        tokio::pin!(second);
        let waited = tokio::time::timeout(Duration::from_millis(50), &mut second).await;
        assert!(waited.is_err(), "a charge past the window did not wait");
        let bytes = first.hold(Bytes::from(vec![0u8; 256 << 10]));
        assert_eq!(f.held.get(), 256 << 10);
        drop(bytes);
        let second = tokio::time::timeout(Duration::from_secs(5), second).await;
        assert!(second.is_ok(), "the window was not given back");
        drop(second);
        assert_eq!(f.held.get(), 0);
    }

    #[tokio::test]
    async fn pressure_closes_stalled_connections() {
        let f = flows(64 << 20, 1 << 20);
        let (idle, old, new) = (f.open(), f.open(), f.open());
        // Busy, holding nothing: never closed.
        let _busy = idle.begin();
        let _asked = old.begin();
        let _old = f.charge(&old, 64 << 10, 1).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _asked_later = new.begin();
        let _new = f.charge(&new, 64 << 10, 1).await;
        assert_eq!(f.close_stalled_for(Pressure::Budget, Duration::ZERO), 2);
        let cut = tokio::time::timeout(Duration::from_secs(1), old.closed()).await;
        assert_eq!(cut.ok(), Some("budget"));
        // Searches are a few milliseconds apart at least.
        assert_eq!(f.close_stalled_for(Pressure::Budget, Duration::ZERO), 0);
        tokio::time::sleep(CLOSE_EVERY * 2).await;
        assert_eq!(f.close_stalled_for(Pressure::Budget, Duration::ZERO), 0);
        // Idle between requests: closed for a slot, not for the budget.
        drop((_busy, _asked, _asked_later, _old, _new));
        tokio::time::sleep(CLOSE_EVERY * 2).await;
        assert_eq!(f.close_stalled_for(Pressure::Budget, Duration::ZERO), 0);
        assert_eq!(f.close_stalled_for(Pressure::Slots, Duration::ZERO), 1);
        assert_eq!(f.closed.with_label_values(&["budget"]).get(), 2);
        assert_eq!(f.closed.with_label_values(&["slots"]).get(), 1);
    }
}
