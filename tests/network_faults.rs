//! Fetches over a far link (a user-space relay delaying every byte) and
//! over a lossy loopback, inside a network namespace the test creates:
//! with 1% and 5% of packets dropped (TCP and UDP alike) both
//! transports complete with every digest checked and the bytes identical;
//! with every connection cut after a few MiB both fail with a clear
//! transport error within the silence timeout, leave nothing that looks
//! complete, and resume once the link is back. The namespace needs root (that test
//! is skipped otherwise).
//! Throughput at each loss rate is a benchmark: `cargo bench --bench
//! fetch -- 3` with `ZT_BENCH_ONLY=5`.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use common::fetch::{same_objects, wait_bounded};
use common::netns::Netns;
use common::relay::Relay;
use common::Server;

/// `dir/big.zt`: 24 components of 1 MiB.
fn model(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("big.zt");
    common::layered_model(&p, 0..24);
    p
}

/// The daemon inside `ns`, and `zt fetch` URLs (with extra arguments) for
/// both transports; HTTP fetches over two connections.
fn serve(ns: &Netns, root: &Path) -> (Server, [(String, Vec<String>); 2]) {
    let s = Server::start_quic_via(ns.exec(), root, &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let urls = [
        (
            s.url("/v1/files/big.zt"),
            vec!["--connections".into(), "2".into()],
        ),
        (
            format!("quic://{q}/big.zt"),
            vec!["--cert-fingerprint".into(), fp],
        ),
    ];
    (s, urls)
}

/// The fetch succeeded and delivered `big` byte-identical into `out`
/// (removed afterwards); prints the rate it ran at.
fn assert_delivered(what: &str, r: &Output, started: Instant, big: &Path, out: &Path) {
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{what}: {err}");
    let size = std::fs::metadata(big).unwrap().len() as f64;
    eprintln!(
        "{what}: {:.1} MB/s",
        size / started.elapsed().as_secs_f64() / 1e6
    );
    same_objects(big, out, None);
    std::fs::remove_file(out).unwrap();
}

fn fetch_in(ns: &Netns, url: &str, extra: &[String], out: &Path) -> Output {
    let child = ns
        .command(common::zt_bin())
        .args(["fetch", url, "-o", out.to_str().unwrap()])
        .args(extra)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_bounded(child, Duration::from_secs(120))
}

#[test]
fn lossy_links_deliver_verified_bytes_or_fail_clearly() {
    let Some(ns) = Netns::create("lossy") else {
        common::skip_unprivileged("cannot create a network namespace with iptables (needs root)");
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let big = model(root.path());
    let (_s, urls) = serve(&ns, root.path());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");

    for loss in [1.0, 5.0] {
        ns.set_loss(loss);
        for (url, extra) in &urls {
            let start = Instant::now();
            let r = fetch_in(&ns, url, extra, &out);
            assert_delivered(&format!("{loss}% loss, {url}"), &r, start, &big, &out);
        }
        assert!(ns.dropped() > 0, "the loss rule dropped packets");
    }

    // The link dies mid-fetch: every connection is cut after 3 MiB of the
    // model's 24 (HTTP fetches over two), so whatever the two processes'
    // pace the fetch cannot finish. A transport error within the silence
    // timeout, a part file and a journal of what did arrive, no output;
    // then, with the link back, a fetch resumes from the journal.
    for (url, extra) in &urls {
        ns.cut_after(3 << 20);
        let started = Instant::now();
        let r = fetch_in(&ns, url, extra, &out);
        let err = String::from_utf8_lossy(&r.stderr);
        eprintln!("dead link, {url}: {err}");
        assert_eq!(r.status.code(), Some(4), "{url}: {err}");
        assert!(err.contains(" of 24 components undelivered"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(60), "{url}");
        assert!(!out.exists(), "{url}: no output that looks complete");
        let journal = std::fs::read_to_string(out.with_file_name("big.zt.part.journal")).unwrap();
        assert!(journal.lines().count() > 1, "{url}: components journaled");
        ns.set_loss(0.0);
        let r = fetch_in(&ns, url, extra, &out);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "{url}: {err}");
        assert!(err.contains("resumed from the journal"), "{url}: {err}");
        same_objects(&big, &out, None);
        std::fs::remove_file(&out).unwrap();
    }
}

/// 25 ms each way (a 50 ms round trip) at 50 MB/s, through the relay:
/// both transports deliver the model byte-identical, digests checked.
#[test]
fn a_far_link_delivers_verified_bytes() {
    let root = tempfile::tempdir().unwrap();
    let big = model(root.path());
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let delay = Duration::from_millis(25);
    let tcp = Relay::tcp_delayed(s.addr.parse().unwrap(), 50_000_000, delay);
    let udp = Relay::udp_delayed(q.parse().unwrap(), 50_000_000, delay);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");
    for (url, extra) in [
        (format!("http://{}/v1/files/big.zt", tcp.addr), vec![]),
        (
            format!("quic://{}/big.zt", udp.addr),
            vec!["--cert-fingerprint", fp.as_str()],
        ),
    ] {
        let start = Instant::now();
        let r = std::process::Command::new(common::zt_bin())
            .args(["fetch", &url, "-o", out.to_str().unwrap()])
            .args(&extra)
            .output()
            .unwrap();
        assert_delivered(&format!("50 ms round trip, {url}"), &r, start, &big, &out);
    }
    // The daemon's default congestion control (`auto`) sent to this far
    // peer with BBR, on each of the fetch's two connections.
    let by = |c: &str| format!("ztserve_quic_congestion_total{{controller=\"{c}\"}}");
    let ended = common::eventually(Duration::from_secs(10), || {
        common::quic::metric(&s, &by("bbr")) == 2
    });
    assert!(ended, "bbr: {}", common::quic::metric(&s, &by("bbr")));
    assert_eq!(common::quic::metric(&s, &by("cubic")), 0);
}
