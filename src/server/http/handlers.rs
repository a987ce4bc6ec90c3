//! The request handlers of the HTTP API.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::extract::{Extension, RawQuery, State as AxState};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::json;
use zt_format::{Component, Encoding};

use super::error::AppError;
use super::flow::Flow;
use super::preflight::{preflight, unchanged, verify, Stop};
use super::route::{split, Target};
use super::serve::{ranges, respond, spans, Entity};
use super::Template;
use crate::server::catalog::etag::{self, Precondition};
use crate::server::catalog::{Need, Served};
use crate::server::serve::{entry, plan, Refusal};
use crate::server::store::READ_CHUNK;
use crate::server::State;

/// Path URLs can be replaced in place, so caches must revalidate.
const REVALIDATE: &str = "no-cache";

/// A URL pinned to one version (`?v=ETAG`) never changes what it names.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The caching policy for a request: `?v=ETAG` matching the file's current
/// ETag pins the URL to these exact bytes, so caches may keep the answer
/// for a year, provided the daemon checks the bytes it sends against
/// digests ([`entry::pinned`]); a `v` naming another version is refused,
/// so no cache ever stores other bytes under a pinned URL.
fn cache_policy(query: &[(String, String)], served: &Served) -> Result<&'static str, Refusal> {
    match query.iter().find(|(k, _)| k == "v") {
        None => Ok(REVALIDATE),
        Some((_, v)) => Ok(match entry::pinned(served, v)? {
            true => IMMUTABLE,
            false => REVALIDATE,
        }),
    }
}

fn with_template(mut r: Response, t: &'static str) -> Response {
    r.extensions_mut().insert(Template(t));
    r
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `GET /v1/files`: every servable file in `files`, each with its size,
/// its ETag (provisional while its digests are computed) and `digests`
/// (`complete`, `pending`, or `none` when the daemon computes none), then
/// the multi-file entries; the files not served with their reasons.
/// `hashing` repeats the `files` rows whose digests are pending (an alias
/// kept for clients of the earlier listing).
pub(crate) async fn list(AxState(state): AxState<Arc<State>>) -> Response {
    let snap = state.catalog.snapshot();
    let (mut files, mut hashing) = (Vec::new(), Vec::new());
    for f in snap.listing() {
        let row = json!({
            "path": f.path,
            "source": f.source,
            "size": f.size,
            "etag": f.etag,
            "version": f.version,
            "objects": f.objects,
            "modified": rfc3339(f.modified),
            "digests": f.digests,
        });
        if f.digests == "pending" {
            hashing.push(row.clone());
        }
        files.push(row);
    }
    // Multi-file entries, linked to their files on first request.
    files.extend(snap.indexes().map(|i| {
        json!({ "path": i.path, "source": i.source().name(), "etag": i.etag(), "objects": i.objects(), "files": i.members() })
    }));
    let unavailable: Vec<_> = snap
        .unavailable()
        .map(|u| json!({ "path": u.path, "size": u.size, "modified": rfc3339(u.modified), "reason": u.reason }))
        .collect();
    let body = json!({ "files": files, "hashing": hashing, "unavailable": unavailable });
    with_template(
        ([(header::CACHE_CONTROL, REVALIDATE)], axum::Json(body)).into_response(),
        "/v1/files",
    )
}

/// Query parameters, repeatable ones included.
fn query_pairs(q: Option<&str>) -> Vec<(String, String)> {
    q.map(|q| {
        q.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                let dec = |s: &str| {
                    percent_encoding::percent_decode_str(&s.replace('+', " "))
                        .decode_utf8_lossy()
                        .into_owned()
                };
                (dec(k), dec(v))
            })
            .collect()
    })
    .unwrap_or_default()
}

/// `GET|HEAD /v1/files/{path}[/manifest|/objects/{name}/{component}]`.
pub(crate) async fn file(
    AxState(state): AxState<Arc<State>>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    flow: Option<Extension<Arc<Flow>>>,
) -> Response {
    let rest = uri.path().strip_prefix("/v1/files/").unwrap_or_default();
    let flow = flow.map_or_else(|| state.flows.open(false), |f| f.0);
    serve(state, method, rest, query, headers, Api::V1, flow).await
}

