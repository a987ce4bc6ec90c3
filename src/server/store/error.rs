//! Why a root could not answer: a store that did not list, find or keep
//! an object ([`StoreError`]), or a file a root could not open or read
//! ([`OpenError`]), each naming the file (its path under the root) and,
//! where a rule of the catalog's is at fault, that rule (`[pack-member]`,
//! `[header-over-cap]`). The catalog keeps the text as the reason a file
//! is unavailable, `/readyz` the store's.

use std::io;

/// Why the store could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The root's URL or settings cannot be used.
    #[error("{0}")]
    Config(String),
    /// The object is not (or no longer) there.
    #[error("{url}: {key} is not in the store")]
    NotFound { url: String, key: String },
    /// The object is no longer the version that was listed.
    #[error("{url}: {key} changed on the server (its ETag is no longer {etag})")]
    Changed {
        url: String,
        key: String,
        etag: String,
    },
    /// The store did not answer, or refused (after the crate's retries).
    #[error("{url}: {detail}")]
    Unreachable { url: String, detail: String },
}

/// Why [`Root::open`](super::root::Root::open) or
/// [`Root::read_small`](super::root::Root::read_small) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    /// The file was replaced or removed since it was listed (files in
    /// memory; a store's reads find that out instead, pinned to the
    /// listed version).
    #[cfg(test)]
    #[error("{rel}: replaced or removed since listed")]
    Replaced { rel: String },
    /// A file a pack names is not there, or cannot be resolved.
    #[error("{rel}: {why} [pack-member]")]
    NoMember { rel: String, why: String },
    /// A file a pack names lies outside the root (a symlink out of it).
    #[error("{rel}: lies outside the root (a symlink out of it) [pack-member]")]
    OutsideRoot { rel: String },
    /// A file that names others is larger than a manifest may be.
    #[error("{rel}: {size} bytes, over the manifest cap of {cap} [header-over-cap]")]
    OverCap { rel: String, size: u64, cap: u64 },
    /// The file system or the store failed while `doing` something.
    #[error("{rel}: {doing}: {error}")]
    Io {
        rel: String,
        doing: &'static str,
        error: io::Error,
    },
    /// A listing of another kind of root (a local path under a store, an
    /// object under a directory): a bug, said plainly.
    #[error("{rel}: listed by another kind of root")]
    OtherRoot { rel: String },
    /// The daemon is stopping: the blocking pool is gone.
    #[error("{rel}: opening: the blocking pool is gone")]
    Stopping { rel: String },
}

impl OpenError {
    /// A store's refusal to answer for a pack's member.
    pub(crate) fn member(rel: &str, e: &StoreError) -> OpenError {
        OpenError::NoMember {
            rel: rel.to_owned(),
            why: e.to_string(),
        }
    }
}
