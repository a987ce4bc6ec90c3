//! Where the served files are: a root lists them, looks at one again, and
//! opens one as a [`Blob`]. A directory (`dir.rs`), a prefix of an object
//! store (`bucket.rs`) or files in memory (`memory.rs`); the daemon holds
//! a `dyn Root` and never asks which. What differs by nature is a method
//! each kind answers its own way: a directory's file events
//! ([`Root::watch`]), a store's replaced objects ([`Root::replaced`]),
//! health check ([`Root::check`]) and metrics.

use std::collections::BTreeSet;
use std::fmt;
use std::time::{Duration, SystemTime};

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use zt_format::Source;

use super::error::{OpenError, StoreError};
use super::{Blob, Identity};

/// A file a listing found, before it is read.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Its path under the root, `/`-separated.
    pub(crate) rel: String,
    pub(crate) size: u64,
    pub(crate) modified: SystemTime,
    pub(crate) identity: Identity,
    /// The source its name says it is; `None` for any other file (a
    /// model repository's `config.json`, its tokenizer).
    pub(crate) source: Option<Source>,
    /// Where the root finds it again (opaque above the store).
    pub(crate) at: At,
}

/// Where a root finds a listed file.
#[derive(Debug, Clone)]
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

    /// Every regular file under the root (those named as a source is
    /// marked so): dotfiles, files being written (`*.part`, `*.tmp`) and
    /// `.`/`..`/empty parts left out. `Err` when a store could not be
    /// listed.
    fn list(&self) -> BoxFuture<'_, Result<Vec<Seen>, StoreError>>;

    /// The file at `rel` as a listing would find it now, `None` when there
    /// is none.
    fn stat<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Option<Seen>, StoreError>>;

    /// Opens a listed file: its bytes, size and identity as of the handle
    /// kept (a local path may already name a newer file).
    fn open<'a>(&'a self, seen: &'a Seen) -> BoxFuture<'a, Result<Opened, OpenError>>;

    /// [`Root::open`] for one request's or check's while (a Hub plain
    /// file), not to be served for long: a local file's descriptor may
    /// come from the open-file budget's reserve.
    fn open_passing<'a>(&'a self, seen: &'a Seen) -> BoxFuture<'a, Result<Opened, OpenError>> {
        self.open(seen)
    }

    /// The whole of a file of the tree that is no entry (a pack's symbol
    /// map), at most `cap` bytes, if it lies inside the root.
    fn read_small<'a>(
        &'a self,
        rel: &'a str,
        cap: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, OpenError>>;

    /// Whether files are read ahead of requests (digests computed, every
    /// component verified in the background), `asked` being
    /// `storage.background_reads`: always for local files; for a store,
    /// whose every object each replica would download, only when asked.
    fn reads_in_background(&self, asked: bool) -> bool;

    /// Starts what tells of changes between listings: a directory's file
    /// events, each a `()` on `tx` (the caller lets a burst settle), sent
    /// while the returned guard is kept. `None` for a root that has none
    /// (a store) or when they could not be set up (logged; the periodic
    /// rescans are left).
    fn watch(&self, _tx: mpsc::Sender<()>) -> Option<Watching> {
        None
    }

    /// Waits until reads find files replaced or gone; their paths, to be
    /// looked at again at once. A root whose reads cannot tell (a
    /// directory, whose file events do) never answers.
    fn replaced(&self) -> BoxFuture<'_, BTreeSet<String>> {
        Box::pin(std::future::pending())
    }

    /// Whether the root can fail apart from its reads (a store), and so
    /// is checked every `storage.check_interval_secs` ([`Root::check`]).
    fn is_checked(&self) -> bool {
        false
    }

    /// A cheap check that the root answers within `within` (a store: one
    /// page of its listing), which `/readyz` reports.
    fn check(&self, _within: Duration) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// Registers the root's own metrics family (a store's
    /// `ztserve_store_*`); none by default.
    fn register_metrics(&self, _registry: &prometheus::Registry) -> prometheus::Result<()> {
        Ok(())
    }
}

/// What keeps a root's change events coming ([`Root::watch`]): dropped,
/// they stop.
pub(crate) type Watching = Box<dyn Send>;

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
pub(crate) async fn read_capped(
    rel: &str,
    opened: &Opened,
    cap: u64,
) -> Result<Vec<u8>, OpenError> {
    let size = opened.size;
    let over = || OpenError::OverCap {
        rel: rel.to_owned(),
        size,
        cap,
    };
    if size > cap {
        return Err(over());
    }
    let len = usize::try_from(size).map_err(|_| over())?;
    let bytes = opened
        .blob
        .read_async(len, 0, None)
        .await
        .map_err(|error| OpenError::Io {
            rel: rel.to_owned(),
            doing: "reading",
            error,
        })?;
    Ok(bytes.to_vec())
}
