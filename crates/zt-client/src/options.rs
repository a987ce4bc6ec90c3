//! How a client connects, what it accepts, and how long it waits: one
//! struct for both transports and for `fetch_to_file`.

use std::net::SocketAddr;
use std::time::Duration;

use crate::cache::Cache;
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
    /// Connections one fetch uses: parallel Range requests over HTTP,
    /// QUIC connections over ztp/1 (each carrying a share of the
    /// components, in the fetch's order, balanced by bytes). `None`: [`HTTP_CONNECTIONS`] or
    /// [`default_quic_connections`].
    pub connections: Option<usize>,
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
    /// Addresses for host names, used instead of resolving them (as
    /// curl's `--resolve`): a URL whose host and port are listed connects
    /// to the first address; the name still identifies the server to TLS.
    /// [`crate::mirrors`] tries every address of a name, listed or
    /// resolved, as a mirror of its own.
    pub resolve: Vec<Resolve>,
    /// The one address to connect to, whatever the URL's host resolves to
    /// (set by [`crate::mirrors`] for each address it tries).
    pub connect_to: Option<SocketAddr>,
    /// The largest UDP datagram payload ztp/1 may grow to, in bytes
    /// (1,200 to 6,500, or 32,000 to 65,507: [`crate::udp::check_payload`]);
    /// `None`: what the interfaces carry ([`crate::udp::max_payload`]).
    pub max_udp_payload: Option<u16>,
    /// How long, at most, from its first refusal, a request refused for a
    /// passing reason (the server busy: HTTP `503` or `429` with
    /// `Retry-After`, ztp/1 `retry_after_ms`) is sent again, each time
    /// after the server's wait (or a least wait that doubles from 250 ms
    /// to 2 s, when the server asks for less) and a random part of it
    /// ([`BUSY_WAIT`] by default; zero reports the first refusal;
    /// [`crate::mirrors`] hands a busy server's fetch on at once while
    /// another is left to try).
    pub busy_wait: Duration,
    /// The cache components are taken from and stored in
    /// ([`crate::cache`]); `None` (the default for the library): every
    /// fetch asks the server. The tools use [`Cache::default_dir`].
    pub cache: Option<Cache>,
}

/// The addresses of `host` for URLs with `port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolve {
    pub host: String,
    pub port: u16,
    pub addrs: Vec<SocketAddr>,
}

impl Resolve {
    /// Parses `HOST:PORT:ADDR[,ADDR...]` (IPv6 addresses in brackets);
    /// each address takes `PORT`.
    pub fn parse(spec: &str) -> Result<Resolve, String> {
        let bad = |why: &str| format!("--resolve {spec:?}: {why} (HOST:PORT:ADDR[,ADDR...])");
        let (host, rest) = spec.split_once(':').ok_or_else(|| bad("no port"))?;
        let (port, addrs) = rest.split_once(':').ok_or_else(|| bad("no address"))?;
        let port: u16 = port.parse().map_err(|_| bad("not a port"))?;
        let addrs = addrs
            .split(',')
            .map(|a| {
                a.trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .map(|ip| SocketAddr::new(ip, port))
                    .map_err(|_| bad(&format!("{a:?} is not an IP address")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Resolve {
            host: host.to_ascii_lowercase(),
            port,
            addrs,
        })
    }
}

impl Options {
    /// The addresses listed in [`Options::resolve`] for `host` and `port`.
    pub(crate) fn listed(&self, host: &str, port: u16) -> Option<&[SocketAddr]> {
        self.resolve
            .iter()
            .find(|r| r.port == port && r.host.eq_ignore_ascii_case(host))
            .map(|r| r.addrs.as_slice())
    }

    /// Parallel Range requests of an HTTP fetch (at least one).
    pub fn http_connections(&self) -> usize {
        self.connections.unwrap_or(HTTP_CONNECTIONS).max(1)
    }

    /// QUIC connections of a ztp/1 fetch (1 to [`ztp_proto::MAX_SHARES`]).
    pub fn quic_connections(&self) -> usize {
        let most = usize::try_from(ztp_proto::MAX_SHARES).unwrap_or(usize::MAX);
        self.connections
            .unwrap_or_else(default_quic_connections)
            .clamp(1, most)
    }

    /// Where a URL of `host` and `port` connects: [`Options::connect_to`],
    /// else the first listed address, else `None` (resolve the name).
    pub(crate) fn pinned(&self, host: &str, port: u16) -> Option<SocketAddr> {
        self.connect_to
            .or_else(|| self.listed(host, port).and_then(|a| a.first().copied()))
    }
}

/// Parallel Range requests of an HTTP fetch by default.
pub const HTTP_CONNECTIONS: usize = 8;

/// The fewest QUIC connections of a ztp/1 fetch by default.
pub const QUIC_CONNECTIONS: usize = 2;

/// The most QUIC connections of a ztp/1 fetch by default.
pub const QUIC_CONNECTIONS_MOST: usize = 8;

/// QUIC connections of a ztp/1 fetch by default: one for each two cores
/// of this machine, from [`QUIC_CONNECTIONS`] to [`QUIC_CONNECTIONS_MOST`].
/// A connection's packets are sealed, opened and copied by one task at a
/// time on each side, so one connection is about one core's work at each
/// end: two connections on two cores, eight on sixteen, where a 1 GiB
/// `ztserve.load` over eight took 0.39x the time it took over two
/// (docs/benchmarks.md, "Connections per fetch").
pub fn default_quic_connections() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores / 2).clamp(QUIC_CONNECTIONS, QUIC_CONNECTIONS_MOST)
}

/// How long requests wait out a busy server by default.
pub const BUSY_WAIT: Duration = Duration::from_secs(30);

/// The idle timeout by default.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for Options {
    fn default() -> Self {
        Options {
            trust: Trust::System,
            token: None,
            connections: None,
            allow_unverified: false,
            require_digest: false,
            via: None,
            direct_io: true,
            manifest_cap: zt_format::DEFAULT_MANIFEST_CAP,
            component_cap: 64 << 30,
            idle_timeout: IDLE_TIMEOUT,
            silence_timeout: 2 * IDLE_TIMEOUT,
            write_ahead: 128 << 20,
            resolve: Vec::new(),
            connect_to: None,
            max_udp_payload: None,
            busy_wait: BUSY_WAIT,
            cache: None,
        }
    }
}
