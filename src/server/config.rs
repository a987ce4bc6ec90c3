//! Configuration: built-in defaults, then a TOML file, then `ZTSERVE_*`
//! environment variables, then command-line flags; later sources win.
//! Every key is documented in `config/ztserve.toml`, which
//! `ztserve --print-default-config` prints. Unknown keys are refused by name.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

/// The commented default configuration, shipped as `config/ztserve.toml`.
pub const DEFAULT_CONFIG: &str = include_str!("../../config/ztserve.toml");

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// The QUIC congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Congestion {
    /// quinn's default, like TCP's: backs off on every loss.
    #[default]
    Cubic,
    /// Model-based; holds its rate through random loss (quinn marks it
    /// experimental).
    Bbr,
    NewReno,
}

/// The daemon's configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Directory tree whose `.zt` files are served.
    pub root: PathBuf,
    /// HTTP listen address.
    #[serde(default = "defaults::listen")]
    pub listen: SocketAddr,
    #[serde(default = "defaults::log_format")]
    pub log_format: LogFormat,
    #[serde(default = "defaults::log_level")]
    pub log_level: String,
    /// Seconds to finish in-flight requests after SIGTERM/SIGINT.
    #[serde(default = "defaults::shutdown_timeout_secs")]
    pub shutdown_timeout_secs: u64,
    #[serde(default)]
    pub catalog: CatalogConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub cors: CorsConfig,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default)]
    pub quic: QuicConfig,
    #[serde(default)]
    pub digests: DigestsConfig,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub ui: UiConfig,
    /// Writable directory for state: the generated QUIC certificate and
    /// the digest store (a cache).
    #[serde(default = "defaults::state_dir")]
    pub state_dir: PathBuf,
}

/// The ztp/1 QUIC listener.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuicConfig {
    /// Serve ztp/1 over QUIC.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
    /// UDP listen address; unset means the HTTP address's IP and port.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Most concurrent QUIC connections.
    #[serde(default = "defaults::quic_max_connections")]
    pub max_connections: usize,
    /// Most requests in flight per connection.
    #[serde(default = "defaults::quic_max_requests")]
    pub max_requests: usize,
    /// Most component streams open at once per connection.
    #[serde(default = "defaults::quic_max_streams")]
    pub max_streams: usize,
    /// Most bytes of component data the daemon holds for all ztp/1
    /// connections together: read and not yet acknowledged by the
    /// clients (at least one read chunk, 4 MiB).
    #[serde(default = "defaults::quic_send_budget_bytes")]
    pub send_budget_bytes: u64,
    /// Seconds without traffic before a connection is closed.
    #[serde(default = "defaults::quic_idle_timeout_secs")]
    pub idle_timeout_secs: u64,
    /// Seconds a component stream may accept no bytes (a client that
    /// stopped reading) before the connection is closed with `stalled`.
    #[serde(default = "defaults::quic_stall_timeout_secs")]
    pub stall_timeout_secs: u64,
    /// Flow-control window per stream, in bytes.
    #[serde(default = "defaults::quic_stream_window")]
    pub stream_window: u64,
    /// Flow-control window per connection, in bytes.
    #[serde(default = "defaults::quic_connection_window")]
    pub connection_window: u64,
    /// UDP socket send and receive buffer sizes requested, in bytes.
    #[serde(default = "defaults::quic_udp_buffer")]
    pub udp_buffer_bytes: usize,
    /// Congestion controller for the data the server sends.
    #[serde(default)]
    pub congestion: Congestion,
    /// Largest request message accepted from a client, in bytes (ztp/1
    /// requires at least 64 KiB; raise it for long explicit selections).
    #[serde(default = "defaults::quic_max_request_bytes")]
    pub max_request_bytes: usize,
}

impl Default for QuicConfig {
    fn default() -> Self {
        QuicConfig {
            enabled: true,
            listen: None,
            max_connections: defaults::quic_max_connections(),
            max_requests: defaults::quic_max_requests(),
            max_streams: defaults::quic_max_streams(),
            send_budget_bytes: defaults::quic_send_budget_bytes(),
            idle_timeout_secs: defaults::quic_idle_timeout_secs(),
            stall_timeout_secs: defaults::quic_stall_timeout_secs(),
            stream_window: defaults::quic_stream_window(),
            connection_window: defaults::quic_connection_window(),
            udp_buffer_bytes: defaults::quic_udp_buffer(),
            congestion: Congestion::default(),
            max_request_bytes: defaults::quic_max_request_bytes(),
        }
    }
}

