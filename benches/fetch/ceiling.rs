//! The QUIC ceiling: one bare quinn connection carrying a payload on one
//! stream from memory, with ztserve's certificate, each end's provider
//! (the daemon's aws-lc-rs sending, the client's ring receiving), socket
//! buffers and transport settings on both ends, and nothing else.
//!
//! The payload is the model file itself, read into memory before the
//! clock starts, so the ceiling moves the same bytes ztp/1 does. Resending
//! one cache-resident MiB instead ([`Source::HotMib`]) ran 1.05x to 1.37x
//! faster on this machine class: the sender's packet copies then never
//! leave the CPU cache, which no transfer of a 1 GiB file can match. Both
//! are reported; the ratio is taken against the model's bytes.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use bytes::Bytes;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{Endpoint, TokioRuntime};
use zt_client::trust::{client_config, Trust};
use zt_client::udp;
use zt_client::ztp::transport as client_transport;
use ztserve::server::config::QuicConfig;
use ztserve::server::quic::{cert, transport as server_transport};

const ALPN: &[u8] = b"bench";

pub(crate) fn server(state_dir: &Path) -> Result<Endpoint> {
    zt_client::trust::install_provider();
    let id = cert::identity(None, state_dir)?;
    let mut crypto = rustls::ServerConfig::builder_with_provider(cert::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(id.chain, id.key)?;
    crypto.alpn_protocols = vec![ALPN.to_vec()];
    let mut config =
        quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(crypto)?));
    let t = server_transport(&QuicConfig::default(), loopback_payload())?;
    config.transport_config(Arc::new(t));
    let sock = udp::bind("127.0.0.1:0".parse()?, udp::DEFAULT_BUFFER_BYTES)?;
    Ok(Endpoint::new(
        udp::endpoint_config(loopback_payload()),
        Some(config),
        sock,
        Arc::new(TokioRuntime),
    )?)
}

/// The datagram bound ztserve and `zt` pick on loopback, so that bare
/// quinn runs with the same settings.
fn loopback_payload() -> u16 {
    udp::max_payload(None, std::net::Ipv4Addr::LOCALHOST.into())
}

pub(crate) fn client() -> Result<Endpoint> {
    client_for(ALPN)
}

fn client_for(alpn: &[u8]) -> Result<Endpoint> {
    let tls = client_config(&Trust::Insecure, alpn)?;
    let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls)?));
    let mut t = client_transport(zt_client::IDLE_TIMEOUT);
    udp::datagrams_up_to(&mut t, loopback_payload());
    config.transport_config(Arc::new(t));
    let sock = udp::bind("127.0.0.1:0".parse()?, udp::DEFAULT_BUFFER_BYTES)?;
    let mut ep = Endpoint::new(
        udp::endpoint_config(loopback_payload()),
        None,
        sock,
        Arc::new(TokioRuntime),
    )?;
    ep.set_default_client_config(config);
    Ok(ep)
}

/// What the bare sender writes, in 1 MiB chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The payload from start to end.
    Payload,
    /// The payload's first MiB, resent until as many bytes have gone.
    HotMib,
}

/// What the bare receiver does with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sink {
    /// Counts them and lets quinn's buffers go: the transport alone.
    Count,
    /// Copies each chunk into a buffer used again and again, every page of
    /// it written before the clock starts: the copy a receiver makes that
    /// gathers the bytes into buffers of its own, as the library does into
    /// its aligned ones. (The library's pool starts empty each fetch, so
    /// its first buffers are fresh memory, which this receiver never pays.)
    Copy,
}

const CHUNK: usize = 1 << 20;

/// The reused buffer of [`Sink::Copy`]: a layer's size.
const SINK_BYTES: usize = 32 << 20;

