//! The Xet indexes kept in memory, by file version (its repository tag)
//! and by file hash, within `hub.xet_index_bytes` (the least recently
//! used go first: a download in progress keeps its index). An index is
//! made once per version, whoever asks: the first request starts it in
//! the background and every request waits for the same one, each as long
//! as it chooses ([`Kept::get`]); at most [`BUILDS`] are made at once,
//! and at most [`QUEUED`] started and not yet made.
//! Which version has which file hash is remembered longer (up to
//! [`NAMES`] of them), so that an index dropped is made again for its own
//! file, not looked for.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Semaphore};

use super::hashes::XetHash;
use super::index::Index;

/// Indexes made at once (each reads a whole file).
const BUILDS: usize = 2;

/// Indexes started and not yet made, at most ([`BUILDS`] of them being
/// made, the rest waiting, each holding its file open): past it no other
/// is started (its file goes out over plain HTTP), however many files
/// clients ask about.
pub(crate) const QUEUED: usize = 16;

/// File hashes remembered with their versions' tags.
const NAMES: usize = 100_000;

type Made = Option<Result<Arc<Index>, String>>;

/// The kept indexes.
#[derive(Debug)]
pub(crate) struct Kept {
    budget: u64,
    builds: Arc<Semaphore>,
    inner: Mutex<Inner>,
}

