//! The ztp/1 send budget (`quic.send_budget_bytes`): component bytes read
//! for ztp/1 and not yet acknowledged by the clients, the whole daemon
//! together, and each connection's share of it.
//!
//! A chunk is charged from its read until quinn drops the last of its
//! bytes (the client acknowledged them, or the stream or connection went),
//! to the daemon's budget and to its connection's window (the budget, at
//! most `quic.connection_window`: a window of half the budget cost a
//! single fast fetch about 5 % of its speed on loopback, measured).
//!
//! A client that stops acknowledging (paused, or gone without a word) or
//! stops reading would otherwise keep its share until the stall timeout.
//! So a chunk that has waited [`EVICT_AFTER`] for the daemon's budget
//! closes, with `stalled`, every connection that holds some of it and
//! whose client has sent no acknowledgement for [`MIN_STALL`] (or four
//! round trips, if longer) since its last chunk was handed to quinn, and
//! again after each such wait: under pressure, as for HTTP
//! (`http/flow.rs`), a client must take what it is sent. One that keeps
//! acknowledging what it is sent is never closed for it.
//!
//! What a charge holds is only its connection's counters ([`Part`]),
//! never the connection: quinn keeps unacknowledged bytes in the
//! connection's state, and a charge that held the connection would keep
//! that state, and itself, alive for ever once the connection closed.

use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prometheus::{IntCounter, Registry};
use quinn::{Connection, VarInt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use ztp_proto::Code;

use crate::server::families::{counter, register};
use crate::server::store::source::holding;

/// How long a chunk waits for the daemon's budget before it closes the
/// stalled connections (and again after each search).
pub(crate) const EVICT_AFTER: Duration = Duration::from_millis(100);

/// How long a client holding some of the budget must have acknowledged
/// nothing since its last chunk went to quinn to be closed under
/// pressure (four round trips, where that is longer).
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

/// One connection's part of the budget, held by its streams.
#[derive(Debug)]
pub(crate) struct ConnShare {
    budget: Arc<SendBudget>,
    part: Arc<Part>,
    conn: Connection,
    /// Closed as stalled already: not closed, nor counted, again.
    closed: AtomicBool,
}

/// What a connection's charges count on (and all they hold of it).
#[derive(Debug)]
struct Part {
    window: Arc<Semaphore>,
    /// KiB held now.
    held: AtomicU64,
    /// The client's acknowledgements as last counted, and since when the
    /// count has not moved (or since the connection's last chunk was
    /// handed to quinn, if later).
    acks: Mutex<(u64, Instant)>,
}

/// A chunk's charge to its connection, given back when dropped (with
/// the chunk's bytes: [`Charge::hold`]). Its charge to the daemon's
/// budget is a permit, held by the buffer the chunk is read into.
#[derive(Debug)]
pub(crate) struct Charge {
    _window: OwnedSemaphorePermit,
    part: Arc<Part>,
    kib: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.part.held.fetch_sub(self.kib, Ordering::SeqCst);
    }
}

impl Charge {
    /// `bytes`, holding this charge until the last of them is dropped.
    pub(crate) fn hold(self, bytes: Bytes) -> Bytes {
        holding(bytes, self)
    }
}

