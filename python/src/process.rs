//! What belongs to one process, and a child forked from it must not use:
//! the I/O runtime, whose worker threads `fork` does not copy (the child
//! would wait on them for ever), the connections a handle opened (their
//! sockets are shared with the parent), and the random state of the
//! thread that forked (copied, so that children forked from one parent
//! would draw the same QUIC connection IDs). A forked child (a
//! `DataLoader` worker, a `multiprocessing` pool under the `fork` start
//! method) gets a runtime and a cache table of its own on first use, told
//! apart by process id, and a handle it inherited opens its source again
//! there ([`crate::live::Live`]); what the parent made is left as it was,
//! never used nor dropped (docs/python.md, "Processes").
//!
//! No lock here needs a fork handler: [`PerProcess`]'s are only taken by
//! a thread holding the GIL and let go before it releases it, so none is
//! held by another thread while the thread that forks holds the GIL (the
//! extension is built for the stable ABI, which free-threaded Python does
//! not load). Locks that I/O threads take without the GIL are never met
//! in a child: a parent's caches and a handle's fetch tables are not
//! used there, and
//! zt-format's spare mappings are never waited for.

use std::cell::Cell;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use pyo3::prelude::*;
use tokio::runtime::Runtime;
use zt_client::cache::Cache;

/// A value and the process that made it.
#[derive(Debug)]
struct Owned<T: 'static> {
    made_by: Maker,
    value: &'static T,
}

/// A value per process: [`PerProcess::get`] makes it afresh in a forked
/// child, leaving the parent's copy alone.
#[derive(Debug)]
pub(crate) struct PerProcess<T: 'static> {
    current: Mutex<Option<Owned<T>>>,
}

impl<T: 'static> PerProcess<T> {
    pub(crate) const fn new() -> Self {
        PerProcess {
            current: Mutex::new(None),
        }
    }

    /// This process's value, made with `make` on first use here. Called
    /// with the GIL held (see the module's note). A parent's value is
    /// leaked, not dropped: dropping a runtime joins worker threads this
    /// process does not have.
    pub(crate) fn get(&self, make: impl FnOnce() -> PyResult<T>) -> PyResult<&'static T> {
        let mut current: MutexGuard<'_, _> =
            self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = current.as_ref().filter(|c| !c.made_by.forked()) {
            return Ok(c.value);
        }
        let value: &'static T = Box::leak(Box::new(make()?));
        *current = Some(Owned {
            made_by: Maker::this(),
            value,
        });
        Ok(value)
    }
}

static RUNTIME: PerProcess<Runtime> = PerProcess::new();

/// The component caches opened, one per folder and bound.
pub(crate) static CACHES: PerProcess<Mutex<Vec<Cache>>> = PerProcess::new();

/// The process that loaded the extension.
static FIRST: OnceLock<u32> = OnceLock::new();

/// Records the process that loads the extension (at import).
pub(crate) fn loaded() {
    FIRST.get_or_init(std::process::id);
}

/// I/O worker threads of a forked child's runtime at most: a host's
/// every core for each of a dozen `DataLoader` workers would be hundreds
/// of threads.
const CHILD_WORKERS: usize = 4;

/// The I/O runtime of this process, with the calling thread's random
/// state fresh in it. Every call that connects comes through here first.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    reseed_after_fork();
    RUNTIME.get(|| {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if FIRST
            .get()
            .is_some_and(|&first| first != std::process::id())
        {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            b.worker_threads(cores.min(CHILD_WORKERS));
        }
        b.thread_name("ztserve-io")
            .enable_all()
            .build()
            .map_err(|e| crate::error::Error::new_err(format!("starting the I/O runtime: {e}")))
    })
}

thread_local! {
    /// The process in which this thread's random state was last known to
    /// be its own (0: not yet).
    static SEEDED_IN: Cell<u32> = const { Cell::new(0) };
}

/// Reseeds this thread's `rand` generator from the system the first time
/// the thread calls in from a process: quinn draws connection IDs and
/// reset keys from it, and `fork` copies the forking thread's state into
/// every child (rand does not reseed on fork), so two workers forked
/// from one parent would open connections with the same IDs, and the
/// server would take one's handshake for the other's.
fn reseed_after_fork() {
    let pid = std::process::id();
    if SEEDED_IN.get() != pid {
        // The system's randomness unavailable: the state stays as it was.
        let _ = rand::rng().reseed();
        SEEDED_IN.set(pid);
    }
}

/// The process that made a value or a handle, to tell a forked child's
/// use of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Maker {
    pid: u32,
}

impl Maker {
    pub(crate) fn this() -> Self {
        Maker {
            pid: std::process::id(),
        }
    }

    /// Whether this process is not the maker (a child forked from it).
    pub(crate) fn forked(self) -> bool {
        self != Maker::this()
    }
}