/// Bearer-token authentication.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// File of valid tokens, one per line; unset means no authentication.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Require a token for /metrics too (/healthz and /readyz stay open).
    #[serde(default)]
    pub protect_metrics: bool,
}

/// HTTPS: both set means the listener serves TLS instead of plain HTTP.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain; re-read when it changes.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// PEM private key; re-read when it changes.
    #[serde(default)]
    pub key: Option<PathBuf>,
}

/// How the served tree is watched.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    /// Seconds between full rescans (the fallback when file events are missed).
    #[serde(default = "defaults::rescan_interval_secs")]
    pub rescan_interval_secs: u64,
    /// Milliseconds to wait for file events to settle before rescanning.
    #[serde(default = "defaults::debounce_ms")]
    pub debounce_ms: u64,
    /// Watch the tree for changes (inotify); off means periodic rescans only.
    #[serde(default = "defaults::yes")]
    pub watch: bool,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            rescan_interval_secs: defaults::rescan_interval_secs(),
            debounce_ms: defaults::debounce_ms(),
            watch: true,
        }
    }
}

/// The digest a server computes for components that carry none (every
/// safetensors tensor, `.zt` components written without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DigestChoice {
    #[default]
    Sha256,
    Crc32c,
    /// Compute nothing: such components are served without a digest, and
    /// their file's ETag includes its modification time.
    Off,
}

/// The web page at `/ui/`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// Serve it (`/` redirects there); `false` (`--no-ui`): both are 404.
    #[serde(default = "defaults::yes")]
    pub enabled: bool,
}

impl Default for UiConfig {
    fn default() -> Self {
        UiConfig { enabled: true }
    }
}

/// Object storage, for a root such as `s3://bucket/prefix`. Credentials
/// and the region otherwise come from the standard environment variables
/// (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageConfig {
    /// The endpoint of an S3-compatible store (MinIO, Ceph, R2...);
    /// unset: AWS's, for the region.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The region (S3); unset: `AWS_REGION` / `AWS_DEFAULT_REGION`.
    #[serde(default)]
    pub region: Option<String>,
    /// Allow an `http://` endpoint (a store on a private network); unset:
    /// the store's own variable (`AWS_ALLOW_HTTP`, `AZURE_ALLOW_HTTP`,
    /// `GOOGLE_ALLOW_HTTP`), else off.
    #[serde(default)]
    pub allow_http: Option<bool>,
    /// Address buckets as `bucket.endpoint` instead of `endpoint/bucket`;
    /// unset: `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`, else off (path style,
    /// what most S3-compatible stores need).
    #[serde(default)]
    pub virtual_hosted_style: Option<bool>,
    /// Most ranged GETs in flight to the store, the whole daemon together.
    #[serde(default = "defaults::storage_max_gets")]
    pub max_concurrent_gets: usize,
    /// Retries of a request the store throttled (503 SlowDown) or whose
    /// connection dropped, with exponential backoff.
    #[serde(default = "defaults::storage_max_retries")]
    pub max_retries: usize,
    /// No retry starts after a request has taken this long.
    #[serde(default = "defaults::storage_retry_timeout_secs")]
    pub retry_timeout_secs: u64,
    /// Seconds between checks that the store answers (a one-page
    /// listing); `/readyz` fails while the last one did.
    #[serde(default = "defaults::storage_check_interval_secs")]
    pub check_interval_secs: u64,
    /// Read objects ahead of requests: compute the digests files lack and
    /// verify every component in the background (`digests.rate_mib_s`),
    /// as on a local root. Off by default: every replica would download
    /// every object; requests then hash and verify what they read.
    #[serde(default)]
    pub background_reads: bool,
    /// Ranged GETs one reader keeps in flight ahead of what it consumes
    /// (a response, a ztp/1 component stream, a digest check).
    #[serde(default = "defaults::storage_read_ahead")]
    pub read_ahead: usize,
    /// Bytes of recently read pieces of objects held in memory (the whole
    /// daemon together): a component checked and then sent is read from
    /// the store once, and a popular one not again until it falls out.
    #[serde(default = "defaults::storage_cache_bytes")]
    pub cache_bytes: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            endpoint: None,
            region: None,
            allow_http: None,
            virtual_hosted_style: None,
            max_concurrent_gets: defaults::storage_max_gets(),
            max_retries: defaults::storage_max_retries(),
            retry_timeout_secs: defaults::storage_retry_timeout_secs(),
            check_interval_secs: defaults::storage_check_interval_secs(),
            background_reads: false,
            read_ahead: defaults::storage_read_ahead(),
            cache_bytes: defaults::storage_cache_bytes(),
        }
    }
}

