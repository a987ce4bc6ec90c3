//! The memory under an [`AlignedBuf`](crate::AlignedBuf): a heap vector,
//! or, on Linux, for a buffer of [`MAPPED_FROM`] bytes or more, an
//! anonymous mapping of its own advised for huge pages (transparent huge
//! pages, `madvise(MADV_HUGEPAGE)`, through memmap2's safe calls).
//!
//! Why: a large buffer is new memory, which the kernel hands over a page
//! at a time as it is first written: 262,144 faults per GiB with 4 KiB
//! pages, 512 with 2 MiB ones. Copying 1 GiB into fresh 16 MiB buffers
//! took 2.2-3.2x as long through the heap as through advised mappings on
//! the development machine, and a client loading a model into memory
//! does exactly that (docs/benchmarks.md). The kernel backs with a huge
//! page only a whole 2 MiB region of advised memory, so the buffer's
//! first and last partial regions keep 4 KiB pages; a length of whole
//! 2 MiB regions (most tensors) is placed on a huge page's boundary by
//! Linux 6.7 and later, older kernels leaving its first and last regions
//! small. Mappings side by side with the same advice merge into one; a
//! huge page may then hold the end of one buffer and the start of the
//! next, and stays whole until the kernel splits it after the first is
//! freed.
//!
//! The heap serves instead:
//! - below [`MAPPED_FROM`] bytes, and on other systems;
//! - with `ZTSERVE_HUGE_PAGES=off` in the environment (read once): where
//!   huge pages are `madvise` and their `defrag` too (the usual default),
//!   a fault in advised memory may compact memory first, which on a host
//!   with fragmented memory can take longer than the 4 KiB faults it
//!   saves (docs/python.md);
//! - while [`Policy::max_live`] mappings are held (a quarter of
//!   `vm.max_map_count`), so that buffers never take the mappings that
//!   the allocator, thread stacks and file maps need;
//! - where a mapping cannot be had.
//!
//! A mapping freed (of at most a quarter of [`SPARE_BYTES`]) is kept for
//! the next buffer filled or cloned that it can hold (up to a quarter
//! larger; a zeroed buffer never takes one), [`SPARE_BYTES`] of them at
//! most, the oldest unmapped first to make room: a client that drops
//! each tensor after use and fetches the next (64 clients fetching 2 MiB
//! components again and again in the load bench) then reuses memory
//! already faulted in, as the heap's free lists did, instead of mapping,
//! zeroing and unmapping every buffer.
//!
//! Both kinds are used the same way: bytes are written from the start,
//! never past the room asked for (so the buffer never moves and stays on
//! its boundary), and every byte below [`Memory::len`] has been written
//! or zeroed.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, TryLockError};

use memmap2::MmapMut;

/// Buffers of at least this many bytes get a mapping of their own.
pub(crate) const MAPPED_FROM: usize = 2 << 20;

/// The boundary every mapping starts on (the smallest page size).
const PAGE: usize = 4096;

/// Mappings held now, by every buffer of the process and as spares.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Most bytes of freed mappings kept for reuse.
pub(crate) const SPARE_BYTES: usize = 128 << 20;

/// The largest mapping kept: one freed giant never fills the spares.
const SPARE_MOST: usize = SPARE_BYTES / 4;

/// Freed mappings kept for reuse.
static SPARES: Mutex<Spares> = Mutex::new(Spares::new());

/// Freed mappings, oldest first, and their bytes.
#[derive(Debug)]
struct Spares {
    maps: VecDeque<MmapMut>,
    bytes: usize,
}

impl Spares {
    const fn new() -> Self {
        Spares {
            maps: VecDeque::new(),
            bytes: 0,
        }
    }

    /// Keeps `map`, unless it is larger than [`SPARE_MOST`]; the oldest
    /// spares make room for it within [`SPARE_BYTES`]. Returns the
    /// mappings not kept, for the caller to unmap outside the lock.
    fn keep(&mut self, map: MmapMut) -> Vec<MmapMut> {
        if map.len() > SPARE_MOST {
            return vec![map];
        }
        let mut out = Vec::new();
        while self.bytes.saturating_add(map.len()) > SPARE_BYTES {
            let Some(old) = self.maps.pop_front() else {
                break;
            };
            self.bytes = self.bytes.saturating_sub(old.len());
            out.push(old);
        }
        self.bytes = self.bytes.saturating_add(map.len());
        self.maps.push_back(map);
        out
    }

    /// The smallest spare that holds `capacity` bytes and is at most a
    /// quarter larger.
    fn take(&mut self, capacity: usize) -> Option<MmapMut> {
        let most = capacity.saturating_add(capacity / 4);
        let (i, _) = self
            .maps
            .iter()
            .enumerate()
            .filter(|(_, m)| m.len() >= capacity && m.len() <= most)
            .min_by_key(|(_, m)| m.len())?;
        let map = self.maps.remove(i)?;
        self.bytes = self.bytes.saturating_sub(map.len());
        Some(map)
    }
}

