//! The ztp/1 send budget (`quic.send_budget_bytes`): component bytes read
//! for ztp/1 and not yet acknowledged by the clients, the whole daemon
//! together, and each connection's share of it.
//!
//! A chunk is charged from its read until quinn drops the last of its
//! bytes (the client acknowledged them, or the stream or connection went),
//! to the daemon's budget and to its connection's window: a quarter of
//! the budget (at least one read chunk, at most `quic.connection_window`),
//! so that one connection waits for its own acknowledgements past that,
//! never holding the whole budget.
//!
//! A client that stops acknowledging (paused, or gone without a word)
//! would otherwise keep its share until the stall timeout. So a chunk that
//! waits [`EVICT_AFTER`] for the daemon's budget closes, with `stalled`,
//! every connection that holds some of it and whose client has sent no
//! acknowledgement for [`MIN_STALL`] (and again after each such wait): a
//! few such clients cannot keep the others waiting for long. A slow
//! client that acknowledges what it receives is never closed for it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus::{IntCounter, Registry};
use quinn::{Connection, VarInt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use ztp_proto::Code;

use crate::server::families::{counter, register};

/// How long a chunk waits for the daemon's budget before it closes the
/// stalled connections (and again after each search).
pub(crate) const EVICT_AFTER: Duration = Duration::from_millis(100);

/// How long a client holding some of the budget must have acknowledged
/// nothing (and had no chunk charged) to be closed under pressure.
pub(crate) const MIN_STALL: Duration = Duration::from_secs(1);

/// The least time between two searches for stalled connections,
/// daemon-wide: many waiters each searching every [`EVICT_AFTER`] would
/// otherwise keep the workers counting acknowledgements.
const SEARCH_EVERY: Duration = Duration::from_millis(5);

/// The daemon's budget, and the connections holding it.
#[derive(Debug)]
pub(crate) struct SendBudget {
    /// KiB permits.
    total: Arc<Semaphore>,
    total_kib: u64,
    /// A connection's window, in KiB.
    window_kib: u32,
    conns: Mutex<Vec<Weak<ConnShare>>>,
    /// When the last search for stalled connections ran.
    searched: Mutex<Instant>,
    /// Connections closed as stalled.
    evicted: IntCounter,
}

/// One connection's part of the budget.
#[derive(Debug)]
pub(crate) struct ConnShare {
    budget: Arc<SendBudget>,
    window: Arc<Semaphore>,
    /// KiB held now.
    held: AtomicU64,
    conn: Connection,
    /// The client's acknowledgements as last counted, and when that count
    /// last moved or a chunk was last charged, whichever came later.
    acks: Mutex<(u64, Instant)>,
}

/// A chunk's charge to its connection, given back when dropped (with
/// the chunk's bytes: [`Charge::hold`]). Its charge to the daemon's
/// budget is a permit, held by the buffer the chunk is read into.
#[derive(Debug)]
pub(crate) struct Charge {
    _window: OwnedSemaphorePermit,
    share: Arc<ConnShare>,
    kib: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.share.held.fetch_sub(self.kib, Ordering::SeqCst);
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

/// Bytes holding their charge.
struct Charged {
    bytes: Bytes,
    _charge: Charge,
}

impl AsRef<[u8]> for Charged {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl SendBudget {
    /// A budget of `bytes` (at least `chunk`), each connection's window a
    /// quarter of it, at least `chunk` and at most `connection_window`.
    pub(crate) fn new(bytes: u64, chunk: u64, connection_window: u64) -> Arc<SendBudget> {
        let total_kib = bytes.max(chunk) >> 10;
        let window = (bytes / 4).min(connection_window).max(chunk) >> 10;
        Arc::new(SendBudget {
            total: Arc::new(Semaphore::new(
                usize::try_from(total_kib).unwrap_or(usize::MAX >> 4),
            )),
            total_kib,
            window_kib: u32::try_from(window).unwrap_or(u32::MAX),
            conns: Mutex::new(Vec::new()),
            searched: Mutex::new(Instant::now()),
            evicted: counter(
                "ztserve_quic_stalled_closed_total",
                "QUIC connections closed because their client acknowledged nothing for a second while holding send budget that other connections waited for.",
            ),
        })
    }

    /// Bytes held now, the whole daemon together.
    pub(crate) fn held(&self) -> u64 {
        let free = self.total.available_permits() as u64;
        self.total_kib.saturating_sub(free) << 10
    }

    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.evicted])
    }

    /// `conn`'s share, counted among the connections until dropped.
    pub(crate) fn join(self: &Arc<Self>, conn: &Connection) -> Arc<ConnShare> {
        let share = Arc::new(ConnShare {
            budget: Arc::clone(self),
            window: Arc::new(Semaphore::new(self.window_kib as usize)),
            held: AtomicU64::new(0),
            conn: conn.clone(),
            acks: Mutex::new((acks(conn), Instant::now())),
        });
        let mut conns = lock(&self.conns);
        conns.retain(|c| c.strong_count() > 0);
        conns.push(Arc::downgrade(&share));
        share
    }

    /// Closes every connection holding some of the budget whose client
    /// has acknowledged nothing for [`MIN_STALL`] (unless another waiter
    /// searched within [`SEARCH_EVERY`]).
    fn close_stalled(&self) {
        {
            let mut searched = lock(&self.searched);
            if searched.elapsed() < SEARCH_EVERY {
                return;
            }
            *searched = Instant::now();
        }
        let conns: Vec<Arc<ConnShare>> =
            lock(&self.conns).iter().filter_map(Weak::upgrade).collect();
        for c in conns {
            if c.held.load(Ordering::SeqCst) > 0 && c.silent_for() >= MIN_STALL {
                let held = c.held.load(Ordering::SeqCst) << 10;
                let why = format!(
                    "the client acknowledged nothing for {} s while holding {held} bytes of the send budget that others wait for",
                    MIN_STALL.as_secs()
                );
                tracing::warn!(peer = %c.conn.remote_address(), reason = %why, "closing a stalled QUIC connection");
                self.evicted.inc();
                c.conn
                    .close(VarInt::from_u32(Code::Stalled.value()), why.as_bytes());
            }
        }
    }
}

