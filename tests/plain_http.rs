//! The HTTP transport against a server that knows nothing of zTensor:
//! nginx serving the raw files. The client reads the footer and manifest
//! with Range requests, then the components.

mod common;

use std::process::{Command, Output};

use common::nginx::Nginx;
use common::sample_root;
use zt_format::{ReadOptions, ZtFile};

fn zt(args: &[&str]) -> Output {
    Command::new(common::zt_bin()).args(args).output().unwrap()
}

#[test]
fn fetch_and_info_work_against_nginx_serving_raw_files() {
    let root = sample_root();
    let dir = tempfile::tempdir().unwrap();
    let nginx = Nginx::start(root.path(), common::free_port(), dir.path()).unwrap();
    let url = format!("http://127.0.0.1:{}/sample.zt", nginx.port);
    let sample = root.path().join("sample.zt");
    let want = ZtFile::open(&sample).unwrap();

    // The whole file: every object byte-identical, and the output verifies.
    let out = dir.path().join("whole.zt");
    let r = zt(&["fetch", &url, "-o", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(zt(&["verify", out.to_str().unwrap()]).status.success());
    let got = ZtFile::open_with(&out, ReadOptions::default()).unwrap();
    assert_eq!(
        got.manifest().objects.keys().collect::<Vec<_>>(),
        want.manifest().objects.keys().collect::<Vec<_>>()
    );
    for (name, obj) in &want.manifest().objects {
        for role in obj.components.keys() {
            assert_eq!(
                &got.read(name, role).unwrap()[..],
                &want.read(name, role).unwrap()[..],
                "{name}/{role}"
            );
        }
    }

    // A glob selection fetches only what it names.
    let first = want.manifest().objects.keys().next().unwrap().to_owned();
    let prefix: String = first.chars().take(3).collect();
    let out = dir.path().join("some.zt");
    let r = zt(&[
        "fetch",
        &url,
        "--select",
        &format!("{prefix}*"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let got = ZtFile::open(&out).unwrap();
    assert!(!got.manifest().objects.is_empty());
    assert!(got
        .manifest()
        .objects
        .keys()
        .all(|k| k.starts_with(&prefix)));

    // Remote info reads the same manifest.
    let r = zt(&["info", &url, "--json"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(
        doc["objects"].as_object().unwrap().len(),
        want.manifest().objects.len()
    );

    // A missing path is a clear 404 naming the URL.
    let missing = format!("http://127.0.0.1:{}/nope.zt", nginx.port);
    let r = zt(&[
        "fetch",
        &missing,
        "-o",
        dir.path().join("x.zt").to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success());
    assert!(err.contains("404") && err.contains("nope.zt"), "{err}");
    assert!(!dir.path().join("x.zt").exists());
}
