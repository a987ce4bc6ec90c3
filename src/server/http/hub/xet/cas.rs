//! The storage's URLs: what one asks, its signature, and the answer to
//! a reconstruction (which xorb ranges make a range of the file).

use std::ops::Range;
use std::sync::Arc;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::super::files::{open, Opened, LINKED_FROM};
use super::super::path::safe_part;
use super::super::{base_url, kind_name, repos, storage_path, unix_now, HubError};
use super::{index_now, VALID};
use crate::server::catalog::repos::{Kind, RepoFile};
use crate::server::serve::Refusal;
use crate::server::xet::hashes::XetHash;
use crate::server::xet::index::{Index, Term};
use crate::server::xet::kept::Known;
use crate::server::State;

/// What a storage URL asks.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Cas {
    Reconstruction { v2: bool, file: XetHash },
    Xorb { file: XetHash, n: usize },
}

/// Whose storage a URL is: a repository at a commit, and the file the
/// URL is for when it names one (the URLs this daemon hands out do).
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Store {
    pub(super) kind: Kind,
    pub(super) id: String,
    pub(super) commit: String,
    /// Its path in the repository.
    pub(super) file: Option<String>,
}

impl Store {
    /// The path of its `n`th xorb of the file with hash `file`.
    fn xorb_path(&self, file: &XetHash, n: usize) -> String {
        let store = storage_path(self.kind, &self.id, &self.commit, self.file.as_deref());
        format!("{store}/xorbs/{}/{n}", file.hex())
    }
}

/// A percent-decoded segment of `parts` parts, each [`safe_part`].
fn decoded(segment: &str, parts: std::ops::RangeInclusive<usize>) -> Option<String> {
    let text = percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()?;
    let ok = parts.contains(&text.split('/').count()) && text.split('/').all(safe_part);
    ok.then(|| text.into_owned())
}

/// Parts of a file's path at most, in a storage URL (deeper than any
/// file the root's listing finds).
const FILE_PARTS: usize = 64;

/// Terms of one reconstruction at most: 16 GiB of the file, about 5 MB
/// of JSON (`hf_xet` asks 8 GiB at most at once).
const MAX_TERMS: usize = 16 << 10;

/// A storage URL's parts: whose storage, and the request.
pub(super) fn parse(path: &str) -> Option<(Store, Cas)> {
    let rest = path.strip_prefix("/v1/xet/")?;
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
    let id = decoded(id, 1..=2)?;
    if commit.len() != 40 || !commit.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    // A URL handed out names the file; one a client made (from a token
    // route it called without `file`) does not.
    let (file, tail) = match tail {
        [file, rest @ ..] if rest.len() == 3 => (Some(decoded(file, 1..=FILE_PARTS)?), rest),
        _ => (None, tail),
    };
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
    let store = Store {
        kind,
        id,
        commit: commit.to_owned(),
        file,
    };
    Some((store, cas))
}

/// What a xorb URL's signature signs: the xorb, as its URL names it
/// once parsed (a proxy may re-encode the path), and the expiry.
fn signed_text(store: &Store, hash: &XetHash, n: usize, exp: u64) -> String {
    let (kind, id, commit) = (store.kind, &store.id, &store.commit);
    let file = store.file.as_deref().unwrap_or_default();
    format!("xorb\n{kind:?}\n{id}\n{commit}\n{file}\n{hash}\n{n}\n{exp}")
}

/// Whether a request to `path` carries, in `query`, an unexpired
/// signature of the daemon's: `Some(true)` a xorb URL it signed,
/// `Some(false)` a xorb URL whose signature is wrong or expired, `None`
/// no signed xorb URL (or no tokens configured).
pub(crate) fn signed(state: &State, path: &str, query: Option<&str>) -> Option<bool> {
    let Some((store, Cas::Xorb { file, n })) = parse(path) else {
        return None;
    };
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
    let text = signed_text(&store, &file, n, exp);
    Some(exp >= unix_now() && tokens.signed(text.as_bytes(), sig))
}

