//! The zTensor (`.zt`) container format.
//!
//! - [`ZtFile`] opens v1.2, v1.0 and v0.1 files (by path through mmap, or
//!   from an aligned buffer), validates them through one path, and hands out
//!   component bytes: zero-copy and 64-byte aligned for raw data, decoded
//!   into aligned buffers for zstd and legacy layouts. Digests are checked on
//!   first access unless [`Verify::Skip`] is chosen.
//! - [`Writer`] writes v1.2 to any `Write`, append-only and deterministic;
//!   [`write_atomic`] puts a file in place only once it is complete.
//! - [`layer_index`] and [`layer_order`] are the layer rule shared by
//!   `zt pack` and the server's stream priority; [`send_order`] applies it to
//!   a manifest, and [`select`] holds the glob rule for choosing objects.
//!   The server, the clients and the tools call these, never copies.
//! - A manifest is read one way: [`source::Probe`] reads every served kind
//!   of file (`.zt`, safetensors, GGUF, MATRIX-ATOM) into the same
//!   [`Manifest`] through a plan of byte-range reads, without doing I/O
//!   itself (a server drives it with its own reads), and [`ZtFile`] runs
//!   it over a file by path (mapped, or read when small) or bytes in
//!   memory, with the file's bytes. [`container::decode_manifest`]
//!   decodes the bare manifest a server sends (no file around it).
//!   [`layout`] places a file's blobs for writers that write out of order.
//! - [`manifest_json`] is the one JSON rendering of a manifest
//!   (`docs/manifest-json.md`), shared by `zt info --json` and the server.
//!
//! No sockets or async runtimes live here. The only `unsafe` is the mmap
//! call in the private `mmap` module, whose SIGBUS hazard is documented there.
//!
//! ```
//! use zt_format::{DType, ReadOptions, StoreOptions, Writer, ZtFile};
//!
//! let mut w = Writer::new(Vec::new(), "example.zt")?;
//! let values: Vec<f32> = vec![1.0, 2.0, 3.0, 4.0];
//! w.add_dense("layer.0.weight", &[2, 2], DType::F32, bytemuck::cast_slice(&values), StoreOptions::default())?;
//! let bytes = w.finish()?;
//!
//! let file = ZtFile::from_bytes("example.zt", &bytes, ReadOptions::default())?;
//! let t = file.tensor("layer.0.weight")?;
//! assert_eq!(t.as_slice::<f32>()?, &values[..]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// Parsers of untrusted input: every index is checked, all arithmetic explicit.
#![warn(clippy::indexing_slicing, clippy::arithmetic_side_effects)]

mod aligned;
mod atomic;
pub mod atoms;
mod attributes;
mod by_name;
mod cbor;
mod cbor_reader;
mod cbor_scan;
pub mod chunked;
pub mod codec;
mod component;
mod components;
pub mod container;
mod digest;
mod dtype;
mod element;
mod encode;
mod error;
/// The fuzz target's body, built only for fuzzing and the corpus replay.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
mod layer;
pub mod layout;
mod legacy;
mod legacy_layout;
mod manifest;
pub mod manifest_json;
mod memory;
mod mmap;
mod objects_parallel;
mod options;
mod order;
mod parse_v1;
pub mod ragged;
mod reader;
mod regular;
pub mod rows;
pub mod select;
pub mod slice;
pub mod source;
mod validate;
mod values;
mod warning;
mod writer;

pub use aligned::{
    alignment_for, AlignedBuf, Filling, ALIGNMENT, PAGE_ALIGNED_FROM, PAGE_ALIGNMENT,
};
pub use atomic::{flush, temp_path, write_atomic};
pub use by_name::ByName;
pub use cbor::DEFAULT_MAX_DEPTH;
pub use codec::{Decoder, DEFAULT_DECOMPRESS_CAP};
pub use component::{Component, Encoding};
pub use components::Components;
pub use container::{ManifestLocation, Parsed, FOOTER_LEN, MAGIC, MAGIC_V0_1};
pub use digest::{Digest, DigestAlgorithm, DigestValue, Hasher};
pub use dtype::{DType, LogicalType};
pub use element::{Data, Element, Tensor};
pub use encode::{manifest_cbor, manifest_value, write_manifest_cbor};
pub use error::{Error, Location, Result, Rule};
pub use layer::{layer_index, layer_order};
pub use legacy::LEGACY_DTYPE_ATTRIBUTE;
pub use manifest::{
    element_count, Attributes, CborValue, FilePart, Format, Manifest, Object, Objects, Origin,
    Source,
};
pub use mmap::{MappedFile, PrivateMap};
pub use options::{
    Limits, ReadOptions, Verify, DEFAULT_MANIFEST_CAP, DEFAULT_MANIFEST_MEMORY, MAX_DECODE_THREADS,
    OBJECT_MEMORY,
};
pub use order::send_order;
pub use reader::{ComponentReport, ComponentStatus, ZtFile};
pub use regular::{open_regular, NOT_REGULAR};
pub use validate::BlobArea;
pub use values::{NoValues, Values};
pub use warning::Warning;
pub use writer::{ComponentData, StoreOptions, Writer};

/// The specification version this crate writes.
pub const SPEC_VERSION: &str = "1.2.0";
