//! Caps and verification settings for readers.

use crate::cbor::DEFAULT_MAX_DEPTH;
use crate::codec::DEFAULT_DECOMPRESS_CAP;

/// Default manifest cap: 1 GiB, as the specification suggests.
pub const DEFAULT_MANIFEST_CAP: u64 = 1 << 30;

/// Resource caps applied while reading untrusted files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest manifest accepted, in bytes.
    pub manifest_cap: u64,
    /// Largest decoded size of one zstd component, in bytes.
    pub decompress_cap: u64,
    /// Deepest CBOR nesting accepted.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            manifest_cap: DEFAULT_MANIFEST_CAP,
            decompress_cap: DEFAULT_DECOMPRESS_CAP,
            max_depth: DEFAULT_MAX_DEPTH,
        }
    }
}

/// Whether digests are checked when component bytes are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Verify {
    /// Check every digest on first access; refuse unknown algorithms.
    #[default]
    Digests,
    /// Check known digests; let components with unknown algorithms through.
    AllowUnknownAlgorithms,
    /// Check nothing. Callers must opt in to this explicitly.
    Skip,
}

/// Options for opening a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadOptions {
    pub limits: Limits,
    pub verify: Verify,
}
