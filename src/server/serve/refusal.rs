//! Why a request is not answered with what it asked for: one typed enum
//! for both transports, each variant's text naming the file (and where it
//! applies the object, component and rule). `http/error.rs` maps it to a
//! status and an error code once, `quic/refused.rs` to a ztp/1 code once;
//! nothing below them picks a status.

use zt_format::rows::RowsError;
use zt_format::slice::SliceError;

use super::gather::SliceFailure;
use super::rows::RowsFailure;
use crate::server::cpu::CpuError;
use crate::server::integrity::checks;
use crate::server::render::renderings::Refused;
use crate::server::render::summary;

/// A request's typed refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No such file, object or component.
    NotFound(String),
    /// The file's digests are still being computed.
    Hashing(String),
    /// The file is listed but not served (it failed validation): why.
    Unavailable(String),
    /// `?v=` names a version the file no longer has.
    VersionGone(String),
    /// A precondition (`If-Match`, ztp/1 `if_match`) names another version.
    PreconditionFailed(String),
    /// The file changed again while it was catalogued again: retry.
    Changing(String),
    /// The component's bytes failed its digest (and the rule).
    Corrupt(String),
    /// The bytes could not be read (the file truncated under the daemon,
    /// the disk failing).
    Unreadable(String),
    /// The object store did not answer.
    StoreUnreachable(String),
    /// The selection's patterns do not parse.
    BadSelection(String),
    /// The selection matches no object.
    NoMatch(String),
    /// What was asked for passes a per-request cap (the manifest's
    /// rendering, a decoded component).
    TooLarge(String),
    /// A component stored in a layout only `?decode=1` serves.
    LegacyLayout(String),
    /// Rows that cannot be cut as asked.
    Rows(RowsError, String),
    /// A slice that cannot be gathered as asked.
    Slice(SliceError, String),
    /// An object the summaries cannot summarise.
    CannotSummarise(String),
    /// No valid token.
    Unauthorized(String),
    /// No turn for CPU-heavy work (`limits.cpu_queue`): retry shortly.
    Busy(String),
    /// A failure of the daemon's own (details in its log).
    Internal(String),
}

impl Refusal {
    /// What the client is told.
    pub(crate) fn detail(&self) -> &str {
        match self {
            Refusal::NotFound(d)
            | Refusal::Hashing(d)
            | Refusal::Unavailable(d)
            | Refusal::VersionGone(d)
            | Refusal::PreconditionFailed(d)
            | Refusal::Changing(d)
            | Refusal::Corrupt(d)
            | Refusal::Unreadable(d)
            | Refusal::StoreUnreachable(d)
            | Refusal::BadSelection(d)
            | Refusal::NoMatch(d)
            | Refusal::TooLarge(d)
            | Refusal::LegacyLayout(d)
            | Refusal::Rows(_, d)
            | Refusal::Slice(_, d)
            | Refusal::CannotSummarise(d)
            | Refusal::Unauthorized(d)
            | Refusal::Busy(d)
            | Refusal::Internal(d) => d,
        }
    }
}

/// How long a client refused for a passing reason waits before it asks
/// again: HTTP's `Retry-After`, ztp/1's `retry_after_ms`.
pub(crate) const RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

impl Refusal {
    /// When the refusal is passing (no turn for CPU-heavy work, a file
    /// being rewritten): how long the client should wait before it asks
    /// again. `None`: asking again at once gets the same answer.
    pub(crate) fn retry_after(&self) -> Option<std::time::Duration> {
        matches!(self, Refusal::Changing(_) | Refusal::Busy(_)).then_some(RETRY_AFTER)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.detail())
    }
}

impl From<checks::CheckFailure> for Refusal {
    fn from(r: checks::CheckFailure) -> Refusal {
        match r {
            checks::CheckFailure::Corrupt(why) => Refusal::Corrupt(why),
            checks::CheckFailure::Unreadable(why) => Refusal::Unreadable(why),
        }
    }
}

impl From<Refused> for Refusal {
    fn from(r: Refused) -> Refusal {
        match r {
            Refused::BadSelect(m) => Refusal::BadSelection(m),
            Refused::NoMatch(m) => Refusal::NoMatch(m),
            Refused::TooLarge(m) => Refusal::TooLarge(m),
            Refused::Failed(m) => Refusal::Internal(m),
            Refused::Busy(m) => Refusal::Busy(m),
        }
    }
}

impl From<CpuError> for Refusal {
    fn from(e: CpuError) -> Refusal {
        match e {
            CpuError::Busy { .. } => Refusal::Busy(e.to_string()),
            CpuError::Failed { .. } => Refusal::Internal(e.to_string()),
        }
    }
}

impl From<summary::Refusal> for Refusal {
    fn from(r: summary::Refusal) -> Refusal {
        match r {
            summary::Refusal::NotFound(why) => Refusal::NotFound(why),
            summary::Refusal::Unsupported(why) => Refusal::CannotSummarise(why),
            summary::Refusal::Corrupt(why) => Refusal::Corrupt(why),
            summary::Refusal::Unreadable(why) => Refusal::Unreadable(why),
            summary::Refusal::Cpu(e) => e.into(),
        }
    }
}

impl From<RowsFailure> for Refusal {
    fn from(r: RowsFailure) -> Refusal {
        match r {
            RowsFailure::NoObject(why) => Refusal::NotFound(why),
            RowsFailure::Rows(why, e) => Refusal::Rows(e, why),
            RowsFailure::Refused(r) => r.into(),
            RowsFailure::Cpu(e) => e.into(),
        }
    }
}

impl From<SliceFailure> for Refusal {
    fn from(r: SliceFailure) -> Refusal {
        match r {
            SliceFailure::NoObject(why) => Refusal::NotFound(why),
            SliceFailure::Slice(why, e) => Refusal::Slice(e, why),
            SliceFailure::Refused(r) => r.into(),
            SliceFailure::Cpu(e) => e.into(),
        }
    }
}
