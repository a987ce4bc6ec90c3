//! What a response's bytes are read from: a catalogued file, whose
//! components are checked against their digests before any of their
//! bytes go out, or a plain file of a Hub repository (a `config.json`, a
//! tokenizer, a README: no digests to check, its bytes sent as the file
//! holds them, its identity still checked after every read).

use std::ops::Range;
use std::sync::Arc;

use crate::server::catalog::Served;
use crate::server::integrity::checks::CheckFailure;
use crate::server::serve::plan;
use crate::server::serve::Refusal;
use crate::server::store::Blob;

/// A file that is no model file, opened for one response.
#[derive(Debug)]
pub(crate) struct Plain {
    /// Its path under the root.
    pub(crate) path: String,
    pub(crate) file: Blob,
}

/// Where a response's bytes come from.
#[derive(Debug, Clone)]
pub(crate) enum Held {
    Served(Arc<Served>),
    Plain(Arc<Plain>),
}

impl Held {
    /// The file's path under the root.
    pub(crate) fn path(&self) -> &str {
        match self {
            Held::Served(s) => &s.path,
            Held::Plain(p) => &p.path,
        }
    }

    pub(crate) fn file(&self) -> &Blob {
        match self {
            Held::Served(s) => &s.file,
            Held::Plain(p) => &p.file,
        }
    }

    /// The catalogued file, if it is one.
    pub(crate) fn served(&self) -> Option<&Arc<Served>> {
        match self {
            Held::Served(s) => Some(s),
            Held::Plain(_) => None,
        }
    }

    /// Whether the bytes may no longer be the version opened
    /// ([`Served::changed`]).
    pub(crate) fn changed(&self) -> bool {
        self.file().changed()
    }

    /// The path of the file that changed under the entry (it, or a shard
    /// of it), if one did ([`Served::stale`]).
    pub(crate) fn stale(&self) -> Option<&str> {
        match self {
            Held::Served(s) => s.stale(),
            Held::Plain(p) => p.file.changed().then_some(p.path.as_str()),
        }
    }

    /// Whether every component overlapping `span` passed its check; a
    /// plain file has none.
    pub(crate) fn is_checked_span(&self, span: &Range<u64>) -> bool {
        match self {
            Held::Served(s) => s.is_checked_span(span),
            Held::Plain(_) => true,
        }
    }

    /// Checks the components under `spans` ([`Served::check_spans`]).
    pub(crate) async fn check_spans(&self, spans: &[Range<u64>]) -> Result<(), CheckFailure> {
        match self {
            Held::Served(s) => s.check_spans(spans).await,
            Held::Plain(_) => Ok(()),
        }
    }

    /// A failed check as the request's refusal ([`plan::refused`]).
    pub(crate) fn refused(&self, failure: CheckFailure) -> Refusal {
        match self {
            Held::Served(s) => plan::refused(s, failure),
            Held::Plain(_) => failure.into(),
        }
    }
}
