//! Every configuration key, its type, default, doc line and flag, once
//! (see [`super::keys::settings`]). `config/ztserve.toml` shows each with
//! its default, checked by a test against these.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::keys::{settings, Kind, Setting};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// The QUIC congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Congestion {
    /// BBR while a connection's least round trip is at least
    /// `quic.wide_area_rtt_ms`, Cubic from the first one below it.
    #[default]
    Auto,
    /// quinn's default, like TCP's: backs off on every loss.
    Cubic,
    /// Model-based; holds its rate through random loss (quinn marks it
    /// experimental).
    Bbr,
    NewReno,
}

/// The digest a server computes for components that carry none (every
/// safetensors tensor, `.zt` components written without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DigestChoice {
    #[default]
    Sha256,
    Crc32c,
    /// BLAKE3: cryptographic like sha256 and faster to compute and to
    /// verify (about 2.5 times on the bench machine); clients older than
    /// it refuse such components by the algorithm's name.
    Blake3,
    /// Compute nothing: such components are served without a digest, and
    /// their file's ETag includes its modification time.
    Off,
}

impl Setting for LogFormat {
    const KIND: Kind = Kind::Text;
    const VALUES: &'static [&'static str] = &["text", "json"];
}
impl Setting for Congestion {
    const KIND: Kind = Kind::Text;
    const VALUES: &'static [&'static str] = &["auto", "cubic", "bbr", "new_reno"];
}
impl Setting for DigestChoice {
    const KIND: Kind = Kind::Text;
    const VALUES: &'static [&'static str] = &["sha256", "blake3", "crc32c", "off"];
}

settings! {
    /// The daemon's configuration.
    pub struct Config in "" {
        #[flag("root", "DIR")]
        /// Directory tree (or `s3://bucket/prefix`, `gs://`, `az://`) to
        /// serve. Required.
        pub root: PathBuf = PathBuf::new(),
        #[flag("listen", "ADDR")]
        /// HTTP listen address, such as `0.0.0.0:7070` or `[::]:7070`.
        pub listen: SocketAddr = SocketAddr::from(([0, 0, 0, 0], 7070)),
        #[flag("log-format", "FORMAT")]
        /// Log format: text or json.
        pub log_format: LogFormat = LogFormat::Text,
        #[flag("log-level", "FILTER")]
        /// Log filter, such as info or ztserve=debug (RUST_LOG, when set,
        /// wins).
        pub log_level: String = "info".to_owned(),
        #[flag("shutdown-timeout-secs", "SECS")]
        /// Seconds to finish requests in flight after SIGTERM/SIGINT.
        pub shutdown_timeout_secs: u64 = 30,
        #[flag("state-dir", "DIR")]
        /// Writable directory for state: the generated QUIC certificate
        /// and the digest store (a cache).
        pub state_dir: PathBuf = "state".into(),
    }
    sections {
        catalog: CatalogConfig,
        limits: LimitsConfig,
        cors: CorsConfig,
        auth: AuthConfig,
        tls: TlsConfig,
        quic: QuicConfig,
        digests: DigestsConfig,
        storage: StorageConfig,
        ui: UiConfig,
        hub: HubConfig,
    }
}

settings! {
    /// How the served tree is watched.
    pub struct CatalogConfig in "catalog." {
        /// Seconds between full rescans (the fallback when file events are
        /// missed).
        pub rescan_interval_secs: u64 = 30,
        /// Milliseconds to wait for file events to settle before
        /// rescanning.
        pub debounce_ms: u64 = 250,
        /// Watch the tree for changes (inotify); off means periodic
        /// rescans only.
        pub watch: bool = true,
    }
}

