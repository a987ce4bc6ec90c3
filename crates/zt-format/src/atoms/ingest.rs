//! An ingest pack's files as the format knows them (seed 002 section 6):
//! their names, `ingest_manifest.json` ([`IngestManifest`]), and the
//! `sha256:HEX` digests it gives them. `zt-ingest` writes and checks
//! packs with these; `source::matrix_atom_pack` serves one as an entry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// The file names of a pack.
pub const ATOM_FILE: &str = "matrix_atoms.bin";
pub const MAP_FILE: &str = "pi_symbol_map.json";
pub const SVG_FILE: &str = "atoms.svgt";
pub const MANIFEST_FILE: &str = super::PACK_MANIFEST;

/// `ingest_manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IngestManifest {
    pub version: u32,
    pub source: String,
    pub tokenizer: String,
    pub atom_file: String,
    pub atom_size: u32,
    pub dtype: String,
    /// `sha256:HEX` of the atom file.
    pub hash: String,
    /// Every other artifact: file name to `sha256:HEX`.
    pub artifacts: BTreeMap<String, String>,
    /// Real tokens, before padding.
    pub tokens: u64,
    pub atoms: u64,
    pub documents: u64,
    /// The inputs' file names, in packing order.
    pub inputs: Vec<String>,
}

/// `sha256:HEX` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// A pack's file breaks a rule: the file, and why (the rule in brackets
/// at its end, such as `[pack-hash]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {why}")]
pub struct PackFileError {
    pub file: String,
    pub why: String,
}

impl PackFileError {
    pub fn new(file: &str, why: impl Into<String>) -> PackFileError {
        PackFileError {
            file: file.to_owned(),
            why: why.into(),
        }
    }
}
