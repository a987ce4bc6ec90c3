//! A buffer whose start is 64-byte aligned, built without `unsafe`: a
//! byte vector with room for 63 bytes more than asked for, viewed from its
//! first 64-byte boundary. Buffers of [`PAGE_ALIGNED_FROM`] bytes or more
//! start on a page boundary instead (4095 bytes of slack), so that they
//! can go to direct I/O as they are.
//!
//! The vector is allocated zeroed with byte alignment, which the allocator
//! serves with `calloc`: a large buffer gets fresh pages that the kernel
//! zeroes on first touch, with no extra pass over its bytes. (Asking the
//! allocator for 64-byte alignment directly would make it `memset` the
//! whole buffer first.) `calloc` still clears memory it reuses from the
//! heap, so a buffer whose bytes arrive in order is built as a
//! [`Filling`] instead: the vector is allocated with room for them and
//! only its few bytes of slack are written before they are appended.
//! On Linux, buffers of 2 MiB or more are a mapping of their own instead
//! of a heap vector, on huge pages where the kernel has them (the `memory`
//! module says why and when the heap serves them still); they start on a
//! page, with no slack.
//!
//! Every byte of the view is initialized: the bytes in use always reach
//! past it (`bytes.len() >= start + len`); room past that is zeroed when a
//! reuse takes it.

use std::fmt;

use crate::error::Rule;
use crate::memory::Memory;

/// The alignment of every component blob, and of every buffer we hand out.
pub const ALIGNMENT: u64 = 64;

/// The page size direct I/O aligns to.
pub const PAGE_ALIGNMENT: usize = 4096;

/// Buffers at least this long start on a page boundary.
pub const PAGE_ALIGNED_FROM: usize = 1 << 20;

/// An owned byte buffer that starts on a 64-byte boundary (a page
/// boundary from [`PAGE_ALIGNED_FROM`] bytes on).
pub struct AlignedBuf {
    bytes: Memory,
    /// Where the aligned view starts in `bytes`.
    start: usize,
    len: usize,
    /// The boundary `start` lies on.
    align: usize,
}

/// The boundary a new buffer of `len` bytes starts on: [`PAGE_ALIGNMENT`]
/// from [`PAGE_ALIGNED_FROM`] bytes on, [`ALIGNMENT`] below. A file laid
/// out for direct I/O places its blobs on the same boundaries.
pub fn alignment_for(len: u64) -> u64 {
    if len >= PAGE_ALIGNED_FROM as u64 {
        PAGE_ALIGNMENT as u64
    } else {
        ALIGNMENT
    }
}

/// [`alignment_for`] in memory terms.
fn buffer_alignment(len: usize) -> usize {
    usize::try_from(alignment_for(len as u64)).unwrap_or(PAGE_ALIGNMENT)
}

/// The refusal of a buffer of `len` bytes that cannot be had.
fn too_big(len: u64) -> Rule {
    Rule::DecompressOverCap {
        length: len,
        cap: usize::MAX as u64,
    }
}

/// A buffer of `len` bytes: its length in memory terms and the boundary
/// it starts on.
fn layout(len: u64) -> Result<(usize, usize), Rule> {
    let n = usize::try_from(len).map_err(|_| too_big(len))?;
    Ok((n, buffer_alignment(n)))
}

/// How far past `addr` the first `align`-byte boundary lies.
fn boundary(addr: *const u8, align: usize) -> usize {
    let misaligned = (addr as usize).checked_rem(align).unwrap_or(0);
    align
        .saturating_sub(misaligned)
        .checked_rem(align)
        .unwrap_or(0)
}

impl AlignedBuf {
    /// A zero-filled buffer of `len` bytes. Fails instead of aborting when
    /// the memory cannot be had.
    pub fn zeroed(len: u64) -> Result<Self, Rule> {
        let (len, align) = layout(len)?;
        let bytes = Memory::zeroed(len, align).ok_or_else(|| too_big(len as u64))?;
        let start = boundary(bytes.as_ptr(), align);
        Ok(AlignedBuf {
            bytes,
            start,
            len,
            align,
        })
    }

    /// Copies `data` into a new aligned buffer (never zeroed first).
    pub fn copy_from(data: &[u8]) -> Result<Self, Rule> {
        let mut f = AlignedBuf::filling(data.len() as u64)?;
        f.extend(data);
        // Whole: it was made for exactly these bytes.
        f.finish().map_err(|_| too_big(data.len() as u64))
    }

    /// An empty buffer to be filled with exactly `len` bytes, in order,
    /// without being zeroed first. Fails instead of aborting when the
    /// memory cannot be had.
    pub fn filling(len: u64) -> Result<Filling, Rule> {
        let (len, align) = layout(len)?;
        let mut bytes = Memory::with_room(len, align).ok_or_else(|| too_big(len as u64))?;
        // The boundary of the allocation, which appending within its
        // capacity never moves; the slack before it is written once.
        let start = boundary(bytes.as_ptr(), align);
        bytes.zero_to(start);
        Ok(Filling {
            buf: AlignedBuf {
                bytes,
                start,
                len,
                align,
            },
        })
    }

