//! Correctness under load, in every `.ci/run`: 256 HTTP connections at
//! once mixing manifest requests and random ranges (every range's bytes
//! compared with the file), and 64 ztp/1 clients at once, each on its own
//! connection fetching a selection with every digest checked. No request
//! may fail, and the daemon's QUIC connection and stream gauges return to
//! zero. Throughput, latency and memory figures come from
//! `cargo bench --bench load`, not from here.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::quic::metric;
use common::{eventually, Server};
use zt_client::trust::Trust;
use zt_client::{Client, Options, Via};

const LAYERS: u32 = 32;

/// `dir/load.zt`: 32 layers of two 64 KiB components.
fn model(dir: &std::path::Path) -> Vec<u8> {
    let mut w = zt_format::Writer::new(Vec::new(), "load").unwrap();
    for l in 0..LAYERS {
        for part in ["attn", "mlp"] {
            let data: Vec<u8> = (0..64u32 << 10)
                .map(|i| (i ^ l).wrapping_mul(2654435761).to_be_bytes()[part.len() % 4])
                .collect();
            w.add_dense(
                &format!("model.layers.{l}.{part}.weight"),
                &[data.len() as u64],
                zt_format::DType::U8,
                &data,
                Default::default(),
            )
            .unwrap();
        }
    }
    let bytes = w.finish().unwrap();
    std::fs::write(dir.join("load.zt"), &bytes).unwrap();
    bytes
}

/// One HTTP connection's eight requests: every fifth a manifest, the rest
/// ranges checked against `file`. Errors, each described.
async fn http_client(base: String, file: Arc<Vec<u8>>, seed: u64) -> Vec<String> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()
        .unwrap();
    let mut errors = Vec::new();
    let mut k = seed;
    for j in 0..8u64 {
        k = k
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        if (seed + j) % 5 == 0 {
            match client.get(format!("{base}/manifest")).send().await {
                Ok(r) if r.status() == 200 => match r
                    .bytes()
                    .await
                    .map(|b| serde_json::from_slice::<serde_json::Value>(&b))
                {
                    Ok(Ok(v)) if v["objects"].as_object().is_some_and(|o| o.len() == 64) => {}
                    other => errors.push(format!("manifest: {other:?}")),
                },
                other => errors.push(format!("manifest: {other:?}")),
            }
            continue;
        }
        let len = 1 + (k >> 40) % 200_000;
        let start = (k >> 8) % (file.len() as u64 - len);
        let range = format!("bytes={start}-{}", start + len - 1);
        let want = &file[start as usize..(start + len) as usize];
        match client.get(&base).header("Range", &range).send().await {
            Ok(r) if r.status() == 206 => match r.bytes().await {
                Ok(b) if b[..] == *want => {}
                Ok(b) => errors.push(format!("{range}: {} bytes, not the file's", b.len())),
                Err(e) => errors.push(format!("{range}: {e}")),
            },
            other => errors.push(format!("{range}: {other:?}")),
        }
    }
    errors
}

/// One ztp/1 client fetching layer `seed % LAYERS`; errors, described.
async fn quic_client(url: String, fingerprint: String, seed: u32) -> Vec<String> {
    let options = Options {
        trust: Trust::fingerprint(&fingerprint).unwrap(),
        via: Some(Via::Quic),
        ..Options::default()
    };
    let layer = seed % LAYERS;
    let run = async {
        let client = Client::connect(&url, options).await?;
        let mut f = client
            .fetch(&[format!("model.layers.{layer}.*")], None)
            .await?;
        let mut got = Vec::new();
        while let Some(d) = f.next().await {
            let d = d?;
            anyhow::ensure!(d.data.len() == 64 << 10, "{}: short", d.object);
            got.push(d.object);
        }
        got.sort();
        anyhow::ensure!(
            got == [
                format!("model.layers.{layer}.attn.weight"),
                format!("model.layers.{layer}.mlp.weight")
            ],
            "delivered {got:?}"
        );
        Ok(())
    };
    match run.await {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!("layer {layer}: {e:#}")],
    }
}

#[test]
fn hundreds_of_http_connections_and_64_quic_clients_at_once() {
    let root = tempfile::tempdir().unwrap();
    let file = Arc::new(model(root.path()));
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let base = s.url("/v1/files/load.zt");
    // reqwest is built without a default TLS provider.
    zt_client::trust::install_provider();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let errors: Vec<String> = rt.block_on(async {
        let mut tasks = Vec::new();
        for c in 0..256u64 {
            tasks.push(tokio::spawn(http_client(
                base.clone(),
                Arc::clone(&file),
                c,
            )));
        }
        for c in 0..64u32 {
            let url = format!("quic://{q}/load.zt");
            tasks.push(tokio::spawn(quic_client(url, fp.clone(), c)));
        }
        let mut errors = Vec::new();
        for t in tasks {
            errors.extend(t.await.unwrap());
        }
        errors
    });
    assert!(errors.is_empty(), "{} failures: {errors:#?}", errors.len());
    assert!(
        eventually(Duration::from_secs(20), || {
            metric(&s, "ztserve_quic_connections") == 0 && metric(&s, "ztserve_quic_streams") == 0
        }),
        "QUIC connections or streams left open"
    );
    assert_eq!(common::curl(&[], &s.url("/healthz")).status, 200);
}
