//! `zt fetch URL --mirror URL`: two servers of the same file (replicas with
//! one certificate, as replicas share theirs); the first is killed in the
//! middle of a fetch, and the fetch goes on from the second, keeping what
//! it had verified, and ends verified and whole. Over HTTP and ztp/1.
//! A server too busy for the fetch hands it on at once.

mod common;

use std::path::Path;

use common::fetch::{big_model, fault_mid_fetch, same_objects, zt};
use common::Server;

/// A state directory holding one certificate and key, for both replicas.
fn shared_state() -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    let first = Server::start_quic(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("models")
            .as_path(),
        &["--state-dir", state.path().to_str().unwrap()],
    );
    drop(first);
    assert!(state.path().join("quic-cert.pem").exists());
    state
}

/// A replica with the certificate in `cert_from` (copied: replicas share
/// no state directory, only the certificate).
fn replica(root: &Path, cert_from: &Path) -> (Server, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    for f in ["quic-cert.pem", "quic-key.pem"] {
        std::fs::copy(cert_from.join(f), state.path().join(f)).unwrap();
    }
    let s = Server::start_quic(root, &["--state-dir", state.path().to_str().unwrap()]);
    (s, state)
}

fn assert_went_on(r: &std::process::Output, big: &Path, out: &Path, first: &str, second: &str) {
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(
        err.contains(first) && err.contains(&format!("going on from {second}")),
        "{err}"
    );
    assert!(err.contains("resumed from the journal"), "{err}");
    assert!(zt(&["verify", out.to_str().unwrap()]).status.success());
    same_objects(big, out, None);
    assert!(!out.with_file_name("big.zt.part").exists());
    assert!(!out.with_file_name("big.zt.part.journal").exists());
}

#[test]
fn a_server_killed_mid_http_fetch_hands_it_to_the_mirror() {
    let root = tempfile::tempdir().unwrap();
    let big = big_model(root.path());
    let cert = shared_state();
    let (a, _sa) = replica(root.path(), cert.path());
    let (b, _sb) = replica(root.path(), cert.path());
    // 20 MB/s through the relay: the kill lands mid-transfer.
    let relay = common::relay::Relay::tcp(a.addr.parse().unwrap(), 20_000_000);
    let first = format!("http://{}/v1/files/big.zt", relay.addr);
    let second = b.url("/v1/files/big.zt");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");
    let r = fault_mid_fetch(&first, &out, &["--mirror", &second], || drop(a));
    assert_went_on(&r, &big, &out, &first, &second);
}

#[test]
fn a_server_killed_mid_quic_fetch_hands_it_to_the_mirror() {
    let root = tempfile::tempdir().unwrap();
    let big = big_model(root.path());
    let cert = shared_state();
    let (a, _sa) = replica(root.path(), cert.path());
    let (b, _sb) = replica(root.path(), cert.path());
    let (qa, fp) = a.quic.clone().unwrap();
    let (qb, fp_b) = b.quic.clone().unwrap();
    assert_eq!(fp, fp_b, "the replicas share a certificate");
    let relay = common::relay::Relay::udp(qa.parse().unwrap(), 20_000_000);
    let first = format!("quic://{}/big.zt", relay.addr);
    let second = format!("quic://{qb}/big.zt");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");
    let r = fault_mid_fetch(
        &first,
        &out,
        &["--mirror", &second, "--cert-fingerprint", &fp],
        || drop(a),
    );
    assert_went_on(&r, &big, &out, &first, &second);
}

