//! The Hugging Face Hub's protocol, so that every client built on
//! `huggingface_hub` (transformers, `hf download`, vLLM's download step...)
//! loads from the daemon with `HF_ENDPOINT` set: a directory `ORG/NAME/`
//! under the root is the model repository `ORG/NAME`
//! ([`crate::server::catalog::repos`]), served at the URLs the Hub's
//! clients ask (checked against `huggingface_hub` 2.4's
//! `file_download.py`, `hf_api.py` and `hf_file_system.py`):
//!
//! | route | what |
//! |---|---|
//! | `GET\|HEAD /{repo}/resolve/{revision}/{path}` | a file's bytes: `X-Repo-Commit`, `ETag`, ranges, conditionals (`resolve.rs`) |
//! | `GET /api/models/{repo}[/revision/{revision}]` | the repository: `id`, `sha`, `siblings` (`api.rs`) |
//! | `GET /api/models/{repo}/tree/{revision}[/{path}]` | a folder's files and folders, paged |
//! | `POST /api/models/{repo}/paths-info/{revision}` | the entries of the paths asked |
//! | `GET /api/models/{repo}/refs` | the branch `main` at the current commit |
//! | `GET /api/models/{repo}/xet-read-token/{rev}`, `/xet/...` | the Xet protocol, for files of 10 MiB or more (`xet.rs`) |
//!
//! and the same under `/datasets/` and `/api/datasets/` for the
//! directories under `datasets/`. Errors carry the Hub's `X-Error-Code`
//! (`RepoNotFound`, `RevisionNotFound`, `EntryNotFound`) and
//! `X-Error-Message`, so the clients raise their own typed errors.
//!
//! A model file is served through its catalog entry (every component
//! checked against its digest before its bytes go out); any other file
//! as the file holds it. Every file's ETag is made from its identity, and
//! a repository's commit from its files' paths and ETags.

mod api;
mod files;
mod path;
mod resolve;
mod xet;

pub(crate) use xet::{cas, signed, telemetry};

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Extension, RawQuery, State as AxState};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::error::AppError;
use super::flow::Flow;
use super::handlers::raw_path;
use super::Template;
use crate::server::catalog::repos::{Kind, Repo, Repos};
use crate::server::State;
use path::{Asked, Bad, Under};

/// The Hub's error, as its clients tell them apart.
#[derive(Debug)]
pub(super) enum HubError {
    /// No repository of that id (`X-Error-Code: RepoNotFound`).
    Repo(String),
    /// The repository has no such revision (`RevisionNotFound`).
    Revision(String),
    /// The revision has no such file (`EntryNotFound`); the commit it
    /// looked in, for `X-Repo-Commit`.
    Entry(String, Option<String>),
    /// A request the Hub's API does not have.
    Route(String),
    /// The daemon's own refusal (a corrupt component, a file changing).
    Refused(AppError),
}

impl From<AppError> for HubError {
    fn from(e: AppError) -> HubError {
        HubError::Refused(e)
    }
}

impl IntoResponse for HubError {
    fn into_response(self) -> Response {
        let (status, code, message, commit) = match self {
            HubError::Repo(m) => (StatusCode::NOT_FOUND, Some("RepoNotFound"), m, None),
            HubError::Revision(m) => (StatusCode::NOT_FOUND, Some("RevisionNotFound"), m, None),
            HubError::Entry(m, c) => (StatusCode::NOT_FOUND, Some("EntryNotFound"), m, c),
            HubError::Route(m) => (StatusCode::NOT_FOUND, None, m, None),
            HubError::Refused(e) => {
                let message = e.detail.clone();
                let mut r = e.into_response();
                if let Some(v) = header_text(&message) {
                    r.headers_mut().insert(ERROR_MESSAGE, v);
                }
                return r;
            }
        };
        let mut r = (status, axum::Json(json!({ "error": message }))).into_response();
        let h = r.headers_mut();
        if let Some(code) = code {
            h.insert(ERROR_CODE, HeaderValue::from_static(code));
        }
        if let Some(v) = header_text(&message) {
            h.insert(ERROR_MESSAGE, v);
        }
        if let Some(v) = commit.as_deref().and_then(header_text) {
            h.insert(REPO_COMMIT, v);
        }
        r
    }
}

