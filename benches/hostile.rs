//! Hostile load against a release daemon with default settings, on
//! loopback (issue 28): for each attack, the daemon's peak RSS during it
//! (`VmHWM`, reset before each by `clear_refs`), the latency of `/healthz`
//! asked every 20 ms on a fresh connection meanwhile (p50, p99, worst; a
//! probe that fails counts as 10 s),
//! and whether a good client's `zt fetch` of a 4 MiB file, which verifies
//! its digest, succeeded meanwhile. The
//! attacks are the ones issue 28 lists that the daemon bounds so far:
//!
//! - 4,200 connections each asking for a 128 MiB file and reading 1 KiB
//!   of it a second, for 20 s (slow readers);
//! - 13 HTTP/2 connections (prior knowledge) of 16 streams each of a 128
//!   MiB file, with a shut flow-control window, for 20 s;
//! - 5,000 connections sending their headers a byte a second (slowloris);
//! - 8 concurrent `?decode=1` of a zstd component that decodes to 512 MiB
//!   from a small file;
//! - 16 concurrent first requests for the summary of a 128 MiB tensor;
//! - 64 concurrent JSON manifests of a `.zt` file of 100,000 objects;
//! - a safetensors file whose 77 MB header holds a million tensors, moved
//!   into the root (refused by name, `manifest-over-memory`);
//! - 20,000 manifest requests with distinct selections that match nothing;
//! - 40 objects tables selected with a 1,024-character `*a*a…b` pattern
//!   against 10,000 names of 1,000 characters;
//! - 64 ztp/1 clients asking for a cold 512 MiB file again and again for
//!   10 s, without a token or with a wrong one, each on a fresh
//!   connection, against a second daemon that wants a token and hashes in
//!   the background at 1 MiB/s: what they made it hash and its CPU time.
//!
//! `cargo bench --bench hostile` (as root: `clear_refs` needs it). Not part
//! of `.ci/run`; `tests/hostile_load.rs` holds the short versions.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

/// The daemon under attack.
struct Daemon {
    child: Child,
    addr: String,
    /// The bearer token its data routes want, if any.
    token: Option<String>,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    fn start(root: &Path, state: &Path) -> Result<Daemon> {
        Daemon::start_with(root, state, &[], None)
    }

    /// A daemon with `args` besides the root, address and state, whose
    /// data routes want `token`.
    fn start_with(root: &Path, state: &Path, args: &[&str], token: Option<&str>) -> Result<Daemon> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_ztserve"))
            .args(["--root", root.to_str().context("root")?])
            .args(["--listen", &addr, "--log-level", "warn"])
            .args(["--state-dir", state.to_str().context("state")?])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let d = Daemon {
            child,
            addr,
            token: token.map(str::to_owned),
        };
        let start = Instant::now();
        while !get(&d.addr, "/readyz").is_ok_and(|r| r.0 == 200) {
            anyhow::ensure!(start.elapsed() < Duration::from_secs(60), "not ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(d)
    }

    /// User and system CPU time used so far, in clock ticks.
    fn cpu_ticks(&self) -> u64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).unwrap_or_default();
        // Past the command's name in parentheses: state is field 3, utime
        // and stime fields 14 and 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        tick(11) + tick(12)
    }

    fn status(&self, key: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(key))
                    .and_then(|v| v.split_whitespace().next()?.parse().ok())
            })
            .unwrap_or(0)
    }

    /// Resets the peak RSS to the current RSS.
    fn reset_peak(&self) {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5");
    }
}

/// Sends a request in one write (split, Nagle's algorithm and delayed
/// ACKs would cost it 40 ms); `close`: on a fresh connection that ends
/// after it.
fn ask(c: &mut TcpStream, path: &str, close: bool) -> std::io::Result<()> {
    c.set_nodelay(true)?;
    c.set_read_timeout(Some(Duration::from_secs(120)))?;
    let close = if close { "Connection: close\r\n" } else { "" };
    c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n{close}\r\n").as_bytes())
}

/// A response's head: its status and its `Content-Length` (0 when none).
fn read_head(c: &mut TcpStream) -> std::io::Result<(u16, u64)> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        c.read_exact(&mut byte)?;
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let len = text
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, len))
}

