//! One error type for every handler: a status and a short JSON body.
//! Internal details go to the log, not to the client.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An HTTP error response.
#[derive(Debug)]
pub(crate) struct AppError {
    pub status: StatusCode,
    pub error: &'static str,
    pub detail: String,
}

impl AppError {
    pub(crate) fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> Self {
        AppError {
            status,
            error,
            detail: detail.into(),
        }
    }

    pub(crate) fn not_found(detail: impl Into<String>) -> Self {
        AppError::new(StatusCode::NOT_FOUND, "not_found", detail)
    }

    pub(crate) fn bad_request(detail: impl Into<String>) -> Self {
        AppError::new(StatusCode::BAD_REQUEST, "bad_request", detail)
    }

    /// 412: a precondition (`header`) names another version than
    /// `what`'s current one, tagged `etag`.
    pub(crate) fn precondition_failed(what: &str, header: &str, etag: &str) -> Self {
        AppError::new(
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
            format!("{what}: {header} does not hold for the current version, ETag {etag}"),
        )
    }

    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal error");
        AppError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; see the server log",
        )
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.error, "detail": self.detail }).to_string();
        let mut r = (self.status, body).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}
