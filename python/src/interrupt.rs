//! Waiting for the I/O runtime without shutting out Ctrl-C. Python runs
//! a signal's handler (raising `KeyboardInterrupt`) only when its main
//! thread runs Python code, which a call blocked on the runtime does not:
//! so every wait here wakes every [`TICK`] to ask.

use std::future::Future;
use std::time::Duration;

use pyo3::exceptions::PyKeyboardInterrupt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

/// How often a wait lets a pending signal through.
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Runs the work `make` returns on `rt` with the GIL released until it
/// is done, or until a signal's handler raises (Ctrl-C:
/// `KeyboardInterrupt`): the work is then dropped, which cancels what it
/// was waiting for, and the exception returned. The handlers run between
/// turns on the runtime, not inside one, so one may call this module's
/// callers again.
pub(crate) fn block_on<M, F>(py: Python<'_>, rt: &Runtime, make: M) -> PyResult<F::Output>
where
    M: FnOnce() -> F + Send,
    F: Future,
    F::Output: Send,
{
    py.detach(|| {
        let _in = rt.enter();
        let mut work = std::pin::pin!(make());
        loop {
            match rt.block_on(tokio::time::timeout(TICK, work.as_mut())) {
                Ok(done) => return Ok(done),
                Err(_) => check_signals()?,
            }
        }
    })
}

/// What a Python callback run during [`block_on`]'s work raised, where
/// the work cannot stop for it: reported as unraisable, except a
/// `KeyboardInterrupt` (Ctrl-C pressed while the callback ran, its
/// handler raising there), which is made pending again so that the wait
/// raises it at its next tick.
pub(crate) fn callback_failed(py: Python<'_>, e: PyErr, callback: &Bound<'_, PyAny>) {
    if e.is_instance_of::<PyKeyboardInterrupt>(py) {
        let again = py
            .import("_thread")
            .and_then(|t| t.call_method0("interrupt_main"));
        if again.is_ok() {
            return;
        }
    }
    e.write_unraisable(py, Some(callback));
}

/// Lets a pending KeyboardInterrupt (or another signal's exception) end a
/// wait.
pub(crate) fn check_signals() -> PyResult<()> {
    Python::attach(|py| py.check_signals())
}
