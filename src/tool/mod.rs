//! The `zt` subcommands. Each takes parsed arguments and writes to the
//! given output; `bin/zt.rs` only wires clap to these functions.

pub mod cat;
pub mod exit;
pub mod export;
pub mod fetch;
pub mod info;
pub mod pack;
pub mod verify;

pub use exit::{exit_code, Failure};
