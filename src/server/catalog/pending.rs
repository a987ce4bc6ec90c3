//! A file listed before its digests are known. The background hasher
//! fills in its digests one component at a time at its rate, or side by
//! side at full speed once a request waits; a request that needs only
//! some components hashes those itself, side by side at full speed
//! ([`Pending::hash_now`]), and does not wait for the rest of the file.
//! Each component is hashed once, by whichever gets to it first: its
//! cell stays locked while it is read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use futures_util::{StreamExt as _, TryStreamExt as _};
use zt_format::atoms::Crc32;
use zt_format::{Digest, DigestAlgorithm, Hasher as DigestHasher};

use crate::server::integrity::inflight::Inflight;
use crate::server::integrity::tee::Tee;

use super::{Entry, Found, Served};
use crate::server::integrity::digests::{Computed, DigestMetrics};
use crate::server::store::blob::{feed, Stop};

/// A component's digest, with its object and role.
pub(crate) type Named = (Arc<str>, Arc<str>, Digest);

/// A served file whose digests are being computed. A request that needs
/// every digest waits ([`Pending::wait`]); one that needs some hashes
/// them first ([`Pending::hash_now`]). The catalog replaces the entry
/// with the served file, or with an unavailable one, when the hasher is
/// done.
#[derive(Debug)]
pub struct Pending {
    pub(crate) found: Found,
    /// Each component that lacks a digest, (object, role), in manifest
    /// order (so found by binary search); the object's name shared by its
    /// components, each role's by every object.
    names: Vec<(Arc<str>, Arc<str>)>,
    /// Each one's digest, once computed.
    cells: Vec<OnceLock<Digest>>,
    /// Held while a component is read, so it is hashed once.
    reading: Inflight,
    /// A request waits for every digest: hash at full speed, before
    /// anything else.
    pub(crate) wanted: AtomicBool,
    /// Requests hashing components of it now: the background hasher,
    /// which may hold a component one of them needs, goes at full speed.
    pub(crate) hurry: AtomicUsize,
    /// The catalog no longer lists this version of the file.
    retired: AtomicBool,
    done: tokio::sync::watch::Sender<bool>,
    /// What the file became, once hashed: kept here too, for a scan that
    /// lists this entry only after the hasher finished with it.
    settled: OnceLock<Entry>,
    /// The file as served for its raw bytes meanwhile (the catalog builds it).
    pub(crate) bytes_view: OnceLock<Arc<Served>>,
    queue: Weak<Queue>,
}

impl Pending {
    pub(crate) fn new(found: Found, queue: Weak<Queue>) -> Pending {
        let mut names: Vec<(Arc<str>, Arc<str>)> = Vec::new();
        let mut roles: BTreeMap<&str, Arc<str>> = BTreeMap::new();
        for (o, r, _) in found
            .manifest
            .components()
            .filter(|(_, _, c)| c.digest.is_none())
        {
            let object = match names.last() {
                Some((last, _)) if **last == *o => Arc::clone(last),
                _ => Arc::from(o),
            };
            let role = Arc::clone(roles.entry(r).or_insert_with(|| Arc::from(r)));
            names.push((object, role));
        }
        let cells = names.iter().map(|_| OnceLock::new()).collect();
        let (done, _) = tokio::sync::watch::channel(false);
        Pending {
            found,
            names,
            cells,
            reading: Inflight::default(),
            wanted: AtomicBool::new(false),
            hurry: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            done,
            settled: OnceLock::new(),
            bytes_view: OnceLock::new(),
            queue,
        }
    }

    /// Marks the file wanted and waits until its digests are in (or it
    /// failed, or was replaced); then look it up again.
    pub(crate) async fn wait(&self) {
        let mut rx = self.done.subscribe();
        if !self.wanted.swap(true, Ordering::SeqCst) {
            if let Some(q) = self.queue.upgrade() {
                q.urgent.fetch_add(1, Ordering::SeqCst);
                q.ready.notify_one();
            }
        }
        let _ = rx.wait_for(|done| *done).await;
    }

