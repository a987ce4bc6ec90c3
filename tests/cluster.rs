//! `deploy/docker-compose.s3.yml` run for real (with Compose v1): three
//! replicas of the image, on a network apart from their S3 store
//! (`s3s-fs`, into which the test uploads through the S3 API), sharing
//! only the store and a TLS certificate. They must give the same
//! manifests and ETags; a replica killed in the middle of a fetch must not
//! fail it (`zt fetch --mirror` goes on from another and verifies); a
//! replica cut off from the store must turn not ready, naming it, and
//! recover once reconnected; and a rolling restart of all three under a
//! steady load of fetches (about 30 s) must complete every fetch, verified.
//!
//! SKIPPED without a Docker engine (unless `ZT_REQUIRE_DOCKER=1`) or
//! without `s3s-fs` and docker-compose (unless `ZT_REQUIRE_S3=1` and
//! `ZT_REQUIRE_DOCKER=1` respectively).

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::compose::{self, Cluster, REPLICAS};
use common::docker::{docker_ok, engine, fingerprint};
use common::fetch::{big_model, fault_mid_fetch, same_objects};
use common::s3::s3s_fs;
use common::{curl, repo, zt_bin};

fn etag_and_body(url: &str) -> (String, Vec<u8>) {
    let r = curl(&["-k"], url);
    assert_eq!(r.status, 200, "{url}");
    (r.header("etag").unwrap_or_default().to_owned(), r.body)
}

fn zt_fetch(url: &str, mirrors: &[String], out: &Path, fp: &str) -> std::process::Output {
    let mut cmd = Command::new(zt_bin());
    cmd.args(["fetch", url, "-o"]).arg(out);
    for m in mirrors {
        cmd.args(["--mirror", m]);
    }
    cmd.args(["--cert-fingerprint", fp]).output().unwrap()
}

#[test]
fn replicas_over_s3_agree_survive_a_kill_a_cut_store_and_a_rolling_restart() {
    if !engine() || !compose::installed() {
        return;
    }
    let Some(s3s) = s3s_fs() else { return };
    let models = tempfile::tempdir().unwrap();
    let big = big_model(models.path());
    let sample = repo().join("models/sample.zt");
    let cluster = Cluster::start(&s3s, &[("prod/big.zt", &big), ("prod/sample.zt", &sample)]);
    let fp = fingerprint(&cluster.container("r0"));

    // The same manifests, ETags and certificate everywhere.
    for (file, path, kind) in [
        ("big.zt", "/v1/files/big.zt/manifest", "\"m-"),
        ("sample.zt", "/v1/files/sample.zt/manifest", "\"m-"),
        ("sample.zt", "/sample.zt", "\"zt-"),
    ] {
        let url = |i| format!("{}{path}", cluster.https(i));
        let first = etag_and_body(&url(0));
        assert!(first.0.starts_with(kind), "{file}: ETag {}", first.0);
        for (i, r) in REPLICAS.iter().enumerate().skip(1) {
            let other = etag_and_body(&url(i));
            assert_eq!(other.0, first.0, "{file}: ETag of {r}");
            assert!(other.1 == first.1, "{file}: manifest of {r}");
        }
    }
    for r in &REPLICAS[1..] {
        assert_eq!(
            fingerprint(&cluster.container(r)),
            fp,
            "{r}: the certificate"
        );
    }

    // A replica killed mid-fetch: the fetch goes on from another, through
    // a 20 MB/s relay so that the kill lands mid-transfer.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");
    let relay = common::relay::Relay::tcp(
        format!("127.0.0.1:{}", cluster.ports[0]).parse().unwrap(),
        20_000_000,
    );
    let first = format!("https://{}/v1/files/big.zt", relay.addr);
    let mirror = format!("{}/v1/files/big.zt", cluster.https(1));
    let r = fault_mid_fetch(
        &first,
        &out,
        &["--mirror", &mirror, "--cert-fingerprint", &fp],
        || {
            docker_ok(&["kill", &cluster.container("r0")]);
        },
    );
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains(&format!("going on from {mirror}")), "{err}");
    assert!(err.contains("resumed from the journal"), "{err}");
    same_objects(&big, &out, None);
    drop(relay);
    docker_ok(&["start", &cluster.container("r0")]);
    cluster.wait_ready(0);

    // Cut off from the store (its network only; clients still reach it):
    // not ready, naming the store; the others stay ready. Reconnected:
    // ready again.
    let store_net = format!("{}_store", cluster.project);
    docker_ok(&[
        "network",
        "disconnect",
        &store_net,
        &cluster.container("r1"),
    ]);
    let cut = common::eventually(Duration::from_secs(30), || {
        let (status, body) = cluster.readyz(1);
        status == 503 && body.contains("store_unreachable") && body.contains("s3://models/prod")
    });
    assert!(
        cut,
        "r1 still ready without its store: {:?}",
        cluster.readyz(1)
    );
    assert_eq!(cluster.readyz(0).0, 200);
    assert_eq!(cluster.readyz(2).0, 200);
    docker_ok(&["network", "connect", &store_net, &cluster.container("r1")]);
    cluster.wait_ready(1);

    // A rolling restart under a steady, bounded load (about 30 s): two
    // clients fetch the sample model over alternating transports, each
    // naming every replica (starting from a different one).
    let stop = Arc::new(AtomicBool::new(false));
    let urls: Vec<(String, String)> = (0..REPLICAS.len())
        .map(|i| {
            (
                format!("{}/v1/files/sample.zt", cluster.https(i)),
                format!("{}/sample.zt", cluster.quic(i)),
            )
        })
        .collect();
    let clients: Vec<_> = (0..2)
        .map(|c| {
            let (stop, urls, fp) = (Arc::clone(&stop), urls.clone(), fp.clone());
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
                let want = std::fs::read(repo().join("models/sample.zt")).unwrap();
                let mut done = 0usize;
                let mut i = c;
                while !stop.load(Ordering::SeqCst) {
                    let order: Vec<&(String, String)> = (0..urls.len())
                        .map(|k| &urls[(i + k) % urls.len()])
                        .collect();
                    let pick =
                        |u: &(String, String)| if i % 2 == 0 { u.0.clone() } else { u.1.clone() };
                    let mirrors: Vec<String> = order[1..].iter().map(|u| pick(u)).collect();
                    let out = dir.path().join(format!("s{i}.zt"));
                    let r = zt_fetch(&pick(order[0]), &mirrors, &out, &fp);
                    assert!(
                        r.status.success(),
                        "fetch {i} during the rolling restart: {}",
                        String::from_utf8_lossy(&r.stderr)
                    );
                    assert!(
                        std::fs::read(&out).unwrap() == want,
                        "fetch {i}: not the served file"
                    );
                    std::fs::remove_file(&out).unwrap();
                    done += 1;
                    i += 2;
                    std::thread::sleep(Duration::from_millis(100));
                }
                done
            })
        })
        .collect();
    let started = Instant::now();
    for (i, r) in REPLICAS.iter().enumerate() {
        std::thread::sleep(Duration::from_secs(6));
        docker_ok(&["restart", "-t", "10", &cluster.container(r)]);
        cluster.wait_ready(i);
    }
    std::thread::sleep(Duration::from_secs(6));
    stop.store(true, Ordering::SeqCst);
    let fetched: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    eprintln!(
        "rolling restart: {fetched} fetches in {:.1} s, all verified",
        started.elapsed().as_secs_f64()
    );
    assert!(fetched >= 10, "only {fetched} fetches during the restart");
}