/// The digest store: computed digests, kept in `state_dir/digests`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestsConfig {
    /// `sha256`, `crc32c` or `off`.
    #[serde(default)]
    pub algorithm: DigestChoice,
    /// Background hashing reads at most this many MiB per second (0: no
    /// limit); a file a request waits for is hashed at full speed.
    #[serde(default = "defaults::digest_rate_mib_s")]
    pub rate_mib_s: u64,
    /// Check every served component's digest in the background, at
    /// `rate_mib_s`, soon after its file is catalogued; `false`: on each
    /// component's first request only.
    #[serde(default = "defaults::yes")]
    pub verify_background: bool,
}

impl Default for DigestsConfig {
    fn default() -> Self {
        DigestsConfig {
            algorithm: DigestChoice::default(),
            rate_mib_s: defaults::digest_rate_mib_s(),
            verify_background: true,
        }
    }
}

/// Resource caps.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// Most ranges honoured in one Range header.
    #[serde(default = "defaults::max_ranges")]
    pub max_ranges: usize,
    /// Largest manifest accepted when scanning, in bytes.
    #[serde(default = "defaults::manifest_cap")]
    pub manifest_cap: u64,
    /// Most bytes one manifest rendering may hold in memory (JSON or CBOR,
    /// whole or selected, and the ztp/1 manifest); past it an HTTP request
    /// gets the rendering streamed and a ztp/1 request is refused
    /// (`message_too_large`) and asked to select.
    #[serde(default = "defaults::render_cap")]
    pub render_cap: u64,
    /// Most bytes of manifest renderings kept for later requests.
    #[serde(default = "defaults::render_cache_bytes")]
    pub render_cache_bytes: u64,
    /// Largest decoded component for `?decode=1`, in bytes.
    #[serde(default = "defaults::decompress_cap")]
    pub decompress_cap: u64,
    /// Most concurrent HTTP connections.
    #[serde(default = "defaults::max_connections")]
    pub max_connections: usize,
    /// Seconds a request may take to arrive and be answered before it is cut off.
    #[serde(default = "defaults::request_timeout_secs")]
    pub request_timeout_secs: u64,
    /// Seconds for a TLS handshake, and for a request's headers, to arrive.
    #[serde(default = "defaults::header_timeout_secs")]
    pub header_timeout_secs: u64,
    /// Largest request head (request line and headers), in bytes.
    #[serde(default = "defaults::max_header_bytes")]
    pub max_header_bytes: usize,
    /// Seconds a connection may move no byte either way before it is closed.
    #[serde(default = "defaults::idle_timeout_secs")]
    pub idle_timeout_secs: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_ranges: defaults::max_ranges(),
            manifest_cap: defaults::manifest_cap(),
            render_cap: defaults::render_cap(),
            render_cache_bytes: defaults::render_cache_bytes(),
            decompress_cap: defaults::decompress_cap(),
            max_connections: defaults::max_connections(),
            request_timeout_secs: defaults::request_timeout_secs(),
            header_timeout_secs: defaults::header_timeout_secs(),
            max_header_bytes: defaults::max_header_bytes(),
            idle_timeout_secs: defaults::idle_timeout_secs(),
        }
    }
}

/// Cross-origin access for browser apps.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorsConfig {
    /// Origins allowed to read responses; empty disables CORS, `["*"]` allows any.
    #[serde(default)]
    pub allow_origins: Vec<String>,
}

mod defaults {
    use std::net::SocketAddr;