/// The repository file whose index has hash `hash`, at the store's
/// commit, with the index: the file the URL names, its index kept or
/// made again (a replica that did not answer the resolve request, or
/// dropped it); for a URL that names no file, an index this daemon knows
/// the hash of. No request makes the daemon look through a repository's
/// files for a hash.
pub(super) async fn located(
    state: &Arc<State>,
    store: &Store,
    hash: XetHash,
) -> Result<(RepoFile, Arc<Index>), HubError> {
    let Store {
        kind,
        id,
        commit,
        file,
    } = store;
    let repos = repos(state).await?;
    let Some(repo) = repos.get(*kind, id) else {
        let kind = kind_name(*kind);
        return Err(HubError::Repo(format!(
            "Repository not found: no {kind} repository {id:?}"
        )));
    };
    if !repo.commit.eq_ignore_ascii_case(commit) {
        return Err(HubError::Revision(format!(
            "{id} is at commit {}, no longer at {commit}: the reconstruction asked for is gone; download again",
            repo.commit
        )));
    }
    let known = state.xet.by_hash(&hash);
    let f = match file {
        Some(path) => repo.files.get(path),
        // The file the index was made of, if it is this repository's.
        None => known
            .as_ref()
            .and_then(|k| repo.file_at(&k.rel).filter(|f| f.tag == k.tag)),
    };
    let missing = || {
        let what = match file {
            Some(path) => format!("{id} at {commit} has no file {path:?} with Xet hash {hash}"),
            None => format!("no file of {id} at {commit} known here has Xet hash {hash}"),
        };
        HubError::Entry(what, None)
    };
    let Some(f) = f.filter(|f| f.size >= LINKED_FROM) else {
        return Err(missing());
    };
    if let Some(Known {
        tag,
        index: Some(ix),
        ..
    }) = &known
    {
        if *tag == f.tag {
            return Ok((f.clone(), Arc::clone(ix)));
        }
    }
    let (held, size) = match open(state, f).await? {
        Opened::Now(held, size) => (held, size),
        Opened::Changed => {
            return Err(HubError::Revision(format!(
                "{}: changed since its Xet index was made; download again",
                f.rel
            )))
        }
    };
    // The file named, but its index not made (a refused component, a
    // change under it, too many being made): the daemon's refusal, not a
    // missing file.
    let ix = index_now(state, &held, f, size).await?;
    match ix.hash == hash {
        true => Ok((f.clone(), ix)),
        false => Err(missing()),
    }
}

