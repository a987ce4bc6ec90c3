//! The HTTP API. [`router`] builds it without a socket, so tests can call
//! it with `oneshot`.
//!
//! | route | what |
//! |---|---|
//! | `GET /v1/files` | served files and unavailable ones with their reasons |
//! | `GET\|HEAD /v1/files/{path}` | the raw file; ranges and conditional requests |
//! | `GET /v1/files/{path}/manifest` | the manifest: JSON, or CBOR by `Accept`/`?format=cbor`; `?select=` |
//! | `GET\|HEAD /v1/files/{path}/objects/{name}/{component}` | a component's stored bytes; `?decode=1` |
//! | `GET\|HEAD /{path}` | the raw file, as `/v1/files/{path}` serves it (not under `/v1/`, `/healthz`, `/readyz`, `/metrics`, `/ui/`) |
//! | `GET /v1/schema/manifest.json` | the JSON Schema of the manifest JSON |
//! | `GET /v1/repos`, `/{repo}/resolve/...`, `/api/models/...` | the Hub's repositories and protocol (`hub/`) |
//! | `GET /healthz`, `/readyz`, `/metrics` | liveness, readiness, Prometheus text |
//!
//! May use: `serve` (the plans and refusals it carries out, a body's
//! components hashed again as they stream), `catalog`, `integrity` (the
//! checks a response's first chunk waits for), `render`, `store` (a
//! plan's bytes), `cpu` (decoding), `ui`, `config` and `zt-format`.

mod body;
mod conditional;
mod decoded;
mod error;
pub(crate) mod flow;
/// The fuzz target's body, built only for fuzzing and the corpus replay.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
mod handlers;
mod held;
mod hub;
mod objects;
mod preflight;
mod range;
mod route;
mod rows;
mod serve;
mod slices;
mod streamed;
mod summary;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Request, State as AxState};
use axum::http::{HeaderName, HeaderValue, Method};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use tower_http::compression::predicate::{NotForContentType, Predicate, SizeAbove};
use tower_http::compression::CompressionLayer;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::timeout::TimeoutLayer;

pub(super) use error::AppError;

use crate::server::serve::Refusal;
use crate::server::State;

/// The route template a response was produced for, for metrics labels.
#[derive(Debug, Clone, Copy)]
pub(super) struct Template(pub &'static str);

async fn record(AxState(state): AxState<Arc<State>>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let resp = next.run(req).await;
    let template = resp.extensions().get::<Template>().map_or("other", |t| t.0);
    let status = resp.status().as_u16();
    state.metrics.record(template, status, start.elapsed());
    tracing::debug!(%method, path, status, route = template, ms = start.elapsed().as_secs_f64() * 1e3, "request");
    resp
}

/// Refuses requests without a valid bearer token, when tokens are configured.
async fn authenticate(AxState(state): AxState<Arc<State>>, req: Request, next: Next) -> Response {
    let Some(tokens) = &state.tokens else {
        return next.run(req).await;
    };
    let path = req.uri().path();
    // The page's HTML and assets carry no data (its script asks for the
    // token); the API it reads does.
    let open = path == "/healthz"
        || path == "/readyz"
        || (path == "/metrics" && !state.config.auth.protect_metrics)
        || (state.config.ui.enabled && crate::server::ui::is_ui_path(path));
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    // A Xet xorb URL the daemon signed stands for a token (`hf_xet`
    // fetches xorbs without one); a wrong or expired signature is a 403,
    // on which `hf_xet` asks for the reconstruction again.
    match hub::signed(&state, path, req.uri().query()) {
        Some(true) => return next.run(req).await,
        Some(false) if header.is_none() => {
            let e = AppError::new(
                axum::http::StatusCode::FORBIDDEN,
                "forbidden",
                "the Xet URL's signature is wrong or expired: ask for the reconstruction again",
            );
            return axum::response::IntoResponse::into_response(e);
        }
        _ => {}
    }
    if open || tokens.allows(header) {
        return next.run(req).await;
    }
    let refusal = Refusal::Unauthorized("a valid bearer token is required".to_owned());
    let mut r = axum::response::IntoResponse::into_response(AppError::from(refusal));
    if state.config.hub.enabled && hub::is_hub_path(path) {
        hub::unauthorized(&mut r, header.is_some());
    }
    r.extensions_mut().insert(Template("unauthorized"));
    r
}

fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    let expose: Vec<HeaderName> = [
        "etag",
        "content-range",
        "content-length",
        "accept-ranges",
        "repr-digest",
        "x-zt-dtype",
        "x-zt-type",
        "x-zt-shape",
        "x-zt-encoding",
        "x-zt-uncompressed-length",
        "x-zt-digest",
        "x-zt-object",
        "x-zt-manifest-source",
        "x-repo-commit",
        "x-linked-etag",
        "x-linked-size",
        "x-error-code",
        "x-error-message",
        "link",
    ]
    .into_iter()
    .map(HeaderName::from_static)
    .collect();
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::GET, Method::HEAD, Method::OPTIONS])
            .allow_headers([
                HeaderName::from_static("range"),
                HeaderName::from_static("if-none-match"),
                HeaderName::from_static("if-modified-since"),
                HeaderName::from_static("if-match"),
                HeaderName::from_static("if-unmodified-since"),
                HeaderName::from_static("if-range"),
                HeaderName::from_static("authorization"),
                HeaderName::from_static("accept"),
            ])
            .expose_headers(expose),
    )
}

/// Builds the router.
pub(super) fn router(state: Arc<State>) -> Router {
    // Compress large JSON (manifests, listings); never tensor bytes.
    let compress = CompressionLayer::new().compress_when(
        SizeAbove::new(8 * 1024)
            .and(NotForContentType::const_new("application/octet-stream"))
            .and(NotForContentType::const_new("multipart/byteranges"))
            .and(NotForContentType::const_new("application/cbor")),
    );
    let mut app = Router::new()
        .route("/v1/files", get(handlers::list))
        .route(
            "/v1/files/{*rest}",
            get(handlers::file).head(handlers::file),
        )
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .route("/metrics", get(handlers::metrics))
        .route("/v1/schema/manifest.json", get(handlers::manifest_schema));
    if state.config.ui.enabled {
        use crate::server::ui;
        app = app
            .route("/", get(ui::to_listing))
            .route("/ui", get(ui::to_listing))
            .route("/ui/", get(ui::listing))
            .route("/ui/files/{*path}", get(ui::file))
            .route("/ui/app.js", get(ui::script))
            .route("/ui/style.css", get(ui::style));
    }
    if state.config.hub.enabled {
        let api = get(hub::api).post(hub::api);
        app = app
            .route("/v1/repos", get(hub::list))
            .route("/api/models/{*rest}", api.clone())
            .route("/api/datasets/{*rest}", api);
        if state.config.hub.xet {
            app = app
                .route("/v1/xet/{*rest}", get(hub::cas))
                .route("/v1/telemetry", axum::routing::post(hub::telemetry));
        }
    }
    let mut app = app
        .fallback(hub::fallback)
        .layer(compress)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            authenticate,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), record))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(state.config.limits.request_timeout_secs),
        ));
    if let Some(c) = cors(&state.config.cors.allow_origins) {
        app = app.layer(c);
    }
    app.with_state(state)
}
