//! Three replicas against one, all in containers on this machine:
//! `deploy/docker-compose.s3.yml` (three ztserve replicas over one S3
//! store, `s3s-fs`) serving a 32-layer model, and 64 client-library
//! clients on the host fetching random layers (every component verified),
//! first all on one replica, then spread over the three, over HTTPS and
//! over ztp/1, each through Docker's userland proxy (127.0.0.1) and
//! through the kernel's forwarding (the host's address, as clients on
//! other machines reach a published port). Reports fetches per second,
//! p50 and p99, and the ratios.
//!
//! On a 2-core machine the replicas share the same two cores (and the
//! store and the clients run there too): the point is that nothing is
//! lost by spreading, not that it scales.
//!
//! `cargo bench --bench replicas -- [SECS]` (default 15 per run). Needs
//! a Docker engine, docker-compose, the base image's tools
//! (`scripts/docker-base.sh`) and `s3s-fs` (`scripts/test.sh` builds it).
//! Not part of `.ci/run`.

use anyhow::Result;
use zt_client::Via;

#[allow(dead_code)]
#[path = "load/clients.rs"]
mod clients;
#[path = "../tests/common/mod.rs"]
mod common;

const CLIENTS: u64 = 64;
const LAYERS: u32 = 32;

fn main() -> Result<()> {
    let secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(15);
    anyhow::ensure!(
        common::docker::engine() && common::compose::installed(),
        "needs a Docker engine and docker-compose"
    );
    let s3s = common::s3::s3s_fs().ok_or_else(|| anyhow::anyhow!("needs s3s-fs"))?;
    let models = tempfile::tempdir()?;
    let model = models.path().join("model.zt");
    common::layered_model(&model, 0..LAYERS);
    let cluster = common::compose::Cluster::start(&s3s, &[("prod/model.zt", &model)]);
    let rt = tokio::runtime::Runtime::new()?;
    println!(
        "{CLIENTS} clients, random layers (1 MiB each, verified), {secs} s per run, medians of latencies"
    );
    println!(
        "{:<30} {:>10} {:>9} {:>9} {:>7}",
        "", "fetch/s", "p50 ms", "p99 ms", "errors"
    );
    // Each transport twice: through 127.0.0.1, which Docker's userland
    // proxy carries (a process copying every datagram), and through the
    // host's address on the clients' network, which the kernel forwards
    // (DNAT), as it does for clients on other machines.
    type Url<'a> = Box<dyn Fn(usize) -> String + 'a>;
    let variants: [(&str, Via, Url); 4] = [
        ("HTTPS, proxy", Via::Http, Box::new(|i| cluster.https(i))),
        (
            "HTTPS, kernel",
            Via::Http,
            Box::new(|i| cluster.forwarded("https", i)),
        ),
        ("ztp/1, proxy", Via::Quic, Box::new(|i| cluster.quic(i))),
        (
            "ztp/1, kernel",
            Via::Quic,
            Box::new(|i| cluster.forwarded("quic", i)),
        ),
    ];
    let mut rates = Vec::new();
    for (name, via, url) in variants {
        let one = vec![format!("{}/model.zt", url(0))];
        let three: Vec<String> = (0..3).map(|i| format!("{}/model.zt", url(i))).collect();
        // Warm: every replica has listed the model and checked its digests.
        rt.block_on(clients::run_on(&three, via, 3, u64::from(LAYERS), 3));
        let a = rt.block_on(clients::run_on(&one, via, CLIENTS, u64::from(LAYERS), secs));
        let b = rt.block_on(clients::run_on(
            &three,
            via,
            CLIENTS,
            u64::from(LAYERS),
            secs,
        ));
        for (what, r) in [("1 replica", &a), ("3 replicas", &b)] {
            println!(
                "{:<30} {:>10.1} {:>9.1} {:>9.1} {:>7}",
                format!("{name}, {what}"),
                r.fetches as f64 / r.secs,
                r.p50_ms,
                r.p99_ms,
                r.errors
            );
            if let Some(e) = &r.first_error {
                println!("    first error: {e}");
            }
        }
        println!(
            "{:<30} {:>10.3}x fetch/s, p99 {:.3}x",
            format!("{name}, 3 replicas vs 1"),
            (b.fetches as f64 / b.secs) / (a.fetches as f64 / a.secs),
            b.p99_ms / a.p99_ms
        );
        rates.push((name, b.fetches as f64 / b.secs));
    }
    // ztp/1 against HTTPS over the same path, three replicas.
    for path in ["proxy", "kernel"] {
        let rate = |t: &str| {
            rates
                .iter()
                .find(|(n, _)| *n == format!("{t}, {path}"))
                .map_or(f64::NAN, |r| r.1)
        };
        println!(
            "{:<30} {:>10.3}x fetch/s",
            format!("ztp/1 vs HTTPS, {path}, 3 replicas"),
            rate("ztp/1") / rate("HTTPS")
        );
    }
    Ok(())
}