/// One request on a fresh connection: status and body.
fn get(addr: &str, path: &str) -> std::io::Result<(u16, Vec<u8>)> {
    let mut c = TcpStream::connect(addr)?;
    ask(&mut c, path, true)?;
    let (status, _) = read_head(&mut c)?;
    let mut body = Vec::new();
    c.read_to_end(&mut body)?;
    Ok((status, body))
}

/// One request on a fresh connection, its body read and dropped: status
/// and body length.
fn get_len(addr: &str, path: &str) -> std::io::Result<(u16, u64)> {
    let mut c = TcpStream::connect(addr)?;
    ask(&mut c, path, true)?;
    let (status, _) = read_head(&mut c)?;
    let len = std::io::copy(&mut c, &mut std::io::sink())?;
    Ok((status, len))
}

/// Requests on one kept-alive connection: the status of each.
struct KeepAlive(TcpStream);

impl KeepAlive {
    fn get(&mut self, path: &str) -> std::io::Result<u16> {
        ask(&mut self.0, path, false)?;
        let (status, len) = read_head(&mut self.0)?;
        std::io::copy(&mut (&mut self.0).take(len), &mut std::io::sink())?;
        Ok(status)
    }
}

/// `/healthz` every 20 ms until `stop`: each latency (a failure counts as
/// 10 s).
fn probe(addr: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<Duration>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let t = Instant::now();
            let ok = get(&addr, "/healthz").is_ok_and(|r| r.0 == 200);
            out.push(if ok {
                t.elapsed()
            } else {
                Duration::from_secs(10)
            });
            std::thread::sleep(Duration::from_millis(20));
        }
        out
    })
}

fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

