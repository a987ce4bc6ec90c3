//! The Xet protocol's hashes: a chunk's keyed BLAKE3, the Merkle tree
//! over chunks that names a xorb, and a file's hash (the tree's root,
//! hashed again), as `xet-core`'s `merklehash` computes them, so that a
//! file's hash here is the one the Hub and `hf_xet` give the same bytes.

use std::fmt;

/// The key of a chunk's hash (`DATA_KEY` in `xet-core`).
const DATA_KEY: [u8; 32] = [
    102, 151, 245, 119, 91, 149, 80, 222, 49, 53, 203, 172, 165, 151, 24, 28, 157, 228, 33, 16,
    155, 235, 43, 88, 180, 208, 176, 75, 147, 173, 242, 41,
];

/// The key of an inner node's hash (`INTERNAL_NODE_HASH`).
const NODE_KEY: [u8; 32] = [
    1, 126, 197, 199, 165, 71, 41, 150, 253, 148, 102, 102, 180, 138, 2, 230, 93, 221, 83, 111, 55,
    199, 109, 210, 248, 99, 82, 230, 74, 83, 113, 63,
];

/// A node ends at the first hash past its second that is 0 modulo this
/// (or after `2 * BRANCHING + 1` hashes).
const BRANCHING: u64 = 4;

/// One of the protocol's 32-byte hashes.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct XetHash(pub(crate) [u8; 32]);

impl XetHash {
    /// A chunk's hash.
    #[cfg(test)]
    pub(crate) fn of_chunk(bytes: &[u8]) -> XetHash {
        XetHash(*blake3::keyed_hash(&DATA_KEY, bytes).as_bytes())
    }

    /// A hasher for a chunk that arrives in pieces.
    pub(crate) fn chunk_hasher() -> blake3::Hasher {
        blake3::Hasher::new_keyed(&DATA_KEY)
    }

    /// The hash as 64 hex digits, the protocol's way: each 8-byte word
    /// read little-endian and printed most significant digit first.
    pub(crate) fn hex(&self) -> String {
        self.words().iter().map(|w| format!("{w:016x}")).collect()
    }

    /// Parses [`XetHash::hex`]'s form; `None` for anything else.
    pub(crate) fn from_hex(text: &str) -> Option<XetHash> {
        if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut out = [0u8; 32];
        for (i, word) in out.chunks_exact_mut(8).enumerate() {
            let digits = text.get(i * 16..(i + 1) * 16)?;
            let w = u64::from_str_radix(digits, 16).ok()?;
            word.copy_from_slice(&w.to_le_bytes());
        }
        Some(XetHash(out))
    }

    fn words(&self) -> [u64; 4] {
        let mut w = [0u64; 4];
        for (i, bytes) in self.0.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(bytes);
            w[i] = u64::from_le_bytes(b);
        }
        w
    }

    /// Whether a node of the tree may end at this hash.
    fn ends_node(&self) -> bool {
        self.words()[3] % BRANCHING == 0
    }
}

impl fmt::Debug for XetHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl fmt::Display for XetHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

/// How many of `level`'s nodes the next node up takes.
fn next_cut(level: &[(XetHash, u64)]) -> usize {
    if level.len() <= 2 {
        return level.len();
    }
    let end = (2 * BRANCHING as usize + 1).min(level.len());
    (2..end)
        .find(|&i| level[i].0.ends_node())
        .map_or(end, |i| i + 1)
}

/// The node over `children`: their hashes and sizes, a line each, hashed.
fn node(children: &[(XetHash, u64)]) -> (XetHash, u64) {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(children.len() * 88);
    let mut size = 0u64;
    for (h, s) in children {
        let _ = writeln!(text, "{} : {s}", h.hex());
        size += s;
    }
    let hash = XetHash(*blake3::keyed_hash(&NODE_KEY, text.as_bytes()).as_bytes());
    (hash, size)
}

/// The root of the tree over `leaves` (hash and size each): the hash of
/// a xorb made of those chunks. The empty tree's root is all zeros.
pub(crate) fn root(leaves: &[(XetHash, u64)]) -> XetHash {
    let mut level = leaves.to_vec();
    while level.len() > 1 {
        let mut up = Vec::with_capacity(level.len() / 2 + 1);
        let mut at = 0;
        while at < level.len() {
            let n = next_cut(&level[at..]);
            up.push(node(&level[at..at + n]));
            at += n;
        }
        level = up;
    }
    level.first().map(|(h, _)| *h).unwrap_or_default()
}

/// A file's hash from its chunks': the root, hashed with an all-zero key
/// (the protocol's unsalted file hash). An empty file's is all zeros.
pub(crate) fn file_hash(chunks: &[(XetHash, u64)]) -> XetHash {
    if chunks.is_empty() {
        return XetHash::default();
    }
    let r = root(chunks);
    XetHash(*blake3::keyed_hash(&[0u8; 32], &r.0).as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_reads_back() {
        let h = XetHash::of_chunk(b"hello");
        assert_eq!(XetHash::from_hex(&h.hex()), Some(h));
        assert_eq!(XetHash::from_hex(&h.hex()[1..]), None);
        assert_eq!(XetHash::from_hex(&"g".repeat(64)), None);
        // Each word printed from its little-endian bytes.
        let mut b = [0u8; 32];
        b[0] = 1;
        assert!(XetHash(b).hex().starts_with("0000000000000001"));
    }

    #[test]
    fn one_chunk_is_its_own_root() {
        let h = XetHash::of_chunk(b"x");
        assert_eq!(root(&[(h, 1)]), h);
        assert_eq!(root(&[]), XetHash::default());
    }
}
