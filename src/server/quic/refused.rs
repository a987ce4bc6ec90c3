//! A request's refusal as ztp/1 says it: each [`Refusal`] mapped to its
//! code, the one place that does (PROTOCOL.md section 6).

use ztp_proto::{Code, ErrorMsg};

use crate::server::serve::Refusal;

/// The `error` that refuses request `id`.
pub(super) fn error(id: u64, r: Refusal) -> ErrorMsg {
    let code = code(&r);
    let retry_after_ms = r
        .retry_after()
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let message = match r {
        Refusal::Internal(why) => {
            tracing::error!(error = %why, "internal error");
            "internal error; see the server log".to_owned()
        }
        other => other.detail().to_owned(),
    };
    ErrorMsg {
        id: Some(id),
        code,
        message,
        retry_after_ms,
    }
}

/// The code a refusal carries, in an `error` and in the reset of a
/// component stream it cut.
pub(super) fn code(r: &Refusal) -> Code {
    match r {
        Refusal::NotFound(_) => Code::NotFound,
        Refusal::Hashing(_)
        | Refusal::Unavailable(_)
        | Refusal::Changing(_)
        | Refusal::LegacyLayout(_)
        | Refusal::StoreUnreachable(_)
        | Refusal::CannotSummarise(_)
        | Refusal::Busy(_) => Code::Unavailable,
        Refusal::VersionGone(_) | Refusal::PreconditionFailed(_) => Code::PreconditionFailed,
        Refusal::Corrupt(_) => Code::Corrupt,
        Refusal::Unreadable(_) => Code::ReadFailed,
        Refusal::BadSelection(_) | Refusal::NoMatch(_) | Refusal::Rows(..) | Refusal::Slice(..) => {
            Code::NoMatch
        }
        Refusal::TooLarge(_) => Code::MessageTooLarge,
        Refusal::Unauthorized(_) => Code::Unauthorized,
        Refusal::Internal(_) => Code::Internal,
    }
}