/// A good client: `zt fetch http://ADDR/good.zt` (release `zt`, beside
/// the daemon), which verifies every digest; whether it succeeded.
fn good_fetch(addr: &str, token: Option<&str>) -> bool {
    let zt = Path::new(env!("CARGO_BIN_EXE_ztserve")).with_file_name("zt");
    let Ok(out) = tempfile::tempdir() else {
        return false;
    };
    let mut cmd = Command::new(zt);
    if let Some(token) = token {
        cmd.env("ZT_TOKEN", token);
    }
    cmd.args(["fetch", &format!("http://{addr}/good.zt"), "-o"])
        .arg(out.path().join("good.zt"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `attack` with the prober and a good client (starting 2 s in, when
/// the attack has taken hold): prints the row.
fn measure(name: &str, d: &Daemon, attack: impl FnOnce() -> String) {
    // `ZT_HOSTILE_ONLY=HTTP/2,slow…`: only the attacks whose names hold one.
    if let Ok(only) = std::env::var("ZT_HOSTILE_ONLY") {
        if !only.split(',').any(|o| name.contains(o)) {
            return;
        }
    }
    d.reset_peak();
    let idle = d.status("VmRSS:");
    let stop = Arc::new(AtomicBool::new(false));
    let prober = probe(d.addr.clone(), Arc::clone(&stop));
    let (addr, token) = (d.addr.clone(), d.token.clone());
    let good_client = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        good_fetch(&addr, token.as_deref())
    });
    let t = Instant::now();
    let said = attack();
    let took = t.elapsed();
    let good_ok = good_client.join().unwrap_or(false);
    stop.store(true, Ordering::SeqCst);
    let mut lat = prober.join().unwrap_or_default();
    let peak = d.status("VmHWM:");
    std::thread::sleep(Duration::from_secs(5));
    let after = d.status("VmRSS:");
    let (p50, p99) = (quantile(&mut lat, 0.5), quantile(&mut lat, 0.99));
    let worst = lat.last().copied().unwrap_or_default();
    let failed = lat
        .iter()
        .filter(|l| **l >= Duration::from_secs(10))
        .count();
    println!(
        "{name:<44} {:>7.1} s  RSS {:>5} -> peak {:>5} MiB, {:>5} MiB 5 s after  /healthz p50 {:>6.1} ms p99 {:>7.1} ms worst {:>7.1} ms ({} probes, {failed} failed)  good client {}  {said}",
        took.as_secs_f64(),
        idle >> 10,
        peak >> 10,
        after >> 10,
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        worst.as_secs_f64() * 1e3,
        lat.len(),
        if good_ok { "verified" } else { "FAILED" },
    );
}

/// Runs `n` copies of `f` at once; how many returned true.
fn at_once(n: usize, f: impl Fn(usize) -> bool + Send + Sync + 'static) -> usize {
    let f = Arc::new(f);
    let threads: Vec<_> = (0..n)
        .map(|i| {
            let f = Arc::clone(&f);
            std::thread::spawn(move || f(i))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().unwrap_or(false))
        .filter(|ok| *ok)
        .count()
}

fn write_zt(
    path: &Path,
    objects: &[(String, Vec<u64>, DType, Vec<u8>)],
    opts: StoreOptions,
) -> Result<()> {
    let mut w = Writer::new(Vec::new(), "bench.zt")?;
    for (name, shape, dtype, data) in objects {
        w.add_dense(name, shape, *dtype, data, opts)?;
    }
    std::fs::write(path, w.finish()?)?;
    Ok(())
}

fn main() -> Result<()> {
    let work = tempfile::tempdir()?;
    let (root, state) = (work.path().join("root"), work.path().join("state"));
    std::fs::create_dir_all(&root)?;
    eprintln!(
        "writing the files (a 512 MiB zstd component, a 128 MiB tensor, 10,000 long names)..."
    );
    let sha = StoreOptions {
        zstd_level: None,
        digest: Some(DigestAlgorithm::Sha256),
    };
    let bomb: Vec<u8> = (0..(512usize << 20)).map(|i| (i >> 16) as u8).collect();
    write_zt(
        &root.join("bomb.zt"),
        &[("w".into(), vec![bomb.len() as u64], DType::U8, bomb)],
        StoreOptions {
            zstd_level: Some(3),
            ..sha
        },
    )?;
    let values: Vec<u8> = (0..(32usize << 20))
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    write_zt(
        &root.join("big.zt"),
        &[("t".into(), vec![8192, 4096], DType::F32, values)],
        sha,
    )?;
    let names: Vec<(String, Vec<u64>, DType, Vec<u8>)> = (0..10_000)
        .map(|i| {
            (
                format!("{i:05}.{}", "a".repeat(994)),
                vec![1],
                DType::U8,
                vec![1],
            )
        })
        .collect();
    write_zt(&root.join("names.zt"), &names, sha)?;
    let good: Vec<u8> = (0..(4usize << 20)).map(|i| (i * 7 % 251) as u8).collect();
    write_zt(
        &root.join("good.zt"),
        &[("g".into(), vec![good.len() as u64], DType::U8, good.clone())],
        sha,
    )?;
    let moe: Vec<(String, Vec<u64>, DType, Vec<u8>)> = (0..100_000u32)
        .map(|i| {
            let name = format!("model.layers.{}.experts.{}.w", i / 1000, i % 1000);
            (name, vec![1], DType::U32, i.to_le_bytes().to_vec())
        })
        .collect();
    write_zt(&root.join("moe.zt"), &moe, StoreOptions::default())?;
    // Outside the root until its attack moves it in.
    let million = work.path().join("million.safetensors");
    tiny_tensors(&million, 1_000_000)?;
    let d = Daemon::start(&root, &state)?;
    anyhow::ensure!(
        good_fetch(&d.addr, None),
        "zt fetch failed before any attack"
    );
    println!("# hostile load, release build, default settings, 127.0.0.1; issue 28's attacks");

    measure("4,200 slow readers of 128 MiB, 1 KiB/s, 20 s", &d, || {
        slow_readers(&d.addr, 4200, Duration::from_secs(20))
    });

    measure(
        "13 HTTP/2 x 16 stalled streams of 128 MiB, 20 s",
        &d,
        || stalled_h2(&d.addr, 13, 16, Duration::from_secs(20)),
    );

    measure("5,000 slowloris connections, 10 s", &d, || {
        let mut conns: Vec<TcpStream> = (0..5000)
            .filter_map(|_| TcpStream::connect(&d.addr).ok())
            .collect();
        for c in &mut conns {
            let _ = c.set_nonblocking(true);
            let _ = c.write(b"GET /healthz HTTP/1.1\r\n");
        }
        let opened = conns.len();
        for _ in 0..10 {
            std::thread::sleep(Duration::from_secs(1));
            for c in &mut conns {
                let _ = c.write(b"X");
            }
        }
        format!("{opened} opened")
    });

    let addr = d.addr.clone();
    measure("8 x ?decode=1 of 512 MiB (from 0.1 MB)", &d, move || {
        let ok = at_once(8, move |_| {
            get_len(&addr, "/v1/files/bomb.zt/objects/w/data?decode=1")
                .is_ok_and(|(s, n)| s == 200 && n == 512 << 20)
        });
        format!("{ok}/8 complete")
    });

    let addr = d.addr.clone();
    measure("16 x first summary of a 128 MiB tensor", &d, move || {
        let ok = at_once(16, move |_| {
            get(&addr, "/v1/files/big.zt/summaries/t").is_ok_and(|(s, _)| s == 200)
        });
        format!("{ok}/16 answered")
    });

    let addr = d.addr.clone();
    measure("64 x the JSON manifest of 100,000 objects", &d, move || {
        let ok = at_once(64, move |_| {
            get_len(&addr, "/v1/files/moe.zt/manifest").is_ok_and(|(s, n)| s == 200 && n > 0)
        });
        format!("{ok}/64 complete")
    });

    let (addr, into) = (d.addr.clone(), root.join("million.safetensors"));
    measure(
        "a safetensors header of 1,000,000 tensors (77 MB)",
        &d,
        move || {
            if std::fs::rename(&million, &into).is_err() {
                return "not moved in".into();
            }
            let t = Instant::now();
            while t.elapsed() < Duration::from_secs(60) {
                let listing = get(&addr, "/v1/files")
                    .map(|r| String::from_utf8_lossy(&r.1).into_owned())
                    .unwrap_or_default();
                if let Some(at) = listing.find("manifest-over-memory") {
                    let end = listing.len().min(at + 120);
                    return format!("refused: …{}", listing.get(at..end).unwrap_or(""));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            "not refused within 60 s".into()
        },
    );

    let addr = d.addr.clone();
    measure(
        "20,000 distinct selections matching nothing",
        &d,
        move || {
            let ok = at_once(4, move |t| {
                let Ok(c) = TcpStream::connect(&addr) else {
                    return false;
                };
                let mut c = KeepAlive(c);
                (0..5000).all(|i| {
                    let path = format!(
                        "/v1/files/good.zt/manifest?select=none.{t}.{i}.{}",
                        "x".repeat(200)
                    );
                    c.get(&path).is_ok_and(|s| s == 404)
                })
            });
            format!("{ok}/4 threads all 404")
        },
    );

    let addr = d.addr.clone();
    measure(
        "40 x objects?select=*a*a…b (1,024 chars) x 10,000 names",
        &d,
        move || {
            let pattern = format!("{}b", "%2Aa".repeat(511));
            let ok = at_once(2, move |_| {
                (0..20).all(|_| {
                    get(
                        &addr,
                        &format!("/v1/files/names.zt/objects?select={pattern}"),
                    )
                    .is_ok_and(|(s, _)| s == 200 || s == 503)
                })
            });
            format!("{ok}/2 threads answered")
        },
    );
    println!("render cache and summary cache after: {}", caches(&d.addr));
    drop(d);

    // A daemon that wants a token, with a cold 512 MiB safetensors file
    // hashed in the background at 1 MiB/s: work a request without a valid
    // token caused would show as digest bytes past that rate.
    let locked = work.path().join("locked");
    std::fs::create_dir_all(&locked)?;
    std::fs::copy(root.join("good.zt"), locked.join("good.zt"))?;
    cold_safetensors(&locked.join("cold.safetensors"), 512 << 20)?;
    let tokens = work.path().join("tokens");
    std::fs::write(&tokens, "bench-token\n")?;
    let config = work.path().join("locked.toml");
    std::fs::write(&config, "[digests]\nrate_mib_s = 1\n")?;
    let args = [
        "--token-file",
        tokens.to_str().context("tokens")?,
        "--config",
        config.to_str().context("config")?,
    ];
    let d = Daemon::start_with(
        &locked,
        &work.path().join("state2"),
        &args,
        Some("bench-token"),
    )?;
    let before = (
        metric_value(&d.addr, "ztserve_digest_bytes_total"),
        d.cpu_ticks(),
        Instant::now(),
    );
    measure(
        "ztp/1 gets without a valid token, 64 connections, 10 s",
        &d,
        || {
            let said = unauthenticated_quic(&d.addr, 64, Duration::from_secs(10));
            let hashed = metric_value(&d.addr, "ztserve_digest_bytes_total") - before.0;
            let ticks = d.cpu_ticks() - before.1;
            format!(
                "{said}; {:.1} MiB hashed in {:.1} s (the background allows 1 MiB/s), daemon CPU {:.2} s",
                hashed / f64::from(1 << 20),
                before.2.elapsed().as_secs_f64(),
                ticks as f64 / 100.0
            )
        },
    );
    Ok(())
}

/// `conns` ztp/1 clients asking for everything in `cold.safetensors`
/// again and again for `time`, half with no token and half with a wrong
/// one, each on a fresh connection: how many were refused `unauthorized`,
/// and the first other answer.
fn unauthenticated_quic(addr: &str, conns: usize, time: Duration) -> String {
    use zt_client::{trust::Trust, Client, Options};
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        return "no runtime".into();
    };
    let url = format!("quic://{addr}/cold.safetensors");
    let until = Instant::now() + time;
    let tasks: Vec<_> = (0..conns)
        .map(|i| {
            let url = url.clone();
            rt.spawn(async move {
                let (mut refused, mut other) = (0u64, None::<String>);
                while Instant::now() < until {
                    let options = Options {
                        trust: Trust::Insecure,
                        token: (i % 2 == 1).then(|| "wrong".to_owned()),
                        ..Options::default()
                    };
                    let asked = match Client::connect(&url, options).await {
                        Ok(c) => {
                            let r = c.fetch(&["*".to_owned()], None).await.map(|_| ());
                            c.close().await;
                            r
                        }
                        Err(e) => Err(e),
                    };
                    match asked {
                        Err(e) if e.to_string().contains("unauthorized") => refused += 1,
                        Err(e) => {
                            other.get_or_insert_with(|| e.to_string());
                        }
                        Ok(()) => {
                            other.get_or_insert_with(|| "served".into());
                        }
                    }
                }
                (refused, other)
            })
        })
        .collect();
    let (mut refused, mut other) = (0, None);
    for t in tasks {
        if let Ok((r, o)) = rt.block_on(t) {
            refused += r;
            other = other.or(o);
        }
    }
    format!(
        "{refused} refused unauthorized{}",
        other.map(|o| format!(", other: {o}")).unwrap_or_default()
    )
}

/// One sample's value from `/metrics` (0 when absent).
fn metric_value(addr: &str, name: &str) -> f64 {
    let text = get(addr, "/metrics")
        .map(|r| String::from_utf8_lossy(&r.1).into_owned())
        .unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// A safetensors file of one `U8` tensor `w` of `len` bytes, which
/// carries no digests (the daemon computes them).
fn cold_safetensors(path: &Path, len: usize) -> Result<()> {
    let header = format!(r#"{{"w":{{"dtype":"U8","shape":[{len}],"data_offsets":[0,{len}]}}}}"#);
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.resize(file.len() + len, 3);
    std::fs::write(path, file)?;
    Ok(())
}

/// `n` connections each asking for `/big.zt` (128 MiB) with a 4 KiB
/// receive buffer, then reading 1 KiB a second each, for `time`.
fn slow_readers(addr: &str, n: usize, time: Duration) -> String {
    let Ok(at) = addr.parse::<std::net::SocketAddr>() else {
        return "bad address".into();
    };
    let mut conns: Vec<socket2::Socket> = (0..n)
        .filter_map(|_| {
            let c =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).ok()?;
            c.set_recv_buffer_size(4096).ok()?;
            c.connect(&at.into()).ok()?;
            (&c).write_all(b"GET /big.zt HTTP/1.1\r\nHost: x\r\n\r\n")
                .ok()?;
            c.set_nonblocking(true).ok()?;
            Some(c)
        })
        .collect();
    let opened = conns.len();
    let t = Instant::now();
    let mut got = 0u64;
    while t.elapsed() < time {
        std::thread::sleep(Duration::from_secs(1));
        let mut buf = [0u8; 1024];
        for c in &mut conns {
            if let Ok(k) = c.read(&mut buf) {
                got += k as u64;
            }
        }
    }
    format!(
        "{opened} opened, {} MiB read, {} bytes held, closed: {}",
        got >> 20,
        metric_line(addr, "ztserve_http_body_bytes_held "),
        metric_line(addr, "ztserve_http_connections_closed_total")
    )
}

/// `conns` HTTP/2 connections with `streams` streams each of `/big.zt`
/// and a stream window of 0, held for `time`.
fn stalled_h2(addr: &str, conns: usize, streams: usize, time: Duration) -> String {
    let Ok(rt) = tokio::runtime::Runtime::new() else {
        return "no runtime".into();
    };
    let addr = addr.to_owned();
    let heads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let opened = rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..conns {
            let Ok(tcp) = tokio::net::TcpStream::connect(&addr).await else {
                continue;
            };
            let Ok((client, conn)) = h2::client::Builder::new()
                .initial_window_size(0)
                .handshake::<_, bytes::Bytes>(tcp)
                .await
            else {
                continue;
            };
            held.push(tokio::spawn(async move {
                let _ = conn.await;
            }));
            let mut client = client;
            for _ in 0..streams {
                let Ok(ready) = client.ready().await else {
                    break;
                };
                client = ready;
                let Ok(req) = axum::http::Request::get(format!("http://{addr}/big.zt")).body(())
                else {
                    break;
                };
                if let Ok((resp, _)) = client.send_request(req, true) {
                    let heads = Arc::clone(&heads);
                    held.push(tokio::spawn(async move {
                        // Kept, unread: a response dropped would reset its
                        // stream, and the server drop its body.
                        let resp = resp.await;
                        if resp.as_ref().is_ok_and(|r| r.status() == 200) {
                            heads.fetch_add(1, Ordering::SeqCst);
                        }
                        std::future::pending::<()>().await;
                        drop(resp);
                    }));
                }
            }
        }
        tokio::time::sleep(time).await;
        let held_now = metric_line(&addr, "ztserve_http_body_bytes_held ");
        (held.len(), held_now)
    });
    format!(
        "{} tasks, {} responses begun (200), {} bytes held, closed: {}",
        opened.0,
        heads.load(Ordering::SeqCst),
        opened.1,
        metric_line(&addr, "ztserve_http_connections_closed_total")
    )
}

/// The lines of `/metrics` that start with `prefix`, joined.
fn metric_line(addr: &str, prefix: &str) -> String {
    let text = get(addr, "/metrics")
        .map(|r| String::from_utf8_lossy(&r.1).into_owned())
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| l.trim_start_matches(prefix))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A safetensors file at `path` whose header holds `n` tensors of one
/// byte each.
fn tiny_tensors(path: &Path, n: usize) -> Result<()> {
    use std::fmt::Write as _;
    let mut header = String::with_capacity(n * 80);
    header.push('{');
    for i in 0..n {
        if i > 0 {
            header.push(',');
        }
        write!(
            header,
            r#""model.t{i:07}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
            i + 1
        )?;
    }
    header.push('}');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.resize(file.len() + n, 7);
    std::fs::write(path, file)?;
    Ok(())
}

/// The two caches' gauges, from `/metrics`.
fn caches(addr: &str) -> String {
    let text = get(addr, "/metrics")
        .map(|r| String::from_utf8_lossy(&r.1).into_owned())
        .unwrap_or_default();
    text.lines()
        .filter(|l| {
            l.starts_with("ztserve_manifest_render_cache_bytes ")
                || l.starts_with("ztserve_summary_cache_bytes ")
        })
        .collect::<Vec<_>>()
        .join(", ")
}
