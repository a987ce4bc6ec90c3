//! ztserve: serve zTensor (`.zt`) files, and the `zt` tool.
//!
//! The format itself lives in the `zt-format` crate. This crate holds what
//! is built on it: the manifest JSON schema shared by every JSON output
//! ([`manifest_json`]), importers for other tensor formats ([`import`]), and
//! the `zt` subcommands ([`tool`]).

pub mod client;
pub mod import;
pub mod manifest_json;
pub mod order;
pub mod select;
pub mod server;
pub mod tool;
pub mod udp;

pub use zt_format as format;
