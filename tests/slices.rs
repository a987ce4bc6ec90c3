//! Slices gathered by the daemon, at the HTTP level (`?slice=`) and over
//! ztp/1 (a `get` with `slice`, feature `slices`): a component that fails
//! its digest is refused before any of it is sliced, a zstd component is
//! refused by name, the cap on runs holds, `HEAD` sends the headers
//! alone, and only the slice's bytes move. Every mix of dimensions and
//! dtypes is checked against numpy in tests/interop/test_slices.py.

mod common;

use common::quic::metric;
use common::{curl, Server};
use zt_client::trust::Trust;
use zt_client::{Client, Options, Status};
use zt_format::slice::Slice;
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

/// `m.zt`: `w` u8 [16, 8] (crc32c) and `z`, the same bytes zstd-compressed.
fn model(root: &std::path::Path) -> Vec<u8> {
    let w: Vec<u8> = (0..128u32).map(|i| (i * 13 % 251) as u8).collect();
    model_of(root, w)
}

/// `m.zt` as [`model`] makes it, with `w` holding `w`.
fn model_of(root: &std::path::Path, w: Vec<u8>) -> Vec<u8> {
    let mut file = Writer::new(Vec::new(), "slices").unwrap();
    let crc = StoreOptions {
        zstd_level: None,
        digest: Some(DigestAlgorithm::Crc32c),
    };
    file.add_dense("w", &[16, 8], DType::U8, &w, crc).unwrap();
    let zstd = StoreOptions {
        zstd_level: Some(3),
        ..crc
    };
    file.add_dense("z", &[16, 8], DType::U8, &w, zstd).unwrap();
    std::fs::write(root.join("m.zt"), file.finish().unwrap()).unwrap();
    w
}

fn url(s: &Server, object: &str, spec: &str) -> String {
    s.url(&format!(
        "/v1/files/m.zt/objects/{object}/data?slice={spec}"
    ))
}

