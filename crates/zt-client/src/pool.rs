//! Component buffers handed back once their bytes are written out (by
//! `fetch_to_file`), reused for later components: a large fetch then
//! touches fresh memory only for its first few components instead of
//! faulting in a new buffer for every one.

use std::sync::Mutex;

use zt_format::{AlignedBuf, Rule};

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
        let fits = usize::try_from(len).ok().and_then(|n| {
            let mut free = self.free.lock().ok()?;
            let i = free
                .iter()
                .enumerate()
                // A large component gets a page-aligned buffer (direct I/O).
                .filter(|(_, b)| b.can_hold(n))
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i)?;
            let mut b = free.swap_remove(i);
            b.reuse(n).then_some(b)
        });
        match fits {
            Some(b) => Ok(b),
            None => AlignedBuf::zeroed(len),
        }
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
}