const ERROR_CODE: HeaderName = HeaderName::from_static("x-error-code");
const ERROR_MESSAGE: HeaderName = HeaderName::from_static("x-error-message");
pub(super) const REPO_COMMIT: HeaderName = HeaderName::from_static("x-repo-commit");

/// `text` as a header value: non-ASCII and control characters escaped.
fn header_text(text: &str) -> Option<HeaderValue> {
    let shown: String = text
        .chars()
        .flat_map(|c| match c {
            ' '..='~' => vec![c],
            _ => c.escape_default().collect(),
        })
        .collect();
    HeaderValue::from_str(&shown).ok()
}

/// Whether a request path is one of the Hub's (for the 401 that tells
/// its clients why: see [`unauthorized`]).
pub(super) fn is_hub_path(path: &str) -> bool {
    path::resolve_url(path).is_some() || path::api_url(path).is_some()
}

/// Adds to a 401 on a Hub path what the Hub's clients read: with a token
/// sent, `Invalid credentials in Authorization header` (their
/// `HfHubHTTPError`); without one, `RepoNotFound`, as the Hub answers
/// for a private repository.
pub(super) fn unauthorized(r: &mut Response, sent_token: bool) {
    let h = r.headers_mut();
    if sent_token {
        h.insert(
            ERROR_MESSAGE,
            HeaderValue::from_static("Invalid credentials in Authorization header"),
        );
    } else {
        h.insert(ERROR_CODE, HeaderValue::from_static("RepoNotFound"));
        h.insert(
            ERROR_MESSAGE,
            HeaderValue::from_static("a valid bearer token is required"),
        );
    }
}

/// The repositories of the current snapshot, grouped off the runtime the
/// first time (hashing every file's path and tag).
async fn repos(state: &Arc<State>) -> Result<Arc<Repos>, HubError> {
    let snap = state.catalog.snapshot();
    if let Some(r) = snap.repos_ready() {
        return Ok(r);
    }
    let work = snap.files.len();
    let grouped = state
        .cpu
        .run_sized("grouping the repositories", work, move || snap.repos())
        .await;
    grouped.map_err(|e| HubError::Refused(crate::server::serve::Refusal::from(e).into()))
}

/// The repository an URL names, and what it asks of it: the longest id
/// the root has whose rest is a request of the Hub's; when there is none,
/// the repository not found (named by the first id whose rest is one).
fn find<'r>(
    repos: &'r Repos,
    asked: &Asked<'_>,
    resolve: bool,
) -> Result<(&'r Repo, Under), HubError> {
    let candidates = asked.candidates();
    for (id, rest) in &candidates {
        let Some(repo) = repos.get(asked.kind, id) else {
            continue;
        };
        return match path::under(rest, resolve) {
            Ok(under) => Ok((repo, under)),
            Err(Bad::Route) => continue,
            Err(Bad::Entry(p)) => Err(HubError::Entry(
                format!("Entry not found: {p:?} is no file's path in {}", repo.id),
                Some(repo.commit.clone()),
            )),
            Err(Bad::Revision(r)) => Err(HubError::Revision(format!(
                "Invalid rev id: {r:?}: no revision of {}",
                repo.id
            ))),
        };
    }
    let named = candidates
        .iter()
        .find(|(_, rest)| !matches!(path::under(rest, resolve), Err(Bad::Route)));
    match named {
        Some((id, _)) => Err(HubError::Repo(format!(
            "Repository not found: no {} repository {id:?} under the root",
            kind_name(asked.kind)
        ))),
        // A resolve URL whose id is no name (`..`, an encoded `/`).
        None if resolve => Err(HubError::Repo(format!(
            "Repository not found: {:?} names no repository",
            asked.segments.join("/")
        ))),
        None => Err(HubError::Route(format!(
            "no request of the Hub's API at {:?}",
            asked.segments.join("/")
        ))),
    }
}

