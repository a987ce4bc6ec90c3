//! Configuration: built-in defaults, then a TOML file, then `ZTSERVE_*`
//! environment variables, then command-line flags; later sources win.
//! Every key is defined once, in `sections.rs` (type, default, doc line,
//! flag); `config/ztserve.toml`, which `ztserve --print-default-config`
//! prints, shows each with its default (a test keeps the two the same).
//! Unknown keys are refused by name.
//!
//! May use: nothing else of the daemon (every other part reads it); the
//! crates whose defaults it names (`zt-format`, `zt-client`, `ztp-proto`).

mod flags;
pub mod keys;
mod sections;

use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;

pub use flags::{flag_args, flag_values};
pub use keys::{env_name, Key, Kind};
pub use sections::{
    AuthConfig, CatalogConfig, Config, Congestion, CorsConfig, DigestChoice, DigestsConfig,
    LimitsConfig, LogFormat, QuicConfig, StorageConfig, TlsConfig, UiConfig,
};

/// The largest `quic.wide_area_rtt_ms`: under quinn's initial estimate of
/// a round trip (333 ms), which a connection's congestion controller sees
/// until the path is measured (`server::quic`'s `congestion.rs`).
pub const MAX_WIDE_AREA_RTT_MS: u64 = 300;

/// The commented default configuration, shipped as `config/ztserve.toml`.
pub const DEFAULT_CONFIG: &str = include_str!("../../../config/ztserve.toml");

/// Every key of the configuration, in the order the sections declare them.
pub fn keys() -> &'static [Key] {
    static ALL: std::sync::LazyLock<Vec<Key>> = std::sync::LazyLock::new(|| {
        let mut out = Vec::new();
        Config::keys(&mut out);
        out
    });
    &ALL
}

/// The key named `name` (dotted).
pub fn key(name: &str) -> Option<&'static Key> {
    keys().iter().find(|k| k.name == name)
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

