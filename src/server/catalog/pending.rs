//! A file listed before its digests are known. The background hasher
//! fills in its digests one component at a time; a request that needs
//! only some components hashes those itself, at full speed
//! ([`Pending::hash_now`]), and does not wait for the rest of the file.
//! Each component is hashed once, by whichever gets to it first: its
//! cell stays locked while it is read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

use zt_format::{DigestAlgorithm, Hasher as DigestHasher};

use super::{Entry, Found, Served};
use crate::server::integrity::digests::{Computed, DigestMetrics};

/// Told the length of each chunk read; an error stops the hashing.
pub(crate) type Pace<'a> = dyn FnMut(u64) -> Result<(), String> + 'a;

/// A served file whose digests are being computed. A request that needs
/// every digest waits ([`Pending::wait`]); one that needs some hashes
/// them first ([`Pending::hash_now`]). The catalog replaces the entry
/// with the served file, or with an unavailable one, when the hasher is
/// done.
#[derive(Debug)]
pub struct Pending {
    pub(crate) found: Found,
    /// Each component that lacks a digest, by (object, role): its digest
    /// once computed.
    cells: BTreeMap<(String, String), Mutex<Option<String>>>,
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
        let cells = found
            .manifest
            .components()
            .filter(|(_, _, c)| c.digest.is_none())
            .map(|(o, r, _)| ((o.to_owned(), r.to_owned()), Mutex::new(None)))
            .collect();
        let (done, _) = tokio::sync::watch::channel(false);
        Pending {
            found,
            cells,
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
                q.ready.notify_all();
            }
        }
        let _ = rx.wait_for(|done| *done).await;
    }

    /// The digests of every component of `objects` that lacks one,
    /// hashed now at full speed where nobody has yet (blocking: it reads
    /// them).
    pub(crate) fn hash_now(&self, objects: &BTreeSet<String>) -> Result<Computed, String> {
        let q = self
            .queue
            .upgrade()
            .ok_or_else(|| format!("{}: the daemon is shutting down", self.found.path))?;
        let mut pace = |n: u64| {
            q.metrics.count_hashed(n);
            self.running()
        };
        self.hurry.fetch_add(1, Ordering::SeqCst);
        let mut out = Computed::new();
        let mut result = Ok(());
        for (o, r) in self.cells.keys().filter(|(o, _)| objects.contains(o)) {
            match self.digest_of(o, r, q.algorithm, true, &mut pace) {
                Ok(d) => {
                    out.entry(o.clone()).or_default().insert(r.clone(), d);
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.hurry.fetch_sub(1, Ordering::SeqCst);
        result.map(|()| out)
    }

    /// Every digest computed so far (not waiting for one being computed).
    pub(crate) fn known(&self) -> Computed {
        let mut out = Computed::new();
        for ((o, r), cell) in &self.cells {
            if let Some(d) = cell.try_lock().ok().and_then(|g| g.clone()) {
                out.entry(o.clone()).or_default().insert(r.clone(), d);
            }
        }
        out
    }

    /// Every component that lacks a digest, in manifest order.
    pub(crate) fn missing(&self) -> impl Iterator<Item = &(String, String)> {
        self.cells.keys()
    }

    /// One component's digest: the one already computed, or hashed now
    /// with `algorithm`, `pace` told of each chunk read; an object's bytes
    /// are kept for the send that follows when `keep` (a request's hashing).
    pub(crate) fn digest_of(
        &self,
        object: &str,
        role: &str,
        algorithm: DigestAlgorithm,
        keep: bool,
        pace: &mut Pace<'_>,
    ) -> Result<String, String> {
        let f = &self.found;
        let at = || format!("{}: object {object:?}, component {role:?}", f.path);
        let key = (object.to_owned(), role.to_owned());
        let cell = self
            .cells
            .get(&key)
            .ok_or_else(|| format!("{}: it carries a digest of its own", at()))?;
        let mut cell = cell
            .lock()
            .map_err(|_| format!("{}: an earlier hashing of it panicked", at()))?;
        if let Some(d) = &*cell {
            return Ok(d.clone());
        }
        let c = f
            .manifest
            .objects
            .get(object)
            .and_then(|o| o.components.get(role))
            .ok_or_else(|| format!("{}: not in the manifest", at()))?;
        let mut h = DigestHasher::new(algorithm);
        // A CRC the source stores for these bytes is checked in the same pass.
        let stored = zt_format::source::stored_crc(&f.manifest, object, role);
        let mut crc = stored.map(|_| zt_format::atoms::Crc32::new());
        if c.synthesized {
            h.update(f.synthesized.get(&key).map_or(&[][..], Vec::as_slice));
        } else {
            let range = c.offset..c.offset.saturating_add(c.length);
            // Why pacing stopped the hashing (it names the file itself).
            let mut stopped = None;
            let read = f.file.each_piece(range, keep, |part| {
                h.update(part);
                if let Some(crc) = &mut crc {
                    crc.update(part);
                }
                pace(part.len() as u64).map_err(|why| {
                    stopped = Some(why);
                    String::new()
                })
            });
            if let Some(why) = stopped {
                return Err(why);
            }
            read.map_err(|e| format!("{}: {e}", at()))?;
        }
        if let (Some(want), Some(crc)) = (stored, crc) {
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
        let d = h.finish().as_str().to_owned();
        *cell = Some(d.clone());
        Ok(d)
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
    pub(crate) ready: Condvar,
    /// Files a request is waiting for, queued or in progress.
    pub(crate) urgent: AtomicUsize,
    pub(crate) algorithm: DigestAlgorithm,
    pub(crate) metrics: Arc<DigestMetrics>,
    /// Whether files no request waits for are hashed at all (not on an
    /// object-storage root by default: every replica would download
    /// every object).
    pub(crate) background: bool,
}
