//! `GET|HEAD /{repo}/resolve/{revision}/{path}`: one file of a
//! repository, with what `huggingface_hub`'s downloads read: its
//! `X-Repo-Commit` (required), `ETag` (the cache's blob name), its size
//! (`Content-Length`; and, as the Hub sends them for its LFS files, for
//! files of 10 MiB or more and model files, `X-Linked-Etag` and
//! `X-Linked-Size`), ranges (a download that broke off resumes with
//! `Range: bytes=N-`; `HfFileSystem` reads `bytes=S-E`) and conditional
//! requests. A revision that moves (`main`) answers `302` to the file's
//! URL at the current commit, so that what a client downloads, and
//! resumes, is one version's bytes.
//!
//! A model file is read through its catalog entry: its components are
//! checked against their digests before any of their bytes go out, as on
//! every other route. Any other file is read as it is. Either way the
//! version opened must be the one the repository's commit was made from
//! (its tag); a file changed since is looked at again, once.

use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;

use super::super::flow::Flow;
use super::super::handlers::raw_path;
use super::super::held::Held;
use super::super::preflight::{preflight, Stop};
use super::super::serve::{ranges, respond, spans, Entity};
use super::files::{open, refused, Opened, LINKED_FROM};
use super::path::{Asked, Under};
use super::{at_revision, base_url, find, forwarded_prefix, repos, xet, HubError, REPO_COMMIT};
use crate::server::catalog::repos::{Kind, Repo, RepoFile};
use crate::server::serve::entry;
use crate::server::store::READ_CHUNK;
use crate::server::State;

/// The answer to a resolve URL.
pub(super) async fn answer(
    state: &Arc<State>,
    method: &Method,
    uri: &Uri,
    asked: &Asked<'_>,
    headers: &HeaderMap,
    flow: &Arc<Flow>,
) -> Result<Response, HubError> {
    let mut again = false;
    loop {
        let repos = repos(state).await?;
        let (repo, under) = find(&repos, asked, true)?;
        let Under::Resolve { revision, path } = under else {
            return Err(HubError::Route("not a resolve URL".to_owned()));
        };
        at_revision(repo, &revision)?;
        let Some(file) = repo.files.get(&path) else {
            return Err(HubError::Entry(
                format!("Entry not found: {} has no file {path:?}", repo.id),
                Some(repo.commit.clone()),
            ));
        };
        let stale = match open(state, file).await? {
            // `main` (not a commit): to the commit's URL, where a download
            // that breaks off resumes from the same version or fails.
            Opened::Now(_, _) if revision != repo.commit => {
                return Ok(to_commit(asked, repo, &path, file, headers));
            }
            Opened::Now(held, size) => {
                // What the Hub's clients ask before a download (a HEAD):
                // whether the file comes by the Xet protocol.
                let xet = match method {
                    &Method::HEAD => xet::offer(state, &held, file, size).await,
                    _ => None,
                };
                let extra = xet
                    .map(|ix| xet::headers(&ix, repo, &path, &base_url(state, uri, headers)))
                    .unwrap_or_default();
                let entity = entity(held, size, file, &repo.commit, flow, extra);
                match send(state, method, headers, entity).await {
                    Ok(r) => return Ok(r),
                    Err(Stop::Refused(e)) => return Err(e.into()),
                    Err(Stop::Changed { path, why }) => (path, why),
                }
            }
            Opened::Changed => (
                file.rel.clone(),
                format!("{}: changed since the repository was listed", file.rel),
            ),
        };
        // Looked at again, once: its new version makes a new commit.
        let (path, why) = stale;
        entry::catalogue_again(state, &path, &why, &mut again)
            .await
            .map_err(refused)?;
    }
}

/// A `302` from a revision that moves (`main`) to the URL of the file at
/// the current commit, an absolute path (under a proxy's
/// `X-Forwarded-Prefix`: [`forwarded_prefix`]; the Hub's clients before
/// 1.0 keep only a redirect's path), so that the client reads and resumes
/// from there: a file that changes under a download fails its retry as
/// `RevisionNotFound` instead of completing with another version's bytes.
/// It carries the file's headers, as the Hub's redirects do.
fn to_commit(
    asked: &Asked<'_>,
    repo: &Repo,
    path: &str,
    file: &RepoFile,
    headers: &HeaderMap,
) -> Response {
    let kind = match asked.kind {
        Kind::Model => "",
        Kind::Dataset => "/datasets",
    };
    let location = format!(
        "{}{kind}/{}/resolve/{}/{}",
        forwarded_prefix(headers),
        raw_path(&repo.id),
        repo.commit,
        raw_path(path)
    );
    let mut r = Response::builder()
        .status(StatusCode::FOUND)
        .header(header::LOCATION, location)
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::ETAG, &file.tag)
        .header(REPO_COMMIT, &repo.commit)
        .body(axum::body::Body::empty())
        .unwrap_or_default();
    if file.size >= LINKED_FROM {
        let h = r.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&file.tag) {
            h.insert(HeaderName::from_static("x-linked-etag"), v);
        }
        h.insert(HeaderName::from_static("x-linked-size"), file.size.into());
    }
    r
}

/// The file as an HTTP entity, with the headers the Hub's clients read.
fn entity(
    held: Held,
    size: u64,
    file: &RepoFile,
    commit: &str,
    flow: &Arc<Flow>,
    extra: Vec<(HeaderName, String)>,
) -> Entity {
    let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
    let mut push = |k: HeaderName, v: &str| {
        if let Ok(v) = HeaderValue::from_str(v) {
            headers.push((k, v));
        }
    };
    push(REPO_COMMIT, commit);
    for (k, v) in extra {
        push(k, &v);
    }
    if size >= LINKED_FROM || held.served().is_some() {
        push(HeaderName::from_static("x-linked-etag"), &file.tag);
        push(HeaderName::from_static("x-linked-size"), &size.to_string());
    }
    Entity {
        held,
        span: 0..size,
        etag: file.tag.clone(),
        modified: file.modified,
        // Never compressed (a compressed body has another length and
        // cannot be resumed by range), whatever the file holds.
        content_type: "application/octet-stream",
        // The URL of `main` changes with the repository; a commit's never
        // does, but the daemon does not hash what it sends to keep it
        // for good: caches revalidate (a 304 by ETag).
        cache_control: "no-cache",
        headers,
        memory: None,
        recheck: false,
        flow: Arc::clone(flow),
    }
}

/// Sends `entity` as the request asks: the components under each range's
/// first chunk checked and the first chunk read before the headers
/// (`preflight.rs`), the rest as the body reaches it.
async fn send(
    state: &Arc<State>,
    method: &Method,
    headers: &HeaderMap,
    entity: Entity,
) -> Result<Response, Stop> {
    let ranges = ranges(state, headers, &entity);
    let first: Vec<_> = spans(&entity, &ranges)
        .into_iter()
        .map(|s| s.start..s.end.min(s.start.saturating_add(READ_CHUNK)))
        .collect();
    let held = entity.held.clone();
    let check = held.check_spans(&first);
    let read = preflight(state, method, headers, &entity, &ranges, check).await?;
    Ok(respond(state, method, headers, entity, ranges, read))
}
