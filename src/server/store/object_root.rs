//! A root in object storage (`s3://bucket/prefix`; `gs://` and `az://`
//! through the same crate, untested here), through the `object_store`
//! crate: listing its files (paged by the crate), and reading their bytes
//! with ranged GETs pinned to the version listed, so that an object
//! replaced between two reads fails the read as "changed" instead of
//! mixing versions.
//!
//! Credentials and the region come from the standard environment
//! variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`) and the AWS shared
//! credentials and config files (`aws_files.rs`); `[storage]` adds an
//! endpoint for S3-compatible stores, plain HTTP and path-style
//! addressing (the default: what most such stores need). Throttling (503
//! SlowDown) and dropped connections are retried with backoff by the
//! crate (`storage.max_retries` times within `storage.retry_timeout_secs`). Every request is counted for
//! `/metrics`, and ranged GETs are bounded per daemon
//! (`storage.max_concurrent_gets`).

use std::ops::Range;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path as KeyPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use tokio::sync::Semaphore;

use crate::server::config::StorageConfig;
use crate::server::store::metrics::{Op, StoreMetrics};
use crate::server::store::piece_cache::PieceCache;

/// The URL schemes of object storage roots.
const SCHEMES: [&str; 5] = ["s3://", "s3a://", "gs://", "az://", "abfss://"];

/// Whether `root` names object storage rather than a directory.
pub fn is_object_url(root: &str) -> bool {
    SCHEMES.iter().any(|s| root.starts_with(s))
}

pub use super::error::StoreError;

/// A file found by listing the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Its path under the root, `/`-separated.
    pub key: String,
    pub size: u64,
    /// The store's ETag for this version, when it gives one.
    pub etag: Option<String>,
    pub modified: SystemTime,
}

/// An object-storage root.
#[derive(Debug)]
pub struct ObjectRoot {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: KeyPath,
    gets: Semaphore,
    metrics: StoreMetrics,
    /// Recently read pieces (`storage.cache_bytes`).
    cache: PieceCache,
    /// Ranged GETs one reader keeps in flight.
    read_ahead: usize,
    /// Keys a read found replaced or gone, for the catalog to list again
    /// at once ([`ObjectRoot::changed`]).
    changed: std::sync::Mutex<std::collections::BTreeSet<String>>,
    changed_now: tokio::sync::Notify,
    /// The versions reads found replaced or gone, the latest [`STALE`]:
    /// what `Served::changed` asks of an object.
    stale: std::sync::Mutex<Stale>,
}

impl ObjectRoot {
    /// The root at `url`, configured from the environment and `config`.
    pub fn open(url: &str, config: &StorageConfig) -> Result<ObjectRoot, StoreError> {
        ObjectRoot::open_with(url, config, std::env::vars())
    }

