//! MATRIX-ATOM ingest packs for the tests, made with the real `zt ingest
//! pack`: a symbol map of a few words (byte fallback from id 40), and a
//! pack of given inputs with atoms of 4 tokens.

use std::path::Path;

/// A symbol map of 300 ids: `words` from id 0 (the first two are the pad
/// and unknown symbols), byte fallback from id 40.
pub fn symbol_map(words: &[&str]) -> String {
    let symbols: Vec<serde_json::Value> = words
        .iter()
        .enumerate()
        .map(|(id, text)| serde_json::json!({ "id": id, "text": text }))
        .collect();
    serde_json::json!({
        "version": 1, "vocab_size": 300, "unk_id": 1, "pad_id": 0,
        "byte_fallback": true, "byte_base_id": 40, "symbols": symbols,
    })
    .to_string()
}

/// `zt ingest pack INPUTS --tokenizer MAP --atom-size 4 [--svg GRID] -o OUT`,
/// which must succeed.
pub fn ingest_pack(inputs: &[&Path], map: &Path, svg: Option<&str>, out: &Path) {
    let mut args = vec!["ingest".to_owned(), "pack".to_owned()];
    args.extend(inputs.iter().map(|p| p.display().to_string()));
    args.extend(["--tokenizer".to_owned(), map.display().to_string()]);
    args.extend(["--atom-size".to_owned(), "4".to_owned()]);
    if let Some(grid) = svg {
        args.extend(["--svg".to_owned(), grid.to_owned()]);
    }
    args.extend(["-o".to_owned(), out.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = super::fetch::zt(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
