//! The in-memory model that every version of the format is read into.

use std::collections::BTreeMap;

use crate::by_name::ByName;
use crate::component::Component;
use crate::components::Components;

pub use crate::attributes::{Attributes, CborValue};

/// A manifest's objects by name, in name order (a sorted vector: see
/// [`ByName`]).
pub type Objects = ByName<Object>;

/// Which revision of the container a manifest was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `ZTEN1000` header and footer, a map with `objects` (v1.1 and v1.2).
    V1,
    /// `ZTEN1000` header only, a map with `tensors`.
    V1_0,
    /// `ZTEN0001` header, a CBOR array of tensor maps.
    V0_1,
}

impl Origin {
    /// Whether this is a legacy (pre-v1.1) file.
    pub fn is_legacy(self) -> bool {
        !matches!(self, Origin::V1)
    }
}

/// Which kind of file a manifest describes. Offsets in the manifest are
/// offsets in that file, whatever its kind; only `.zt` files promise
/// 64-byte-aligned components and a footer after them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// A zTensor file (v1.2, v1.0 or v0.1).
    Zt,
    /// A `.safetensors` file.
    Safetensors,
    /// A sharded safetensors checkpoint named by its `*.safetensors.index.json`.
    SafetensorsIndex,
    /// A GGUF file (v2 or v3).
    Gguf,
    /// A MATRIX-ATOM token-atom file, or its SVG-Tensor projection.
    MatrixAtom,
    /// A MATRIX-ATOM ingest pack named by its `ingest_manifest.json`: the
    /// atom file, its projection and its symbol map as one entry.
    MatrixAtomPack,
}

impl Source {
    /// Every source, in the order the documentation lists them.
    pub const ALL: [Source; 6] = [
        Source::Zt,
        Source::Safetensors,
        Source::SafetensorsIndex,
        Source::Gguf,
        Source::MatrixAtom,
        Source::MatrixAtomPack,
    ];

    /// The name on the wire (`source` in the manifest's CBOR and JSON).
    pub fn name(self) -> &'static str {
        match self {
            Source::Zt => "zt",
            Source::Safetensors => "safetensors",
            Source::SafetensorsIndex => "safetensors-index",
            Source::Gguf => "gguf",
            Source::MatrixAtom => "matrix-atom",
            Source::MatrixAtomPack => "matrix-atom-pack",
        }
    }

    /// The source a wire name names.
    pub fn from_name(s: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the file's components lie on 64-byte boundaries between a
    /// header and a footer (the `.zt` layout); other sources' offsets may
    /// fall anywhere in the file.
    pub fn is_aligned(self) -> bool {
        self == Source::Zt
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The root of a manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The `version` string as written (`"1.2.0"`, `"1.0"`, or `"0.1.0"` for v0.1 files).
    pub version: String,
    /// The container revision the manifest came from.
    pub origin: Origin,
    /// The kind of file the manifest describes.
    pub source: Source,
    /// The other files a multi-file entry's components live in (a sharded
    /// checkpoint's shards), by name relative to the entry's directory:
    /// each with its size and its own ETag. Empty for a single file.
    pub files: BTreeMap<String, FilePart>,
    /// File attributes.
    pub attributes: Attributes,
    /// Objects by name; iteration is in name order, as v1.2 writers emit them.
    pub objects: Objects,
}

impl Manifest {
    /// An empty v1.2 manifest.
    pub fn new() -> Self {
        Manifest {
            version: crate::SPEC_VERSION.to_owned(),
            origin: Origin::V1,
            source: Source::Zt,
            files: BTreeMap::new(),
            attributes: Attributes::new(),
            objects: Objects::new(),
        }
    }

    /// The component of `object` in `role`, if there is one.
    pub fn component(&self, object: &str, role: &str) -> Option<&Component> {
        self.objects.get(object)?.components.get(role)
    }

    /// Every component, with the object and role it belongs to.
    pub fn components(&self) -> impl Iterator<Item = (&str, &str, &Component)> {
        self.objects
            .iter()
            .flat_map(|(o, obj)| obj.components.iter().map(move |(c, comp)| (o, c, comp)))
    }
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest::new()
    }
}

