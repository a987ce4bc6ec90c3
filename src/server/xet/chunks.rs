//! Content-defined chunking as the Xet protocol cuts files: a gear hash
//! over the bytes (the `gearhash` crate's table, the one `xet-core`
//! uses), a chunk ending where the hash's top 16 bits are zero, at least
//! 8 KiB and at most 128 KiB long (64 KiB on average). The bytes may
//! arrive in pieces of any size: where the chunks end depends only on
//! the bytes.
//!
//! The gear hash at a position depends on the 64 bytes before it only
//! (each byte's term is shifted out 64 bytes later), and no chunk may end
//! in its first 8 KiB: so where a chunk may end ([`search`]) is a
//! property of each position alone, and the parts of a piece are
//! searched apart, in parallel ([`Chunker::parts`]). Which of those
//! places are chunk ends is then chosen in order ([`Chunker::choose`]),
//! a few per 64 KiB, and the chunks are hashed apart, in parallel too
//! ([`hash_chunks`]).

use std::ops::Range;

use super::hashes::XetHash;

/// The mean chunk length the cut condition aims at.
const TARGET: usize = 64 << 10;
/// No chunk is shorter, but a file's last.
const MIN: u64 = (TARGET / 8) as u64;
/// No chunk is longer.
pub(crate) const MAX: usize = TARGET * 2;
/// A chunk may end where `hash & MASK == 0`: the top 16 bits.
const MASK: u64 = ((TARGET - 1) as u64) << ((TARGET - 1) as u64).leading_zeros();
/// The bytes the gear hash depends on.
const WINDOW: usize = 64;

/// A chunk: its hash and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) hash: XetHash,
    pub(crate) len: u32,
}

/// A part of a piece to [`search`]: its range in the piece, and the gear
/// hash of the bytes before it.
#[derive(Debug, Clone)]
pub(crate) struct Part {
    pub(crate) range: Range<usize>,
    pub(crate) gear: u64,
}

/// The gear hash `gear` becomes over `bytes`.
fn roll(gear: u64, bytes: &[u8]) -> u64 {
    let mut g = gearhash::Hasher::default();
    g.set_hash(gear);
    g.update(bytes);
    g.get_hash()
}

/// Where in `piece[part.range]` a chunk may end: each `e` (an index into
/// `piece`, ascending) where the gear hash of the bytes before `e`
/// matches.
pub(crate) fn search(piece: &[u8], part: &Part) -> Vec<usize> {
    let mut g = gearhash::Hasher::default();
    g.set_hash(part.gear);
    let mut out = Vec::new();
    let mut at = part.range.start;
    while let Some(n) = g.next_match(&piece[at..part.range.end], MASK) {
        at += n;
        out.push(at);
    }
    out
}

/// The hashes of `ranges` of `piece` (ascending, each within it, the
/// first possibly beginning before it: `carry` holds its bytes from
/// before the piece, when `starts_before`).
pub(crate) fn hash_chunks(
    carry: &[u8],
    piece: &[u8],
    ranges: &[Range<usize>],
    starts_before: bool,
) -> Vec<XetHash> {
    ranges
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut h = XetHash::chunk_hasher();
            if i == 0 && starts_before {
                h.update(carry);
            }
            h.update(&piece[r.clone()]);
            XetHash(*h.finalize().as_bytes())
        })
        .collect()
}

/// Cuts bytes fed in order, piece by piece, into chunks.
#[derive(Default)]
pub(crate) struct Chunker {
    /// The gear hash of the bytes so far.
    gear: u64,
    /// Bytes taken so far.
    fed: u64,
    /// Where the last chunk ended.
    last_end: u64,
    /// The bytes since then (less than [`MAX`]).
    carry: Vec<u8>,
    chunks: Vec<Chunk>,
}

/// A piece's chunk ends, chosen: the chunks that end in it.
#[derive(Debug)]
pub(crate) struct Cut {
    /// Their ranges in the piece.
    pub(crate) ranges: Vec<Range<usize>>,
    /// Whether the first began before the piece (the carry's bytes first).
    pub(crate) starts_before: bool,
}

impl Chunker {
    /// Takes the next bytes of the file, searched in one part.
    #[cfg(test)]
    pub(crate) fn feed(&mut self, piece: &[u8]) {
        let points: Vec<usize> = self
            .parts(piece, 1)
            .iter()
            .flat_map(|p| search(piece, p))
            .collect();
        let cut = self.choose(piece, &points);
        let hashes = hash_chunks(&self.carry, piece, &cut.ranges, cut.starts_before);
        self.absorb(piece, &cut, &hashes);
    }

