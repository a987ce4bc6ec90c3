//! The memory under an [`AlignedBuf`](crate::AlignedBuf): a heap vector,
//! or, for a buffer of [`MAPPED_FROM`] bytes or more, an anonymous mapping
//! of its own whose whole 2 MiB regions are advised for huge pages
//! (Linux's transparent huge pages, `madvise(MADV_HUGEPAGE)`, through
//! memmap2's safe calls).
//!
//! Why: a large buffer is new memory, which the kernel hands over a page
//! at a time as it is first written: 262,144 faults per GiB with 4 KiB
//! pages, 512 with 2 MiB ones. Copying 1 GiB into fresh 16 MiB buffers
//! took 0.63-0.82 s through the heap and 0.34-0.44 s through advised
//! mappings on the development machine (docs/benchmarks.md), and a client
//! loading a model into memory does exactly that. Where huge pages are off
//! (`never`) the advice does nothing and a mapping costs what the heap's
//! own mapping of a large block does; where a mapping cannot be had (the
//! process's map count), the heap serves instead.
//!
//! Both kinds are used the same way: bytes are written from the start,
//! never past the capacity asked for (so the buffer never moves and stays
//! on its boundary), and every byte below [`Backing::len`] has been
//! written or zeroed.

use memmap2::MmapMut;

/// Buffers of at least this many bytes get a mapping of their own.
pub(crate) const MAPPED_FROM: usize = 2 << 20;

/// The size of a huge page, which the kernel places on its own boundary.
const HUGE_PAGE: usize = 2 << 20;

#[derive(Debug)]
pub(crate) struct Backing {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Heap(Vec<u8>),
    /// `map` is at least `capacity` bytes (rounded up to whole huge pages,
    /// so that the kernel places it on a huge page's boundary); `len` of
    /// them are in use.
    Mapped {
        map: MmapMut,
        capacity: usize,
        len: usize,
    },
}

impl Backing {
    /// An empty backing on the heap.
    pub(crate) fn new() -> Self {
        Backing {
            inner: Inner::Heap(Vec::new()),
        }
    }

    /// Room for `capacity` bytes, none in use; `None` when the memory
    /// cannot be had.
    pub(crate) fn with_capacity(capacity: usize) -> Option<Self> {
        if let Some(b) = Backing::mapped(capacity, 0) {
            return Some(b);
        }
        let mut v = Vec::new();
        v.try_reserve_exact(capacity).ok()?;
        Some(Backing {
            inner: Inner::Heap(v),
        })
    }

    /// `len` zero bytes in use (the kernel's zeroed pages for a mapping,
    /// `calloc`'s for the heap: no pass over them here).
    pub(crate) fn zeroed(len: usize) -> Option<Self> {
        if let Some(b) = Backing::mapped(len, len) {
            return Some(b);
        }
        let v = bytemuck::allocation::try_zeroed_vec::<u8>(len).ok()?;
        Some(Backing {
            inner: Inner::Heap(v),
        })
    }

    /// A mapping for `capacity` bytes with `len` (zero) bytes in use, if
    /// `capacity` is large enough for one and one can be had.
    fn mapped(capacity: usize, len: usize) -> Option<Self> {
        if capacity < MAPPED_FROM {
            return None;
        }
        let whole = capacity.checked_next_multiple_of(HUGE_PAGE)?;
        let map = MmapMut::map_anon(whole).ok()?;
        advise(&map, capacity);
        Some(Backing {
            inner: Inner::Mapped { map, capacity, len },
        })
    }

    pub(crate) fn as_ptr(&self) -> *const u8 {
        match &self.inner {
            Inner::Heap(v) => v.as_ptr(),
            Inner::Mapped { map, .. } => map.as_ptr(),
        }
    }

    /// Bytes in use.
    pub(crate) fn len(&self) -> usize {
        match &self.inner {
            Inner::Heap(v) => v.len(),
            Inner::Mapped { len, .. } => *len,
        }
    }

    /// The most bytes this backing holds without moving.
    pub(crate) fn capacity(&self) -> usize {
        match &self.inner {
            Inner::Heap(v) => v.capacity(),
            Inner::Mapped { capacity, .. } => *capacity,
        }
    }

