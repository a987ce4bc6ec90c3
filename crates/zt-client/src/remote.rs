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

/// The requests that fetch the objects `missing` of the `all` that
/// `select` selects: one of `select` itself when every object is missing
/// (a fresh fetch: the server's order, layer 0 first, whatever their
/// number), else [`by_name`]; none when nothing is missing.
pub(crate) fn requests<S: AsRef<str>>(
    select: &[String],
    missing: &[S],
    all: usize,
) -> Vec<Vec<String>> {
    if !missing.is_empty() && missing.len() == all {
        vec![select.to_vec()]
    } else {
        by_name(missing)
    }
}

/// Requests of exactly `objects`: their names, escaped, in pieces within
/// a request's cap on patterns ([`zt_format::select::MAX_PATTERNS`]), to
/// fetch one after another.
pub(crate) fn by_name<S: AsRef<str>>(objects: &[S]) -> Vec<Vec<String>> {
    objects
        .chunks(zt_format::select::MAX_PATTERNS)
        .map(|piece| {
            piece
                .iter()
                .map(|o| zt_format::select::escape(o.as_ref()))
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh fetch is one request of its own selection; a resumed one
    /// asks for the names still missing, escaped, in pieces within the cap.
    #[test]
    fn requests_stay_within_the_cap_on_patterns() {
        let cap = zt_format::select::MAX_PATTERNS;
        let names = |n: usize| (0..n).map(|i| format!("o{i}")).collect::<Vec<_>>();
        assert!(requests::<String>(&[], &[], 3).is_empty());
        let whole = requests(&[], &names(cap + 5), cap + 5);
        assert_eq!(whole, vec![Vec::<String>::new()]);
        let mine = vec!["layers.*".to_owned()];
        assert_eq!(requests(&mine, &names(10), 10), vec![mine.clone()]);
        let pieces = requests(&mine, &names(cap * 2 + 1), cap * 2 + 2);
        let sizes: Vec<usize> = pieces.iter().map(Vec::len).collect();
        assert_eq!(sizes, [cap, cap, 1]);
        assert_eq!(pieces.concat(), names(cap * 2 + 1));
        let odd = requests(&mine, &["a*b"], 2);
        assert_eq!(odd, vec![vec![zt_format::select::escape("a*b")]]);
    }
}
