//! ztp/1 over QUIC (see `proto/PROTOCOL.md`): the endpoint, its transport
//! tuning, and the accept loop. Each connection is handled by the private
//! `conn` module.
//!
//! May use: `serve` (the plans and refusals it carries out), `catalog`,
//! `integrity` (a component checked before its stream opens), `store` (a
//! part's bytes), `config`, `ztp-proto` (the protocol's rules) and
//! `zt-format`.

pub(crate) mod budget;
mod cancel;
pub mod cert;
mod congestion;
mod conn;
mod control;
pub(crate) mod kept;
mod path;
mod refused;
mod send;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Endpoint, IdleTimeout, TokioRuntime, TransportConfig, VarInt};
use tokio::sync::{watch, Semaphore};
use tracing::Instrument;

use crate::server::config::{Congestion, QuicConfig};
use crate::server::State;

/// Transport settings for bulk transfer to a peer whose datagrams may
/// grow to `payload` bytes ([`zt_client::udp::max_payload`]): large
/// windows, one client control stream, no client uni streams, MTU
/// discovery up to `payload`, and the configured congestion controller
/// (`auto`: by the connection's round trip, `congestion.rs`), which starts
/// (CUBIC and NewReno) at [`zt_client::udp::initial_window`] for that
/// size; BBR starts at its own 240,000 bytes.
pub fn transport(q: &QuicConfig, payload: u16) -> Result<TransportConfig> {
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
    // Sets CUBIC, sized for `payload`; replaced below if configured so.
    zt_client::udp::datagrams_up_to(&mut t, payload);
    match q.congestion {
        Congestion::Auto => {
            let wide_area = Duration::from_millis(q.wide_area_rtt_ms);
            t.congestion_controller_factory(Arc::new(congestion::ByRoundTripConfig::new(
                zt_client::udp::cubic(payload),
                wide_area,
            )));
        }
        Congestion::Cubic => {}
        Congestion::Bbr => {
            t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
        }
        Congestion::NewReno => {
            let mut reno = quinn::congestion::NewRenoConfig::default();
            reno.initial_window(zt_client::udp::initial_window(payload));
            t.congestion_controller_factory(Arc::new(reno));
        }
    }
    Ok(t)
}

/// A bound QUIC endpoint, the certificate fingerprint it presents, and
/// the server configuration for each kind of peer.
#[derive(Debug)]
pub struct Bound {
    pub endpoint: Endpoint,
    pub fingerprint: String,
    paths: Arc<path::Paths>,
}

/// Builds and binds the endpoint.
pub fn bind(state: &State, addr: SocketAddr) -> Result<Bound> {
    zt_client::trust::install_provider();
    let tls = &state.config.tls;
    let configured = tls.cert.as_deref().zip(tls.key.as_deref());
    let id = cert::identity(configured, &state.config.state_dir)?;
    let fingerprint = id.fingerprint();
    let mut crypto = rustls::ServerConfig::builder_with_provider(cert::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(id.chain, id.key)
        .context("building the QUIC TLS configuration")?;
    crypto.alpn_protocols = vec![ztp_proto::ALPN.to_vec()];
    crypto.session_storage = state.resumptions.store("quic");
    let base = quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(crypto)?));
    let q = &state.config.quic;
    let paths = path::Paths::new(q.max_udp_payload, &base, |up_to| transport(q, up_to))?;
    let sock = zt_client::udp::bind(addr, q.udp_buffer_bytes)?;
    let (gso, gro) = path::Paths::offloads(&sock);
    state.metrics.quic_offloads(gso, gro);
    // Peers may send datagrams as large as the larger bound.
    let endpoint = Endpoint::new(
        zt_client::udp::endpoint_config(paths.largest()),
        Some(paths.any().as_ref().clone()),
        sock,
        Arc::new(TokioRuntime),
    )
    .context("starting the QUIC endpoint")?;
    Ok(Bound {
        endpoint,
        fingerprint,
        paths: Arc::new(paths),
    })
}

/// Accepts connections until the endpoint is closed. Once `stopping`
/// turns true (the daemon is shutting down), each open connection refuses
/// new requests and, once those in flight are answered (at once when it is
/// idle), announces `shutting_down` on its control stream and closes; once
/// `closing` turns true (the shutdown deadline passed), those still open
/// do so whatever is in flight.
pub async fn serve(
    state: Arc<State>,
    bound: Bound,
    stopping: watch::Receiver<bool>,
    closing: watch::Receiver<bool>,
) {
    let Bound {
        endpoint, paths, ..
    } = bound;
    let slots = Arc::new(Semaphore::new(state.config.quic.max_connections));
    while let Some(incoming) = endpoint.accept().await {
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            incoming.refuse();
            tracing::warn!("QUIC connection refused: connection limit reached");
            continue;
        };
        let (state, paths) = (Arc::clone(&state), Arc::clone(&paths));
        let (stopping, closing) = (stopping.clone(), closing.clone());
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            let connecting = incoming.accept_with(paths.config_for(remote.ip()));
            match connecting {
                Ok(connecting) => match connecting.await {
                    // Every log line of the connection carries the peer's address.
                    Ok(c) => {
                        conn::handle(Arc::clone(&state), c.clone(), stopping, closing)
                            .instrument(tracing::info_span!("quic", %remote))
                            .await;
                        let controller = congestion::name(c.congestion_state());
                        state.metrics.quic_ended(&c.stats(), controller);
                    }
                    Err(e) => tracing::debug!(%remote, error = %e, "QUIC handshake failed"),
                },
                Err(e) => tracing::debug!(%remote, error = %e, "QUIC handshake failed"),
            }
            drop(permit);
        });
    }
}
