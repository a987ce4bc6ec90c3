//! Filesystem work done off the runtime's threads: opening, reading back,
//! renaming and removing a fetch's files can stall on a slow or remote
//! filesystem, and reading back a finished file decodes its manifest.

use crate::error::{Error, Result};

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
