//! Why a client call failed.
//!
//! One enum for every call of the crate, so a caller reacts with a `match`
//! (retry, resume, report, give up) instead of inspecting messages. Every
//! message names the URL or file, and where it applies the object and
//! component; the server's own words are quoted to their first 300
//! characters.

use ztp_proto::Code;

/// The result of a client call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A client call's failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL or an option cannot be used: a bad URL or scheme, a path
    /// that decodes to no file name (not UTF-8, or a NUL), a malformed
    /// fingerprint, an unreadable CA file, a selection pattern that is
    /// not a glob.
    #[error("{0}")]
    Usage(String),
    /// Connecting failed, the connection was lost, or a transfer broke off
    /// or went silent. A fetch interrupted this way can be resumed.
    #[error("{0}")]
    Transport(String),
    /// The server's certificate was not trusted: the message says what
    /// was wrong with it (unknown issuer, expired, name mismatch, a CA
    /// certificate used as the server's own, not the pinned fingerprint)
    /// and which option would trust it. No retry fixes it; another server
    /// (a mirror) may present a certificate that passes.
    #[error("{0}")]
    Tls(String),
    /// The server answered the request with an error: its ztp/1 code or
    /// HTTP status, and its message. `retry_after`: the server's word that
    /// the refusal is passing (it is busy) and how long to wait before
    /// asking again; the client has waited out such refusals for at most
    /// [`Options::busy_wait`](crate::Options::busy_wait) before it reports
    /// one (none when the next wait would pass it).
    #[error("{message}")]
    Server {
        status: Status,
        message: String,
        retry_after: Option<std::time::Duration>,
    },
    /// The server broke ztp/1, or answered HTTP with something other than
    /// what was asked for (other bytes, no `Content-Range`, no ETag). The
    /// QUIC connection is closed with `protocol_violation`.
    #[error("{0}")]
    Protocol(String),
    /// Component bytes that failed their digest (checked here, or by the
    /// server, which refused to send them), or that are malformed. No
    /// retry or resume can fix this.
    #[error("{message}")]
    Corrupt {
        /// The object and component at fault, when one is.
        at: Option<At>,
        message: String,
    },
    /// Bytes that cannot be verified: an unknown digest algorithm without
    /// `allow_unverified`, or no digest with `require_digest`.
    #[error("{message}")]
    Unverifiable { at: Option<At>, message: String },
    /// The file changed on the server: its ETag is no longer the one the
    /// fetch started with, so versions would mix.
    #[error("{url}: the file changed on the server {detail}")]
    Changed { url: String, detail: String },
    /// The remote file's structure is invalid (its manifest, its footer).
    #[error(transparent)]
    Format(#[from] zt_format::Error),
    /// A local file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

/// An object and one of its components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct At {
    pub object: String,
    pub component: String,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "object {:?}, component {:?}",
            self.object, self.component
        )
    }
}

/// How a server answered a request it refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// A ztp/1 error code.
    Ztp(Code),
    /// An HTTP status code.
    Http(u16),
}

impl Status {
    /// Whether the file (or the path) does not exist on the server.
    pub fn is_not_found(self) -> bool {
        matches!(self, Status::Ztp(Code::NotFound) | Status::Http(404))
    }

    /// Whether the server wanted a (valid) bearer token.
    pub fn is_unauthorized(self) -> bool {
        matches!(
            self,
            Status::Ztp(Code::Unauthorized) | Status::Http(401 | 403)
        )
    }
}

impl Error {
    /// The same failure again, for a later request that did not try
    /// anew: its kind kept, `note` added to its message (a certificate
    /// refused stays a TLS error, which no retry fixes).
    pub(crate) fn again(&self, note: &str) -> Error {
        match self {
            Error::Tls(m) => Error::Tls(format!("{m}{note}")),
            Error::Usage(m) => Error::Usage(format!("{m}{note}")),
            other => Error::Transport(format!("{other}{note}")),
        }
    }

    /// Whether a later attempt may succeed where this one failed (the
    /// network, a server that was shutting down or busy, a file replaced
    /// on the server): what running `zt fetch` again resumes or restarts.
    pub fn is_transient(&self) -> bool {
        match self {
            // A rerun starts over on the new version.
            Error::Transport(_) | Error::Changed { .. } => true,
            Error::Server {
                retry_after: Some(_),
                ..
            } => true,
            Error::Server { status, .. } => matches!(
                status,
                Status::Ztp(
                    Code::ShuttingDown
                        | Code::ServerBusy
                        | Code::TooManyRequests
                        | Code::ReadFailed
                        | Code::Stalled
                ) | Status::Http(429 | 502 | 503 | 504)
            ),
            _ => false,
        }
    }

    /// How long the server asked the client to wait before asking again,
    /// when it refused for a passing reason (it was busy).
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        match self {
            Error::Server { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// A server's refusal with `note` after its message; any other error
    /// as it is.
    pub(crate) fn noted(mut self, note: &str) -> Error {
        if let Error::Server { message, .. } = &mut self {
            message.push_str(note);
        }
        self
    }

    /// The same error with `prefix: ` before its message (the file, the
    /// request it belonged to); the kind is kept.
    pub(crate) fn within(self, prefix: &str) -> Error {
        let p = |m: String| format!("{prefix}: {m}");
        match self {
            Error::Usage(m) => Error::Usage(p(m)),
            Error::Transport(m) => Error::Transport(p(m)),
            Error::Tls(m) => Error::Tls(p(m)),
            Error::Server {
                status,
                message,
                retry_after,
            } => Error::Server {
                status,
                message: p(message),
                retry_after,
            },
            Error::Protocol(m) => Error::Protocol(p(m)),
            Error::Corrupt { at, message } => Error::Corrupt {
                at,
                message: p(message),
            },
            Error::Unverifiable { at, message } => Error::Unverifiable {
                at,
                message: p(message),
            },
            other => other,
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corrupt(at: &At, why: impl std::fmt::Display) -> Error {
        Error::Corrupt {
            at: Some(at.clone()),
            message: format!("{at}: {why}"),
        }
    }
}

/// A server's own words (an error body, an `error` message), cut to their
/// first 300 characters to quote in an error.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!(
            "{} [cut at 300 characters]",
            text.get(..cut).unwrap_or(text)
        ),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_keep_the_kind_and_quotes_are_cut() {
        let e = Error::Transport("gone".into()).within("m.zt");
        assert!(matches!(&e, Error::Transport(m) if m == "m.zt: gone"));
        assert!(e.is_transient());
        let at = At {
            object: "w".into(),
            component: "data".into(),
        };
        let e = Error::corrupt(&at, "digest mismatch").within("m.zt");
        assert_eq!(
            e.to_string(),
            "m.zt: object \"w\", component \"data\": digest mismatch"
        );
        assert!(matches!(e, Error::Corrupt { at: Some(a), .. } if a.object == "w"));
        let long = "x".repeat(1000);
        assert!(quote(&long).ends_with("[cut at 300 characters]"));
        assert_eq!(quote("short"), "short");
        assert!(Status::Http(404).is_not_found());
        assert!(Status::Ztp(Code::Unauthorized).is_unauthorized());
    }
}
