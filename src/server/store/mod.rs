//! Storage: where a served file's bytes are and how they are read. A local
//! directory's files through the handle the catalog keeps (`pread`, and
//! `RWF_NOWAIT` reads from the page cache on the runtime), or one version
//! of an object of an object-storage root (ranged GETs pinned to its
//! listed ETag, a byte-bounded piece cache, the store's settings and
//! credentials). [`blob::Blob`] is what everything above reads through.
//!
//! May use: `config` (the storage settings) and `zt-format` (read plans of
//! each source's header). Knows nothing of requests, catalogs or
//! transports.

pub(crate) mod aws_files;
pub(crate) mod blob;
pub mod object_root;
pub(crate) mod piece_cache;
pub(crate) mod pread;
