//! What a client knows of a remote file: its manifest (the selection
//! applied, by the one function the transports share) and identity, and
//! where the HTTP transport finds the components that are no byte range of
//! it.

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
    /// Where the HTTP transport finds synthesized components, which are
    /// no byte range of the file.
    pub(crate) synthesized: SynthesizedAt,
    /// A ztserve's API base for the file (`.../v1/files/{path}`), where
    /// its components and their rows can be asked for by name.
    pub(crate) api: Option<String>,
}

/// Where synthesized components (GGUF string arrays) come from over HTTP.
#[derive(Debug, Clone, Default)]
pub(crate) enum SynthesizedAt {
    /// The client read the header itself and holds their bytes.
    Here(zt_format::container::Synthesized),
    /// A ztserve's component route: `{base}/objects/{object}/{component}`.
    Route(String),
    /// Nowhere (ztp/1 streams them like any other component).
    #[default]
    None,
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
            },
            other => Error::Usage(other.to_string()),
        })
}
