//! What a response finds out before its headers go out, so that it never
//! starts under a tag whose bytes its file no longer holds, nor carries a
//! byte that failed its digest:
//!
//! - the components under the response's first chunk pass their digest
//!   checks (a corrupt one is a clean `409`, not a cut body);
//! - a local file's first chunk is read, and then its identity checked
//!   (one `fstat`): a file rewritten in place since it was catalogued is a
//!   [`Stop::Changed`], which the handler answers from the file as it is
//!   now. The body sends the chunk read here, so a small range costs one
//!   read and one `fstat`, as before this check costs nothing more;
//! - for an object of the store, the first piece the piece cache does not
//!   hold is read, pinned to the version listed: an object replaced or
//!   deleted since is a [`Stop::Changed`] too, not a 206 that breaks off.
//!
//! Later chunks are checked as the body reaches them (`body.rs`).

use std::ops::Range;
use std::sync::Arc;

use axum::http::{HeaderMap, Method, StatusCode};
use bytes::Bytes;

use super::error::AppError;
use super::range::Ranges;
use super::serve::{spans, Entity};
use crate::server::catalog::Served;
use crate::server::integrity::checks::Refusal;
use crate::server::store::blob::Blob;
use crate::server::store::object_root::StoreError;
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

/// Checks `entity`'s first components with `check`, and reads what it
/// must before the headers: for a response that sends bytes of a local
/// file, its first chunk, returned for the body to send.
pub(super) async fn preflight(
    state: &Arc<State>,
    method: &Method,
    headers: &HeaderMap,
    entity: &Entity,
    ranges: &Ranges,
    check: impl FnOnce(&Served) -> Result<(), Refusal> + Send + 'static,
) -> Result<Option<Bytes>, Stop> {
    let served = &entity.served;
    let sends = entity.sends_bytes(method, headers, ranges);
    let spans = spans(entity, ranges);
    let firsts: Vec<Range<u64>> = spans
        .iter()
        .map(|s| s.start..s.end.min(s.start.saturating_add(READ_CHUNK)))
        .collect();
    if let (true, Blob::Object(_)) = (sends, &served.file) {
        // Before the check, which would read a replaced object first and
        // refuse it as unreadable instead of serving its new version.
        probe(served, &spans).await?;
    }
    // Components that passed already need no hop to the blocking pool.
    let passed = entity.memory.is_none() && firsts.iter().all(|s| served.is_checked_span(s));
    if !passed {
        verify(served, check).await?;
    }
    let Blob::File(_) = &served.file else {
        return Ok(None);
    };
    let Some(first) = firsts.into_iter().next().filter(|_| sends) else {
        unchanged(served)?;
        return Ok(None);
    };
    let read = super::body::read(served, state, first).await;
    // After the read: a write that landed before it changed the identity.
    unchanged(served)?;
    match read {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) => Err(AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unreadable",
            format!("{}: {e}", served.path),
        )
        .into()),
    }
}

/// `Ok` while the local files behind `served` (it, or its shards) are the
/// versions its entry names (an object's reads are pinned to their
/// version: always `Ok`).
pub(super) fn unchanged(served: &Served) -> Result<(), Stop> {
    match served.stale() {
        None => Ok(()),
        Some(path) => Err(Stop::Changed {
            path: path.to_owned(),
            why: format!("{path}: the file changed (rewritten in place?) since it was catalogued"),
        }),
    }
}

/// For a file that is an object of the store, reads the first chunk of
/// `spans` that the piece cache does not hold (a chunk it holds is this
/// version's bytes already), pinned to the version listed, and keeps it
/// there for the body.
async fn probe(served: &Arc<Served>, spans: &[Range<u64>]) -> Result<(), Stop> {
    let Blob::Object(o) = &served.file else {
        return Ok(());
    };
    let step = usize::try_from(READ_CHUNK).unwrap_or(usize::MAX);
    // The chunks the body reads (`body.rs`), in order.
    let mut chunks = spans.iter().flat_map(|s| {
        (s.start..s.end)
            .step_by(step)
            .map(move |p| p..p.saturating_add(READ_CHUNK).min(s.end))
    });
    let Some(first) = chunks.find(|c| !o.root.is_cached(&o.key, o.etag.as_deref(), c)) else {
        return Ok(());
    };
    let o = o.clone();
    let read =
        tokio::task::spawn_blocking(move || o.root.read_cached(&o.key, o.etag.as_deref(), first))
            .await
            .map_err(AppError::internal)?;
    match read {
        Ok(_) => Ok(()),
        Err(e @ (StoreError::Changed { .. } | StoreError::NotFound { .. })) => Err(Stop::Changed {
            path: served.path.clone(),
            why: e.to_string(),
        }),
        Err(e) => Err(Stop::Refused(AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unreachable",
            e.to_string(),
        ))),
    }
}

/// Runs a digest check on a blocking thread (the first check of a
/// component reads it); a component that fails is a 409 `corrupt` naming
/// the file, object, component and rule, and none of its bytes are sent.
/// One that cannot be read (the file shrank under the daemon) is a 503
/// `unreadable`. Either, when the file turns out to have changed under
/// its entry (rewritten during the check, an object replaced), is a
/// [`Stop::Changed`]: the file is catalogued again and checked as it is.
pub(super) async fn verify(
    served: &Arc<Served>,
    check: impl FnOnce(&Served) -> Result<(), Refusal> + Send + 'static,
) -> Result<(), Stop> {
    let s = Arc::clone(served);
    let refusal = match tokio::task::spawn_blocking(move || check(&s)).await {
        Ok(Ok(())) => return Ok(()),
        Ok(Err(refusal)) => refusal,
        Err(e) => return Err(AppError::internal(e).into()),
    };
    unchanged(served)?;
    Err(match refusal {
        Refusal::Corrupt(why) => {
            tracing::warn!(file = %served.path, reason = %why, "refusing a corrupt component");
            AppError::new(StatusCode::CONFLICT, "corrupt", why)
        }
        Refusal::Unreadable(why) => {
            tracing::warn!(file = %served.path, reason = %why, "component unreadable");
            AppError::new(StatusCode::SERVICE_UNAVAILABLE, "unreadable", why)
        }
    }
    .into())
}
