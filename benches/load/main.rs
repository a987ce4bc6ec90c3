//! The daemon under load, against nginx serving the same bytes, in one run:
//!
//! 1. 256 HTTP connections through `wrk` (`mix.lua`: 20 % manifest
//!    requests, 80 % random ranges of 4 KiB to 1 MiB), ztserve against
//!    nginx: requests per second, throughput, p50 and p99 latency, errors,
//!    and ztserve's peak RSS.
//! 2. 64 client-library clients, each on its own connection, each fetching
//!    one random layer (2 components, digests checked) again and again:
//!    over ztp/1 (and over ztp/1 from a daemon that keeps no sent chunks
//!    in memory, `quic.piece_cache_bytes = 0`), and over HTTP from
//!    ztserve and from nginx; and the same
//!    clients against bare quinn (`bare.rs`): in a process of its own with
//!    the layers in memory (the ratio's peer), reading them from the file
//!    per request, and inside the clients' runtime.
//!
//! `cargo bench --bench load -- [SECONDS]` (default 15 per row);
//! `ZT_BENCH_ONLY=2` runs only that section; `ZT_DAEMON_BIN=PATH` serves
//! from another build of the daemon. Needs
//! `wrk` and `nginx` on PATH. Not part of `.ci/run`. Client and daemon share
//! the machine, so the figures are for the pair.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use zt_client::Via;
use zt_format::{DigestAlgorithm, ZtFile};

mod bare;
#[allow(dead_code)]
#[path = "../fetch/ceiling.rs"]
mod ceiling;
mod clients;
#[allow(dead_code)]
#[path = "../support/model.rs"]
mod model;

#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/common/nginx.rs"]
mod nginx;
#[allow(dead_code)]
#[path = "../fetch/peers.rs"]
mod peers;
mod wrk;
#[path = "../../tests/common/zt_bin.rs"]
mod zt_bin;

const FILE: &str = "load.zt";
const LAYERS: u64 = 32;
const MIB_PER_LAYER: usize = 4;
const HTTP_CONNECTIONS: usize = 256;
const QUIC_CLIENTS: u64 = 64;

/// A process's peak resident set since the last [`reset_peak`], in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// Starts a new peak-RSS measurement for `pid`.
fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

fn http_row(name: &str, r: &wrk::Report, peer: f64, rss: Option<f64>) {
    let rss = rss
        .map(|m| format!("   peak RSS {m:.0} MiB"))
        .unwrap_or_default();
    println!(
        "{name:<30} {:>9.0} req/s {:>7.1} MB/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}  {:.3}x nginx{rss}",
        r.per_sec,
        r.bytes_per_sec / 1e6,
        r.p50_ms,
        r.p99_ms,
        r.errors,
        r.per_sec / peer
    );
}

fn client_row(name: &str, r: &clients::Report, peer: Option<f64>, rss: Option<f64>) {
    let per_sec = r.fetches as f64 / r.secs;
    let ratio = peer
        .map(|p| format!("{:.3}x http<-nginx", per_sec / p))
        .unwrap_or_default();
    let rss = rss
        .map(|m| format!("   peak RSS {m:.0} MiB"))
        .unwrap_or_default();
    println!(
        "{name:<30} {per_sec:>9.1} fetch/s {:>7.1} MB/s  p50 {:>7.2} ms  p99 {:>7.2} ms  errors {}  {ratio}{rss}",
        r.bytes as f64 / r.secs / 1e6,
        r.p50_ms,
        r.p99_ms,
        r.errors,
    );
    if let Some(e) = &r.first_error {
        println!("#   first error: {e}");
    }
}

