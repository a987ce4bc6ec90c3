//! The HTTP and HTTPS accept loop, and everything that keeps slow or
//! hostile clients from exhausting the daemon:
//!
//! - at most `limits.max_connections` connections at once; past them, up
//!   to `limits.ops_connections` more are accepted, each with
//!   `limits.ops_header_timeout_ms` to send one request: `/healthz`,
//!   `/readyz` and `/metrics` are answered at once (probes and scrapes
//!   stay answerable while slow clients hold every slot), any other request
//!   waits for a slot (at most twice `limits.header_timeout_secs`, then
//!   `503 busy`); when every place is taken, the oldest place whose
//!   connection has sent nothing gives it up to the newcomer (a flood's
//!   silent connections take each other's places, a probe is served), and
//!   with none such a connection is closed at once, so the kernel's
//!   backlog drains and a probe behind a flood is reached;
//! - `TCP_NODELAY` (headers and body leave in separate writes; Nagle's
//!   algorithm with delayed ACKs would stall small responses ~40 ms);
//! - a TLS handshake, and a request's headers, must arrive within
//!   `limits.header_timeout_secs` (slowloris);
//! - headers are capped at `limits.max_header_bytes` (431 beyond), and an
//!   HTTP/2 connection at `limits.http2_max_streams` requests at once;
//! - a connection on which no byte moves either way for
//!   `limits.idle_timeout_secs` is closed (idle keep-alive, a client that
//!   stopped sending or stopped reading);
//! - each connection has a flow (`http::flow`): its responses' bytes are
//!   charged to its window and the daemon's budget, it is closed when a
//!   piece read for it waits unwritten for `limits.send_timeout_secs`,
//!   and a request waiting for a slot closes the most stalled connection
//!   with a slot (one holding such a piece, or idle between requests, for
//!   a second at least) every 100 ms;
//! - on shutdown, connections finish the request in hand and close.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Result;
use axum::body::Body;
use axum::http::Request;
use axum::response::Response;
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::server::config::LimitsConfig;
use crate::server::http::flow::{Flow, Flows, Pressure, EVICT_AFTER};
use crate::server::ops::idle::IdleTimeout;
use crate::server::ops::tls::{current, TlsConfig};

/// The limits one connection is served under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
    pub idle_timeout: Duration,
    /// Connections accepted past `max_connections`, for operations.
    pub ops_connections: usize,
    /// How long one of those has to send its request.
    pub ops_header_timeout: Duration,
    /// Most concurrent streams on one HTTP/2 connection.
    pub http2_max_streams: u32,
}

impl Limits {
    pub(crate) fn from_config(l: &LimitsConfig) -> Limits {
        Limits {
            max_connections: l.max_connections.max(1),
            header_timeout: Duration::from_secs(l.header_timeout_secs.max(1)),
            max_header_bytes: l.max_header_bytes,
            idle_timeout: Duration::from_secs(l.idle_timeout_secs.max(1)),
            ops_connections: l.ops_connections,
            ops_header_timeout: Duration::from_millis(l.ops_header_timeout_ms.max(1)),
            http2_max_streams: u32::try_from(l.http2_max_streams.max(1)).unwrap_or(u32::MAX),
        }
    }
}

/// The connection builder: `ops` for one past every slot (HTTP/1.1, one
/// request, the short header timeout).
fn builder(limits: &Limits, ops: bool) -> Builder<TokioExecutor> {
    let mut b = Builder::new(TokioExecutor::new());
    let header_timeout = match ops {
        true => limits.ops_header_timeout,
        false => limits.header_timeout,
    };
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        // hyper's smallest read buffer is 8 KiB; headers past it get 431.
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(!ops);
    b.http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    if ops {
        b = b.http1_only();
    }
    b
}

async fn serve_one<I, S>(
    io: I,
    service: S,
    b: Arc<Builder<TokioExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<Request<Incoming>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let conn = b
        .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(service))
        .into_owned();
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// One accepted connection, to serve.
struct Conn {
    app: Router,
    flow: Arc<Flow>,
    /// For a connection past every slot: the slots its requests wait
    /// for, how long, and the flag its first request sets.
    past: Option<Past>,
    b: Arc<Builder<TokioExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
}

impl Conn {
    async fn serve<I>(self, io: I)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (app, flow) = (self.app, self.flow);
        let Some(past) = self.past else {
            let flowed = tower::service_fn(move |req: Request<Incoming>| {
                let (app, flow) = (app.clone(), Arc::clone(&flow));
                async move { Ok::<_, Infallible>(flowed(req, app, flow).await) }
            });
            return serve_one(io, flowed, self.b, self.watcher).await;
        };
        let svc = tower::service_fn(move |req: Request<Incoming>| {
            past.asked.store(true, Ordering::SeqCst);
            let (app, flow, past) = (app.clone(), Arc::clone(&flow), past.clone());
            async move { Ok::<_, Infallible>(past_the_slots(req, app, flow, past).await) }
        });
        serve_one(io, svc, self.b, self.watcher).await;
    }
}