    /// Hashes every component of `objects` that lacks a digest, now, at
    /// full speed where nobody has yet ([`Pending::known`] has them then).
    pub(crate) async fn hash_now(&self, objects: &BTreeSet<String>) -> Result<(), String> {
        let q = self
            .queue
            .upgrade()
            .ok_or_else(|| format!("{}: the daemon is shutting down", self.found.path))?;
        let _hurry = Hurry::new(&self.hurry);
        let names = self.names.iter().filter(|(o, _)| objects.contains(&**o));
        let names = names.cloned().collect();
        self.digests_now(names, &q, true).await.map(drop)
    }

    /// The digests of `names`, hashed at full speed, side by side as the
    /// queue's turns allow (one per core, the whole daemon together: each
    /// component read a piece at a time and hashed on the blocking pool),
    /// in any order: a file's hashing is not one core's work while a
    /// request waits for it, nor more than the cores' however many wait.
    pub(crate) async fn digests_now(
        &self,
        names: Vec<(Arc<str>, Arc<str>)>,
        q: &Queue,
        keep: bool,
    ) -> Result<Vec<Named>, String> {
        let one = |(o, r): (Arc<str>, Arc<str>)| async move {
            let _turn = q.turns.acquire().await.map_err(|e| e.to_string())?;
            let mut pace = Pace::full();
            let d = self.digest_of(&o, &r, q, keep, &mut pace).await?;
            Ok::<_, String>((o, r, d))
        };
        futures_util::stream::iter(names)
            .map(one)
            .buffer_unordered(q.width)
            .try_collect()
            .await
    }

    /// Whether a request waits for this file's digests, or for another's
    /// (nothing paces the hashing then).
    pub(crate) fn hurried(&self, q: &Queue) -> bool {
        self.wanted.load(Ordering::SeqCst)
            || self.hurry.load(Ordering::SeqCst) > 0
            || q.urgent.load(Ordering::SeqCst) > 0
    }

    /// Every digest computed so far (not waiting for one being computed).
    pub(crate) fn known(&self) -> Computed {
        let mut out = Computed::new();
        for ((o, r), cell) in self.names.iter().zip(&self.cells) {
            if let Some(d) = cell.get() {
                out.insert(o, r, d.clone());
            }
        }
        out
    }

    /// Every component that lacks a digest, in manifest order.
    pub(crate) fn missing(&self) -> impl Iterator<Item = &(Arc<str>, Arc<str>)> {
        self.names.iter()
    }

    /// One component's digest: the one already computed, or hashed now
    /// with the queue's algorithm, paced by `pace`; an object's bytes are
    /// kept for the send that follows when `keep` (a request's hashing).
    /// Read on the runtime, hashed on the blocking pool a piece at a time.
    pub(crate) async fn digest_of(
        &self,
        object: &str,
        role: &str,
        q: &Queue,
        keep: bool,
        pace: &mut Pace,
    ) -> Result<Digest, String> {
        let f = &self.found;
        let at = || format!("{}: object {object:?}, component {role:?}", f.path);
        let index = self
            .names
            .binary_search_by(|(o, r)| (&**o, &**r).cmp(&(object, role)))
            .ok();
        let Some((index, cell)) = index.and_then(|i| Some((i, self.cells.get(i)?))) else {
            return Err(format!("{}: it carries a digest of its own", at()));
        };
        let _reading = self.reading.lock(index).await;
        if let Some(d) = cell.get() {
            return Ok(d.clone());
        }
        let c = f
            .manifest
            .component(object, role)
            .ok_or_else(|| format!("{}: not in the manifest", at()))?;
        // A CRC the source stores for these bytes is checked in the same pass.
        let stored = zt_format::source::stored_crc(&f.manifest, object, role);
        let mut hashing = Tee {
            digest: DigestHasher::new(q.algorithm),
            crc: stored.map(|_| Crc32::new()),
        };
        if c.synthesized {
            let key = (object.to_owned(), role.to_owned());
            let bytes = f.synthesized.get(&key).map_or(&[][..], Vec::as_slice);
            hashing.digest.update(bytes);
        } else {
            let range = c.offset..c.offset.saturating_add(c.length);
            let mut pieces = f.file.pieces(range, keep);
            while let Some(piece) = pieces.next().await {
                let piece = piece.map_err(|e| format!("{}: {e}", at()))?;
                let n = piece.len() as u64;
                hashing = feed(hashing, piece).await.map_err(|stop| match stop {
                    Stop::Read(e) => format!("{}: {e}", at()),
                    Stop::By(never) => match never {},
                })?;
                pace.after(n, self, q).await?;
            }
        }
        if let (Some(want), Some(crc)) = (stored, hashing.crc) {
            let got = crc.finish();
            if got != want.crc32 {
                return Err(format!(
                    "{}: the stored CRC-32 is {:#010x}, the bytes' is {got:#010x} [{}]",
                    at(),
                    want.crc32,
                    want.rule
                ));
            }
        }
        let d = hashing.digest.finish();
        Ok(cell.get_or_init(|| d).clone())
    }

