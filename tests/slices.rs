//! Slices gathered by the daemon (`?slice=`), at the HTTP level: a
//! component that fails its digest is refused before any of it is sliced,
//! a zstd component is refused by name, the cap on runs holds, `HEAD`
//! sends the headers alone. Every mix of dimensions and dtypes is checked
//! against numpy in tests/interop/test_slices.py.

mod common;

use common::{curl, Server};
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

/// `m.zt`: `w` u8 [16, 8] (crc32c) and `z`, the same bytes zstd-compressed.
fn model(root: &std::path::Path) -> Vec<u8> {
    let w: Vec<u8> = (0..128u32).map(|i| (i * 13 % 251) as u8).collect();
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
