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
    // A dropped caller leaves the decode to finish on its own: it is
    // bounded by the manifest's cap, and nothing waits for it.
    match tokio::task::spawn_blocking(move || decode(&owned, bytes.as_ref())).await {
        Ok(decoded) => Ok(decoded?),
        // A panic of the decoder's is the caller's, as if decoded here.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::Transport(format!(
            "{name}: decoding its manifest: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Manifests of `n` one-byte objects: the file, and its bare manifest.
    fn file_of(n: usize) -> (Vec<u8>, Vec<u8>) {
        let mut w = zt_format::Writer::new(Vec::new(), "t.zt").unwrap();
        for i in 0..n {
            let name = format!("model.layers.{i}.weight");
            w.add_dense(
                &name,
                &[1],
                zt_format::DType::U8,
                &[i as u8],
                Default::default(),
            )
            .unwrap();
        }
        let file = w.finish().unwrap();
        let opened =
            zt_format::ZtFile::from_bytes("t.zt", &file, zt_format::ReadOptions::default())
                .unwrap();
        let manifest = zt_format::manifest_cbor(opened.manifest());
        (file, manifest)
    }

    /// A manifest on either side of [`INLINE`] decodes to the file's own,
    /// and a cut one's error names the file either way.
    #[tokio::test]
    async fn both_sides_of_the_threshold_decode_alike() {
        for (n, inline) in [(10, true), (3_000, false)] {
            let (file, bytes) = file_of(n);
            assert_eq!(
                bytes.len() <= INLINE,
                inline,
                "{n} objects: {} bytes",
                bytes.len()
            );
            let size = file.len() as u64;
            let limits = Limits::default();
            let m = manifest("t.zt", bytes.clone(), size, limits, View::File)
                .await
                .unwrap();
            assert_eq!(m.objects.len(), n);
            let cut = bytes[..bytes.len() - 1].to_vec();
            let e = manifest("t.zt", cut, size, limits, View::File)
                .await
                .unwrap_err();
            assert!(e.to_string().starts_with("t.zt"), "{e}");
        }
    }
}