/// One file of a multi-file entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    pub size: u64,
    /// The file's strong ETag, as its own entry serves it.
    pub etag: Option<String>,
}

/// How an object's components are laid out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Format {
    Dense,
    SparseCsr,
    SparseCoo,
    QuantizedGroup,
    /// A GGUF block-quantized tensor (Q4_0, Q8_0, Q4_K, ...): one `u8`
    /// `data` component served as stored, whose `type` is the ggml type
    /// name in lower case; `shape` is the logical shape.
    GgufBlock,
    /// A blob (ragged) tensor: `shape` is `[rows]`, `offsets` holds
    /// `rows + 1` `u64` positions into `values` (starting at 0, never
    /// decreasing, the last equal to the number of values); row `i` is
    /// `values[offsets[i]..offsets[i + 1]]`. A list of strings is a ragged
    /// `u8` object.
    Ragged,
    /// Bytes of a source type that has no dtype of ours (a safetensors or
    /// GGUF type we cannot express): one `u8` `data` component served as
    /// stored, with the source's type name and the reason in the object's
    /// attributes (`source_type`, `reason`).
    Opaque,
    /// A format this reader does not know: kept, and served as opaque components.
    Other(String),
}

impl Format {
    pub fn parse(s: &str) -> Format {
        match s {
            "dense" => Format::Dense,
            "sparse_csr" => Format::SparseCsr,
            "sparse_coo" => Format::SparseCoo,
            "quantized_group" => Format::QuantizedGroup,
            "opaque" => Format::Opaque,
            "gguf_block" => Format::GgufBlock,
            "ragged" => Format::Ragged,
            other => Format::Other(other.to_owned()),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Format::Dense => "dense",
            Format::SparseCsr => "sparse_csr",
            Format::SparseCoo => "sparse_coo",
            Format::QuantizedGroup => "quantized_group",
            Format::Opaque => "opaque",
            Format::GgufBlock => "gguf_block",
            Format::Ragged => "ragged",
            Format::Other(s) => s,
        }
    }

    /// The components a format requires.
    pub fn required_components(&self) -> &'static [&'static str] {
        match self {
            Format::Dense => &["data"],
            Format::SparseCsr => &["values", "indices", "indptr"],
            Format::SparseCoo => &["values", "coords"],
            Format::QuantizedGroup => &["packed_weight", "scales"],
            Format::Opaque | Format::GgufBlock => &["data"],
            Format::Ragged => &["offsets", "values"],
            Format::Other(_) => &[],
        }
    }

    /// The components that hold sparse indices and so must be `u64`.
    pub fn index_components(&self) -> &'static [&'static str] {
        match self {
            Format::SparseCsr => &["indices", "indptr"],
            Format::SparseCoo => &["coords"],
            Format::Ragged => &["offsets"],
            _ => &[],
        }
    }
}

/// One logical tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    pub shape: Vec<u64>,
    pub format: Format,
    pub attributes: Attributes,
    /// Components by role; iteration is in role order.
    pub components: Components,
}

impl Object {
    /// The number of logical elements, `None` on overflow.
    pub fn element_count(&self) -> Option<u64> {
        element_count(&self.shape)
    }

    /// The smallest offset among the components: where the object's data begins.
    pub fn first_offset(&self) -> Option<u64> {
        self.components.values().map(|c| c.offset).min()
    }

    /// The total bytes this object occupies on disk.
    pub fn stored_bytes(&self) -> u64 {
        self.components
            .values()
            .fold(0u64, |acc, c| acc.saturating_add(c.length))
    }
}

/// The product of a shape; 1 for a scalar, `None` on overflow.
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}
