//! Concurrent client-library clients, each on its own connection, each
//! fetching one random layer (every component checked against its digest)
//! again and again until the time is up.

use std::time::{Duration, Instant};

use zt_client::trust::Trust;
use zt_client::{Client, Options, Via};

/// What all the clients saw together.
pub(crate) struct Report {
    pub fetches: usize,
    pub bytes: u64,
    pub secs: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub first_error: Option<String>,
}

/// One client's tally.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) latencies: Vec<f64>,
    pub(crate) bytes: u64,
    errors: u64,
    first_error: Option<String>,
}

impl Tally {
    pub(crate) fn failed(&mut self, e: &dyn std::fmt::Display) {
        self.errors += 1;
        self.first_error.get_or_insert_with(|| e.to_string());
    }
}

/// Fetches every component of `select`; the bytes delivered.
async fn fetch(client: &Client, select: &[String]) -> anyhow::Result<u64> {
    let mut f = client.fetch(select, None).await?;
    let mut bytes = 0;
    while let Some(d) = f.next().await {
        bytes += d?.data.len() as u64;
    }
    anyhow::ensure!(bytes > 0, "{select:?}: nothing delivered");
    Ok(bytes)
}

async fn one(url: String, via: Via, seed: u64, layers: u64, until: Instant) -> Tally {
    let mut t = Tally::default();
    // One connection each, as the bare quinn peer has (a ztp/1 fetch
    // would spread over two by default).
    let options = Options {
        trust: Trust::Insecure,
        via: Some(via),
        connections: (via == Via::Quic).then_some(1),
        ..Options::default()
    };
    let client = match Client::connect(&url, options).await {
        Ok(c) => c,
        Err(e) => {
            t.failed(&e);
            return t;
        }
    };
    drive(t, seed, layers, until, |layer| {
        let select = vec![format!("model.layers.{layer}.*")];
        let client = &client;
        async move { fetch(client, &select).await }
    })
    .await
}

/// Asks `fetch_layer` for one random layer after another (the same
/// seeded sequence for every kind of client) until `until`, timing each.
pub(crate) async fn drive<F, Fut>(
    mut t: Tally,
    seed: u64,
    layers: u64,
    until: Instant,
    mut fetch_layer: F,
) -> Tally
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<u64>>,
{
    let mut k = seed;
    while Instant::now() < until {
        k = k
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let start = Instant::now();
        match fetch_layer((k >> 33) % layers).await {
            Ok(n) => {
                t.bytes += n;
                t.latencies.push(start.elapsed().as_secs_f64() * 1e3);
            }
            Err(e) => t.failed(&e),
        }
    }
    t
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(i).copied().unwrap_or(f64::NAN)
}

/// `clients` clients against `url` for `secs` seconds.
pub(crate) async fn run(url: &str, via: Via, clients: u64, layers: u64, secs: u64) -> Report {
    run_on(&[url.to_owned()], via, clients, layers, secs).await
}

/// [`run`] with the clients spread over `urls` (replicas serving the
/// same file), client `c` on `urls[c % n]`.
pub(crate) async fn run_on(
    urls: &[String],
    via: Via,
    clients: u64,
    layers: u64,
    secs: u64,
) -> Report {
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let url = urls[usize::try_from(c).unwrap_or(0) % urls.len()].clone();
            tokio::spawn(one(url, via, c + 1, layers, until))
        })
        .collect();
    gather(tasks, start).await
}

/// Every client's tally, added up, since `start`.
pub(crate) async fn gather(tasks: Vec<tokio::task::JoinHandle<Tally>>, start: Instant) -> Report {
    let mut all = Tally::default();
    for task in tasks {
        match task.await {
            Ok(t) => {
                all.latencies.extend(t.latencies);
                all.bytes += t.bytes;
                all.errors += t.errors;
                if all.first_error.is_none() {
                    all.first_error = t.first_error;
                }
            }
            Err(e) => all.failed(&e),
        }
    }
    let secs = start.elapsed().as_secs_f64();
    all.latencies.sort_by(f64::total_cmp);
    Report {
        fetches: all.latencies.len(),
        bytes: all.bytes,
        secs,
        p50_ms: quantile(&all.latencies, 0.5),
        p99_ms: quantile(&all.latencies, 0.99),
        errors: all.errors,
        first_error: all.first_error,
    }
}