    pub(super) fn listen() -> SocketAddr {
        SocketAddr::from(([0, 0, 0, 0], 7070))
    }
    pub(super) fn log_format() -> super::LogFormat {
        super::LogFormat::Text
    }
    pub(super) fn log_level() -> String {
        "info".to_owned()
    }
    pub(super) fn shutdown_timeout_secs() -> u64 {
        30
    }
    pub(super) fn rescan_interval_secs() -> u64 {
        30
    }
    pub(super) fn debounce_ms() -> u64 {
        250
    }
    pub(super) fn yes() -> bool {
        true
    }
    pub(super) fn max_ranges() -> usize {
        64
    }
    pub(super) fn manifest_cap() -> u64 {
        zt_format::DEFAULT_MANIFEST_CAP
    }
    pub(super) fn render_cap() -> u64 {
        128 << 20
    }
    pub(super) fn render_cache_bytes() -> u64 {
        64 << 20
    }
    pub(super) fn decompress_cap() -> u64 {
        1 << 30
    }
    pub(super) fn max_connections() -> usize {
        4096
    }
    pub(super) fn request_timeout_secs() -> u64 {
        3600
    }
    pub(super) fn digest_rate_mib_s() -> u64 {
        256
    }
    pub(super) fn storage_max_gets() -> usize {
        64
    }
    pub(super) fn storage_max_retries() -> usize {
        5
    }
    pub(super) fn storage_retry_timeout_secs() -> u64 {
        30
    }
    pub(super) fn storage_check_interval_secs() -> u64 {
        5
    }
    pub(super) fn storage_read_ahead() -> usize {
        4
    }
    pub(super) fn storage_cache_bytes() -> u64 {
        256 << 20
    }
    pub(super) fn state_dir() -> std::path::PathBuf {
        "state".into()
    }
    pub(super) fn quic_max_connections() -> usize {
        1024
    }
    pub(super) fn quic_max_requests() -> usize {
        16
    }
    pub(super) fn quic_max_streams() -> usize {
        32
    }
    pub(super) fn quic_send_budget_bytes() -> u64 {
        64 << 20
    }
    pub(super) fn header_timeout_secs() -> u64 {
        10
    }
    pub(super) fn max_header_bytes() -> usize {
        16 * 1024
    }
    pub(super) fn idle_timeout_secs() -> u64 {
        60
    }
    pub(super) fn quic_stall_timeout_secs() -> u64 {
        30
    }
    pub(super) fn quic_idle_timeout_secs() -> u64 {
        60
    }
    pub(super) fn quic_stream_window() -> u64 {
        16 << 20
    }
    pub(super) fn quic_connection_window() -> u64 {
        64 << 20
    }
    pub(super) fn quic_udp_buffer() -> usize {
        zt_client::udp::DEFAULT_BUFFER_BYTES
    }
    pub(super) fn quic_max_request_bytes() -> usize {
        ztp_proto::MAX_CLIENT_MESSAGE
    }
}

/// The kind of value a key holds, for reading it from an environment variable.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Int,
    Bool,
    List,
}

/// Every key, dotted, with its kind. Environment variables are
/// `ZTSERVE_` + the key in upper case with `.` as `_`.
const KEYS: &[(&str, Kind)] = &[
    ("root", Kind::Text),
    ("listen", Kind::Text),
    ("log_format", Kind::Text),
    ("log_level", Kind::Text),
    ("shutdown_timeout_secs", Kind::Int),
    ("catalog.rescan_interval_secs", Kind::Int),
    ("catalog.debounce_ms", Kind::Int),
    ("catalog.watch", Kind::Bool),
    ("limits.max_ranges", Kind::Int),
    ("limits.manifest_cap", Kind::Int),
    ("limits.render_cap", Kind::Int),
    ("limits.render_cache_bytes", Kind::Int),
    ("limits.decompress_cap", Kind::Int),
    ("limits.max_connections", Kind::Int),
    ("limits.request_timeout_secs", Kind::Int),
    ("limits.header_timeout_secs", Kind::Int),
    ("limits.max_header_bytes", Kind::Int),
    ("limits.idle_timeout_secs", Kind::Int),
    ("cors.allow_origins", Kind::List),
    ("auth.token_file", Kind::Text),
    ("auth.protect_metrics", Kind::Bool),
    ("tls.cert", Kind::Text),
    ("tls.key", Kind::Text),
    ("state_dir", Kind::Text),
    ("quic.enabled", Kind::Bool),
    ("quic.listen", Kind::Text),
    ("quic.max_connections", Kind::Int),
    ("quic.max_requests", Kind::Int),
    ("quic.max_streams", Kind::Int),
    ("quic.send_budget_bytes", Kind::Int),
    ("quic.idle_timeout_secs", Kind::Int),
    ("quic.stall_timeout_secs", Kind::Int),
    ("quic.stream_window", Kind::Int),
    ("quic.connection_window", Kind::Int),
    ("quic.udp_buffer_bytes", Kind::Int),
    ("quic.congestion", Kind::Text),
    ("quic.max_request_bytes", Kind::Int),
    ("digests.algorithm", Kind::Text),
    ("digests.rate_mib_s", Kind::Int),
    ("digests.verify_background", Kind::Bool),
    ("storage.endpoint", Kind::Text),
    ("storage.region", Kind::Text),
    ("storage.allow_http", Kind::Bool),
    ("storage.virtual_hosted_style", Kind::Bool),
    ("storage.max_concurrent_gets", Kind::Int),
    ("storage.check_interval_secs", Kind::Int),
    ("storage.background_reads", Kind::Bool),
    ("storage.read_ahead", Kind::Int),
    ("ui.enabled", Kind::Bool),
    ("storage.cache_bytes", Kind::Int),
    ("storage.max_retries", Kind::Int),
    ("storage.retry_timeout_secs", Kind::Int),
];

