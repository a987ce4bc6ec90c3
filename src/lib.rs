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
//! configuration, tracing and signals to it. The rest of the server is
//! private to this crate: the configuration ([`server::config`]), the
//! health probe and the QUIC certificate and transport settings are public
//! for the binary, the tests and the benchmarks.
//!
//! ```no_run
//! use ztserve::server::{self, config, State};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! // Settings as the daemon reads them: a file, ZTSERVE_* variables, flags.
//! let sources = config::Sources {
//!     file: None,
//!     env: vec![("ZTSERVE_ROOT".into(), "/models".into())],
//!     flags: Vec::new(),
//! };
//! let config = config::load(&sources)?;
//! let listener = server::bind(config.listen)?;
//! let state = State::new(config)?;
//! // Serves HTTP and ztp/1 until the future resolves, then drains.
//! server::run(state, listener, async {
//!     let _ = tokio::signal::ctrl_c().await;
//! })
//! .await
//! # }
//! ```

pub mod server;
