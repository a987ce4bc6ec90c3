//! The Xet indexes kept in memory, by file version (its repository tag)
//! and by file hash, within `hub.xet_index_bytes` (the oldest made go
//! first). An index is made once per version, whoever asks: the first
//! request starts it in the background and every request waits for the
//! same one, each as long as it chooses ([`Kept::get`]); at most
//! [`BUILDS`] are made at once.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

use super::hashes::XetHash;
use super::index::Index;

/// Indexes made at once (each reads a whole file).
const BUILDS: usize = 2;

type Made = Option<Result<Arc<Index>, String>>;

/// The kept indexes.
#[derive(Debug)]
pub(crate) struct Kept {
    budget: u64,
    builds: Arc<Semaphore>,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By tag: made, or being made.
    by_tag: HashMap<String, watch::Receiver<Made>>,
    /// Tags of the indexes made, by file hash.
    by_hash: HashMap<XetHash, String>,
    /// Tags of the indexes made, oldest first, with their weights.
    order: VecDeque<(String, u64)>,
    bytes: u64,
}

/// What [`Kept::get`] found.
#[derive(Debug)]
pub(crate) enum Found {
    Ready(Arc<Index>),
    /// Still being made after the wait.
    Later,
    /// The making failed (the file changed or could not be read); the
    /// next request makes it again.
    Failed(String),
}

impl Kept {
    pub(crate) fn new(budget: u64) -> Kept {
        Kept {
            budget,
            builds: Arc::new(Semaphore::new(BUILDS)),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The index of version `tag`: made by `make` in the background if no
    /// request has started it, waited for at most `wait`.
    pub(crate) async fn get<F>(self: &Arc<Self>, tag: &str, wait: Duration, make: F) -> Found
    where
        F: Future<Output = Result<Index, String>> + Send + 'static,
    {
        let mut rx = {
            let mut inner = self.lock();
            match inner.by_tag.get(tag) {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = watch::channel(None);
                    inner.by_tag.insert(tag.to_owned(), rx.clone());
                    drop(inner);
                    self.start(tag.to_owned(), tx, make);
                    rx
                }
            }
        };
        let waited = tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(made)) => match made.as_ref() {
                Some(Ok(ix)) => Found::Ready(Arc::clone(ix)),
                Some(Err(e)) => Found::Failed(e.clone()),
                None => Found::Later,
            },
            // The maker went away without an answer (the runtime stops).
            Ok(Err(_)) => Found::Failed("the index was not made".to_owned()),
            Err(_) => Found::Later,
        }
    }

    /// The kept index whose file hash is `hash`, if one is made.
    pub(crate) fn by_hash(&self, hash: &XetHash) -> Option<Arc<Index>> {
        let inner = self.lock();
        let tag = inner.by_hash.get(hash)?;
        let made = inner.by_tag.get(tag)?.borrow();
        let found = match made.as_ref() {
            Some(Ok(ix)) => Some(Arc::clone(ix)),
            _ => None,
        };
        found
    }

    /// The tag an index kept under `hash` was made for.
    pub(crate) fn tag_of(&self, hash: &XetHash) -> Option<String> {
        self.lock().by_hash.get(hash).cloned()
    }

    fn start<F>(self: &Arc<Self>, tag: String, tx: watch::Sender<Made>, make: F)
    where
        F: Future<Output = Result<Index, String>> + Send + 'static,
    {
        let kept = Arc::clone(self);
        tokio::spawn(async move {
            let made = match Arc::clone(&kept.builds).acquire_owned().await {
                Ok(_turn) => make.await.map(Arc::new),
                Err(_) => Err("the daemon is stopping".to_owned()),
            };
            kept.settle(&tag, &made);
            let _ = tx.send(Some(made));
        });
    }

    /// Files a made index (evicting the oldest past the budget), or
    /// forgets a failed one.
    fn settle(&self, tag: &str, made: &Result<Arc<Index>, String>) {
        let mut inner = self.lock();
        let ix = match made {
            Ok(ix) => ix,
            Err(_) => {
                inner.by_tag.remove(tag);
                return;
            }
        };
        let weight = ix.weight();
        inner.by_hash.insert(ix.hash, tag.to_owned());
        inner.order.push_back((tag.to_owned(), weight));
        inner.bytes += weight;
        while inner.bytes > self.budget && inner.order.len() > 1 {
            let Some((old, w)) = inner.order.pop_front() else {
                break;
            };
            inner.bytes -= w;
            let gone = inner
                .by_tag
                .remove(&old)
                .and_then(|rx| match rx.borrow().as_ref() {
                    Some(Ok(ix)) => Some(ix.hash),
                    _ => None,
                });
            if let Some(h) = gone {
                if inner.by_hash.get(&h) == Some(&old) {
                    inner.by_hash.remove(&h);
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Indexes kept and their bytes.
    #[cfg(test)]
    pub(crate) fn held(&self) -> (usize, u64) {
        let inner = self.lock();
        (inner.order.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::super::chunks::Chunk;
    use super::*;

    fn index(seed: u8, n: usize) -> Index {
        let chunks = (0..n)
            .map(|_| Chunk {
                hash: XetHash::of_chunk(&[seed]),
                len: 100,
            })
            .collect();
        Index::of(chunks)
    }

    #[tokio::test]
    async fn made_once_and_kept_within_the_budget() {
        let one = index(1, 1000).weight();
        let kept = Arc::new(Kept::new(one * 2));
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let make = |seed| {
            let made = Arc::clone(&made);
            async move {
                made.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(index(seed, 1000))
            }
        };
        // A short wait finds it still being made; the next gets the same.
        let wait = Duration::from_secs(5);
        assert!(matches!(
            kept.get("a", Duration::ZERO, make(1)).await,
            Found::Later
        ));
        let Found::Ready(a) = kept.get("a", wait, make(1)).await else {
            panic!("not made");
        };
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(kept.by_hash(&a.hash).is_some());
        for (tag, seed) in [("b", 2), ("c", 3)] {
            assert!(matches!(
                kept.get(tag, wait, make(seed)).await,
                Found::Ready(_)
            ));
        }
        // Three made, two kept: the oldest went.
        assert_eq!(kept.held(), (2, one * 2));
        assert!(kept.by_hash(&a.hash).is_none());
        let failed = kept.get("d", wait, async { Err("gone".to_owned()) }).await;
        assert!(matches!(failed, Found::Failed(e) if e == "gone"));
        assert!(matches!(
            kept.get("d", wait, make(4)).await,
            Found::Ready(_)
        ));
    }
}