    /// An error once the catalog no longer lists this version.
    pub(crate) fn running(&self) -> Result<(), String> {
        if self.is_retired() {
            Err(format!(
                "{}: the file changed while it was hashed",
                self.found.path
            ))
        } else {
            Ok(())
        }
    }

    /// Stops work on a version the catalog no longer lists.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::SeqCst);
    }

    /// The served (or unavailable) entry it became, once hashed.
    pub(crate) fn settled(&self) -> Option<&Entry> {
        self.settled.get()
    }

    /// Records what the file became; before the catalog is told.
    pub(crate) fn settle(&self, entry: Entry) {
        let _ = self.settled.set(entry);
    }

    pub(crate) fn is_retired(&self) -> bool {
        self.retired.load(Ordering::SeqCst)
    }

    pub(crate) fn finish(&self) {
        if self.wanted.load(Ordering::SeqCst) {
            if let Some(q) = self.queue.upgrade() {
                q.urgent.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.done.send_replace(true);
    }
}

/// The files waiting for the hasher, and what hashing shares.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) jobs: Mutex<std::collections::VecDeque<Arc<Pending>>>,
    /// Told when a job is queued or wanted (the hasher is one task).
    pub(crate) ready: tokio::sync::Notify,
    /// Files a request is waiting for, queued or in progress.
    pub(crate) urgent: AtomicUsize,
    pub(crate) algorithm: DigestAlgorithm,
    pub(crate) metrics: Arc<DigestMetrics>,
    /// Whether files no request waits for are hashed at all (not on an
    /// object-storage root by default: every replica would download
    /// every object).
    pub(crate) background: bool,
    /// Components hashed at full speed at once, the whole daemon together
    /// ([`Pending::digests_now`]): one per core.
    pub(crate) width: usize,
    /// One turn per component being so hashed: `width` of them.
    pub(crate) turns: tokio::sync::Semaphore,
}

/// How a hashing paces its reads: a request's at full speed, the
/// background hasher's at `digests.rate_mib_s`, unless a request waits
/// for the file, hashes a component of it, or waits for another file.
#[derive(Debug)]
pub(crate) struct Pace {
    /// Bytes a second; 0 for no limit.
    rate: u64,
    started: Instant,
    read: u64,
}

impl Pace {
    pub(crate) fn full() -> Pace {
        Pace::at(0)
    }

    pub(crate) fn at(rate: u64) -> Pace {
        Pace {
            rate,
            started: Instant::now(),
            read: 0,
        }
    }

    /// Counts `n` more bytes read for `job`, then waits until the bytes
    /// read so far fit the rate, asleep in short naps so that a hurry, or a
    /// change to the file, is noticed; an error once the catalog no longer
    /// lists this version of the file.
    async fn after(&mut self, n: u64, job: &Pending, q: &Queue) -> Result<(), String> {
        job.running()?;
        q.metrics.count_hashed(n);
        self.read += n;
        if self.rate == 0 {
            return Ok(());
        }
        let due = Duration::from_secs_f64(self.read as f64 / self.rate as f64);
        loop {
            match due.checked_sub(self.started.elapsed()) {
                Some(ahead) if !job.hurried(q) && !ahead.is_zero() => {
                    job.running()?;
                    tokio::time::sleep(ahead.min(Duration::from_millis(250))).await;
                }
                _ => return Ok(()),
            }
        }
    }
}

/// A request hashing components of a file, counted in its `hurry` for as
/// long as it does (a request that goes away stops counting).
struct Hurry<'a>(&'a AtomicUsize);

impl<'a> Hurry<'a> {
    fn new(count: &'a AtomicUsize) -> Hurry<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Hurry(count)
    }
}

impl Drop for Hurry<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
