//! Non-fatal findings: a newer minor version, a misaligned legacy offset.

use std::fmt;

use crate::error::Location;

/// Something a reader should tell the user about without refusing the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub at: Location,
    pub message: String,
}

impl Warning {
    pub(crate) fn new(at: Location, message: String) -> Self {
        Warning { at, message }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.at, self.message)
    }
}
