//! The web page: `/ui/` lists the served files, `/ui/files/{path}` shows
//! one (its attributes, its objects filtered on the server, bytes per
//! layer, a tensor's summary as a histogram and a heatmap, and the
//! commands to fetch it). `/` redirects to `/ui/`.
//!
//! Everything it needs is compiled in (`assets/`): one stylesheet and one
//! script, no inline script or style, served under a strict
//! Content-Security-Policy. The script reads the same JSON API as every
//! other client and writes every name from a file as text, never as markup.
//! The pages themselves carry no data and need no token; the script asks
//! for the token when the API answers 401 and keeps it for the browser
//! session only (never in a URL). Only when no token is configured does
//! `/ui/` also list the files in its HTML, for browsers without JavaScript.
//! `--no-ui` (`ui.enabled = false`) turns all of it off.

mod page;

use std::sync::Arc;

use axum::extract::State as AxState;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

use crate::server::State;

const SCRIPT: &str = include_str!("assets/app.js");
const STYLE: &str = include_str!("assets/style.css");

/// The policy every page and asset is served under: its own script and
/// style only, API requests to itself, nothing framed, no forms posted.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Whether `path` is the page's (served without a token).
pub(crate) fn is_ui_path(path: &str) -> bool {
    path == "/" || path == "/ui" || path.starts_with("/ui/")
}

/// `response` with the security headers every page and asset carries.
fn secured(mut response: Response) -> Response {
    let h = response.headers_mut();
    for (k, v) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::CACHE_CONTROL, "no-cache"),
    ] {
        h.insert(k, HeaderValue::from_static(v));
    }
    response
}

/// `GET /` and `GET /ui`: to the listing.
pub(crate) async fn to_listing() -> Response {
    secured((StatusCode::FOUND, [(header::LOCATION, "/ui/")]).into_response())
}

/// `GET /ui/`.
pub(crate) async fn listing(AxState(state): AxState<Arc<State>>) -> Response {
    let html = page::listing(&state);
    secured(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

/// `GET /ui/files/{path}`.
pub(crate) async fn file(uri: Uri) -> Response {
    let rest = uri.path().strip_prefix("/ui/files/").unwrap_or_default();
    let html = page::file(rest);
    secured(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response())
}

/// `GET /ui/app.js`.
pub(crate) async fn script() -> Response {
    secured(
        (
            [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
            SCRIPT,
        )
            .into_response(),
    )
}

/// `GET /ui/style.css`.
pub(crate) async fn style() -> Response {
    secured(([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE).into_response())
}
