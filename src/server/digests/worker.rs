//! The background hasher: one thread that computes the digests of files
//! waiting for them, one file at a time, reading at most the configured
//! rate, except while a request waits for a file (then it reads at full
//! speed, and that file goes first).

use std::collections::VecDeque;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use zt_format::{DigestAlgorithm, Hasher as DigestHasher};

use super::{Computed, DigestMetrics};
use crate::server::catalog::{Entry, Found};
use crate::server::pread::READ_CHUNK;

/// A served file whose digests are being computed. Requests for it wait
/// (see [`Pending::wait`]); the catalog replaces it with the served file,
/// or with an unavailable one, when the hasher is done.
#[derive(Debug)]
pub struct Pending {
    pub(crate) found: Found,
    /// A request is waiting: hash at full speed, before anything else.
    wanted: AtomicBool,
    /// The catalog no longer lists this version of the file.
    retired: AtomicBool,
    done: tokio::sync::watch::Sender<bool>,
    /// What the file became, once hashed: kept here too, for a scan that
    /// lists this entry only after the hasher finished with it.
    settled: OnceLock<Entry>,
    queue: Weak<Queue>,
}

impl Pending {
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

    fn finish(&self) {
        if self.wanted.load(Ordering::SeqCst) {
            if let Some(q) = self.queue.upgrade() {
                q.urgent.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.done.send_replace(true);
    }
}

#[derive(Debug, Default)]
struct Queue {
    jobs: Mutex<VecDeque<Arc<Pending>>>,
    ready: Condvar,
    /// Files a request is waiting for, queued or in progress.
    urgent: AtomicUsize,
}

/// What the catalog does with a finished job: `Ok` holds the computed
/// digests, `Err` why the file could not be hashed.
pub(crate) type Settle = Box<dyn Fn(&Arc<Pending>, Result<Computed, String>) + Send + 'static>;

/// The handle that queues files for the hasher thread; the thread ends
/// when the handle is dropped.
#[derive(Debug)]
pub(crate) struct Hasher {
    queue: Arc<Queue>,
}

impl Hasher {
    /// Starts the thread: `rate` bytes per second at most for files no
    /// request waits for (0: no limit).
    pub(crate) fn start(
        algorithm: DigestAlgorithm,
        rate: u64,
        metrics: Arc<DigestMetrics>,
        settle: Settle,
    ) -> Hasher {
        let queue = Arc::new(Queue::default());
        let weak = Arc::downgrade(&queue);
        let spawned = std::thread::Builder::new()
            .name("ztserve-hasher".to_owned())
            .spawn(move || run(&weak, algorithm, rate, &metrics, &settle));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the hashing thread; files without digests wait forever");
        }
        Hasher { queue }
    }

    /// A pending entry for `found`, queued for hashing.
    pub(crate) fn enqueue(&self, found: Found) -> Arc<Pending> {
        let (done, _) = tokio::sync::watch::channel(false);
        let p = Arc::new(Pending {
            found,
            wanted: AtomicBool::new(false),
            retired: AtomicBool::new(false),
            done,
            settled: OnceLock::new(),
            queue: Arc::downgrade(&self.queue),
        });
        if let Ok(mut jobs) = self.queue.jobs.lock() {
            jobs.push_back(Arc::clone(&p));
        }
        self.queue.ready.notify_all();
        p
    }
}

fn run(
    queue: &Weak<Queue>,
    algorithm: DigestAlgorithm,
    rate: u64,
    metrics: &DigestMetrics,
    settle: &Settle,
) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let Some(job) = next_job(&q) else { continue };
        if job.is_retired() {
            job.finish();
            continue;
        }
        metrics.pending.store(pending_count(&q), Ordering::Relaxed);
        let started = Instant::now();
        let result = hash(&job, algorithm, rate, &q, metrics);
        match &result {
            Ok(_) => {
                metrics.files.fetch_add(1, Ordering::Relaxed);
                tracing::info!(file = %job.found.path, secs = started.elapsed().as_secs_f64(), algorithm = algorithm.name(), "digests computed");
            }
            Err(why) => {
                metrics.failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(file = %job.found.path, reason = %why, "cannot compute digests");
            }
        }
        settle(&job, result);
        job.finish();
        metrics.pending.store(pending_count(&q), Ordering::Relaxed);
    }
}

fn pending_count(q: &Queue) -> u64 {
    q.jobs.lock().map_or(0, |j| j.len() as u64)
}

/// The first wanted job, else the oldest; waits a second at most, so the
/// thread notices when the catalog is gone.
fn next_job(q: &Queue) -> Option<Arc<Pending>> {
    let mut jobs = q.jobs.lock().ok()?;
    if jobs.is_empty() {
        jobs = q.ready.wait_timeout(jobs, Duration::from_secs(1)).ok()?.0;
    }
    let at = jobs
        .iter()
        .position(|j| j.wanted.load(Ordering::SeqCst))
        .unwrap_or(0);
    jobs.remove(at)
}

/// Every component without a digest, hashed from the file.
fn hash(
    job: &Pending,
    algorithm: DigestAlgorithm,
    rate: u64,
    q: &Queue,
    metrics: &DigestMetrics,
) -> Result<Computed, String> {
    let f = &job.found;
    let mut out = Computed::new();
    let mut buf = vec![0u8; usize::try_from(READ_CHUNK).unwrap_or(1 << 22)];
    let started = Instant::now();
    let mut read = 0u64;
    for (object, role, c) in f.manifest.components() {
        if c.digest.is_some() {
            continue;
        }
        let mut h = DigestHasher::new(algorithm);
        if c.synthesized {
            let key = (object.to_owned(), role.to_owned());
            h.update(f.synthesized.get(&key).map_or(&[][..], Vec::as_slice));
            out.entry(object.to_owned())
                .or_default()
                .insert(role.to_owned(), h.finish().as_str().to_owned());
            continue;
        }
        let end = c.offset.saturating_add(c.length);
        let mut pos = c.offset;
        while pos < end {
            if job.is_retired() {
                return Err("the file changed while it was hashed".to_owned());
            }
            let n = usize::try_from(READ_CHUNK.min(end - pos)).unwrap_or(0);
            let part = buf.get_mut(..n).unwrap_or_default();
            f.file.read_exact_at(part, pos).map_err(|e| {
                format!(
                    "{}: object {object:?}, component {role:?}: reading {n} bytes at {pos}: {e}",
                    f.path
                )
            })?;
            h.update(part);
            pos += n as u64;
            read += n as u64;
            metrics.bytes.fetch_add(n as u64, Ordering::Relaxed);
            let hurried = job.wanted.load(Ordering::SeqCst) || q.urgent.load(Ordering::SeqCst) > 0;
            if rate > 0 && !hurried {
                // Sleep until the bytes read so far fit the rate.
                let due = Duration::from_secs_f64(read as f64 / rate as f64);
                if let Some(ahead) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(ahead.min(Duration::from_millis(250)));
                }
            }
        }
        out.entry(object.to_owned())
            .or_default()
            .insert(role.to_owned(), h.finish().as_str().to_owned());
    }
    Ok(out)
}
