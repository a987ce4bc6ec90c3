//! Replays the fuzz corpora and every saved crash through the fuzz targets'
//! bodies, so a fixed crash stays fixed without a fuzzer in CI.

use std::path::{Path, PathBuf};

/// Every file in the target's corpus and regressions, plus `extra` dirs.
fn inputs(target: &str, extra: &[&str]) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let corpus = format!("fuzz/corpus/{target}");
    let regressions = format!("fuzz/regressions/{target}");
    let mut out = Vec::new();
    for dir in [corpus.as_str(), regressions.as_str()].iter().chain(extra) {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_file() {
                out.push(path);
            }
        }
    }
    out
}

#[test]
fn replay_ztp_message_corpus_and_regressions() {
    let inputs = inputs("ztp_message", &[]);
    assert!(inputs.len() >= 9, "replayed only {}", inputs.len());
    for p in inputs {
        ztp_proto::fuzz::decode_everything(&std::fs::read(&p).unwrap());
    }
}

#[test]
fn replay_http_request_corpus_and_regressions() {
    let inputs = inputs("http_request", &[]);
    assert!(inputs.len() >= 20, "replayed only {}", inputs.len());
    let h = ztserve::server::http_fuzz::Harness::new();
    let mut seen = std::collections::BTreeSet::new();
    for p in inputs {
        if let Some(status) = h.run(&std::fs::read(&p).unwrap()) {
            seen.insert(status.as_u16());
        }
    }
    // The seeds reach the interesting answers, so the checks have bodies,
    // ranges and errors to look at.
    for want in [200, 206, 404, 409, 412] {
        assert!(seen.contains(&want), "no seed answered {want}: {seen:?}");
    }
}

#[test]
fn replay_read_file_corpus_and_regressions() {
    let inputs = inputs("read_file", &["tests/reject", "models"]);
    assert!(inputs.len() >= 25, "replayed only {}", inputs.len());
    for p in inputs {
        zt_format::fuzz::read_everything(&std::fs::read(&p).unwrap());
    }
}

#[test]
fn replay_read_safetensors_corpus_and_regressions() {
    let inputs = inputs("read_safetensors", &["tests/reject/safetensors"]);
    assert!(inputs.len() >= 15, "replayed only {}", inputs.len());
    for p in inputs {
        zt_format::fuzz::read_safetensors(&std::fs::read(&p).unwrap());
    }
}

#[test]
fn replay_read_gguf_corpus_and_regressions() {
    let mut inputs: Vec<Vec<u8>> = inputs("read_gguf", &["tests/reject/gguf"])
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    // The sample file and every prefix of it: each a header cut short.
    let sample = zt_format::fuzz::gguf_sample();
    inputs.extend((0..sample.len()).step_by(7).map(|n| sample[..n].to_vec()));
    inputs.push(sample);
    assert!(inputs.len() >= 20, "replayed only {}", inputs.len());
    for data in inputs {
        zt_format::fuzz::read_gguf(&data);
    }
}

#[test]
fn replay_read_atoms_corpus_and_regressions() {
    let inputs = inputs("read_atoms", &["tests/reject/atoms"]);
    assert!(inputs.len() >= 29, "replayed only {}", inputs.len());
    for p in inputs {
        zt_format::fuzz::read_atoms(&std::fs::read(&p).unwrap());
    }
}
