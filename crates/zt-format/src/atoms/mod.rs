//! MATRIX-ATOM (seed 002): fixed-width token atoms in a `MTRXATOM` file
//! (`header`, the document `index`, `pack`ing token ids), their
//! SVG-Tensor projection (`svg_tensor`), and an ingest pack's other files
//! (`ingest`: the pack's manifest; `symbols`: the symbol map): the
//! format's side of the ingest pipeline that `zt ingest` builds and the
//! server serves as a source (`source::matrix_atom_pack`).

pub mod header;
pub mod index;
pub mod ingest;
pub mod pack;
pub mod slice;
pub mod svg_tensor;
pub mod symbols;

/// The file that names an ingest pack (seed 002 section 6); the daemon
/// serves a pack as one entry at its path.
pub const PACK_MANIFEST: &str = "ingest_manifest.json";

pub use header::{
    crc32, AtomDtype, AtomHeader, AtomRule, Crc32, FLAG_INDEX, FLAG_SVG_TENSOR, HEADER_LEN, MAGIC,
};
