//! Remote loading against its peers, measured in one run:
//!
//! * `zt fetch` to a file over ztp/1 and over HTTP (from ztserve and from
//!   nginx), against `curl` fetching the raw file from nginx, with digests
//!   checked (crc32c, sha256, and for a file written without digests the
//!   sha256 digests the daemon computes for it), and a safetensors
//!   file copied byte for byte, checked against digests computed by the
//!   daemon (sha256) and by a second one (blake3); and the CPU the client
//!   and the daemon spend per fetch (section 1c, also alone);
//! * time to first layer through the client library;
//! * ztp/1 against a bare quinn transfer (the QUIC ceiling) and our HTTP,
//!   from a daemon reading the file (the page cache) and from one keeping
//!   the model in memory as the bare sender does
//!   (`quic.piece_cache_bytes` = 2 GiB);
//! * connect-and-manifest latency for a 10,000-object file;
//! * whole-file fetches at 0, 1 and 5 % packet loss (needs root).
//!
//! `cargo bench --bench fetch -- [ROUNDS]` (default 5; medians);
//! `ZT_BENCH_ONLY=1,4` runs only those sections; `ZT_DAEMON_BIN=PATH`
//! serves from another build of the daemon. The daemons' background
//! hashing (their startup check of every file's digests) is waited out
//! before the first round. Needs
//! `curl` and `nginx` on PATH. Not part of `.ci/run`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use zt_client::trust::Trust;
use zt_client::{Client, Options, Via};
use zt_format::{layer_index, DigestAlgorithm};

mod ceiling;
mod cpu;
mod delay;
mod lossy;
#[allow(dead_code)]
#[path = "../support/model.rs"]
mod model;

#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/common/netns.rs"]
mod netns;
#[allow(dead_code, unreachable_pub)]
#[path = "../../tests/common/nginx.rs"]
mod nginx;
mod peers;
#[path = "../../tests/common/zt_bin.rs"]
mod zt_bin;

const LAYERS: u64 = 32;
const MIB_PER_LAYER: usize = 32;
const MANY: usize = 10_000;
/// The layers model's tensors as a safetensors file (no digests of its
/// own: the daemon computes sha256 digests for it).
const SAFETENSORS: &str = "layers.safetensors";

/// `quic.piece_cache_bytes` of the daemon that keeps what it sends
/// (2 GiB: the 1 GiB model and room).
const KEPT: &str = "2147483648";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn rounds<F: FnMut() -> Result<f64>>(n: usize, mut f: F) -> Result<f64> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(f()?);
    }
    Ok(median(v))
}

/// What one library fetch saw.
struct Loaded {
    total: f64,
    first_layer: f64,
    /// Bytes delivered when layer 0 was complete, and in all.
    bytes_at_first: u64,
    bytes: u64,
    layer0_bytes: u64,
    /// Bytes of everything the send order puts up to layer 0's last
    /// component (the objects before the first layer, an embedding,
    /// included): what must arrive before layer 0 is complete.
    through0_bytes: u64,
}

/// Fetches every component of `url`; `keep` holds every delivered buffer
/// until the end (a model loaded into memory), otherwise each is handed
/// back for later components (a loader that copies tensors to a device).
async fn load(url: &str, via: Via, keep: bool, connections: Option<usize>) -> Result<Loaded> {
    let start = Instant::now();
    let options = Options {
        trust: Trust::Insecure,
        via: Some(via),
        connections,
        ..Options::default()
    };
    let client = Client::connect(url, options).await?;
    let mut f = client.fetch(&[], None).await?;
    let mut left: usize = f
        .manifest
        .objects
        .iter()
        .filter(|(n, _)| layer_index(n) == Some(0))
        .map(|(_, o)| o.components.len())
        .sum();
    let order = zt_format::send_order(&f.manifest, &[]);
    let last0 = order
        .iter()
        .rposition(|(o, ..)| layer_index(o) == Some(0))
        .unwrap_or(0);
    let through0: u64 = order.iter().take(last0 + 1).map(|(.., c)| c.length).sum();
    let (mut first, mut at_first, mut bytes, mut layer0) = (f64::NAN, 0, 0, 0);
    let mut kept = Vec::new();
    while let Some(d) = f.next().await {
        let d = d?;
        bytes += d.data.len() as u64;
        if layer_index(&d.object) == Some(0) {
            layer0 += d.data.len() as u64;
            left -= 1;
            if left == 0 {
                first = start.elapsed().as_secs_f64();
                at_first = bytes;
            }
        }
        if keep {
            kept.push(d.data);
        } else {
            client.recycle(d.data);
        }
    }
    let total = start.elapsed().as_secs_f64();
    drop(kept);
    Ok(Loaded {
        total,
        first_layer: first,
        bytes_at_first: at_first,
        bytes,
        layer0_bytes: layer0,
        through0_bytes: through0,
    })
}

