//! Caps and verification settings for readers.

use crate::cbor::DEFAULT_MAX_DEPTH;
use crate::codec::DEFAULT_DECOMPRESS_CAP;

/// Default manifest cap: 1 GiB, as the specification suggests.
pub const DEFAULT_MANIFEST_CAP: u64 = 1 << 30;

/// Default cap on a manifest's estimated size in memory: 1 GiB.
pub const DEFAULT_MANIFEST_MEMORY: u64 = 1 << 30;

/// About what one object of a manifest costs a server at its peak: its
/// name, one component, its check, and the digest a server computes for
/// it while both the file's pending and served forms are held. The
/// estimate [`Limits::within_memory`] counts; measured on a safetensors
/// header of a million one-byte tensors (`docs/RELIABILITY.md`: about 260
/// bytes an object once served, about 900 at the peak of computing
/// digests).
pub const OBJECT_MEMORY: u64 = 1024;

/// Resource caps applied while reading untrusted files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest manifest accepted, in bytes.
    pub manifest_cap: u64,
    /// Largest decoded size of one zstd component, in bytes.
    pub decompress_cap: u64,
    /// Deepest CBOR nesting accepted.
    pub max_depth: usize,
    /// Largest estimated size of a manifest in memory, in bytes: its
    /// header bytes and [`OBJECT_MEMORY`] per object. A file past it is
    /// refused (`manifest-over-memory`) as its objects are read, before
    /// the rest are built.
    pub manifest_memory: u64,
    /// Threads a large manifest's objects are decoded on at once (1: the
    /// caller's alone), at most [`MAX_DECODE_THREADS`]: a map of 2,048
    /// objects or more is cut into pieces of about a thousand or more,
    /// the first decoded on the calling thread and the others on scoped
    /// threads (of the default stack size) that end with the decode. Its
    /// peak memory is then up to twice the serial decoder's, within
    /// [`OBJECT_MEMORY`]'s estimate. Default: the machine's cores, at most
    /// [`MAX_DECODE_THREADS`].
    pub decode_threads: usize,
}

/// The most threads [`Limits::decode_threads`] uses.
pub const MAX_DECODE_THREADS: usize = 8;

/// The machine's cores (as the process may use them), at most
/// [`MAX_DECODE_THREADS`]; asked once.
fn default_decode_threads() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(1, usize::from)
            .min(MAX_DECODE_THREADS)
    })
}

impl Limits {
    /// `Ok` while a manifest of `objects` objects read from `header` bytes
    /// stays within `manifest_memory`.
    pub fn within_memory(&self, objects: u64, header: u64) -> Result<(), crate::Rule> {
        let estimate = objects.saturating_mul(OBJECT_MEMORY).saturating_add(header);
        match estimate > self.manifest_memory {
            true => Err(crate::Rule::ManifestOverMemory {
                objects,
                estimate,
                cap: self.manifest_memory,
            }),
            false => Ok(()),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            manifest_cap: DEFAULT_MANIFEST_CAP,
            decompress_cap: DEFAULT_DECOMPRESS_CAP,
            max_depth: DEFAULT_MAX_DEPTH,
            manifest_memory: DEFAULT_MANIFEST_MEMORY,
            decode_threads: default_decode_threads(),
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
