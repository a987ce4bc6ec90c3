//! The HTTP Range client: the manifest through Range requests on the file
//! (footer, then manifest), then components as parallel Range requests over
//! a pool of connections. It needs nothing but Range support from the
//! server, so it works against ztserve and against nginx serving the raw
//! file alike. Every request after the first carries `If-Range` with the
//! file's ETag, so a file replaced mid-fetch is noticed, not mixed.
//!
//! `request.rs` sends one request and holds its answer to exactly what was
//! asked, `manifest.rs` reads a file's manifest (the file's own, or the
//! one a ztserve renders with the digests it computed), `fetch.rs` fetches
//! components, rows and synthesized components. `transport/http.rs` puts
//! it behind the client's `Transport` door.

mod fetch;
mod manifest;
mod request;

use std::sync::Arc;
use std::time::Duration;

use zt_format::{AlignedBuf, Limits};

use crate::error::{Error, Result};
use crate::options::Options;
use crate::pool::BufPool;
use crate::trust::{watched_config, Watch};

pub(crate) use manifest::{Described, SynthesizedAt};

/// A remote `.zt` file over HTTP(S).
#[derive(Debug, Clone)]
pub struct HttpSource {
    client: reqwest::Client,
    url: String,
    options: Arc<Options>,
    limits: Limits,
    pool: Arc<BufPool>,
    /// What the TLS check refused, for the error a request fails with.
    watch: Watch,
}

impl HttpSource {
    /// A source for the file at `url`, with `options.connections`
    /// requests at once.
    pub fn new(url: &str, options: &Arc<Options>) -> Result<Self> {
        crate::trust::install_provider();
        let parsed = reqwest::Url::parse(url).ok();
        let host = parsed
            .as_ref()
            .and_then(reqwest::Url::host_str)
            .unwrap_or("");
        let (tls, watch) = watched_config(&options.trust, b"http/1.1", host)?;
        // A silent server counts as lost after the same time over both
        // transports (the error is a resumable transport error).
        let silent = options.idle_timeout.max(Duration::from_millis(1));
        let mut builder = reqwest::Client::builder();
        if let Some(u) = &parsed {
            if let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) {
                if let Some(addr) = options.pinned(host, port) {
                    builder = builder.resolve(host, addr);
                }
            }
        }
        let client = builder
            .use_preconfigured_tls(tls)
            .pool_max_idle_per_host(options.http_connections())
            .tcp_nodelay(true)
            .connect_timeout(silent)
            .read_timeout(silent)
            .build()
            .map_err(|e| Error::Usage(format!("building the HTTP client: {e}")))?;
        Ok(HttpSource {
            client,
            url: url.to_owned(),
            options: Arc::clone(options),
            limits: Limits {
                manifest_cap: options.manifest_cap,
                ..Limits::default()
            },
            pool: Arc::default(),
            watch,
        })
    }

    /// Requests at once, at most.
    pub(crate) fn connections(&self) -> usize {
        self.options.http_connections()
    }

    /// Takes back a delivered component's buffer for a later component.
    pub fn recycle(&self, buf: AlignedBuf) {
        self.pool.give(buf);
    }

    /// The same source for `name`, a file of a multi-file entry, beside
    /// this one (a shard next to its index).
    fn for_file(&self, name: &str) -> Result<HttpSource> {
        Ok(HttpSource {
            url: beside(&self.url, name)?,
            ..self.clone()
        })
    }
}

/// The URL of `name` (a `/`-separated relative path) beside `url`'s file.
pub(crate) fn beside(url: &str, name: &str) -> Result<String> {
    let bad = || Error::Protocol(format!("{url}: no URL for file {name:?} beside it"));
    let mut u = reqwest::Url::parse(url).map_err(|_| bad())?;
    {
        let mut segs = u.path_segments_mut().map_err(|()| bad())?;
        segs.pop();
        segs.extend(name.split('/'));
    }
    Ok(u.to_string())
}
