//! The pool for requests' CPU-heavy work: matching a selection against a
//! manifest, rendering manifests and objects tables, decoding components
//! (`?decode=1`), summarising values. At most
//! `limits.cpu_jobs` run at once, on the blocking pool (never on the async
//! workers, which keep answering `/healthz` and moving bytes), and at most
//! `limits.cpu_queue` wait for a turn; a request past that is refused as
//! busy (HTTP `503` with `Retry-After`, ztp/1 `unavailable`) instead of
//! queueing without bound. Work small enough to cost less than the hop
//! (a selection against a manifest of a few thousand names at most) runs
//! where it is asked for ([`CpuPool::run_sized`]). A response already
//! under way waits for its
//! next turn instead ([`CpuPool::wait_turn`]): the queue bounds the
//! requests let in, and each holds at most one place. A leaf, like
//! `families`: the renderers and the serving layer share one pool.
//! `ztserve_cpu_*` count it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use prometheus::{IntCounter, IntGauge, Registry};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::server::families::{counter, gauge, register};

/// Work small enough to do on an async worker (a few thousand names or
/// name-pattern pairs: tens of microseconds), as [`CpuPool::run_sized`]
/// estimates it.
pub(crate) const INLINE_WORK: usize = 4096;

/// Why a job did not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CpuError {
    /// Every turn is taken and the queue is full: retry shortly.
    #[error("{what}: the server is busy ({waiting} CPU-heavy jobs wait for one of {jobs} turns, limits.cpu_queue); retry shortly")]
    Busy {
        what: String,
        waiting: usize,
        jobs: usize,
    },
    /// The job panicked, or the runtime is stopping (details in the log).
    #[error("{what}: the job failed: {why}")]
    Failed { what: String, why: String },
}

/// The pool.
#[derive(Debug)]
pub(crate) struct CpuPool {
    turns: Arc<Semaphore>,
    jobs: usize,
    queue: usize,
    waiting: AtomicUsize,
    running_now: IntGauge,
    waiting_now: IntGauge,
    refused: IntCounter,
    started: IntCounter,
}

impl CpuPool {
    /// At most `jobs` at once (0: one per core), `queue` waiting.
    pub(crate) fn new(jobs: usize, queue: usize) -> CpuPool {
        let cores = std::thread::available_parallelism().map_or(2, usize::from);
        let jobs = if jobs == 0 { cores } else { jobs };
        CpuPool {
            turns: Arc::new(Semaphore::new(jobs)),
            jobs,
            queue,
            waiting: AtomicUsize::new(0),
            running_now: gauge(
                "ztserve_cpu_jobs_running",
                "CPU-heavy request jobs running (limits.cpu_jobs at most).",
            ),
            waiting_now: gauge(
                "ztserve_cpu_jobs_waiting",
                "CPU-heavy request jobs waiting for a turn (limits.cpu_queue at most).",
            ),
            refused: counter(
                "ztserve_cpu_jobs_refused_total",
                "Requests refused as busy because limits.cpu_queue jobs already waited.",
            ),
            started: counter("ztserve_cpu_jobs_total", "CPU-heavy request jobs run."),
        }
    }

    /// How many jobs run at once.
    pub(crate) fn jobs(&self) -> usize {
        self.jobs
    }

