//! Content-defined chunking as the Xet protocol cuts files: a gear hash
//! over the bytes (the `gearhash` crate's table, the one `xet-core`
//! uses), a chunk ending where the hash's top 16 bits are zero, at least
//! 8 KiB and at most 128 KiB long (64 KiB on average). The bytes may
//! arrive in pieces of any size: where the chunks end depends only on
//! the bytes.

use super::hashes::XetHash;

/// The mean chunk length the cut condition aims at.
const TARGET: usize = 64 << 10;
/// No chunk is shorter, but a file's last.
const MIN: usize = TARGET / 8;
/// No chunk is longer.
pub(crate) const MAX: usize = TARGET * 2;
/// A chunk ends where `hash & MASK == 0`: the top 16 bits.
const MASK: u64 = ((TARGET - 1) as u64) << ((TARGET - 1) as u64).leading_zeros();
/// The gear hash depends on the last 64 bytes only, so a chunk's first
/// `MIN - 65` bytes, where no cut may fall, are not hashed.
const SKIP: usize = MIN - 64 - 1;

/// A chunk: its hash and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub(crate) hash: XetHash,
    pub(crate) len: u32,
}

/// Cuts bytes fed in order into chunks and hashes each.
pub(crate) struct Chunker {
    gear: gearhash::Hasher<'static>,
    /// Bytes of the current chunk so far.
    len: usize,
    hasher: blake3::Hasher,
    chunks: Vec<Chunk>,
}

impl Default for Chunker {
    fn default() -> Self {
        Chunker {
            gear: gearhash::Hasher::default(),
            len: 0,
            hasher: XetHash::chunk_hasher(),
            chunks: Vec::new(),
        }
    }
}

impl Chunker {
    /// Takes the next bytes of the file.
    pub(crate) fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let limit = data.len().min(MAX - self.len);
            let mut at = if self.len < SKIP {
                (SKIP - self.len).min(limit)
            } else {
                0
            };
            let mut cut = None;
            while at < limit {
                match self.gear.next_match(&data[at..limit], MASK) {
                    Some(n) => {
                        at += n;
                        if self.len + at >= MIN {
                            cut = Some(at);
                            break;
                        }
                    }
                    None => at = limit,
                }
            }
            if cut.is_none() && self.len + limit == MAX {
                cut = Some(limit);
            }
            match cut {
                Some(n) => {
                    self.hasher.update(&data[..n]);
                    self.end_chunk(self.len + n);
                    data = &data[n..];
                }
                None => {
                    self.hasher.update(data);
                    self.len += data.len();
                    data = &[];
                }
            }
        }
    }

    fn end_chunk(&mut self, len: usize) {
        let hash = XetHash(*self.hasher.finalize().as_bytes());
        self.chunks.push(Chunk {
            hash,
            len: len as u32,
        });
        self.hasher = XetHash::chunk_hasher();
        self.gear.set_hash(0);
        self.len = 0;
    }

    /// The file's chunks, the last one ended where the file ends.
    pub(crate) fn finish(mut self) -> Vec<Chunk> {
        if self.len > 0 {
            self.end_chunk(self.len);
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

    fn hash_of(data: &[u8], piece: usize) -> String {
        let mut c = Chunker::default();
        for p in data.chunks(piece.max(1)) {
            c.feed(p);
        }
        let chunks = c.finish();
        for ch in &chunks[..chunks.len().saturating_sub(1)] {
            assert!((MIN..=MAX).contains(&(ch.len as usize)), "{}", ch.len);
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