async fn manifest_latency(url: &str, via: Via) -> Result<f64> {
    let start = Instant::now();
    let options = Options {
        trust: Trust::Insecure,
        via: Some(via),
        ..Options::default()
    };
    let m = Client::connect(url, options)
        .await?
        .manifest()
        .await?
        .manifest;
    anyhow::ensure!(
        m.objects.len() == MANY,
        "{url}: {} objects",
        m.objects.len()
    );
    Ok(start.elapsed().as_secs_f64())
}

fn row(what: &str, secs: f64, bytes: u64, peer: f64, peer_name: &str) {
    println!(
        "{what:<60} {secs:>8.3} s {:>7.3} GB/s   {:>6.3}x {peer_name}",
        bytes as f64 / secs / 1e9,
        peer / secs
    );
}

fn ensure_models(root: &Path) -> Result<()> {
    std::fs::create_dir_all(root)?;
    let variants = [
        ("layers-crc32c.zt", Some(DigestAlgorithm::Crc32c)),
        ("layers-sha256.zt", Some(DigestAlgorithm::Sha256)),
        ("layers-none.zt", None),
    ];
    for (name, digest) in variants {
        let p = root.join(name);
        if !p.exists() {
            eprintln!("writing {}", p.display());
            model::layers(&p, LAYERS, MIB_PER_LAYER, digest).map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    let st = root.join(SAFETENSORS);
    if !st.exists() {
        eprintln!("writing {}", st.display());
        model::layers_safetensors(&st, LAYERS, MIB_PER_LAYER)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let lossy = root.join(lossy::FILE);
    if !lossy.exists() {
        model::layers(&lossy, 8, MIB_PER_LAYER, Some(DigestAlgorithm::Crc32c))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let rtt = root.join(lossy::RTT_FILE);
    if !rtt.exists() {
        model::layers(&rtt, 8, 1, Some(DigestAlgorithm::Crc32c))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let many = root.join("many.zt");
    if !many.exists() {
        model::many_objects(&many, MANY).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(())
}

/// The servers and paths one run shares.
struct Bench {
    n: usize,
    size: u64,
    zp: u16,
    /// A second daemon, computing blake3 digests instead of sha256.
    zb: u16,
    /// A third, keeping every chunk it sends in memory
    /// (`quic.piece_cache_bytes` larger than the model), as bare quinn
    /// sends from memory: sections 2 and 3 only.
    zk: u16,
    np: u16,
    data: PathBuf,
    out: PathBuf,
    rt: tokio::runtime::Runtime,
}

impl Bench {
    fn zhttp(&self, f: &str) -> String {
        format!("http://127.0.0.1:{}/v1/files/{f}", self.zp)
    }
    fn zquic(&self, f: &str) -> String {
        format!("quic://127.0.0.1:{}/{f}", self.zp)
    }
    fn nhttp(&self, f: &str) -> String {
        format!("http://127.0.0.1:{}/{f}", self.np)
    }

    /// Section 1: `zt fetch` to disk against curl from nginx. Every round
    /// runs every variant once, in turn, so a slow spell of the machine
    /// falls on all of them alike.
    fn whole_files(&self) -> Result<()> {
        let (size, out) = (self.size, &self.out);
        println!(
            "# 1. whole file to disk; ratio = speed against curl fetching the raw file from nginx"
        );
        let peer = self.nhttp("layers-crc32c.zt");
        let own = self.zhttp("layers-crc32c.zt");
        // The daemon computes the safetensors file's digests once; its
        // manifest waits for them, so no round pays for them.
        let blake3 =
            |url: String| url.replace(&format!(":{}/", self.zp), &format!(":{}/", self.zb));
        for url in [self.zhttp(SAFETENSORS), blake3(self.zhttp(SAFETENSORS))] {
            let manifest = format!("{url}/manifest");
            peers::timed(&mut peers::curl(&manifest, Path::new("/dev/null")))?;
        }
        type Run<'a> = Box<dyn Fn() -> Result<f64> + 'a>;
        let curl_from = |url: String| -> Run<'_> {
            Box::new(move || {
                peers::remove_output(out);
                peers::timed(&mut peers::curl(&url, out))
            })
        };
        // zt fetch's peak RSS, by variant, kept beside its times.
        let rss: std::cell::RefCell<std::collections::BTreeMap<String, Vec<f64>>> =
            Default::default();
        let fetch = |url: String, extra: &'static [&'static str]| -> Run<'_> {
            let rss = &rss;
            Box::new(move || {
                let (t, kib) = peers::timed_rss(peers::zt_fetch(&url, out).args(extra))?;
                let key = format!("{url} {extra:?}");
                rss.borrow_mut().entry(key).or_default().push(kib as f64);
                Ok(t)
            })
        };
        let mut variants: Vec<(String, Run<'_>)> = vec![
            ("curl <- nginx (raw file)".into(), curl_from(peer.clone())),
            ("curl <- ztserve (raw file)".into(), curl_from(own.clone())),
            (
                // zt fetch syncs the file before renaming it into place; curl does not.
                "curl <- nginx, then sync -d (durable like zt)".into(),
                Box::new(|| {
                    peers::remove_output(out);
                    let t = peers::timed(&mut peers::curl(&peer, out))?;
                    let sync = peers::timed(std::process::Command::new("sync").arg("-d").arg(out))?;
                    Ok(t + sync)
                }),
            ),
        ];
        for (file, what) in [
            ("layers-crc32c.zt", "crc32c checked"),
            ("layers-sha256.zt", "sha256 checked"),
            ("layers-none.zt", "undigested, daemon sha256"),
        ] {
            for (via, url) in [("http", self.zhttp(file)), ("quic", self.zquic(file))] {
                variants.push((
                    format!("zt fetch {via} <- ztserve, {what}"),
                    fetch(url, &[]),
                ));
            }
        }
        // The write-ahead bound before it was 128 MiB, for comparison.
        for (via, url) in [
            ("http", own.clone()),
            ("quic", self.zquic("layers-crc32c.zt")),
        ] {
            variants.push((
                format!("zt fetch {via} <- ztserve, crc32c, --write-ahead-mib 512"),
                fetch(url, &["--write-ahead-mib", "512"]),
            ));
        }
        // ztp/1 by connections per fetch (the default is 2).
        for n in ["1", "4"] {
            variants.push((
                format!("zt fetch quic <- ztserve, crc32c, --connections {n}"),
                fetch(
                    self.zquic("layers-crc32c.zt"),
                    if n == "1" {
                        &["--connections", "1"]
                    } else {
                        &["--connections", "4"]
                    },
                ),
            ));
        }
        // A byte-identical copy of a safetensors file, checked against the
        // daemon's sha256 digests (and the second daemon's blake3), against
        // curl of the same file.
        let copy = out.with_extension("safetensors");
        variants.push((
            "curl <- nginx (the safetensors file)".into(),
            Box::new({
                let (url, copy) = (self.nhttp(SAFETENSORS), copy.clone());
                move || {
                    peers::remove_output(&copy);
                    peers::timed(&mut peers::curl(&url, &copy))
                }
            }),
        ));
        for (digest, via, url) in [
            ("sha256", "http", self.zhttp(SAFETENSORS)),
            ("sha256", "quic", self.zquic(SAFETENSORS)),
            ("blake3", "http", blake3(self.zhttp(SAFETENSORS))),
            ("blake3", "quic", blake3(self.zquic(SAFETENSORS))),
        ] {
            let copy = copy.clone();
            variants.push((
                format!("zt fetch {via} <- ztserve, safetensors copy, {digest}"),
                Box::new(move || peers::timed(&mut peers::zt_fetch(&url, &copy))),
            ));
        }
        variants.push((
            "zt fetch http <- ztserve, crc32c, --no-direct-io".into(),
            fetch(own.clone(), &["--no-direct-io"]),
        ));
        variants.push((
            "zt fetch http <- nginx (plain Range), crc32c".into(),
            fetch(peer.clone(), &[]),
        ));
        let mut times = vec![Vec::with_capacity(self.n); variants.len()];
        for _ in 0..self.n {
            for ((_, run), t) in variants.iter().zip(times.iter_mut()) {
                t.push(run()?);
            }
        }
        let medians: Vec<f64> = times.into_iter().map(median).collect();
        let curl = medians.first().copied().unwrap_or(f64::NAN);
        for ((what, _), t) in variants.iter().zip(medians) {
            row(what, t, size, curl, "curl+nginx");
        }
        println!("# 1b. zt fetch peak RSS (median of the rounds), MiB");
        for (key, kib) in rss.borrow().iter() {
            println!("{:>8.1} MiB  {key}", median(kib.clone()) / 1024.0);
        }
        peers::remove_output(out);
        peers::remove_output(&out.with_extension("safetensors"));
        Ok(())
    }

    /// Sections 2 and 3: the library into memory, time to first layer, and
    /// ztp/1 against the bare quinn ceiling and our HTTP.
    fn in_memory(&self) -> Result<()> {
        let (n, size) = (self.n, self.size);
        println!(
            "# 2. client library into memory: time to first layer (layer 0 delivered and verified)"
        );
        // Rounds interleave the transports and the bare quinn transfers,
        // so a slow spell of the machine falls on all of them alike. Like
        // the counting bare receiver, the consumer keeps nothing (buffers
        // go back to the client); the third variant keeps every tensor.
        let state = self.data.join("state");
        // Label, transport, URL, whether the consumer keeps every tensor,
        // connections (`None`: the default).
        let quic = self.zquic("layers-crc32c.zt");
        let kept = quic.replace(&format!(":{}/", self.zp), &format!(":{}/", self.zk));
        // Its first fetch reads the file and keeps the chunks; the rounds
        // are sent from memory.
        self.rt.block_on(load(&kept, Via::Quic, false, Some(1)))?;
        let urls = [
            (
                "Quic, 1 connection",
                Via::Quic,
                quic.clone(),
                false,
                Some(1),
            ),
            (
                "Http",
                Via::Http,
                self.zhttp("layers-crc32c.zt"),
                false,
                None,
            ),
            (
                "Quic keeping every tensor, 1 connection",
                Via::Quic,
                quic.clone(),
                true,
                Some(1),
            ),
            (
                "Quic, 2 connections",
                Via::Quic,
                quic.clone(),
                false,
                Some(2),
            ),
            (
                "Quic, 3 connections",
                Via::Quic,
                quic.clone(),
                false,
                Some(3),
            ),
            (
                "Quic, 4 connections",
                Via::Quic,
                quic.clone(),
                false,
                Some(4),
            ),
            (
                "Quic, 8 connections",
                Via::Quic,
                quic.clone(),
                false,
                Some(8),
            ),
            (
                "Quic from memory (a daemon keeping the model), 1 connection",
                Via::Quic,
                kept,
                false,
                Some(1),
            ),
        ];
        // The variant from the daemon keeping the model.
        const FROM_MEMORY: usize = 7;
        anyhow::ensure!(
            urls.get(FROM_MEMORY)
                .is_some_and(|u| u.0.starts_with("Quic from memory")),
            "FROM_MEMORY names another variant"
        );
        let mut loads: Vec<Vec<Loaded>> = urls.iter().map(|_| Vec::new()).collect();
        // The ceiling moves the served file's own bytes (ceiling.rs says why).
        let payload = bytes::Bytes::from(std::fs::read(self.data.join("root/layers-crc32c.zt"))?);
        let (mut bare, mut hot, mut copied) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..n {
            for ((_, via, url, keep, conns), runs) in urls.iter().zip(loads.iter_mut()) {
                runs.push(self.rt.block_on(load(url, *via, *keep, *conns))?);
            }
            use ceiling::{Sink, Source};
            // The bare receivers in turn, each round starting with the
            // next one, so that no receiver always runs first or last.
            let mut receivers = [
                (Source::Payload, Sink::Count, &mut bare),
                (Source::HotMib, Sink::Count, &mut hot),
                (Source::Payload, Sink::Copy, &mut copied),
            ];
            receivers.rotate_left(round % 3);
            for (source, sink, out) in receivers {
                let secs = ceiling::bare_quinn(&payload, source, sink, &state);
                out.push(self.rt.block_on(secs)?);
            }
        }
        drop(payload);
        // Round by round against the ceiling: from the page cache, and
        // from a daemon keeping the model in memory (the last variant);
        // and from the page cache against the bare receiver that copies.
        let paired = |peer: &[f64], runs: Option<&Vec<Loaded>>| -> Vec<f64> {
            peer.iter()
                .zip(runs.into_iter().flatten())
                .map(|(b, q)| b / q.total)
                .collect()
        };
        let paired_kept = paired(&bare, loads.get(FROM_MEMORY));
        let paired_copied = paired(&copied, loads.first());
        let paired = paired(&bare, loads.first());
        // The gap's parts as time ratios of the same round, whose product
        // is the ceiling's time over ztp/1's: the receiver's copy (the
        // ceiling against the copying receiver), the rest of the library
        // and the daemon (the copying receiver against ztp/1 from a
        // daemon keeping the model), and the daemon's page-cache reads
        // (ztp/1 from memory against ztp/1 from the page cache).
        let parts: Vec<(f64, f64, f64)> = bare
            .iter()
            .zip(&copied)
            .zip(loads.get(FROM_MEMORY).into_iter().flatten())
            .zip(loads.first().into_iter().flatten())
            .map(|(((b, c), m), q)| (b / c, c / m.total, m.total / q.total))
            .collect();
        let mut totals = vec![f64::NAN; urls.len()];
        for (i, ((label, ..), runs)) in urls.iter().zip(loads).enumerate() {
            let total = median(runs.iter().map(|r| r.total).collect());
            let first = median(runs.iter().map(|r| r.first_layer).collect());
            let share = |f: fn(&Loaded) -> u64| {
                median(runs.iter().map(|r| f(r) as f64 / r.bytes as f64).collect())
            };
            let bytes = runs.first().context("no runs")?.bytes;
            println!(
                "{label}: whole {total:.3} s ({:.3} GB/s), first layer {first:.3} s = {:.3} of the time; \
                 layer 0 is {:.3} of the bytes, {:.3} delivered by then",
                bytes as f64 / total / 1e9,
                first / total,
                share(|r| r.layer0_bytes),
                share(|r| r.bytes_at_first),
            );
            if let Some(t) = totals.get_mut(i) {
                *t = total;
            }
        }
        let http = totals.get(1).copied().unwrap_or(f64::NAN);
        println!(
            "# 2b. ztp/1 by connections per fetch; ratio = speed against our HTTP (8 connections)"
        );
        for ((label, via, ..), t) in urls.iter().zip(&totals) {
            if *via == Via::Quic {
                row(label, *t, size, http, "our HTTP");
            }
        }
        let (quic, quic_kept, from_memory) = (totals[0], totals[2], totals[FROM_MEMORY]);
        println!(
            "# 3. QUIC ceiling: bare quinn, one connection, one stream, the model's {size} bytes from memory"
        );
        let (ceiling, hot, copied) = (median(bare), median(hot), median(copied));
        let fetch = "ztp/1 library fetch, 1 connection, crc32c checked";
        for (name, secs, against, peer) in [
            ("bare quinn", ceiling, ceiling, "ceiling"),
            (
                "bare quinn, one cache-resident MiB resent",
                hot,
                ceiling,
                "ceiling",
            ),
            (
                "bare quinn, each chunk copied into a reused 32 MiB buffer",
                copied,
                ceiling,
                "ceiling",
            ),
            (fetch, quic, ceiling, "ceiling"),
            (fetch, quic, hot, "cache-resident resend"),
            (fetch, quic, copied, "bare quinn copying"),
            (
                "ztp/1 library fetch, 1 connection, keeping every tensor",
                quic_kept,
                ceiling,
                "ceiling",
            ),
            (fetch, quic, http, "our HTTP"),
            (
                "ztp/1 library fetch from a daemon keeping the model",
                from_memory,
                ceiling,
                "ceiling",
            ),
        ] {
            row(name, secs, size, against, peer);
        }
        println!(
            "ztp/1 against the ceiling, round by round (median of the rounds' ratios): {:.3}x; \
             from a daemon keeping the model in memory (quic.piece_cache_bytes = {KEPT}): {:.3}x",
            median(paired),
            median(paired_kept)
        );
        println!(
            "ztp/1 against bare quinn copying what it receives (as the library must), \
             round by round (median of the rounds' ratios): {:.3}x",
            median(paired_copied)
        );
        let part = |f: fn(&(f64, f64, f64)) -> f64| median(parts.iter().map(f).collect());
        println!(
            "the gap to the ceiling in parts, round by round (medians of the rounds' speed ratios): \
             the receiver's copy {:.3}x, the library and daemon past it {:.3}x, \
             the daemon's page-cache reads {:.3}x",
            part(|p| p.0),
            part(|p| p.1),
            part(|p| p.2)
        );
        Ok(())
    }

    /// Section 4: connect and read a 10,000-object manifest.
    fn manifests(&self) -> Result<()> {
        let n = self.n;
        println!("# 4. connect and read the manifest of a {MANY}-object file");
        let mut ztp = f64::NAN;
        let json = format!("{}/manifest", self.zhttp("many.zt"));
        let curl = rounds(n, || {
            peers::timed(&mut peers::curl(&json, Path::new("/dev/null")))
        })?;
        println!(
            "{:<44} {:>8.2} ms",
            "curl GET /v1/files/many.zt/manifest (JSON)",
            curl * 1e3
        );
        for (what, url, via) in [
            ("ztp/1 connect + manifest", self.zquic("many.zt"), Via::Quic),
            (
                "HTTP connect + footer + manifest, ztserve",
                self.zhttp("many.zt"),
                Via::Http,
            ),
            (
                "HTTP connect + footer + manifest, nginx",
                self.nhttp("many.zt"),
                Via::Http,
            ),
        ] {
            let t = rounds(n, || self.rt.block_on(manifest_latency(&url, via)))?;
            println!("{what:<44} {:>8.2} ms   {:.3}x curl", t * 1e3, curl / t);
            if via == Via::Quic {
                ztp = t;
            }
        }
        // The bare quinn peer: connect, ask, and read the same manifest's
        // CBOR (what the ztp/1 manifest message carries) on one stream.
        let file = zt_format::ZtFile::open(self.data.join("root/many.zt"))?;
        let cbor = bytes::Bytes::from(zt_format::manifest_cbor(file.manifest()));
        let state = self.data.join("bare-state");
        std::fs::create_dir_all(&state)?;
        let bare = rounds(n, || {
            self.rt
                .block_on(ceiling::bare_connect_and_read(&cbor, &state))
        })?;
        println!(
            "{:<44} {:>8.2} ms   ztp/1 takes {:.3}x bare quinn ({} bytes)",
            "bare quinn connect + the manifest's CBOR",
            bare * 1e3,
            ztp / bare,
            cbor.len()
        );
        // Where ztp/1's time goes: the same request by hand, its manifest
        // message read but the manifest not decoded, and the decoder alone.
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.zp));
        let message = rounds(n, || {
            self.rt
                .block_on(ceiling::ztp_manifest_message(addr, "many.zt"))
        })?;
        println!(
            "{:<44} {:>8.2} ms   {:.3}x bare quinn",
            "ztp/1 connect + manifest message, no decode",
            message * 1e3,
            message / bare
        );
        let limits = zt_format::Limits::default();
        let size = std::fs::metadata(self.data.join("root/many.zt"))?.len();
        let decode = rounds(n, || {
            let start = Instant::now();
            zt_format::container::decode_manifest(
                "many.zt",
                &cbor,
                size,
                &limits,
                zt_format::container::View::File,
            )?;
            Ok(start.elapsed().as_secs_f64())
        })?;
        println!(
            "{:<44} {:>8.2} ms   {:.3}x bare quinn",
            "decoding and validating that manifest",
            decode * 1e3,
            decode / bare
        );
        Ok(())
    }
}

fn main() -> Result<()> {
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(Ok(5), |s| s.parse())
        .context("ROUNDS is a number")?;
    let only = std::env::var("ZT_BENCH_ONLY").unwrap_or_default();
    let want = |k: &str| only.is_empty() || only.split(',').any(|x| x == k);
    let data = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fetch");
    let root = data.join("root");
    ensure_models(&root)?;
    let b = Bench {
        n,
        size: std::fs::metadata(root.join("layers-crc32c.zt"))?.len(),
        zp: peers::free_port()?,
        zb: peers::free_port()?,
        zk: peers::free_port()?,
        np: peers::free_port()?,
        out: data.join("out.zt"),
        rt: tokio::runtime::Runtime::new()?,
        data,
    };
    let z = peers::ztserve(&root, b.zp, &b.data.join("state"))?;
    let blake3 = [("ZTSERVE_DIGESTS_ALGORITHM", "blake3")];
    let _zb = peers::ztserve_env(&root, b.zb, &b.data.join("state-blake3"), &blake3)?;
    // Not inside the lossy namespace, which has daemons of its own.
    let in_memory = (want("2") || want("3")) && std::env::var_os("ZT_BENCH_LOSS").is_none();
    let _zk = match in_memory {
        true => Some(peers::ztserve_env(
            &root,
            b.zk,
            &b.data.join("state-kept"),
            &[("ZTSERVE_QUIC_PIECE_CACHE_BYTES", KEPT)],
        )?),
        false => None,
    };
    for port in [b.zp, b.zb] {
        peers::wait_quiet(port)?;
    }
    if _zk.is_some() {
        peers::wait_quiet(b.zk)?;
    }
    // The peer of sections 1, 4 and 5 only: the others run without nginx
    // installed (as on a machine lent for a few minutes).
    let nginx_needed = ["1", "4", "5"].iter().any(|k| want(k));
    let _n = match nginx_needed || std::env::var_os("ZT_BENCH_LOSS").is_some() {
        true => Some(nginx::Nginx::start(&root, b.np, &b.data)?),
        false => None,
    };
    // Inside the lossy namespace (section 5 runs this binary there).
    if let Ok(loss) = std::env::var("ZT_BENCH_LOSS") {
        return b.lossy(&loss);
    }
    println!(
        "# {n} rounds, medians; 127.0.0.1, files in the page cache; model {LAYERS} layers, {} bytes",
        b.size
    );
    if want("1") {
        b.whole_files()?;
    }
    if want("1") || want("1c") {
        b.cpu_per_fetch(z.id())?;
    }
    if want("2") || want("3") {
        b.in_memory()?;
    }
    if want("4") {
        b.manifests()?;
    }
    if want("5") {
        drop((z, _zb, _zk, _n));
        lossy::outer(n)?;
    }
    Ok(())
}