/// A file range from a `Range: bytes=S-E` (or `S-`) header; the whole
/// file without one.
pub(super) fn file_range(headers: &HeaderMap, size: u64) -> Result<Range<u64>, Response> {
    let Some(v) = headers.get(header::RANGE) else {
        return Ok(0..size);
    };
    let bad = || unsatisfiable(format!("Range {v:?} is no single range of bytes"), size);
    let spec = v
        .to_str()
        .ok()
        .and_then(|s| s.trim().strip_prefix("bytes="));
    let (a, b) = spec.and_then(|s| s.split_once('-')).ok_or_else(bad)?;
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

/// A `416` saying `what`, with the size of what was asked.
pub(super) fn unsatisfiable(what: String, size: u64) -> Response {
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

/// One term per xorb of 1 MiB, each with its URL: `hf_xet` asks 256 MiB
/// to 8 GiB at a time; a larger range would build JSON without end.
fn within_terms(ix: &Index, range: &Range<u64>) -> Result<(), HubError> {
    if ix.terms_in(range) <= MAX_TERMS {
        return Ok(());
    }
    let what = format!(
        "bytes {}..{} of the file with Xet hash {}: ask for at most {MAX_TERMS} MiB in one reconstruction",
        range.start,
        range.end.min(ix.size),
        ix.hash,
    );
    Err(HubError::Refused(Refusal::TooLarge(what).into()))
}

/// `GET {cas}/v1|v2/reconstructions/{hash}`.
pub(super) async fn reconstruction(
    state: &Arc<State>,
    store: Store,
    file: XetHash,
    v2: bool,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response, HubError> {
    let (_, ix) = located(state, &store, file).await?;
    let range = match file_range(headers, ix.size) {
        Ok(r) => r,
        Err(r) => return Ok(r),
    };
    within_terms(&ix, &range)?;
    let Some((skip, terms)) = ix.reconstruction(range.clone()) else {
        let what = format!(
            "bytes {}.. are past the end of the file ({} bytes)",
            range.start, ix.size
        );
        return Ok(unsatisfiable(what, ix.size));
    };
    let base = base_url(state, uri, headers);
    let work = terms.len().saturating_mul(8);
    let made = Arc::clone(state);
    let job = move || {
        let plan = Plan {
            store: &store,
            ix: &ix,
            base: &base,
            v2,
        };
        plan.json(&made, skip, &terms)
    };
    let body = match state.cpu.run_sized("a Xet reconstruction", work, job).await {
        Ok(b) => b,
        Err(e) => return Err(HubError::Refused(Refusal::from(e).into())),
    };
    let mut r = axum::Json(body).into_response();
    // Its URLs are signed for an hour: no cache keeps them.
    let no_store = HeaderValue::from_static("no-store");
    r.headers_mut().insert(header::CACHE_CONTROL, no_store);
    Ok(r)
}

/// A reconstruction's answer, as `hf_xet` reads it (v1 or v2).
struct Plan<'a> {
    store: &'a Store,
    ix: &'a Index,
    base: &'a str,
    v2: bool,
}

impl Plan<'_> {
    /// The `n`th xorb's URL, signed when tokens are in force.
    fn url(&self, state: &State, n: usize, exp: u64) -> String {
        let (base, store, hash) = (self.base, self.store, &self.ix.hash);
        let path = store.xorb_path(hash, n);
        match &state.tokens {
            Some(t) => {
                let sig = t.sign(signed_text(store, hash, n, exp).as_bytes());
                format!("{base}{path}?exp={exp}&sig={sig}")
            }
            None => format!("{base}{path}"),
        }
    }

    fn json(&self, state: &State, skip: u64, terms: &[Term]) -> Value {
        let exp = unix_now() + VALID.as_secs();
        let mut fetch = Map::new();
        let terms_json: Vec<Value> = terms
            .iter()
            .map(|t| {
                let hash = self.ix.xorbs[t.xorb].hash.hex();
                let url = self.url(state, t.xorb, exp);
                let chunks = json!({ "start": t.chunks.start, "end": t.chunks.end });
                let bytes = json!({ "start": t.bytes.start, "end": t.bytes.end - 1 });
                let entry = match self.v2 {
                    true => json!({ "url": url, "ranges": [{ "chunks": chunks, "bytes": bytes }] }),
                    false => json!({ "range": chunks, "url": url, "url_range": bytes }),
                };
                if let Some(Value::Array(list)) = fetch.get_mut(&hash) {
                    list.push(entry);
                } else {
                    fetch.insert(hash.clone(), json!([entry]));
                }
                json!({ "hash": hash, "unpacked_length": t.unpacked, "range": chunks })
            })
            .collect();
        let list = if self.v2 { "xorbs" } else { "fetch_info" };
        json!({ "offset_into_first_range": skip, "terms": terms_json, list: fetch })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_urls() {
        let h = XetHash::of_chunk(b"a").hex();
        let c = "0123456789abcdef0123456789abcdef01234567";
        let url = format!("/v1/xet/models/org%2Fname/{c}/v2/reconstructions/{h}");
        assert_eq!(
            storage_path(Kind::Model, "org/name", c, None),
            format!("/v1/xet/models/org%2Fname/{c}")
        );
        assert_eq!(
            storage_path(Kind::Model, "o-1/n_2.v~3", c, None),
            format!("/v1/xet/models/o-1%2Fn_2.v~3/{c}")
        );
        let (store, cas) = parse(&url).unwrap();
        let want = Store {
            kind: Kind::Model,
            id: "org/name".to_owned(),
            commit: c.to_owned(),
            file: None,
        };
        assert_eq!(store, want);
        let xorb = format!("/v1/xet/models/org%2Fname/{c}/xorbs/{h}/2");
        assert_eq!(store.xorb_path(&XetHash::from_hex(&h).unwrap(), 2), xorb);
        assert!(matches!(cas, Cas::Reconstruction { v2: true, .. }));
        let x = parse(&format!("/v1/xet/datasets/name/{c}/xorbs/{h}/3")).unwrap();
        assert!(matches!(x.1, Cas::Xorb { n: 3, .. }));
        // The URLs handed out name the file, its `/` encoded.
        let named = Store {
            file: Some("sub/model.safetensors".to_owned()),
            ..want
        };
        let base = storage_path(Kind::Model, "org/name", c, named.file.as_deref());
        assert_eq!(
            base,
            format!("/v1/xet/models/org%2Fname/{c}/sub%2Fmodel.safetensors")
        );
        let (store, cas) = parse(&format!("{base}/v1/reconstructions/{h}")).unwrap();
        assert_eq!(store, named);
        assert!(matches!(cas, Cas::Reconstruction { v2: false, .. }));
        let xorb = named.xorb_path(&XetHash::from_hex(&h).unwrap(), 0);
        assert_eq!(parse(&xorb).unwrap().0, named);
        // A file called like a route's word is still a file.
        let (store, _) = parse(&format!("/v1/xet/models/a/{c}/xorbs/xorbs/{h}/1")).unwrap();
        assert_eq!(store.file.as_deref(), Some("xorbs"));
        for bad in [
            format!("/v1/xet/models/..%2Fetc/{c}/xorbs/{h}/0"),
            format!("/v1/xet/models/a%2Fb%2Fc/{c}/xorbs/{h}/0"),
            format!("/v1/xet/models/a/{c}x/xorbs/{h}/0"),
            format!("/v1/xet/models/a/{c}/xorbs/{h}/99999999"),
            format!("/v1/xet/models/a/{c}/xorbs/{}/0", &h[1..]),
            format!("/v1/xet/spaces/a/{c}/v1/reconstructions/{h}"),
            format!("/v1/xet/models/a/{c}/v3/reconstructions/{h}"),
            format!("/v1/xet/models/a/{c}/..%2Fx/xorbs/{h}/0"),
            format!("/v1/xet/models/a/{c}/%2Fx/v1/reconstructions/{h}"),
            format!("/v1/xet/models/a/{c}/x%2F%2Fy/v1/reconstructions/{h}"),
            format!("/v1/xet/models/a/{c}/x/y/v1/reconstructions/{h}"),
        ] {
            assert_eq!(parse(&bad), None, "{bad}");
        }
    }

    /// A reconstruction of more than [`MAX_TERMS`] xorbs is refused.
    #[test]
    fn reconstructions_are_bounded() {
        use crate::server::xet::chunks::Chunk;
        // Seven chunks of 128 KiB fill a xorb.
        let n = (MAX_TERMS + 1) * 7;
        let chunks = (0..n as u32)
            .map(|i| Chunk {
                hash: XetHash::of_chunk(&i.to_le_bytes()),
                len: 128 << 10,
            })
            .collect();
        let ix = Index::of(chunks);
        assert_eq!(ix.xorbs.len(), MAX_TERMS + 1);
        assert!(within_terms(&ix, &(0..u64::MAX)).is_err());
        let cut = 7 * (128 << 10);
        assert!(within_terms(&ix, &(cut..u64::MAX)).is_ok());
        assert!(within_terms(&ix, &(0..ix.size - cut)).is_ok());
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
