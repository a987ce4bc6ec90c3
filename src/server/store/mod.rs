//! Storage: where a served file's bytes are and how they are read. A local
//! directory's files through the handle the catalog keeps (`pread`, and
//! `RWF_NOWAIT` reads from the page cache on the runtime), or one version
//! of an object of an object-storage root (ranged GETs pinned to its
//! listed ETag, a byte-bounded piece cache, the store's settings and
//! credentials). Both are a [`source::ByteSource`] with an [`Identity`];
//! [`Blob`] is what everything above reads through, never asking which
//! kind it holds. A root that cannot open a file says why in an
//! [`error::OpenError`]; a read that fails is an `io::Error` saying how
//! many bytes at which offset.
//!
//! May use: `config` (the storage settings), `families` (its metrics) and
//! `zt-format` (read plans of each source's header). Knows nothing of
//! requests, catalogs or transports.

pub(crate) mod aws_files;
pub(crate) mod blob;
mod bucket;
mod descriptors;
mod dir;
pub(crate) mod error;
mod identity;
mod local;
#[cfg(test)]
pub(crate) mod memory;
pub(crate) mod metrics;
pub(crate) mod object;
pub mod object_root;
pub(crate) mod piece_cache;
pub(crate) mod pread;
pub(crate) mod root;
pub(crate) mod source;

pub(crate) use blob::Blob;
pub(crate) use identity::Identity;
pub(crate) use source::{Buffer, Checked};

/// Bytes of a served file read at once, for every transport and for
/// hashing: the memory one response or stream holds in its reader, and
/// the size the pool below keeps buffers at. 4 MiB, not 1: with 1 MiB
/// reads a ztp/1 fetch of the 1 GiB bench model ran at 0.883x bare quinn
/// and delivered layer 0 after 4.8% of the bytes, with 4 MiB at 0.942x and
/// after 3.2% (`ZT_BENCH_ONLY=2,3 cargo bench --bench fetch -- 5`).
pub(crate) const READ_CHUNK: u64 = 4 << 20;

/// The root `config.root` names: an object-storage URL (`s3://`, `gs://`,
/// `az://`) with `[storage]`'s settings, else a directory.
pub(crate) fn open_root(
    root: &std::path::Path,
    storage: &crate::server::config::StorageConfig,
) -> anyhow::Result<std::sync::Arc<dyn root::Root>> {
    use anyhow::Context as _;
    let url = root.to_string_lossy();
    if object_root::is_object_url(&url) {
        let store = object_root::ObjectRoot::open(&url, storage)?;
        return Ok(std::sync::Arc::new(bucket::BucketRoot(
            std::sync::Arc::new(store),
        )));
    }
    let dir =
        dir::DirRoot::open(root).with_context(|| format!("opening root {}", root.display()))?;
    Ok(std::sync::Arc::new(dir))
}