    /// The next piece cut in `n` parts to search, each with the gear hash
    /// of the bytes before it.
    pub(crate) fn parts(&self, piece: &[u8], n: usize) -> Vec<Part> {
        let n = n.clamp(1, piece.len().max(1));
        let step = piece.len().div_ceil(n).max(WINDOW);
        (0..piece.len())
            .step_by(step.max(1))
            .map(|start| Part {
                range: start..(start + step).min(piece.len()),
                gear: self.gear_at(piece, start),
            })
            .collect()
    }

    /// The gear hash before `piece[at]`: the previous bytes' hash rolled
    /// over the piece's bytes before `at`, or those alone (the last 64).
    fn gear_at(&self, piece: &[u8], at: usize) -> u64 {
        match at.checked_sub(WINDOW) {
            Some(from) => roll(0, &piece[from..at]),
            None => roll(self.gear, &piece[..at]),
        }
    }

    /// Chooses the chunk ends in `piece` from every place in it a chunk
    /// may end (`points`, ascending): the first at least [`MIN`] past the
    /// last end, or [`MAX`] past it if none is within that.
    pub(crate) fn choose(&mut self, piece: &[u8], points: &[usize]) -> Cut {
        let base = self.fed;
        let known = base + piece.len() as u64;
        let starts_before = self.last_end < base;
        let mut ranges = Vec::new();
        let mut last = self.last_end;
        let mut i = 0;
        loop {
            let (lo, hi) = (last + MIN, last + MAX as u64);
            while points.get(i).is_some_and(|&p| base + (p as u64) < lo) {
                i += 1;
            }
            let end = match points.get(i).map(|&p| base + p as u64) {
                Some(p) if p <= hi => p,
                _ if hi <= known => hi,
                _ => break,
            };
            let from = last.saturating_sub(base) as usize;
            ranges.push(from..(end - base) as usize);
            last = end;
        }
        Cut {
            ranges,
            starts_before,
        }
    }

    /// Takes `piece`'s chunks as [`Chunker::choose`] cut them, hashed.
    pub(crate) fn absorb(&mut self, piece: &[u8], cut: &Cut, hashes: &[XetHash]) {
        for (i, (r, hash)) in cut.ranges.iter().zip(hashes).enumerate() {
            let before = match i == 0 && cut.starts_before {
                true => self.carry.len(),
                false => 0,
            };
            let len = (before + r.len()) as u32;
            self.chunks.push(Chunk { hash: *hash, len });
        }
        let rest = match cut.ranges.last() {
            Some(r) => {
                self.carry.clear();
                r.end
            }
            None => 0,
        };
        self.carry.extend_from_slice(&piece[rest..]);
        self.gear = self.gear_at(piece, piece.len());
        self.fed += piece.len() as u64;
        self.last_end = self.fed - self.carry.len() as u64;
    }

    /// The bytes taken so far.
    pub(crate) fn fed(&self) -> u64 {
        self.fed
    }

    /// A chunker for a file of `size` bytes, with room for its chunks as
    /// files usually cut ([`Chunker::usual_bytes`]), so that it does not
    /// grow by doubling.
    pub(crate) fn for_size(size: u64) -> Chunker {
        let room = usize::try_from(Self::usual_chunks(size)).unwrap_or(0);
        Chunker {
            chunks: Vec::with_capacity(room),
            ..Chunker::default()
        }
    }

    /// What the chunks so far hold in memory (room made for them
    /// included: what the index will hold at least).
    pub(crate) fn held_bytes(&self) -> u64 {
        (self.chunks.capacity() * std::mem::size_of::<Chunk>()) as u64
    }

    /// Chunks of a file of `size` bytes cut as files usually cut, with a
    /// quarter more for the spread (content that cuts shorter makes up to
    /// 8 times the usual count).
    fn usual_chunks(size: u64) -> u64 {
        let usual = size.div_ceil(TARGET as u64);
        usual.saturating_add(usual / 4)
    }

    /// What [`Chunker::for_size`] makes room for, in bytes.
    pub(crate) fn usual_bytes(size: u64) -> u64 {
        Self::usual_chunks(size).saturating_mul(std::mem::size_of::<Chunk>() as u64)
    }

    /// The bytes of the chunk begun before the next piece.
    pub(crate) fn carry(&self) -> &[u8] {
        &self.carry
    }

    /// The file's chunks, the last one ended where the file ends.
    pub(crate) fn finish(mut self) -> Vec<Chunk> {
        if !self.carry.is_empty() {
            let whole = 0..self.carry.len();
            let hash = hash_chunks(&[], &self.carry, std::slice::from_ref(&whole), false)[0];
            let len = self.carry.len() as u32;
            self.chunks.push(Chunk { hash, len });
        }
        self.chunks
    }
}