    /// This buffer emptied for filling with `len` bytes again, if it
    /// [can hold](AlignedBuf::can_hold) that many.
    pub fn refill(mut self, len: usize) -> Result<Filling, AlignedBuf> {
        if !self.can_hold(len) {
            return Err(self);
        }
        self.bytes.truncate(self.start);
        self.len = len;
        Ok(Filling { buf: self })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        debug_assert!(self.bytes.len() >= self.start.saturating_add(self.len));
        self.bytes
            .as_slice()
            .get(self.start..self.start.saturating_add(self.len))
            .unwrap_or_default()
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let (start, len) = (self.start, self.len);
        self.bytes
            .as_mut_slice()
            .get_mut(start..start.saturating_add(len))
            .unwrap_or_default()
    }

    /// The boundary this buffer starts on: 64, or [`PAGE_ALIGNMENT`] for a buffer
    /// made with at least [`PAGE_ALIGNED_FROM`] bytes.
    pub fn alignment(&self) -> usize {
        self.align
    }

    /// The most bytes this buffer can hold without a new allocation.
    pub fn capacity(&self) -> usize {
        self.bytes.capacity().saturating_sub(self.start)
    }

    /// Whether [`AlignedBuf::reuse`] can make this buffer `len` bytes
    /// long: its capacity allows, and it starts on the boundary a new
    /// buffer of `len` bytes would.
    pub fn can_hold(&self, len: usize) -> bool {
        len <= self.capacity() && self.align >= buffer_alignment(len)
    }

    /// Makes this buffer `len` bytes long for reuse, if it
    /// [can hold](AlignedBuf::can_hold) that many; `false` leaves it
    /// unchanged. The bytes are whatever the buffer held before: the
    /// caller must overwrite all of them.
    pub fn reuse(&mut self, len: usize) -> bool {
        if !self.can_hold(len) {
            return false;
        }
        // Bytes never written (a filled buffer's room past its length) are
        // zeroed now, within the allocation.
        self.bytes.zero_to(self.start.saturating_add(len));
        self.len = len;
        true
    }

    /// Shortens the buffer; the bytes it no longer shows are zeroed, so
    /// that a reuse longer than `len` shows zeros there.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            if let Some(tail) = self.as_mut_slice().get_mut(len..) {
                tail.fill(0);
            }
            self.len = len;
        }
    }
}

/// An [`AlignedBuf`] of a known length whose bytes are appended in order
/// ([`AlignedBuf::filling`]); [`Filling::finish`] hands it over once every
/// byte is in.
pub struct Filling {
    /// `buf.bytes` holds the slack and the bytes appended so far; its
    /// capacity reaches `start + len`, so appending never moves it.
    buf: AlignedBuf,
}

impl Filling {
    /// The bytes appended so far.
    pub fn filled(&self) -> &[u8] {
        self.buf
            .bytes
            .as_slice()
            .get(self.buf.start..)
            .unwrap_or_default()
    }

    /// How many bytes are still to come.
    pub fn remaining(&self) -> usize {
        self.buf.len.saturating_sub(self.filled().len())
    }

    /// Appends as much of `data` as there is room for; how many bytes
    /// that was.
    pub fn extend(&mut self, data: &[u8]) -> usize {
        let take = data.get(..self.remaining()).unwrap_or(data);
        self.buf.bytes.extend(take)
    }

    /// The buffer, once all of its bytes are in; itself otherwise.
    pub fn finish(self) -> Result<AlignedBuf, Filling> {
        match self.remaining() {
            0 => Ok(self.buf),
            _ => Err(self),
        }
    }
}

impl fmt::Debug for Filling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Filling")
            .field("len", &self.buf.len)
            .field("filled", &self.filled().len())
            .finish()
    }
}

impl Default for AlignedBuf {
    /// An empty buffer (63 bytes of slack, so that even its view is aligned).
    fn default() -> Self {
        AlignedBuf::zeroed(0).unwrap_or(AlignedBuf {
            bytes: Memory::new(),
            start: 0,
            len: 0,
            align: ALIGNMENT as usize,
        })
    }
}

