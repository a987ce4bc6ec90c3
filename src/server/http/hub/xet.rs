//! The Xet protocol for repository files of 10 MiB or more, which
//! `huggingface_hub` downloads through `hf_xet` (parallel ranges, written
//! in place) when a resolve answer names the file's Xet hash:
//!
//! | request | answer |
//! |---|---|
//! | `HEAD\|GET /{repo}/resolve/...` | `X-Xet-Hash` and `Link: <token URL>; rel="xet-auth"` added |
//! | `GET /api/models/{repo}/xet-read-token/{revision}` | the storage URL (`X-Xet-Cas-Url`, `casUrl`) and a token for it |
//! | `GET {cas}/v1\|v2/reconstructions/{hash}` (`Range` over the file) | the xorbs' byte ranges that make the file |
//! | `GET {cas}/xorbs/{hash}/{n}` (`Range`) | a xorb's chunks, each behind its header |
//! | `POST /v1/telemetry` | `hf_xet`'s report of a download: `204`, dropped unread |
//!
//! where `{cas}` is `/xet/{models|datasets}/{repo id}/{commit}`: a
//! reconstruction names the commit it was made at, and fails once the
//! repository moved on. A file's index (its chunks, cut and hashed as the
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

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::extract::{Extension, State as AxState};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use serde_json::{json, Map, Value};

use super::super::body::file_stream;
use super::super::flow::Flow;
use super::super::handlers::raw_path;
use super::super::held::Held;
use super::api::base_url;
use super::path::safe_part;
use super::resolve::{open, Opened, LINKED_FROM};
use super::{at_revision, kind_name, repos, with_template, HubError};
use crate::server::catalog::repos::{Kind, Repo, RepoFile};
use crate::server::ops::auth::same_bytes;
use crate::server::xet::chunks::Chunker;
use crate::server::xet::hashes::XetHash;
use crate::server::xet::index::{Index, HEADER};
use crate::server::xet::kept::Found;
use crate::server::State;

pub(super) const XET_HASH: HeaderName = HeaderName::from_static("x-xet-hash");

/// How long a storage token and a signed xorb URL last.
const VALID: Duration = Duration::from_secs(3600);

/// Bytes of a file read at once while its index is made.
const PIECE: u64 = 8 << 20;

/// The file's Xet index, when the Xet protocol is offered for it and the
/// index is made (or is made within `hub.xet_wait_ms`).
pub(super) async fn offer(
    state: &Arc<State>,
    held: &Held,
    tag: &str,
    size: u64,
) -> Option<Arc<Index>> {
    if !state.config.hub.xet || size < LINKED_FROM {
        return None;
    }
    let wait = Duration::from_millis(state.config.hub.xet_wait_ms);
    index(state, held, tag, size, wait).await
}

async fn index(
    state: &Arc<State>,
    held: &Held,
    tag: &str,
    size: u64,
    wait: Duration,
) -> Option<Arc<Index>> {
    let make = build(Arc::clone(state), held.clone(), size);
    match state.xet.get(tag, wait, make).await {
        Found::Ready(ix) => Some(ix),
        Found::Later => None,
        Found::Failed(why) => {
            tracing::warn!(file = %held.path(), reason = %why, "no Xet index; the file goes out over plain HTTP");
            None
        }
    }
}

/// Makes the index of `held` (`size` bytes): its components checked
/// first, its bytes cut and hashed piece by piece on the CPU pool, the
/// file's identity checked at the end.
async fn build(state: Arc<State>, held: Held, size: u64) -> Result<Index, String> {
    let name = held.path().to_owned();
    if let Err(f) = held.check_spans(std::slice::from_ref(&(0..size))).await {
        return Err(held.refused(f).to_string());
    }
    let mut chunker = Chunker::default();
    let mut at = 0u64;
    while at < size {
        let n = PIECE.min(size - at);
        let bytes = held
            .file()
            .read_async(n as usize, at, None)
            .await
            .map_err(|e| format!("{name}: reading bytes {at}..{}: {e}", at + n))?;
        chunker = state
            .cpu
            .wait_turn("the Xet index", move || {
                chunker.feed(&bytes);
                chunker
            })
            .await
            .map_err(|e| e.to_string())?;
        at += n;
    }
    if held.changed() {
        return Err(format!("{name}: changed while its Xet index was made"));
    }
    let ix = Index::of(chunker.finish());
    tracing::info!(file = %name, hash = %ix.hash, xorbs = ix.xorbs.len(), "Xet index made");
    Ok(ix)
}