impl Inner {
    /// Marks the index of `tag` (if made) as the most recently used.
    fn touch(&mut self, tag: &str) {
        if let Some(at) = self.order.iter().position(|(t, _)| t == tag) {
            if let Some(e) = self.order.remove(at) {
                self.order.push_back(e);
            }
        }
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// By tag: made, or being made.
    by_tag: HashMap<String, watch::Receiver<Made>>,
    /// Tags of the indexes made (kept or since dropped), by file hash.
    by_hash: HashMap<XetHash, String>,
    /// Indexes started and not yet made.
    unsettled: usize,
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
    /// Not started: [`QUEUED`] others are started and not yet made.
    Busy,
}

impl Kept {
    pub(crate) fn new(budget: u64) -> Kept {
        Kept {
            budget,
            builds: Arc::new(Semaphore::new(BUILDS)),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The most one index may take while made or kept: the budget's
    /// share of each of the [`BUILDS`] made at once (so the indexes kept
    /// and those being made together hold at most twice the budget).
    pub(crate) fn most_per_index(&self) -> u64 {
        self.budget / BUILDS as u64
    }

    /// The index of version `tag`: made by `make` in the background if no
    /// request has started it, waited for at most `wait`.
    pub(crate) async fn get<F>(self: &Arc<Self>, tag: &str, wait: Duration, make: F) -> Found
    where
        F: Future<Output = Result<Index, String>> + Send + 'static,
    {
        let mut rx = {
            let mut inner = self.lock();
            match inner.by_tag.get(tag).cloned() {
                Some(rx) => {
                    inner.touch(tag);
                    rx
                }
                None if inner.unsettled >= QUEUED => return Found::Busy,
                None => {
                    let (tx, rx) = watch::channel(None);
                    inner.by_tag.insert(tag.to_owned(), rx.clone());
                    inner.unsettled += 1;
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

    /// The kept index whose file hash is `hash`, if one is made, and the
    /// tag of the version it was made for; or that tag alone, the index
    /// dropped since.
    pub(crate) fn by_hash(&self, hash: &XetHash) -> Option<(String, Option<Arc<Index>>)> {
        let mut inner = self.lock();
        let tag = inner.by_hash.get(hash)?.clone();
        let found = inner
            .by_tag
            .get(&tag)
            .and_then(|rx| match rx.borrow().as_ref() {
                Some(Ok(ix)) => Some(Arc::clone(ix)),
                _ => None,
            });
        if found.is_some() {
            inner.touch(&tag);
        }
        Some((tag, found))
    }

    fn start<F>(self: &Arc<Self>, tag: String, tx: watch::Sender<Made>, make: F)
    where
        F: Future<Output = Result<Index, String>> + Send + 'static,
    {
        let kept = Arc::clone(self);
        tokio::spawn(async move {
            use futures_util::FutureExt as _;
            let made = match Arc::clone(&kept.builds).acquire_owned().await {
                // A maker that panics is a failure like any other: the
                // next request makes the index again.
                Ok(_turn) => match std::panic::AssertUnwindSafe(make).catch_unwind().await {
                    Ok(made) => made.map(Arc::new),
                    Err(_) => Err("making the index failed (details in the log)".to_owned()),
                },
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
        inner.unsettled = inner.unsettled.saturating_sub(1);
        let ix = match made {
            Ok(ix) => ix,
            Err(_) => {
                inner.by_tag.remove(tag);
                return;
            }
        };
        let weight = ix.weight();
        if inner.by_hash.len() >= NAMES {
            inner.by_hash.clear();
        }
        inner.by_hash.insert(ix.hash, tag.to_owned());
        inner.order.push_back((tag.to_owned(), weight));
        inner.bytes += weight;
        while inner.bytes > self.budget && inner.order.len() > 1 {
            let Some((old, w)) = inner.order.pop_front() else {
                break;
            };
            inner.bytes -= w;
            inner.by_tag.remove(&old);
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
        assert!(matches!(kept.by_hash(&a.hash), Some((t, Some(_))) if t == "a"));
        let Found::Ready(b) = kept.get("b", wait, make(2)).await else {
            panic!("not made");
        };
        // `a` used again: `b` is the least recently used when `c` comes.
        assert!(kept.by_hash(&a.hash).is_some());
        assert!(matches!(
            kept.get("c", wait, make(3)).await,
            Found::Ready(_)
        ));
        assert_eq!(kept.held(), (2, one * 2));
        assert!(matches!(kept.by_hash(&b.hash), Some((t, None)) if t == "b"));
        assert!(matches!(kept.by_hash(&a.hash), Some((_, Some(_)))));
        // A dropped index is made again when asked.
        assert!(matches!(
            kept.get("b", wait, make(2)).await,
            Found::Ready(_)
        ));
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 4);
        let panics = kept.get("p", wait, async { panic!("boom") }).await;
        assert!(matches!(panics, Found::Failed(_)));
        let failed = kept.get("d", wait, async { Err("gone".to_owned()) }).await;
        assert!(matches!(failed, Found::Failed(e) if e == "gone"));
        assert!(matches!(
            kept.get("d", wait, make(4)).await,
            Found::Ready(_)
        ));
    }

    /// No more than [`QUEUED`] indexes are started and not yet made: the
    /// next file is not started until one is.
    #[tokio::test]
    async fn indexes_started_are_bounded() {
        let kept = Arc::new(Kept::new(u64::MAX));
        let (go, _) = tokio::sync::broadcast::channel::<()>(1);
        let held = |seed: u8| {
            let mut rx = go.subscribe();
            async move {
                let _ = rx.recv().await;
                Ok(index(seed, 10))
            }
        };
        for i in 0..QUEUED {
            let tag = format!("t{i}");
            assert!(matches!(
                kept.get(&tag, Duration::ZERO, held(i as u8)).await,
                Found::Later
            ));
        }
        let busy = kept.get("one more", Duration::ZERO, held(99)).await;
        assert!(matches!(busy, Found::Busy));
        // One already started is still waited for, not refused.
        assert!(matches!(
            kept.get("t0", Duration::ZERO, held(0)).await,
            Found::Later
        ));
        let _ = go.send(());
        let wait = Duration::from_secs(5);
        assert!(matches!(
            kept.get("t0", wait, held(0)).await,
            Found::Ready(_)
        ));
        let mut made = 0;
        for _ in 0..100 {
            made = (0..QUEUED)
                .filter(|i| matches!(kept.by_hash(&index(*i as u8, 10).hash), Some((_, Some(_)))))
                .count();
            if made == QUEUED {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(made, QUEUED);
        assert!(matches!(
            kept.get("one more", wait, async { Ok(index(99, 10)) })
                .await,
            Found::Ready(_)
        ));
    }
}