/// Seconds to move `payload.len()` bytes over one fresh connection
/// (handshake excluded).
pub(crate) async fn bare_quinn(
    payload: &Bytes,
    source: Source,
    sink: Sink,
    state_dir: &Path,
) -> Result<f64> {
    let server = server(state_dir)?;
    let addr: SocketAddr = server.local_addr()?;
    let bytes = payload.len() as u64;
    let payload = payload.clone();
    let sender = tokio::spawn(async move {
        let conn = server.accept().await.context("no connection")?.await?;
        let mut s = conn.open_uni().await?;
        let hot = payload.slice(..CHUNK.min(payload.len()));
        let mut pos = 0;
        while pos < payload.len() {
            let n = (payload.len() - pos).min(CHUNK);
            let chunk = match source {
                Source::Payload => payload.slice(pos..pos + n),
                Source::HotMib => hot.slice(..n),
            };
            s.write_chunk(chunk).await?;
            pos += n;
        }
        s.finish()?;
        let _ = s.stopped().await;
        conn.close(0u32.into(), b"");
        server.wait_idle().await;
        anyhow::Ok(())
    });
    // Faulted in before the clock starts: filled with ones, every page
    // written (zeros would be mapped lazily, and faulted in on the clock).
    let mut kept = match sink {
        Sink::Count => Vec::new(),
        Sink::Copy => vec![1u8; SINK_BYTES],
    };
    let ep = client()?;
    let conn = ep.connect(addr, "localhost")?.await?;
    let start = Instant::now();
    let mut r = conn.accept_uni().await?;
    let mut got = 0u64;
    let mut at = 0;
    while let Some(c) = r.read_chunk(usize::MAX, true).await? {
        got += c.bytes.len() as u64;
        if sink == Sink::Copy {
            let mut bytes = &c.bytes[..];
            while !bytes.is_empty() {
                let n = bytes.len().min(SINK_BYTES - at);
                kept[at..at + n].copy_from_slice(&bytes[..n]);
                bytes = &bytes[n..];
                at = (at + n) % SINK_BYTES;
            }
        }
    }
    std::hint::black_box(&kept);
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(got == bytes, "bare quinn moved {got} of {bytes} bytes");
    conn.close(0u32.into(), b"");
    sender.await??;
    ep.wait_idle().await;
    Ok(secs)
}

/// Seconds for a fresh client to connect (handshake included), ask on a
/// bidirectional stream, and read `payload` to its end: the bare quinn
/// peer of ztp/1's connect-and-manifest. The server is up before the
/// clock starts, as the daemon is.
pub(crate) async fn bare_connect_and_read(payload: &Bytes, state_dir: &Path) -> Result<f64> {
    let server = server(state_dir)?;
    let addr: SocketAddr = server.local_addr()?;
    let payload = payload.clone();
    let bytes = payload.len();
    let sender = tokio::spawn(async move {
        let conn = server.accept().await.context("no connection")?.await?;
        let (mut tx, mut rx) = conn.accept_bi().await?;
        let mut ask = [0u8; 1];
        rx.read_exact(&mut ask).await?;
        tx.write_chunk(payload).await?;
        tx.finish()?;
        let _ = tx.stopped().await;
        conn.closed().await;
        server.wait_idle().await;
        anyhow::Ok(())
    });
    let ep = client()?;
    let start = Instant::now();
    let conn = ep.connect(addr, "localhost")?.await?;
    let (mut tx, mut rx) = conn.open_bi().await?;
    tx.write_all(b"?").await?;
    let got = rx.read_to_end(usize::MAX).await?;
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(
        got.len() == bytes,
        "bare quinn moved {} of {bytes} bytes",
        got.len()
    );
    conn.close(0u32.into(), b"");
    sender.await??;
    ep.wait_idle().await;
    Ok(secs)
}

/// Seconds to connect to a ztserve at `addr` over ztp/1, ask for `path`'s
/// manifest (`manifest_only`) and read the `manifest` message, decoding
/// the message but not the manifest it carries: what `zt-client` does
/// before its manifest decoder runs, done by hand.
pub(crate) async fn ztp_manifest_message(addr: SocketAddr, path: &str) -> Result<f64> {
    use ztp_proto::{frame, Deframer, Get, Message};
    let ep = client_for(ztp_proto::ALPN)?;
    let start = Instant::now();
    let conn = ep.connect(addr, "localhost")?.await?;
    let (mut tx, mut rx) = conn.open_bi().await?;
    let get = Message::Get(Get {
        id: 1,
        path: path.to_owned(),
        manifest_only: true,
        ..Get::default()
    });
    tx.write_all(&frame(&get)?).await?;
    let mut d = Deframer::new(usize::MAX);
    let mut buf = vec![0u8; 1 << 16];
    let bytes = loop {
        if let Some(m) = d.next_message()? {
            match m {
                Message::Manifest(m) => break m.manifest.len(),
                other => anyhow::bail!("{path}: {} before the manifest", other.kind()),
            }
        }
        let n = rx
            .read(&mut buf)
            .await?
            .context("the control stream ended before the manifest")?;
        d.push(buf.get(..n).unwrap_or_default());
    };
    let secs = start.elapsed().as_secs_f64();
    anyhow::ensure!(bytes > 0, "{path}: an empty manifest");
    conn.close(0u32.into(), b"");
    ep.wait_idle().await;
    Ok(secs)
}
