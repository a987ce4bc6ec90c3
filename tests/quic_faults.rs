//! Faults on the QUIC side while serving: a client that stops reading, and
//! a client killed mid-transfer. The server must free the connection and
//! its streams (its gauges say so) and keep serving others.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::quic::{close_code_within, metric, raw_connect};
use common::{eventually, Server};
use ztp_proto::{frame, Code, Get, Message};

/// `dir/big.zt`: 16 components of 1 MiB.
fn big_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    common::layered_model(&dir.path().join("big.zt"), 0..16);
    dir
}

fn config(dir: &std::path::Path, body: &str) -> String {
    common::config_file(dir, &format!("[quic]\n{body}"))
}

fn gauges_drained(s: &Server) -> bool {
    eventually(Duration::from_secs(15), || {
        metric(s, "ztserve_quic_connections") == 0 && metric(s, "ztserve_quic_streams") == 0
    })
}

/// A connection that asks for all of `big.zt` with small receive windows
/// and never reads a component stream.
async fn stalled_reader(addr: &str, fp: &str) -> quinn::Connection {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(64 * 1024))
        .receive_window(quinn::VarInt::from_u32(256 * 1024));
    let conn = raw_connect(addr, fp, Some(t)).await;
    let (mut send, recv) = conn.open_bi().await.unwrap();
    let get = Message::Get(Get {
        id: 1,
        path: "big.zt".into(),
        ..Get::default()
    });
    send.write_all(&frame(&get).unwrap()).await.unwrap();
    // The control stream's receive half stays open with the connection.
    std::mem::forget(recv);
    conn
}

/// `zt info` over QUIC: whether it succeeded, and what it said.
fn zt_info(addr: &str, fp: &str) -> (bool, String) {
    let out = Command::new(common::zt_bin())
        .args([
            "info",
            &format!("quic://{addr}/big.zt"),
            "--cert-fingerprint",
            fp,
        ])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_readers_cannot_hold_the_connection_cap() {
    let root = big_root();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        "max_connections = 2
stall_timeout_secs = 2
",
    );
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let (addr, fp) = s.quic.clone().unwrap();
    let _a = stalled_reader(&addr, &fp).await;
    let _b = stalled_reader(&addr, &fp).await;
    // Both slots are held: a third client is refused, not left hanging.
    let (ok, err) = tokio::task::spawn_blocking({
        let (addr, fp) = (addr.clone(), fp.clone());
        move || zt_info(&addr, &fp)
    })
    .await
    .unwrap();
    assert!(!ok, "a third connection past the cap of 2 was accepted");
    eprintln!("refused while full: {err}");
    // The stall timeout frees the slots; the next client is served.
    let served = tokio::task::spawn_blocking(move || {
        eventually(Duration::from_secs(20), || zt_info(&addr, &fp).0)
    })
    .await
    .unwrap();
    assert!(served, "the stalled readers kept their slots");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_as_stalled() {
    let root = big_root();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), "stall_timeout_secs = 1\n");
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let (addr, fp) = s.quic.clone().unwrap();

    let conn = stalled_reader(&addr, &fp).await;
    let started = Instant::now();
    assert_eq!(
        close_code_within(&conn, Duration::from_secs(20)).await,
        Some(u64::from(Code::Stalled.value()))
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(
        gauges_drained(&s),
        "the server freed the connection and its streams"
    );

    // Everyone else is still served.
    let ok = Command::new(common::zt_bin())
        .args([
            "info",
            &format!("quic://{addr}/big.zt"),
            "--cert-fingerprint",
            &fp,
        ])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}

