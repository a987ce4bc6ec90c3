//! `ztp/1`: the QUIC protocol that serves zTensor files, as types and a
//! codec without I/O. `proto/PROTOCOL.md` is the specification; this crate
//! is its Rust rendering.
//!
//! - [`Message`]: every message on the control stream, both directions.
//! - [`ComponentHeader`]: the header that opens each component stream.
//! - [`frame`] / [`Deframer`]: length-prefixed framing with a size limit.
//! - [`Code`]: error codes, shared by messages, stream resets and
//!   connection closes.
//! - [`ServerSession`] and [`ClientSession`]: each side's rules as state
//!   machines that take decoded messages and stream headers and say what
//!   to do (serve, answer, cancel, close; deliver, fail, or close with a
//!   [`Violation`]), as quinn-proto does for QUIC. The QUIC drivers in
//!   ztserve and zt-client carry out what they decide.
//!
//! ```
//! use ztp_proto::{frame, Deframer, Message, Get};
//! let msg = Message::Get(Get { id: 1, path: "model.zt".into(), select: vec!["model.layers.0.*".into()], ..Get::default() });
//! let bytes = frame(&msg).unwrap();
//! let mut d = Deframer::new(1 << 16);
//! d.push(&bytes);
//! assert_eq!(d.next_message().unwrap(), Some(msg));
//! ```

mod client_session;
mod code;
mod framing;
/// The fuzz target's body, built only for fuzzing and the corpus replay.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzz;
mod message;
mod server_session;
pub mod share;
mod value;

pub use client_session::{ClientSession, Event, Violation};
pub use code::Code;
pub use framing::{frame, frame_chunks, frame_header, Deframer, FrameError, MAX_CLIENT_MESSAGE};
pub use message::{Cancel, ComponentHeader, Done, ErrorMsg, Get, ManifestMsg, Message};
pub use server_session::{
    Close, Held, Received, ServerSession, HELD_CANCEL_COST, MAX_HELD_CANCEL_BYTES,
};

/// The ALPN protocol identifier.
pub const ALPN: &[u8] = b"ztp/1";

/// The feature a server names in `manifest.features` when it answers a
/// `get` with `ranges`: raw byte ranges of the file, a stream each.
pub const FEATURE_RANGES: &str = "ranges";

/// The feature a server names in `manifest.features` when it answers a
/// `get` with `rows`: rows of a raw dense object, under a digest of the
/// bytes sent.
pub const FEATURE_ROWS: &str = "rows";

/// The feature a server names in `manifest.features` when it answers a
/// `get` with `slice`: a rectangular slice of a raw dense object,
/// gathered into one stream under a digest of the bytes sent.
pub const FEATURE_SLICES: &str = "slices";

/// The feature a server names in `manifest.features` when it answers a
/// `get` with `share`: every `count`-th component of the selection, so
/// that one fetch can be spread over several connections.
pub const FEATURE_SHARES: &str = "shares";

/// The most requests one fetch may be spread over (`share`'s `count`).
pub const MAX_SHARES: u64 = 64;

/// The object a `ranges` request's manifest names for bytes
/// `start..end` of the file (its one component is `data`).
pub fn range_object(start: u64, end: u64) -> String {
    format!("{RANGE_PREFIX}{start}-{end}")
}

const RANGE_PREFIX: &str = "@bytes/";

/// Whether `name` is one [`range_object`] makes: raw bytes of a `ranges`
/// request, which carry no digest.
pub fn is_range_object(name: &str) -> bool {
    name.starts_with(RANGE_PREFIX)
}