/// The repository at `revision`: its current state, or the revision not
/// found (the daemon keeps no history).
fn at_revision(repo: &Repo, revision: &str) -> Result<(), HubError> {
    if repo.is_current(revision) {
        return Ok(());
    }
    Err(HubError::Revision(format!(
        "Invalid rev id: {revision:?}: {} {} is at commit {} (\"main\"); earlier commits are not kept",
        kind_name(repo.kind),
        repo.id,
        repo.commit
    )))
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Model => "model",
        Kind::Dataset => "dataset",
    }
}

fn with_template(mut r: Response, t: &'static str) -> Response {
    r.extensions_mut().insert(Template(t));
    r
}

/// The absolute URL this daemon is reached at, as the request names it,
/// for the links the clients follow as they are: a proxy's
/// `X-Forwarded-Proto`, `X-Forwarded-Host` and `X-Forwarded-Prefix` (the
/// path it serves the daemon under, `/mirror` for `HF_ENDPOINT=
/// https://gw/mirror`) when it sends them (a TLS proxy in front: the links
/// stay `https://`), else the request's `Host` and the listener's own
/// scheme. A client that sends them itself only changes the links it is
/// given.
pub(super) fn base_url(state: &State, uri: &Uri, headers: &HeaderMap) -> String {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|h| h.to_str().ok())
            .and_then(|v| v.split(',').next())
            .map(|v| v.trim().to_owned())
    };
    let own = match state.config.tls.cert.is_some() && state.config.tls.key.is_some() {
        true => "https",
        false => "http",
    };
    let scheme = text("x-forwarded-proto")
        .filter(|p| p == "http" || p == "https")
        .unwrap_or_else(|| own.to_owned());
    let valid = |h: &String| h.parse::<axum::http::uri::Authority>().is_ok();
    let host = text("x-forwarded-host")
        .filter(valid)
        .or_else(|| uri.authority().map(|a| a.as_str().to_owned()))
        .or_else(|| text("host").filter(valid))
        .unwrap_or_else(|| state.config.listen.to_string());
    format!("{scheme}://{host}{}", forwarded_prefix(headers))
}

/// The path a proxy serves the daemon under (`X-Forwarded-Prefix`), with
/// no `/` at its end (`""`: the root, or a prefix that is not a plain
/// path: `/` and segments of unreserved characters and percent-escapes,
/// 256 bytes at most, no empty, `.` or `..` segment, so never `//host`).
pub(super) fn forwarded_prefix(headers: &HeaderMap) -> String {
    let Some(p) = headers
        .get("x-forwarded-prefix")
        .and_then(|h| h.to_str().ok())
        .and_then(|v| v.split(',').next())
    else {
        return String::new();
    };
    let p = p.trim().trim_end_matches('/');
    let char_ok = |c: char| c.is_ascii_alphanumeric() || "-._~%/".contains(c);
    let plain = p.starts_with('/')
        && p.len() <= 256
        && p.chars().all(char_ok)
        && p.split('/')
            .skip(1)
            .all(|s| !s.is_empty() && s != "." && s != "..");
    match plain {
        true => p.to_owned(),
        false => String::new(),
    }
}

/// Says that `r` may differ with the headers [`base_url`] reads besides
/// the request's own: a shared cache keys on the URL and `Host`, so
/// without this one client's `X-Forwarded-Host` would reach others in
/// the links it put in a kept answer (the Xet token's URL among them).
pub(super) fn varies_with_forwarding(r: &mut Response) {
    r.headers_mut().append(
        axum::http::header::VARY,
        HeaderValue::from_static("X-Forwarded-Host, X-Forwarded-Proto, X-Forwarded-Prefix"),
    );
}

/// `text` as one path segment: every byte but letters and digits
/// percent-encoded (`org/name` is `org%2Fname`).
pub(super) fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The path the Xet storage of repository `id` at `commit` is under,
/// for its file `file` when named (`xet/cas.rs` parses it).
pub(super) fn storage_path(kind: Kind, id: &str, commit: &str, file: Option<&str>) -> String {
    let id = segment(id);
    let kind = kind_name(kind);
    match file {
        Some(file) => format!("/v1/xet/{kind}s/{id}/{commit}/{}", segment(file)),
        None => format!("/v1/xet/{kind}s/{id}/{commit}"),
    }
}

