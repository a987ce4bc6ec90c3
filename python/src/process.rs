//! What belongs to one process, and a child forked from it must not use:
//! the I/O runtime, whose worker threads `fork` does not copy (the child
//! would wait on them for ever), and the connections a handle opened
//! (their sockets are shared with the parent). A forked child (a
//! `DataLoader` worker, a `multiprocessing` pool under the `fork` start
//! method) gets a runtime and a cache table of its own on first use; what
//! the parent made is left as it was, never used nor dropped
//! (docs/python.md, "Processes").
//!
//! The package registers [`before_fork`] and the two after-fork hooks
//! with `os.register_at_fork`: the locks a child uses (this module's and
//! zt-format's spare mappings) are held across the fork, so no other
//! thread of the parent holds one at that moment and the child finds
//! them free.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::prelude::*;
use tokio::runtime::Runtime;
use zt_client::cache::Cache;

/// A value made by process `pid` in fork generation `generation`.
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

    /// The lock, whatever a panicking holder left (the value is replaced
    /// whole or not at all).
    fn lock(&self) -> MutexGuard<'_, Option<Owned<T>>> {
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This process's value, made with `make` on first use here. A
    /// parent's is leaked, not dropped: dropping a runtime joins worker
    /// threads this process does not have.
    pub(crate) fn get(&self, make: impl FnOnce() -> PyResult<T>) -> PyResult<&'static T> {
        let mut current = self.lock();
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

/// I/O worker threads of a forked child's runtime at most: a host's
/// every core for each of a dozen `DataLoader` workers would be hundreds
/// of threads, and the parent's runtime keeps its own.
const CHILD_WORKERS: usize = 4;

/// The I/O runtime of this process.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    RUNTIME.get(|| {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if GENERATION.load(Ordering::Relaxed) > 0 {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
            b.worker_threads(cores.min(CHILD_WORKERS));
        }
        b.thread_name("ztserve-io")
            .enable_all()
            .build()
            .map_err(|e| crate::error::Error::new_err(format!("starting the I/O runtime: {e}")))
    })
}

/// Forks this process has come through as a child: with the pid (which a
/// child in a new pid namespace may share with its parent's parent), what
/// tells a child from the process that made a value.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// The locks held across a fork, by the thread that forks.
struct Held {
    _runtime: MutexGuard<'static, Option<Owned<Runtime>>>,
    _caches: MutexGuard<'static, Option<Owned<Mutex<Vec<Cache>>>>>,
    _spares: zt_format::ForkGuard,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

/// `os.register_at_fork(before=…)`: waits (without the GIL) until no other
/// thread holds the locks a child uses, and holds them across the fork.
/// Always in this order, the order no other path takes two of them in.
#[pyfunction]
pub(crate) fn before_fork(py: Python<'_>) {
    py.detach(|| {
        let held = Held {
            _runtime: RUNTIME.lock(),
            _caches: CACHES.lock(),
            _spares: zt_format::hold_for_fork(),
        };
        HELD.with(|h| *h.borrow_mut() = Some(held));
    });
}

/// `os.register_at_fork(after_in_parent=…)`: lets the locks go.
#[pyfunction]
pub(crate) fn after_fork_in_parent() {
    HELD.with(|h| h.borrow_mut().take());
}

/// `os.register_at_fork(after_in_child=…)`: a new generation (every value
/// made before is the parent's), and the locks let go.
#[pyfunction]
pub(crate) fn after_fork_in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
    HELD.with(|h| h.borrow_mut().take());
}

/// The process that made a value or a handle, to tell a forked child's
/// use of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Maker {
    pid: u32,
    generation: u64,
}

impl Maker {
    pub(crate) fn this() -> Self {
        Maker {
            pid: std::process::id(),
            generation: GENERATION.load(Ordering::Relaxed),
        }
    }

    /// Whether this process is not the maker (a child forked from it).
    pub(crate) fn forked(self) -> bool {
        self != Maker::this()
    }

    /// The error for `label`'s use in a forked child.
    pub(crate) fn refuse(self, label: &str) -> PyErr {
        crate::error::Error::new_err(format!(
            "{label}: this handle was opened in process {} and this process ({}) was forked \
             from it; what it reads through (connections, background tasks) stays with that \
             process: open the source again here (in a DataLoader, in worker_init_fn or the \
             dataset's first __getitem__)",
            self.pid,
            std::process::id()
        ))
    }
}
