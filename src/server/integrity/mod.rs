//! Integrity: that no byte a digest does not vouch for is ever sent.
//! Each component's digest checked against the file once and remembered
//! (`checks`), the digests computed for files that lack them, kept in a
//! store keyed by the file's identity, and their metrics (`digests`), and
//! a digest and a CRC hashed in one pass (`tee`), and the digests of
//! slices already gathered (`slice_digests`). Who runs these is
//! above: the catalog's hasher (`catalog/hasher.rs`) and the background
//! verifier (`ops/verifier.rs`) run them ahead of requests, the serving
//! layer per request (`serve/recheck.rs`, `serve/rows.rs`).
//!
//! May use: `store` (reading bytes), `families` (its metrics) and
//! `zt-format` (digests, rules). Knows nothing of the catalog.

pub(crate) mod checks;
pub(crate) mod digests;
pub(crate) mod inflight;
pub(crate) mod slice_digests;
pub(crate) mod tee;