/// A name with two addresses (`--resolve`, as a resolver with two A
/// records would give): nothing answers at the first, the file is at the
/// second; the fetch reports the first and completes from the second, over
/// HTTP and over ztp/1 (whose certificate names no host: trusted by
/// fingerprint).
#[test]
fn a_name_with_several_addresses_is_tried_address_by_address() {
    let port = common::free_port();
    let state = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ztserve"));
    cmd.arg("--root")
        .arg(common::repo().join("models"))
        .args(["--listen", &format!("127.0.0.3:{port}")])
        .args(["--log-format", "json", "--log-level", "info", "--state-dir"])
        .arg(state.path());
    let s = Server::from_command(cmd, None);
    let (_, fp) = s.quic.clone().unwrap();
    let resolve = format!("replicas.test:{port}:127.0.0.2,127.0.0.3");
    let dir = tempfile::tempdir().unwrap();
    for url in [
        format!("http://replicas.test:{port}/v1/files/sample.zt"),
        format!("quic://replicas.test:{port}/sample.zt"),
    ] {
        let out = dir.path().join("sample.zt");
        let _ = std::fs::remove_file(&out);
        let r = zt(&[
            "fetch",
            &url,
            "-o",
            out.to_str().unwrap(),
            "--resolve",
            &resolve,
            "--cert-fingerprint",
            &fp,
        ]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(r.status.success(), "{url}: {err}");
        assert!(
            err.contains(&format!("{url} (at 127.0.0.2:{port})"))
                && err.contains(&format!("going on from {url} (at 127.0.0.3:{port})")),
            "{url}: {err}"
        );
        assert!(
            std::fs::read(&out).unwrap()
                == std::fs::read(common::repo().join("models/sample.zt")).unwrap(),
            "{url}: not the served file"
        );
    }
}

/// A server that answers every request `503` with `Retry-After: 1` (as a
/// ztserve past its CPU queue, or a proxy shedding load): its address and
/// how many requests it has answered.
fn always_busy() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&count);
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            while head.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                line.clear();
            }
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let body = "{\"error\": \"busy\"}";
            let _ = write!(
                conn,
                "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (addr, count)
}

/// A busy first server (`503`, `Retry-After: 1`) hands the fetch to the
/// mirror at its first refusal, not after `--busy-wait`; the same server
/// alone is asked again after each wait, and the fetch then fails as
/// passing (exit 4), saying how often it was refused; when the mirror
/// after it fails too, the busy server is asked again.
#[test]
fn a_busy_server_hands_the_fetch_on_at_once_and_a_lone_one_is_waited_on() {
    use std::sync::atomic::Ordering::SeqCst;
    let s = Server::start(&common::repo().join("models"), &[]);
    let (busy, asked) = always_busy();
    let first = format!("http://{busy}/sample.zt");
    let second = s.url("/v1/files/sample.zt");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sample.zt");
    let o = out.to_str().unwrap();
    let r = zt(&["fetch", &first, "-o", o, "--mirror", &second]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains(&format!("going on from {second}")), "{err}");
    assert_eq!(
        asked.load(SeqCst),
        1,
        "handed on at the first refusal: {err}"
    );
    let sample = std::fs::read(common::repo().join("models/sample.zt")).unwrap();
    assert!(
        std::fs::read(&out).unwrap() == sample,
        "not the served file"
    );

    let alone = dir.path().join("alone.zt");
    let r = zt(&[
        "fetch",
        &first,
        "-o",
        alone.to_str().unwrap(),
        "--busy-wait",
        "3",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(4), "{err}");
    let times = asked.load(SeqCst) - 1;
    assert!(times >= 2, "asked {times} times: {err}");
    assert!(err.contains(&format!("refused {times} times")), "{err}");
    assert!(!alone.exists(), "nothing left looking complete");

    // Busy, then a mirror that has no such file: the busy one is asked
    // again, for what is left of --busy-wait, before the fetch fails.
    let before = asked.load(SeqCst);
    let missing = s.url("/v1/files/no-such.zt");
    let out = dir.path().join("back.zt");
    let o = out.to_str().unwrap();
    let r = zt(&[
        "fetch",
        &first,
        "-o",
        o,
        "--mirror",
        &missing,
        "--busy-wait",
        "3",
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(4), "{err}");
    assert!(err.contains(&format!("going on from {first}")), "{err}");
    let again = asked.load(SeqCst) - before;
    assert!(again >= 2, "the busy server asked {again} times: {err}");
}