    /// [`ObjectRoot::open`] with `env` in place of the process's
    /// environment (only its `AWS_*`, `GOOGLE_*` and `AZURE_*` are read,
    /// and `HOME` for the AWS shared files, read by `aws_files.rs`).
    pub fn open_with(
        url: &str,
        config: &StorageConfig,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ObjectRoot, StoreError> {
        // The store's HTTP client uses the process's rustls provider.
        zt_client::trust::install_provider();
        let bad = |e: &dyn std::fmt::Display| StoreError::Config(format!("root {url:?}: {e}"));
        let parsed = url::Url::parse(url).map_err(|e| bad(&e))?;
        let env: std::collections::BTreeMap<String, String> = env.into_iter().collect();
        let mut options: Vec<(String, String)> = env
            .iter()
            .filter(|(k, _)| {
                ["AWS_", "GOOGLE_", "AZURE_"]
                    .iter()
                    .any(|p| k.starts_with(p))
            })
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        options.extend(crate::server::store::aws_files::settings(&env));
        // `[storage]` (the file, `ZTSERVE_*`, flags) over the store's own
        // variables; a key it leaves unset never overrides them. Later
        // options win, so these go last.
        if let Some(e) = &config.endpoint {
            // AWS_ENDPOINT_URL_S3 would otherwise win over any endpoint.
            options.push(("aws_endpoint".to_owned(), e.clone()));
            options.push(("aws_endpoint_url_s3".to_owned(), e.clone()));
        }
        if let Some(r) = &config.region {
            options.push(("aws_region".to_owned(), r.clone()));
        }
        if let Some(h) = config.allow_http {
            // The generic key: every store's builder takes it.
            options.push(("allow_http".to_owned(), h.to_string()));
        }
        if let Some(v) = config.virtual_hosted_style {
            options.push(("aws_virtual_hosted_style_request".to_owned(), v.to_string()));
        }
        let retry = object_store::RetryConfig {
            max_retries: config.max_retries,
            retry_timeout: std::time::Duration::from_secs(config.retry_timeout_secs),
            ..object_store::RetryConfig::default()
        };
        // Each scheme's builder takes the options its keys name (the rest
        // are another store's) and the retry policy.
        macro_rules! build {
            ($builder:expr) => {{
                let mut b = $builder.with_url(url);
                for (k, v) in &options {
                    if let Ok(key) = k.parse() {
                        b = b.with_config(key, v.clone());
                    }
                }
                b
            }};
        }
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "s3" | "s3a" => {
                let b = build!(object_store::aws::AmazonS3Builder::new());
                plain_http_refused(&b, config.allow_http).map_err(|e| bad(&e))?;
                Arc::new(b.with_retry(retry).build().map_err(|e| bad(&e))?)
            }
            "gs" => Arc::new(
                build!(object_store::gcp::GoogleCloudStorageBuilder::new())
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(&e))?,
            ),
            "az" | "abfss" => Arc::new(
                build!(object_store::azure::MicrosoftAzureBuilder::new())
                    .with_retry(retry)
                    .build()
                    .map_err(|e| bad(&e))?,
            ),
            other => return Err(bad(&format!("no object store for the scheme {other:?}"))),
        };
        let (_, prefix) = object_store::ObjectStoreScheme::parse(&parsed).map_err(|e| bad(&e))?;
        let metrics = StoreMetrics::default();
        Ok(ObjectRoot {
            url: url.trim_end_matches('/').to_owned(),
            store,
            prefix,
            gets: Semaphore::new(config.max_concurrent_gets.max(1)),
            cache: PieceCache::new(config.cache_bytes, metrics.cache_bytes.clone()),
            metrics,
            read_ahead: config.read_ahead.max(1),
            changed: Default::default(),
            changed_now: tokio::sync::Notify::new(),
            stale: Default::default(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    fn note_changed(&self, key: &str, etag: Option<&str>) {
        if let Ok(mut keys) = self.changed.lock() {
            keys.insert(key.to_owned());
        }
        if let Ok(mut stale) = self.stale.lock() {
            stale.note((key.to_owned(), etag.map(str::to_owned)));
        }
        // Kept as a permit when nobody waits yet: never lost.
        self.changed_now.notify_one();
    }

    /// Whether a read found this version of `key` replaced or gone.
    pub(crate) fn is_stale(&self, key: &str, etag: Option<&str>) -> bool {
        self.stale
            .lock()
            .is_ok_and(|s| s.set.contains(&(key.to_owned(), etag.map(str::to_owned))))
    }

    /// Waits until reads have found objects replaced or gone in the
    /// store; their keys.
    pub async fn changed(&self) -> std::collections::BTreeSet<String> {
        loop {
            let keys = self
                .changed
                .lock()
                .map(|mut k| std::mem::take(&mut *k))
                .unwrap_or_default();
            if !keys.is_empty() {
                return keys;
            }
            self.changed_now.notified().await;
        }
    }

    /// The store's path of `key` (a key as listed: used as it is, never
    /// percent-encoded again; the client encodes it once, for the URL).
    fn key_path(&self, key: &str) -> Result<KeyPath, StoreError> {
        let parsed = KeyPath::parse(key).map_err(|_| StoreError::NotFound {
            url: self.url.clone(),
            key: key.to_owned(),
        })?;
        Ok(self.prefix.parts().chain(parsed.parts()).collect())
    }

    fn unreachable(&self, e: &object_store::Error) -> StoreError {
        StoreError::Unreachable {
            url: self.url.clone(),
            detail: e.to_string(),
        }
    }

    /// Every object under the root, with its size, ETag and time. A store
    /// whose listing leaves ETags out (some S3-compatible ones do) is
    /// asked for each missing one with a HEAD request.
    pub async fn list(&self) -> Result<Vec<Listed>, StoreError> {
        self.metrics.request(Op::List);
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let mut stream = self.store.list(prefix);
        let mut out = Vec::new();
        let skip = self.prefix.parts().count();
        while let Some(meta) = stream.next().await {
            let meta = meta.map_err(|e| {
                self.metrics.failure();
                self.unreachable(&e)
            })?;
            let parts: Vec<String> = meta
                .location
                .parts()
                .skip(skip)
                .map(|p| p.as_ref().to_owned())
                .collect();
            out.push(Listed {
                key: parts.join("/"),
                size: meta.size,
                etag: meta.e_tag,
                modified: SystemTime::from(meta.last_modified),
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        let mut kept = Vec::with_capacity(out.len());
        for l in out {
            if l.etag.is_some() {
                kept.push(l);
                continue;
            }
            match self.head(&l.key).await {
                Ok(h) => kept.push(h),
                // Deleted since the listing: not a file any more.
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(kept)
    }

    /// One object's size, ETag and time.
    pub async fn head(&self, key: &str) -> Result<Listed, StoreError> {
        self.metrics.request(Op::Head);
        let path = self.key_path(key)?;
        let meta = self.store.head(&path).await.map_err(|e| {
            self.metrics.failure();
            match e {
                object_store::Error::NotFound { .. } => StoreError::NotFound {
                    url: self.url.clone(),
                    key: key.to_owned(),
                },
                e => self.unreachable(&e),
            }
        })?;
        Ok(Listed {
            key: key.to_owned(),
            size: meta.size,
            etag: meta.e_tag,
            modified: SystemTime::from(meta.last_modified),
        })
    }

    /// Whether the store answers: one listing of at most one page.
    pub async fn check(&self) -> Result<(), StoreError> {
        self.metrics.request(Op::List);
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        self.store
            .list_with_delimiter(prefix)
            .await
            .map(drop)
            .map_err(|e| {
                self.metrics.failure();
                self.unreachable(&e)
            })
    }

    /// Bytes `range` of `key`, which must still be version `etag` when
    /// one is given.
    pub async fn read(
        &self,
        key: &str,
        etag: Option<&str>,
        range: Range<u64>,
    ) -> Result<Bytes, StoreError> {
        let _slot = self
            .gets
            .acquire()
            .await
            .map_err(|_| StoreError::Unreachable {
                url: self.url.clone(),
                detail: "the daemon is stopping".to_owned(),
            })?;
        let started = Instant::now();
        self.metrics.request(Op::Get);
        let options = GetOptions {
            if_match: etag.map(str::to_owned),
            range: Some(GetRange::Bounded(range.clone())),
            ..GetOptions::default()
        };
        let changed = |etag: &str| StoreError::Changed {
            url: self.url.clone(),
            key: key.to_owned(),
            etag: etag.to_owned(),
        };
        let path = self.key_path(key)?;
        let result = async {
            let got = self.store.get_opts(&path, options).await?;
            let now = got.meta.e_tag.clone();
            let bytes = got.bytes().await?;
            Ok::<_, object_store::Error>((now, bytes))
        }
        .await;
        self.metrics.get_took(started.elapsed());
        let (now, bytes) = result.map_err(|e| {
            self.metrics.failure();
            match (&e, etag) {
                (object_store::Error::Precondition { .. }, Some(t)) => {
                    self.note_changed(key, etag);
                    changed(t)
                }
                (object_store::Error::NotFound { .. }, _) => {
                    self.note_changed(key, etag);
                    StoreError::NotFound {
                        url: self.url.clone(),
                        key: key.to_owned(),
                    }
                }
                _ => self.unreachable(&e),
            }
        })?;
        // A store that ignores If-Match still names the version it sent.
        if let (Some(want), Some(now)) = (etag, now.as_deref()) {
            if want != now {
                self.metrics.failure();
                self.note_changed(key, etag);
                return Err(changed(want));
            }
        }
        let want = range.end.saturating_sub(range.start);
        if bytes.len() as u64 != want {
            self.metrics.failure();
            return Err(StoreError::Unreachable {
                url: self.url.clone(),
                detail: format!(
                    "{key}: asked for {want} bytes at {}, got {}",
                    range.start,
                    bytes.len()
                ),
            });
        }
        self.metrics.read(bytes.len() as u64);
        Ok(bytes)
    }

    /// [`ObjectRoot::read`] through the piece cache: the piece that is
    /// exactly `range` if one is kept, otherwise read (and kept when
    /// `keep`: for the send that follows a digest check, or a response's
    /// next reader).
    pub(crate) async fn read_piece(
        &self,
        key: &str,
        etag: Option<&str>,
        range: Range<u64>,
        keep: bool,
    ) -> Result<Bytes, StoreError> {
        if let Some(b) = self.cached(key, etag, &range) {
            return Ok(b);
        }
        let start = range.start;
        let bytes = self.read(key, etag, range).await?;
        if keep {
            self.cache.put(key, etag, start, &bytes);
        }
        Ok(bytes)
    }

    /// The piece that is exactly `range` of this version of `key`, if the
    /// piece cache holds it (a read of it would not ask the store).
    pub(crate) fn cached(
        &self,
        key: &str,
        etag: Option<&str>,
        range: &Range<u64>,
    ) -> Option<Bytes> {
        let got = self.cache.get(key, etag, range)?;
        self.metrics.cache_hit();
        Some(got)
    }

    /// Ranged GETs one reader keeps in flight (`storage.read_ahead`).
    pub(crate) fn read_ahead(&self) -> usize {
        self.read_ahead
    }

    /// Registers the `ztserve_store_*` family in the daemon's registry.
    pub fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        self.metrics.register(registry)
    }
}

/// Versions found stale, at most [`STALE`] of them, the oldest forgotten
/// first (its entry is long listed again by then).
#[derive(Debug, Default)]
struct Stale {
    set: std::collections::HashSet<(String, Option<String>)>,
    order: std::collections::VecDeque<(String, Option<String>)>,
}

/// Most stale versions remembered.
const STALE: usize = 1024;

impl Stale {
    fn note(&mut self, version: (String, Option<String>)) {
        if !self.set.insert(version.clone()) {
            return;
        }
        self.order.push_back(version);
        if self.order.len() > STALE {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// An S3 endpoint that is `http://` while plain HTTP is not allowed: the
/// crate would only fail every request with "builder error".
fn plain_http_refused(
    b: &object_store::aws::AmazonS3Builder,
    explicit: Option<bool>,
) -> Result<(), String> {
    use object_store::aws::AmazonS3ConfigKey as Key;
    let endpoint = b
        .get_config_value(&Key::S3Endpoint)
        .or_else(|| b.get_config_value(&Key::Endpoint));
    let allow = b.get_config_value(&Key::Client(object_store::ClientConfigKey::AllowHttp));
    // A value the crate cannot parse is left for its own error.
    let off = allow.is_none_or(|v| {
        matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "0" | "false" | "off" | "no" | "n"
        )
    });
    // Which setting said off, for the remedy: the daemon's own setting
    // wins over the store's variable, so that is the one to change.
    let remedy = match explicit {
        Some(false) => "storage.allow_http is false (in the configuration file, ZTSERVE_STORAGE_ALLOW_HTTP or a flag): set it to true",
        _ => "set AWS_ALLOW_HTTP=true or storage.allow_http = true",
    };
    match endpoint {
        Some(e) if off && e.trim().to_ascii_lowercase().starts_with("http://") => Err(format!(
            "endpoint {e} is http:// but allow_http is off: {remedy}"
        )),
        _ => Ok(()),
    }
}