impl SendBudget {
    /// A budget of `bytes` (at least `chunk`), each connection's window
    /// at most `connection_window` of it (at least `chunk`).
    pub(crate) fn new(bytes: u64, chunk: u64, connection_window: u64) -> Arc<SendBudget> {
        let total_kib = bytes.max(chunk) >> 10;
        let window = bytes.min(connection_window).max(chunk) >> 10;
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

    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.evicted])
    }

    /// Bytes held now, the whole daemon together.
    pub(crate) fn held(&self) -> u64 {
        let free = self.total.available_permits() as u64;
        self.total_kib.saturating_sub(free) << 10
    }

    /// `conn`'s share, counted among the connections until dropped.
    pub(crate) fn join(self: &Arc<Self>, conn: &Connection) -> Arc<ConnShare> {
        let share = Arc::new(ConnShare {
            budget: Arc::clone(self),
            part: Arc::new(Part {
                window: Arc::new(Semaphore::new(self.window_kib as usize)),
                held: AtomicU64::new(0),
                acks: Mutex::new((acks(conn), Instant::now())),
            }),
            conn: conn.clone(),
            closed: AtomicBool::new(false),
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
            let held = c.part.held.load(Ordering::SeqCst) << 10;
            if held == 0 || c.closed.load(Ordering::SeqCst) || !c.stalled() {
                continue;
            }
            c.closed.store(true, Ordering::SeqCst);
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

impl ConnShare {
    /// Room for `bytes` of a chunk in this connection's window, then in
    /// the daemon's budget (the permit, for the chunk's buffer to hold);
    /// `None` once the daemon stops or the connection is closed.
    ///
    /// The waits end when the connection closes: the window is given back
    /// only as quinn drops the chunks its connection holds, which it does
    /// once nothing holds the connection, and a stream waiting here holds
    /// it (through this share). A client gone mid-fetch would otherwise
    /// keep its whole window, up to the daemon's whole budget, for ever.
    pub(crate) async fn charge(
        self: &Arc<Self>,
        bytes: u64,
    ) -> Option<(OwnedSemaphorePermit, Charge)> {
        let kib = bytes.div_ceil(1024).min(u64::from(self.budget.window_kib));
        let n = u32::try_from(kib).unwrap_or(u32::MAX);
        let mut closed = pin!(self.conn.closed());
        let window = tokio::select! {
            biased;
            _ = &mut closed => return None,
            got = Arc::clone(&self.part.window).acquire_many_owned(n) => got.ok()?,
        };
        // One wait, keeping its place in the queue, interrupted to search.
        let mut wait = pin!(Arc::clone(&self.budget.total).acquire_many_owned(n));
        let total = loop {
            tokio::select! {
                biased;
                _ = &mut closed => return None,
                got = tokio::time::timeout(EVICT_AFTER, &mut wait) => match got {
                    Ok(got) => break got.ok()?,
                    Err(_) => self.budget.close_stalled(),
                },
            }
        };
        self.part.held.fetch_add(kib, Ordering::SeqCst);
        let charge = Charge {
            _window: window,
            part: Arc::clone(&self.part),
            kib,
        };
        Some((total, charge))
    }

    /// A chunk of the connection's was handed to quinn: the client's
    /// silence counts from now (it had nothing new to acknowledge while
    /// the chunk was read).
    pub(crate) fn handed(&self) {
        *lock(&self.part.acks) = (acks(&self.conn), Instant::now());
    }

    /// Whether the client has sent no acknowledgement for [`MIN_STALL`]
    /// (four round trips, if longer) since its last chunk went to quinn.
    fn stalled(&self) -> bool {
        let now = acks(&self.conn);
        let mut seen = lock(&self.part.acks);
        if now != seen.0 {
            *seen = (now, Instant::now());
        }
        seen.1.elapsed() >= MIN_STALL.max(self.conn.rtt() * 4)
    }
}

/// The ACK frames `conn`'s client has sent so far.
fn acks(conn: &Connection) -> u64 {
    conn.stats().frame_rx.acks
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ends of a QUIC connection over loopback: the server's, then
    /// the client's (the client keeping its endpoint).
    async fn connected() -> (Connection, Connection, quinn::Endpoint) {
        zt_client::trust::install_provider();
        let dir = tempfile::tempdir().unwrap();
        let id = super::super::cert::identity(None, dir.path()).unwrap();
        let fp = id.fingerprint();
        let mut crypto =
            rustls::ServerConfig::builder_with_provider(super::super::cert::provider())
                .with_protocol_versions(&[&rustls::version::TLS13])
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(id.chain, id.key)
                .unwrap();
        crypto.alpn_protocols = vec![ztp_proto::ALPN.to_vec()];
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(crypto).unwrap();
        let config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        let server = quinn::Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let trust = zt_client::trust::Trust::fingerprint(&fp).unwrap();
        let tls = zt_client::trust::client_config(&trust, ztp_proto::ALPN).unwrap();
        let tls = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut client = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        client.set_default_client_config(quinn::ClientConfig::new(Arc::new(tls)));
        let (accepted, connected) = tokio::join!(
            async { server.accept().await.unwrap().await.unwrap() },
            async { client.connect(addr, "localhost").unwrap().await.unwrap() },
        );
        (accepted, connected, client)
    }

    /// A stream waiting for room in its connection's window, which its
    /// connection's chunks fill (unacknowledged, in quinn's buffers, which
    /// the waiting stream keeps alive), stops waiting when the connection
    /// closes: it waited for ever, and the window and the daemon's budget
    /// with it (a `zt fetch` killed mid-file).
    #[tokio::test]
    async fn a_charge_waiting_for_the_window_ends_when_its_connection_closes() {
        let (server, _client, _endpoint) = connected().await;
        let chunk = 4u64 << 20;
        let budget = SendBudget::new(4 * chunk, chunk, chunk);
        let share = budget.join(&server);
        let held = share.charge(chunk).await.expect("room for one chunk");
        let waiting = {
            let share = Arc::clone(&share);
            tokio::spawn(async move { share.charge(chunk).await.is_none() })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the window is full");
        server.close(VarInt::from_u32(0), b"gone");
        let ended = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the wait ended with the connection")
            .unwrap();
        assert!(ended, "no charge for a closed connection");
        drop(held);
        assert_eq!(budget.held(), 0);
    }
}
