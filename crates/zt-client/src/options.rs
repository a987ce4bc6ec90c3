//! How a client connects, what it accepts, and how long it waits: one
//! struct for both transports and for `fetch_to_file`.

use std::time::Duration;

use crate::trust::Trust;

/// Which transport to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// ztp/1 over QUIC.
    Quic,
    /// Range requests over HTTP(S).
    Http,
}

/// Client settings. Build one with struct update syntax over
/// `Options::default()`.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which server certificates to trust.
    pub trust: Trust,
    /// Bearer token sent with every request.
    pub token: Option<String>,
    /// Parallel HTTP requests.
    pub connections: usize,
    /// Accept components whose digest algorithm is unknown.
    pub allow_unverified: bool,
    /// Refuse components that carry no digest (before their bytes are read).
    pub require_digest: bool,
    /// Override the transport the URL's scheme picks.
    pub via: Option<Via>,
    /// Let `fetch_to_file` write large components with direct I/O where
    /// the filesystem allows it (bypassing the page cache); `false` writes
    /// everything through the page cache.
    pub direct_io: bool,
    /// Largest manifest accepted, in bytes.
    pub manifest_cap: u64,
    /// Largest single component accepted, in bytes.
    pub component_cap: u64,
    /// How long a server may send nothing at all before the connection
    /// counts as lost: QUIC's idle timeout (keep-alives go out at a third
    /// of it), and HTTP's connect and read timeouts.
    pub idle_timeout: Duration,
    /// How long a request waiting on a QUIC connection may receive no
    /// stream data (while the server still answers keep-alives) before it
    /// fails; at least the idle timeout, so a server that vanished is
    /// reported as a lost connection first.
    pub silence_timeout: Duration,
    /// The most bytes `fetch_to_file` holds received ahead of its writer.
    pub write_ahead: u64,
}

/// The idle timeout by default.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for Options {
    fn default() -> Self {
        Options {
            trust: Trust::System,
            token: None,
            connections: 8,
            allow_unverified: false,
            require_digest: false,
            via: None,
            direct_io: true,
            manifest_cap: zt_format::DEFAULT_MANIFEST_CAP,
            component_cap: 64 << 30,
            idle_timeout: IDLE_TIMEOUT,
            silence_timeout: 2 * IDLE_TIMEOUT,
            write_ahead: 128 << 20,
        }
    }
}
