//! One layer between the catalog and both transports: a request (a path,
//! the version it names, a selection, rows or byte ranges, what it wants)
//! becomes the served entry it is answered from (`entry.rs`) and a plan of
//! what is sent (`plan.rs`), or a typed [`Refusal`] (`refusal.rs`), which
//! HTTP maps to a status and ztp/1 to a code, each once. The transports
//! only carry plans out. Two checks belong to a request, not to a file:
//! the hash of what a response carries whole, taken again as it streams
//! (`recheck.rs`), and the digest of row ranges (`rows.rs`).
//!
//! May use: `catalog`, `integrity`, `render`, `store` (through `catalog`)
//! and `zt-format`. Knows nothing of HTTP or QUIC.

pub(crate) mod entry;
pub(crate) mod gather;
pub(crate) mod plan;
pub(crate) mod recheck;
mod refusal;
pub(crate) mod rows;

pub(crate) use refusal::Refusal;