/// The environment variable for a dotted key.
pub fn env_name(key: &str) -> String {
    format!("ZTSERVE_{}", key.to_uppercase().replace('.', "_"))
}

/// Every configuration key, dotted.
pub fn keys() -> impl Iterator<Item = &'static str> {
    KEYS.iter().map(|(k, _)| *k)
}

fn set(table: &mut toml::Table, key: &str, value: toml::Value) {
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().unwrap_or(key);
    let mut t = table;
    for p in parts {
        let entry = t
            .entry(p.to_owned())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        t = match entry {
            toml::Value::Table(t) => t,
            _ => return,
        };
    }
    t.insert(last.to_owned(), value);
}

fn parse_env(key: &str, kind: Kind, raw: &str) -> Result<toml::Value> {
    let var = env_name(key);
    Ok(match kind {
        Kind::Text => toml::Value::String(raw.to_owned()),
        Kind::Int => toml::Value::Integer(raw.trim().parse().with_context(|| {
            format!("{var}: {raw:?} is not an integer (configuration key `{key}`)")
        })?),
        Kind::Bool => toml::Value::Boolean(match raw.trim() {
            "1" | "true" | "yes" | "on" => true,
            "0" | "false" | "no" | "off" => false,
            _ => bail!("{var}: {raw:?} is not a boolean (configuration key `{key}`)"),
        }),
        Kind::List => toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_owned()))
                .collect(),
        ),
    })
}

/// The environment variable that names the configuration file.
pub const CONFIG_ENV: &str = "ZTSERVE_CONFIG";

/// Where configuration comes from; flags hold `(dotted key, value)` pairs.
#[derive(Debug, Default)]
pub struct Sources<'a> {
    pub file: Option<&'a Path>,
    pub env: Vec<(String, String)>,
    pub flags: Vec<(&'static str, toml::Value)>,
}

/// Loads and validates the configuration.
pub fn load(sources: &Sources<'_>) -> Result<Config> {
    let mut table = match sources.file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config file {}", path.display()))?;
            toml::from_str::<toml::Table>(&text)
                .with_context(|| format!("config file {}", path.display()))?
        }
        None => toml::Table::new(),
    };
    for (name, raw) in &sources.env {
        // ZTSERVE_CONFIG names the file itself (`--config`), not a key.
        if !name.starts_with("ZTSERVE_") || name == CONFIG_ENV {
            continue;
        }
        let Some((key, kind)) = KEYS.iter().find(|(k, _)| env_name(k) == *name) else {
            bail!("unknown environment variable {name}: not a configuration key (see ztserve --print-default-config)");
        };
        set(&mut table, key, parse_env(key, *kind, raw)?);
    }
    for (key, value) in &sources.flags {
        set(&mut table, key, value.clone());
    }
    let origin = match sources.file {
        Some(p) => format!("configuration ({} + environment + flags)", p.display()),
        None => "configuration (environment + flags)".to_owned(),
    };
    let config: Config =
        Config::deserialize(toml::Value::Table(table)).map_err(|e| anyhow!("{origin}: {e}"))?;
    config.validate()?;
    Ok(config)
}