/// The spares, unless another thread holds them now: they are never
/// waited for. A buffer taken or freed meanwhile maps or unmaps its own,
/// and a child forked while a thread of its parent held them (the lock
/// then stays held in the child, by a thread it does not have) never
/// blocks on them. Whatever a thread that panicked holding them left is
/// used: every change to them keeps `bytes` equal to their lengths' sum.
fn lock(spares: &Mutex<Spares>) -> Option<MutexGuard<'_, Spares>> {
    match spares.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// A freed mapping: kept in `spares`, or unmapped (and no longer
/// counted in [`LIVE`]), with any older spares it pushed out.
fn release(map: MmapMut, spares: &Mutex<Spares>) {
    let unkept = match lock(spares) {
        Some(mut kept) => kept.keep(map),
        None => vec![map],
    };
    for map in unkept {
        drop(map);
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// When buffers are mapped.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Policy {
    /// Whether large buffers are mapped at all.
    pub(crate) enabled: bool,
    /// Most mappings held at once.
    pub(crate) max_live: usize,
}

impl Policy {
    /// Whether a buffer of `capacity` bytes on an `align`-byte boundary
    /// may be a mapping (its start, a page, lies on any smaller boundary).
    fn maps(self, capacity: usize, align: usize) -> bool {
        self.enabled && capacity >= MAPPED_FROM && align <= PAGE
    }

    /// The process's policy: from `ZTSERVE_HUGE_PAGES` and `vm.max_map_count`,
    /// read once.
    fn current() -> Policy {
        static POLICY: OnceLock<Policy> = OnceLock::new();
        *POLICY.get_or_init(|| {
            let off = std::env::var("ZTSERVE_HUGE_PAGES").is_ok_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "off" | "0" | "no" | "never"
                )
            });
            let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
                .ok()
                .and_then(|s| s.trim().parse::<usize>().ok())
                .unwrap_or(65_530);
            Policy {
                enabled: cfg!(target_os = "linux") && !off,
                max_live: limit / 4,
            }
        })
    }
}

#[derive(Debug)]
pub(crate) struct Memory {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Heap(Vec<u8>),
    /// `map` holds at least `capacity` bytes (more when it was a spare);
    /// `len` of them are in use. Counted in [`LIVE`] until it
    /// is unmapped (as a spare too).
    Mapped {
        map: MmapMut,
        capacity: usize,
        len: usize,
    },
}

impl Drop for Memory {
    fn drop(&mut self) {
        let inner = std::mem::replace(&mut self.inner, Inner::Heap(Vec::new()));
        if let Inner::Mapped { map, .. } = inner {
            release(map, &SPARES);
        }
    }
}

impl Memory {
    /// An empty heap vector.
    pub(crate) fn new() -> Self {
        Memory {
            inner: Inner::Heap(Vec::new()),
        }
    }

    /// Room for `len` bytes from the first `align`-byte boundary, none in
    /// use; `None` when the memory cannot be had. A mapping starts on a
    /// page, so it needs no slack (and a length of whole 2 MiB regions
    /// stays one); the heap gets `align - 1` bytes more.
    pub(crate) fn with_room(len: usize, align: usize) -> Option<Self> {
        Memory::with_room_in(len, align, Policy::current(), &SPARES)
    }

    fn with_room_in(
        len: usize,
        align: usize,
        policy: Policy,
        spares: &Mutex<Spares>,
    ) -> Option<Self> {
        if let Some(m) = Memory::spare(len, align, policy, spares) {
            return Some(m);
        }
        if let Some(m) = Memory::mapped(len, align, 0, policy) {
            return Some(m);
        }
        let mut v = Vec::new();
        v.try_reserve_exact(len.checked_add(align.saturating_sub(1))?)
            .ok()?;
        Some(Memory {
            inner: Inner::Heap(v),
        })
    }

    /// As [`Memory::with_room`], with every byte up to the end of the
    /// room in use and zero (the kernel's zeroed pages for a mapping,
    /// `calloc`'s for the heap: no pass over them here).
    pub(crate) fn zeroed(len: usize, align: usize) -> Option<Self> {
        if let Some(m) = Memory::mapped(len, align, len, Policy::current()) {
            return Some(m);
        }
        let total = len.checked_add(align.saturating_sub(1))?;
        let v = bytemuck::allocation::try_zeroed_vec::<u8>(total).ok()?;
        Some(Memory {
            inner: Inner::Heap(v),
        })
    }

