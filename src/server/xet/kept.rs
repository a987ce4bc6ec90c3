//! The Xet indexes kept in memory, by file version (its repository tag)
//! and by file hash, within `hub.xet_index_bytes` (the least recently
//! used go first: a download in progress keeps its index). An index is
//! made once per version, whoever asks: the first request starts it in
//! the background and every request waits for the same one, each as long
//! as it chooses ([`Kept::get`]); at most [`BUILDS`] are made at once,
//! and at most [`QUEUED`] started and not yet made.
//! Which version (and file) has which file hash is remembered longer (up
//! to [`NAMES`] of them), so that an index dropped is made again for its
//! own file, not looked for. An index that can never be made for its
//! version (content that cuts too short for its room) is remembered as
//! such (up to [`FAILED`] of them), not tried again at every request.

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

/// Versions remembered as having no index to make, at most (the oldest
/// forgotten first, and then tried again when asked).
pub(crate) const FAILED: usize = 1_000;

type Made = Option<Result<Arc<Index>, Unmade>>;

/// Why an index was not made.
#[derive(Debug, Clone)]
pub(crate) struct Unmade {
    pub(crate) why: String,
    /// Whether it would fail the same way for this version every time
    /// (its content cuts too short for its room), rather than now (a read
    /// failed, the daemon is stopping, the file changed).
    pub(crate) lasting: bool,
}

impl From<String> for Unmade {
    /// A failure of the moment.
    fn from(why: String) -> Self {
        Unmade {
            why,
            lasting: false,
        }
    }
}

