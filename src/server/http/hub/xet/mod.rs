//! The Xet protocol for repository files of 10 MiB or more, which
//! `huggingface_hub` downloads through `hf_xet` (parallel ranges, written
//! in place) when a resolve answer names the file's Xet hash:
//!
//! | request | answer |
//! |---|---|
//! | `HEAD /{repo}/resolve/...` | `X-Xet-Hash` and `Link: <token URL naming the file>; rel="xet-auth"` added |
//! | `GET /api/models/{repo}/xet-read-token/{revision}?file={path}` | the storage URL (`X-Xet-Cas-Url`, `casUrl`) and a token for it (`api.rs`) |
//! | `GET {cas}/v1\|v2/reconstructions/{hash}` (`Range` over the file) | the xorbs' byte ranges that make the file |
//! | `GET {cas}/xorbs/{file hash}/{n}` (`Range`) | the file's `n`th xorb's chunks, each behind its header |
//! | `POST /v1/telemetry` | `hf_xet`'s report of a download: `204`, dropped unread |
//!
//! where `{cas}` is `/v1/xet/{models|datasets}/{repo id}/{commit}/{path}`
//! (the path one segment; without it when the token route named no
//! file): a reconstruction names the commit it was made at, and fails
//! once the repository moved on, and the file it is of, which any
//! replica finds by name. A file's index (its chunks, cut and hashed as the
//! Hub cuts them: the same file has the same hash here and there) is made
//! once per version in the background ([`crate::server::xet`]); until it
//! is, the file goes out over plain HTTP. A xorb's bytes are the file's,
//! read as every route reads them (each component checked against its
//! digest first, the file's identity after), with the chunk headers put
//! between them: nothing is stored twice, and `hf_xet`, which checks no
//! hash, is never given a byte that failed one here.
//!
//! The storage's token is the one the client sent the Hub's API (none
//! when the daemon has none); `hf_xet` fetches xorbs without a token, so
//! with tokens configured their URLs are signed ([`signed`]) and expire.

mod cas;
mod xorb;