    /// The bytes in use.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match &self.inner {
            Inner::Heap(v) => v,
            Inner::Mapped { map, len, .. } => map.get(..*len).unwrap_or_default(),
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match &mut self.inner {
            Inner::Heap(v) => v,
            Inner::Mapped { map, len, .. } => map.get_mut(..*len).unwrap_or_default(),
        }
    }

    /// Keeps the first `len` bytes in use (the rest stay allocated).
    pub(crate) fn truncate(&mut self, to: usize) {
        match &mut self.inner {
            Inner::Heap(v) => v.truncate(to),
            Inner::Mapped { len, .. } => *len = (*len).min(to),
        }
    }

    /// Puts zeros after the bytes in use until `to` bytes are (at most
    /// the capacity).
    pub(crate) fn zero_to(&mut self, to: usize) {
        let to = to.min(self.capacity());
        match &mut self.inner {
            Inner::Heap(v) => {
                if v.len() < to {
                    v.resize(to, 0);
                }
            }
            Inner::Mapped { map, len, .. } => {
                if *len < to {
                    if let Some(gap) = map.get_mut(*len..to) {
                        gap.fill(0);
                    }
                    *len = to;
                }
            }
        }
    }

    /// Appends as much of `data` as the capacity leaves room for; how
    /// many bytes that was. Never moves the bytes.
    pub(crate) fn extend(&mut self, data: &[u8]) -> usize {
        let room = self.capacity().saturating_sub(self.len());
        let take = data.get(..room).unwrap_or(data);
        match &mut self.inner {
            Inner::Heap(v) => v.extend_from_slice(take),
            Inner::Mapped { map, len, .. } => {
                let end = len.saturating_add(take.len());
                if let Some(to) = map.get_mut(*len..end) {
                    to.copy_from_slice(take);
                    *len = end;
                }
            }
        }
        take.len()
    }
}

/// Advises huge pages for the whole 2 MiB regions of `map`'s first `used`
/// bytes, and none past them: a huge page there would hold memory the
/// buffer never uses. Advice is a hint; failing it changes nothing.
#[cfg(target_os = "linux")]
fn advise(map: &MmapMut, used: usize) {
    use memmap2::Advice;
    let whole = used.saturating_sub(used % HUGE_PAGE);
    if whole > 0 {
        let _ = map.advise_range(Advice::HugePage, 0, whole);
    }
    let tail = map.len().saturating_sub(whole);
    if tail > 0 {
        let _ = map.advise_range(Advice::NoHugePage, whole, tail);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise(_map: &MmapMut, _used: usize) {}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn large_backings_are_mapped_and_small_ones_are_not() {
        let small = Backing::with_capacity(MAPPED_FROM - 1).unwrap();
        assert!(matches!(small.inner, Inner::Heap(_)));
        let large = Backing::with_capacity(MAPPED_FROM + 5).unwrap();
        assert!(matches!(large.inner, Inner::Mapped { .. }));
        assert_eq!(large.capacity(), MAPPED_FROM + 5);
        assert_eq!(large.len(), 0);
        assert_eq!(large.as_ptr() as usize % 4096, 0);
    }

    #[test]
    fn both_kinds_append_within_their_capacity_and_zero_on_request() {
        for cap in [100, MAPPED_FROM + 100] {
            let mut b = Backing::with_capacity(cap).unwrap();
            let data = vec![3u8; cap + 50];
            assert_eq!(b.extend(&data[..10]), 10);
            // Past the capacity nothing is appended: the bytes never move.
            let ptr = b.as_ptr();
            assert_eq!(b.extend(&data), cap - 10);
            assert_eq!(b.extend(b"x"), 0);
            assert_eq!(b.as_ptr(), ptr);
            assert_eq!(b.as_slice(), &data[..cap]);
            b.truncate(4);
            assert_eq!(b.as_slice(), &[3u8; 4]);
            // Bytes written before and cut off read as zeros once reused.
            b.zero_to(8);
            assert_eq!(b.as_slice(), &[3, 3, 3, 3, 0, 0, 0, 0]);
            b.zero_to(cap * 2);
            assert_eq!(b.len(), cap);
            b.as_mut_slice()[cap - 1] = 9;
            assert_eq!(b.as_slice()[cap - 1], 9);
        }
    }

    #[test]
    fn zeroed_backings_read_zero() {
        for len in [0, 5, MAPPED_FROM, 3 * MAPPED_FROM + 1] {
            let b = Backing::zeroed(len).unwrap();
            assert_eq!(b.len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
    }
}
