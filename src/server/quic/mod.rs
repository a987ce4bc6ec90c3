//! ztp/1 over QUIC (see `proto/PROTOCOL.md`): the endpoint, its transport
//! tuning, and the accept loop. Each connection is handled by the private
//! `conn` module.

pub mod cert;
mod conn;
mod send;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Endpoint, EndpointConfig, IdleTimeout, TokioRuntime, TransportConfig, VarInt};
use tokio::sync::Semaphore;

use super::State;

/// Transport settings for bulk transfer: large windows, one client control
/// stream, no client uni streams.
fn transport(state: &State) -> Result<TransportConfig> {
    let q = &state.config.quic;
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
    Ok(t)
}

/// Binds the UDP socket with large buffers and logs what the kernel granted.
fn socket(addr: SocketAddr, want: usize) -> Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(false)
            .context("enabling dual-stack IPv6 for QUIC")?;
    }
    let _ = s.set_recv_buffer_size(want);
    let _ = s.set_send_buffer_size(want);
    let (rcv, snd) = (
        s.recv_buffer_size().unwrap_or(0),
        s.send_buffer_size().unwrap_or(0),
    );
    // Linux reports double the requested size (bookkeeping included).
    if rcv < want || snd < want {
        tracing::warn!(wanted = want, recv = rcv, send = snd,
            "UDP socket buffers are smaller than requested; raise net.core.rmem_max and net.core.wmem_max for full QUIC throughput");
    }
    s.bind(&addr.into())
        .with_context(|| format!("binding UDP {addr}"))?;
    Ok(s.into())
}

/// A bound QUIC endpoint and the certificate fingerprint it presents.
#[derive(Debug)]
pub struct Bound {
    pub endpoint: Endpoint,
    pub fingerprint: String,
}

/// Builds and binds the endpoint.
pub fn bind(state: &State, addr: SocketAddr) -> Result<Bound> {
    super::tls::install_provider();
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
    server.transport_config(Arc::new(transport(state)?));
    let sock = socket(addr, state.config.quic.udp_buffer_bytes)?;
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

/// Accepts connections until the endpoint is closed.
pub async fn serve(state: Arc<State>, endpoint: Endpoint) {
    let slots = Arc::new(Semaphore::new(state.config.quic.max_connections));
    while let Some(incoming) = endpoint.accept().await {
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            incoming.refuse();
            tracing::warn!("QUIC connection refused: connection limit reached");
            continue;
        };
        let state = Arc::clone(&state);
        tokio::spawn(async move {
            let remote = incoming.remote_address();
            match incoming.await {
                Ok(c) => {
                    let span = tracing::info_span!("quic", %remote);
                    let _e = span.enter();
                    drop(_e);
                    conn::handle(state, c).await;
                }
                Err(e) => tracing::debug!(%remote, error = %e, "QUIC handshake failed"),
            }
            drop(permit);
        });
    }
}
