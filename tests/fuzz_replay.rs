//! Replays the fuzz corpora and every saved crash through the fuzz target's
//! body, so a fixed crash stays fixed without a fuzzer in CI.

use std::path::Path;

#[test]
fn replay_read_file_corpus_and_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for dir in [
        "fuzz/corpus/read_file",
        "fuzz/regressions/read_file",
        "tests/reject",
        "models",
    ] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_file() {
                let data = std::fs::read(&path).unwrap();
                zt_format::fuzz::read_everything(&data);
                n += 1;
            }
        }
    }
    assert!(n >= 25, "replayed only {n} inputs");
}