/// `raw`, from `origin` (an environment variable or a flag), as a value of
/// `key`.
fn parse_value(key: &Key, origin: &str, raw: &str) -> Result<toml::Value> {
    let (var, kind, key) = (origin, key.kind, key.name);
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

/// Variables of the clients (the `zt` tool and the Python package) that
/// share the daemon's prefix: not configuration keys, and not refused, so
/// one shell can run both.
pub const CLIENT_ENV: [&str; 4] = [
    "ZTSERVE_CACHE",
    "ZTSERVE_CACHE_MAX",
    "ZTSERVE_ENDPOINT",
    "ZTSERVE_HUGE_PAGES",
];

/// The keys command-line flags set: `(dotted key, value)` pairs.
pub type FlagValues = Vec<(&'static str, toml::Value)>;

/// Where configuration comes from.
#[derive(Debug, Default)]
pub struct Sources<'a> {
    pub file: Option<&'a Path>,
    pub env: Vec<(String, String)>,
    pub flags: FlagValues,
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
        if !name.starts_with("ZTSERVE_")
            || name == CONFIG_ENV
            || CLIENT_ENV.contains(&name.as_str())
        {
            continue;
        }
        let Some(key) = keys().iter().find(|k| k.env() == *name) else {
            bail!("unknown environment variable {name}: not a configuration key (see ztserve --print-default-config)");
        };
        set(&mut table, key.name, parse_value(key, name, raw)?);
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

/// The least `quic.connection_window`: one read chunk of the store's
/// (`store::READ_CHUNK`; a unit test in `server` keeps the two equal).
pub(crate) const MIN_CONNECTION_WINDOW: u64 = 4 << 20;

impl Config {
    fn validate(&self) -> Result<()> {
        if self.root.as_os_str().is_empty() {
            bail!("configuration key `root` is not set: give --root, ZTSERVE_ROOT or `root` in the file");
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
        // Windows smaller than this send at a trickle (the daemon's send
        // window is the connection's): a window of 1 byte moved 1 byte a
        // round trip.
        for (key, v, least) in [
            (
                "quic.connection_window",
                self.quic.connection_window,
                MIN_CONNECTION_WINDOW,
            ),
            ("quic.stream_window", self.quic.stream_window, 64 << 10),
        ] {
            if v < least {
                bail!("configuration key `{key}` is {v}: it must be at least {least} bytes");
            }
        }
        if !(1..=MAX_WIDE_AREA_RTT_MS).contains(&self.quic.wide_area_rtt_ms) {
            bail!(
                "configuration key `quic.wide_area_rtt_ms` is {}: it must be 1 to {MAX_WIDE_AREA_RTT_MS} (under quinn's first estimate of a round trip, 333 ms)",
                self.quic.wide_area_rtt_ms,
            );
        }
        if let Some(p) = self.quic.max_udp_payload {
            zt_client::udp::check_payload(p)
                .map_err(|e| anyhow!("configuration key `quic.max_udp_payload` is {p}: {e}"))?;
        }
        if self.limits.max_connections == 0 {
            bail!("configuration key `limits.max_connections` must be at least 1");
        }
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            bail!("configuration keys `tls.cert` and `tls.key` must be set together");
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
    use std::path::PathBuf;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    /// Where each key appears in `config/ztserve.toml`: `key = value`, or
    /// commented out (`# key = value`) for keys unset by default, under
    /// its section's `[table]`.
    fn keys_in_file(text: &str) -> Vec<(String, bool)> {
        let mut section = String::new();
        let mut out = Vec::new();
        for line in text.lines() {
            if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = format!("{t}.");
                continue;
            }
            let (commented, body) = match line.strip_prefix("# ") {
                Some(b) => (true, b),
                None => (false, line),
            };
            if let Some((name, _)) = body.split_once(" = ") {
                if name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                {
                    out.push((format!("{section}{name}"), commented));
                }
            }
        }
        out
    }

    /// The shipped file sets every key that has a default to exactly that
    /// default, and shows every key unset by default commented out: the
    /// file and [`sections`] cannot drift.
    #[test]
    fn the_shipped_file_is_every_key_at_its_default() {
        let table: toml::Table = toml::from_str(DEFAULT_CONFIG).unwrap();
        let c = Config::deserialize(toml::Value::Table(table)).unwrap();
        let want = Config {
            root: "/models".into(),
            ..Config::default()
        };
        assert_eq!(c, want);
        let in_file = keys_in_file(DEFAULT_CONFIG);
        for k in keys() {
            let found: Vec<bool> = in_file
                .iter()
                .filter(|(n, _)| n == k.name)
                .map(|(_, commented)| *commented)
                .collect();
            assert_eq!(
                found.len(),
                1,
                "config/ztserve.toml shows `{}` {} times",
                k.name,
                found.len()
            );
            assert!(!k.doc.trim().is_empty(), "`{}` has no doc line", k.name);
        }
        for (name, _) in &in_file {
            assert!(
                key(name).is_some(),
                "config/ztserve.toml: unknown key `{name}`"
            );
        }
    }

    /// A size as the docs write it: `4096`, `64 MiB`, `1 GiB`.
    fn doc_number(text: &str) -> Option<u64> {
        let text = text.trim();
        let (n, shift) = match text.split_once(' ') {
            Some((n, "KiB")) => (n, 10),
            Some((n, "MiB")) => (n, 20),
            Some((n, "GiB")) => (n, 30),
            Some(_) => return None,
            None => (text, 0),
        };
        n.parse::<u64>().ok().map(|n| n << shift)
    }

    /// Every row of the limits table in `docs/operations.md` names a key
    /// and shows its default.
    #[test]
    fn the_docs_limits_table_shows_the_defaults() {
        let docs = include_str!("../../../docs/operations.md");
        let table = toml::Value::try_from(Config::default()).unwrap();
        let mut rows = 0;
        for line in docs.lines() {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let [_, name, default, ..] = cells.as_slice() else {
                continue;
            };
            let Some(name) = name.strip_prefix('`').and_then(|k| k.strip_suffix('`')) else {
                continue;
            };
            assert!(
                key(name).is_some(),
                "docs/operations.md: unknown key `{name}`"
            );
            let value = name
                .split('.')
                .try_fold(&table, |t, part| t.get(part))
                .and_then(toml::Value::as_integer)
                .unwrap_or_else(|| panic!("`{name}` has no integer default"));
            assert_eq!(
                doc_number(default),
                u64::try_from(value).ok(),
                "docs/operations.md: `{name}` default is {value}, the table says {default}"
            );
            rows += 1;
        }
        assert!(rows >= 10, "the limits table was not found ({rows} rows)");
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
        assert_eq!(with("cubic").unwrap().quic.congestion, Congestion::Cubic);
        assert_eq!(
            with("new_reno").unwrap().quic.congestion,
            Congestion::NewReno
        );
        // Unset: chosen by each connection's round trip.
        let default = load(&Sources {
            env: env(&[("ZTSERVE_ROOT", "/m")]),
            ..Sources::default()
        })
        .unwrap();
        assert_eq!(default.quic.congestion, Congestion::Auto);
        assert_eq!(default.quic.wide_area_rtt_ms, 10);
        let bound = |v: &str| {
            load(&Sources {
                env: env(&[("ZTSERVE_ROOT", "/m"), ("ZTSERVE_QUIC_WIDE_AREA_RTT_MS", v)]),
                ..Sources::default()
            })
        };
        assert_eq!(bound("300").unwrap().quic.wide_area_rtt_ms, 300);
        for refused in ["0", "301"] {
            let err = format!("{:#}", bound(refused).unwrap_err());
            assert!(err.contains("quic.wide_area_rtt_ms"), "{err}");
        }
        let err = with("vegas").unwrap_err();
        assert!(format!("{err:#}").contains("congestion"), "{err:#}");
    }

    #[test]
    fn flow_control_windows_too_small_to_send_are_refused() {
        let with = |key: &str, v: &str| {
            load(&Sources {
                env: env(&[("ZTSERVE_ROOT", "/m"), (key, v)]),
                ..Sources::default()
            })
        };
        for (key, name, least) in [
            (
                "ZTSERVE_QUIC_CONNECTION_WINDOW",
                "quic.connection_window",
                4 << 20,
            ),
            ("ZTSERVE_QUIC_STREAM_WINDOW", "quic.stream_window", 64 << 10),
        ] {
            for refused in [1, least - 1] {
                let err = format!("{:#}", with(key, &refused.to_string()).unwrap_err());
                assert!(err.contains(name), "{err}");
            }
            assert!(with(key, &least.to_string()).is_ok(), "{name}");
        }
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
        // The clients' own variables are theirs: one shell runs both.
        let ok = load(&Sources {
            env: env(&[
                ("ZTSERVE_ROOT", "/m"),
                ("ZTSERVE_CACHE", "/tmp/c"),
                ("ZTSERVE_CACHE_MAX", "1G"),
                ("ZTSERVE_ENDPOINT", "http://x"),
                ("ZTSERVE_HUGE_PAGES", "off"),
            ]),
            ..Sources::default()
        });
        assert!(ok.is_ok(), "{:#}", ok.unwrap_err());
        // A datagram bound outside what QUIC and quinn's offload allow.
        for bad in ["1000", "9000"] {
            let err = load(&Sources {
                env: env(&[
                    ("ZTSERVE_ROOT", "/m"),
                    ("ZTSERVE_QUIC_MAX_UDP_PAYLOAD", bad),
                ]),
                ..Sources::default()
            })
            .unwrap_err();
            let text = format!("{err:#}");
            assert!(
                text.contains("quic.max_udp_payload")
                    && text.contains("1200 to 6500")
                    && text.contains("32000 to 65507"),
                "{text}"
            );
        }
        let err = load(&Sources::default()).unwrap_err();
        assert!(format!("{err:#}").contains("root"), "{err:#}");
    }
}
