//! A file's Xet index: its chunks, the xorbs they are grouped into, and
//! its hash. The daemon's xorbs are the file's own bytes in order, each
//! chunk stored uncompressed behind its 8-byte header, so a xorb's bytes
//! are made from the file as they are sent ([`Index::header`]) and none
//! are stored.

use std::ops::Range;

use super::chunks::Chunk;
use super::hashes::{file_hash, root, XetHash};

/// Most bytes of one xorb, headers included. The protocol allows 64 MiB,
/// but `hf_xet` fetches each xorb range into a buffer of its own: 1 MiB
/// buffers its allocator reuses, where 64 MiB ones were mapped and
/// faulted in afresh each time (a 1 GiB download took 1.49 s against 2.6
/// s, with half the page faults: docs/benchmarks.md).
const XORB_BYTES: u64 = 1 << 20;
/// Most chunks of one xorb (the protocol's limit).
const XORB_CHUNKS: usize = 8 << 10;
/// A chunk's header: version, stored length, scheme, length.
pub(crate) const HEADER: u64 = 8;

/// A xorb: its hash and the chunks it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Xorb {
    pub(crate) hash: XetHash,
    pub(crate) chunks: Range<u32>,
}

/// A file's chunks and xorbs.
#[derive(Debug)]
pub(crate) struct Index {
    /// The file's hash (`X-Xet-Hash`).
    pub(crate) hash: XetHash,
    pub(crate) size: u64,
    chunks: Vec<Chunk>,
    /// Where each chunk starts in the file, and the file's size last.
    starts: Vec<u64>,
    pub(crate) xorbs: Vec<Xorb>,
}

/// One piece of a reconstruction: a run of one xorb's chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Term {
    pub(crate) xorb: usize,
    /// The chunks, numbered within the xorb (as the protocol numbers
    /// them: a xorb's hash and a chunk range name the same bytes in every
    /// file that holds the xorb).
    pub(crate) chunks: Range<u32>,
    /// The chunks' bytes once unpacked.
    pub(crate) unpacked: u64,
    /// Where they are in the xorb (end exclusive).
    pub(crate) bytes: Range<u64>,
}

impl Index {
    /// The index of a file cut into `chunks`.
    pub(crate) fn of(mut chunks: Vec<Chunk>) -> Index {
        chunks.shrink_to_fit();
        let mut starts = Vec::with_capacity(chunks.len() + 1);
        let mut at = 0u64;
        for c in &chunks {
            starts.push(at);
            at += u64::from(c.len);
        }
        starts.push(at);
        let mut xorbs = Vec::new();
        let mut first = 0usize;
        let mut bytes = 0u64;
        for (i, c) in chunks.iter().enumerate() {
            let add = u64::from(c.len) + HEADER;
            if i > first && (bytes + add > XORB_BYTES || i - first == XORB_CHUNKS) {
                xorbs.push(xorb(&chunks, first..i));
                (first, bytes) = (i, 0);
            }
            bytes += add;
        }
        if first < chunks.len() {
            xorbs.push(xorb(&chunks, first..chunks.len()));
        }
        let leaves: Vec<_> = chunks.iter().map(|c| (c.hash, u64::from(c.len))).collect();
        Index {
            hash: file_hash(&leaves),
            size: at,
            chunks,
            starts,
            xorbs,
        }
    }

    /// Memory the index holds, for the bound on those kept.
    pub(crate) fn weight(&self) -> u64 {
        (self.chunks.len() * (size_of::<Chunk>() + 8) + self.xorbs.len() * size_of::<Xorb>()) as u64
            + 256
    }

    /// The chunk holding byte `at` of the file (`at < size`).
    fn chunk_at(&self, at: u64) -> u32 {
        (self.starts.partition_point(|&s| s <= at) - 1) as u32
    }

    /// The xorb holding chunk `c`.
    fn xorb_of(&self, c: u32) -> usize {
        self.xorbs.partition_point(|x| x.chunks.end <= c)
    }

    /// Where chunk `c` starts in its xorb `x` (`c` may be one past its last).
    fn offset_in(&self, x: &Xorb, c: u32) -> u64 {
        let first = x.chunks.start as usize;
        self.starts[c as usize] - self.starts[first] + HEADER * u64::from(c - x.chunks.start)
    }

    /// The file bytes chunks `chunks` hold.
    pub(crate) fn file_span(&self, chunks: &Range<u32>) -> Range<u64> {
        self.starts[chunks.start as usize]..self.starts[chunks.end as usize]
    }

    /// The bytes chunks `chunks` take in a xorb, headers included.
    pub(crate) fn stored_len(&self, chunks: &Range<u32>) -> u64 {
        let span = self.file_span(chunks);
        span.end - span.start + HEADER * u64::from(chunks.end - chunks.start)
    }

    /// How many terms [`Index::reconstruction`] gives `range`: the xorbs
    /// it touches (0 for a range that starts at or past the end).
    pub(crate) fn terms_in(&self, range: &Range<u64>) -> usize {
        let end = range.end.min(self.size);
        if range.start >= end {
            return 0;
        }
        let first = self.xorb_of(self.chunk_at(range.start));
        self.xorb_of(self.chunk_at(end - 1)) - first + 1
    }