/// What a connection past every slot waits with: the slots, how long,
/// the flag its first request sets, and the flows to close the most
/// stalled of while it waits.
#[derive(Clone)]
struct Past {
    slots: Arc<Semaphore>,
    wait: Duration,
    asked: Arc<AtomicBool>,
    flows: Arc<Flows>,
}

/// `req` answered by `app`, in hand on `flow` (which its response's
/// pieces are charged to) until its body is written or dropped.
async fn flowed(mut req: Request<Incoming>, app: Router, flow: Arc<Flow>) -> Response {
    use tower::ServiceExt as _;
    let busy = flow.begin();
    req.extensions_mut().insert(flow);
    let resp = app
        .oneshot(req)
        .await
        .unwrap_or_else(|never| match never {});
    resp.map(|body| Body::new(Holding { body, _held: busy }))
}

/// A body that holds `_held` until it is dropped, with the size and end
/// its inner body says (a `Content-Length` hyper sets from it stays).
struct Holding<T> {
    body: Body,
    _held: T,
}

impl<T: Unpin> hyper::body::Body for Holding<T> {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection holding a place past the slots, until its first request
/// arrives.
struct Place {
    asked: Arc<AtomicBool>,
    evict: oneshot::Sender<()>,
}

/// The places past the slots, oldest first. When every place is taken,
/// the oldest whose connection has not sent a request yet gives it up to
/// the newcomer: a flood's silent connections then take each other's
/// places, and a probe, which sends its request at once, is served.
#[derive(Default)]
struct Places(Mutex<VecDeque<Place>>);

impl Places {
    /// Keeps `place` in line; at most about twice `cap` are kept (places
    /// whose connections asked or ended are dropped first).
    fn join(&self, place: Place, cap: usize) {
        let mut q = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.len() >= cap.saturating_mul(2).max(16) {
            q.retain(|p| !p.asked.load(Ordering::SeqCst) && !p.evict.is_closed());
        }
        q.push_back(place);
    }

