//! zt-ingest: the MATRIX-ATOM ingest pipeline of seed 002, built on the
//! atom file, the symbol map and the pack's manifest of
//! `zt_format::atoms`: inputs are cleaned (`clean`), tokenized against a
//! symbol map (`tokenize`; a map can be built from a GGUF model's
//! vocabulary, `gguf_map`), packed into an ingest pack (`pack`) and
//! checked (`verify`); an atom is drawn as SVG by `svg`. The daemon
//! serves a pack as one entry through
//! `zt_format::source::matrix_atom_pack`. Every decision the seed
//! leaves open is written down in docs/matrix-atom.md.

pub mod clean;
mod error;
pub mod gguf_map;
mod markup;
pub mod pack;
pub mod svg;
pub mod tokenize;
pub mod verify;

pub use error::{Error, Result};

/// The symbol map, now `zt_format::atoms::symbols` (kept here under its
/// old path).
pub mod symbols {
    pub use zt_format::atoms::symbols::*;
}

/// An ingest pack as a server serves it, now
/// `zt_format::source::matrix_atom_pack` (kept here under its old path).
pub mod served {
    pub use zt_format::source::matrix_atom_pack::*;
}