/// Path prefixes that are the server's own, never a file's plain path (a
/// file under one stays reachable at `/v1/files/...`).
const RESERVED: [&str; 5] = ["/v1", "/healthz", "/readyz", "/metrics", "/ui"];

/// Whether `path` is, or lies under, a [`RESERVED`] prefix.
fn reserved(path: &str) -> bool {
    RESERVED.iter().any(|r| {
        path.strip_prefix(r)
            .is_some_and(|after| after.is_empty() || after.starts_with('/'))
    })
}

/// Any request no route took: `GET|HEAD /{path}` of a served file gets
/// its raw bytes, exactly as `/v1/files/{path}` does, so an HTTP URL reads
/// like a QUIC one (`http://host:7070/model.zt`); everything else is 404.
pub(crate) async fn fallback(
    AxState(state): AxState<Arc<State>>,
    method: Method,
    uri: Uri,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    flow: Option<Extension<Arc<Flow>>>,
) -> Response {
    let path = uri.path();
    if !matches!(method, Method::GET | Method::HEAD) || reserved(path) || path == "/" {
        return not_found(uri).await;
    }
    let rest = path.strip_prefix('/').unwrap_or(path);
    let flow = flow.map_or_else(|| state.flows.open(false), |f| f.0);
    serve(state, method, rest, query, headers, Api::Plain, flow).await
}

/// Which URL form a request came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    /// `/v1/files/{path}...`: the documented API.
    V1,
    /// `/{path}`: the file's raw bytes only.
    Plain,
}

async fn serve(
    state: Arc<State>,
    method: Method,
    rest: &str,
    query: Option<String>,
    headers: HeaderMap,
    api: Api,
    flow: Arc<Flow>,
) -> Response {
    let snap = state.catalog.snapshot();
    let fallback_template = match api {
        Api::V1 => "/v1/files/{path}",
        Api::Plain => "/{path}",
    };
    let (path, target) = match split(rest, &snap) {
        Ok(x) => x,
        Err(e) => return with_template(e.into_response(), fallback_template),
    };
    let template = match (api, &target) {
        (Api::Plain, Target::File) => "/{path}",
        (Api::Plain, _) => {
            let e = AppError::not_found(format!(
                "/{rest}: a plain path serves only a file's bytes; its manifest and components are under /v1/files/"
            ));
            return with_template(e.into_response(), "/{path}");
        }
        (Api::V1, Target::File) => "/v1/files/{path}",
        (Api::V1, Target::Manifest) => "/v1/files/{path}/manifest",
        (Api::V1, Target::Component { .. }) => "/v1/files/{path}/objects/{name}/{component}",
        (Api::V1, Target::Summary { .. }) => "/v1/files/{path}/summaries/{name}",
        (Api::V1, Target::Objects) => "/v1/files/{path}/objects",
    };
    drop(snap);
    let query = query_pairs(query.as_deref());
    let mut again = false;
    loop {
        let asked = answer(&state, &method, &path, &target, &query, &headers, &flow);
        let (stale, why) = match asked.await {
            Ok(r) => return with_template(r, template),
            Err(Stop::Refused(e)) => return with_template(e.into_response(), template),
            Err(Stop::Changed { path, why }) => (path, why),
        };
        // The file found changed (this one, or a shard of it) is
        // catalogued again, once; changed again since: still changing.
        if let Err(r) = entry::catalogue_again(&state, &stale, &why, &mut again).await {
            return with_template(AppError::from(r).into_response(), template);
        }
    }
}