    /// A freed mapping that holds `capacity` bytes, none in use (its bytes
    /// are what it held before, never shown: only bytes written or zeroed
    /// are in use), if `policy` maps buffers this large.
    fn spare(
        capacity: usize,
        align: usize,
        policy: Policy,
        spares: &Mutex<Spares>,
    ) -> Option<Self> {
        if !policy.maps(capacity, align) {
            return None;
        }
        let map = lock(spares)?.take(capacity)?;
        Some(Memory {
            inner: Inner::Mapped {
                map,
                capacity,
                len: 0,
            },
        })
    }

    /// A mapping of `capacity` bytes with `len` (zero) bytes in use, if
    /// `policy` allows one this large, its start (a page) lies on `align`,
    /// and one can be had.
    fn mapped(capacity: usize, align: usize, len: usize, policy: Policy) -> Option<Self> {
        if !policy.maps(capacity, align) {
            return None;
        }
        // Taken before mapping, so that threads racing for the last
        // mappings allowed never exceed the bound together.
        let taken = LIVE.fetch_add(1, Ordering::Relaxed);
        let map = if taken < policy.max_live {
            MmapMut::map_anon(capacity).ok()
        } else {
            None
        };
        let Some(map) = map else {
            LIVE.fetch_sub(1, Ordering::Relaxed);
            return None;
        };
        advise(&map);
        Some(Memory {
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

    /// The most bytes this memory holds without moving.
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

    /// Keeps the first `to` bytes in use (the rest stay allocated).
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

    const ON: Policy = Policy {
        enabled: true,
        max_live: usize::MAX,
    };

    fn is_mapped(m: &Memory) -> bool {
        matches!(m.inner, Inner::Mapped { .. })
    }

    /// Memory with spares of the test's own (other tests free mappings
    /// into the process's meanwhile).
    fn room(len: usize, align: usize, policy: Policy, spares: &Mutex<Spares>) -> Memory {
        Memory::with_room_in(len, align, policy, spares).unwrap()
    }

    fn none() -> Mutex<Spares> {
        Mutex::new(Spares::new())
    }

    #[test]
    fn large_memory_is_mapped_and_small_memory_is_not() {
        let small = room(MAPPED_FROM - 1, 64, ON, &none());
        assert!(!is_mapped(&small));
        let large = room(MAPPED_FROM + 5, 4096, ON, &none());
        assert_eq!(is_mapped(&large), cfg!(target_os = "linux"));
        assert!(large.capacity() >= MAPPED_FROM + 5);
        assert_eq!(large.len(), 0);
        assert_eq!(large.as_ptr() as usize % 4096, 0);
        // A boundary past a page's is the heap's to give.
        let wide = room(MAPPED_FROM, 2 * PAGE, ON, &none());
        assert!(!is_mapped(&wide));
    }

    #[test]
    fn the_heap_serves_when_mapping_is_off_or_at_its_bound() {
        let off = Policy {
            enabled: false,
            max_live: usize::MAX,
        };
        assert!(!is_mapped(&room(4 * MAPPED_FROM, 4096, off, &none())));
        let at_bound = Policy {
            enabled: true,
            max_live: 0,
        };
        let m = room(4 * MAPPED_FROM, 4096, at_bound, &none());
        assert!(!is_mapped(&m));
        assert!(m.capacity() >= 4 * MAPPED_FROM + 4095);
    }

    #[test]
    fn a_spare_is_reused_without_showing_what_it_held() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let spares = none();
        let mut old = MmapMut::map_anon(4 << 20).unwrap();
        // Counted as a buffer's mapping is: once reused, it is one.
        LIVE.fetch_add(1, Ordering::Relaxed);
        old.fill(0xAA);
        let ptr = old.as_ptr();
        assert!(held(&spares).keep(old).is_empty());
        let asked = (7 << 20) / 2;
        let mut m = room(asked, 4096, ON, &spares);
        assert_eq!(m.as_ptr(), ptr, "the spare was not taken");
        assert_eq!(held(&spares).bytes, 0);
        assert_eq!((m.len(), m.capacity()), (0, asked));
        assert_eq!(m.extend(b"abc"), 3);
        m.zero_to(100);
        assert_eq!(&m.as_slice()[..3], b"abc");
        assert!(m.as_slice()[3..].iter().all(|&b| b == 0));
        // Appending stops at the capacity asked for, not the spare's.
        assert_eq!(m.extend(&vec![1u8; 4 << 20]), asked - 100);
    }

    #[test]
    fn spares_are_taken_when_they_fit_and_kept_within_their_bound() {
        let mut spares = Spares::new();
        let map = |mib: usize| MmapMut::map_anon(mib << 20).unwrap();
        for mib in [8, 4, 6] {
            assert!(spares.keep(map(mib)).is_empty());
        }
        assert_eq!(spares.bytes, 18 << 20);
        // The smallest that holds it, at most a quarter larger.
        assert_eq!(spares.take(5 << 20).map(|m| m.len()), Some(6 << 20));
        assert!(spares.take(9 << 20).is_none(), "too small");
        assert!(spares.take(3 << 20).is_none(), "more than a quarter larger");
        assert_eq!(spares.take(7 << 20).map(|m| m.len()), Some(8 << 20));
        assert_eq!(spares.bytes, 4 << 20);
        // Larger than a quarter of the bound: never kept.
        let big = spares.keep(map((SPARE_MOST >> 20) + 1));
        assert_eq!(big.len(), 1);
        assert_eq!(spares.bytes, 4 << 20);
        // Past the bound the oldest make room: the 4 MiB one first.
        for _ in 0..SPARE_BYTES / (16 << 20) - 1 {
            assert!(spares.keep(map(16)).is_empty());
        }
        assert_eq!(spares.bytes, SPARE_BYTES - (12 << 20));
        let out = spares.keep(map(16));
        assert_eq!(out.iter().map(|m| m.len()).collect::<Vec<_>>(), [4 << 20]);
        assert_eq!(spares.bytes, SPARE_BYTES);
        assert!(spares.maps.iter().all(|m| m.len() == 16 << 20));
    }

    /// The spares of a test, which no other thread holds.
    fn held(spares: &Mutex<Spares>) -> MutexGuard<'_, Spares> {
        lock(spares).expect("no other thread holds these spares")
    }

    /// Held by another thread (as a child forked while its parent's
    /// thread held them finds them, for good): buffers are mapped and
    /// unmapped past them at once. Code that waited for them would take
    /// the spare once the holder lets go, and fail here.
    #[test]
    fn spares_held_elsewhere_are_passed_by_not_waited_for() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let spares = none();
        let kept = MmapMut::map_anon(8 << 20).unwrap();
        let ptr = kept.as_ptr() as usize;
        assert!(held(&spares).keep(kept).is_empty());
        let (taken, release_it) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        let m = std::thread::scope(|s| {
            s.spawn(|| {
                let holder = held(&spares);
                taken.wait();
                release_it.wait();
                std::thread::sleep(std::time::Duration::from_millis(200));
                drop(holder);
            });
            taken.wait();
            let m = room(7 << 20, 4096, ON, &spares);
            // Freed while they are held: unmapped, not kept.
            LIVE.fetch_add(1, Ordering::Relaxed);
            release(MmapMut::map_anon(4 << 20).unwrap(), &spares);
            release_it.wait();
            assert!(is_mapped(&m));
            assert_ne!(
                m.as_ptr() as usize,
                ptr,
                "the spare was taken: the spares were waited for"
            );
            m
        });
        assert_eq!(held(&spares).bytes, 8 << 20, "kept while held elsewhere");
        drop(m);
    }