    /// Closes the oldest connection that holds a place without having
    /// asked anything: whether there was one.
    fn evict_oldest(&self) -> bool {
        let mut q = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(p) = q.pop_front() {
            if !p.asked.load(Ordering::SeqCst) && p.evict.send(()).is_ok() {
                return true;
            }
        }
        false
    }
}

/// Whether a request is for an operations route, answered on a connection
/// past every slot without waiting for one.
fn is_ops(req: &Request<Incoming>) -> bool {
    matches!(req.uri().path(), "/healthz" | "/readyz" | "/metrics")
}

/// A request on a connection past every slot: an operations route at
/// once; any other once a slot frees, holding it until its body is sent
/// (at most `wait` for it, else `503 busy` with `Retry-After: 1`). While
/// it waits, the most stalled connection is closed every 100 ms.
async fn past_the_slots(
    req: Request<Incoming>,
    app: Router,
    flow: Arc<Flow>,
    past: Past,
) -> Response {
    if is_ops(&req) {
        return flowed(req, app, flow).await;
    }
    // In hand while it waits: never closed as idle by another waiter.
    let waiting = flow.begin();
    let Some(slot) = slot_within(&past).await else {
        let refusal = crate::server::serve::Refusal::Busy(format!(
            "every connection slot is taken (limits.max_connections) and none freed within {:?}; retry shortly",
            past.wait
        ));
        return axum::response::IntoResponse::into_response(crate::server::http::AppError::from(
            refusal,
        ));
    };
    let resp = flowed(req, app, flow).await;
    drop(waiting);
    resp.map(|body| Body::new(Holding { body, _held: slot }))
}

/// A slot, within `past.wait`, closing the most stalled connection (a
/// slow reader, an idle keep-alive) each time one has not freed within
/// [`EVICT_AFTER`].
async fn slot_within(past: &Past) -> Option<OwnedSemaphorePermit> {
    // One place in the queue, kept while it waits.
    let slot = Arc::clone(&past.slots).acquire_owned();
    let deadline = tokio::time::sleep(past.wait);
    tokio::pin!(slot, deadline);
    loop {
        tokio::select! {
            slot = &mut slot => return slot.ok(),
            () = &mut deadline => return None,
            () = tokio::time::sleep(EVICT_AFTER) => {
                past.flows.close_stalled(Pressure::Slots);
            }
        }
    }
}

/// A place past the slots: a free one, else the oldest silent one's (it
/// is closed and its place taken, within 100 ms).
async fn place(spare: &Arc<Semaphore>, places: &Places) -> Option<OwnedSemaphorePermit> {
    if let Ok(p) = Arc::clone(spare).try_acquire_owned() {
        return Some(p);
    }
    if !places.evict_oldest() {
        return None;
    }
    let freed = Arc::clone(spare).acquire_owned();
    tokio::time::timeout(Duration::from_millis(100), freed)
        .await
        .ok()?
        .ok()
}

/// Serves `app` on `listener` until `stop` resolves, then gives open
/// connections `deadline` to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsConfig>,
    limits: Limits,
    flows: Arc<Flows>,
    stop: impl Future<Output = ()>,
    deadline: Duration,
) -> Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let spare = Arc::new(Semaphore::new(limits.ops_connections));
    let places = Places::default();
    let graceful = GracefulShutdown::new();
    let (b, ops_b) = (
        Arc::new(builder(&limits, false)),
        Arc::new(builder(&limits, true)),
    );
    tokio::pin!(stop);
    loop {
        let (stream, _peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // Out of descriptors or a connection reset before
                    // accept: back off briefly, keep serving.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        // A slot, else a place past the slots (the oldest silent one's,
        // when every place is taken), else closed at once.
        let (permit, ops) = match Arc::clone(&slots).try_acquire_owned() {
            Ok(p) => (p, false),
            Err(_) => match place(&spare, &places).await {
                Some(p) => (p, true),
                None => {
                    tracing::debug!(
                        "every slot and every place past them taken; connection closed"
                    );
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let io = match ops {
            true => {
                IdleTimeout::first_within(stream, limits.idle_timeout, limits.ops_header_timeout)
            }
            false => IdleTimeout::new(stream, limits.idle_timeout),
        };
        let watcher = graceful.watcher();
        let tls = tls.as_ref().map(current);
        let handshake = if ops {
            limits.ops_header_timeout
        } else {
            limits.header_timeout
        };
        // A request past the slots waits for one at most twice the header
        // timeout: every slot held by a client still sending its headers
        // frees within one of its own.
        let asked = Arc::new(AtomicBool::new(false));
        let evicted = ops.then(|| {
            let (evict, evicted) = oneshot::channel();
            let asked = Arc::clone(&asked);
            places.join(Place { asked, evict }, limits.ops_connections);
            evicted
        });
        let flow = flows.open(ops);
        let conn = Conn {
            app: app.clone(),
            flow: Arc::clone(&flow),
            past: ops.then(|| Past {
                slots: Arc::clone(&slots),
                wait: limits.header_timeout * 2,
                asked,
                flows: Arc::clone(&flows),
            }),
            b: Arc::clone(if ops { &ops_b } else { &b }),
            watcher,
        };
        tokio::spawn(async move {
            let _permit = permit;
            let serving = async move {
                match tls {
                    None => conn.serve(io).await,
                    Some(config) => {
                        let accept = tokio_rustls::TlsAcceptor::from(config).accept(io);
                        match tokio::time::timeout(handshake, accept).await {
                            Ok(Ok(tls_io)) => conn.serve(tls_io).await,
                            Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                            Err(_) => tracing::debug!("TLS handshake timed out"),
                        }
                    }
                }
            };
            // Resolves only when the place is given up.
            let evicted = async move {
                match evicted {
                    Some(evicted) => match evicted.await {
                        Ok(()) => {}
                        Err(_) => std::future::pending().await,
                    },
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = serving => {}
                () = evicted => {
                    tracing::debug!("a silent connection past the slots gave its place up");
                }
                reason = flow.closed() => {
                    tracing::debug!(reason, "connection closed: stalled (holding response bytes it did not send, or idle) under pressure or past the send timeout");
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(deadline, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = deadline.as_secs(),
            "shutdown deadline passed; dropping remaining requests"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 28: the line of places past the slots stays bounded under a
    /// flood of connections that asked or ended (pruned once it holds
    /// twice the cap), and an eviction closes the oldest connection still
    /// silent, passing over those that asked or ended.
    #[test]
    fn the_line_of_places_is_pruned_and_evicts_the_oldest_silent() {
        let places = Places::default();
        let cap = 8;
        let mut silent = Vec::new();
        for i in 0..1000 {
            let asked = Arc::new(AtomicBool::new(i % 2 == 0));
            let (evict, rx) = oneshot::channel();
            places.join(Place { asked, evict }, cap);
            // A few stay silent and open; the rest asked, or ended (their
            // receiver dropped).
            if i % 2 == 1 && silent.len() < cap {
                silent.push(rx);
            }
            let held = places.0.lock().map(|q| q.len()).unwrap_or(usize::MAX);
            assert!(held <= 16.max(2 * cap), "{held} places held after {i}");
        }
        assert!(places.evict_oldest());
        assert_eq!(silent[0].try_recv(), Ok(()), "the oldest silent one");
        assert!(silent[1].try_recv().is_err(), "only one evicted");
    }
}