#[cfg(test)]
mod tests {
    use super::super::hashes::file_hash;
    use super::*;

    /// xorshift64's bytes: the same generator wrote the files the
    /// reference hashes below were taken from.
    fn xs(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 56) as u8
            })
            .collect()
    }

    /// The chunks of `data` fed in pieces of `piece` bytes, each searched
    /// in `parts` parts and hashed in groups of `group` chunks.
    fn in_parts(data: &[u8], piece: usize, parts: usize, group: usize) -> Vec<Chunk> {
        let mut c = Chunker::default();
        for p in data.chunks(piece.max(1)) {
            let points: Vec<usize> = c
                .parts(p, parts)
                .iter()
                .flat_map(|x| search(p, x))
                .collect();
            let cut = c.choose(p, &points);
            let hashes: Vec<XetHash> = cut
                .ranges
                .chunks(group)
                .enumerate()
                .flat_map(|(k, r)| {
                    let first = k == 0 && cut.starts_before;
                    hash_chunks(c.carry(), p, r, first)
                })
                .collect();
            c.absorb(p, &cut, &hashes);
        }
        c.finish()
    }

    /// Parts searched apart and chunks hashed apart give the chunks one
    /// search in order gives, whatever the pieces.
    #[test]
    fn parts_cut_as_one_search_does() {
        let data = [xs(900_000, 7), vec![0; 700_000], xs(1_300_000, 9)].concat();
        let whole = {
            let mut c = Chunker::default();
            c.feed(&data);
            c.finish()
        };
        assert!(whole.len() > 20);
        assert!(whole.iter().any(|c| c.len as usize == MAX));
        let sum: u64 = whole.iter().map(|c| u64::from(c.len)).sum();
        assert_eq!(sum, data.len() as u64);
        for piece in [data.len(), 1 << 20, 65_536, 8_191, 100] {
            for parts in [1, 2, 3, 7] {
                for group in [1, 3, 1000] {
                    let got = in_parts(&data, piece, parts, group);
                    assert_eq!(got, whole, "pieces {piece}, parts {parts}, groups {group}");
                }
            }
        }
    }

    fn hash_of(data: &[u8], piece: usize) -> String {
        let mut c = Chunker::default();
        for p in data.chunks(piece.max(1)) {
            c.feed(p);
        }
        let chunks = c.finish();
        for ch in &chunks[..chunks.len().saturating_sub(1)] {
            assert!(
                (MIN..=MAX as u64).contains(&u64::from(ch.len)),
                "{}",
                ch.len
            );
        }
        let leaves: Vec<_> = chunks.iter().map(|c| (c.hash, u64::from(c.len))).collect();
        file_hash(&leaves).hex()
    }

    /// The file hashes `hf_xet` 1.8.0's `hash_files` gives the same bytes
    /// (the Hugging Face reference implementation), whatever pieces the
    /// bytes arrive in.
    #[test]
    fn file_hashes_match_the_reference_implementation() {
        const SEED: u64 = 0x9E37_79B9_7F4A_7C15;
        let mixed = [xs(100_000, SEED), vec![0; 300_000], xs(200_000, 12345)].concat();
        let cases: [(Vec<u8>, &str); 7] = [
            (
                Vec::new(),
                "0000000000000000000000000000000000000000000000000000000000000000",
            ),
            (
                xs(1, SEED),
                "d0ad18764c50301db5343cf5a548a5dd32ed523f8f1bf05ae8ab9f16d3f2df4a",
            ),
            (
                xs(1000, SEED),
                "d6a75490e438a769f4222bd6fab540f9cbcedb692db35aa9bf76cdc162be9f73",
            ),
            (
                xs(70_000, SEED),
                "3b70c4456319068088b0cb3cdab4f3bd1a863ceed78f0b22df0e02a8a25de3be",
            ),
            (
                xs(3_000_000, SEED),
                "cfd257e60384bc839849727d1a7ef451724db5f72cfd61d421dadcc644e8d025",
            ),
            (
                vec![0; 500_000],
                "e35d1e497d39cb2361ee6cc6ef5e9355ce1c6ea02e7d340b5a7b4346e96dedd8",
            ),
            (
                mixed,
                "6c685338104a85c93a64656ad51cc109855697b122f47c4b515de979bd5de85e",
            ),
        ];
        for (data, want) in &cases {
            for piece in [data.len(), 1, 4095, 65_536, 1 << 20] {
                assert_eq!(
                    &hash_of(data, piece),
                    want,
                    "{} bytes in pieces of {piece}",
                    data.len()
                );
            }
        }
    }
}