/// What is remembered of a file hash ([`Kept::by_hash`]).
#[derive(Debug)]
pub(crate) struct Known {
    /// The version whose index has it.
    pub(crate) tag: String,
    /// Its file's path under the root.
    pub(crate) rel: String,
    /// The index, while it is kept.
    pub(crate) index: Option<Arc<Index>>,
}

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
    /// Tags and files of the indexes made (kept or since dropped), by
    /// file hash.
    by_hash: HashMap<XetHash, (String, String)>,
    /// Tags of the versions that have no index to make, oldest first
    /// (their failure stays in `by_tag`).
    failed: VecDeque<String>,
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
    /// The making failed: for the moment (the file changed or could not
    /// be read; the next request makes it again), or for good (remembered).
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

    /// The index of version `tag` of the file at `rel` (under the root):
    /// made by `make` in the background if no request has started it,
    /// waited for at most `wait`.
    pub(crate) async fn get<F>(
        self: &Arc<Self>,
        tag: &str,
        rel: &str,
        wait: Duration,
        make: F,
    ) -> Found
    where
        F: Future<Output = Result<Index, Unmade>> + Send + 'static,
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
                    self.start(tag.to_owned(), rel.to_owned(), tx, make);
                    rx
                }
            }
        };
        let waited = tokio::time::timeout(wait, rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(made)) => match made.as_ref() {
                Some(Ok(ix)) => Found::Ready(Arc::clone(ix)),
                Some(Err(e)) => Found::Failed(e.why.clone()),
                None => Found::Later,
            },
            // The maker went away without an answer (the runtime stops).
            Ok(Err(_)) => Found::Failed("the index was not made".to_owned()),
            Err(_) => Found::Later,
        }
    }

    /// The version and file whose index has file hash `hash`, with the
    /// index while it is kept.
    pub(crate) fn by_hash(&self, hash: &XetHash) -> Option<Known> {
        let mut inner = self.lock();
        let (tag, rel) = inner.by_hash.get(hash)?.clone();
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
        Some(Known {
            tag,
            rel,
            index: found,
        })
    }

    fn start<F>(self: &Arc<Self>, tag: String, rel: String, tx: watch::Sender<Made>, make: F)
    where
        F: Future<Output = Result<Index, Unmade>> + Send + 'static,
    {
        let kept = Arc::clone(self);
        tokio::spawn(async move {
            use futures_util::FutureExt as _;
            let made = match Arc::clone(&kept.builds).acquire_owned().await {
                // A maker that panics is a failure like any other: the
                // next request makes the index again.
                Ok(_turn) => match std::panic::AssertUnwindSafe(make).catch_unwind().await {
                    Ok(made) => made.map(Arc::new),
                    Err(_) => Err(Unmade::from(
                        "making the index failed (details in the log)".to_owned(),
                    )),
                },
                Err(_) => Err(Unmade::from("the daemon is stopping".to_owned())),
            };
            kept.settle(&tag, &rel, &made);
            let _ = tx.send(Some(made));
        });
    }

    /// Files a made index (evicting the oldest past the budget), or
    /// forgets a failure of the moment, or remembers a lasting one
    /// (forgetting the oldest past [`FAILED`]).
    fn settle(&self, tag: &str, rel: &str, made: &Result<Arc<Index>, Unmade>) {
        let mut inner = self.lock();
        inner.unsettled = inner.unsettled.saturating_sub(1);
        let ix = match made {
            Ok(ix) => ix,
            Err(e) if e.lasting => {
                inner.failed.push_back(tag.to_owned());
                while inner.failed.len() > FAILED {
                    if let Some(old) = inner.failed.pop_front() {
                        inner.by_tag.remove(&old);
                    }
                }
                return;
            }
            Err(_) => {
                inner.by_tag.remove(tag);
                return;
            }
        };
        let weight = ix.weight();
        if inner.by_hash.len() >= NAMES {
            inner.by_hash.clear();
        }
        inner
            .by_hash
            .insert(ix.hash, (tag.to_owned(), rel.to_owned()));
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
            kept.get("a", "r/a", Duration::ZERO, make(1)).await,
            Found::Later
        ));
        let Found::Ready(a) = kept.get("a", "r/a", wait, make(1)).await else {
            panic!("not made");
        };
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert!(
            matches!(kept.by_hash(&a.hash), Some(k) if k.tag == "a" && k.rel == "r/a" && k.index.is_some())
        );
        let Found::Ready(b) = kept.get("b", "r/b", wait, make(2)).await else {
            panic!("not made");
        };
        // `a` used again: `b` is the least recently used when `c` comes.
        assert!(kept.by_hash(&a.hash).is_some());
        assert!(matches!(
            kept.get("c", "r/c", wait, make(3)).await,
            Found::Ready(_)
        ));
        assert_eq!(kept.held(), (2, one * 2));
        assert!(matches!(kept.by_hash(&b.hash), Some(k) if k.tag == "b" && k.index.is_none()));
        assert!(matches!(kept.by_hash(&a.hash), Some(k) if k.index.is_some()));
        // A dropped index is made again when asked.
        assert!(matches!(
            kept.get("b", "r/b", wait, make(2)).await,
            Found::Ready(_)
        ));
        assert_eq!(made.load(std::sync::atomic::Ordering::SeqCst), 4);
        let panics = kept.get("p", "r/p", wait, async { panic!("boom") }).await;
        assert!(matches!(panics, Found::Failed(_)));
        let failed = kept
            .get("d", "r/d", wait, async {
                Err(Unmade::from("gone".to_owned()))
            })
            .await;
        assert!(matches!(failed, Found::Failed(e) if e == "gone"));
        assert!(matches!(
            kept.get("d", "r/d", wait, make(4)).await,
            Found::Ready(_)
        ));
    }

    /// A version whose index can never be made is not tried again at
    /// every request, a failure of the moment is, and at most [`FAILED`]
    /// versions are remembered so (the oldest is tried again).
    #[tokio::test]
    async fn lasting_failures_are_remembered_within_a_bound() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let kept = Arc::new(Kept::new(u64::MAX));
        let wait = Duration::from_secs(5);
        let tries = Arc::new(AtomicUsize::new(0));
        let fail = |lasting| {
            let tries = Arc::clone(&tries);
            async move {
                tries.fetch_add(1, SeqCst);
                let why = "cuts too short".to_owned();
                Err(Unmade { why, lasting })
            }
        };
        for _ in 0..3 {
            let found = kept.get("x", "r/x", wait, fail(true)).await;
            assert!(matches!(found, Found::Failed(w) if w == "cuts too short"));
        }
        assert_eq!(tries.load(SeqCst), 1);
        for _ in 0..2 {
            kept.get("y", "r/y", wait, fail(false)).await;
        }
        assert_eq!(tries.load(SeqCst), 3);
        for i in 0..FAILED {
            kept.get(&format!("f{i}"), "r/f", wait, fail(true)).await;
        }
        assert_eq!(tries.load(SeqCst), 3 + FAILED);
        assert_eq!(kept.lock().failed.len(), FAILED);
        kept.get("x", "r/x", wait, fail(true)).await;
        assert_eq!(tries.load(SeqCst), 4 + FAILED);
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
                kept.get(&tag, &tag, Duration::ZERO, held(i as u8)).await,
                Found::Later
            ));
        }
        let busy = kept
            .get("one more", "r/one more", Duration::ZERO, held(99))
            .await;
        assert!(matches!(busy, Found::Busy));
        // One already started is still waited for, not refused.
        assert!(matches!(
            kept.get("t0", "r/t0", Duration::ZERO, held(0)).await,
            Found::Later
        ));
        let _ = go.send(());
        let wait = Duration::from_secs(5);
        assert!(matches!(
            kept.get("t0", "r/t0", wait, held(0)).await,
            Found::Ready(_)
        ));
        let mut made = 0;
        for _ in 0..100 {
            made = (0..QUEUED)
                .filter(|i| matches!(kept.by_hash(&index(*i as u8, 10).hash), Some(k) if k.index.is_some()))
                .count();
            if made == QUEUED {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(made, QUEUED);
        assert!(matches!(
            kept.get("one more", "r/one more", wait, async { Ok(index(99, 10)) })
                .await,
            Found::Ready(_)
        ));
    }
}