impl Config {
    fn validate(&self) -> Result<()> {
        if self.root.as_os_str().is_empty() {
            bail!("configuration key `root` is empty");
        }
        if self.limits.max_ranges == 0 {
            bail!("configuration key `limits.max_ranges` must be at least 1");
        }
        for (key, v) in [
            ("quic.max_connections", self.quic.max_connections),
            ("quic.max_requests", self.quic.max_requests),
            ("quic.max_streams", self.quic.max_streams),
        ] {
            if v == 0 {
                bail!("configuration key `{key}` must be at least 1");
            }
        }
        if self.quic.max_request_bytes < ztp_proto::MAX_CLIENT_MESSAGE {
            bail!(
                "configuration key `quic.max_request_bytes` must be at least {} (ztp/1 requires it)",
                ztp_proto::MAX_CLIENT_MESSAGE
            );
        }
        if self.limits.max_connections == 0 {
            bail!("configuration key `limits.max_connections` must be at least 1");
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            bail!("configuration keys `tls.cert` and `tls.key` must be set together");
        }
        if let Some(f) = &self.auth.token_file {
            crate::server::ops::auth::Tokens::load(f)
                .map_err(|e| anyhow!("configuration key `auth.token_file`: {e:#}"))?;
        }
        tracing_subscriber::EnvFilter::try_new(&self.log_level)
            .map_err(|e| anyhow!("configuration key `log_level`: {e}"))?;
        Ok(())
    }

    pub fn shutdown_timeout(&self) -> Duration {
        Duration::from_secs(self.shutdown_timeout_secs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn the_shipped_file_is_the_defaults() {
        let table: toml::Table = toml::from_str(DEFAULT_CONFIG).unwrap();
        let c = Config::deserialize(toml::Value::Table(table)).unwrap();
        assert_eq!(c.listen, defaults::listen());
        assert_eq!(c.limits, LimitsConfig::default());
        assert_eq!(c.catalog, CatalogConfig::default());
    }

    #[test]
    fn flags_beat_env_beat_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(
            &file,
            "root = \"/from-file\"\nlisten = \"127.0.0.1:1\"\n[limits]\nmax_ranges = 3\n",
        )
        .unwrap();
        let sources = Sources {
            file: Some(&file),
            env: env(&[
                ("ZTSERVE_LISTEN", "127.0.0.1:2"),
                ("ZTSERVE_LIMITS_MAX_RANGES", "5"),
                ("OTHER", "x"),
            ]),
            flags: vec![("listen", toml::Value::String("127.0.0.1:3".into()))],
        };
        let c = load(&sources).unwrap();
        assert_eq!(c.root, PathBuf::from("/from-file"));
        assert_eq!(c.listen.port(), 3);
        assert_eq!(c.limits.max_ranges, 5);
    }

    #[test]
    fn congestion_controller_by_name() {
        let with = |v: &str| {
            load(&Sources {
                env: env(&[("ZTSERVE_ROOT", "/m"), ("ZTSERVE_QUIC_CONGESTION", v)]),
                ..Sources::default()
            })
        };
        assert_eq!(with("bbr").unwrap().quic.congestion, Congestion::Bbr);
        assert_eq!(
            with("new_reno").unwrap().quic.congestion,
            Congestion::NewReno
        );
        let err = with("vegas").unwrap_err();
        assert!(format!("{err:#}").contains("congestion"), "{err:#}");
    }

    #[test]
    fn request_size_may_only_grow_past_the_protocol_minimum() {
        let with = |v: &str| {
            load(&Sources {
                env: env(&[
                    ("ZTSERVE_ROOT", "/m"),
                    ("ZTSERVE_QUIC_MAX_REQUEST_BYTES", v),
                ]),
                ..Sources::default()
            })
        };
        assert_eq!(with("1048576").unwrap().quic.max_request_bytes, 1 << 20);
        let err = with("1024").unwrap_err();
        assert!(
            format!("{err:#}").contains("quic.max_request_bytes"),
            "{err:#}"
        );
    }

    #[test]
    fn bad_keys_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.toml");
        std::fs::write(&file, "root = \"/m\"\n[limits]\nmax_rangez = 3\n").unwrap();
        let err = load(&Sources {
            file: Some(&file),
            ..Sources::default()
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("max_rangez"), "{err:#}");
        let err = load(&Sources {
            env: env(&[
                ("ZTSERVE_ROOT", "/m"),
                ("ZTSERVE_LIMITS_MAX_RANGES", "many"),
            ]),
            ..Sources::default()
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("limits.max_ranges"), "{err:#}");
        let err = load(&Sources {
            env: env(&[("ZTSERVE_ROOT", "/m"), ("ZTSERVE_BOGUS", "1")]),
            ..Sources::default()
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("ZTSERVE_BOGUS"), "{err:#}");
        let err = load(&Sources::default()).unwrap_err();
        assert!(format!("{err:#}").contains("root"), "{err:#}");
    }
}
