//! The Hub's JSON API for a repository, as `huggingface_hub` reads it:
//!
//! - `GET /api/models/{repo}[/revision/{revision}]`: `id`, `sha` (the
//!   commit), `lastModified`, `private: false`, and `siblings`, each with
//!   `rfilename` (and `size` and `blobId` when `blobs=true`), which
//!   `snapshot_download` resolves `main` with and `list_repo_files` lists;
//! - `GET /api/models/{repo}/tree/{revision}[/{path}]` (`recursive`): the
//!   files (`type: file`, `path`, `size`, `oid`) and folders
//!   (`type: directory`) under a folder, 1000 to a page, the next page
//!   named by an absolute `Link: <...>; rel="next"` (what
//!   `snapshot_download`, `list_repo_tree` and `HfFileSystem` read);
//! - `POST /api/models/{repo}/paths-info/{revision}` (a form of `paths`):
//!   the entries of those of the paths the revision has;
//! - `GET /api/models/{repo}/refs`: the one branch, `main`, and its
//!   commit (llama.cpp's `-hf` starts there).
//!
//! - `GET /api/models/{repo}/xet-read-token/{revision}`: the Xet
//!   storage's URL and token (`xet.rs`).
//!
//! No entry carries `lfs` (the daemon knows no whole file's SHA-256, and a
//! wrong one would make clients hash their copies to compare) nor a Xet
//! hash (a file's is known once its index is made: resolve answers carry
//! it). Listing a large repository is CPU work: on the CPU pool.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::super::error::AppError;
use super::super::handlers::raw_path;
use super::path::{api_url, checked_path, Under};
use super::{
    at_revision, base_url, encode, find, kind_name, repos, storage_path, unix_now, HubError,
};
use crate::server::catalog::repos::{Item, Kind, Repo, Repos};
use crate::server::serve::Refusal;
use crate::server::State;

/// Entries on one page of a tree.
const PAGE: usize = 1000;

/// Most paths one `paths-info` request may ask about.
const MAX_PATHS: usize = 10_000;

/// How long a Xet storage token lasts (`hf_xet` asks for a new one
/// before it expires).
const TOKEN_VALID: Duration = Duration::from_secs(3600);

/// The answer to an API request, and its route template (for metrics).
pub(super) async fn answer(
    state: &Arc<State>,
    method: &Method,
    uri: &Uri,
    query: Option<&str>,
    headers: &HeaderMap,
    body: Bytes,
) -> (Result<Response, HubError>, &'static str) {
    // A HEAD is answered as its GET, without the body (the server drops it).
    let asked_by = method;
    let method = match *method {
        Method::HEAD => &Method::GET,
        _ => method,
    };
    let Some(asked) = api_url(uri.path()) else {
        return (
            Err(HubError::Route(format!("no route for {}", uri.path()))),
            "other",
        );
    };
    let repos = match repos(state).await {
        Ok(r) => r,
        Err(e) => return (Err(e), "/api/{kind}/{repo}"),
    };
    let (repo, under) = match find(&repos, &asked, false) {
        Ok(x) => x,
        Err(e) => return (Err(e), "/api/{kind}/{repo}"),
    };
    if let (Under::XetToken { revision }, &Method::GET, true) =
        (&under, method, state.config.hub.xet)
    {
        let r = token(state, repo, revision, query, uri, headers);
        return (r, "/api/{kind}/{repo}/xet-read-token");
    }
    let (kind, id) = (repo.kind, repo.id.clone());
    let params = pairs(query.map(str::as_bytes).unwrap_or_default());
    let (work, template) = match (&under, method) {
        (Under::Info { .. }, &Method::GET) => (repo.files.len(), "/api/{kind}/{repo}"),
        // The repository's folders are indexed on the first tree or
        // paths-info request of a snapshot (a pass over its files); a page
        // or a path is then a lookup per entry.
        (Under::Tree { .. }, &Method::GET) => (repo.files.len(), "/api/{kind}/{repo}/tree"),
        (Under::PathsInfo { .. }, &Method::POST) => (
            repo.files.len().saturating_add(body.len() / 8),
            "/api/{kind}/{repo}/paths-info",
        ),
        (Under::Refs, &Method::GET) => (0, "/api/{kind}/{repo}/refs"),
        _ => {
            let e = HubError::Route(format!("{asked_by} is not a request of {}", uri.path()));
            return (Err(e), "other");
        }
    };
    let base = base_url(state, uri, headers);
    // A paths-info body (up to the body limit) is parsed inside the job.
    let job = move || listing(&repos, kind, &id, &under, &params, &body, &base);
    let done = state
        .cpu
        .run_sized("the repository listing", work, job)
        .await;
    let answer = match done {
        Ok(r) => r,
        Err(e) => Err(HubError::Refused(Refusal::from(e).into())),
    };
    (answer, template)
}

