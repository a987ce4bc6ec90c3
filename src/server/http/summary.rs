//! `GET /v1/files/{path}/summaries/{object}`: a dense object's values
//! summarised ([`crate::server::render::summary`]), as JSON, under an ETag made
//! from the file's.

use std::sync::Arc;

use axum::http::{header, HeaderMap, Method};
use axum::response::{IntoResponse, Response};

use super::error::AppError;
use crate::server::catalog::etag;
use crate::server::catalog::Served;
use crate::server::serve::Refusal;
use crate::server::State;

pub(super) async fn respond(
    state: &Arc<State>,
    served: Arc<Served>,
    object: String,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Response, AppError> {
    let tag = etag::suffixed(&served.etag, "summary");
    let what = format!("{}: the summary of {object:?}", served.path);
    if let Some(answer) = super::conditional::answer(headers, method, &tag, served.modified, &what)
    {
        return answer;
    }
    let cap = state.config.limits.render_cap;
    let summary = state
        .summaries
        .get(&served, &object, cap)
        .await
        .map_err(|r| AppError::from(Refusal::from(r)))?;
    let body = serde_json::to_vec(&*summary).map_err(AppError::internal)?;
    Ok((
        [
            (header::CONTENT_TYPE, "application/json".to_owned()),
            (header::ETAG, tag),
            (header::CACHE_CONTROL, "no-cache".to_owned()),
        ],
        body,
    )
        .into_response())
}
