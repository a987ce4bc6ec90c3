//! The daemon: configuration, the catalog of served files, its watcher,
//! the HTTP API, metrics and graceful shutdown.
//!
//! [`run`] takes a loaded configuration, bound listeners and a shutdown
//! future; `bin/ztserve.rs` only wires flags, logging and signals to it.

pub mod catalog;
pub mod config;
pub mod http;
pub mod metrics;
pub mod watch;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{Context, Result};
use tokio::net::TcpListener;

pub use catalog::Catalog;
pub use config::Config;

/// Shared state of a running daemon.
#[derive(Debug)]
pub struct State {
    pub config: Config,
    pub catalog: Catalog,
    pub metrics: metrics::Metrics,
    /// Set once the first scan is done; cleared when shutdown begins.
    pub ready: AtomicBool,
}

impl State {
    pub fn new(config: Config) -> Result<Arc<Self>> {
        let limits = zt_format::Limits {
            manifest_cap: config.limits.manifest_cap,
            decompress_cap: config.limits.decompress_cap,
            ..zt_format::Limits::default()
        };
        let catalog = Catalog::new(&config.root, limits)
            .with_context(|| format!("opening root {}", config.root.display()))?;
        Ok(Arc::new(State {
            config,
            catalog,
            metrics: metrics::Metrics::default(),
            ready: AtomicBool::new(false),
        }))
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }
}

/// Binds a TCP listener; `[::]` listens on IPv4 and IPv6 alike.
pub fn bind(addr: SocketAddr) -> Result<TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))
        .with_context(|| format!("creating socket for {addr}"))?;
    if addr.is_ipv6() {
        socket
            .set_only_v6(false)
            .context("enabling dual-stack IPv6")?;
    }
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket
        .bind(&addr.into())
        .with_context(|| format!("binding {addr}"))?;
    socket
        .listen(1024)
        .with_context(|| format!("listening on {addr}"))?;
    TcpListener::from_std(socket.into()).context("registering listener")
}

/// Scans the root, starts the watcher, and serves until `shutdown`
/// resolves; then stops accepting, fails `/readyz`, and gives in-flight
/// requests `shutdown_timeout_secs` to finish.
pub async fn run(
    state: Arc<State>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = listener.local_addr()?;
    let root = state.catalog.root().to_owned();
    let scan_state = Arc::clone(&state);
    tokio::task::spawn_blocking(move || {
        let (added, _, _) = scan_state.catalog.rescan();
        let snap = scan_state.catalog.snapshot();
        tracing::info!(files = added, served = snap.served().count(), unavailable = snap.unavailable().count(), root = %root.display(), "initial scan done");
        scan_state.ready.store(true, Ordering::SeqCst);
    })
    .await?;
    let watcher = watch::spawn(Arc::clone(&state));
    tracing::info!(http = %addr, "listening");
    let app = http::router(Arc::clone(&state));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let drain_state = Arc::clone(&state);
    let graceful = async move {
        shutdown.await;
        drain_state.ready.store(false, Ordering::SeqCst);
        tracing::info!("shutting down: no new connections, finishing requests in flight");
        let _ = stop_tx.send(true);
    };
    let mut stop_rx2 = stop_rx.clone();
    let server = axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(graceful);
    let deadline = state.config.shutdown_timeout();
    let server = tokio::spawn(async move { server.await });
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => { r??; }
        _ = async { let _ = stop_rx2.wait_for(|v| *v).await; } => {
            match tokio::time::timeout(deadline, &mut server).await {
                Ok(r) => { r??; }
                Err(_) => tracing::warn!(seconds = deadline.as_secs(), "shutdown deadline passed; dropping remaining requests"),
            }
        }
    }
    drop(stop_rx);
    watcher.abort();
    tracing::info!("stopped");
    Ok(())
}
