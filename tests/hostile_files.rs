//! Hostile files in the served root: the whole reject corpus, random
//! garbage, a file whose footer claims a 40 GiB manifest, and a zstd bomb.
//! The daemon lists each broken file as unavailable with its rule, keeps
//! serving the good one, refuses the bomb's decoding at the cap, and its
//! peak memory stays far below what any of them claim.

mod common;
#[allow(dead_code)]
#[path = "../benches/support/model.rs"]
mod model;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use common::{curl, peak_rss_kib, repo, Server};
use zt_format::{DType, StoreOptions, Writer};

/// Rules only a read of the component's bytes can find: such files are
/// served, and the component itself is refused.
const READ_TIME: &[&str] = &["digest-mismatch", "decompress-over-cap", "ragged-offsets"];

/// A sparse file of 41 GiB whose footer claims a 40 GiB manifest.
fn claims_40_gib(path: &Path) {
    let f = std::fs::File::create(path).unwrap();
    let size = 41u64 << 30;
    f.set_len(size).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(zt_format::MAGIC, 0).unwrap();
    let mut footer = (40u64 << 30).to_le_bytes().to_vec();
    footer.extend_from_slice(zt_format::MAGIC);
    f.write_all_at(&footer, size - 16).unwrap();
}

/// A valid file whose one zstd component inflates to 256 MiB of zeros.
fn zstd_bomb(path: &Path) {
    let zeros = vec![0u8; 256 << 20];
    let mut w = Writer::new(Vec::new(), "bomb").unwrap();
    let store = StoreOptions {
        zstd_level: Some(1),
        digest: None,
    };
    w.add_dense("w", &[zeros.len() as u64], DType::U8, &zeros, store)
        .unwrap();
    std::fs::write(path, w.finish().unwrap()).unwrap();
}

#[test]
fn hostile_files_are_unavailable_good_ones_served_and_memory_stays_bounded() {
    let root = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("models/sample.zt"),
        root.path().join("sample.zt"),
    )
    .unwrap();
    let rejects = root.path().join("reject");
    std::fs::create_dir(&rejects).unwrap();
    let mut rules = Vec::new();
    for e in std::fs::read_dir(repo().join("tests/reject")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "zt") {
            std::fs::copy(&p, rejects.join(p.file_name().unwrap())).unwrap();
            rules.push(p.file_stem().unwrap().to_string_lossy().into_owned());
        }
    }
    assert!(rules.len() >= 25);
    std::fs::write(root.path().join("garbage.zt"), model::noise(1 << 20, 1)).unwrap();
    let mut tail = model::noise(4096, 2);
    tail.extend_from_slice(&u64::MAX.to_le_bytes());
    tail.extend_from_slice(zt_format::MAGIC);
    std::fs::write(root.path().join("garbage-with-footer.zt"), tail).unwrap();
    claims_40_gib(&root.path().join("claims-40-gib.zt"));
    zstd_bomb(&root.path().join("bomb.zt"));

    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(
        dir.path(),
        "[limits]\nmanifest_cap = 1048576\ndecompress_cap = 16777216\n",
    );
    let s = Server::start(root.path(), &["--config", &cfg]);

    // Files without digests are listed apart until the daemon has
    // computed theirs.
    let listing = || -> serde_json::Value {
        serde_json::from_slice(&curl(&[], &s.url("/v1/files")).body).unwrap()
    };
    assert!(common::eventually(Duration::from_secs(30), || listing()
        ["hashing"]
        .as_array()
        .is_some_and(Vec::is_empty)));
    let v = listing();
    let reasons: BTreeMap<String, String> = v["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let served: Vec<&str> = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();

    // Every structural rule: unavailable, with the rule in the reason.
    for rule in &rules {
        let path = format!("reject/{rule}.zt");
        if READ_TIME.contains(&rule.as_str()) {
            assert!(served.contains(&path.as_str()), "{path} is served");
            // Stored bytes that fail their digest are refused; stored bytes
            // that would inflate past the cap are refused only decoded.
            let decode = if rule == "decompress-over-cap" {
                "?decode=1"
            } else {
                ""
            };
            let role = if rule == "ragged-offsets" {
                "offsets"
            } else {
                "data"
            };
            let r = curl(
                &[],
                &s.url(&format!("/v1/files/{path}/objects/w/{role}{decode}")),
            );
            assert!(r.status == 409 || r.status == 413, "{path}: {}", r.status);
            let body = String::from_utf8_lossy(&r.body);
            assert!(body.contains(rule.as_str()), "{path}: {body}");
        } else {
            let reason = reasons
                .get(&path)
                .unwrap_or_else(|| panic!("{path} is listed unavailable"));
            assert!(reason.contains(rule.as_str()), "{path}: {reason}");
        }
    }
    for bad in ["garbage.zt", "garbage-with-footer.zt", "claims-40-gib.zt"] {
        let reason = reasons
            .get(bad)
            .unwrap_or_else(|| panic!("{bad} unavailable"));
        assert!(!reason.is_empty());
        let r = curl(&[], &s.url(&format!("/v1/files/{bad}")));
        assert_eq!(r.status, 409, "{bad}");
    }
    assert!(
        reasons["claims-40-gib.zt"].contains("cap")
            || reasons["claims-40-gib.zt"].contains("manifest"),
        "{}",
        reasons["claims-40-gib.zt"]
    );

    // The bomb is a valid file: its stored bytes are served; decoding them
    // is refused at the cap, before anything is inflated.
    assert!(served.contains(&"bomb.zt"));
    let raw = curl(&[], &s.url("/v1/files/bomb.zt/objects/w/data"));
    assert_eq!(raw.status, 200);
    assert!(raw.body.len() < 1 << 20, "stored bytes are small");
    let decoded = curl(&[], &s.url("/v1/files/bomb.zt/objects/w/data?decode=1"));
    assert!(
        decoded.status == 409 || decoded.status == 413,
        "{}",
        decoded.status
    );
    let body = String::from_utf8_lossy(&decoded.body);
    assert!(body.contains("decompress-over-cap"), "{body}");

    // The good file is served whole.
    let m = curl(&[], &s.url("/v1/files/sample.zt/manifest"));
    assert_eq!(m.status, 200);
    let r = curl(
        &[],
        &s.url("/v1/files/sample.zt/objects/lm_head.weight/data"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);

    // Nothing was allocated at the size any file claims (40 GiB, 256 MiB).
    let peak = peak_rss_kib(&s);
    eprintln!("daemon peak RSS with every hostile file served or refused: {peak} KiB");
    assert!(peak < 96 * 1024, "peak RSS {peak} KiB");
}
