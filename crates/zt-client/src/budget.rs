//! How many bytes a bounded fetch may hold received but not yet taken by
//! its consumer. A component reserves its length before its buffer is
//! allocated and gives it back when [`super::Fetch::next`] hands it over,
//! so a consumer slower than the network (a slow disk under `zt fetch`)
//! holds the transfer back instead of collecting the model in memory.
//! Over QUIC the wait reaches the server through flow control; over HTTP
//! the next Range request is not sent.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Reservations are counted in KiB, so a budget fits a semaphore's u32.
const UNIT: u64 = 1024;

/// One fetch's budget.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    units: Arc<Semaphore>,
    /// Its size in units (it may grow: [`Budget::grow`]).
    total: Arc<AtomicU32>,
}

/// A reservation, returned when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    _units: OwnedSemaphorePermit,
}

impl Budget {
    /// A budget of `bytes` (at least one KiB).
    pub(crate) fn new(bytes: u64) -> Self {
        let total = u32::try_from(bytes / UNIT).unwrap_or(u32::MAX).max(1);
        Budget {
            units: Arc::new(Semaphore::new(total as usize)),
            total: Arc::new(AtomicU32::new(total)),
        }
    }

    /// Grows the budget by `bytes` (a spread fetch's first share, once it
    /// is known to have fewer partners than it was sized for).
    pub(crate) fn grow(&self, bytes: u64) {
        let more = u32::try_from(bytes / UNIT).unwrap_or(u32::MAX);
        let before = self.total.load(Ordering::Relaxed);
        let more = more.min(u32::MAX - before);
        self.total.fetch_add(more, Ordering::Relaxed);
        self.units.add_permits(more as usize);
    }

    /// Waits until `len` bytes fit. A component larger than the whole
    /// budget takes all of it, so it still goes through, alone. Reservations
    /// are granted in the order they are asked for. `None` once the
    /// budget is closed (never: it lives as long as its fetch).
    pub(crate) async fn reserve(&self, len: u64) -> Option<Held> {
        let units = u32::try_from(len.div_ceil(UNIT))
            .unwrap_or(u32::MAX)
            .clamp(1, self.total.load(Ordering::Relaxed));
        Arc::clone(&self.units)
            .acquire_many_owned(units)
            .await
            .ok()
            .map(|p| Held { _units: p })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn waits_for_room_and_lets_an_oversized_component_through_alone() {
        let b = Budget::new(10 * 1024);
        let first = b.reserve(6 * 1024).await.unwrap();
        let blocked = tokio::time::timeout(Duration::from_millis(50), b.reserve(6 * 1024)).await;
        assert!(blocked.is_err(), "6 + 6 KiB do not fit in 10");
        drop(first);
        let second = b.reserve(6 * 1024).await.unwrap();
        drop(second);
        // Larger than the budget: it waits for all of it, then proceeds.
        let huge = b.reserve(1 << 30).await.unwrap();
        let blocked = tokio::time::timeout(Duration::from_millis(50), b.reserve(1)).await;
        assert!(blocked.is_err());
        drop(huge);
        assert!(b.reserve(1).await.is_some());
    }

    #[tokio::test]
    async fn grown_it_holds_more() {
        let b = Budget::new(4 * 1024);
        let held = b.reserve(4 * 1024).await.unwrap();
        b.grow(4 * 1024);
        let more = tokio::time::timeout(Duration::from_millis(50), b.reserve(4 * 1024)).await;
        assert!(more.is_ok(), "4 + 4 KiB fit in 8");
        drop((held, more));
        // An oversized component now takes all 8 KiB.
        let huge = b.reserve(1 << 20).await.unwrap();
        let blocked = tokio::time::timeout(Duration::from_millis(50), b.reserve(1)).await;
        assert!(blocked.is_err());
        drop(huge);
    }
}
