//! The daemon: configuration, the catalog of served files, its watcher,
//! the HTTP API, metrics and graceful shutdown.
//!
//! The folders are the layers, each opening with what it owns and what it
//! may use (docs/architecture.md draws them): `store` (where bytes are),
//! `catalog` (the served files and their versions), `integrity` (digests
//! checked before bytes go out), `render` (manifests and summaries made
//! from a file), `xet` (the Hub's chunked download protocol: a file's
//! chunks and hashes), `http` and `quic` (the transports), `ui` (the web
//! page) and `ops` (accepting, watching, metrics).
//!
//! [`run`] takes a loaded configuration, bound listeners and a shutdown
//! future; `bin/ztserve.rs` only wires flags, logging and signals to it.

mod catalog;
pub mod config;
mod cpu;
mod families;
mod http;
mod integrity;
mod ops;
pub mod quic;
mod render;
mod serve;
mod store;
mod tls_sessions;
mod ui;
mod xet;

pub use ops::healthcheck;
pub use store::object_root;

use ops::{accept, auth, metrics, tls, watch};
use render::{renderings, summary};

/// The HTTP fuzz target's body, for cargo-fuzz and the corpus replay.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use http::fuzz as http_fuzz;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quinn::VarInt;
use tokio::net::TcpListener;

pub use catalog::Catalog;
pub use config::Config;

/// Shared state of a running daemon.
#[derive(Debug)]
pub struct State {
    pub config: Config,
    pub catalog: Catalog,
    pub metrics: metrics::Metrics,
    /// Valid bearer tokens, when authentication is on.
    pub tokens: Option<auth::Tokens>,
    /// Manifest renderings, made once per file version and shared.
    pub renderings: renderings::Renderings,
    /// The ztp/1 send budget (`quic.send_budget_bytes`), and each
    /// connection's share of it.
    pub(crate) send_budget: Arc<quic::budget::SendBudget>,
    /// Chunks of local files recently sent over ztp/1, kept in memory
    /// (`quic.piece_cache_bytes`).
    pub(crate) kept: quic::kept::Kept,
    /// TLS sessions kept for resumption, counted (ztp/1 and HTTPS).
    pub(crate) resumptions: tls_sessions::Resumptions,
    /// Set once the first scan is done; cleared when shutdown begins.
    pub ready: AtomicBool,
    /// Objects' value summaries, per file version.
    pub(crate) summaries: summary::Cache,
    /// The pool CPU-heavy request work runs on (`limits.cpu_jobs`).
    pub(crate) cpu: Arc<cpu::CpuPool>,
    /// HTTP response bodies' memory budget, and the connections holding
    /// it (`limits.body_memory_bytes`).
    pub(crate) flows: Arc<http::flow::Flows>,
    /// Repository files' Xet indexes (`hub.xet_index_bytes`).
    pub(crate) xet: Arc<xet::kept::Kept>,
}

/// What a configuration names beyond its own keys, checked as the daemon
/// would use it (for `--check-config` and before starting): the token
/// file parses.
pub fn check(config: &Config) -> Result<()> {
    if let Some(f) = &config.auth.token_file {
        auth::Tokens::load(f)
            .map_err(|e| anyhow::anyhow!("configuration key `auth.token_file`: {e:#}"))?;
    }
    Ok(())
}

