//! Serving from object storage against its peers, measured in one run:
//! a 1 GiB model (32 layers, crc32c digests) in a real S3 server
//! (`s3s-fs`), fetched whole with `zt fetch` over HTTP and ztp/1 from a
//! ztserve whose root is the bucket, against the same fetch from a
//! ztserve whose root is a local directory holding the same file, and
//! against reading the object straight from the S3 server with ranged
//! GETs at the same concurrency as `zt fetch` (8 requests in flight,
//! 16 MiB each, written to a file at their offsets: no manifest, no
//! digests, the store's own ceiling).
//!
//! `cargo bench --bench store -- [ROUNDS]` (default 5; medians). Needs
//! `s3s-fs` (`$ZT_S3S_FS` or `target/tools/bin/s3s-fs`, which
//! `scripts/test.sh` builds). Not part of `.ci/run`.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use futures_util::{stream, StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as KeyPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use zt_format::DigestAlgorithm;

#[allow(dead_code)]
#[path = "support/model.rs"]
mod model;
#[allow(dead_code)]
#[path = "fetch/peers.rs"]
mod peers;
#[path = "../tests/common/zt_bin.rs"]
mod zt_bin;

const KEY: &str = "zt-bench-key";
const SECRET: &str = "zt-bench-secret-0123456789";
/// Requests in flight for the direct reads: `zt fetch`'s default.
const CONCURRENCY: usize = 8;
const PIECE: u64 = 16 << 20;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn s3s_fs() -> Result<PathBuf> {
    let p = std::env::var_os("ZT_S3S_FS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/tools/bin/s3s-fs")
        });
    anyhow::ensure!(
        p.is_file(),
        "no s3s-fs at {} (scripts/test.sh builds it)",
        p.display()
    );
    Ok(p)
}

fn store(endpoint: &str) -> Result<impl ObjectStore> {
    zt_client::trust::install_provider();
    Ok(AmazonS3Builder::new()
        .with_bucket_name("models")
        .with_endpoint(endpoint)
        .with_region("us-east-1")
        .with_allow_http(true)
        .with_access_key_id(KEY)
        .with_secret_access_key(SECRET)
        .build()?)
}

/// The object read with ranged GETs, `CONCURRENCY` in flight, into `out`.
async fn direct(s: &Arc<dyn ObjectStore>, key: &str, size: u64, out: &Path) -> Result<f64> {
    let start = Instant::now();
    let file = Arc::new(std::fs::File::create(out)?);
    file.set_len(size)?;
    let key = KeyPath::from(key);
    let pieces: Vec<u64> = (0..size.div_ceil(PIECE)).map(|i| i * PIECE).collect();
    stream::iter(pieces)
        .map(|at| {
            let (s, key, file) = (Arc::clone(s), key.clone(), Arc::clone(&file));
            async move {
                let bytes = s.get_range(&key, at..(at + PIECE).min(size)).await?;
                tokio::task::spawn_blocking(move || file.write_all_at(&bytes, at)).await??;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(start.elapsed().as_secs_f64())
}

fn main() -> Result<()> {
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let work = tempfile::tempdir()?;
    let (data, local, state) = (
        work.path().join("s3"),
        work.path().join("local"),
        work.path().join("state"),
    );
    for d in [&data, &local, &state] {
        std::fs::create_dir_all(d)?;
    }
    std::fs::create_dir(data.join("models"))?;
    let model = local.join("model.zt");
    model::layers(&model, 32, 32, Some(DigestAlgorithm::Crc32c))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let size = std::fs::metadata(&model)?.len();

    let port = peers::free_port()?;
    let endpoint = format!("http://127.0.0.1:{port}");
    let _s3 = {
        let child = Command::new(s3s_fs()?)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--access-key", KEY, "--secret-key", SECRET])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting s3s-fs")?;
        peers::Proc::new(child)
    };
    let rt = tokio::runtime::Runtime::new()?;
    let s3: Arc<dyn ObjectStore> = Arc::new(store(&endpoint)?);
    rt.block_on(async {
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let bytes = std::fs::read(&model)?;
        s3.put(&KeyPath::from("prod/model.zt"), PutPayload::from(bytes))
            .await?;
        anyhow::Ok(())
    })?;

    let config = work.path().join("store.toml");
    std::fs::write(
        &config,
        format!("root = \"s3://models/prod\"\n[storage]\nendpoint = \"{endpoint}\"\nregion = \"us-east-1\"\nallow_http = true\n"),
    )?;
    let (sport, lport) = (peers::free_port()?, peers::free_port()?);
    let creds = [
        ("AWS_ACCESS_KEY_ID", KEY),
        ("AWS_SECRET_ACCESS_KEY", SECRET),
    ];
    let cfg = config.to_str().context("config path")?;
    let mut env: Vec<(&str, &str)> = creds.to_vec();
    env.push(("ZTSERVE_CONFIG", cfg));
    let _from_store =
        peers::ztserve_env(Path::new("s3://models/prod"), sport, &state.join("s"), &env)?;
    let _from_local = peers::ztserve(&local, lport, &state.join("l"))?;
    // No round shares the CPU with either daemon's background hashing.
    peers::wait_quiet(sport)?;
    peers::wait_quiet(lport)?;
    let out = work.path().join("out.zt");

    println!("1 GiB model ({size} bytes), {rounds} rounds, medians");
    let mut rows = Vec::new();
    for (what, scheme) in [("HTTP", "http"), ("ztp/1", "quic")] {
        let url = |port: u16| format!("{scheme}://127.0.0.1:{port}/model.zt");
        let (mut s, mut l) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            s.push(peers::timed(&mut peers::zt_fetch(&url(sport), &out))?);
            l.push(peers::timed(&mut peers::zt_fetch(&url(lport), &out))?);
        }
        rows.push((what, median(s), median(l)));
    }
    let mut d = Vec::new();
    for _ in 0..rounds {
        peers::remove_output(&out);
        d.push(rt.block_on(direct(&s3, "prod/model.zt", size, &out))?);
    }
    let direct = median(d);
    let gbs = |secs: f64| size as f64 / secs / 1e9;
    println!(
        "{:<46} {direct:>7.3} s {:>6.3} GB/s",
        "direct ranged GETs from s3s-fs (8 x 16 MiB)",
        gbs(direct)
    );
    for (what, s, l) in rows {
        println!(
            "{:<46} {l:>7.3} s {:>6.3} GB/s",
            format!("zt fetch, {what}, local root"),
            gbs(l)
        );
        println!(
            "{:<46} {s:>7.3} s {:>6.3} GB/s   {:.3}x local root   {:.3}x direct GETs",
            format!("zt fetch, {what}, S3 root"),
            gbs(s),
            l / s,
            direct / s
        );
    }
    Ok(())
}
