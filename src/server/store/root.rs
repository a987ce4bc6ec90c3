//! Where the served files are: a root lists them, looks at one again, and
//! opens one as a [`Blob`]. A directory (`dir.rs`) or a prefix of an
//! object store (`bucket.rs`); the catalog holds a `dyn Root` and never
//! asks which, but where operations differ by nature (file events for a
//! directory, health checks and metrics for a store).

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use futures_util::future::BoxFuture;
use zt_format::Source;

use super::object_root::{ObjectRoot, StoreError};
use super::{Blob, Identity};

/// A file a listing found, before it is read.
#[derive(Debug)]
pub(crate) struct Seen {
    /// Its path under the root, `/`-separated.
    pub(crate) rel: String,
    pub(crate) size: u64,
    pub(crate) modified: SystemTime,
    pub(crate) identity: Identity,
    /// The source its name says it is.
    pub(crate) source: Source,
    /// Where the root finds it again (opaque above the store).
    pub(crate) at: At,
}

/// Where a root finds a listed file.
#[derive(Debug)]
pub(crate) enum At {
    /// A local path (the symlinks along it resolved inside the root).
    Path(std::path::PathBuf),
    /// An object's listed ETag.
    Object(Option<String>),
}

/// A root of served files. Every operation that reads is a future for the
/// runtime: a directory's on the blocking pool (disk I/O), a store's
/// awaited there (no thread held across network I/O).
pub(crate) trait Root: Send + Sync + fmt::Debug {
    /// The directory's path or the store's URL, for logs and reasons.
    fn describe(&self) -> &str;

    /// Every file under the root named as a source is: dotfiles, files
    /// being written (`*.part`, `*.tmp`) and `.`/`..`/empty parts left
    /// out. `Err` when a store could not be listed.
    fn list(&self) -> BoxFuture<'_, Result<Vec<Seen>, StoreError>>;

    /// The file at `rel` as a listing would find it now, `None` when there
    /// is none.
    fn stat<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Option<Seen>, StoreError>>;

    /// Opens a listed file: its bytes, size and identity as of the handle
    /// kept (a local path may already name a newer file).
    fn open<'a>(&'a self, seen: &'a Seen) -> BoxFuture<'a, Result<Opened, String>>;

    /// The whole of a file of the tree that is no entry (a pack's symbol
    /// map), at most `cap` bytes, if it lies inside the root.
    fn read_small<'a>(&'a self, rel: &'a str, cap: u64) -> BoxFuture<'a, Result<Vec<u8>, String>>;

    /// The directory, whose file events keep the catalog current; `None`
    /// for a store, which has none.
    fn dir(&self) -> Option<&Path>;

    /// Whether files are read ahead of requests (digests computed, every
    /// component verified in the background): always for local files; for
    /// a store, whose every object each replica would download, only when
    /// `storage.background_reads` asks.
    fn reads_in_background(&self, asked: bool) -> bool {
        asked || self.dir().is_some()
    }

    /// The object store, for its health checks and metrics; `None` for a
    /// directory.
    fn store(&self) -> Option<&Arc<ObjectRoot>>;
}

/// A file [`Root::open`] opened: its bytes, and its size and identity as
/// of the handle.
#[derive(Debug, Clone)]
pub(crate) struct Opened {
    pub(crate) blob: Blob,
    pub(crate) size: u64,
    pub(crate) identity: Identity,
}

/// Whether a file name is one a listing leaves out: dotfiles and files
/// still being written.
pub(crate) fn ignored_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".part") || name.ends_with(".tmp")
}

/// Deepest directory nesting followed, against symlink loops and abuse.
pub(crate) const MAX_DEPTH: usize = 32;

/// The whole of a small file that names others: at most `cap` bytes.
pub(crate) async fn read_capped(rel: &str, opened: &Opened, cap: u64) -> Result<Vec<u8>, String> {
    let size = opened.size;
    if size > cap {
        return Err(format!(
            "{rel}: {size} bytes, over the manifest cap of {cap} [header-over-cap]"
        ));
    }
    let len = usize::try_from(size).map_err(|e| e.to_string())?;
    let bytes = opened
        .blob
        .read_async(len, 0, None)
        .await
        .map_err(|e| format!("{rel}: reading: {e}"))?;
    Ok(bytes.to_vec())
}