    /// What makes bytes `range` of the file (end exclusive, clipped to the
    /// file): the runs of chunks, xorb by xorb, and where the range starts
    /// in the first; `None` for a range that starts at or past the end.
    pub(crate) fn reconstruction(&self, range: Range<u64>) -> Option<(u64, Vec<Term>)> {
        let end = range.end.min(self.size);
        if range.start >= end {
            return None;
        }
        let (first, last) = (self.chunk_at(range.start), self.chunk_at(end - 1));
        let skip = range.start - self.starts[first as usize];
        let mut terms = Vec::new();
        let mut c = first;
        while c <= last {
            let xi = self.xorb_of(c);
            let x = &self.xorbs[xi];
            let run = c..x.chunks.end.min(last + 1);
            let span = self.file_span(&run);
            let first = x.chunks.start;
            terms.push(Term {
                xorb: xi,
                bytes: self.offset_in(x, run.start)..self.offset_in(x, run.end),
                unpacked: span.end - span.start,
                chunks: run.start - first..run.end - first,
            });
            c = run.end;
        }
        Some((skip, terms))
    }

    /// The chunks of xorb `xi` (numbered in the file) whose stored bytes
    /// are exactly `bytes` (end exclusive): whole chunks, headers and all,
    /// as a reconstruction names them; `None` for any other range.
    pub(crate) fn chunks_stored_at(&self, xi: usize, bytes: &Range<u64>) -> Option<Range<u32>> {
        let x = self.xorbs.get(xi)?;
        let at = |off: u64| {
            let (mut lo, mut hi) = (x.chunks.start, x.chunks.end);
            // The chunk that starts at `off`, by bisection.
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.offset_in(x, mid) < off {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            (self.offset_in(x, lo) == off).then_some(lo)
        };
        let (a, b) = (at(bytes.start)?, at(bytes.end)?);
        (a < b).then_some(a..b)
    }

    /// Chunk `c`'s header: stored uncompressed (scheme 0), version 0.
    pub(crate) fn header(&self, c: u32) -> [u8; HEADER as usize] {
        let len = self.chunks[c as usize].len.to_le_bytes();
        [0, len[0], len[1], len[2], 0, len[0], len[1], len[2]]
    }

    /// The chunks as the file's offsets: where each of `chunks` starts.
    pub(crate) fn starts(&self, chunks: &Range<u32>) -> &[u64] {
        &self.starts[chunks.start as usize..=chunks.end as usize]
    }
}

fn xorb(chunks: &[Chunk], run: Range<usize>) -> Xorb {
    let leaves: Vec<_> = chunks[run.clone()]
        .iter()
        .map(|c| (c.hash, u64::from(c.len)))
        .collect();
    Xorb {
        hash: root(&leaves),
        chunks: run.start as u32..run.end as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(lens: &[u32]) -> Index {
        let chunks = lens
            .iter()
            .enumerate()
            .map(|(i, &len)| Chunk {
                hash: XetHash::of_chunk(&i.to_le_bytes()),
                len,
            })
            .collect();
        Index::of(chunks)
    }

    /// How many 128 KiB chunks a xorb holds, with their headers.
    const PER: u32 = (XORB_BYTES / (HEADER + (128 << 10))) as u32;

    #[test]
    fn xorbs_hold_at_most_their_limit() {
        assert_eq!(PER, 7);
        let ix = index(&[128 << 10; 1000]);
        assert_eq!(ix.xorbs.len(), 1000usize.div_ceil(PER as usize));
        assert_eq!(ix.xorbs[0].chunks, 0..PER);
        assert_eq!(ix.xorbs[1].chunks, PER..2 * PER);
        assert_eq!(ix.xorbs.last().unwrap().chunks.end, 1000);
        let small = index(&[10; 9000]);
        assert_eq!(small.xorbs[0].chunks, 0..8192);
    }

    #[test]
    fn reconstruction_names_whole_chunks() {
        let ix = index(&[100; 600_000 / 100]);
        assert_eq!(ix.xorbs.len(), 1);
        let (skip, terms) = ix.reconstruction(150..1050).unwrap();
        assert_eq!(skip, 50);
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].chunks, 1..11);
        assert_eq!(terms[0].unpacked, 1000);
        assert_eq!(terms[0].bytes, 108..1188);
        assert_eq!(ix.chunks_stored_at(0, &terms[0].bytes), Some(1..11));
        let across = ix.reconstruction(0..u64::MAX).unwrap().1;
        assert_eq!(across.len(), 1);
        // A range that cuts a chunk or a header is none of ours.
        assert_eq!(ix.chunks_stored_at(0, &(109..1188)), None);
        assert_eq!(ix.chunks_stored_at(0, &(108..1187)), None);
        assert_eq!(ix.chunks_stored_at(1, &(0..108)), None);
        assert!(ix.reconstruction(600_000..600_001).is_none());
        // The end is clipped to the file.
        let (_, all) = ix.reconstruction(0..u64::MAX).unwrap();
        assert_eq!(all[0].chunks, 0..6000);
    }

    #[test]
    fn a_range_across_xorbs_has_a_term_in_each() {
        let ix = index(&[128 << 10; 1000]);
        let at = u64::from(PER) * (128 << 10);
        let (skip, terms) = ix.reconstruction(at - 5..at + 5).unwrap();
        assert_eq!(skip, (128 << 10) - 5);
        assert_eq!(terms.iter().map(|t| t.xorb).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(ix.terms_in(&(at - 5..at + 5)), 2);
        assert_eq!(ix.terms_in(&(0..u64::MAX)), ix.xorbs.len());
        assert_eq!(ix.terms_in(&(u64::MAX - 1..u64::MAX)), 0);
        // Chunks numbered within their xorb.
        assert_eq!(
            (terms[0].chunks.clone(), terms[1].chunks.clone()),
            (PER - 1..PER, 0..1)
        );
        assert_eq!(terms[1].bytes, 0..HEADER + (128 << 10));
        assert_eq!(ix.chunks_stored_at(1, &terms[1].bytes), Some(PER..PER + 1));
    }
}