fn ensure_model(root: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(root)?;
    let p = root.join(FILE);
    if !p.exists() {
        model::layers(&p, LAYERS, MIB_PER_LAYER, Some(DigestAlgorithm::Crc32c))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(p)
}

fn main() -> Result<()> {
    if std::env::args().nth(1).as_deref() == Some(bare::SERVE_ARG) {
        return bare::serve_apart(LAYERS);
    }
    let secs: u64 = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(Ok(15), |s| s.parse())
        .context("SECONDS is a number")?;
    let data = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("load");
    let root = data.join("root");
    let path = ensure_model(&root)?;
    let file = ZtFile::open(&path)?;
    let size = std::fs::metadata(&path)?.len();
    let tail = size - file.parsed().location.offset;
    let (zp, np) = (peers::free_port()?, peers::free_port()?);
    let z = peers::ztserve(&root, zp, &data.join("state"))?;
    let _n = nginx::Nginx::start(&root, np, &data)?;
    // No row shares the CPU with the daemon's background hashing.
    peers::wait_quiet(zp)?;
    println!("# {FILE}: {size} bytes, {LAYERS} layers; {secs} s per row; client and server on one machine");

    let only = std::env::var("ZT_BENCH_ONLY").unwrap_or_default();
    let want = |k: &str| only.is_empty() || only.split(',').any(|x| x == k);
    if want("1") {
        section_wrk(z.id(), zp, np, tail, size, secs)?;
    }
    if want("2") {
        section_clients(z.id(), zp, np, &path, &data, secs)?;
    }
    Ok(())
}

/// Section 1: `wrk`'s mix against nginx and ztserve.
fn section_wrk(pid: u32, zp: u16, np: u16, tail: u64, size: u64, secs: u64) -> Result<()> {
    println!("# 1. {HTTP_CONNECTIONS} HTTP connections (wrk, 20% manifests, 80% ranges of 4 KiB-1 MiB); ratio = req/s against nginx");
    let nginx = wrk::run(
        &wrk::Target {
            base: format!("http://127.0.0.1:{np}"),
            file_path: format!("/{FILE}"),
            manifest_path: None,
            tail,
            size,
            name: "nginx",
        },
        HTTP_CONNECTIONS,
        secs,
    )?;
    http_row("wrk -> nginx", &nginx, nginx.per_sec, None);
    reset_peak(pid);
    let ours = wrk::run(
        &wrk::Target {
            base: format!("http://127.0.0.1:{zp}"),
            file_path: format!("/v1/files/{FILE}"),
            manifest_path: Some(format!("/v1/files/{FILE}/manifest")),
            tail,
            size,
            name: "ztserve",
        },
        HTTP_CONNECTIONS,
        secs,
    )?;
    http_row(
        "wrk -> ztserve",
        &ours,
        nginx.per_sec,
        Some(peak_rss_mib(pid)),
    );
    Ok(())
}

/// Section 2: library clients over HTTP and ztp/1, and bare quinn.
fn section_clients(pid: u32, zp: u16, np: u16, path: &Path, data: &Path, secs: u64) -> Result<()> {
    println!("# 2. {QUIC_CLIENTS} library clients, one connection each, fetching one random layer (2 components, crc32c checked) repeatedly; ratio = fetches/s against the same clients over HTTP from nginx");
    let rt = tokio::runtime::Runtime::new()?;
    let mut ztp = f64::NAN;
    let peer = rt.block_on(clients::run(
        &format!("http://127.0.0.1:{np}/{FILE}"),
        Via::Http,
        QUIC_CLIENTS,
        LAYERS,
        secs,
    ));
    let peer_rate = peer.fetches as f64 / peer.secs;
    client_row("64 x http <- nginx", &peer, Some(peer_rate), None);
    for (name, url, via) in [
        (
            "64 x http <- ztserve",
            format!("http://127.0.0.1:{zp}/v1/files/{FILE}"),
            Via::Http,
        ),
        (
            "64 x ztp/1 <- ztserve",
            format!("quic://127.0.0.1:{zp}/{FILE}"),
            Via::Quic,
        ),
    ] {
        reset_peak(pid);
        let r = rt.block_on(clients::run(&url, via, QUIC_CLIENTS, LAYERS, secs));
        client_row(name, &r, Some(peer_rate), Some(peak_rss_mib(pid)));
        if via == Via::Quic {
            ztp = r.fetches as f64 / r.secs;
        }
    }
    // The same daemon keeping no sent chunks in memory
    // (`quic.piece_cache_bytes = 0`): each chunk read from the page cache.
    let root = path.parent().context("the model's folder")?;
    let port = peers::free_port()?;
    let uncached = peers::ztserve_env(
        root,
        port,
        &data.join("state-none-kept"),
        &[("ZTSERVE_QUIC_PIECE_CACHE_BYTES", "0")],
    )?;
    peers::wait_quiet(port)?;
    let r = rt.block_on(clients::run(
        &format!("quic://127.0.0.1:{port}/{FILE}"),
        Via::Quic,
        QUIC_CLIENTS,
        LAYERS,
        secs,
    ));
    client_row(
        "64 x ztp/1 <- ztserve, none kept",
        &r,
        Some(peer_rate),
        Some(peak_rss_mib(uncached.id())),
    );
    let none_kept = r.fetches as f64 / r.secs;
    drop(uncached);
    // The bare quinn peer: the same layers' bytes from memory, served by
    // a process of its own (as the daemon is); then read from the file per
    // request; then served in the clients' own runtime.
    let state = data.join("bare-state");
    std::fs::create_dir_all(&state)?;
    let r = rt.block_on(bare::run_apart(
        path,
        LAYERS,
        false,
        &state,
        QUIC_CLIENTS,
        secs,
    ))?;
    let bare_rate = r.fetches as f64 / r.secs;
    client_row("64 x bare quinn (own process)", &r, Some(peer_rate), None);
    let r = rt.block_on(bare::run_apart(
        path,
        LAYERS,
        true,
        &state,
        QUIC_CLIENTS,
        secs,
    ))?;
    let pread_rate = r.fetches as f64 / r.secs;
    client_row("64 x bare quinn (pread each)", &r, Some(peer_rate), None);
    let layers = bare::layers(path, LAYERS, false)?;
    let r = rt.block_on(bare::run(layers, &state, QUIC_CLIENTS, secs))?;
    let inside_rate = r.fetches as f64 / r.secs;
    client_row("64 x bare quinn (same runtime)", &r, Some(peer_rate), None);
    println!(
        "ztp/1 against bare quinn in its own process, the same 64 clients: {:.3}x (against it reading the file: {:.3}x; in the clients' runtime: {:.3}x); with no chunks kept: {:.3}x",
        ztp / bare_rate,
        ztp / pread_rate,
        ztp / inside_rate,
        none_kept / bare_rate
    );
    Ok(())
}
