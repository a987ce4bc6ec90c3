//! Decoding the manifest a server sent: where it arrived when it is small,
//! on the blocking pool when it is large. A manifest of a million objects
//! takes seconds of CPU (on several threads: `zt_format::Limits::decode_threads`),
//! which an async worker must not spend while its other tasks wait.

use zt_format::container::View;
use zt_format::{Limits, Manifest};

use crate::error::{Error, Result};

/// Manifests up to this size are decoded on the task that received them:
/// a few hundred objects, well under a millisecond, less than a trip to
/// the blocking pool costs.
const INLINE: usize = 64 * 1024;

/// `bytes`, the manifest of `name` (a file of `size` bytes), decoded and
/// validated as `view`.
pub(crate) async fn manifest<B>(
    name: &str,
    bytes: B,
    size: u64,
    limits: Limits,
    view: View,
) -> Result<Manifest>
where
    B: AsRef<[u8]> + Send + 'static,
{
    let decode = move |name: &str, bytes: &[u8]| {
        zt_format::container::decode_manifest(name, bytes, size, &limits, view)
            .map(|(manifest, _)| manifest)
    };
    if bytes.as_ref().len() <= INLINE {
        return Ok(decode(name, bytes.as_ref())?);
    }
    let owned = name.to_owned();
    let decoded = tokio::task::spawn_blocking(move || decode(&owned, bytes.as_ref()))
        .await
        .map_err(|e| Error::Transport(format!("{name}: decoding its manifest: {e}")))?;
    Ok(decoded?)
}