/// The resolve answer's headers for a file with an index.
pub(super) fn headers(ix: &Index, repo: &Repo, base: &str) -> Vec<(HeaderName, String)> {
    let link = format!(
        "<{base}/api/{}s/{}/xet-read-token/{}>; rel=\"xet-auth\"",
        kind_name(repo.kind),
        raw_path(&repo.id),
        repo.commit
    );
    vec![(XET_HASH, ix.hash.hex()), (header::LINK, link)]
}

/// `GET /api/{kind}s/{repo}/xet-read-token/{revision}`: where the
/// repository's storage is at its current commit, and the token for it,
/// as headers and as JSON (`hf_xet` reads the one, `huggingface_hub` the
/// other).
pub(super) fn token(
    state: &State,
    repo: &Repo,
    revision: &str,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, HubError> {
    at_revision(repo, revision)?;
    let cas = format!(
        "{}/xet/{}s/{}/{}",
        base_url(state, uri, headers),
        kind_name(repo.kind),
        encode(&repo.id),
        repo.commit
    );
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .map(|(_, t)| t.trim().to_owned());
    let token = sent.unwrap_or_else(|| "anonymous".to_owned());
    let exp = now() + VALID.as_secs();
    let mut r =
        axum::Json(json!({ "casUrl": cas, "accessToken": token, "exp": exp })).into_response();
    let h = r.headers_mut();
    for (k, v) in [
        ("x-xet-cas-url", cas),
        ("x-xet-access-token", token),
        ("x-xet-token-expiration", exp.to_string()),
    ] {
        if let Ok(v) = HeaderValue::from_str(&v) {
            h.insert(HeaderName::from_static(k), v);
        }
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A repository id as one path segment (`org%2Fname`).
fn encode(id: &str) -> String {
    percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// What a storage URL asks.
#[derive(Debug, PartialEq, Eq)]
enum Cas {
    Reconstruction { v2: bool, file: XetHash },
    Xorb { file: XetHash, n: usize },
}

/// A storage URL's parts: kind, repository id, commit and request.
fn parse(path: &str) -> Option<(Kind, String, String, Cas)> {
    let rest = path.strip_prefix("/xet/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let (kind, id, commit, tail) = match parts.as_slice() {
        [kind, id, commit, tail @ ..] => (*kind, *id, *commit, tail),
        _ => return None,
    };
    let kind = match kind {
        "models" => Kind::Model,
        "datasets" => Kind::Dataset,
        _ => return None,
    };
    let id = percent_encoding::percent_decode_str(id)
        .decode_utf8()
        .ok()?;
    let n_parts = id.split('/').count();
    if !(1..=2).contains(&n_parts) || !id.split('/').all(safe_part) {
        return None;
    }
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let cas = match tail {
        [v @ ("v1" | "v2"), "reconstructions", hash] => Cas::Reconstruction {
            v2: *v == "v2",
            file: XetHash::from_hex(hash)?,
        },
        ["xorbs", hash, n] if n.len() <= 6 => Cas::Xorb {
            file: XetHash::from_hex(hash)?,
            n: n.parse().ok()?,
        },
        _ => return None,
    };
    Some((kind, id.into_owned(), commit.to_owned(), cas))
}

/// The signature of a xorb URL's path valid until `exp`.
fn signature(key: &[u8; 32], path: &str, exp: u64) -> String {
    let mac = blake3::keyed_hash(key, format!("{path}\n{exp}").as_bytes());
    mac.to_hex()[..32].to_owned()
}

/// Whether a request to `path` carries, in `query`, an unexpired
/// signature of the daemon's: `Some(true)` a xorb URL it signed,
/// `Some(false)` a xorb URL whose signature is wrong or expired, `None`
/// no signed xorb URL (or no tokens configured).
pub(crate) fn signed(state: &State, path: &str, query: Option<&str>) -> Option<bool> {
    if !matches!(parse(path), Some((_, _, _, Cas::Xorb { .. }))) {
        return None;
    }
    let tokens = state.tokens.as_ref()?;
    let pairs: Vec<(String, String)> =
        url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    // No signature at all: a request like any other (its token decides).
    let sig = get("sig")?;
    let Some(exp) = get("exp").and_then(|e| e.parse::<u64>().ok()) else {
        return Some(false);
    };
    let want = signature(&tokens.url_key(), path, exp);
    Some(exp >= now() && same_bytes(want.as_bytes(), sig.as_bytes()))
}

/// `GET /xet/...`: the storage's reconstructions and xorbs.
pub(crate) async fn cas(
    AxState(state): AxState<Arc<State>>,
    uri: Uri,
    headers: HeaderMap,
    flow: Option<Extension<Arc<Flow>>>,
) -> Response {
    let (r, template) = match parse(uri.path()) {
        None => (
            Err(HubError::Route(format!(
                "no Xet storage request at {:?}",
                uri.path()
            ))),
            "other",
        ),
        Some((kind, id, commit, Cas::Reconstruction { v2, file })) => {
            let r = reconstruction(&state, kind, &id, &commit, file, v2, &uri, &headers).await;
            (r, "/xet/{kind}/{repo}/{commit}/reconstructions")
        }
        Some((kind, id, commit, Cas::Xorb { file, n })) => {
            let flow = flow.map_or_else(|| state.flows.open(false), |f| f.0);
            let r = xorb(&state, kind, &id, &commit, file, n, &headers, flow).await;
            (r, "/xet/{kind}/{repo}/{commit}/xorbs")
        }
    };
    with_template(r.unwrap_or_else(IntoResponse::into_response), template)
}

/// `POST /v1/telemetry`: `hf_xet`'s report of a download, taken and
/// dropped unread (`204`), so that the client logs no failure.
pub(crate) async fn telemetry() -> Response {
    with_template(StatusCode::NO_CONTENT.into_response(), "/v1/telemetry")
}

/// The repository file whose index has hash `file`, at `commit`, with
/// the index: the kept one, else each large file's made in turn (a
/// replica that did not answer the resolve request, or dropped the index).
async fn located(
    state: &Arc<State>,
    kind: Kind,
    id: &str,
    commit: &str,
    file: XetHash,
) -> Result<(RepoFile, Arc<Index>), HubError> {
    let repos = repos(state).await?;
    let Some(repo) = repos.get(kind, id) else {
        return Err(HubError::Repo(format!(
            "Repository not found: no {} repository {id:?}",
            kind_name(kind)
        )));
    };
    if !repo.commit.eq_ignore_ascii_case(commit) {
        return Err(HubError::Revision(format!(
            "{id} is at commit {}, no longer at {commit}: the reconstruction asked for is gone; download again",
            repo.commit
        )));
    }
    if let (Some(ix), Some(tag)) = (state.xet.by_hash(&file), state.xet.tag_of(&file)) {
        if let Some(f) = repo.files.values().find(|f| f.tag == tag) {
            return Ok((f.clone(), ix));
        }
    }
    let wait = Duration::from_secs(3600);
    for f in repo.files.values().filter(|f| f.size >= LINKED_FROM) {
        let Ok(Opened::Now(held, size)) = open(state, f).await else {
            continue;
        };
        if let Some(ix) = index(state, &held, &f.tag, size, wait).await {
            if ix.hash == file {
                return Ok((f.clone(), ix));
            }
        }
    }
    Err(HubError::Entry(
        format!("no file of {id} at {commit} has Xet hash {file}"),
        None,
    ))
}

/// A file range from a `Range: bytes=S-E` (or `S-`) header; the whole
/// file without one.
fn file_range(headers: &HeaderMap, size: u64) -> Result<Range<u64>, HubError> {
    let Some(v) = headers.get(header::RANGE) else {
        return Ok(0..size);
    };
    let bad = || HubError::Route(format!("Range {v:?} is no single range of bytes"));
    let spec = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().strip_prefix("bytes="))
        .ok_or_else(bad)?;
    let (a, b) = spec.split_once('-').ok_or_else(bad)?;
    let start: u64 = a.trim().parse().map_err(|_| bad())?;
    let end = match b.trim() {
        "" => size,
        e => e.parse::<u64>().map_err(|_| bad())?.saturating_add(1),
    };
    if end <= start {
        return Err(bad());
    }
    Ok(start..end)
}

fn unsatisfiable(what: String, size: u64) -> Response {
    let mut r = (
        StatusCode::RANGE_NOT_SATISFIABLE,
        axum::Json(json!({ "error": what })),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("bytes */{size}")) {
        r.headers_mut().insert(header::CONTENT_RANGE, v);
    }
    r
}

/// `GET {cas}/v1|v2/reconstructions/{hash}`.
#[allow(clippy::too_many_arguments)]
async fn reconstruction(
    state: &Arc<State>,
    kind: Kind,
    id: &str,
    commit: &str,
    file: XetHash,
    v2: bool,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, HubError> {
    let (_, ix) = located(state, kind, id, commit, file).await?;
    let range = file_range(headers, ix.size)?;
    let Some((skip, terms)) = ix.reconstruction(range.clone()) else {
        let what = format!(
            "bytes {}.. are past the end of the file ({} bytes)",
            range.start, ix.size
        );
        return Ok(unsatisfiable(what, ix.size));
    };
    let base = base_url(state, uri, headers);
    let key = state.tokens.as_ref().map(|t| t.url_key());
    let exp = now() + VALID.as_secs();
    let url = |n: usize| {
        let path = format!(
            "/xet/{}s/{}/{commit}/xorbs/{}/{n}",
            kind_name(kind),
            encode(id),
            ix.hash.hex()
        );
        match &key {
            Some(k) => format!("{base}{path}?exp={exp}&sig={}", signature(k, &path, exp)),
            None => format!("{base}{path}"),
        }
    };
    let mut fetch = Map::new();
    let terms_json: Vec<Value> = terms
        .iter()
        .map(|t| {
            let hash = ix.xorbs[t.xorb].hash.hex();
            let chunks = json!({ "start": t.chunks.start, "end": t.chunks.end });
            let bytes = json!({ "start": t.bytes.start, "end": t.bytes.end - 1 });
            let entry = match v2 {
                true => {
                    json!({ "url": url(t.xorb), "ranges": [{ "chunks": chunks, "bytes": bytes }] })
                }
                false => json!({ "range": chunks, "url": url(t.xorb), "url_range": bytes }),
            };
            if let Some(Value::Array(list)) = fetch.get_mut(&hash) {
                list.push(entry);
            } else {
                fetch.insert(hash.clone(), json!([entry]));
            }
            json!({ "hash": hash, "unpacked_length": t.unpacked, "range": chunks })
        })
        .collect();
    let body = match v2 {
        true => json!({ "offset_into_first_range": skip, "terms": terms_json, "xorbs": fetch }),
        false => {
            json!({ "offset_into_first_range": skip, "terms": terms_json, "fetch_info": fetch })
        }
    };
    Ok(axum::Json(body).into_response())
}

/// `GET {cas}/xorbs/{hash}/{n}`: the `n`th xorb of the file with that
/// hash, or the chunks of it a `Range` names (whole chunks only, as a
/// reconstruction gives them).
#[allow(clippy::too_many_arguments)]
async fn xorb(
    state: &Arc<State>,
    kind: Kind,
    id: &str,
    commit: &str,
    file: XetHash,
    n: usize,
    headers: &HeaderMap,
    flow: Arc<Flow>,
) -> Result<Response, HubError> {
    let (repo_file, ix) = located(state, kind, id, commit, file).await?;
    let Some(x) = ix.xorbs.get(n) else {
        return Err(HubError::Entry(
            format!("the file with Xet hash {file} has no xorb {n}"),
            None,
        ));
    };
    let whole = ix.file_span(&x.chunks);
    let stored = (whole.end - whole.start) + HEADER * u64::from(x.chunks.end - x.chunks.start);
    let asked = file_range(headers, stored)?;
    let Some(chunks) = ix.chunks_stored_at(n, &asked) else {
        let what = format!(
            "bytes {}..{} of xorb {n} of {file} are not whole chunks of it",
            asked.start, asked.end
        );
        return Ok(unsatisfiable(what, stored));
    };
    let held = match open(state, &repo_file).await? {
        Opened::Now(held, _) => held,
        Opened::Changed => {
            return Err(HubError::Revision(format!(
                "{}: changed since its Xet index was made; download again",
                repo_file.rel
            )))
        }
    };
    let span = ix.file_span(&chunks);
    if let Err(f) = held
        .check_spans(std::slice::from_ref(
            &(span.start..span.end.min(span.start + PIECE)),
        ))
        .await
    {
        return Err(HubError::Refused(held.refused(f).into()));
    }
    let len = (span.end - span.start) + HEADER * u64::from(chunks.end - chunks.start);
    let body = stored_chunks(state, held, flow, &ix, chunks);
    let partial = headers.contains_key(header::RANGE);
    let mut r = Response::builder()
        .status(if partial {
            StatusCode::PARTIAL_CONTENT
        } else {
            StatusCode::OK
        })
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, len)
        .header(header::ACCEPT_RANGES, "bytes")
        .header(header::ETAG, format!("\"{}\"", x.hash.hex()));
    if partial {
        r = r.header(
            header::CONTENT_RANGE,
            format!("bytes {}-{}/{stored}", asked.start, asked.end - 1),
        );
    }
    Ok(r.body(body).unwrap_or_default())
}

/// The body of a run of chunks: the file's bytes as every body reads them
/// ([`file_stream`]), each chunk's header put before it.
fn stored_chunks(
    state: &Arc<State>,
    held: Held,
    flow: Arc<Flow>,
    ix: &Index,
    chunks: Range<u32>,
) -> Body {
    let span = ix.file_span(&chunks);
    let starts: Vec<u64> = ix.starts(&chunks).to_vec();
    let headers: Vec<[u8; HEADER as usize]> =
        (chunks.start..chunks.end).map(|c| ix.header(c)).collect();
    let file = file_stream(held, Arc::clone(state), flow, span.clone(), false, None);
    // (offset in the file, next chunk whose header is owed)
    let cut = file.scan((span.start, 0usize), move |(at, next), item| {
        let out: Vec<std::io::Result<Bytes>> = match item {
            Err(e) => vec![Err(e)],
            Ok(piece) => {
                let end = *at + piece.len() as u64;
                let mut out = Vec::new();
                let mut from = *at;
                while *next < headers.len() && starts[*next] < end {
                    let s = starts[*next];
                    if s > from {
                        out.push(Ok(piece.slice((from - *at) as usize..(s - *at) as usize)));
                    }
                    out.push(Ok(Bytes::copy_from_slice(&headers[*next])));
                    from = s;
                    *next += 1;
                }
                if end > from {
                    out.push(Ok(piece.slice((from - *at) as usize..)));
                }
                *at = end;
                out
            }
        };
        std::future::ready(Some(stream::iter(out)))
    });
    Body::from_stream(cut.flatten())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_urls() {
        let h = XetHash::of_chunk(b"a").hex();
        let c = "0123456789abcdef0123456789abcdef01234567";
        let (kind, id, commit, cas) = parse(&format!(
            "/xet/models/org%2Fname/{c}/v2/reconstructions/{h}"
        ))
        .unwrap();
        assert_eq!(
            (kind, id.as_str(), commit.as_str()),
            (Kind::Model, "org/name", c)
        );
        assert!(matches!(cas, Cas::Reconstruction { v2: true, .. }));
        let x = parse(&format!("/xet/datasets/name/{c}/xorbs/{h}/3")).unwrap();
        assert!(matches!(x.3, Cas::Xorb { n: 3, .. }));
        for bad in [
            format!("/xet/models/..%2Fetc/{c}/xorbs/{h}/0"),
            format!("/xet/models/a%2Fb%2Fc/{c}/xorbs/{h}/0"),
            format!("/xet/models/a/{c}x/xorbs/{h}/0"),
            format!("/xet/models/a/{c}/xorbs/{h}/99999999"),
            format!("/xet/models/a/{c}/xorbs/{}/0", &h[1..]),
            format!("/xet/spaces/a/{c}/v1/reconstructions/{h}"),
            format!("/xet/models/a/{c}/v3/reconstructions/{h}"),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
    }

    #[test]
    fn ranges() {
        let mut h = HeaderMap::new();
        assert_eq!(file_range(&h, 10).unwrap(), 0..10);
        h.insert(header::RANGE, HeaderValue::from_static("bytes=2-5"));
        assert_eq!(file_range(&h, 10).unwrap(), 2..6);
        h.insert(header::RANGE, HeaderValue::from_static("bytes=4-"));
        assert_eq!(file_range(&h, 10).unwrap(), 4..10);
        for bad in ["bytes=5-2", "bytes=-3", "bytes=1-2,4-5", "items=1-2"] {
            h.insert(header::RANGE, HeaderValue::from_static(bad));
            assert!(file_range(&h, 10).is_err(), "{bad}");
        }
    }
}