settings! {
    /// Resource caps.
    pub struct LimitsConfig in "limits." {
        /// Most ranges honoured in one Range header.
        pub max_ranges: usize = 64,
        /// Largest manifest accepted when scanning, in bytes.
        pub manifest_cap: u64 = zt_format::DEFAULT_MANIFEST_CAP,
        /// Largest estimated size in memory of one file's manifest, in
        /// bytes (its header and about 1 KiB per object); a file past
        /// it is refused by name when it is catalogued
        /// (`manifest-over-memory`), its objects counted as they are read.
        pub manifest_memory: u64 = 256 << 20,
        /// Most bytes one manifest rendering may hold in memory (JSON or
        /// CBOR, whole or selected, and the ztp/1 manifest); past it an
        /// HTTP request gets the rendering streamed and a ztp/1 request is
        /// refused (`message_too_large`) and asked to select.
        pub render_cap: u64 = 128 << 20,
        /// Most bytes of manifest renderings kept for later requests.
        pub render_cache_bytes: u64 = 64 << 20,
        /// Largest decoded component for `?decode=1`, in bytes.
        pub decompress_cap: u64 = 1 << 30,
        /// Most separate runs of bytes one slice (`?slice=`) gathers: a
        /// column block of a matrix is one run per row.
        pub max_slice_pieces: u64 = 1 << 20,
        /// Most CPU-heavy request jobs (matching selections, rendering
        /// manifests and objects tables) run at once; 0: one per core.
        pub cpu_jobs: usize = 0,
        /// Most CPU-heavy request jobs waiting for a turn; past it a
        /// request is refused as busy (HTTP 503 with Retry-After, ztp/1
        /// `unavailable`).
        pub cpu_queue: usize = 256,
        /// Most concurrent HTTP connections.
        pub max_connections: usize = 4096,
        /// Connections accepted past `max_connections`: `/healthz`,
        /// `/readyz` and `/metrics` are answered on them at once, any other
        /// request waits for a slot (twice `header_timeout_secs` at most,
        /// then 503 busy); when all are taken, the oldest that has sent
        /// nothing gives its place to the newcomer.
        pub ops_connections: usize = 256,
        /// Milliseconds a connection past `max_connections` has to send its
        /// request (and its TLS handshake).
        pub ops_header_timeout_ms: u64 = 1000,
        /// Most concurrent requests (streams) on one HTTP/2 connection.
        pub http2_max_streams: u64 = 16,
        /// Most bytes read for HTTP responses and not yet written to their
        /// connections, daemon-wide; a response waits for room before it
        /// reads, and closes the stalled connections while it waits.
        pub body_memory_bytes: u64 = 128 << 20,
        /// Most response bytes one HTTP connection holds unwritten (its
        /// HTTP/2 streams together): what a client that stops reading
        /// keeps in the daemon.
        pub body_window_bytes: u64 = 1 << 20,
        /// Seconds a piece of a response read for a connection may wait
        /// unwritten before the connection is closed.
        pub send_timeout_secs: u64 = 30,
        /// Seconds a request may take to arrive and be answered before it
        /// is cut off.
        pub request_timeout_secs: u64 = 3600,
        /// Seconds for a TLS handshake, and for a request's headers, to
        /// arrive.
        pub header_timeout_secs: u64 = 10,
        /// Largest request head (request line and headers), in bytes.
        pub max_header_bytes: usize = 16 * 1024,
        /// Seconds a connection may move no byte either way before it is
        /// closed.
        pub idle_timeout_secs: u64 = 60,
    }
}

settings! {
    /// Cross-origin access for browser apps.
    pub struct CorsConfig in "cors." {
        /// Origins allowed to read responses; empty disables CORS, `["*"]`
        /// allows any.
        pub allow_origins: Vec<String> = Vec::new(),
    }
}

settings! {
    /// Bearer-token authentication.
    pub struct AuthConfig in "auth." {
        #[flag("token-file", "FILE")]
        /// File of valid bearer tokens, one per line, re-read when it
        /// changes; unset means no authentication.
        pub token_file: Option<PathBuf> = None,
        /// Require a token for /metrics too (/healthz and /readyz stay
        /// open).
        pub protect_metrics: bool = false,
    }
}

settings! {
    /// HTTPS: both set means the listener serves TLS instead of plain
    /// HTTP.
    pub struct TlsConfig in "tls." {
        #[flag("tls-cert", "FILE")]
        /// PEM certificate chain: serve HTTPS. Re-read when it changes.
        pub cert: Option<PathBuf> = None,
        #[flag("tls-key", "FILE")]
        /// PEM private key for the certificate. Re-read when it changes.
        pub key: Option<PathBuf> = None,
    }
}

