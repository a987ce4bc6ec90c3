//! Integrity: that no byte a digest does not vouch for is ever sent.
//! Each component's digest checked against the file once and remembered
//! (`checks`), digests computed for files that lack them and kept in a
//! store keyed by the file's identity, the background verifier
//! (`digests`), row ranges under a digest of their own (`rows`), the
//! hash of what a response carries whole, checked again as it streams
//! (`recheck`), and a digest and a CRC hashed in one pass (`tee`).
//!
//! May use: `store` (reading bytes), `catalog` (the served entries it
//! checks and settles), `families` (its metrics) and `zt-format`
//! (digests, rules).

pub(crate) mod checks;
pub(crate) mod digests;
pub(crate) mod recheck;
pub(crate) mod rows;
pub(crate) mod tee;
