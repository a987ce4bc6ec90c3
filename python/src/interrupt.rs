//! Waiting for the I/O runtime without shutting out Ctrl-C. Python runs
//! a signal's handler (raising `KeyboardInterrupt`) only when its main
//! thread runs Python code, which a call blocked on the runtime does not:
//! so every wait here wakes every [`TICK`] to ask.

use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// How often a wait lets a pending signal through.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Runs the work `make` returns on `rt` with the GIL released until it
/// is done, or until a signal's handler raises (Ctrl-C:
/// `KeyboardInterrupt`): the work is then dropped, which cancels its
/// requests, and the exception returned.
pub(crate) fn block_on<M, F>(py: Python<'_>, rt: &Runtime, make: M) -> PyResult<F::Output>
where
    M: FnOnce() -> F + Send,
    F: Future,
    F::Output: Send,
{
    py.detach(|| {
        rt.block_on(async {
            let mut work = std::pin::pin!(make());
            loop {
                match tokio::time::timeout(TICK, work.as_mut()).await {
                    Ok(done) => return Ok(done),
                    Err(_) => check_signals()?,
                }
            }
        })
    })
}

/// Lets a pending KeyboardInterrupt (or another signal's exception) end a
/// wait.
pub(crate) fn check_signals() -> PyResult<()> {
    Python::attach(|py| py.check_signals())
}
