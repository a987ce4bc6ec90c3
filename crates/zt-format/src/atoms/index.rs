//! The document index (header flag bit 1), a layout of ours that the seed
//! leaves open (docs/matrix-atom.md): right after the payload,
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `MTRXIDX1` |
//! | 8 | `doc_count` (u64) |
//! | 24 × `doc_count` | per document: `first_atom`, `atom_count`, `token_count` (u64 each; `token_count` counts its real tokens, before padding) |
//! | 4 | CRC-32 (zlib's) of every index byte before it |
//! | 4 | zero |
//!
//! Each document starts on an atom boundary: document `i + 1` starts at
//! `first_atom + atom_count` of document `i`, the first at atom 0, and the
//! last ends at the file's `atom_count`. The index ends the file.

use std::fmt;

use super::header::crc32;

/// The first 8 bytes of a document index.
pub const INDEX_MAGIC: &[u8; 8] = b"MTRXIDX1";

/// One document's place in the atoms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DocEntry {
    pub first_atom: u64,
    pub atom_count: u64,
    /// Its real tokens, before padding.
    pub token_count: u64,
}

/// A rule of the document index that a file breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IndexRule {
    Magic,
    Size { expected: u64, actual: u64 },
    Crc { stored: u32, computed: u32 },
    Entry { doc: u64, why: &'static str },
}

impl IndexRule {
    pub fn name(&self) -> &'static str {
        match self {
            IndexRule::Magic => "index-magic",
            IndexRule::Size { .. } => "index-size",
            IndexRule::Crc { .. } => "index-crc",
            IndexRule::Entry { .. } => "index-entry",
        }
    }
}

impl fmt::Display for IndexRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexRule::Magic => write!(f, "the document index does not start with MTRXIDX1"),
            IndexRule::Size { expected, actual } => write!(
                f,
                "the document index takes {expected} bytes by its count; {actual} follow the payload"
            ),
            IndexRule::Crc { stored, computed } => write!(
                f,
                "the document index's CRC {stored:#010x} does not match it ({computed:#010x})"
            ),
            IndexRule::Entry { doc, why } => write!(f, "document {doc}: {why}"),
        }?;
        write!(f, " [{}]", self.name())
    }
}

/// The index bytes for `docs`.
pub fn encode(docs: &[DocEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(docs.len().saturating_mul(24).saturating_add(24));
    out.extend_from_slice(INDEX_MAGIC);
    out.extend_from_slice(&(docs.len() as u64).to_le_bytes());
    for d in docs {
        for v in [d.first_atom, d.atom_count, d.token_count] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    let crc = crc32(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    b.get(at..)
        .and_then(|s| s.get(..8))
        .and_then(|s| s.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// The index's size for `doc_count` documents.
pub fn size(doc_count: u64) -> Option<u64> {
    doc_count.checked_mul(24)?.checked_add(24)
}

/// Parses and checks the bytes after the payload of a file of
/// `atom_count` atoms of `atom_size` tokens.
pub fn parse(bytes: &[u8], atom_count: u64, atom_size: u32) -> Result<Vec<DocEntry>, IndexRule> {
    if bytes.get(..8) != Some(&INDEX_MAGIC[..]) {
        return Err(IndexRule::Magic);
    }
    let count = u64_at(bytes, 8);
    let expected = size(count).unwrap_or(u64::MAX);
    if expected != bytes.len() as u64 {
        return Err(IndexRule::Size {
            expected,
            actual: bytes.len() as u64,
        });
    }
    let body = usize::try_from(expected.saturating_sub(8)).unwrap_or(0);
    let crc_at = body;
    let stored = bytes
        .get(crc_at..)
        .and_then(|s| s.get(..4))
        .and_then(|s| s.try_into().ok())
        .map_or(0, u32::from_le_bytes);
    let computed = crc32(bytes.get(..crc_at).unwrap_or(&[]));
    if stored != computed {
        return Err(IndexRule::Crc { stored, computed });
    }
    let mut docs = Vec::new();
    let mut next = 0u64;
    for doc in 0..count {
        let at = usize::try_from(doc.saturating_mul(24).saturating_add(16)).unwrap_or(usize::MAX);
        let d = DocEntry {
            first_atom: u64_at(bytes, at),
            atom_count: u64_at(bytes, at.saturating_add(8)),
            token_count: u64_at(bytes, at.saturating_add(16)),
        };
        let bad = |why| Err(IndexRule::Entry { doc, why });
        if d.first_atom != next {
            return bad("does not start where the previous document ends");
        }
        let capacity = d.atom_count.checked_mul(u64::from(atom_size));
        if capacity.is_none_or(|c| d.token_count > c) {
            return bad("holds more tokens than its atoms");
        }
        next = match d.first_atom.checked_add(d.atom_count) {
            Some(n) if n <= atom_count => n,
            _ => return bad("runs past the last atom"),
        };
        docs.push(d);
    }
    if next != atom_count {
        return Err(IndexRule::Entry {
            doc: count,
            why: "the documents do not cover every atom",
        });
    }
    Ok(docs)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn an_index_round_trips_and_each_rule_is_named() {
        let docs = [
            DocEntry {
                first_atom: 0,
                atom_count: 2,
                token_count: 7,
            },
            DocEntry {
                first_atom: 2,
                atom_count: 1,
                token_count: 4,
            },
        ];
        let b = encode(&docs);
        assert_eq!(parse(&b, 3, 4).unwrap(), docs);
        assert_eq!(parse(&b, 4, 4).unwrap_err().name(), "index-entry");
        assert_eq!(
            parse(&b[..b.len() - 1], 3, 4).unwrap_err().name(),
            "index-size"
        );
        let mut c = b.clone();
        c[20] ^= 1;
        assert_eq!(parse(&c, 3, 4).unwrap_err().name(), "index-crc");
        let mut m = b.clone();
        m[0] = b'X';
        assert_eq!(parse(&m, 3, 4).unwrap_err().name(), "index-magic");
        let over = encode(&[DocEntry {
            first_atom: 0,
            atom_count: 1,
            token_count: 5,
        }]);
        let e = parse(&over, 1, 4).unwrap_err();
        assert!(e.to_string().contains("more tokens"), "{e}");
    }
}
