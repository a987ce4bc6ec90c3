//! The client: remote manifests and verified component delivery.
//!
//! [`quic::QuicClient`] speaks ztp/1 (see `proto/PROTOCOL.md`). Every
//! component is received into a 64-byte-aligned buffer, its digest computed
//! while the bytes arrive, and it is delivered only once the digest matches.

pub mod quic;
pub mod trust;
mod verify;

pub use verify::{Delivered, Verification};
