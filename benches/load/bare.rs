//! The bare quinn peer of section 2's ztp/1 row: a quinn server holding
//! every layer's bytes in memory (the same bytes the daemon sends for a
//! layer's components), with the daemon's certificate, provider, socket
//! buffers and transport settings, and the same 64 clients, each on its
//! own connection, asking for one random layer after another on a stream
//! of its own and reading it to its end. No manifest, no digests, no
//! files: what QUIC alone costs on this machine.
//!
//! The server runs in a process of its own, as the daemon does (the bench
//! binary started again with [`SERVE_ARG`]), or in the clients' runtime,
//! where no second process competes for the two cores. A third variant
//! reads each layer from the file with `pread` per request (on the
//! runtime, from the page cache), as a server of files must.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use bytes::Bytes;
use zt_format::ZtFile;

use crate::ceiling;
use crate::clients::{Report, Tally};

/// What the bare server sends for a layer.
pub(crate) enum Layers {
    /// Each layer's bytes, in memory.
    Memory(Vec<Bytes>),
    /// The file and each layer's component spans (offset, length) in it,
    /// read per request.
    File(std::fs::File, Vec<Vec<(u64, u64)>>),
}

impl Layers {
    fn len(&self) -> usize {
        match self {
            Layers::Memory(l) => l.len(),
            Layers::File(_, l) => l.len(),
        }
    }

    /// Layer `i`'s bytes, as chunks to write in order.
    fn get(&self, i: usize) -> std::io::Result<Vec<Bytes>> {
        match self {
            Layers::Memory(l) => Ok(vec![l[i].clone()]),
            Layers::File(f, l) => l[i]
                .iter()
                .map(|&(offset, len)| {
                    // Into the new buffer's spare capacity: never zeroed
                    // (the daemon's reads are not).
                    let mut buf = Vec::with_capacity(len as usize);
                    while (buf.len() as u64) < len {
                        let at = offset + buf.len() as u64;
                        let spare = rustix::buffer::spare_capacity(&mut buf);
                        if rustix::io::pread(f, spare, at)? == 0 {
                            return Err(std::io::ErrorKind::UnexpectedEof.into());
                        }
                    }
                    Ok(Bytes::from(buf))
                })
                .collect(),
        }
    }
}

/// Serves `layers` (by index) on every bidirectional stream: the client
/// writes the index as 8 bytes, the server answers with the layer.
fn serve(ep: quinn::Endpoint, layers: Arc<Layers>) {
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
                        let Ok(chunks) = layers.get(i) else { return };
                        for c in chunks {
                            if tx.write_chunk(c).await.is_err() {
                                return;
                            }
                        }
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

/// The first argument that makes the bench binary a bare server:
/// `SERVE_ARG FILE STATE_DIR memory|pread`; it prints its port and serves
/// until its standard input closes.
pub(crate) const SERVE_ARG: &str = "--bare-quinn-server";

/// Each of the first `n` layers' component spans (offset, length) in the
/// `.zt` file at `path`.
fn spans(path: &Path, n: u64) -> Result<Vec<Vec<(u64, u64)>>> {
    let f = ZtFile::open(path)?;
    Ok((0..n)
        .map(|l| {
            let prefix = format!("model.layers.{l}.");
            f.manifest()
                .components()
                .filter(|(name, _, _)| name.starts_with(&prefix))
                .map(|(_, _, c)| (c.offset, c.length))
                .collect()
        })
        .collect())
}

/// The first `n` layers of the `.zt` file at `path`: in memory (one
/// buffer per layer), or read from the file per request (`pread`).
pub(crate) fn layers(path: &Path, n: u64, pread: bool) -> Result<Layers> {
    let spans = spans(path, n)?;
    if pread {
        return Ok(Layers::File(std::fs::File::open(path)?, spans));
    }
    let bytes = std::fs::read(path)?;
    Ok(Layers::Memory(
        spans
            .iter()
            .map(|layer| {
                let mut buf = Vec::new();
                for &(offset, len) in layer {
                    buf.extend_from_slice(&bytes[offset as usize..(offset + len) as usize]);
                }
                Bytes::from(buf)
            })
            .collect(),
    ))
}

/// The bare server's process: see [`SERVE_ARG`].
pub(crate) fn serve_apart(n: u64) -> Result<()> {
    let mut args = std::env::args().skip(2);
    let (Some(file), Some(state), Some(mode)) = (args.next(), args.next(), args.next()) else {
        anyhow::bail!("usage: {SERVE_ARG} FILE STATE_DIR memory|pread");
    };
    let layers = layers(Path::new(&file), n, mode == "pread")?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let ep = ceiling::server(Path::new(&state)).context("bare quinn server")?;
        println!("{}", ep.local_addr()?.port());
        serve(ep, Arc::new(layers));
        // Until the bench closes our standard input.
        tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink()))
            .await??;
        anyhow::Ok(())
    })
}

/// [`run`] against a bare server in a process of its own, serving the
/// first `n` layers of the `.zt` file at `path` from memory, or read per
/// request (`pread`).
pub(crate) async fn run_apart(
    path: &Path,
    n: u64,
    pread: bool,
    state_dir: &Path,
    clients: u64,
    secs: u64,
) -> Result<Report> {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe()?)
        .arg(SERVE_ARG)
        .arg(path)
        .arg(state_dir)
        .arg(if pread { "pread" } else { "memory" })
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the bare quinn server")?;
    // Blocking here is fine: the bench's one runtime waits in `block_on`
    // for this, and nothing else runs on it meanwhile.
    let mut line = String::new();
    let out = child.stdout.take().context("the bare server's output")?;
    std::io::BufReader::new(out).read_line(&mut line)?;
    let port: u16 = line.trim().parse().context("the bare server's port")?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let report = drive_all(addr, n, clients, secs).await;
    drop(child.stdin.take());
    let _ = child.wait();
    Ok(report)
}

/// `clients` clients against the bare server at `addr` for `secs` seconds.
async fn drive_all(addr: SocketAddr, n: u64, clients: u64, secs: u64) -> Report {
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|c| tokio::spawn(one(addr, c + 1, n, until)))
        .collect();
    crate::clients::gather(tasks, start).await
}

/// `clients` bare clients for `secs` seconds against a bare server of
/// `layers` (each layer's bytes, in order).
pub(crate) async fn run(
    layers: Layers,
    state_dir: &Path,
    clients: u64,
    secs: u64,
) -> Result<Report> {
    let n = layers.len() as u64;
    let ep = ceiling::server(state_dir).context("bare quinn server")?;
    let addr = ep.local_addr()?;
    serve(ep, Arc::new(layers));
    Ok(drive_all(addr, n, clients, secs).await)
}
