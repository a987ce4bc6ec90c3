//! The `zt` tool: inspect, verify, pack, export and fetch zTensor files.
//!
//! Each subcommand is a module whose `run` takes parsed arguments and
//! writes to the given output; `main.rs` only wires clap to them. The tool
//! depends on the format and the client, never on the server.
//!
//! ```no_run
//! // `zt verify model.zt`, as a library call.
//! let f = zt_format::ZtFile::open("model.zt")?;
//! let mut out = std::io::stdout();
//! zt_cli::verify::run(&mut out, &f, zt_cli::verify::Policy::default())?;
//! # Ok::<(), anyhow::Error>(())
//! ```

pub mod cache;
pub mod cat;
pub mod exit;
pub mod export;
pub mod fetch;
pub mod import;
pub mod info;
pub mod ingest;
pub mod pack;
pub mod verify;

pub use exit::{exit_code, Failure};