settings! {
    /// The ztp/1 QUIC listener.
    pub struct QuicConfig in "quic." {
        #[flag_off("no-quic")]
        /// Serve ztp/1 over QUIC.
        pub enabled: bool = true,
        #[flag("quic-listen", "ADDR")]
        /// UDP address for ztp/1 over QUIC; unset means the HTTP address's
        /// IP and port.
        pub listen: Option<SocketAddr> = None,
        /// Most concurrent QUIC connections.
        pub max_connections: usize = 1024,
        /// Most requests in flight per connection.
        pub max_requests: usize = 16,
        /// Most component streams open at once per connection.
        pub max_streams: usize = 32,
        /// Most bytes of component data the daemon holds for all ztp/1
        /// connections together: read and not yet acknowledged by the
        /// clients (at least one read chunk, 4 MiB). Under pressure,
        /// connections whose client acknowledged nothing for a second
        /// are closed.
        pub send_budget_bytes: u64 = 64 << 20,
        /// Most bytes of recently sent chunks of local files kept in
        /// memory for ztp/1, the whole daemon together, each charged
        /// with what keeping it costs: a layer sent to many clients is
        /// handed to quinn from memory while it is kept and the file is
        /// the version read (QUIC has no `sendfile`; HTTP reads the page
        /// cache). The least recently used chunks go first; chunks under
        /// 64 KiB or over a quarter of it are not kept; 0 keeps none. An
        /// object-storage root's reads are kept by `storage.cache_bytes`.
        pub piece_cache_bytes: u64 = 256 << 20,
        /// Seconds without traffic before a connection is closed.
        pub idle_timeout_secs: u64 = 60,
        /// Seconds a component stream, or the control stream, may accept
        /// no bytes (a client that stopped reading), or a request may wait
        /// for the client to allow a component stream while none is open,
        /// before the connection is closed with `stalled`.
        pub stall_timeout_secs: u64 = 30,
        /// Flow-control window per stream, in bytes (at least 64 KiB).
        pub stream_window: u64 = 16 << 20,
        /// Flow-control window per connection, in bytes, each way: what a
        /// client may have unacknowledged of the daemon's sends, and of
        /// the send budget (at least one read chunk, 4 MiB).
        pub connection_window: u64 = 64 << 20,
        /// UDP socket send and receive buffer sizes requested, in bytes.
        pub udp_buffer_bytes: usize = zt_client::udp::DEFAULT_BUFFER_BYTES,
        #[flag("quic-max-udp-payload", "BYTES")]
        /// Largest UDP datagram payload a connection's datagrams may grow
        /// to, in bytes: 1200 to 6500 (reached by MTU discovery, sent in
        /// batches, up to ten to a system call where the kernel offers
        /// GSO) or 32000 to 65507 (used from the start, one to a call,
        /// towards loopback peers only, as far as their interface carries
        /// them); unset: the largest MTU of the
        /// interfaces that are up, less the headers (loopback: 65488,
        /// IPv6's figure, for every loopback peer; Ethernet: 1472 for
        /// IPv4, 1452 for IPv6; 6500 where that falls between the ranges
        /// or for a remote peer).
        pub max_udp_payload: Option<u16> = None,
        /// Congestion controller for the data the server sends: auto (by
        /// each connection's round trip), cubic, bbr or new_reno.
        pub congestion: Congestion = Congestion::Auto,
        /// With `congestion = "auto"`: a connection sends with BBR while
        /// its least round trip is at least this many milliseconds (a
        /// wide-area path), and with Cubic from the first one below it;
        /// 1 to 300.
        pub wide_area_rtt_ms: u64 = 10,
        /// Largest request message accepted from a client, in bytes (ztp/1
        /// requires at least 64 KiB; raise it for long explicit
        /// selections).
        pub max_request_bytes: usize = ztp_proto::MAX_CLIENT_MESSAGE,
    }
}

