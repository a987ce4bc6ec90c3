//! What a client knows of a remote file: its manifest (the selection
//! applied, by the one function the transports share) and identity, the
//! same whichever transport read it.

use zt_format::select::Selection;
use zt_format::Manifest;

use crate::error::{Error, Result};

/// A remote file's manifest and identity.
#[derive(Debug, Clone)]
pub struct Remote {
    pub manifest: Manifest,
    /// The file's ETag: what `if_match` names to pin a fetch to it.
    pub etag: String,
    /// The file's size in bytes.
    pub size: u64,
}

/// `m` restricted to the objects `select` matches (every object when it
/// is empty): a pattern that is not a glob is a usage error, one that
/// matches nothing is what ztp/1 calls `no_match`. What every transport
/// applies to the manifest it read, and what a local file's reader
/// applies too.
pub fn select_from(m: &Manifest, select: &[String]) -> Result<Manifest> {
    use zt_format::select::SelectError;
    Selection::new(select)
        .and_then(|s| s.filter(m))
        .map_err(|e| match e {
            SelectError::NoMatch(_) => Error::Server {
                status: crate::Status::Ztp(ztp_proto::Code::NoMatch),
                message: e.to_string(),
                retry_after: None,
            },
            other => Error::Usage(other.to_string()),
        })
}
