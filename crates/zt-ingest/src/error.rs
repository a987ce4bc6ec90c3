//! Why an ingest step failed: the file, and the rule or reason.

/// An ingest error; its message names the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A symbol map breaks a rule.
    #[error("{file}: {why}")]
    Map { file: String, why: String },
    /// An input cannot be cleaned (not UTF-8, not JSON...).
    #[error("{file}: {why}")]
    Input { file: String, why: String },
    /// Packing refused the ids (a rule of the atom file).
    #[error("{file}: {source}")]
    Pack {
        file: String,
        #[source]
        source: zt_format::atoms::pack::PackError,
    },
    /// A pack or atom file breaks a rule.
    #[error("{file}: {why}")]
    Verify { file: String, why: String },
    #[error("{file}: {context}: {source}")]
    Io {
        file: String,
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// A pack's file (its manifest, its symbol map) breaks a rule of
/// `zt_format::atoms`.
impl From<zt_format::atoms::ingest::PackFileError> for Error {
    fn from(e: zt_format::atoms::ingest::PackFileError) -> Error {
        Error::Verify {
            file: e.file,
            why: e.why,
        }
    }
}

impl Error {
    pub(crate) fn map(file: &str, why: impl Into<String>) -> Error {
        Error::Map {
            file: file.to_owned(),
            why: why.into(),
        }
    }

    pub(crate) fn input(file: &str, why: impl Into<String>) -> Error {
        Error::Input {
            file: file.to_owned(),
            why: why.into(),
        }
    }

    pub(crate) fn verify(file: &str, why: impl Into<String>) -> Error {
        Error::Verify {
            file: file.to_owned(),
            why: why.into(),
        }
    }

    pub(crate) fn io(file: &str, context: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            file: file.to_owned(),
            context,
            source,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
