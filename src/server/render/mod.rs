//! Rendering: what the daemon makes from a served file rather than reads
//! from it. A manifest rendered for a request (JSON, CBOR or the ztp/1
//! message, a selection applied), made once per file version and
//! selection and shared by concurrent requests in a byte-bounded cache
//! (`renderings`); and a dense object's values summarised for the web
//! page (`summary`).
//!
//! May use: `catalog` (the served entry), `integrity` (a component's check
//! before its values are read), `store` (reading them), `families` (its
//! metrics) and `zt-format`.

pub(crate) mod manifest;
pub(crate) mod renderings;
pub(crate) mod summary;

pub(crate) use manifest::{http, ztp};