/// `text` as one path segment (its `/` encoded too).
pub(super) fn segment(text: &str) -> percent_encoding::PercentEncode<'_> {
    percent_encoding::utf8_percent_encode(text, ID_SEGMENT)
}

/// What a repository id encodes as one segment: its `/` and anything not
/// unreserved (RFC 3986), so that a proxy that normalises paths leaves it.
const ID_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Seconds since the Unix epoch, now.
pub(super) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Any request no route took: a Hub resolve URL is answered here, any
/// other goes on to the plain paths of served files
/// ([`super::handlers::fallback`]).
pub(crate) async fn fallback(
    state: AxState<Arc<State>>,
    method: Method,
    uri: Uri,
    query: RawQuery,
    headers: HeaderMap,
    flow: Option<Extension<Arc<Flow>>>,
) -> Response {
    let hub = state.config.hub.enabled && matches!(method, Method::GET | Method::HEAD);
    // A served file whose path only looks like a resolve URL is the file.
    let file = || {
        let rest = uri.path().strip_prefix('/').unwrap_or_default();
        let decoded = percent_encoding::percent_decode_str(rest).decode_utf8_lossy();
        state.catalog.snapshot().get(&decoded).is_some()
    };
    match path::resolve_url(uri.path()).filter(|_| hub && !file()) {
        Some(asked) => {
            let flow = flow.map_or_else(|| state.flows.open(false), |f| f.0);
            let r = resolve::answer(&state, &method, &uri, &asked, &headers, &flow).await;
            let mut r = r.unwrap_or_else(IntoResponse::into_response);
            varies_with_forwarding(&mut r);
            with_template(r, "/{repo}/resolve/{revision}/{path}")
        }
        None => super::handlers::fallback(state, method, uri, query, headers, flow).await,
    }
}

/// `GET /api/models/...`, `GET /api/datasets/...` and their `paths-info`
/// `POST`s.
pub(crate) async fn api(
    AxState(state): AxState<Arc<State>>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (r, template) = api::answer(&state, &method, &uri, query.as_deref(), &headers, body).await;
    let mut r = r.unwrap_or_else(IntoResponse::into_response);
    varies_with_forwarding(&mut r);
    with_template(r, template)
}

/// `GET /v1/repos`: the repositories the root's layout makes, each with
/// its commit, its count and bytes of files and the URL they are under
/// (the files themselves are the Hub API's tree). A one-part id whose
/// files all lie in folders (an organisation's folder, `org` of
/// `org/name`) is left out here, though the Hub's URLs serve it.
pub(crate) async fn list(AxState(state): AxState<Arc<State>>) -> Response {
    let listed = match repos(&state).await {
        Ok(r) => r,
        Err(e) => return with_template(e.into_response(), "/v1/repos"),
    };
    let work = listed.iter().map(|r| r.files.len()).sum();
    let job = move || {
        let rows: Vec<serde_json::Value> = listed
            .iter()
            .filter(|r| r.id.contains('/') || r.files.keys().any(|p| !p.contains('/')))
            .map(|r| {
                let prefix = match r.kind {
                    Kind::Model => "",
                    Kind::Dataset => "datasets/",
                };
                json!({
                    "kind": kind_name(r.kind),
                    "id": r.id,
                    "sha": r.commit,
                    "files": r.files.len(),
                    "bytes": r.files.values().map(|f| f.size).sum::<u64>(),
                    "resolve": format!("/{prefix}{}/resolve/main/", raw_path(&r.id)),
                    "tree": format!("/api/{}s/{}/tree/main?recursive=true", kind_name(r.kind), raw_path(&r.id)),
                })
            })
            .collect();
        axum::Json(json!({ "repos": rows })).into_response()
    };
    let r = match state.cpu.run_sized("the repositories", work, job).await {
        Ok(r) => r,
        Err(e) => AppError::from(crate::server::serve::Refusal::from(e)).into_response(),
    };
    with_template(r, "/v1/repos")
}
