//! Writes the seed inputs of the `ztp_message` and `http_request` fuzz
//! targets into `fuzz/corpus/` (one file per seed; existing files stay).
//!
//! `cargo run --example make_fuzz_seeds`

use std::path::Path;

use ztp_proto::{frame, frame_header, Cancel, Code, ComponentHeader, Done, ErrorMsg, Get};
use ztp_proto::{ManifestMsg, Message};

fn write(dir: &Path, name: &str, data: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(name), data)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let ztp = root.join("ztp_message");
    let messages = [
        Message::Get(Get {
            id: 1,
            path: "m.zt".into(),
            select: vec!["model.layers.0.*".into()],
            order: vec!["lm_head.weight".into()],
            token: Some("t".into()),
            if_match: Some("\"zt-1\"".into()),
            manifest_only: false,
            ranges: vec![(0, 8), (64, 4096)],
            rows: Some((2, 5)),
            slice: vec![(0, 4), (8, 16)],
            share: Some((1, 4)),
        }),
        Message::Get(Get {
            id: 2,
            path: "m.zt".into(),
            manifest_only: true,
            ..Get::default()
        }),
        Message::Cancel(Cancel {
            id: 1,
            object: Some("model.layers.0.w".into()),
            component: Some("data".into()),
        }),
        Message::Cancel(Cancel::default()),
        Message::Manifest(ManifestMsg {
            id: 1,
            etag: "\"zt-1\"".into(),
            size: 4096,
            manifest: vec![0xa0].into(),
            streams: 3,
            features: Vec::new(),
        }),
        Message::Done(Done {
            id: 1,
            sent: 2,
            cancelled: 1,
        }),
        Message::Error(ErrorMsg {
            id: None,
            code: Code::ProtocolViolation,
            message: "bad".into(),
            retry_after_ms: None,
        }),
    ];
    let mut all = vec![1u8];
    for (i, m) in messages.iter().enumerate() {
        let f = frame(m)?;
        // Piece size 7: frames arrive split across pushes.
        let mut seed = vec![7u8];
        seed.extend_from_slice(&f);
        write(&ztp, &format!("message-{i}"), &seed)?;
        all.extend_from_slice(&f);
    }
    write(&ztp, "all-messages", &all)?;
    let header = ComponentHeader {
        id: 1,
        object: "model.layers.0.w".into(),
        component: "data".into(),
        seq: 0,
        dtype: "f32".into(),
        logical_type: None,
        encoding: "zstd".into(),
        length: 100,
        uncompressed_length: Some(4096),
        digest: Some("crc32c:00000000".into()),
        offset: 64,
    };
    let mut seed = vec![255u8];
    seed.extend_from_slice(&frame_header(&header)?);
    write(&ztp, "header", &seed)?;

    let http = root.join("http_request");
    let requests = [
        "GET /v1/files",
        "GET /v1/files/m.zt\nRange: bytes=0-15",
        "HEAD /v1/files/m.zt\nRange: bytes=-16",
        "GET /v1/files/m.zt\nRange: bytes=0-1,5-9,100-\nIf-Range: \"zt-x\"",
        "GET /v1/files/m.zt\nRange: bytes=99999999-\nIf-None-Match: *",
        "GET /v1/files/m.zt/manifest?select=model.*&format=cbor",
        "GET /v1/files/m.zt/manifest\nAccept: application/cbor\nAccept-Encoding: gzip",
        "GET /v1/files/m.zt/manifest?select=nope*",
        "GET /v1/files/m.zt/objects/model.layers.0.w/data\nRange: bytes=10-20",
        "GET /v1/files/m.zt/objects/model.layers.1.w/data?decode=1\nRange: bytes=-100",
        "HEAD /v1/files/m.zt/objects/lm_head.weight/data\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT",
        "GET /v1/files/m.zt?v=zt-0000",
        "GET /v1/files/sub/bad.zt",
        "GET /v1/files/%2e%2e/%2e%2e/etc/passwd",
        "GET /v1/files/m.zt/objects/%00/data",
        "OPTIONS /v1/files/m.zt\nOrigin: https://a.example\nAccess-Control-Request-Method: GET",
        "POST /v1/files/m.zt",
        "GET /metrics",
        "GET /readyz",
        "GET /healthz",
    ];
    for (i, r) in requests.iter().enumerate() {
        write(&http, &format!("request-{i:02}"), r.as_bytes())?;
    }
    println!("seeds written under {}", root.display());
    Ok(())
}