/// The answer to a request for `target` of `path`, from the catalog as it
/// is: never under a tag that names other bytes than the file holds.
async fn answer(
    state: &Arc<State>,
    method: &Method,
    path: &str,
    target: &Target,
    query: &[(String, String)],
    headers: &HeaderMap,
    flow: &Arc<Flow>,
) -> Result<Response, Stop> {
    let globs: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "select")
        .map(|(_, v)| v.clone())
        .collect();
    let need = match target {
        Target::File => Need::Bytes,
        Target::Manifest | Target::Objects if globs.is_empty() => Need::Everything,
        Target::Manifest | Target::Objects => Need::Select(&globs),
        Target::Component { object, .. } | Target::Summary { object } => Need::Object(object),
    };
    let served = entry::served(state, path, need).await?;
    if !matches!(target, Target::File | Target::Component { .. }) {
        // Bytes are sent after their own check (`preflight.rs`).
        unchanged(&served)?;
    }
    let cache_control = cache_policy(query, &served)?;
    match target {
        Target::File => {
            // The manifest describes the file, whichever URL it came by.
            let link = format!(
                "</v1/files/{}/manifest>; rel=\"describedby\"",
                raw_path(path)
            );
            // A URL pinned to this version may be kept for good.
            let body = plan::file(Arc::clone(&served), cache_control == IMMUTABLE);
            let entity = Entity::of(
                body,
                "application/octet-stream",
                cache_control,
                hv(&link)
                    .map(|v| vec![(header::LINK, v)])
                    .unwrap_or_default(),
                flow,
            );
            // The Range header is resolved once. The components under
            // each range's first chunk are checked before the headers (a
            // range inside one corrupt component is a clean 409), and the
            // first chunk read (`preflight.rs`); the rest as the body
            // reaches them (body.rs).
            let ranges = ranges(state, headers, &entity);
            let first: Vec<_> = spans(&entity, &ranges)
                .into_iter()
                .map(|s| s.start..s.end.min(s.start.saturating_add(READ_CHUNK)))
                .collect();
            let check = served.check_spans(&first);
            let read = preflight(state, method, headers, &entity, &ranges, check).await?;
            Ok(respond(state, method, headers, entity, ranges, read))
        }
        Target::Manifest => {
            Ok(manifest(state, &served, method, headers, query, cache_control).await?)
        }
        Target::Summary { object } => {
            Ok(super::summary::respond(state, served, object.clone(), method, headers).await?)
        }
        Target::Objects => {
            let work = plan::matching_work(&served, &globs);
            let (method, headers, globs) = (method.clone(), headers.clone(), globs.clone());
            let table = move || super::objects::respond(&served, &globs, &method, &headers);
            let answer = state.cpu.run_sized("the objects table", work, table).await;
            Ok(answer.map_err(Refusal::from)??)
        }
        Target::Component { object, component } => {
            // A shard's component is served by the shard's entry.
            let served = plan::holder(&served, object, component);
            component_response(
                state,
                method,
                headers,
                query,
                cache_control,
                served,
                object,
                component,
                flow,
            )
            .await
        }
    }
}

fn wants_cbor(headers: &HeaderMap, query: &[(String, String)]) -> bool {
    if let Some((_, f)) = query.iter().find(|(k, _)| k == "format") {
        return f == "cbor";
    }
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .any(|t| t.trim().starts_with("application/cbor"))
        })
}