impl Clone for AlignedBuf {
    /// A copy in a new allocation, on its own boundary (never zeroed
    /// first).
    fn clone(&self) -> Self {
        let Some(mut bytes) = Memory::with_room(self.len, self.align) else {
            // As a vector's clone does when the memory cannot be had.
            let layout = std::alloc::Layout::array::<u8>(self.len)
                .unwrap_or_else(|_| std::alloc::Layout::new::<u8>());
            std::alloc::handle_alloc_error(layout)
        };
        let start = boundary(bytes.as_ptr(), self.align);
        bytes.zero_to(start);
        bytes.extend(self.as_slice());
        AlignedBuf {
            bytes,
            start,
            len: self.len,
            align: self.align,
        }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_sized() {
        for len in [0u64, 1, 63, 64, 65, 1000] {
            let b = AlignedBuf::zeroed(len).unwrap();
            assert_eq!(b.len() as u64, len);
            assert_eq!(b.as_slice().as_ptr() as usize % 64, 0);
        }
        let b = AlignedBuf::copy_from(b"hello").unwrap();
        assert_eq!(b.as_slice(), b"hello");
    }

    #[test]
    fn large_buffers_start_on_a_page() {
        for len in [PAGE_ALIGNED_FROM as u64, 32 << 20] {
            let b = AlignedBuf::zeroed(len).unwrap();
            assert_eq!(b.alignment(), PAGE_ALIGNMENT);
            assert_eq!(b.as_slice().as_ptr() as usize % PAGE_ALIGNMENT, 0);
            assert_eq!(b.clone().as_slice().as_ptr() as usize % PAGE_ALIGNMENT, 0);
        }
        assert_eq!(AlignedBuf::zeroed(1000).unwrap().alignment(), 64);
    }

    #[test]
    fn clones_stay_aligned_and_equal() {
        for len in [0usize, 1, 100, 4096, 1 << 20, 3 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let b = AlignedBuf::copy_from(&data).unwrap();
            // Clones land at different addresses; each must be re-aligned.
            let clones: Vec<AlignedBuf> = (0..8).map(|_| b.clone()).collect();
            for c in &clones {
                assert_eq!(c.as_slice(), &data[..]);
                assert_eq!(c.as_slice().as_ptr() as usize % b.alignment(), 0);
            }
        }
    }

    #[test]
    fn reuse_within_capacity_only() {
        let mut b = AlignedBuf::copy_from(&[7u8; 1000]).unwrap();
        assert!(b.capacity() >= 1000);
        assert!(b.reuse(10));
        assert_eq!(b.as_slice(), &[7u8; 10]);
        assert!(b.reuse(1000));
        assert_eq!(b.len(), 1000);
        assert!(!b.reuse(b.capacity() + 1));
        assert_eq!(b.len(), 1000);
        assert_eq!(b.as_slice().as_ptr() as usize % 64, 0);
    }

    #[test]
    fn filled_buffers_are_aligned_and_hold_what_was_appended() {
        for len in [0usize, 1, 63, 64, 1000, PAGE_ALIGNED_FROM, 3 << 20] {
            let data: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let mut f = AlignedBuf::filling(len as u64).unwrap();
            let ptr = f.filled().as_ptr() as usize;
            assert_eq!(ptr % alignment_for(len as u64) as usize, 0, "{len}");
            let (a, b) = data.split_at(len / 3);
            assert_eq!(f.extend(a), a.len());
            assert_eq!(f.filled(), a);
            assert_eq!(f.remaining(), b.len());
            // Not complete: handed back as it is.
            let mut f = if b.is_empty() {
                f
            } else {
                f.finish().unwrap_err()
            };
            // Bytes past the length are refused, never appended.
            let mut extra = b.to_vec();
            extra.push(1);
            assert_eq!(f.extend(&extra), b.len());
            assert_eq!(f.extend(b"more"), 0);
            let buf = f.finish().unwrap();
            assert_eq!(buf.as_slice(), &data[..]);
            // Appending never moved the allocation off its boundary.
            assert_eq!(buf.as_slice().as_ptr() as usize, ptr);
            assert!(buf.capacity() >= len);
        }
        assert_eq!(AlignedBuf::copy_from(b"abc").unwrap().as_slice(), b"abc");
    }

    #[test]
    fn a_buffer_is_refilled_within_its_capacity_only() {
        // On the heap, and a mapping of its own (2 MiB and more).
        for len in [500, 3 << 20] {
            let b = AlignedBuf::copy_from(&vec![5u8; len]).unwrap();
            let room = b.capacity();
            let b = b.refill(room + 1).unwrap_err();
            let mut f = b.refill(100).unwrap();
            assert_eq!(f.filled(), b"");
            f.extend(&[6u8; 100]);
            let b = f.finish().unwrap();
            assert_eq!(b.as_slice(), &[6u8; 100][..]);
            assert_eq!(b.as_slice().as_ptr() as usize % 64, 0);
            // Reused longer than it was filled: the rest reads as zeros,
            // not as the bytes it held before the refill.
            let mut b = b;
            assert!(b.reuse(300));
            assert_eq!(b.as_slice().get(..100), Some(&[6u8; 100][..]));
            assert_eq!(b.as_slice().get(100..), Some(&[0u8; 200][..]));
        }
    }

    #[test]
    fn truncated_tails_read_zero_again() {
        let mut b = AlignedBuf::copy_from(&[9u8; 200]).unwrap();
        b.truncate(10);
        assert_eq!(b.len(), 10);
        assert_eq!(b.as_slice(), &[9u8; 10]);
    }
}
