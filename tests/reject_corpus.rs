//! Every file in `tests/reject/` breaks exactly the rule in its name, and the
//! error names the file and the rule (and the object and component, where
//! the rule concerns one).

use std::path::Path;

use zt_format::{ComponentStatus, ReadOptions, ZtFile};

/// Rules that pass validation and fail when the data is read.
const READ_TIME: &[&str] = &["digest-mismatch", "decompress-over-cap", "ragged-offsets"];

#[test]
fn every_reject_file_fails_with_its_rule() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reject");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "zt") {
            continue;
        }
        seen += 1;
        let rule = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let label = path.display().to_string();
        if READ_TIME.contains(&rule.as_str()) {
            let f = ZtFile::open(&path).unwrap();
            let failed: Vec<_> = f
                .verify()
                .into_iter()
                .filter_map(|r| match r.status {
                    ComponentStatus::Failed(e) => Some(e),
                    _ => None,
                })
                .collect();
            assert_eq!(failed.len(), 1, "{rule}");
            assert_eq!(failed[0].rule().unwrap().name(), rule);
            let role = if rule == "ragged-offsets" {
                "offsets"
            } else {
                "data"
            };
            let err = f.read("w", role).unwrap_err();
            assert_eq!(err.rule().unwrap().name(), rule);
            assert!(
                err.to_string().contains(&format!("component {role:?}")),
                "{err}"
            );
            continue;
        }
        let err = ZtFile::open_with(&path, ReadOptions::default()).expect_err(&rule);
        let got = err.rule().map(|r| r.name()).unwrap_or("io");
        assert_eq!(got, rule, "{label}: {err}");
        let msg = err.to_string();
        assert!(msg.starts_with(&label), "error must name the file: {msg}");
        if let Some(o) = &err.location().object {
            assert!(msg.contains(&format!("object {o:?}")), "{msg}");
        }
    }
    assert!(seen >= 25, "corpus has only {seen} files");
}

#[test]
fn a_lower_manifest_cap_is_honoured() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reject/length-mismatch.zt");
    let mut opts = ReadOptions::default();
    opts.limits.manifest_cap = 16;
    let err = ZtFile::open_with(&path, opts).unwrap_err();
    assert_eq!(err.rule().unwrap().name(), "manifest-over-cap");
}

/// Every file in `tests/reject/{dir}/` with extension `ext` breaks the
/// header rule in its name (docs/sources.md); the error names the file,
/// and the tensor where the rule concerns one.
fn source_corpus(dir: &str, ext: &str, at_least: usize) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reject")
        .join(dir);
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != ext) {
            continue;
        }
        seen += 1;
        let rule = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let label = path.display().to_string();
        let err = ZtFile::open_with(&path, ReadOptions::default()).expect_err(&rule);
        assert_eq!(err.rule().map(|r| r.name()), Some(rule.as_str()), "{err}");
        let msg = err.to_string();
        assert!(msg.starts_with(&label), "error must name the file: {msg}");
        if let Some(o) = &err.location().object {
            assert!(msg.contains(&format!("object {o:?}")), "{msg}");
        }
    }
    assert!(seen >= at_least, "corpus has only {seen} files");
}

#[test]
fn every_safetensors_reject_file_fails_with_its_rule() {
    source_corpus("safetensors", "safetensors", 16);
}

#[test]
fn every_gguf_reject_file_fails_with_its_rule() {
    source_corpus("gguf", "gguf", 15);
}

/// Every MATRIX-ATOM reject file (`tests/reject/atoms/`, written by its
/// `make_corpus.py` with struct and zlib only) fails `zt ingest verify`'s
/// checks with the rule in its name, naming the file; SVG-Tensor files
/// are checked against `good.atoms`, which passes.
#[test]
fn every_matrix_atom_reject_file_fails_with_its_rule() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reject/atoms");
    let good_path = dir.join("good.atoms");
    let good = std::fs::read(&good_path).unwrap();
    let header = zt_ingest::verify::atom_file("good.atoms", &good)
        .unwrap()
        .header;
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
        if path == good_path || !matches!(ext, "atoms" | "svgt") {
            continue;
        }
        seen += 1;
        let rule = path.file_stem().unwrap().to_str().unwrap().to_owned();
        let label = path.display().to_string();
        let bytes = std::fs::read(&path).unwrap();
        let err = if ext == "atoms" {
            zt_ingest::verify::atom_file(&label, &bytes).map(|_| ())
        } else {
            zt_ingest::verify::svg_file(&label, &bytes, &good, &header)
        }
        .expect_err(&rule)
        .to_string();
        assert!(err.starts_with(&label), "error must name the file: {err}");
        assert!(err.ends_with(&format!("[{rule}]")), "{rule}: {err}");
    }
    assert!(seen >= 28, "corpus has only {seen} files");
}