impl ConnShare {
    /// Room for `bytes` of a chunk in this connection's window, then in
    /// the daemon's budget (the permit, for the chunk's buffer to hold);
    /// `None` once the daemon stops.
    pub(crate) async fn charge(
        self: &Arc<Self>,
        bytes: u64,
    ) -> Option<(OwnedSemaphorePermit, Charge)> {
        let kib = bytes.div_ceil(1024).min(u64::from(self.budget.window_kib));
        let n = u32::try_from(kib).unwrap_or(u32::MAX);
        let window = Arc::clone(&self.window).acquire_many_owned(n).await.ok()?;
        let total = loop {
            let wait = Arc::clone(&self.budget.total).acquire_many_owned(n);
            match tokio::time::timeout(EVICT_AFTER, wait).await {
                Ok(got) => break got.ok()?,
                Err(_) => self.budget.close_stalled(),
            }
        };
        self.held.fetch_add(kib, Ordering::SeqCst);
        // A chunk charged is the client's doing (it asked, and its
        // window had room): it counts as a sign of life.
        *lock(&self.acks) = (acks(&self.conn), Instant::now());
        let charge = Charge {
            _window: window,
            share: Arc::clone(self),
            kib,
        };
        Some((total, charge))
    }

    /// How long the client has sent no acknowledgement (counted now).
    fn silent_for(&self) -> Duration {
        let now = acks(&self.conn);
        let mut seen = lock(&self.acks);
        if now != seen.0 {
            *seen = (now, Instant::now());
        }
        seen.1.elapsed()
    }
}

/// The ACK frames `conn`'s client has sent so far.
fn acks(conn: &Connection) -> u64 {
    conn.stats().frame_rx.acks
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
