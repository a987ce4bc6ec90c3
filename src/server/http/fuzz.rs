//! The body of the `http_request` fuzz target, shared with the corpus
//! replay test: arbitrary bytes read as a request line and headers, sent
//! through the real router (no socket) over a small served tree. The
//! daemon must answer every request without an internal error, and what it
//! says about a body (`Content-Length`, `Content-Range`) must match the
//! body it sends.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

use crate::server::config::{self, Sources};
use crate::server::State;

/// A served tree and its router, built once per fuzzing process.
#[derive(Debug)]
pub struct Harness {
    rt: tokio::runtime::Runtime,
    router: axum::Router,
    dir: PathBuf,
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn sample() -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), "fuzz.zt").expect("writer");
    let crc = StoreOptions {
        zstd_level: None,
        digest: Some(DigestAlgorithm::Crc32c),
    };
    let zstd = StoreOptions {
        zstd_level: Some(3),
        digest: Some(DigestAlgorithm::Sha256),
    };
    let data: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let plan = [
        ("model.layers.0.w", crc),
        ("model.layers.1.w", zstd),
        ("lm_head.weight", StoreOptions::default()),
    ];
    for (name, store) in plan {
        w.add_dense(name, &[1024], DType::F32, &data, store)
            .expect("add");
    }
    w.finish().expect("finish")
}

impl Harness {
    /// Writes a small tree (one good file with raw, zstd and undigested
    /// components, one corrupt file) and builds the router over it.
    pub fn new() -> Harness {
        let dir = std::env::temp_dir().join(format!("ztserve-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).expect("temp dir");
        std::fs::write(dir.join("m.zt"), sample()).expect("write");
        std::fs::write(dir.join("sub/bad.zt"), b"ZTEN1000 not a file").expect("write");
        let sources = Sources {
            flags: vec![("root", toml::Value::String(dir.display().to_string()))],
            ..Sources::default()
        };
        let state = State::new(config::load(&sources).expect("config")).expect("state");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(state.catalog.rescan());
        state.ready.store(true, Ordering::SeqCst);
        let router = super::router(Arc::clone(&state));
        Harness { rt, router, dir }
    }

    /// One request from `data`: `METHOD TARGET` on the first line, then
    /// `Name: value` lines. Unparseable requests are skipped (`None`);
    /// otherwise the answer's status.
    pub fn run(&self, data: &[u8]) -> Option<StatusCode> {
        let text = String::from_utf8_lossy(data);
        let mut lines = text.split('\n');
        let first = lines.next().unwrap_or_default();
        let (method, target) = first.split_once(' ').unwrap_or(("GET", first));
        let Ok(method) = Method::from_bytes(method.as_bytes()) else {
            return None;
        };
        let mut req = Request::builder().method(method.clone()).uri(target);
        for line in lines {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.trim().as_bytes()),
                HeaderValue::from_str(v.trim()),
            ) {
                req = req.header(k, v);
            }
        }
        let Ok(req) = req.body(Body::empty()) else {
            return None;
        };
        let (status, headers, body) = self.rt.block_on(async {
            let resp = self.router.clone().oneshot(req).await.expect("infallible");
            let (parts, mut body) = resp.into_parts();
            // Copied out piece by piece, each piece dropped as a client's
            // socket would take it: a piece holds its connection's window
            // (`flow.rs`) until dropped, so holding them all would stall
            // a body longer than the window.
            let mut bytes = Ok(Vec::new());
            while let Some(frame) = body.frame().await {
                match (frame, &mut bytes) {
                    (Ok(f), Ok(out)) => {
                        if let Some(data) = f.data_ref() {
                            out.extend_from_slice(data);
                        }
                    }
                    (Err(e), _) => {
                        bytes = Err(e);
                        break;
                    }
                    (Ok(_), Err(_)) => break,
                }
            }
            (parts.status, parts.headers, bytes)
        });
        assert_ne!(status, StatusCode::INTERNAL_SERVER_ERROR, "{first:?}");
        // A body cut short is how a file truncated mid-response shows; here
        // nothing changes on disk, so every body must arrive whole.
        let body = body.expect("the body streams to its end");
        let head = method == Method::HEAD || status == StatusCode::NOT_MODIFIED;
        if head {
            assert!(body.is_empty(), "{first:?}: a bodiless answer with a body");
        } else if let Some(len) = headers.get(header::CONTENT_LENGTH) {
            let len: usize = len
                .to_str()
                .ok()
                .and_then(|s| s.parse().ok())
                .expect("length");
            assert_eq!(len, body.len(), "{first:?}: Content-Length");
        }
        if status == StatusCode::PARTIAL_CONTENT && !head {
            if let Some(range) = headers.get(header::CONTENT_RANGE) {
                let r = range.to_str().expect("ascii");
                let span = r.strip_prefix("bytes ").and_then(|r| r.split_once('/'));
                let (a, b) = span
                    .and_then(|(s, _)| s.split_once('-'))
                    .and_then(|(a, b)| Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?)))
                    .expect("Content-Range: bytes A-B/N");
                assert_eq!(b + 1 - a, body.len(), "{first:?}: {r}");
            }
        }
        Some(status)
    }
}

impl Default for Harness {
    fn default() -> Self {
        Harness::new()
    }
}
