//! ztp/1 over QUIC (see `proto/PROTOCOL.md`): the endpoint, its transport
//! tuning, and the accept loop. Each connection is handled by the private
//! `conn` module.
//!
//! May use: `serve` (the plans and refusals it carries out), `catalog`,
//! `integrity` (a component checked before its stream opens), `store` (a
//! part's bytes), `config`, `ztp-proto` (the protocol's rules) and
//! `zt-format`.

mod cancel;
pub mod cert;
mod conn;
mod control;
mod refused;
mod send;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Endpoint, EndpointConfig, IdleTimeout, TokioRuntime, TransportConfig, VarInt};
use tokio::sync::{watch, Semaphore};
use tracing::Instrument;

use crate::server::config::{Congestion, QuicConfig};
use crate::server::State;

/// Transport settings for bulk transfer: large windows, one client control
/// stream, no client uni streams.
pub fn transport(q: &QuicConfig) -> Result<TransportConfig> {
    let mut t = TransportConfig::default();
    let window = |n: u64| VarInt::from_u64(n).unwrap_or(VarInt::MAX);
    t.max_concurrent_bidi_streams(VarInt::from_u32(1))
        .max_concurrent_uni_streams(VarInt::from_u32(0))
        .stream_receive_window(window(q.stream_window))
        .receive_window(window(q.connection_window))
        .send_window(q.connection_window)
        .max_idle_timeout(Some(IdleTimeout::try_from(Duration::from_secs(
            q.idle_timeout_secs.max(1),
        ))?))
        .keep_alive_interval(None);
    match q.congestion {
        Congestion::Cubic => {}
        Congestion::Bbr => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
        }
        Congestion::NewReno => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::NewRenoConfig::default()));
        }
    }
    Ok(t)
}

/// A bound QUIC endpoint and the certificate fingerprint it presents.
#[derive(Debug)]
pub struct Bound {
    pub endpoint: Endpoint,
    pub fingerprint: String,
}

/// Builds and binds the endpoint.
pub fn bind(state: &State, addr: SocketAddr) -> Result<Bound> {
    zt_client::trust::install_provider();
    let tls = &state.config.tls;
    let configured = tls.cert.as_deref().zip(tls.key.as_deref());
    let id = cert::identity(configured, &state.config.state_dir)?;
    let fingerprint = id.fingerprint();
    let mut crypto = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])?
    .with_no_client_auth()
    .with_single_cert(id.chain, id.key)
    .context("building the QUIC TLS configuration")?;
    crypto.alpn_protocols = vec![ztp_proto::ALPN.to_vec()];
    let mut server =
        quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(crypto)?));
    server.transport_config(Arc::new(transport(&state.config.quic)?));
    let sock = zt_client::udp::bind(addr, state.config.quic.udp_buffer_bytes)?;
    let endpoint = Endpoint::new(
        EndpointConfig::default(),
        Some(server),
        sock,
        Arc::new(TokioRuntime),
    )
    .context("starting the QUIC endpoint")?;
    Ok(Bound {
        endpoint,
        fingerprint,
    })
}

/// Accepts connections until the endpoint is closed. Once `closing` turns
/// true (the shutdown deadline passed), each open connection announces
/// `shutting_down` on its control stream and closes.
pub async fn serve(state: Arc<State>, endpoint: Endpoint, closing: watch::Receiver<bool>) {
    let slots = Arc::new(Semaphore::new(state.config.quic.max_connections));
    while let Some(incoming) = endpoint.accept().await {
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            incoming.refuse();
            tracing::warn!("QUIC connection refused: connection limit reached");
            continue;
        };
        let (state, closing) = (Arc::clone(&state), closing.clone());
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            match incoming.await {
                // Every log line of the connection carries the peer's address.
                Ok(c) => {
                    conn::handle(state, c, closing)
                        .instrument(tracing::info_span!("quic", %remote))
                        .await;
                }
                Err(e) => tracing::debug!(%remote, error = %e, "QUIC handshake failed"),
            }
            drop(permit);
        });
    }
}
