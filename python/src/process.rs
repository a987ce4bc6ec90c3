//! What belongs to one process, and a child forked from it must not use:
//! the I/O runtime, whose worker threads `fork` does not copy (the child
//! would wait on them for ever), the connections a handle opened (their
//! sockets are shared with the parent), and locks a thread of the parent
//! may have held at the fork (held for good in the child, by a thread it
//! does not have). A forked child (a `DataLoader` worker, a
//! `multiprocessing` pool under the `fork` start method) gets a runtime of
//! its own on first use, and every state kept per process here is made
//! afresh for it; what the parent made is left as it was, never used nor
//! dropped (docs/python.md, "Processes").

use std::sync::{Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// How long a lock of this module's statics is waited for. Each is held
/// for a lookup at most, so a wait this long means it was held at a fork
/// by a thread this process does not have.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// `value`, made by process `pid`.
#[derive(Debug)]
pub(crate) struct Owned<T> {
    pid: u32,
    value: T,
}

/// A value per process: [`PerProcess::get`] makes it afresh in a forked
/// child, leaving the parent's copy alone.
#[derive(Debug)]
pub(crate) struct PerProcess<T: 'static> {
    current: Mutex<Option<Owned<&'static T>>>,
}

impl<T: 'static> PerProcess<T> {
    pub(crate) const fn new() -> Self {
        PerProcess {
            current: Mutex::new(None),
        }
    }

    /// This process's value, made with `make` on first use here. A
    /// parent's is leaked, not dropped: dropping a runtime joins worker
    /// threads this process does not have.
    pub(crate) fn get(
        &self,
        what: &str,
        make: impl FnOnce() -> PyResult<T>,
    ) -> PyResult<&'static T> {
        let pid = std::process::id();
        let mut current = briefly(&self.current, what)?;
        if let Some(c) = current.as_ref().filter(|c| c.pid == pid) {
            return Ok(c.value);
        }
        let value: &'static T = Box::leak(Box::new(make()?));
        *current = Some(Owned { pid, value });
        Ok(value)
    }
}

/// `m` locked, waiting at most [`LOCK_WAIT`]; an error naming `what`
/// past it. A poisoned lock is used as it is: what it guards here is
/// consistent between any two statements.
pub(crate) fn briefly<'a, T>(m: &'a Mutex<T>, what: &str) -> PyResult<MutexGuard<'a, T>> {
    let start = Instant::now();
    loop {
        match m.try_lock() {
            Ok(guard) => return Ok(guard),
            Err(TryLockError::Poisoned(p)) => return Ok(p.into_inner()),
            Err(TryLockError::WouldBlock) if start.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(crate::error::Error::new_err(format!(
                    "{what}: its lock was held at a fork by a thread of the parent process; \
                     fork before using ztserve, or start worker processes with \"spawn\""
                )))
            }
        }
    }
}

/// The one I/O runtime of this process.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    static RT: PerProcess<Runtime> = PerProcess::new();
    RT.get("the I/O runtime", || {
        tokio::runtime::Builder::new_multi_thread()
            .thread_name("ztserve-io")
            .enable_all()
            .build()
            .map_err(|e| crate::error::Error::new_err(format!("starting the I/O runtime: {e}")))
    })
}

/// The process that made a handle, to tell a forked child's use of it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Maker(u32);

impl Maker {
    pub(crate) fn this() -> Self {
        Maker(std::process::id())
    }

    /// Whether this process is not the maker (a child forked from it).
    pub(crate) fn forked(self) -> bool {
        std::process::id() != self.0
    }

    /// The error for `label`'s use in a forked child.
    pub(crate) fn refuse(self, label: &str) -> PyErr {
        crate::error::Error::new_err(format!(
            "{label}: this handle was opened in process {} and this process ({}) was forked \
             from it; its connections stay with that process: open the source again here \
             (in a DataLoader, in worker_init_fn or the dataset's first __getitem__)",
            self.0,
            std::process::id()
        ))
    }
}