    /// Registers the `ztserve_cpu_*` family in the daemon's registry.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(
            registry,
            &[
                &self.running_now,
                &self.waiting_now,
                &self.refused,
                &self.started,
            ],
        )
    }

    /// Runs `f` (`what` names it in a refusal) when a turn is free, on
    /// the blocking pool; refused at once when the queue is full. A
    /// request that goes away while waiting leaves the queue; one that
    /// goes away while `f` runs leaves it to finish, holding its turn.
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CpuError> {
        self.job(what, f, true).await
    }

    /// Runs `f` here, on the caller's worker, when its `work` (names times
    /// patterns, objects listed: the caller's estimate) is small enough
    /// that the hop to the pool would cost more than the job; else as
    /// [`CpuPool::run`] does.
    pub(crate) async fn run_sized<T: Send + 'static>(
        &self,
        what: &str,
        work: usize,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CpuError> {
        if work <= INLINE_WORK {
            return Ok(f());
        }
        self.run(what, f).await
    }

    /// Runs `f` as [`CpuPool::run`] does, but waits for a turn whatever
    /// the queue: the next step of work a request was already admitted
    /// for (the next piece of a response whose headers went out), which a
    /// refusal would cut short.
    pub(crate) async fn wait_turn<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CpuError> {
        self.job(what, f, false).await
    }

    /// A turn held until dropped, for work that reads between its CPU-heavy
    /// steps (hashing rows as they are read): taken as [`CpuPool::run`]
    /// takes one (refused at once when the queue is full), counted as a
    /// running job.
    pub(crate) async fn turn(&self, what: &str) -> Result<Turn, CpuError> {
        let permit = self.acquire(what, true).await?;
        self.started.inc();
        Ok(Turn {
            _permit: permit,
            _running: Running::start(self.running_now.clone()),
        })
    }

    /// A turn, waiting in the queue for one (refused when `capped` and the
    /// queue is full).
    async fn acquire(&self, what: &str, capped: bool) -> Result<OwnedSemaphorePermit, CpuError> {
        if let Ok(turn) = Arc::clone(&self.turns).try_acquire_owned() {
            return Ok(turn);
        }
        let queued = Queued::join(self, capped).ok_or_else(|| {
            self.refused.inc();
            CpuError::Busy {
                what: what.to_owned(),
                waiting: self.queue,
                jobs: self.jobs,
            }
        })?;
        let turn = Arc::clone(&self.turns).acquire_owned().await;
        drop(queued);
        turn.map_err(|e| CpuError::Failed {
            what: what.to_owned(),
            why: e.to_string(),
        })
    }

    async fn job<T: Send + 'static>(
        &self,
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
        capped: bool,
    ) -> Result<T, CpuError> {
        let turn = self.acquire(what, capped).await?;
        self.started.inc();
        let running = Running::start(self.running_now.clone());
        let job = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            f()
        });
        let out = job.await.map_err(|e| CpuError::Failed {
            what: what.to_owned(),
            why: e.to_string(),
        });
        drop(running);
        out
    }

    /// Jobs waiting now.
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }
}

/// A place in the queue, given up when dropped (the request went away or
/// got its turn).
struct Queued<'a>(&'a CpuPool);

impl<'a> Queued<'a> {
    /// A place, unless `capped` and the queue is full.
    fn join(pool: &'a CpuPool, capped: bool) -> Option<Queued<'a>> {
        let mut now = pool.waiting.load(Ordering::SeqCst);
        loop {
            if capped && now >= pool.queue {
                return None;
            }
            match pool
                .waiting
                .compare_exchange(now, now + 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(seen) => now = seen,
            }
        }
        pool.waiting_now.inc();
        Some(Queued(pool))
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
        self.0.waiting_now.dec();
    }
}

/// A turn of the pool's ([`CpuPool::turn`]), given back when dropped:
/// owned, so that work done in the turn on the blocking pool carries it
/// (a request that goes away mid-job leaves the job its turn).
pub(crate) struct Turn {
    _permit: OwnedSemaphorePermit,
    _running: Running,
}

/// A job counted as running until dropped.
struct Running(IntGauge);

impl Running {
    fn start(g: IntGauge) -> Running {
        g.inc();
        Running(g)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Issue 28: one turn, two places in the queue: a waiter that goes
    /// away leaves its place, a job past the queue is refused as busy,
    /// and the others run one at a time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn jobs_past_the_queue_are_refused_and_waiters_that_leave_free_their_place() {
        let pool = Arc::new(CpuPool::new(1, 2));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        let start = |what: &'static str| {
            let (pool, rx) = (Arc::clone(&pool), Arc::clone(&rx));
            tokio::spawn(async move {
                pool.run(what, move || {
                    rx.lock().map(|r| r.recv().is_ok()).unwrap_or(false)
                })
                .await
            })
        };
        let settle = |running: i64, waiting: usize| {
            let pool = Arc::clone(&pool);
            async move {
                for _ in 0..200 {
                    if pool.running_now.get() == running && pool.waiting() == waiting {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                panic!(
                    "running {} waiting {}, not {running} and {waiting}",
                    pool.running_now.get(),
                    pool.waiting()
                );
            }
        };
        let first = start("first");
        settle(1, 0).await;
        let second = start("second");
        settle(1, 1).await;
        // A waiter that goes away leaves its place.
        let leaving = start("leaving");
        settle(1, 2).await;
        leaving.abort();
        let _ = leaving.await;
        settle(1, 1).await;
        assert_eq!(pool.waiting_now.get(), 1);
        let third = start("third");
        settle(1, 2).await;
        // The queue is full: refused at once, naming the job.
        let busy = pool.run("the fourth", || true).await.unwrap_err();
        assert!(matches!(busy, CpuError::Busy { .. }), "{busy}");
        assert!(busy.to_string().contains("the fourth"), "{busy}");
        assert_eq!(pool.refused.get(), 1);
        for _ in 0..3 {
            tx.send(()).unwrap();
        }
        for j in [first, second, third] {
            assert!(j.await.unwrap().unwrap());
        }
        settle(0, 0).await;
        assert_eq!(pool.waiting_now.get(), 0);
    }
}