pub(crate) use cas::signed;
use cas::Cas;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Extension, State as AxState};
use axum::http::{header, HeaderMap, HeaderName, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::try_join_all;

use super::super::flow::Flow;
use super::super::handlers::raw_path;
use super::super::held::Held;
use super::files::LINKED_FROM;
use super::{encode, kind_name, with_template, HubError};
use crate::server::catalog::repos::{Repo, RepoFile};
use crate::server::serve::Refusal;
use crate::server::xet::chunks::{self, Chunker};
use crate::server::xet::index::Index;
use crate::server::xet::kept::{Found, Unmade, QUEUED};
use crate::server::State;

pub(super) const XET_HASH: HeaderName = HeaderName::from_static("x-xet-hash");

/// How long a signed xorb URL lasts.
const VALID: Duration = Duration::from_secs(3600);

/// Bytes of a file read at once while its index is made.
const PIECE: u64 = 8 << 20;

/// Parts a piece is cut in at most, each a job of the CPU pool: an index
/// never takes more than this many of its turns (nor queues more).
const PARTS: usize = 8;

/// The file's Xet index, when the Xet protocol is offered for it and the
/// index is made (or is made within `hub.xet_wait_ms`).
pub(super) async fn offer(
    state: &Arc<State>,
    held: &Held,
    file: &RepoFile,
    size: u64,
) -> Option<Arc<Index>> {
    if !state.config.hub.xet || size < LINKED_FROM {
        return None;
    }
    // A file whose index would not fit goes out over plain HTTP, unread.
    if let Err(why) = fits(state, held, size) {
        tracing::debug!(file = %held.path(), reason = %why, "no Xet index; the file goes out over plain HTTP");
        return None;
    }
    let wait = Duration::from_millis(state.config.hub.xet_wait_ms);
    let make = build(Arc::clone(state), held.clone(), size);
    match state.xet.get(&file.tag, &file.rel, wait, make).await {
        Found::Ready(ix) => Some(ix),
        Found::Later => None,
        Found::Busy => {
            tracing::debug!(file = %held.path(), "no Xet index started: others wait; the file goes out over plain HTTP");
            None
        }
        Found::Failed(why) => {
            tracing::warn!(file = %held.path(), reason = %why, "no Xet index; the file goes out over plain HTTP");
            None
        }
    }
}

/// The index of `held`, kept or made now (waiting as long as it takes),
/// or the daemon's refusal: busy (retry), or why it cannot be made.
pub(super) async fn index_now(
    state: &Arc<State>,
    held: &Held,
    file: &RepoFile,
    size: u64,
) -> Result<Arc<Index>, HubError> {
    let refused = |r: Refusal| Err(HubError::Refused(r.into()));
    if let Err(why) = fits(state, held, size) {
        return refused(Refusal::Unavailable(why));
    }
    let make = build(Arc::clone(state), held.clone(), size);
    let wait = Duration::from_secs(3600);
    match state.xet.get(&file.tag, &file.rel, wait, make).await {
        Found::Ready(ix) => Ok(ix),
        Found::Busy => refused(Refusal::Busy(format!(
            "{}: {QUEUED} Xet indexes are being made; retry shortly",
            held.path()
        ))),
        Found::Later => refused(Refusal::Unavailable(format!(
            "{}: its Xet index is not made yet",
            held.path()
        ))),
        Found::Failed(why) => refused(Refusal::Unavailable(why)),
    }
}

/// Whether the index of `held` (`size` bytes), cut as files usually cut,
/// fits in its share of `hub.xet_index_bytes`; else why not.
fn fits(state: &State, held: &Held, size: u64) -> Result<(), String> {
    let (usual, most) = (Chunker::usual_bytes(size), state.xet.most_per_index());
    match usual <= most {
        true => Ok(()),
        false => Err(too_large(held, most)),
    }
}

fn too_large(held: &Held, most: u64) -> String {
    format!(
        "{}: its Xet index would take more than {most} bytes (half of hub.xet_index_bytes)",
        held.path()
    )
}

/// The index of this version can never be made: its content cuts too
/// short for the room (remembered, not tried again).
fn cuts_too_short(held: &Held, most: u64) -> Unmade {
    Unmade {
        why: too_large(held, most),
        lasting: true,
    }
}

/// Makes the index of `held` (`size` bytes): its bytes cut and hashed
/// piece by piece on the CPU pool, while its components are checked
/// beside it (the index holds hashes only, and is dropped if a check
/// fails), the file's identity checked after each piece.
async fn build(state: Arc<State>, held: Held, size: u64) -> Result<Index, Unmade> {
    let all = 0..size;
    let check = async {
        held.check_spans(std::slice::from_ref(&all))
            .await
            .map_err(|f| Unmade::from(held.refused(f).to_string()))
    };
    // The first failure stops the other.
    let ((), chunker) = tokio::try_join!(check, chunk(&state, &held, size))?;
    let name = held.path().to_owned();
    // The trees over the chunks: about 1 ms per GiB of file.
    let ix = state
        .cpu
        .wait_turn("the Xet index", move || Index::of(chunker.finish()))
        .await
        .map_err(|e| Unmade::from(e.to_string()))?;
    tracing::info!(file = %name, hash = %ix.hash, xorbs = ix.xorbs.len(), "Xet index made");
    Ok(ix)
}

/// `held`'s chunks, each piece read while the one before is cut.
async fn chunk(state: &Arc<State>, held: &Held, size: u64) -> Result<Chunker, Unmade> {
    let name = held.path();
    let read = |at: u64| async move {
        if at >= size {
            return Ok(None);
        }
        let n = PIECE.min(size - at);
        let bytes = held.file().read_async(n as usize, at, None).await;
        let what = || format!("{name}: reading bytes {at}..{}", at + n);
        let bytes = bytes.map_err(|e| format!("{}: {e}", what()))?;
        if bytes.len() as u64 != n {
            return Err(format!("{}: {} bytes came", what(), bytes.len()));
        }
        // Each piece read from the version the index is of.
        match held.changed() {
            true => Err(format!("{name}: changed while its Xet index was made")),
            false => Ok(Some(bytes)),
        }
    };
    let mut chunker = Chunker::for_size(size);
    let mut piece = read(0).await?;
    while let Some(bytes) = piece {
        let next = chunker.fed() + bytes.len() as u64;
        let (read_next, cut) = tokio::join!(read(next), cut_piece(state, &mut chunker, bytes));
        cut?;
        // Content that cuts shorter than files usually do: stop at the
        // bound, not past it.
        let most = state.xet.most_per_index();
        if chunker.held_bytes() > most {
            return Err(cuts_too_short(held, most));
        }
        piece = read_next?;
    }
    Ok(chunker)
}

/// Cuts and hashes one piece of the file, in as many parts at once as
/// the CPU pool runs jobs ([`PARTS`] at most).
async fn cut_piece(state: &Arc<State>, chunker: &mut Chunker, piece: Bytes) -> Result<(), String> {
    let n = state.cpu.jobs().min(PARTS);
    let searches = chunker.parts(&piece, n).into_iter().map(|part| {
        let piece = piece.clone();
        state
            .cpu
            .wait_turn("the Xet index", move || chunks::search(&piece, &part))
    });
    let found = try_join_all(searches).await.map_err(|e| e.to_string())?;
    let cut = chunker.choose(&piece, &found.concat());
    let per_job = cut.ranges.len().div_ceil(n).max(1);
    let hashing = cut.ranges.chunks(per_job).enumerate().map(|(k, ranges)| {
        let first = k == 0 && cut.starts_before;
        let carry = match first {
            true => chunker.carry().to_vec(),
            false => Vec::new(),
        };
        let (piece, ranges) = (piece.clone(), ranges.to_vec());
        state.cpu.wait_turn("the Xet index", move || {
            chunks::hash_chunks(&carry, &piece, &ranges, first)
        })
    });
    let hashes = try_join_all(hashing).await.map_err(|e| e.to_string())?;
    chunker.absorb(&piece, &cut, &hashes.concat());
    Ok(())
}

/// The resolve answer's headers for `path`, a file of `repo` with an
/// index. The token URL names the file, and so does the storage URL it
/// gives: a replica asked for its reconstruction finds it by name.
pub(super) fn headers(
    ix: &Index,
    repo: &Repo,
    path: &str,
    base: &str,
) -> Vec<(HeaderName, String)> {
    let link = format!(
        "<{base}/api/{}s/{}/xet-read-token/{}?file={}>; rel=\"xet-auth\"",
        kind_name(repo.kind),
        raw_path(&repo.id),
        repo.commit,
        encode(path)
    );
    vec![(XET_HASH, ix.hash.hex()), (header::LINK, link)]
}

/// `POST /v1/telemetry`: `hf_xet`'s report of a download, taken and
/// dropped unread (`204`), so that the client logs no failure.
pub(crate) async fn telemetry() -> Response {
    with_template(StatusCode::NO_CONTENT.into_response(), "/v1/telemetry")
}

/// `GET /xet/...`: the storage's reconstructions and xorbs.
pub(crate) async fn cas(
    AxState(state): AxState<Arc<State>>,
    uri: Uri,
    headers: HeaderMap,
    flow: Option<Extension<Arc<Flow>>>,
) -> Response {
    let (r, template) = match cas::parse(uri.path()) {
        None => {
            let what = format!("no Xet storage request at {:?}", uri.path());
            (Err(HubError::Route(what)), "other")
        }
        Some((store, Cas::Reconstruction { v2, file })) => {
            let r = cas::reconstruction(&state, store, file, v2, &uri, &headers).await;
            (r, "/v1/xet/{kind}/{repo}/{commit}/reconstructions")
        }
        Some((store, Cas::Xorb { file, n })) => {
            let flow = flow.map_or_else(|| state.flows.open(false), |f| f.0);
            let r = xorb::xorb(&state, &store, file, n, &headers, flow).await;
            (r, "/v1/xet/{kind}/{repo}/{commit}/xorbs")
        }
    };
    with_template(r.unwrap_or_else(IntoResponse::into_response), template)
}