/// The manifest (`?select=`ed, JSON or CBOR), from the renderings cache.
async fn manifest(
    state: &Arc<State>,
    served: &Arc<Served>,
    method: &Method,
    headers: &HeaderMap,
    query: &[(String, String)],
    cache_control: &'static str,
) -> Result<Response, AppError> {
    use crate::server::render::renderings::{Key, Kind, Refused, Rendered};
    let select: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "select")
        .map(|(_, v)| v.clone())
        .collect();
    let kind = if wants_cbor(headers, query) {
        Kind::Cbor
    } else {
        Kind::Json
    };
    let key = Key {
        etag: served.etag.clone(),
        kind,
        select: select.clone(),
    };
    let of = Arc::clone(served);
    let wanted = select.clone();
    let rendered = state
        .renderings
        .get(key, move |w| {
            crate::server::render::http(&of, kind, &wanted, w)
        })
        .await;
    let (body, etag, source) = match &*rendered {
        Rendered::Body {
            bytes,
            etag,
            source,
        } => (Body::from(bytes.clone()), etag.clone(), *source),
        Rendered::Refused(Refused::TooLarge(_)) => {
            // Past the cap for one request to hold: written out as made.
            state.renderings.count_streamed();
            let (h, body) = super::streamed::manifest(Arc::clone(served), kind, select).await?;
            (body, h.etag, h.source)
        }
        Rendered::Refused(r) => return Err(Refusal::from(r.clone()).into()),
    };
    let content_type = match kind {
        Kind::Json => "application/json",
        Kind::Cbor | Kind::Ztp => "application/cbor",
    };
    let mut builder = Response::builder()
        .header(header::ETAG, &etag)
        .header(header::VARY, "Accept")
        .header(header::CACHE_CONTROL, cache_control)
        // The version of the file this manifest describes, for clients
        // that go on to read its bytes with If-Range.
        .header("x-zt-etag", &served.etag)
        .header("x-zt-manifest-source", source);
    match etag::preconditions(headers, method, &etag, served.modified, |_| false) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            return builder
                .status(StatusCode::NOT_MODIFIED)
                .body(Body::empty())
                .map_err(AppError::internal)
        }
        Precondition::Failed(h) => {
            let what = format!("{}: the manifest", served.path);
            return Err(AppError::precondition_failed(&what, h, &etag));
        }
    }
    builder = builder.header(header::CONTENT_TYPE, content_type);
    builder.body(body).map_err(AppError::internal)
}

/// A catalog path as a URL path: each segment percent-encoded.
pub(super) fn raw_path(path: &str) -> String {
    path.split('/')
        .map(|seg| percent_encoding::utf8_percent_encode(seg, SEGMENT).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// What a path segment must encode (RFC 3986 `pchar` keeps the rest).
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    // A first segment with a `:` would read as a scheme in a relative link.
    .add(b':')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'\\')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

fn hv(s: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(s).ok()
}

fn component_headers(c: &Component, shape: &[u64]) -> Vec<(HeaderName, HeaderValue)> {
    let mut h = Vec::new();
    let mut push = |k: &'static str, v: Option<HeaderValue>| {
        if let Some(v) = v {
            h.push((HeaderName::from_static(k), v));
        }
    };
    push("x-zt-dtype", hv(c.dtype.name()));
    push("x-zt-type", hv(c.type_name()));
    let shape: Vec<String> = shape.iter().map(u64::to_string).collect();
    push("x-zt-shape", hv(&shape.join(",")));
    push("x-zt-encoding", hv(c.encoding.name()));
    if let Some(u) = c.uncompressed_length {
        push("x-zt-uncompressed-length", hv(&u.to_string()));
    }
    if let Some(d) = &c.digest {
        push("x-zt-digest", hv(&d.as_str()));
        if let Some(sha) = d.sha256() {
            let b64 = base64::engine::general_purpose::STANDARD.encode(sha);
            push("repr-digest", hv(&format!("sha-256=:{b64}:")));
        }
    }
    h
}

#[allow(clippy::too_many_arguments)]
async fn component_response(
    state: &Arc<State>,
    method: &Method,
    headers: &HeaderMap,
    query: &[(String, String)],
    cache_control: &'static str,
    served: Arc<Served>,
    object: &str,
    role: &str,
    flow: &Arc<Flow>,
) -> Result<Response, Stop> {
    let (obj, c) = plan::component(&served, object, role)?;
    if let Some((_, text)) = query.iter().find(|(k, _)| k == "slice") {
        if role != "data" || query.iter().any(|(k, _)| k == "rows" || k == "decode") {
            let why = format!(
                "{}: object {object:?}: ?slice= applies to the data component alone, without ?rows= or ?decode=",
                served.path
            );
            return Err(AppError::bad_request(why).into());
        }
        let r = super::slices::respond(state, method, &served, object, text, cache_control, flow);
        return Ok(r.await?);
    }
    let decode = query
        .iter()
        .any(|(k, v)| k == "decode" && (v == "1" || v == "true"));
    let mut extra = component_headers(c, &obj.shape);
    if decode && c.encoding == Encoding::Zstd {
        verify(&served, served.check(object, role)).await?;
        let decoding = plan::decoding(&served, object, role)?;
        return decoded(state, method, headers, flow, &served, c, decoding, extra).await;
    }
    extra.push((
        HeaderName::from_static("x-zt-object"),
        hv(object).unwrap_or(HeaderValue::from_static("")),
    ));
    let body = plan::component_bytes(Arc::clone(&served), object, role)?;
    // The entry that holds the component's bytes (a shard's, perhaps).
    let holder = Arc::clone(&body.served);
    let mut entity = Entity::of(body, "application/octet-stream", cache_control, extra, flow);
    let ranges = match query.iter().find(|(k, _)| k == "rows") {
        Some((_, text)) => super::rows::ranges(state, &holder, &mut entity, object, text).await?,
        None => ranges(state, headers, &entity),
    };
    let check = holder.check(object, role);
    let read = preflight(state, method, headers, &entity, &ranges, check).await?;
    Ok(respond(state, method, headers, entity, ranges, read))
}

