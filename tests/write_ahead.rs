//! A bounded fetch (what `zt fetch` uses) holds the transfer back while its
//! consumer is slow, over both transports: the daemon's byte counter stops
//! well short of the file while the consumer sleeps, where an unbounded
//! fetch has had the whole file sent by then.

mod common;

use std::time::Duration;

use common::quic::metric;
use common::Server;
use zt_client::trust::Trust;
use zt_client::{Client, Options};

const MIB: u64 = 1 << 20;

/// Components of 1 MiB.
const COMPONENTS: u64 = 240;
const FILE: &str = "write-ahead.zt";
/// Connections of the QUIC fetches: a spread fetch bounded all the same.
const QUIC_CONNECTIONS: usize = 2;

fn sent(s: &Server) -> u64 {
    metric(s, "ztserve_bytes_sent_total")
}

async fn client(url: &str, fp: &str) -> Client {
    let options = Options {
        trust: if url.starts_with("quic") {
            Trust::fingerprint(fp).unwrap()
        } else {
            Trust::Insecure
        },
        // HTTP: parallel requests; QUIC: connections, each with its own
        // flow-control window.
        connections: Some(if url.starts_with("quic") {
            QUIC_CONNECTIONS
        } else {
            4
        }),
        ..Options::default()
    };
    Client::connect(url, options).await.unwrap()
}

/// Takes one component, sleeps, and returns the bytes the daemon sent by
/// then; then takes the rest and checks every component arrived verified.
/// Bytes the daemon sent while the consumer held its first component: a
/// bounded fetch (`bound`) is watched for 3 s, an unbounded one until it
/// has sent more than `past`.
async fn pause_after_one(
    s: &Server,
    url: &str,
    fp: &str,
    bound: Option<u64>,
    past: Option<u64>,
) -> u64 {
    let c = client(url, fp).await;
    let before = sent(s);
    let mut f = match bound {
        Some(b) => c.fetch_bounded(&[], None, b).await.unwrap(),
        None => c.fetch(&[], None).await.unwrap(),
    };
    f.next().await.unwrap().unwrap();
    // A bounded fetch is given 3 s to overrun its bound. An unbounded one
    // is given until it passes `past` (up to 60 s): how soon depends on the
    // machine's speed, not on the code under test.
    let started = std::time::Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let waited = started.elapsed();
        let enough = match past {
            None => waited >= Duration::from_secs(3),
            Some(p) => sent(s) - before > p || waited >= Duration::from_secs(60),
        };
        if enough {
            break;
        }
    }
    let during = sent(s) - before;
    let mut n = 1;
    while let Some(d) = f.next().await {
        let d = d.unwrap();
        assert_eq!(d.data.len() as u64, MIB);
        assert_eq!(d.verification, zt_client::Verification::Verified);
        n += 1;
    }
    assert_eq!(n, COMPONENTS, "{url}: every component delivered");
    during
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_holds_a_bounded_fetch_back() {
    let root = tempfile::tempdir().unwrap();
    common::layered_model(&root.path().join(FILE), 0..COMPONENTS as u32);
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    // HTTP: the budget plus the requests already out. QUIC: the budget
    // plus what flow control lets the daemon count as sent ahead: each
    // connection's 64 MiB window at the client and the daemon's 64 MiB of
    // unacknowledged data in quinn's send buffers.
    let windows = QUIC_CONNECTIONS as u64 * 64 * MIB;
    for (url, most) in [
        (s.url(&format!("/v1/files/{FILE}")), 8 * MIB + 8 * MIB),
        (
            format!("quic://{q}/{FILE}"),
            8 * MIB + windows + 64 * MIB + 4 * MIB,
        ),
    ] {
        let unbounded = pause_after_one(&s, &url, &fp, None, Some(most)).await;
        assert!(
            unbounded > most,
            "{url}: unbounded, more than a bounded fetch may was sent during the pause ({unbounded})"
        );
        let bounded = pause_after_one(&s, &url, &fp, Some(8 * MIB), None).await;
        eprintln!("{url}: sent during the pause: {unbounded} unbounded, {bounded} bounded");
        assert!(
            bounded <= most,
            "{url}: bounded to 8 MiB ahead, {bounded} bytes were sent during the pause"
        );
    }
    // What zt fetch holds by default: 128 MiB ahead (HTTP shows it; over
    // QUIC the windows above add up to more than this file).
    let default = Options::default().write_ahead;
    assert_eq!(default, 128 * MIB);
    let url = s.url(&format!("/v1/files/{FILE}"));
    let during = pause_after_one(&s, &url, &fp, Some(default), None).await;
    assert!(
        during <= default + 16 * MIB && during < COMPONENTS * MIB,
        "{url}: the default bound let {during} bytes through during the pause"
    );
}