settings! {
    /// The digest store: computed digests, kept in `state_dir/digests`.
    pub struct DigestsConfig in "digests." {
        /// The digest computed for components that carry none: sha256,
        /// blake3, crc32c or off.
        pub algorithm: DigestChoice = DigestChoice::Sha256,
        /// Background hashing reads at most this many MiB per second (0:
        /// no limit); a file a request waits for is hashed at full speed.
        pub rate_mib_s: u64 = 256,
        /// Check every served component's digest in the background, at
        /// `rate_mib_s`, soon after its file is catalogued; `false`: on
        /// each component's first request only.
        pub verify_background: bool = true,
    }
}

settings! {
    /// Object storage, for a root such as `s3://bucket/prefix`.
    /// Credentials and the region otherwise come from the standard
    /// environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
    pub struct StorageConfig in "storage." {
        /// The endpoint of an S3-compatible store (MinIO, Ceph, R2...);
        /// unset: AWS's, for the region.
        pub endpoint: Option<String> = None,
        /// The region (S3); unset: `AWS_REGION` / `AWS_DEFAULT_REGION`.
        pub region: Option<String> = None,
        /// Allow an `http://` endpoint (a store on a private network);
        /// unset: the store's own variable (`AWS_ALLOW_HTTP`,
        /// `AZURE_ALLOW_HTTP`, `GOOGLE_ALLOW_HTTP`), else off.
        pub allow_http: Option<bool> = None,
        /// Address buckets as `bucket.endpoint` instead of
        /// `endpoint/bucket`; unset: `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`,
        /// else off (path style, what most S3-compatible stores need).
        pub virtual_hosted_style: Option<bool> = None,
        /// Most ranged GETs in flight to the store, the whole daemon
        /// together.
        pub max_concurrent_gets: usize = 64,
        /// Retries of a request the store throttled (503 SlowDown) or
        /// whose connection dropped, with exponential backoff.
        pub max_retries: usize = 5,
        /// No retry starts after a request has taken this long.
        pub retry_timeout_secs: u64 = 30,
        /// Seconds between checks that the store answers (a one-page
        /// listing); `/readyz` fails while the last one did.
        pub check_interval_secs: u64 = 5,
        /// Read objects ahead of requests: compute the digests files lack
        /// and verify every component in the background
        /// (`digests.rate_mib_s`), as on a local root. Off by default:
        /// every replica would download every object; requests then hash
        /// and verify what they read.
        pub background_reads: bool = false,
        /// Ranged GETs one reader keeps in flight ahead of what it
        /// consumes (a response, a ztp/1 component stream, a digest
        /// check).
        pub read_ahead: usize = 4,
        /// Bytes of recently read pieces of objects held in memory (the
        /// whole daemon together): a component checked and then sent is
        /// read from the store once, and a popular one not again until it
        /// falls out.
        pub cache_bytes: u64 = 256 << 20,
    }
}

settings! {
    /// The web page at `/ui/`.
    pub struct UiConfig in "ui." {
        #[flag_off("no-ui")]
        /// Serve the web page at /ui/. `/` redirects there; off, both are
        /// 404.
        pub enabled: bool = true,
    }
}

settings! {
    /// The Hugging Face Hub's protocol (`docs/hub.md`): directories
    /// `ORG/NAME/` under the root served as model repositories.
    pub struct HubConfig in "hub." {
        #[flag_off("no-hub")]
        /// Serve the root's directories as Hub repositories, for clients
        /// given `HF_ENDPOINT` (`/{repo}/resolve/...`, `/api/models/...`).
        pub enabled: bool = true,
        #[flag_off("no-xet")]
        /// Offer the Xet protocol for repository files of 10 MiB or more
        /// (`huggingface_hub` fetches them through `hf_xet` in parallel
        /// ranges; `docs/hub.md`).
        pub xet: bool = true,
        /// Memory for the Xet indexes kept (each file's chunks: about 40
        /// bytes per 64 KiB of file); the oldest made go first.
        pub xet_index_bytes: u64 = 64 << 20,
        /// How long a download's first request waits for its file's Xet
        /// index (made once per file version, at about 1 GiB/s); past it,
        /// the file goes out over plain HTTP while the index is made.
        pub xet_wait_ms: u64 = 3000,
    }
}
