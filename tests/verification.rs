//! Verification off the first request's path (issue 17, item 2): a
//! whole-file GET sends its first bytes after checking only the
//! components under them, and cuts the connection (a short body, never a
//! wrong byte) when a later component fails its digest; the background
//! verifier checks every component soon after the file is found, so a
//! corrupt component nobody asked for is refused at once.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::quic::metric;
use common::{curl, eventually, layered_model, Server};

const MIB: usize = 1 << 20;
const LAYERS: u32 = 8;

/// A file of 8 components of 1 MiB with its last component's first byte
/// flipped in place (the manifest, and so its digest, unchanged); the
/// file's bytes as they were, and the offset of the flipped byte.
fn corrupt_last(root: &std::path::Path) -> (Vec<u8>, usize) {
    let path = root.join("model.zt");
    layered_model(&path, 0..LAYERS);
    let good = std::fs::read(&path).unwrap();
    let f = zt_format::ZtFile::open(&path).unwrap();
    let last = &f.manifest().objects[&format!("model.layers.{}.w", LAYERS - 1)];
    let at = last.components["data"].offset as usize;
    let mut bad = good.clone();
    bad[at] ^= 0xff;
    std::fs::write(&path, &bad).unwrap();
    (good, at)
}

/// The corrupt component, asked for by its URL.
fn last_component(s: &Server) -> common::Reply {
    let name = format!("model.layers.{}.w", LAYERS - 1);
    curl(
        &[],
        &s.url(&format!("/v1/files/model.zt/objects/{name}/data")),
    )
}

#[test]
fn a_whole_file_get_streams_and_is_cut_at_a_corrupt_component() {
    let root = tempfile::tempdir().unwrap();
    let (good, at) = corrupt_last(root.path());
    let cfg = common::config_file(root.path(), "[digests]\nverify_background = false\n");
    let s = Server::start(root.path(), &["--config", &cfg]);
    let mut conn = TcpStream::connect(&s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        conn,
        "GET /v1/files/model.zt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = conn.read_to_end(&mut raw);
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    // The headers went out before the last component was checked.
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", good.len())),
        "{head}"
    );
    let body = &raw[end + 4..];
    assert!(
        body.len() <= at && body.len() >= MIB,
        "the body stops before the corrupt component ({} of {} bytes, corrupt at {at})",
        body.len(),
        good.len()
    );
    assert_eq!(body, &good[..body.len()], "every byte sent is the file's");
    assert_eq!(metric(&s, "ztserve_digest_aborts_total"), 1);
    // The component itself is refused by name; the daemon still serves.
    let r = last_component(&s);
    assert_eq!(r.status, 409);
    assert!(String::from_utf8_lossy(&r.body).contains("model.zt"));
    let r = curl(&["-r", "0-1023"], &s.url("/v1/files/model.zt"));
    assert_eq!((r.status, r.body.as_slice()), (206, &good[..1024]));
}

#[test]
fn the_background_verifier_finds_what_no_request_asked_for() {
    let root = tempfile::tempdir().unwrap();
    corrupt_last(root.path());
    let s = Server::start(root.path(), &[]);
    assert!(
        eventually(Duration::from_secs(20), || {
            metric(&s, "ztserve_digest_verified_total") == u64::from(LAYERS)
        }),
        "every component checked in the background"
    );
    assert_eq!(metric(&s, "ztserve_digest_unverified"), 0);
    assert!(metric(&s, "ztserve_digest_verified_bytes_total") >= u64::from(LAYERS) * MIB as u64);
    // The first request for the corrupt component finds the verdict: no
    // byte of it goes out, even in a whole-file GET (cut before it).
    let r = last_component(&s);
    assert_eq!(r.status, 409);
    let why = String::from_utf8_lossy(&r.body);
    assert!(why.contains("model.zt") && why.contains("digest"), "{why}");
    let logged = std::iter::from_fn(|| s.logs.recv_timeout(Duration::from_millis(200)).ok())
        .any(|l| l.contains("background verification") && l.contains("model.zt"));
    assert!(logged, "the verifier logs what it found");
}
