//! Filesystem work done off the runtime's threads: opening, reading back,
//! renaming and removing a fetch's files can stall on a slow or remote
//! filesystem, and reading back a finished file decodes its manifest.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};

/// A flag that a long blocking task checks as it goes, set when the
/// future that started it is dropped (a stopped fetch: Ctrl-C in Python),
/// so the task ends soon instead of holding what it holds (a journal's
/// lock) until it is done.
#[derive(Default)]
pub(crate) struct StopOnDrop(Arc<AtomicBool>);

impl StopOnDrop {
    /// The flag, for the task.
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs `f` on a blocking thread; a panic there is resumed here.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::io(
            "a blocking task".to_owned(),
            std::io::Error::other(e),
        )),
    }
}