#[allow(clippy::too_many_arguments)]
async fn decoded(
    state: &Arc<State>,
    method: &Method,
    headers: &HeaderMap,
    flow: &Arc<Flow>,
    served: &Arc<Served>,
    c: &Component,
    decoding: plan::Decoding,
    mut extra: Vec<(HeaderName, HeaderValue)>,
) -> Result<Response, Stop> {
    if let Some(answer) = super::conditional::answer(
        headers,
        method,
        &decoding.etag,
        served.modified,
        &decoding.label,
    ) {
        return Ok(answer?);
    }
    let cap = state.config.limits.decompress_cap;
    decoding.within(cap)?;
    let plan::Decoding {
        etag: tag,
        length: expected,
        label,
    } = decoding;
    // The caller has already checked the stored bytes against their digest
    // (`verify`, once per component), as for every component response.
    // `HEAD` decodes nothing.
    let body = match *method == Method::HEAD {
        true => Body::empty(),
        false => super::decoded::body(state, flow, served, c, expected, cap, label).await?,
    };
    extra.retain(|(k, _)| k != "repr-digest" && k != "x-zt-digest");
    let mut b = Response::builder()
        .header(header::ETAG, &tag)
        .header(header::CACHE_CONTROL, REVALIDATE)
        .header(header::CONTENT_TYPE, "application/octet-stream")
        .header(header::CONTENT_LENGTH, expected)
        .header("x-zt-decoded", "1");
    for (k, v) in extra {
        b = b.header(k, v);
    }
    Ok(b.body(body).map_err(AppError::internal)?)
}

pub(crate) async fn healthz() -> Response {
    with_template((StatusCode::OK, "ok\n").into_response(), "/healthz")
}

pub(crate) async fn readyz(AxState(state): AxState<Arc<State>>) -> Response {
    let store = state.catalog.store_error();
    let r = if let (true, Some(e)) = (state.is_ready(), &store) {
        AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unreachable",
            format!("the object store does not answer: {e}"),
        )
        .into_response()
    } else if state.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        AppError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "not_ready",
            "starting up or shutting down",
        )
        .into_response()
    };
    with_template(r, "/readyz")
}

pub(crate) async fn metrics(AxState(state): AxState<Arc<State>>) -> Response {
    let snap = state.catalog.snapshot();
    let text = state.metrics.render(
        snap.served().count(),
        snap.unavailable().count(),
        state.send_budget_held(),
    );
    with_template(
        ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response(),
        "/metrics",
    )
}

/// `GET /v1/schema/manifest.json`: the JSON Schema of the manifest JSON.
pub(crate) async fn manifest_schema() -> Response {
    let schema = zt_format::manifest_json::JSON_SCHEMA;
    with_template(
        (
            [
                (header::CONTENT_TYPE, "application/schema+json"),
                (header::CACHE_CONTROL, "no-cache"),
            ],
            schema,
        )
            .into_response(),
        "/v1/schema/manifest.json",
    )
}

pub(crate) async fn not_found(uri: Uri) -> Response {
    with_template(
        AppError::not_found(format!("no route for {}", uri.path())).into_response(),
        "other",
    )
}
