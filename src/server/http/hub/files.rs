//! A repository's file opened for a request: a model file through its
//! catalog entry (its components checked against their digests before
//! any of their bytes go out), any other as it is; either way at the
//! version the repository's commit was made from.

use std::sync::Arc;

use super::super::held::{Held, Plain};
use super::HubError;
use crate::server::catalog::repos::{tag_of, RepoFile};
use crate::server::catalog::{Entry, Need};
use crate::server::serve::{entry, Refusal};
use crate::server::State;

/// Files at least this large are sent with the headers the Hub sends for
/// its LFS files (its own threshold).
pub(super) const LINKED_FROM: u64 = 10 << 20;

/// A repository's file opened: what its bytes are read from and its
/// size, or found to be another version than the one listed.
pub(super) enum Opened {
    Now(Held, u64),
    Changed,
}

/// Opens `file`: a model file through its catalog entry (its raw bytes,
/// with its own digests to check them against), any other as it is; a
/// file the catalog refused is refused with its reason.
pub(super) async fn open(state: &Arc<State>, file: &RepoFile) -> Result<Opened, HubError> {
    let snap = state.catalog.snapshot();
    let (held, identity, size) = match snap.get(&file.rel) {
        Some(Entry::Served(_) | Entry::Pending(_)) => {
            drop(snap);
            let served = entry::served(state, &file.rel, Need::Bytes)
                .await
                .map_err(refused)?;
            let (identity, size) = (served.identity(), served.size);
            (Held::Served(served), identity, size)
        }
        Some(Entry::Unavailable(u)) => {
            return Err(refused(Refusal::Unavailable(u.reason.clone())));
        }
        // A sharded checkpoint's index, a pack's manifest, any other file.
        Some(Entry::Index(_)) | None => {
            let Some(seen) = snap.files.get(&file.rel).cloned() else {
                return Ok(Opened::Changed);
            };
            // A model file's name with no entry: served as it is only once
            // its first bytes said it is none (a `.bin` of PyTorch's), never
            // past the checks while the catalog has not looked (a store
            // that failed to answer).
            let entry = snap.get(&file.rel).is_some();
            if seen.source.is_some() && !entry && !state.catalog.passed_over(&seen) {
                return Err(refused(Refusal::Changing(format!(
                    "{}: named as a model file and not catalogued yet; retry",
                    file.rel
                ))));
            }
            drop(snap);
            let opened = state
                .catalog
                .root()
                .open_passing(&seen)
                .await
                .map_err(|e| refused(Refusal::Unreadable(e.to_string())))?;
            let plain = Plain {
                path: file.rel.clone(),
                file: opened.blob,
            };
            (Held::Plain(Arc::new(plain)), opened.identity, opened.size)
        }
    };
    if tag_of(&identity) != file.tag {
        return Ok(Opened::Changed);
    }
    Ok(Opened::Now(held, size))
}

pub(super) fn refused(r: Refusal) -> HubError {
    HubError::Refused(r.into())
}
