//! The background hasher: one task that computes the digests of files
//! waiting for them, one file at a time, reading at most the configured
//! rate, except while a request waits for a whole file (then it reads at
//! full speed, as many components side by side as there are cores, and
//! that file goes first). Components a request hashed
//! itself are not read again. Its reads are awaited on the runtime and
//! its hashing runs on the blocking pool a piece at a time, so it holds
//! no thread while it waits for bytes or for its rate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use zt_format::DigestAlgorithm;

use super::pending::{Pace, Pending, Queue};
use super::Found;
use crate::server::integrity::digests::{Computed, DigestMetrics};

/// What the catalog does with a finished job (on the blocking pool: it
/// writes the digest store): `Ok` holds the computed digests, `Err` why
/// the file could not be hashed.
pub(crate) type Settle = Arc<dyn Fn(&Arc<Pending>, Result<Computed, String>) + Send + Sync>;

/// The handle that queues files for the hasher task; the task ends when
/// the handle is dropped.
pub(crate) struct Hasher {
    queue: Arc<Queue>,
    rate: u64,
    settle: Settle,
    /// Set once the task is started, on the first file queued (on the
    /// runtime, where the catalog loads files).
    started: OnceLock<()>,
}

impl std::fmt::Debug for Hasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hasher")
            .field("queue", &self.queue)
            .field("rate", &self.rate)
            .finish_non_exhaustive()
    }
}

impl Hasher {
    /// The hasher: `rate` bytes per second at most for files no request
    /// waits for (0: no limit), and none of those unless `background`.
    pub(crate) fn new(
        algorithm: DigestAlgorithm,
        rate: u64,
        background: bool,
        metrics: Arc<DigestMetrics>,
        settle: Settle,
    ) -> Hasher {
        let width = std::thread::available_parallelism().map_or(2, usize::from);
        let queue = Arc::new(Queue {
            jobs: Mutex::default(),
            ready: tokio::sync::Notify::new(),
            urgent: AtomicUsize::new(0),
            algorithm,
            metrics,
            background,
            width,
            turns: tokio::sync::Semaphore::new(width),
        });
        Hasher {
            queue,
            rate,
            settle,
            started: OnceLock::new(),
        }
    }

    /// A pending entry for `found`, queued for hashing (on the runtime).
    pub(crate) fn enqueue(&self, found: Found) -> Arc<Pending> {
        self.started.get_or_init(|| {
            let (queue, settle) = (Arc::downgrade(&self.queue), Arc::clone(&self.settle));
            tokio::spawn(run(queue, self.rate, settle));
        });
        let p = Arc::new(Pending::new(found, Arc::downgrade(&self.queue)));
        if let Ok(mut jobs) = self.queue.jobs.lock() {
            jobs.push_back(Arc::clone(&p));
            self.queue.metrics.pending.set(count(&jobs));
        }
        self.queue.ready.notify_one();
        p
    }
}

async fn run(queue: Weak<Queue>, rate: u64, settle: Settle) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let Some(job) = next_job(&q).await else {
            continue;
        };
        let metrics = &q.metrics;
        if job.is_retired() {
            job.finish();
            metrics.pending.set(pending_count(&q));
            continue;
        }
        metrics.pending.set(pending_count(&q));
        let started = Instant::now();
        let result = hash(&job, rate, &q).await;
        match &result {
            Ok(_) => {
                metrics.count_file(true);
                tracing::info!(file = %job.found.path, secs = started.elapsed().as_secs_f64(), algorithm = q.algorithm.name(), "digests computed");
            }
            Err(why) => {
                metrics.count_file(false);
                tracing::warn!(file = %job.found.path, reason = %why, "cannot compute digests");
            }
        }
        let (settle, done) = (Arc::clone(&settle), Arc::clone(&job));
        let _ = tokio::task::spawn_blocking(move || settle(&done, result)).await;
        job.finish();
        metrics.pending.set(pending_count(&q));
    }
}

fn pending_count(q: &Queue) -> i64 {
    q.jobs.lock().map_or(0, |j| count(&j))
}

fn count<T>(jobs: &std::collections::VecDeque<T>) -> i64 {
    i64::try_from(jobs.len()).unwrap_or(i64::MAX)
}

/// The first wanted job, else the oldest (when hashing in the
/// background); waits a second at most, so the task notices when the
/// catalog is gone. Retired jobs are taken first, to be dropped.
async fn next_job(q: &Queue) -> Option<Arc<Pending>> {
    if let Some(job) = pick(q) {
        return Some(job);
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), q.ready.notified()).await;
    pick(q)
}

fn pick(q: &Queue) -> Option<Arc<Pending>> {
    let mut jobs = q.jobs.lock().ok()?;
    let wanted = |j: &Arc<Pending>| j.wanted.load(Ordering::SeqCst) || j.is_retired();
    let at = match jobs.iter().position(wanted) {
        Some(at) => at,
        None if q.background => 0,
        None => return None,
    };
    jobs.remove(at)
}

/// Every component without a digest, hashed from the file one at a time
/// at `rate`, or, while nothing paces them (no rate, or a request waits),
/// as many side by side as there are cores (the hurry looked at again
/// after each such batch); those a request already hashed are not read
/// again.
async fn hash(job: &Pending, rate: u64, q: &Queue) -> Result<Computed, String> {
    let mut pace = Pace::at(rate);
    let mut out = Computed::new();
    let names: Vec<(Arc<str>, Arc<str>)> = job.missing().cloned().collect();
    let mut rest = names.as_slice();
    while let Some(name) = rest.first() {
        job.running()?;
        if rate == 0 || job.hurried(q) {
            let (batch, after) = rest.split_at(q.width.min(rest.len()));
            for (o, r, d) in job.digests_now(batch.to_vec(), q, false).await? {
                out.insert(&o, &r, d);
            }
            rest = after;
            continue;
        }
        let d = job.digest_of(&name.0, &name.1, q, false, &mut pace).await?;
        out.insert(&name.0, &name.1, d);
        rest = &rest[1..];
    }
    Ok(out)
}
