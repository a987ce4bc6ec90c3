//! Errors of the format layer.
//!
//! Every error carries its [`Location`]: the file, and where known the object
//! and component at fault. The [`Rule`] says which rule of the format was
//! broken, in words a user can act on.

use std::fmt;

/// Where in a file an error was found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    /// The file, as the caller named it (a path or a label for a buffer).
    pub file: String,
    /// The object, when the error concerns one.
    pub object: Option<String>,
    /// The component of that object, when the error concerns one.
    pub component: Option<String>,
}

impl Location {
    pub(crate) fn file(file: &str) -> Self {
        Location {
            file: file.to_owned(),
            object: None,
            component: None,
        }
    }

    pub(crate) fn object(&self, object: &str) -> Self {
        Location {
            file: self.file.clone(),
            object: Some(object.to_owned()),
            component: None,
        }
    }

    pub(crate) fn component(&self, object: &str, component: &str) -> Self {
        Location {
            file: self.file.clone(),
            object: Some(object.to_owned()),
            component: Some(component.to_owned()),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(o) = &self.object {
            write!(f, ": object {o:?}")?;
        }
        if let Some(c) = &self.component {
            write!(f, ", component {c:?}")?;
        }
        Ok(())
    }
}

/// The rule a file broke. The [`Rule::name`] of each variant is stable and
/// names the matching file in the `tests/reject/` corpus.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rule {
    #[error("file is {size} bytes, too short for a zTensor header and footer")]
    TooShort { size: u64 },
    #[error("bad header magic {found:?} (expected \"ZTEN1000\" or legacy \"ZTEN0001\")")]
    HeaderMagic { found: String },
    #[error("bad footer magic {found:?} (expected \"ZTEN1000\")")]
    FooterMagic { found: String },
    #[error("manifest size {size} exceeds the cap of {cap} bytes")]
    ManifestOverCap { size: u64, cap: u64 },
    #[error("{objects} objects or more would take about {estimate} bytes in memory, over the cap of {cap} bytes")]
    ManifestOverMemory {
        objects: u64,
        estimate: u64,
        cap: u64,
    },
    #[error("manifest size {size} does not fit in a {file_size}-byte file (at most {max})")]
    ManifestTooLarge { size: u64, file_size: u64, max: u64 },
    #[error("manifest is not valid CBOR: {detail}")]
    CborSyntax { detail: String },
    #[error("manifest CBOR nests deeper than {limit} levels")]
    CborTooDeep { limit: usize },
    #[error("manifest root is {found}, expected a {expected}")]
    ManifestNotMap {
        found: &'static str,
        expected: &'static str,
    },
    #[error("duplicate key {key:?} in {context}")]
    DuplicateKey { key: String, context: String },
    #[error("missing required field {field:?}")]
    MissingField { field: &'static str },
    #[error("field {field:?} has the wrong type: expected {expected}")]
    FieldType {
        field: String,
        expected: &'static str,
    },
    #[error("version {version:?} is not supported: {reason}")]
    Version { version: String, reason: String },
    #[error("offset {offset} is not a multiple of 64")]
    Misaligned { offset: u64 },
    #[error("offset {offset} + length {length} overflows")]
    RangeOverflow { offset: u64, length: u64 },
    #[error("bytes {start}..{end} run outside the blob area {area_start}..{area_end}")]
    OutOfBounds {
        start: u64,
        end: u64,
        area_start: u64,
        area_end: u64,
    },
    #[error("bytes {start}..{end} overlap object {other_object:?} component {other_component:?}")]
    Overlap {
        start: u64,
        end: u64,
        other_object: String,
        other_component: String,
    },
    #[error("length {actual} does not match shape {shape:?} x {dtype} ({expected} bytes)")]
    LengthMismatch {
        actual: u64,
        expected: u64,
        shape: Vec<u64>,
        dtype: String,
    },
    #[error("length {length} is not a whole number of {dtype} elements")]
    PartialElement { length: u64, dtype: String },
    #[error("shape {shape:?} has more elements than fit in 64 bits")]
    ShapeOverflow { shape: Vec<u64> },
    #[error("unknown dtype {value:?}{hint}")]
    UnknownDtype { value: String, hint: String },
    #[error("unknown encoding {value:?} (v1.2 allows \"raw\" and \"zstd\")")]
    UnknownEncoding { value: String },
    #[error("type {logical:?} requires dtype {expected}, found {found}")]
    TypeDtype {
        logical: String,
        expected: &'static str,
        found: String,
    },
    #[error("malformed digest {value:?}: {reason}")]
    MalformedDigest { value: String, reason: &'static str },
    #[error("sparse index component must have dtype u64, found {found}")]
    SparseIndexDtype { found: String },
    #[error("format {format:?} requires component {role:?}")]
    MissingComponent { format: String, role: &'static str },
    #[error("zstd component has no uncompressed_length")]
    ZstdWithoutLength,
    #[error("uncompressed_length {length} exceeds the decompression cap of {cap} bytes")]
    DecompressOverCap { length: u64, cap: u64 },
    #[error("zstd data is corrupt: {detail}")]
    ZstdCorrupt { detail: String },
    #[error("zstd data decodes to {actual} bytes, expected {expected}")]
    ZstdLength { actual: u64, expected: u64 },
    #[error("digest mismatch: file says {expected}, data hashes to {actual}")]
    DigestMismatch { expected: String, actual: String },
    #[error("digest algorithm {algorithm:?} is unknown, so the data cannot be verified")]
    UnknownDigestAlgorithm { algorithm: String },
    #[error("digest algorithm {algorithm:?} is not one the format names (sha256, crc32c), so a .zt file cannot carry it")]
    DigestNotInFormat { algorithm: &'static str },
    #[error("legacy sparse blob of {length} bytes does not match its shape {shape:?}: {detail}")]
    LegacySparseLayout {
        length: u64,
        shape: Vec<u64>,
        detail: String,
    },
    #[error("bool data holds byte {value:#04x} at element {index}, not 0 or 1")]
    BoolValue { value: u8, index: u64 },
    #[error("a view of {requested} cannot be taken of {dtype} data: {reason}")]
    ViewType {
        requested: &'static str,
        dtype: String,
        reason: &'static str,
    },
    #[error("no object named {name:?}")]
    NoSuchObject { name: String },
    #[error("object has no component {role:?}")]
    NoSuchComponent { role: String },
    #[error("file has {actual} bytes, but the manifest was read from a {expected}-byte file")]
    FileChanged { actual: u64, expected: u64 },
    #[error(
        "unknown source {value:?} (known: zt, safetensors, safetensors-index, gguf, matrix-atom)"
    )]
    UnknownSource { value: String },
    #[error("{detail}")]
    Header { rule: &'static str, detail: String },
    #[error("a ragged object's shape must be [rows], found {shape:?}")]
    RaggedShape { shape: Vec<u64> },
    #[error("ragged offsets hold {actual} bytes, expected (rows + 1) x 8 = {expected}")]
    RaggedOffsetsLength { actual: u64, expected: u64 },
    #[error("ragged offsets {detail}")]
    RaggedOffsets { detail: String },
    #[error("component lives in file {file:?}, which the manifest's files do not list")]
    UnknownFile { file: String },
    #[error("the manifest's files name {file:?}, which is not a plain relative path below the entry (no empty, `.` or `..` parts, no leading `/`, no `\\`)")]
    FilePath { file: String },
}

impl Rule {
    /// Whether the rule is CBOR's own (syntax, nesting, a map's key given
    /// twice), broken whatever the manifest's version.
    pub(crate) fn is_cbor(&self) -> bool {
        matches!(
            self,
            Rule::CborSyntax { .. } | Rule::CborTooDeep { .. } | Rule::DuplicateKey { .. }
        )
    }

    /// A short, stable, kebab-case name for the rule.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::TooShort { .. } => "too-short",
            Rule::HeaderMagic { .. } => "header-magic",
            Rule::FooterMagic { .. } => "footer-magic",
            Rule::ManifestOverCap { .. } => "manifest-over-cap",
            Rule::ManifestOverMemory { .. } => "manifest-over-memory",
            Rule::ManifestTooLarge { .. } => "manifest-larger-than-file",
            Rule::CborSyntax { .. } => "cbor-syntax",
            Rule::CborTooDeep { .. } => "cbor-too-deep",
            Rule::ManifestNotMap { .. } => "manifest-not-map",
            Rule::DuplicateKey { .. } => "duplicate-key",
            Rule::MissingField { .. } => "missing-field",
            Rule::FieldType { .. } => "field-type",
            Rule::Version { .. } => "version",
            Rule::Misaligned { .. } => "misaligned-offset",
            Rule::RangeOverflow { .. } => "range-overflow",
            Rule::OutOfBounds { .. } => "out-of-bounds",
            Rule::Overlap { .. } => "overlap",
            Rule::LengthMismatch { .. } => "length-mismatch",
            Rule::PartialElement { .. } => "partial-element",
            Rule::ShapeOverflow { .. } => "shape-overflow",
            Rule::UnknownDtype { .. } => "unknown-dtype",
            Rule::UnknownEncoding { .. } => "unknown-encoding",
            Rule::TypeDtype { .. } => "type-dtype",
            Rule::MalformedDigest { .. } => "malformed-digest",
            Rule::SparseIndexDtype { .. } => "sparse-index-dtype",
            Rule::MissingComponent { .. } => "missing-component",
            Rule::ZstdWithoutLength => "zstd-without-length",
            Rule::DecompressOverCap { .. } => "decompress-over-cap",
            Rule::ZstdCorrupt { .. } => "zstd-corrupt",
            Rule::ZstdLength { .. } => "zstd-length",
            Rule::DigestMismatch { .. } => "digest-mismatch",
            Rule::UnknownDigestAlgorithm { .. } => "unknown-digest-algorithm",
            Rule::DigestNotInFormat { .. } => "digest-not-in-format",
            Rule::LegacySparseLayout { .. } => "legacy-sparse-layout",
            Rule::BoolValue { .. } => "bool-value",
            Rule::ViewType { .. } => "view-type",
            Rule::NoSuchObject { .. } => "no-such-object",
            Rule::NoSuchComponent { .. } => "no-such-component",
            Rule::FileChanged { .. } => "file-changed",
            Rule::UnknownSource { .. } => "unknown-source",
            Rule::Header { rule, .. } => rule,
            Rule::RaggedShape { .. } => "ragged-shape",
            Rule::RaggedOffsetsLength { .. } => "ragged-offsets-length",
            Rule::RaggedOffsets { .. } => "ragged-offsets",
            Rule::UnknownFile { .. } => "unknown-file",
            Rule::FilePath { .. } => "file-path",
        }
    }

    /// Whether this error means "the data could not be verified" rather than
    /// "the data is wrong": the `zt` tool gives these exit code 3.
    pub fn is_unverifiable(&self) -> bool {
        matches!(self, Rule::UnknownDigestAlgorithm { .. })
    }
}

/// An error of the format layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file breaks a rule of the format.
    #[error("{at}: {rule}")]
    Invalid { at: Location, rule: Rule },
    /// Reading or writing failed.
    #[error("{at}: {context}")]
    Io {
        at: Location,
        context: &'static str,
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn invalid(at: Location, rule: Rule) -> Self {
        Error::Invalid { at, rule }
    }

    pub(crate) fn io(at: Location, context: &'static str, source: std::io::Error) -> Self {
        Error::Io {
            at,
            context,
            source,
        }
    }

    /// A read of `file`'s header that failed: what the I/O that drives a
    /// [`crate::source::Probe`] reports.
    pub fn reading_header(file: &str, source: std::io::Error) -> Self {
        Error::io(Location::file(file), "reading the header", source)
    }

    /// The broken rule, when this is a validation error.
    pub fn rule(&self) -> Option<&Rule> {
        match self {
            Error::Invalid { rule, .. } => Some(rule),
            Error::Io { .. } => None,
        }
    }

    /// Where the error was found.
    pub fn location(&self) -> &Location {
        match self {
            Error::Invalid { at, .. } | Error::Io { at, .. } => at,
        }
    }
}

/// Result alias for the format layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;
