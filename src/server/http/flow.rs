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
//! A connection is stalled while a piece read for it waits unwritten,
//! counted from the oldest such piece: its other streams' progress does
//! not hide it. It is closed ([`Flow::closed`]):
//! - when it has been stalled for `limits.send_timeout_secs` (a client
//!   that stopped reading, an HTTP/2 stream whose flow-control window
//!   stays shut);
//! - under pressure, once stalled for [`MIN_STALL`]: a response waiting
//!   for the budget closes, every [`EVICT_AFTER`], every such connection
//!   (under pressure a client must take a piece, 64 KiB then, a second),
//!   and a request waiting for a connection slot closes the one stalled
//!   longest, or idle between requests longest (never one past the slots:
//!   that frees none). Slow clients then cannot keep a good one waiting
//!   for long. A piece charged and still being read (its component
//!   checked, an object's GET under way) does not count.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus::{IntCounterVec, IntGauge, Registry};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::server::config::LimitsConfig;
use crate::server::families::{counter_vec, gauge, register};
use crate::server::store::source::holding;
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
            "HTTP connections the daemon closed for holding a piece of a response unwritten past limits.send_timeout_secs (send_timeout), or as stalled under pressure (budget, slots).",
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
    /// `past`: a connection accepted past the slots.
    pub(crate) fn open(self: &Arc<Self>, past: bool) -> Arc<Flow> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let flow = Arc::new(Flow {
            id,
            flows: Arc::clone(self),
            window: Arc::new(Semaphore::new(self.window_kib as usize)),
            busy: AtomicUsize::new(0),
            since: AtomicU64::new(self.now()),
            cut: Notify::new(),
            cut_for: OnceLock::new(),
            out: Mutex::new(BTreeMap::new()),
            past,
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
    /// none, closes the stalled connections every [`EVICT_AFTER`].
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
                // One place in the queue, kept while it waits: the
                // stalled are closed beside it, every EVICT_AFTER.
                let wait = Arc::clone(&self.budget).acquire_many_owned(want);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        p = &mut wait => break p.ok(),
                        () = tokio::time::sleep(EVICT_AFTER) => {
                            self.close_stalled(Pressure::Budget);
                        }
                    }
                }
            }
        };
        self.held.add(i64::try_from(bytes).unwrap_or(i64::MAX));
        Charge {
            flow: Arc::clone(flow),
            bytes,
            out_at: None,
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
        // Taken out under the lock, judged after it: the last reference
        // to a flow may be one of these, and a flow's drop takes the lock.
        let open: Vec<Arc<Flow>> = {
            let mut open = self.lock();
            open.retain(|_, f| f.strong_count() > 0);
            open.values().filter_map(Weak::upgrade).collect()
        };
        let mut stalled: Vec<(u64, Arc<Flow>)> = open
            .into_iter()
            .filter_map(|f| Some((f.stalled_since(pressure)?, f)))
            .filter(|(since, _)| now.saturating_sub(*since) >= stall)
            .collect();
        if pressure == Pressure::Slots {
            stalled.sort_by_key(|(since, _)| *since);
            stalled.truncate(1);
        }
        let stalled: Vec<Arc<Flow>> = stalled.into_iter().map(|(_, f)| f).collect();
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
    /// Requests in hand (read, and their response not yet all written).
    busy: AtomicUsize,
    /// When a request last began or ended, in [`Flows::now`]'s
    /// milliseconds: how long it has been idle, when none is in hand.
    since: AtomicU64,
    /// The pieces read and not yet written, by when they were read (how
    /// many at each millisecond): the oldest says how long the connection
    /// has not taken what it was handed, whatever its other streams do.
    out: Mutex<BTreeMap<u64, u32>>,
    /// Whether it was accepted past the slots (closing it frees none).
    past: bool,
    cut: Notify,
    /// Why it was closed, once it is.
    cut_for: OnceLock<&'static str>,
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

    fn out(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u32>> {
        self.out
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When the oldest piece it was handed and has not written was read.
    fn oldest_out(&self) -> Option<u64> {
        self.out().keys().next().copied()
    }

    fn touch(&self) {
        self.since.store(self.flows.now(), Ordering::Relaxed);
    }

    /// Since when it has been one to close for `pressure`, if it is: it
    /// holds a piece it has not written (since that piece was read), or,
    /// for a slot, it is idle between requests (since the last ended).
    /// How long is the caller's to judge.
    fn stalled_since(&self, pressure: Pressure) -> Option<u64> {
        if self.cut_for.get().is_some() {
            return None;
        }
        let held = self.oldest_out();
        match pressure {
            Pressure::Budget => held,
            Pressure::Slots if self.past => None,
            Pressure::Slots => {
                let idle = (self.busy.load(Ordering::Relaxed) == 0).then(|| self.since());
                match (held, idle) {
                    (Some(h), Some(i)) => Some(h.min(i)),
                    (h, i) => h.or(i),
                }
            }
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

    /// Resolves when the connection is to be closed: the reason. A piece
    /// read for it has waited `limits.send_timeout_secs` unwritten, or it
    /// was stalled under pressure.
    pub(crate) async fn closed(&self) -> &'static str {
        let timeout = self.flows.send_timeout;
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let stalled = async {
            loop {
                let wait = match self.oldest_out() {
                    Some(at) => {
                        let quiet = self.flows.now().saturating_sub(at);
                        if quiet >= timeout_ms {
                            return;
                        }
                        Duration::from_millis(timeout_ms.saturating_sub(quiet).max(1))
                    }
                    None => timeout,
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
    /// When its piece was read, once it is ([`Charge::hold`]).
    out_at: Option<u64>,
    _window: Option<OwnedSemaphorePermit>,
    _budget: Option<OwnedSemaphorePermit>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        if let Some(at) = self.out_at {
            let mut out = self.flow.out();
            if let Some(n) = out.get_mut(&at) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    out.remove(&at);
                }
            }
        }
        self.flow
            .flows
            .held
            .sub(i64::try_from(self.bytes).unwrap_or(i64::MAX));
        self.flow.touch();
    }
}

impl Charge {
    /// `bytes`, read now, holding this charge until the last of them is
    /// dropped; from now on they count as handed to the connection.
    pub(crate) fn hold(mut self, bytes: Bytes) -> Bytes {
        let at = self.flow.flows.now();
        *self.flow.out().entry(at).or_insert(0) += 1;
        self.out_at = Some(at);
        holding(bytes, self)
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
        let other = f.open(false);
        let some = f.charge(&other, 32 << 20, 1).await;
        assert_eq!(f.piece(), half, "half a window while most is free");
        drop((some, other));
        let flow = f.open(false);
        let mut held = Vec::new();
        // Other connections' charges, until 1 MiB is left.
        while f.budget.available_permits() > 1024 {
            let other = f.open(false);
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
        let flow = f.open(false);
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
        let piece = || Bytes::from(vec![0u8; 64 << 10]);
        let (busy, old, new, reading) =
            (f.open(false), f.open(false), f.open(false), f.open(false));
        // Busy, holding nothing yet: never closed.
        let _busy = busy.begin();
        let _asked = old.begin();
        let old_piece = f.charge(&old, 64 << 10, 1).await.hold(piece());
        tokio::time::sleep(Duration::from_millis(20)).await;
        let _asked_later = new.begin();
        let new_piece = f.charge(&new, 64 << 10, 1).await.hold(piece());
        // Charged, its piece still being read: not stalled.
        let _reading = f.charge(&reading, 64 << 10, 1).await;
        assert_eq!(
            f.close_stalled_for(Pressure::Budget, Duration::from_millis(10)),
            1
        );
        let cut = tokio::time::timeout(Duration::from_secs(1), old.closed()).await;
        assert_eq!(cut.ok(), Some("budget"));
        // Searches are a few milliseconds apart at least.
        assert_eq!(f.close_stalled_for(Pressure::Budget, Duration::ZERO), 0);
        tokio::time::sleep(CLOSE_EVERY * 2).await;
        assert_eq!(f.close_stalled_for(Pressure::Budget, Duration::ZERO), 1);
        // A piece written (dropped): nothing held, and idle between
        // requests once its request ends: closed for a slot, not for the
        // budget; one past the slots never for a slot.
        drop((old_piece, new_piece, _busy, _asked, _asked_later, _reading));
        let past = f.open(true);
        tokio::time::sleep(CLOSE_EVERY * 2).await;
        assert_eq!(f.close_stalled_for(Pressure::Budget, Duration::ZERO), 0);
        assert_eq!(f.close_stalled_for(Pressure::Slots, Duration::ZERO), 1);
        assert_eq!(f.closed.with_label_values(&["budget"]).get(), 2);
        assert_eq!(f.closed.with_label_values(&["slots"]).get(), 1);
        assert!(past.cut_for.get().is_none());
    }

    /// Another stream's progress does not hide a piece held: the send
    /// timeout counts from the oldest piece not written.
    #[tokio::test]
    async fn the_oldest_piece_held_sets_the_send_timeout() {
        let f = Flows::new(&LimitsConfig {
            send_timeout_secs: 1,
            ..LimitsConfig::default()
        });
        let flow = f.open(false);
        let _stuck = f
            .charge(&flow, 64 << 10, 1)
            .await
            .hold(Bytes::from(vec![1u8; 10]));
        let busy = async {
            loop {
                // Requests begin and end, pieces are written, all the time.
                let _req = flow.begin();
                drop(f.charge(&flow, 64 << 10, 1).await.hold(Bytes::new()));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        let cut = tokio::select! {
            r = flow.closed() => Some(r),
            () = busy => None,
            () = tokio::time::sleep(Duration::from_secs(5)) => None,
        };
        assert_eq!(cut, Some("send_timeout"));
    }
}
