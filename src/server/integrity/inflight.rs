//! Locks for work on numbered things (a component's check, a digest being
//! computed) that callers asking at once must share: the first does the
//! work while the others wait, then find its answer. Only the things
//! being worked on have a lock, so a manifest of a million components
//! does not hold a million mutexes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// The locks of the things being worked on, by number.
#[derive(Debug, Default)]
pub(crate) struct Inflight(Mutex<HashMap<usize, Arc<tokio::sync::Mutex<()>>>>);

/// Work on one thing, held until dropped.
#[derive(Debug)]
pub(crate) struct Working<'a> {
    table: &'a Inflight,
    key: usize,
    _held: tokio::sync::OwnedMutexGuard<()>,
}

impl Inflight {
    /// Waits until nobody else works on `key`, then holds it.
    pub(crate) async fn lock(&self, key: usize) -> Working<'_> {
        let lock = {
            let mut table = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(table.entry(key).or_default())
        };
        Working {
            table: self,
            key,
            _held: lock.lock_owned().await,
        }
    }

    /// How many things are being worked on (or waited for).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for Working<'_> {
    fn drop(&mut self) {
        let mut table = self.table.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Held by this guard and the table only: nobody waits, so the
        // lock goes (a waiter that comes later makes a new one).
        if table
            .get(&self.key)
            .is_some_and(|l| Arc::strong_count(l) <= 2)
        {
            table.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_waiter_gets_its_turn_and_the_table_empties() {
        let table = Arc::new(Inflight::default());
        let first = table.lock(7).await;
        let t = Arc::clone(&table);
        let second = tokio::spawn(async move {
            let _w = t.lock(7).await;
        });
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!second.is_finished(), "the second did not wait");
        let other = table.lock(8).await;
        drop(first);
        second.await.unwrap();
        drop(other);
        assert_eq!(table.len(), 0);
    }
}
