//! The HTTP and HTTPS accept loop, and everything that keeps slow or
//! hostile clients from exhausting the daemon:
//!
//! - at most `limits.max_connections` connections at once; further ones
//!   wait in the kernel's backlog until a slot frees;
//! - `TCP_NODELAY` (headers and body leave in separate writes; Nagle's
//!   algorithm with delayed ACKs would stall small responses ~40 ms);
//! - a TLS handshake, and a request's headers, must arrive within
//!   `limits.header_timeout_secs` (slowloris);
//! - headers are capped at `limits.max_header_bytes` (431 beyond);
//! - a connection on which no byte moves either way for
//!   `limits.idle_timeout_secs` is closed (idle keep-alive, a client that
//!   stopped sending or stopped reading);
//! - on shutdown, connections finish the request in hand and close.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::server::config::LimitsConfig;
use crate::server::ops::idle::IdleTimeout;
use crate::server::ops::tls::{current, TlsConfig};

/// The limits one connection is served under.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub max_header_bytes: usize,
    pub idle_timeout: Duration,
}

impl Limits {
    pub(crate) fn from_config(l: &LimitsConfig) -> Limits {
        Limits {
            max_connections: l.max_connections.max(1),
            header_timeout: Duration::from_secs(l.header_timeout_secs.max(1)),
            max_header_bytes: l.max_header_bytes,
            idle_timeout: Duration::from_secs(l.idle_timeout_secs.max(1)),
        }
    }
}

fn builder(limits: &Limits) -> Builder<TokioExecutor> {
    let mut b = Builder::new(TokioExecutor::new());
    b.http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // hyper's smallest read buffer is 8 KiB; headers past it get 431.
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    b.http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    b
}

async fn serve_one<I>(
    io: I,
    app: Router,
    b: Arc<Builder<TokioExecutor>>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = b
        .serve_connection_with_upgrades(TokioIo::new(io), TowerToHyperService::new(app))
        .into_owned();
    if let Err(e) = watcher.watch(conn).await {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// Serves `app` on `listener` until `stop` resolves, then gives open
/// connections `deadline` to finish.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    tls: Option<TlsConfig>,
    limits: Limits,
    stop: impl Future<Output = ()>,
    deadline: Duration,
) -> Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let b = Arc::new(builder(&limits));
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&slots).acquire_owned() => p?,
            () = &mut stop => break,
        };
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
        let _ = stream.set_nodelay(true);
        let io = IdleTimeout::new(stream, limits.idle_timeout);
        let (app, b, watcher) = (app.clone(), Arc::clone(&b), graceful.watcher());
        let tls = tls.as_ref().map(current);
        tokio::spawn(async move {
            let _permit = permit;
            match tls {
                None => serve_one(io, app, b, watcher).await,
                Some(config) => {
                    let accept = tokio_rustls::TlsAcceptor::from(config).accept(io);
                    match tokio::time::timeout(limits.header_timeout, accept).await {
                        Ok(Ok(tls_io)) => serve_one(tls_io, app, b, watcher).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
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
