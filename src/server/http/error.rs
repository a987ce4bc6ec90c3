//! One error type for every handler: a status and a short JSON body.
//! Internal details go to the log, not to the client. A request's
//! [`Refusal`] becomes one here, the one place that picks its status.

use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use zt_format::rows::RowsError;
use zt_format::slice::SliceError;

use crate::server::serve::Refusal;

/// An HTTP error response.
#[derive(Debug)]
pub(crate) struct AppError {
    pub status: StatusCode,
    pub error: &'static str,
    pub detail: String,
    /// Headers the answer carries (`Retry-After`, `WWW-Authenticate`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl AppError {
    pub(crate) fn new(status: StatusCode, error: &'static str, detail: impl Into<String>) -> Self {
        AppError {
            status,
            error,
            detail: detail.into(),
            headers: Vec::new(),
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

impl From<Refusal> for AppError {
    fn from(r: Refusal) -> AppError {
        use StatusCode as S;
        let (status, error) = match &r {
            Refusal::NotFound(_) | Refusal::NoMatch(_) => (S::NOT_FOUND, "not_found"),
            Refusal::Hashing(_) => (S::SERVICE_UNAVAILABLE, "hashing"),
            Refusal::Unavailable(_) => (S::CONFLICT, "unavailable"),
            Refusal::VersionGone(_) => (S::PRECONDITION_FAILED, "version_gone"),
            Refusal::PreconditionFailed(_) => (S::PRECONDITION_FAILED, "precondition_failed"),
            Refusal::Changing(_) => (S::SERVICE_UNAVAILABLE, "changing"),
            Refusal::Corrupt(_) => (S::CONFLICT, "corrupt"),
            Refusal::Unreadable(_) => (S::SERVICE_UNAVAILABLE, "unreadable"),
            Refusal::StoreUnreachable(_) => (S::SERVICE_UNAVAILABLE, "store_unreachable"),
            Refusal::BadSelection(_) => (S::BAD_REQUEST, "bad_request"),
            Refusal::TooLarge(_) => (S::PAYLOAD_TOO_LARGE, "too_large"),
            Refusal::LegacyLayout(_) => (S::CONFLICT, "legacy_layout"),
            Refusal::Rows(RowsError::Malformed(_), _) => (S::BAD_REQUEST, "rows_malformed"),
            Refusal::Rows(RowsError::OutOfBounds { .. }, _) => {
                (S::RANGE_NOT_SATISFIABLE, "rows_out_of_bounds")
            }
            Refusal::Rows(RowsError::NotRawDense(_), _) => (S::CONFLICT, "rows_not_raw_dense"),
            Refusal::Slice(SliceError::Malformed(_), _) => (S::BAD_REQUEST, "slice_malformed"),
            Refusal::Slice(SliceError::Rank { .. } | SliceError::OutOfBounds { .. }, _) => {
                (S::RANGE_NOT_SATISFIABLE, "slice_out_of_bounds")
            }
            Refusal::Slice(SliceError::NotRawDense(_), _) => (S::CONFLICT, "slice_not_raw_dense"),
            Refusal::Slice(SliceError::TooManyPieces { .. }, _) => {
                (S::PAYLOAD_TOO_LARGE, "slice_too_many_pieces")
            }
            Refusal::CannotSummarise(_) => (S::UNPROCESSABLE_ENTITY, "cannot_summarise"),
            Refusal::Unauthorized(_) => (S::UNAUTHORIZED, "unauthorized"),
            Refusal::Busy(_) => (S::SERVICE_UNAVAILABLE, "busy"),
            Refusal::Internal(why) => return AppError::internal(why),
        };
        let mut e = AppError::new(status, error, r.detail());
        if let Some(wait) = r.retry_after() {
            // Whole seconds, rounded up: what the header carries.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            e.headers
                .push((header::RETRY_AFTER, HeaderValue::from(secs)));
        }
        if let Refusal::Unauthorized(_) = r {
            e.headers
                .push((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
        }
        e
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
        for (k, v) in self.headers {
            r.headers_mut().insert(k, v);
        }
        r
    }
}
