//! The background hasher: one thread that computes the digests of files
//! waiting for them, one file at a time, reading at most the configured
//! rate, except while a request waits for a whole file (then it reads at
//! full speed, and that file goes first). Components a request hashed
//! itself are not read again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use zt_format::DigestAlgorithm;

use super::{Computed, DigestMetrics};
use crate::server::catalog::pending::{Pending, Queue};
use crate::server::catalog::Found;

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
    /// request waits for (0: no limit), and none of those unless
    /// `background`.
    pub(crate) fn start(
        algorithm: DigestAlgorithm,
        rate: u64,
        background: bool,
        metrics: Arc<DigestMetrics>,
        settle: Settle,
    ) -> Hasher {
        let queue = Arc::new(Queue {
            jobs: Mutex::default(),
            ready: Condvar::new(),
            urgent: AtomicUsize::new(0),
            algorithm,
            metrics,
            background,
        });
        let weak = Arc::downgrade(&queue);
        let spawned = std::thread::Builder::new()
            .name("ztserve-hasher".to_owned())
            .spawn(move || run(&weak, rate, &settle));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the hashing thread; files without digests wait forever");
        }
        Hasher { queue }
    }

    /// A pending entry for `found`, queued for hashing.
    pub(crate) fn enqueue(&self, found: Found) -> Arc<Pending> {
        let p = Arc::new(Pending::new(found, Arc::downgrade(&self.queue)));
        if let Ok(mut jobs) = self.queue.jobs.lock() {
            jobs.push_back(Arc::clone(&p));
        }
        self.queue.ready.notify_all();
        p
    }
}

fn run(queue: &Weak<Queue>, rate: u64, settle: &Settle) {
    loop {
        let Some(q) = queue.upgrade() else { return };
        let Some(job) = next_job(&q) else { continue };
        if job.is_retired() {
            job.finish();
            continue;
        }
        let metrics = &q.metrics;
        metrics.pending.store(pending_count(&q), Ordering::Relaxed);
        let started = Instant::now();
        let result = hash(&job, rate, &q);
        match &result {
            Ok(_) => {
                metrics.files.fetch_add(1, Ordering::Relaxed);
                tracing::info!(file = %job.found.path, secs = started.elapsed().as_secs_f64(), algorithm = q.algorithm.name(), "digests computed");
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

/// The first wanted job, else the oldest (when hashing in the
/// background); waits a second at most, so the thread notices when the
/// catalog is gone. Retired jobs are taken first, to be dropped.
fn next_job(q: &Queue) -> Option<Arc<Pending>> {
    let mut jobs = q.jobs.lock().ok()?;
    let wanted = |j: &Arc<Pending>| j.wanted.load(Ordering::SeqCst) || j.is_retired();
    if jobs.is_empty() || !(q.background || jobs.iter().any(wanted)) {
        jobs = q.ready.wait_timeout(jobs, Duration::from_secs(1)).ok()?.0;
    }
    let at = match jobs.iter().position(wanted) {
        Some(at) => at,
        None if q.background => 0,
        None => return None,
    };
    jobs.remove(at)
}

/// Every component without a digest, hashed from the file at `rate`
/// (unless a request waits for a whole file), skipping those a request
/// already hashed.
fn hash(job: &Pending, rate: u64, q: &Queue) -> Result<Computed, String> {
    let started = Instant::now();
    let mut read = 0u64;
    let mut pace = |n: u64| {
        job.running()?;
        read += n;
        q.metrics.bytes.fetch_add(n, Ordering::Relaxed);
        // Sleep until the bytes read so far fit the rate, in short naps
        // so that a request waiting for a whole file, or a change to this
        // one, is noticed.
        if rate == 0 {
            return Ok(());
        }
        let due = Duration::from_secs_f64(read as f64 / rate as f64);
        loop {
            let hurried = job.wanted.load(Ordering::SeqCst)
                || job.hurry.load(Ordering::SeqCst) > 0
                || q.urgent.load(Ordering::SeqCst) > 0;
            match due.checked_sub(started.elapsed()) {
                Some(ahead) if !hurried && !ahead.is_zero() => {
                    job.running()?;
                    std::thread::sleep(ahead.min(Duration::from_millis(250)));
                }
                _ => break,
            }
        }
        Ok(())
    };
    let mut out = Computed::new();
    for (o, r) in job.missing() {
        job.running()?;
        let d = job.digest_of(o, r, q.algorithm, false, &mut pace)?;
        out.entry(o.clone()).or_default().insert(r.clone(), d);
    }
    Ok(out)
}