/// The JSON (and for a tree, its next page's link) of an API request.
fn listing(
    repos: &Repos,
    kind: Kind,
    id: &str,
    under: &Under,
    params: &[(String, String)],
    form: &[u8],
    base: &str,
) -> Result<Response, HubError> {
    let Some(repo) = repos.get(kind, id) else {
        return Err(HubError::Repo(format!("Repository not found: {id:?}")));
    };
    match under {
        Under::Info { revision } => {
            at_revision(repo, revision)?;
            Ok(info(repo, flag(params, "blobs")))
        }
        Under::Tree { revision, path } => {
            at_revision(repo, revision)?;
            tree(repo, path, params, base)
        }
        Under::PathsInfo { revision } => {
            at_revision(repo, revision)?;
            paths_info(repo, form)
        }
        Under::Refs => Ok(axum::Json(refs(repo)).into_response()),
        Under::Resolve { .. } | Under::XetToken { .. } => {
            Err(HubError::Route("not a listing".to_owned()))
        }
    }
}

/// A repository's information, written straight from the listing: a
/// repository of a million files costs its JSON, not a JSON value (a map,
/// its keys and a copy of the path) per file on the way.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Info<'a> {
    #[serde(rename = "_id")]
    object_id: &'a str,
    id: &'a str,
    sha: &'a str,
    last_modified: &'a str,
    created_at: &'a str,
    private: bool,
    disabled: bool,
    gated: bool,
    downloads: u64,
    likes: u64,
    tags: [&'a str; 0],
    siblings: Siblings<'a>,
    used_storage: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    author: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    model_id: Option<&'a str>,
}

/// A repository's files as `siblings`, each written as it is reached.
struct Siblings<'a> {
    repo: &'a Repo,
    blobs: bool,
}

/// One of `siblings`: `size` and `blobId` only when asked for (`blobs=true`).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Sibling<'a> {
    rfilename: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    blob_id: Option<&'a str>,
}

impl serde::Serialize for Siblings<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.repo.files.iter().map(|(path, f)| Sibling {
            rfilename: path,
            size: self.blobs.then_some(f.size),
            blob_id: self.blobs.then(|| oid(&f.tag)),
        }))
    }
}

/// A repository's information as JSON.
fn info(repo: &Repo, blobs: bool) -> Response {
    let modified = iso(repo.modified);
    let info = Info {
        object_id: &repo.commit,
        id: &repo.id,
        sha: &repo.commit,
        last_modified: &modified,
        created_at: &modified,
        private: false,
        disabled: false,
        gated: false,
        downloads: 0,
        likes: 0,
        tags: [],
        siblings: Siblings { repo, blobs },
        used_storage: repo.files.values().map(|f| f.size).sum(),
        author: repo.id.split_once('/').map(|(author, _)| author),
        model_id: (repo.kind == Kind::Model).then_some(repo.id.as_str()),
    };
    axum::Json(info).into_response()
}

/// A repository's refs: one branch, `main`, at its current commit (what
/// llama.cpp's `-hf` resolves a repository with, and `list_repo_refs`
/// lists).
fn refs(repo: &Repo) -> Value {
    json!({
        "branches": [{ "name": "main", "ref": "refs/heads/main", "targetCommit": repo.commit }],
        "tags": [],
        "converts": [],
    })
}

