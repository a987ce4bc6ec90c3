//! What a response finds out before its headers go out, so that it never
//! starts under a tag whose bytes its file no longer holds, nor carries a
//! byte that failed its digest:
//!
//! - the components under the response's first chunk pass their digest
//!   checks (a corrupt one is a clean `409`, not a cut body);
//! - the first chunk is read, and then the file's identity checked (for a
//!   local file one `fstat`): a file rewritten in place since it was
//!   catalogued is a [`Stop::Changed`], which the handler answers from the
//!   file as it is now. The body sends the chunk read here, so a small
//!   range costs one read and one `fstat`;
//! - before that, the store confirms the version where its identity
//!   cannot tell: for an object, the first piece the piece cache does not
//!   hold is read, pinned to the version listed, so an object replaced or
//!   deleted since is a [`Stop::Changed`] too, not a 206 that breaks off.
//!
//! Later chunks are checked as the body reaches them (`body.rs`).

use std::ops::Range;
use std::sync::Arc;

use axum::http::{HeaderMap, Method};
use bytes::Bytes;

use super::error::AppError;
use super::held::Held;
use super::range::Ranges;
use super::serve::{spans, Entity};
use crate::server::catalog::Served;
use crate::server::integrity::checks;
use crate::server::serve::Refusal;
use crate::server::store::source::Gone;
use crate::server::store::Checked;
use crate::server::store::READ_CHUNK;
use crate::server::State;

/// Why a request is answered without the entity it asked for.
#[derive(Debug)]
pub(super) enum Stop {
    /// A refusal, answered as it is.
    Refused(AppError),
    /// The file at `path` (the one asked for, or a shard of it) is no
    /// longer the version its catalog entry names (a local file rewritten
    /// in place, an object replaced or deleted in the store): catalogue
    /// it again and answer from what is there now.
    Changed { path: String, why: String },
}

impl From<AppError> for Stop {
    fn from(e: AppError) -> Stop {
        Stop::Refused(e)
    }
}

impl From<Refusal> for Stop {
    fn from(r: Refusal) -> Stop {
        Stop::Refused(r.into())
    }
}

/// Checks `entity`'s first components with `check`, and reads what it
/// must before the headers: for a response that sends bytes, its first
/// chunk (from a local file or an object), returned for the body to send.
pub(super) async fn preflight(
    state: &Arc<State>,
    method: &Method,
    headers: &HeaderMap,
    entity: &Entity,
    ranges: &Ranges,
    check: impl std::future::Future<Output = Result<(), checks::CheckFailure>>,
) -> Result<Option<Bytes>, Stop> {
    let served = &entity.held;
    let sends = entity.sends_bytes(method, headers, ranges);
    let spans = spans(entity, ranges);
    if sends {
        // Before the check, which would read a replaced object first and
        // refuse it as unreadable instead of serving its new version.
        confirm(served, &spans).await?;
    }
    let firsts: Vec<Range<u64>> = spans
        .iter()
        .map(|s| s.start..s.end.min(s.start.saturating_add(READ_CHUNK)))
        .collect();
    // Components that passed already need no hop to the blocking pool.
    let passed = entity.memory.is_none() && firsts.iter().all(|s| served.is_checked_span(s));
    if !passed {
        verify_held(served, check).await?;
    }
    let Some(first) = firsts.into_iter().next().filter(|_| sends) else {
        stopped(served.stale())?;
        return Ok(None);
    };
    let piece = super::body::piece(served, state);
    let first = first.start..first.end.min(first.start.saturating_add(piece));
    let read = super::body::read(served, state, &entity.flow, first, 1).await;
    // After the read: a write that landed before it changed the identity
    // (of the file or of any of its shards, once a response).
    stopped(served.stale())?;
    match read {
        Ok(Checked::Same(bytes)) => Ok(Some(bytes)),
        // Changed under the read, though the identity no longer says so
        // (written back?): stopped all the same.
        Ok(Checked::Changed) => Err(changed_stop(served.path())),
        Err(e) => Err(Refusal::Unreadable(format!("{}: {e}", served.path())).into()),
    }
}

/// `Ok` while the files behind `served` (it, or its shards) are the
/// versions its entry names (`Served::stale`: a local file's identity, an
/// object version a read found replaced).
pub(super) fn unchanged(served: &Served) -> Result<(), Stop> {
    stopped(served.stale())
}

/// `Ok` unless a file behind the response changed (`stale`: its path).
fn stopped(stale: Option<&str>) -> Result<(), Stop> {
    stale.map_or(Ok(()), |path| Err(changed_stop(path)))
}

fn changed_stop(path: &str) -> Stop {
    Stop::Changed {
        path: path.to_owned(),
        why: format!("{path}: the file changed (rewritten in place?) since it was catalogued"),
    }
}

/// Asks the file's store whether the version is still there where its
/// identity cannot tell (`Blob::confirm`: for an object, the first chunk
/// of `spans` the piece cache does not hold is read, pinned to the version
/// listed, and kept there for the body).
async fn confirm(served: &Held, spans: &[Range<u64>]) -> Result<(), Stop> {
    let step = usize::try_from(READ_CHUNK).unwrap_or(usize::MAX);
    // The chunks the body reads (`body.rs`), in order.
    let chunks: Vec<Range<u64>> = spans
        .iter()
        .flat_map(|s| {
            (s.start..s.end)
                .step_by(step)
                .map(move |p| p..p.saturating_add(READ_CHUNK).min(s.end))
        })
        .collect();
    match served.file().confirm(chunks).await {
        Ok(()) => Ok(()),
        Err(Gone::Changed(why)) => Err(Stop::Changed {
            path: served.path().to_owned(),
            why,
        }),
        Err(Gone::Unreachable(why)) => Err(Refusal::StoreUnreachable(why).into()),
    }
}

/// Runs a digest check (`check`: the first check of a component reads
/// it); a component that fails is a 409 `corrupt` naming the file, object,
/// component and rule, and none of its bytes are sent. One that cannot be
/// read (the file shrank under the daemon) is a 503 `unreadable`. Either,
/// when the file turns out to have changed under its entry (rewritten
/// during the check, an object replaced), is a [`Stop::Changed`]: the file
/// is catalogued again and checked as it is.
pub(super) async fn verify(
    served: &Arc<Served>,
    check: impl std::future::Future<Output = Result<(), checks::CheckFailure>>,
) -> Result<(), Stop> {
    verify_held(&Held::Served(Arc::clone(served)), check).await
}

/// [`verify`] for what a response reads.
async fn verify_held(
    held: &Held,
    check: impl std::future::Future<Output = Result<(), checks::CheckFailure>>,
) -> Result<(), Stop> {
    let Err(refusal) = check.await else {
        return Ok(());
    };
    stopped(held.stale())?;
    Err(held.refused(refusal).into())
}