impl State {
    pub fn new(config: Config) -> Result<Arc<Self>> {
        let limits = zt_format::Limits {
            manifest_cap: config.limits.manifest_cap,
            decompress_cap: config.limits.decompress_cap,
            manifest_memory: config.limits.manifest_memory,
            // The daemon's CPU work is bounded by its pool
            // (`limits.cpu_jobs`): no threads of the format crate's own.
            decode_threads: 1,
            ..zt_format::Limits::default()
        };
        let root = store::open_root(&config.root, &config.storage)?;
        let background = root.reads_in_background(config.storage.background_reads);
        // The daemon's own files are never served, wherever they lie.
        let own: Vec<&std::path::Path> = [
            config.auth.token_file.as_deref(),
            config.tls.cert.as_deref(),
            config.tls.key.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect();
        let catalog = Catalog::new(
            root,
            limits,
            &config.digests,
            &config.state_dir,
            &own,
            background,
        )
        .with_context(|| format!("opening root {}", config.root.display()))?;
        let tokens = match &config.auth.token_file {
            Some(f) => Some(auth::Tokens::load(f)?),
            None => None,
        };
        let cpu = Arc::new(cpu::CpuPool::new(
            config.limits.cpu_jobs,
            config.limits.cpu_queue,
        ));
        let renderings = renderings::Renderings::new(
            config.limits.render_cache_bytes,
            config.limits.render_cap,
            Arc::clone(&cpu),
        );
        let q = &config.quic;
        let send_budget = quic::budget::SendBudget::new(
            q.send_budget_bytes,
            store::READ_CHUNK,
            q.connection_window,
        );
        let metrics = metrics::Metrics::default();
        let registry = metrics.registry();
        send_budget.register(registry)?;
        catalog.digest_metrics().register(registry)?;
        catalog.slice_digests().register(registry)?;
        renderings.register(registry)?;
        cpu.register(registry)?;
        let summaries = summary::Cache::new(Arc::clone(&cpu));
        summaries.register(registry)?;
        let kept = quic::kept::Kept::new(config.quic.piece_cache_bytes);
        kept.register(registry)?;
        let resumptions = tls_sessions::Resumptions::default();
        resumptions.register(registry)?;
        let flows = http::flow::Flows::new(&config.limits);
        flows.register(registry)?;
        catalog.root().register_metrics(registry)?;
        let xet = Arc::new(xet::kept::Kept::new(config.hub.xet_index_bytes));
        Ok(Arc::new(State {
            xet,
            tokens,
            renderings,
            send_budget,
            kept,
            resumptions,
            config,
            catalog,
            metrics,
            ready: AtomicBool::new(false),
            summaries,
            cpu,
            flows,
        }))
    }

    /// Bytes of the ztp/1 send budget held now: read and not yet
    /// acknowledged by the clients.
    pub(crate) fn send_budget_held(&self) -> u64 {
        self.send_budget.held()
    }

    /// Catalogues `path` again after a request or a transfer found its
    /// file changed under its entry ([`Catalog::refresh`]), first waiting
    /// out, asleep, the least time between two loads of one path.
    pub(crate) async fn refresh(self: &Arc<Self>, path: &str) {
        tokio::time::sleep(self.catalog.reload_after(path)).await;
        self.catalog.refresh(path).await;
    }

    /// [`State::refresh`] in the background, for a transfer cut because
    /// its file changed: the next request finds the new version.
    pub(crate) fn refresh_later(self: &Arc<Self>, path: &str) {
        let (s, p) = (Arc::clone(self), path.to_owned());
        tokio::spawn(async move { s.refresh(&p).await });
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

/// How long QUIC connections past the shutdown deadline get to announce
/// their close before the endpoint closes whatever is left.
const CLOSE_WAIT: Duration = Duration::from_secs(6);

/// Scans the root, starts the watcher, and serves until `shutdown`
/// resolves; then stops accepting, fails `/readyz`, and gives in-flight
/// requests `shutdown_timeout_secs` to finish.
pub async fn run(
    state: Arc<State>,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = listener.local_addr()?;
    let root = state.catalog.root().describe().to_owned();
    let (added, _, _) = state.catalog.rescan().await;
    let snap = state.catalog.snapshot();
    tracing::info!(files = added, served = snap.served().count(), unavailable = snap.unavailable().count(), root = %root, "initial scan done");
    state.ready.store(true, Ordering::SeqCst);
    let watcher = watch::spawn(Arc::clone(&state));
    let store_check = watch::spawn_store_check(Arc::clone(&state));
    let reads = state
        .catalog
        .root()
        .reads_in_background(state.config.storage.background_reads);
    if state.config.digests.verify_background && reads {
        ops::verifier::start(&state, state.config.digests.rate_mib_s << 20);
    }
    let token_reloader = state.tokens.is_some().then(|| {
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(auth::RECHECK);
            loop {
                every.tick().await;
                let s = Arc::clone(&state);
                let _ = tokio::task::spawn_blocking(move || {
                    if let Some(t) = &s.tokens {
                        t.refresh();
                    }
                })
                .await;
            }
        })
    });
    let app = http::router(Arc::clone(&state));
    let deadline = state.config.shutdown_timeout();
    // One shutdown signal, observed by the HTTP and the QUIC side.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let drain_state = Arc::clone(&state);
    tokio::spawn(async move {
        shutdown.await;
        drain_state.ready.store(false, Ordering::SeqCst);
        tracing::info!("shutting down: no new connections, finishing requests in flight");
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let quic = if state.config.quic.enabled {
        let quic_addr = state.config.quic.listen.unwrap_or(addr);
        let bound = quic::bind(&state, quic_addr)?;
        let local = bound.endpoint.local_addr()?;
        tracing::info!(quic = %local, fingerprint = %bound.fingerprint, "listening (ztp/1)");
        let endpoint = bound.endpoint.clone();
        let (closing_tx, closing) = tokio::sync::watch::channel(false);
        let stopping = stop_rx.clone();
        let serve = tokio::spawn(quic::serve(Arc::clone(&state), bound, stopping, closing));
        let rx = stop_rx.clone();
        Some(tokio::spawn(async move {
            stopped(rx).await;
            endpoint.set_server_config(None);
            if tokio::time::timeout(deadline, endpoint.wait_idle())
                .await
                .is_err()
            {
                tracing::warn!(
                    "QUIC connections still open at the shutdown deadline; closing them"
                );
                // Each announces `shutting_down` on its control stream
                // first, so the code reaches clients whose receive buffers
                // are full (PROTOCOL.md section 8).
                let _ = closing_tx.send(true);
                let _ = tokio::time::timeout(CLOSE_WAIT, endpoint.wait_idle()).await;
            }
            endpoint.close(
                VarInt::from_u32(ztp_proto::Code::ShuttingDown.value()),
                b"shutting down",
            );
            serve.abort();
        }))
    } else {
        None
    };
    let tls = match (state.config.tls.cert.clone(), state.config.tls.key.clone()) {
        (Some(cert), Some(key)) => {
            let sessions = state.resumptions.clone();
            let config = tls::load(&cert, &key, &sessions)?;
            Some((
                config.clone(),
                tls::spawn_reloader(config, cert, key, sessions),
            ))
        }
        _ => None,
    };
    match &tls {
        Some(_) => tracing::info!(https = %addr, "listening"),
        None => tracing::info!(http = %addr, "listening"),
    }
    accept::serve(
        listener,
        app,
        tls.as_ref().map(|(c, _)| c.clone()),
        accept::Limits::from_config(&state.config.limits),
        Arc::clone(&state.flows),
        stopped(stop_rx.clone()),
        deadline,
    )
    .await?;
    if let Some((_, reloader)) = tls {
        reloader.abort();
    }
    if let Some(q) = quic {
        let _ = q.await;
    }
    watcher.abort();
    if let Some(check) = store_check {
        check.abort();
    }
    if let Some(r) = token_reloader {
        r.abort();
    }
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A connection's window takes at least one read chunk: the send
    /// budget's window is never less, and the two keys agree.
    #[test]
    fn the_least_connection_window_is_one_read_chunk() {
        assert_eq!(
            super::config::MIN_CONNECTION_WINDOW,
            super::store::READ_CHUNK
        );
    }
}
