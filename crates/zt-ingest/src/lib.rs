//! zt-ingest: the MATRIX-ATOM ingest pipeline of seed 002, built on the
//! atom file of `zt_format::atoms`: inputs are cleaned (`clean`),
//! tokenized against a symbol map (`symbols`, `tokenize`; a map can be
//! built from a GGUF model's vocabulary, `gguf_map`), packed into an
//! ingest pack (`pack`) and checked (`verify`); the daemon serves a pack
//! as one entry (`served`); an atom is drawn as SVG by
//! `svg`. Every decision the seed
//! leaves open is written down in docs/matrix-atom.md.

pub mod clean;
mod error;
pub mod gguf_map;
mod markup;
pub mod pack;
pub mod served;
pub mod svg;
pub mod symbols;
pub mod tokenize;
pub mod verify;

pub use error::{Error, Result};
