//! Three replicas of the image on one private Docker network, serving one
//! read-only model directory (the stand-in, until object storage, for the
//! store they share), each with the same certificate and nothing else in
//! common. They must give the same manifests and ETags; a replica killed
//! in the middle of a fetch must not fail it (`zt fetch --mirror` goes on
//! from another and verifies); and a rolling restart of all three under a
//! steady load of fetches must complete every fetch, verified.
//!
//! SKIPPED without a Docker engine, unless `ZT_REQUIRE_DOCKER=1`.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::docker::{build_image, docker_ok, engine, fingerprint, wait_ready, Cleanup};
use common::fetch::{big_model, fault_mid_fetch, same_objects};
use common::{curl, free_port, repo, zt_bin, Server};

const REPLICAS: usize = 3;

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// One replica: its container, host ports (TCP and UDP share the number)
/// and state directory.
struct Replica {
    name: String,
    port: u16,
}

impl Replica {
    fn http(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    fn quic(&self) -> String {
        format!("quic://127.0.0.1:{}", self.port)
    }
}

/// `docker run` of replica `name` on `network`, its state directory
/// holding the shared certificate.
fn run_replica(tag: &str, network: &str, models: &Path, state: &Path, r: &Replica) {
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &r.name,
        "--network",
        network,
        "--read-only",
        "-v",
        &format!("{}:/models:ro", models.display()),
        "-v",
        &format!("{}:/var/lib/ztserve", state.display()),
        "-p",
        &format!("127.0.0.1:{}:7070/tcp", r.port),
        "-p",
        &format!("127.0.0.1:{}:7070/udp", r.port),
        tag,
    ]);
    wait_ready(&r.http(), &r.name);
}

/// The certificate and key the replicas share (made once by a local
/// daemon), readable by the image's user.
fn shared_certificate() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    drop(Server::start_quic(
        &repo().join("models"),
        &["--state-dir", dir.path().to_str().unwrap()],
    ));
    for f in ["quic-cert.pem", "quic-key.pem"] {
        chmod(&dir.path().join(f), 0o644);
    }
    dir
}

fn etag_and_body(url: &str) -> (String, Vec<u8>) {
    let r = curl(&["-i"], url);
    let text = String::from_utf8_lossy(&r.body).to_ascii_lowercase();
    let etag = text
        .lines()
        .find(|l| l.starts_with("etag:"))
        .unwrap_or_default()
        .to_owned();
    let body = curl(&[], url).body;
    (etag, body)
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
fn replicas_agree_survive_a_kill_mid_fetch_and_a_rolling_restart() {
    if !engine() {
        return;
    }
    let pid = std::process::id();
    let tag = format!("zt-test/ztserve:cluster-{pid}");
    let network = format!("zt-test-net-{pid}");
    let mut cleanup = Cleanup::default();
    build_image(&tag, &mut cleanup);
    docker_ok(&["network", "create", &network]);
    cleanup.networks.push(network.clone());

    let models = tempfile::tempdir().unwrap();
    chmod(models.path(), 0o755);
    let big = big_model(models.path());
    std::fs::copy(
        repo().join("models/sample.zt"),
        models.path().join("sample.zt"),
    )
    .unwrap();
    for f in [&big, &models.path().join("sample.zt")] {
        chmod(f, 0o444);
    }
    let cert = shared_certificate();
    let replicas: Vec<Replica> = (0..REPLICAS)
        .map(|i| Replica {
            name: format!("zt-test-r{i}-{pid}"),
            port: free_port(),
        })
        .collect();
    let mut states = Vec::new();
    for r in &replicas {
        cleanup.containers.push(r.name.clone());
        let state = tempfile::tempdir().unwrap();
        chmod(state.path(), 0o777);
        for f in ["quic-cert.pem", "quic-key.pem"] {
            std::fs::copy(cert.path().join(f), state.path().join(f)).unwrap();
        }
        run_replica(&tag, &network, models.path(), state.path(), r);
        states.push(state);
    }
    let fp = fingerprint(&replicas[0].name);

    // The same manifests, ETags and certificate everywhere.
    for file in ["big.zt", "sample.zt"] {
        let first = etag_and_body(&format!("{}/v1/files/{file}/manifest", replicas[0].http()));
        assert!(first.0.starts_with("etag:"), "{file}: no ETag");
        for r in &replicas[1..] {
            let other = etag_and_body(&format!("{}/v1/files/{file}/manifest", r.http()));
            assert_eq!(other.0, first.0, "{file}: ETag of {}", r.name);
            assert!(other.1 == first.1, "{file}: manifest of {}", r.name);
        }
    }
    for r in &replicas[1..] {
        assert_eq!(
            fingerprint(&r.name),
            fp,
            "{}: the shared certificate",
            r.name
        );
    }

    // A replica killed mid-fetch: the fetch goes on from another, through
    // a 20 MB/s relay so that the kill lands mid-transfer.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");
    let relay = common::relay::Relay::tcp(
        format!("127.0.0.1:{}", replicas[0].port).parse().unwrap(),
        20_000_000,
    );
    let first = format!("http://{}/v1/files/big.zt", relay.addr);
    let mirror = format!("{}/v1/files/big.zt", replicas[1].http());
    let r = fault_mid_fetch(&first, &out, &["--mirror", &mirror], || {
        docker_ok(&["kill", &replicas[0].name]);
    });
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains(&format!("going on from {mirror}")), "{err}");
    assert!(err.contains("resumed from the journal"), "{err}");
    same_objects(&big, &out, None);
    drop(relay);
    docker_ok(&["start", &replicas[0].name]);
    wait_ready(&replicas[0].http(), &replicas[0].name);

    // A rolling restart under a steady, bounded load: two clients fetch
    // the sample model over alternating transports, each naming every
    // replica (starting from a different one), until the restart is over.
    let stop = Arc::new(AtomicBool::new(false));
    let urls: Vec<(String, String)> = replicas
        .iter()
        .map(|r| {
            (
                format!("{}/v1/files/sample.zt", r.http()),
                format!("{}/sample.zt", r.quic()),
            )
        })
        .collect();
    let clients: Vec<_> = (0..2)
        .map(|c| {
            let (stop, urls, fp) = (Arc::clone(&stop), urls.clone(), fp.clone());
            std::thread::spawn(move || {
                let dir = tempfile::tempdir().unwrap();
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
                        std::fs::read(&out).unwrap()
                            == std::fs::read(repo().join("models/sample.zt")).unwrap(),
                        "fetch {i}: not the served file"
                    );
                    std::fs::remove_file(&out).unwrap();
                    done += 1;
                    i += 2;
                    std::thread::sleep(Duration::from_millis(50));
                }
                done
            })
        })
        .collect();
    let started = Instant::now();
    for r in &replicas {
        std::thread::sleep(Duration::from_secs(2));
        docker_ok(&["restart", "-t", "10", &r.name]);
        wait_ready(&r.http(), &r.name);
    }
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let fetched: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    eprintln!(
        "rolling restart: {fetched} fetches in {:.1} s, all verified",
        started.elapsed().as_secs_f64()
    );
    assert!(fetched >= 10, "only {fetched} fetches during the restart");
}
