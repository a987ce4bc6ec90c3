//! zt-client: load zTensor files from a ztserve daemon (ztp/1 over QUIC)
//! or from any HTTP server with Range support, lazily, with every digest
//! verified before a byte is handed over.
//!
//! - [`Client`] is one API over both transports: `quic://host:port/path`
//!   speaks ztp/1 (`proto/PROTOCOL.md`); `http(s)://host:port/path` uses
//!   Range requests on that URL (ztserve's `/path` or `/v1/files/path`, or
//!   nginx serving the raw file).
//! - [`Client::fetch`] yields each [`Delivered`] component as it completes,
//!   in the server's layer order: a 64-byte-aligned buffer, with typed
//!   dtype, encoding and digest, whose digest already matched.
//! - [`output::fetch_to_file`] writes a selection as a valid v1.2 file
//!   (`.part` plus a journal, resumable, renamed when complete).
//! - [`Options`] holds every setting; [`Error`] says why a call failed, as
//!   a value to `match` on.
//!
//! The crate depends on the format (`zt-format`) and the protocol
//! (`ztp-proto`), never on the server.
//!
//! ```no_run
//! use zt_client::trust::Trust;
//! use zt_client::{output, Client, Error, Options};
//!
//! # async fn demo() -> Result<(), Error> {
//! let options = Options {
//!     trust: Trust::fingerprint("5d:41:…:2a")?,
//!     ..Options::default()
//! };
//! let client = Client::connect("quic://models.example:7070/llama.zt", options).await?;
//! let remote = client.manifest().await?;
//! println!("{}: {} bytes, {} objects", remote.etag, remote.size, remote.manifest.objects.len());
//!
//! // Only layer 0, lazily: components arrive in send order, each checked.
//! let mut fetch = client.fetch(&["model.layers.0.*".to_owned()], None).await?;
//! while let Some(component) = fetch.next().await {
//!     let c = component?;
//!     println!("{} / {}: {} {} bytes", c.object, c.component, c.dtype.name(), c.data.len());
//!     client.recycle(c.data); // optional: a later component reuses it
//! }
//!
//! // The whole file, written as a valid .zt (resumable, renamed when complete).
//! match output::fetch_to_file(&client, &[], "llama.zt".as_ref(), &mut |_, _, _| {}).await {
//!     Ok(written) => println!("{} objects", written.objects),
//!     Err(e) if e.is_transient() => eprintln!("interrupted, run again to resume: {e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The allocator matters over ztp/1: quinn copies each message it
//! receives into a buffer of its own, and under glibc's malloc the freed
//! buffers go back to the system and the next ones fault in fresh pages,
//! 6-12x the faults of an HTTP fetch of the same file. The `zt` tool runs
//! on jemalloc for this (docs/benchmarks.md, "jemalloc for `zt`"); a
//! program fetching gigabytes over ztp/1 may want to as well, or, without
//! a rebuild, hold glibc's trimming off
//! (`GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432`,
//! which cut `zt`'s faults as far as jemalloc did).

mod blocking;
mod budget;
mod busy;
pub mod cache;
mod causes;
mod client;
mod copy;
mod decode;
mod error;
mod fetch;
mod journal;
mod lock;
pub mod mirrors;
mod options;
pub mod output;
mod own;
mod part;
mod per_process;
mod pool;
pub mod ranges;
mod remote;
mod rows;
pub mod sharded;
mod silence;
mod slices;
mod transport;
pub mod trust;
pub mod udp;
pub mod url_path;
mod verify;
pub mod ztp;

pub use client::Client;
pub use error::{At, Error, Result, Status};
pub use fetch::Fetch;
pub use options::{
    default_quic_connections, Options, Resolve, Via, BUSY_WAIT, HTTP_CONNECTIONS, IDLE_TIMEOUT,
    QUIC_CONNECTIONS, QUIC_CONNECTIONS_MOST,
};
pub use remote::{select_from, Remote};
pub use verify::{Delivered, Verification};
