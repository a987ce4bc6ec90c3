//! The `zt` binary: exit codes, quiet pipes, determinism, atomic output.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

fn zt() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zt"))
}

/// The repository root (the sample model and the reject corpus).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sample() -> PathBuf {
    root().join("models/sample.zt")
}

fn code(cmd: &mut Command) -> i32 {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .code()
        .unwrap()
}

#[test]
fn exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(code(zt().args(["verify"]).arg(sample())), 0);
    assert_eq!(
        code(
            zt().args(["verify"])
                .arg(root().join("tests/reject/overlap.zt"))
        ),
        1
    );
    assert_eq!(
        code(
            zt().args(["verify"])
                .arg(root().join("tests/reject/digest-mismatch.zt"))
        ),
        1
    );
    assert_eq!(code(zt().args(["verify", "--bogus-flag"])), 2);
    assert_eq!(
        code(zt().args(["info"]).arg(dir.path().join("missing.zt"))),
        4
    );

    // An unknown digest algorithm cannot be verified: 3, unless allowed.
    let unknown = dir.path().join("unknown.zt");
    let mut bytes = {
        let mut w = Writer::new(Vec::new(), "u").unwrap();
        let store = StoreOptions {
            zstd_level: None,
            digest: Some(DigestAlgorithm::Crc32c),
        };
        w.add_dense("x", &[4], DType::U8, &[1, 2, 3, 4], store)
            .unwrap();
        w.finish().unwrap()
    };
    let at = bytes.windows(7).position(|w| w == b"crc32c:").unwrap();
    bytes[at..at + 6].copy_from_slice(b"blake9");
    std::fs::write(&unknown, &bytes).unwrap();
    assert_eq!(code(zt().arg("verify").arg(&unknown)), 3);
    assert_eq!(
        code(zt().args(["verify", "--allow-unverified"]).arg(&unknown)),
        0
    );
    assert_eq!(code(zt().args(["cat"]).arg(&unknown).arg("x")), 3);

    // --require-digest turns an undigested component into exit 3.
    let plain = dir.path().join("plain.zt");
    let mut w = Writer::new(Vec::new(), "p").unwrap();
    w.add_dense(
        "x",
        &[1],
        DType::U8,
        &[1],
        StoreOptions {
            zstd_level: None,
            digest: None,
        },
    )
    .unwrap();
    std::fs::write(&plain, w.finish().unwrap()).unwrap();
    assert_eq!(code(zt().arg("verify").arg(&plain)), 0);
    assert_eq!(
        code(zt().args(["verify", "--require-digest"]).arg(&plain)),
        3
    );
}

#[test]
fn every_subcommand_documents_exit_codes() {
    for sub in ["info", "verify", "pack", "export", "cat"] {
        let out = zt().args([sub, "--help"]).output().unwrap();
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("Exit codes: 0 ok; 1 invalid"),
            "{sub}"
        );
    }
}

#[test]
fn a_closed_pipe_exits_quietly() {
    let mut child = zt()
        .args(["info", "--json"])
        .arg(sample())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn pack_is_deterministic_and_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.zt");
    let b = dir.path().join("b.zt");
    for out in [&a, &b] {
        assert_eq!(
            code(
                zt().arg("pack")
                    .arg(sample())
                    .arg("-o")
                    .arg(out)
                    .args(["--compress", "zstd:3"])
            ),
            0
        );
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    // A failing pack leaves nothing behind, not even its temporary.
    let bad = dir.path().join("bad.zt");
    let reject = root().join("tests/reject/overlap.zt");
    assert_eq!(
        code(
            zt().arg("pack")
                .arg(sample())
                .arg(&reject)
                .arg("-o")
                .arg(&bad)
        ),
        1
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    // Duplicate object names across inputs are refused.
    assert_eq!(
        code(zt().arg("pack").arg(sample()).arg(&a).arg("-o").arg(&bad)),
        1
    );
}

#[test]
fn the_shipped_sample_model_is_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sample.zt");
    let status = Command::new(env!("CARGO"))
        .args(["run", "-q", "--example", "make_sample", "--"])
        .arg(&out)
        .current_dir(root())
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(sample()).unwrap()
    );
}

#[test]
fn info_json_uses_the_shared_schema() {
    let out = zt()
        .args(["info", "--json"])
        .arg(sample())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "ztserve.manifest/1");
    let o = &v["objects"]["model.layers.2.mlp.up_proj.weight"];
    assert_eq!(o["layer"], 2);
    assert_eq!(o["components"]["data"]["dtype"], "bf16");
    assert_eq!(o["components"]["data"]["offset"].as_u64().unwrap() % 64, 0);
}

#[test]
fn info_selects_objects_by_glob() {
    let out = zt()
        .args([
            "info",
            "--json",
            "--select",
            "model.layers.1.*",
            "--select",
            "lm_head.weight",
        ])
        .arg(sample())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let objects = v["objects"].as_object().unwrap();
    assert_eq!(objects.len(), 10);
    assert!(objects
        .keys()
        .all(|k| k.starts_with("model.layers.1.") || k == "lm_head.weight"));
    let out = zt()
        .args(["info", "--select", "nope*"])
        .arg(sample())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no object matches \"nope*\""));
}
