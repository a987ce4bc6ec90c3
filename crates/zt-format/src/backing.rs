//! The memory under an [`AlignedBuf`](crate::AlignedBuf): a heap vector,
//! or, for a buffer of [`MAPPED_FROM`] bytes or more, an anonymous mapping
//! of its own advised for huge pages (Linux's transparent huge pages,
//! `madvise(MADV_HUGEPAGE)`, through memmap2's safe calls). The kernel
//! backs with a huge page only a whole 2 MiB region of advised memory, and
//! every page of these mappings is a buffer's, so no huge page holds
//! memory that no buffer uses; mappings side by side with the same advice
//! merge into one (they count against the process's map limit no more
//! than the allocator's own mappings do).
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

/// The boundary every mapping starts on (the smallest page size).
const PAGE: usize = 4096;

#[derive(Debug)]
pub(crate) struct Backing {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Heap(Vec<u8>),
    /// `map` is at least `capacity` bytes (whole pages); `len` of them are
    /// in use.
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

    /// Room for `len` bytes from the first `align`-byte boundary, none in
    /// use; `None` when the memory cannot be had. A mapping starts on a
    /// page, so it needs no slack (and a length of whole 2 MiB regions
    /// stays one, which the kernel places on a huge page's boundary); the
    /// heap gets `align - 1` bytes more.
    pub(crate) fn with_room(len: usize, align: usize) -> Option<Self> {
        if let Some(b) = Backing::mapped(len, align, 0) {
            return Some(b);
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len.checked_add(align.saturating_sub(1))?)
            .ok()?;
        Some(Backing {
            inner: Inner::Heap(v),
        })
    }

    /// As [`Backing::with_room`], with every byte up to the end of the
    /// room in use and zero (the kernel's zeroed pages for a mapping,
    /// `calloc`'s for the heap: no pass over them here).
    pub(crate) fn zeroed(len: usize, align: usize) -> Option<Self> {
        if let Some(b) = Backing::mapped(len, align, len) {
            return Some(b);
        }
        let total = len.checked_add(align.saturating_sub(1))?;
        let v = bytemuck::allocation::try_zeroed_vec::<u8>(total).ok()?;
        Some(Backing {
            inner: Inner::Heap(v),
        })
    }

    /// A mapping of `capacity` bytes with `len` (zero) bytes in use, if
    /// `capacity` is large enough for one, its start (a page) lies on
    /// `align`, and one can be had.
    fn mapped(capacity: usize, align: usize, len: usize) -> Option<Self> {
        if capacity < MAPPED_FROM || align > PAGE {
            return None;
        }
        let map = MmapMut::map_anon(capacity).ok()?;
        advise(&map);
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

/// Advises huge pages for `map`. Advice is a hint: where the kernel has
/// none (or they are `never`), failing it changes nothing.
#[cfg(target_os = "linux")]
fn advise(map: &MmapMut) {
    let _ = map.advise(memmap2::Advice::HugePage);
}

#[cfg(not(target_os = "linux"))]
fn advise(_map: &MmapMut) {}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    #[test]
    fn large_backings_are_mapped_and_small_ones_are_not() {
        let small = Backing::with_room(MAPPED_FROM - 1, 64).unwrap();
        assert!(matches!(small.inner, Inner::Heap(_)));
        let large = Backing::with_room(MAPPED_FROM + 5, 4096).unwrap();
        assert!(matches!(large.inner, Inner::Mapped { .. }));
        assert_eq!(large.capacity(), MAPPED_FROM + 5);
        assert_eq!(large.len(), 0);
        assert_eq!(large.as_ptr() as usize % 4096, 0);
    }

    #[test]
    fn both_kinds_append_within_their_capacity_and_zero_on_request() {
        for cap in [100, MAPPED_FROM + 100] {
            let mut b = Backing::with_room(cap, 1).unwrap();
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
            let b = Backing::zeroed(len, 1).unwrap();
            assert_eq!(b.len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
    }
}