#[test]
fn a_client_killed_mid_transfer_frees_its_connection_and_streams() {
    let root = big_root();
    let dir = tempfile::tempdir().unwrap();
    // A killed client sends nothing more; the idle timeout notices.
    let cfg = config(dir.path(), "idle_timeout_secs = 2\n");
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let (addr, fp) = s.quic.clone().unwrap();
    // Through a 10 MB/s relay, so the kill lands mid-transfer.
    let relay = common::relay::Relay::udp(addr.parse().unwrap(), 10_000_000);
    let out = dir.path().join("big.zt");
    let mut child = Command::new(common::zt_bin())
        .args(["fetch", &format!("quic://{}/big.zt", relay.addr)])
        .args(["--cert-fingerprint", &fp, "-o"])
        .arg(&out)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || metric(
            &s,
            "ztserve_quic_streams"
        ) > 0),
        "the fetch opened streams"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(metric(&s, "ztserve_quic_connections") >= 1);
    assert!(
        gauges_drained(&s),
        "the server freed the connection and its streams"
    );
    assert!(!out.exists());

    // A new client is served in full.
    let r = Command::new(common::zt_bin())
        .args([
            "fetch",
            &format!("quic://{addr}/big.zt"),
            "--cert-fingerprint",
            &fp,
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(out.exists());
}

/// A client kept open while its server restarts (same address, same
/// certificate): the shutdown closes its connection, and its next
/// requests connect again and are answered, as over HTTP: byte ranges
/// first (on the new connection, which has seen no manifest yet, the
/// answer says whether the server offers them), then a fetch pinned to
/// the version read before the restart. While the server is down a
/// request fails with a transport error naming its address, and one
/// right after it gets that failure without trying again; once the server
/// is back, the next connects again. Once closed by its owner the client
/// connects no more.
#[test]
fn a_client_kept_open_connects_again_after_its_server_restarts() {
    let port = common::free_port();
    let state = tempfile::tempdir().unwrap();
    let start = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ztserve"));
        cmd.arg("--root")
            .arg(common::repo().join("models"))
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--log-format", "json", "--log-level", "info", "--state-dir"])
            .arg(state.path());
        Server::from_command(cmd, None)
    };
    let file = std::fs::read(common::repo().join("models/sample.zt")).unwrap();
    let mut s = start();
    let (_, fp) = s.quic.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let options = zt_client::Options {
            trust: zt_client::trust::Trust::fingerprint(&fp).unwrap(),
            idle_timeout: Duration::from_secs(2),
            ..zt_client::Options::default()
        };
        let url = format!("quic://127.0.0.1:{port}/sample.zt");
        let client = zt_client::Client::connect(&url, options).await.unwrap();
        let before = client.manifest().await.unwrap();
        s.terminate();
        assert_eq!(s.wait(Duration::from_secs(20)), Some(0));
        let mut s = start();
        let ranges = client.read_ranges(&[64..80, 128..144], &before.etag).await;
        assert_eq!(
            ranges.unwrap(),
            vec![file[64..80].to_vec(), file[128..144].to_vec()]
        );
        let mut fetch = client.fetch(&[], Some(&before.etag)).await.unwrap();
        let mut objects = std::collections::BTreeSet::new();
        while let Some(d) = fetch.next().await {
            objects.insert(d.unwrap().object);
        }
        let want: std::collections::BTreeSet<_> =
            before.manifest.objects.keys().map(str::to_owned).collect();
        assert_eq!(objects, want);
        // Down: the request fails, naming where it went.
        s.terminate();
        assert_eq!(s.wait(Duration::from_secs(20)), Some(0));
        let down = client.manifest().await;
        match &down {
            Err(zt_client::Error::Transport(why)) => {
                assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}")
            }
            other => panic!("with the server down: {other:?}"),
        }
        // Right after the failure: the same failure, without a new attempt.
        match client.manifest().await {
            Err(zt_client::Error::Transport(why)) => {
                assert!(why.contains("not tried again"), "{why}")
            }
            other => panic!("right after the failure: {other:?}"),
        }
        // Back, past the pause after a failed attempt.
        let _back = start();
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(client.manifest().await.unwrap().etag, before.etag);
        client.close().await;
        let closed = client.manifest().await;
        assert!(closed.is_err(), "a closed client answered: {closed:?}");
    });
}
