//! One component of an object: a contiguous blob of stored bytes and how
//! to read it (dtype, logical type, encoding, digest, where it lives).

use crate::digest::Digest;
use crate::dtype::{DType, LogicalType};

/// How a component's bytes are stored. Open to new encodings: match with
/// a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Encoding {
    Raw,
    Zstd,
}

impl Encoding {
    /// The encoding a v1.2 `encoding` string names.
    pub fn from_name(s: &str) -> Option<Encoding> {
        match s {
            "raw" => Some(Encoding::Raw),
            "zstd" => Some(Encoding::Zstd),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Encoding::Raw => "raw",
            Encoding::Zstd => "zstd",
        }
    }
}

/// One contiguous blob and how to read it.
#[derive(Debug, Clone)]
pub struct Component {
    pub dtype: DType,
    /// The logical `type`; `None` means it equals `dtype`.
    pub logical_type: Option<LogicalType>,
    /// Absolute offset of the stored bytes.
    pub offset: u64,
    /// Stored length (compressed length for zstd).
    pub length: u64,
    /// Length after decompression; required for zstd in v1.2.
    pub uncompressed_length: Option<u64>,
    pub encoding: Encoding,
    /// Checksum of the stored bytes.
    pub digest: Option<Digest>,
    /// Whether `digest` was computed by a server from the file's bytes
    /// (for a source, or a component, that carries none of its own) rather
    /// than read from the file. Clients verify both alike; this only says
    /// who vouches for it.
    pub digest_computed: bool,
    /// Whether the bytes are built by the server from the file's header
    /// rather than being a range of the file (a GGUF string array's
    /// `offsets` and `values`): `offset` is then 0 and means nothing, and
    /// the bytes come from the component route or stream, never from a
    /// byte range of the file.
    pub synthesized: bool,
    /// The file the bytes are in, for a multi-file entry (a name in
    /// [`crate::Manifest::files`]); `None` for the served file itself. `offset`
    /// is an offset in that file.
    pub file: Option<std::sync::Arc<str>>,
    /// How to turn a legacy blob into this component's bytes; `None` for
    /// v1.2 components and for legacy ones that need no transformation.
    /// Boxed: rare, and a manifest may hold a million components.
    pub(crate) legacy: Option<Box<crate::legacy_layout::Extract>>,
    /// Index of this component's verification cache in its open file.
    pub(crate) slot: u32,
}

impl PartialEq for Component {
    /// Equal when they describe the same bytes the same way; the cache slot
    /// of an open file is not part of the description.
    fn eq(&self, other: &Self) -> bool {
        self.dtype == other.dtype
            && self.logical_type == other.logical_type
            && self.offset == other.offset
            && self.length == other.length
            && self.uncompressed_length == other.uncompressed_length
            && self.encoding == other.encoding
            && self.digest == other.digest
            && self.digest_computed == other.digest_computed
            && self.synthesized == other.synthesized
            && self.file == other.file
            && self.legacy == other.legacy
    }
}

impl Component {
    /// A raw component whose bytes a server builds rather than reads from
    /// a range of a file (see [`Component::synthesized`]), with the
    /// `sha256` of `bytes` as its digest, computed by the server.
    pub fn built(dtype: DType, bytes: &[u8]) -> Component {
        let mut c = Component::raw(dtype, None, 0, bytes.len() as u64);
        c.digest = Some(crate::DigestAlgorithm::Sha256.digest(bytes));
        c.digest_computed = true;
        c.synthesized = true;
        c
    }

    /// A raw component of the file's bytes `offset..offset + length`,
    /// without a digest.
    pub(crate) fn raw(
        dtype: DType,
        logical_type: Option<LogicalType>,
        offset: u64,
        length: u64,
    ) -> Component {
        Component {
            dtype,
            logical_type,
            offset,
            length,
            uncompressed_length: None,
            encoding: Encoding::Raw,
            digest: None,
            digest_computed: false,
            synthesized: false,
            file: None,
            legacy: None,
            slot: 0,
        }
    }

    /// A raw, undigested component of bytes `offset..offset + length` of
    /// the file, for readers outside this crate that describe ranges.
    pub fn of_file(dtype: DType, offset: u64, length: u64) -> Component {
        Component::raw(dtype, None, offset, length)
    }

    /// The logical type name: `type` when given, else the dtype.
    pub fn type_name(&self) -> &str {
        match &self.logical_type {
            Some(t) => t.name(),
            None => self.dtype.name(),
        }
    }

    /// Storage elements per logical element.
    pub fn ratio(&self) -> u64 {
        self.logical_type.as_ref().map_or(1, LogicalType::ratio)
    }

    /// The decoded length: `uncompressed_length` for zstd, else `length`.
    pub fn decoded_length(&self) -> Option<u64> {
        match self.encoding {
            Encoding::Raw => Some(self.length),
            Encoding::Zstd => self.uncompressed_length,
        }
    }

    /// Whether reading this component needs a legacy transformation
    /// (byte swapping, slicing a combined sparse blob, realignment).
    pub fn is_transformed(&self) -> bool {
        self.legacy.is_some()
    }
}