#[test]
fn a_column_block_is_gathered_and_bounded() {
    let root = tempfile::tempdir().unwrap();
    let w = model(root.path());
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(dir.path(), "[limits]\nmax_slice_pieces = 16\n");
    let s = Server::start(root.path(), &["--config", &cfg]);
    // Columns 2:5 of every row: 16 runs of 3 bytes.
    let r = curl(&[], &url(&s, "w", ":,2:5"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let want: Vec<u8> = w.chunks(8).flat_map(|row| row[2..5].to_vec()).collect();
    assert_eq!(r.body, want);
    assert_eq!(r.header("x-zt-shape"), Some("16,3"));
    assert_eq!(r.header("x-zt-slice"), Some("0:16,2:5"));
    // HEAD: the same headers, no body.
    let head = curl(&["-I"], &url(&s, "w", ":,2:5"));
    assert_eq!(head.header("content-length"), Some("48"));
    assert_eq!(head.header("content-digest"), r.header("content-digest"));
    // 16 runs are past a cap of 15: refused by name before any read.
    let dir2 = tempfile::tempdir().unwrap();
    let cfg = common::config_file(dir2.path(), "[limits]\nmax_slice_pieces = 15\n");
    let small = Server::start(root.path(), &["--config", &cfg]);
    let r = curl(&[], &url(&small, "w", ":,2:5"));
    assert_eq!(r.status, 413);
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("slice-too-many-pieces") && body.contains("16 separate runs"),
        "{body}"
    );
    // A compressed component cannot be sliced on the server.
    let r = curl(&[], &url(&s, "z", "0:2"));
    assert_eq!(r.status, 409);
    assert!(String::from_utf8_lossy(&r.body).contains("slice-not-raw-dense"));
}

/// The base64 sha256 of `bytes`, as `Content-Digest` carries it.
fn sha256_b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    let d = DigestAlgorithm::Sha256.digest(bytes);
    let raw = d.sha256().unwrap();
    format!(
        "sha-256=:{}:",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

#[test]
fn a_slice_digest_is_computed_once_per_version_of_the_file() {
    let root = tempfile::tempdir().unwrap();
    let w = model(root.path());
    let s = Server::start(root.path(), &[]);
    let count = |result: &str| {
        metric(
            &s,
            &format!("ztserve_slice_digests_total{{result=\"{result}\"}}"),
        )
    };
    let cols = |w: &[u8]| -> Vec<u8> { w.chunks(8).flat_map(|row| row[2..5].to_vec()).collect() };
    let first = curl(&[], &url(&s, "w", ":,2:5"));
    assert_eq!(first.body, cols(&w));
    assert_eq!(
        first.header("content-digest"),
        Some(sha256_b64(&first.body).as_str())
    );
    assert_eq!((count("computed"), count("kept")), (1, 0));
    // Asked again (a HEAD, then a GET): the digest kept, the same bytes.
    let head = curl(&["-I"], &url(&s, "w", ":,2:5"));
    let again = curl(&[], &url(&s, "w", ":,2:5"));
    assert_eq!(again.body, first.body);
    assert_eq!(
        head.header("content-digest"),
        first.header("content-digest")
    );
    assert_eq!(
        again.header("content-digest"),
        first.header("content-digest")
    );
    assert_eq!((count("computed"), count("kept")), (1, 2));
    assert_eq!(metric(&s, "ztserve_slice_digest_cache_entries"), 1);

    // A new version of the file: its slice is hashed anew, never given the
    // old digest.
    let etag = |s: &Server| {
        curl(&["-I"], &s.url("/v1/files/m.zt"))
            .header("etag")
            .map(str::to_owned)
    };
    let old = etag(&s);
    let w2: Vec<u8> = w.iter().rev().copied().collect();
    let tmp = tempfile::tempdir().unwrap();
    model_of(tmp.path(), w2.clone());
    std::fs::rename(tmp.path().join("m.zt"), root.path().join("m.zt")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while etag(&s) == old {
        assert!(
            std::time::Instant::now() < deadline,
            "the new version was never served"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let fresh = curl(&[], &url(&s, "w", ":,2:5"));
    assert_eq!(fresh.body, cols(&w2));
    assert_ne!(fresh.body, first.body);
    assert_eq!(
        fresh.header("content-digest"),
        Some(sha256_b64(&fresh.body).as_str())
    );
    assert_eq!(count("computed"), 2);
}

#[test]
fn a_file_rewritten_in_place_with_its_time_put_back_is_hashed_anew() {
    // Digests off: the ETag is the header, the size and the modification
    // time, all three the same after this rewrite; only the change time
    // (and the bytes) move.
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("m.safetensors");
    let header = br#"{"w":{"dtype":"U8","shape":[16,8],"data_offsets":[0,128]}}"#;
    let write = |data: &[u8]| {
        let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
        bytes.extend_from_slice(header);
        bytes.extend_from_slice(data);
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, &bytes, 0).unwrap();
        f
    };
    let one: Vec<u8> = (0..128u8).collect();
    let when = write(&one).metadata().unwrap().modified().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(dir.path(), "[digests]\nalgorithm = \"off\"\n");
    let s = Server::start(root.path(), &["--config", &cfg]);
    let u = s.url("/v1/files/m.safetensors/objects/w/data?slice=:,2:5");
    let first = curl(&[], &u);
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert_eq!(
        first.header("content-digest"),
        Some(sha256_b64(&first.body).as_str())
    );
    let etag = curl(&["-I"], &s.url("/v1/files/m.safetensors"))
        .header("etag")
        .map(str::to_owned);

    let two: Vec<u8> = one.iter().map(|b| b ^ 0x5a).collect();
    write(&two).set_modified(when).unwrap();
    let cols: Vec<u8> = two.chunks(8).flat_map(|row| row[2..5].to_vec()).collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        // Until the daemon has looked at the file again it may refuse the
        // slice (the file changed under it); whatever it sends comes under
        // the digest of exactly those bytes.
        let r = curl(&[], &u);
        if r.status == 200 {
            let digest = sha256_b64(&r.body);
            assert_eq!(r.header("content-digest"), Some(digest.as_str()));
            if r.body == cols {
                break;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the new bytes were never served"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let again = curl(&["-I"], &s.url("/v1/files/m.safetensors"))
        .header("etag")
        .map(str::to_owned);
    assert_eq!(again, etag, "the test means an ETag that did not move");
}

#[test]
fn a_corrupt_component_is_never_sliced() {
    let root = tempfile::tempdir().unwrap();
    model(root.path());
    let s = Server::start(root.path(), &[]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&curl(&[], &s.url("/v1/files/m.zt/manifest")).body).unwrap();
    let offset = manifest["objects"]["w"]["components"]["data"]["offset"]
        .as_u64()
        .unwrap();
    drop(s);
    let path = root.path().join("m.zt");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize + 100] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let s = Server::start(root.path(), &[]);
    // A slice that does not touch the corrupt byte: refused all the same.
    let r = curl(&[], &url(&s, "w", "0:1"));
    assert_eq!(r.status, 409, "{}", String::from_utf8_lossy(&r.body));
    let body = String::from_utf8_lossy(&r.body);
    assert!(
        body.contains("corrupt") && body.contains("digest-mismatch"),
        "{body}"
    );
}

/// `spec` of `object` read through the client over ztp/1 from `s`.
fn over_ztp(s: &Server, object: &str, spec: &str) -> zt_client::Result<(Vec<u8>, Vec<u64>)> {
    let (q, fp) = s.quic.clone().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let options = Options {
            trust: Trust::fingerprint(&fp).unwrap(),
            require_digest: true,
            ..Options::default()
        };
        let client = Client::connect(&format!("quic://{q}/m.zt"), options).await?;
        let remote = client.manifest().await?;
        let slice = Slice::parse(spec).unwrap();
        let (d, shape) = client.read_slice(&remote, object, &slice).await?;
        assert_eq!(d.verification, zt_client::Verification::Verified);
        assert_eq!(d.data.as_slice().as_ptr() as usize % 64, 0);
        client.close().await;
        Ok((d.data.as_slice().to_vec(), shape))
    })
}

#[test]
fn over_ztp_only_the_slice_moves_under_its_own_digest() {
    let root = tempfile::tempdir().unwrap();
    let w = model(root.path());
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(dir.path(), "[limits]\nmax_slice_pieces = 8\n");
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let before = metric(&s, "ztserve_quic_bytes_sent_total");
    // Columns 2:5 of rows 0:8: 8 runs of 3 bytes.
    let (got, shape) = over_ztp(&s, "w", "0:8,2:5").unwrap();
    let want: Vec<u8> = w[..64]
        .chunks(8)
        .flat_map(|row| row[2..5].to_vec())
        .collect();
    assert_eq!((got, shape), (want, vec![8, 3]));
    assert_eq!(
        metric(&s, "ztserve_quic_bytes_sent_total") - before,
        24,
        "exactly the slice's bytes moved"
    );
    // Rows and a block within them.
    let (got, shape) = over_ztp(&s, "w", "3:5,6:8").unwrap();
    assert_eq!((got, shape), (vec![w[30], w[31], w[38], w[39]], vec![2, 2]));
    // 16 runs, past the cap of 8: refused by the server, naming the rule.
    let e = over_ztp(&s, "w", ":,1:2").unwrap_err();
    assert!(
        matches!(
            e,
            zt_client::Error::Server {
                status: Status::Ztp(_),
                ..
            }
        ),
        "{e}"
    );
    let text = e.to_string();
    assert!(
        text.contains("slice-too-many-pieces") || text.contains("16 separate runs"),
        "{text}"
    );
    // A compressed component cannot be gathered: refused by name.
    let e = over_ztp(&s, "z", "0:2").unwrap_err();
    assert!(e.to_string().contains("slice-not-raw-dense"), "{e}");
    // Out of bounds: refused by the client before asking, by the rule.
    let e = over_ztp(&s, "w", "0:17").unwrap_err();
    assert!(e.to_string().contains("slice-out-of-bounds"), "{e}");
}

#[test]
fn over_ztp_a_corrupt_component_is_never_sliced() {
    let root = tempfile::tempdir().unwrap();
    model(root.path());
    let file = zt_format::ZtFile::open(root.path().join("m.zt")).unwrap();
    let offset = file.manifest().component("w", "data").unwrap().offset;
    drop(file);
    let path = root.path().join("m.zt");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize + 100] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let s = Server::start_quic(root.path(), &[]);
    let e = over_ztp(&s, "w", "0:1").unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("digest-mismatch") || text.contains("corrupt"),
        "{text}"
    );
}