/// One page of a folder's tree, from the path after `cursor`.
fn tree(
    repo: &Repo,
    dir: &str,
    params: &[(String, String)],
    base: &str,
) -> Result<Response, HubError> {
    let recursive = flag(params, "recursive");
    let after = params
        .iter()
        .find(|(k, _)| k == "cursor")
        .map(|(_, v)| v.as_str());
    let Some((items, more)) = repo.tree_page(dir, recursive, after, PAGE) else {
        return Err(HubError::Entry(
            format!("Entry not found: {} has no folder {dir:?}", repo.id),
            Some(repo.commit.clone()),
        ));
    };
    let mut r = axum::Json(items.iter().map(item).collect::<Vec<Value>>()).into_response();
    if let Some(last) = items.last().filter(|_| more) {
        let mut next = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in params.iter().filter(|(k, _)| k != "cursor") {
            next.append_pair(k, v);
        }
        next.append_pair("cursor", last.path());
        let dir_part = if dir.is_empty() {
            String::new()
        } else {
            format!("/{}", encode(dir))
        };
        let link = format!(
            "<{base}/api/{}s/{}/tree/{}{dir_part}?{}>; rel=\"next\"",
            kind_name(repo.kind),
            raw_path(&repo.id),
            repo.commit,
            next.finish()
        );
        // Every part is encoded: a link that is no header value is a bug,
        // said as one (a page without its link would end the listing).
        let v = HeaderValue::from_str(&link)
            .map_err(|e| HubError::Refused(AppError::internal(format!("{link}: {e}"))))?;
        r.headers_mut().insert(header::LINK, v);
    }
    Ok(r)
}

/// The entries of the paths a `paths-info` form asks about that the
/// repository has: files, and folders. Only the form's `paths` are kept,
/// and no more than [`MAX_PATHS`] of them: a body of other pairs costs
/// its reading, not a copy of each.
fn paths_info(repo: &Repo, form: &[u8]) -> Result<Response, HubError> {
    let mut paths: Vec<String> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(form) {
        if k != "paths" {
            continue;
        }
        if paths.len() == MAX_PATHS {
            let e = Refusal::TooLarge(format!("more than {MAX_PATHS} paths asked about at once"));
            return Err(HubError::Refused(e.into()));
        }
        paths.push(v.trim_matches('/').to_owned());
    }
    let mut seen = std::collections::BTreeSet::new();
    let out: Vec<Value> = paths
        .iter()
        .filter_map(|p| checked_path(p))
        .filter(|p| seen.insert(p.clone()))
        .filter_map(|p| repo.entry(&p).map(|e| item(&e)))
        .collect();
    Ok(axum::Json(out).into_response())
}

fn item(i: &Item<'_>) -> Value {
    match i {
        Item::File { path, file } => {
            json!({ "type": "file", "path": path, "size": file.size, "oid": oid(&file.tag) })
        }
        Item::Folder { path, oid } => json!({ "type": "directory", "path": path, "oid": oid }),
    }
}

/// A file's `oid`: its tag unquoted.
fn oid(tag: &str) -> &str {
    tag.trim_matches('"')
}

/// A time as the Hub writes it: `2022-08-19T07:19:38.000Z`.
fn iso(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// Whether a query flag is on (`true`, `True`, `1`).
fn flag(params: &[(String, String)], name: &str) -> bool {
    params
        .iter()
        .any(|(k, v)| k == name && matches!(v.as_str(), "1" | "true" | "True"))
}

/// `application/x-www-form-urlencoded` pairs (a query, or a form body).
fn pairs(bytes: &[u8]) -> Vec<(String, String)> {
    url::form_urlencoded::parse(bytes).into_owned().collect()
}

/// `GET /api/{kind}s/{repo}/xet-read-token/{revision}[?file=PATH]`:
/// where the repository's storage is at its current commit (its file
/// `PATH`'s, when named: the URL a resolve answer links names it), and
/// the token for it, as headers and as JSON (`hf_xet` reads the one,
/// `huggingface_hub` the other).
fn token(
    state: &State,
    repo: &Repo,
    revision: &str,
    query: Option<&str>,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, HubError> {
    at_revision(repo, revision)?;
    let params = pairs(query.map(str::as_bytes).unwrap_or_default());
    let file = params.iter().find(|(k, _)| k == "file").map(|(_, v)| v);
    if let Some(path) = file.filter(|p| !repo.files.contains_key(p.as_str())) {
        return Err(HubError::Entry(
            format!("Entry not found: {} has no file {path:?}", repo.id),
            Some(repo.commit.clone()),
        ));
    }
    let cas = format!(
        "{}{}",
        base_url(state, uri, headers),
        storage_path(repo.kind, &repo.id, &repo.commit, file.map(String::as_str))
    );
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .map(|(_, t)| t.trim().to_owned());
    let token = sent.unwrap_or_else(|| "anonymous".to_owned());
    let exp = unix_now() + TOKEN_VALID.as_secs();
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