    #[test]
    fn released_mappings_are_kept_or_unmapped() {
        let spares = none();
        release(MmapMut::map_anon(8 << 20).unwrap(), &spares);
        assert_eq!(held(&spares).bytes, 8 << 20);
        // Too large to keep: unmapped, and counted no more.
        LIVE.fetch_add(1, Ordering::Relaxed);
        release(MmapMut::map_anon(SPARE_MOST + 4096).unwrap(), &spares);
        assert_eq!(held(&spares).bytes, 8 << 20);
    }

    #[test]
    fn both_kinds_append_within_their_capacity_and_zero_on_request() {
        for cap in [100, MAPPED_FROM + 100] {
            let mut m = room(cap, 1, ON, &none());
            let cap = m.capacity();
            let data = vec![3u8; cap + 50];
            assert_eq!(m.extend(&data[..10]), 10);
            // Past the capacity nothing is appended: the bytes never move.
            let ptr = m.as_ptr();
            assert_eq!(m.extend(&data), cap - 10);
            assert_eq!(m.extend(b"x"), 0);
            assert_eq!(m.as_ptr(), ptr);
            assert_eq!(m.as_slice(), &data[..cap]);
            m.truncate(4);
            assert_eq!(m.as_slice(), &[3u8; 4]);
            // Bytes written before and cut off read as zeros once reused.
            m.zero_to(8);
            assert_eq!(m.as_slice(), &[3, 3, 3, 3, 0, 0, 0, 0]);
            m.zero_to(cap * 2);
            assert_eq!(m.len(), cap);
            m.as_mut_slice()[cap - 1] = 9;
            assert_eq!(m.as_slice()[cap - 1], 9);
        }
    }

    #[test]
    fn zeroed_memory_reads_zero() {
        for len in [0, 5, MAPPED_FROM, 3 * MAPPED_FROM + 1] {
            let m = Memory::zeroed(len, 1).unwrap();
            assert_eq!(m.len(), len);
            assert!(m.as_slice().iter().all(|&x| x == 0));
        }
    }
}
