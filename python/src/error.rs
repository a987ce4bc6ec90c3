//! Python exceptions: `ztserve.Error`, and under it one class per kind of
//! failure a caller handles differently. Each carries `object` and
//! `component` (or `None`) when the failure concerns one, and `rule` when
//! a named rule of the format or the protocol failed.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use zt_client::{Error as ClientError, Status};
use zt_format::Rule;
use ztp_proto::Code;

create_exception!(
    ztserve,
    Error,
    PyException,
    "Every error ztserve raises; `object`, `component` and `rule` say where, when known."
);
create_exception!(
    ztserve,
    ConnectError,
    Error,
    "The server could not be reached, its certificate was not trusted, or the connection was lost."
);
create_exception!(
    ztserve,
    NotFoundError,
    Error,
    "No such file, object or component."
);
create_exception!(
    ztserve,
    RefusedError,
    Error,
    "The server refused the request (a missing or wrong token, the file unavailable, a limit)."
);
create_exception!(
    ztserve,
    IntegrityError,
    Error,
    "Bytes did not match their digest, or carried none where one is required; nothing was returned."
);
create_exception!(
    ztserve,
    ProtocolError,
    Error,
    "The server, or a file, broke the protocol or the format (not a digest)."
);

/// What went wrong, before it becomes a Python exception: kept in Rust
/// so that failures recorded on a runtime thread can be raised later on
/// the caller's.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) kind: Kind,
    pub(crate) message: String,
    pub(crate) object: Option<String>,
    pub(crate) component: Option<String>,
    pub(crate) rule: Option<&'static str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Other,
    Connect,
    NotFound,
    Refused,
    Integrity,
    Protocol,
}

impl Failure {
    pub(crate) fn new(kind: Kind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
            object: None,
            component: None,
            rule: None,
        }
    }

    /// The same failure, about `object` (and `component`) if it names none.
    pub(crate) fn about(mut self, object: &str, component: Option<&str>) -> Failure {
        if self.object.is_none() {
            self.object = Some(object.to_owned());
            self.component = component.map(str::to_owned);
        }
        self
    }

    pub(crate) fn into_py(self) -> PyErr {
        let err = match self.kind {
            Kind::Other => Error::new_err(self.message),
            Kind::Connect => ConnectError::new_err(self.message),
            Kind::NotFound => NotFoundError::new_err(self.message),
            Kind::Refused => RefusedError::new_err(self.message),
            Kind::Integrity => IntegrityError::new_err(self.message),
            Kind::Protocol => ProtocolError::new_err(self.message),
        };
        Python::attach(|py| {
            let value = err.value(py);
            let _ = value.setattr("object", self.object);
            let _ = value.setattr("component", self.component);
            let _ = value.setattr("rule", self.rule);
        });
        err
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Failure {
        let message = e.to_string();
        let (kind, at) = match &e {
            ClientError::Transport(_) | ClientError::Tls(_) => (Kind::Connect, None),
            // A selection that matches no object names none it has.
            ClientError::Server { status, .. }
                if status.is_not_found() || *status == Status::Ztp(Code::NoMatch) =>
            {
                (Kind::NotFound, None)
            }
            ClientError::Server {
                status: Status::Ztp(Code::Corrupt),
                ..
            } => (Kind::Integrity, None),
            ClientError::Server { .. } => (Kind::Refused, None),
            ClientError::Protocol(_) | ClientError::Changed { .. } => (Kind::Protocol, None),
            ClientError::Corrupt { at, .. } | ClientError::Unverifiable { at, .. } => {
                (Kind::Integrity, at.clone())
            }
            ClientError::Format(f) => return Failure::from(f),
            ClientError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                (Kind::NotFound, None)
            }
            _ => (Kind::Other, None),
        };
        let mut f = Failure::new(kind, message);
        if let Some(at) = at {
            f.object = Some(at.object);
            f.component = Some(at.component);
        }
        f
    }
}

impl From<&zt_format::Error> for Failure {
    fn from(e: &zt_format::Error) -> Failure {
        let message = e.to_string();
        match e {
            zt_format::Error::Invalid { at, rule } => {
                let kind = match rule {
                    Rule::DigestMismatch { .. } | Rule::UnknownDigestAlgorithm { .. } => {
                        Kind::Integrity
                    }
                    _ => Kind::Protocol,
                };
                Failure {
                    kind,
                    message,
                    object: at.object.clone(),
                    component: at.component.clone(),
                    rule: Some(rule.name()),
                }
            }
            zt_format::Error::Io { source, .. } => {
                let kind = if source.kind() == std::io::ErrorKind::NotFound {
                    Kind::NotFound
                } else {
                    Kind::Other
                };
                Failure::new(kind, message)
            }
            _ => Failure::new(Kind::Other, message),
        }
    }
}
