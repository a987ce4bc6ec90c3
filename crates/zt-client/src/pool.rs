//! Component buffers handed back once their bytes are written out (by
//! `fetch_to_file`), reused for later components: a large fetch then
//! touches fresh memory only for its first few components instead of
//! faulting in a new buffer for every one.

use std::sync::Mutex;

use zt_format::{AlignedBuf, Filling, Rule};

/// Most buffers kept, and most bytes kept in them.
const MAX_BUFFERS: usize = 16;
const MAX_BYTES: usize = 512 << 20;

/// Free buffers, shared by one client's transfers.
#[derive(Debug, Default)]
pub(super) struct BufPool {
    free: Mutex<Vec<AlignedBuf>>,
}

impl BufPool {
    /// A buffer of `len` bytes: the smallest free one that fits (holding
    /// stale bytes the caller must overwrite whole), or a new zeroed one.
    pub(super) fn take(&self, len: u64) -> Result<AlignedBuf, Rule> {
        let fits = self.fitting(len).and_then(|mut b| {
            let n = usize::try_from(len).ok()?;
            b.reuse(n).then_some(b)
        });
        match fits {
            Some(b) => Ok(b),
            None => AlignedBuf::zeroed(len),
        }
    }

    /// An empty buffer for `len` bytes that arrive in order: the smallest
    /// free one that fits, or a new one, never zeroed.
    pub(super) fn filling(&self, len: u64) -> Result<Filling, Rule> {
        let fits = self.fitting(len).and_then(|b| {
            let n = usize::try_from(len).ok()?;
            b.refill(n).ok()
        });
        match fits {
            Some(f) => Ok(f),
            None => AlignedBuf::filling(len),
        }
    }

    /// The smallest free buffer that can hold `len` bytes, taken out.
    fn fitting(&self, len: u64) -> Option<AlignedBuf> {
        let n = usize::try_from(len).ok()?;
        let mut free = self.free.lock().ok()?;
        let i = free
            .iter()
            .enumerate()
            // A large component gets a page-aligned buffer (direct I/O).
            .filter(|(_, b)| b.can_hold(n))
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i)?;
        Some(free.swap_remove(i))
    }

    /// Keeps `buf` for a later component, unless the pool is full.
    pub(super) fn give(&self, buf: AlignedBuf) {
        let Ok(mut free) = self.free.lock() else {
            return;
        };
        let held: usize = free.iter().map(AlignedBuf::capacity).sum();
        if free.len() < MAX_BUFFERS && held.saturating_add(buf.capacity()) <= MAX_BYTES {
            free.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_the_smallest_fit_and_stays_bounded() {
        let pool = BufPool::default();
        pool.give(AlignedBuf::zeroed(1000).unwrap());
        pool.give(AlignedBuf::zeroed(100).unwrap());
        let b = pool.take(50).unwrap();
        assert_eq!(b.len(), 50);
        assert!(b.capacity() < 1000, "the small one was reused");
        let big = pool.take(2000).unwrap();
        assert_eq!(big.len(), 2000);
        for _ in 0..MAX_BUFFERS + 4 {
            pool.give(AlignedBuf::zeroed(10).unwrap());
        }
        assert!(pool.free.lock().unwrap().len() <= MAX_BUFFERS);
    }

    #[test]
    fn a_filling_buffer_reuses_a_free_one_or_starts_empty() {
        let pool = BufPool::default();
        pool.give(AlignedBuf::copy_from(&[3u8; 1000]).unwrap());
        let mut f = pool.filling(600).unwrap();
        assert_eq!(f.filled(), b"", "nothing stale shows");
        f.extend(&[4u8; 600]);
        let b = f.finish().unwrap();
        assert!(b.capacity() >= 1000, "the free one was reused");
        assert_eq!(b.as_slice(), &[4u8; 600][..]);
        assert_eq!(pool.filling(10).unwrap().remaining(), 10);
    }
}
