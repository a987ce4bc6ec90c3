//! ztserve: the daemon that serves zTensor (`.zt`) files over HTTP and
//! ztp/1 (QUIC).
//!
//! The workspace is layered, each crate depending only on those below it:
//!
//! | crate | what it holds |
//! |---|---|
//! | `zt-format` | the file format: manifest model, validation, readers, writer, the selection glob, the send order, the manifest JSON |
//! | `ztp-proto` | ztp/1 messages and framing, without I/O |
//! | `zt-client` | the loader: both transports, trust, verification, `fetch_to_file` |
//! | `zt-cli` | the `zt` tool |
//! | `ztserve` (this crate) | the daemon: catalog, HTTP, ztp/1, configuration |
//!
//! [`server::run`] is the daemon as a library; `bin/ztserve.rs` wires the
//! configuration, tracing and signals to it.

pub mod server;
