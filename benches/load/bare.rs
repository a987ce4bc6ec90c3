//! The bare quinn peer of section 2's ztp/1 row: a quinn server holding
//! every layer's bytes in memory (the same bytes the daemon sends for a
//! layer's components), with the daemon's certificate, provider, socket
//! buffers and transport settings, and the same 64 clients, each on its
//! own connection, asking for one random layer after another on a stream
//! of its own and reading it to its end. No manifest, no digests, no
//! files: what QUIC alone costs on this machine.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;

use crate::ceiling;
use crate::clients::{Report, Tally};

/// Serves `layers` (by index) on every bidirectional stream: the client
/// writes the index as 8 bytes, the server answers with the layer.
fn serve(ep: quinn::Endpoint, layers: Arc<Vec<Bytes>>) {
    tokio::spawn(async move {
        while let Some(incoming) = ep.accept().await {
            let layers = Arc::clone(&layers);
            tokio::spawn(async move {
                let Ok(conn) = incoming.await else { return };
                while let Ok((mut tx, mut rx)) = conn.accept_bi().await {
                    let layers = Arc::clone(&layers);
                    tokio::spawn(async move {
                        let mut ask = [0u8; 8];
                        if rx.read_exact(&mut ask).await.is_err() {
                            return;
                        }
                        let i = u64::from_le_bytes(ask) as usize % layers.len();
                        let _ = tx.write_chunk(layers[i].clone()).await;
                        let _ = tx.finish();
                    });
                }
            });
        }
    });
}

async fn one(addr: SocketAddr, seed: u64, layers: u64, until: Instant) -> Tally {
    let mut t = Tally::default();
    let ep = match ceiling::client() {
        Ok(ep) => ep,
        Err(e) => {
            t.failed(&e);
            return t;
        }
    };
    let connected = async { anyhow::Ok(ep.connect(addr, "localhost")?.await?) }.await;
    let conn = match connected {
        Ok(c) => c,
        Err(e) => {
            t.failed(&e);
            return t;
        }
    };
    let t = crate::clients::drive(t, seed, layers, until, |layer| {
        let conn = &conn;
        async move {
            let (mut tx, mut rx) = conn.open_bi().await?;
            tx.write_all(&layer.to_le_bytes()).await?;
            tx.finish()?;
            anyhow::Ok(rx.read_to_end(usize::MAX).await?.len() as u64)
        }
    })
    .await;
    conn.close(0u32.into(), b"");
    t
}

/// `clients` bare clients for `secs` seconds against a bare server of
/// `layers` (each layer's bytes, in order).
pub(crate) async fn run(
    layers: Vec<Bytes>,
    state_dir: &Path,
    clients: u64,
    secs: u64,
) -> Result<Report> {
    let n = layers.len() as u64;
    let ep = ceiling::server(state_dir).context("bare quinn server")?;
    let addr = ep.local_addr()?;
    serve(ep, Arc::new(layers));
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|c| tokio::spawn(one(addr, c + 1, n, until)))
        .collect();
    Ok(crate::clients::gather(tasks, start).await)
}
