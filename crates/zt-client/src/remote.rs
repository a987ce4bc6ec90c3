//! One client for both transports: `quic://host:port/path.zt` speaks
//! ztp/1; `http(s)://host:port/any/path.zt` uses Range requests on that URL
//! (ztserve's `/v1/files/...` or any plain server such as nginx).

use std::net::SocketAddr;

use anyhow::{anyhow, bail, Context, Result};
use zt_format::Manifest;

use super::http::HttpSource;
use super::quic::{ClientOptions, QuicClient};
use super::trust::Trust;
use super::Fetch;
use zt_format::select::Selection;

/// Which transport to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Quic,
    Http,
}

/// How to connect and what to accept.
#[derive(Debug, Clone)]
pub struct Options {
    pub trust: Trust,
    pub token: Option<String>,
    /// Parallel HTTP requests.
    pub connections: usize,
    /// Accept components whose digest algorithm is unknown.
    pub allow_unverified: bool,
    /// Refuse components that carry no digest.
    pub require_digest: bool,
    /// Override the transport the URL's scheme picks.
    pub via: Option<Via>,
    /// Let `fetch_to_file` write large components with direct I/O where
    /// the filesystem allows it (bypassing the page cache); `false` writes
    /// everything through the page cache.
    pub direct_io: bool,
}

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
        }
    }
}

#[derive(Debug)]
enum Transport {
    Quic {
        client: QuicClient,
        path: String,
    },
    Http {
        source: HttpSource,
        /// The manifest last read, reused by `fetch` instead of asked for again.
        cached: std::sync::Mutex<Option<super::http::Remote>>,
    },
}

/// A remote `.zt` file.
#[derive(Debug)]
pub struct Client {
    transport: Transport,
    pub url: String,
    pub options: Options,
}

fn split_url(url: &str) -> Result<(String, String, u16, String)> {
    let u = url::Url::parse(url).with_context(|| format!("bad URL {url:?}"))?;
    let host = u
        .host_str()
        .ok_or_else(|| anyhow!("{url}: no host"))?
        .trim_matches(['[', ']'])
        .to_owned();
    let port = u.port_or_known_default().unwrap_or(7070);
    Ok((u.scheme().to_owned(), host, port, u.path().to_owned()))
}

impl Client {
    /// Connects to `url`.
    pub async fn connect(url: &str, options: Options) -> Result<Client> {
        let (scheme, host, port, path) = split_url(url)?;
        let via = options.via.unwrap_or(match scheme.as_str() {
            "quic" => Via::Quic,
            "http" | "https" => Via::Http,
            other => bail!("{url}: unsupported scheme {other:?} (quic, http or https)"),
        });
        let transport = match via {
            Via::Quic => {
                let file = path
                    .strip_prefix("/v1/files/")
                    .unwrap_or(&path)
                    .trim_start_matches('/')
                    .to_owned();
                // Resolved on tokio's blocking pool, not on this task's thread.
                let addr: SocketAddr = tokio::net::lookup_host((host.as_str(), port))
                    .await
                    .with_context(|| format!("resolving {host}"))?
                    .next()
                    .ok_or_else(|| anyhow!("{host}: no address"))?;
                let opts = ClientOptions {
                    trust: options.trust.clone(),
                    token: options.token.clone(),
                    allow_unverified: options.allow_unverified,
                    ..ClientOptions::default()
                };
                Transport::Quic {
                    client: QuicClient::connect(addr, &host, opts).await?,
                    path: file,
                }
            }
            Via::Http => {
                let http_url = if scheme == "quic" {
                    format!("http://{}/v1/files{}", join_host(&host, port), path)
                } else {
                    url.to_owned()
                };
                let source = HttpSource::new(
                    &http_url,
                    &options.trust,
                    options.token.clone(),
                    options.connections,
                    options.allow_unverified,
                    64 << 30,
                    zt_format::DEFAULT_MANIFEST_CAP,
                )?;
                Transport::Http {
                    source,
                    cached: std::sync::Mutex::default(),
                }
            }
        };
        Ok(Client {
            transport,
            url: url.to_owned(),
            options,
        })
    }

    /// The remote manifest, with the file's ETag and size.
    pub async fn manifest(&self) -> Result<(Manifest, String, u64)> {
        match &self.transport {
            Transport::Quic { client, path } => {
                let f = client.get_manifest(path).await?;
                Ok((f.manifest, f.etag, f.size))
            }
            Transport::Http { source, cached } => {
                let r = source.manifest().await?;
                if let Ok(mut c) = cached.lock() {
                    *c = Some(r.clone());
                }
                Ok((r.manifest, r.etag, r.size))
            }
        }
    }

    /// Starts fetching the selected objects; components arrive verified, in completion order.
    pub async fn fetch(&self, select: &[String], if_match: Option<&str>) -> Result<Fetch> {
        self.fetch_with(select, if_match, None).await
    }

    /// [`Client::fetch`], holding at most `max_buffered` bytes received but
    /// not yet taken from the [`Fetch`]: a consumer slower than the network
    /// holds the transfer back instead of collecting the file in memory.
    /// Over QUIC other requests on this connection may wait while it is
    /// full (the connection's flow control is shared), so take its
    /// components promptly. `fetch_to_file` uses it.
    pub async fn fetch_bounded(
        &self,
        select: &[String],
        if_match: Option<&str>,
        max_buffered: u64,
    ) -> Result<Fetch> {
        self.fetch_with(select, if_match, Some(max_buffered)).await
    }

    async fn fetch_with(
        &self,
        select: &[String],
        if_match: Option<&str>,
        max_buffered: Option<u64>,
    ) -> Result<Fetch> {
        let f = match &self.transport {
            Transport::Quic { client, path } => {
                client
                    .request(path, select, &[], if_match, false, max_buffered)
                    .await?
            }
            Transport::Http { source, cached } => {
                // Range requests carry If-Range, so a stale cache cannot mix versions.
                let remote = match cached.lock().ok().and_then(|mut c| c.take()) {
                    Some(r) => r,
                    None => source.manifest().await?,
                };
                if let Some(want) = if_match {
                    if remote.etag != want {
                        bail!(
                            "{}: the file changed on the server (ETag {} is now {})",
                            self.url,
                            want,
                            remote.etag
                        );
                    }
                }
                let manifest = Selection::new(select)
                    .and_then(|s| s.filter(&remote.manifest))
                    .map_err(|e| anyhow!("{}: {e}", self.url))?;
                source.fetch(
                    super::http::Remote { manifest, ..remote },
                    &[],
                    max_buffered,
                )?
            }
        };
        Ok(f)
    }

    /// Hands back a delivered component's buffer once its bytes are no
    /// longer needed, so a later component of this client can reuse it
    /// instead of faulting in fresh memory. Optional: dropping it is fine.
    pub fn recycle(&self, buf: zt_format::AlignedBuf) {
        match &self.transport {
            Transport::Quic { client, .. } => client.recycle(buf),
            Transport::Http { source, .. } => source.recycle(buf),
        }
    }
}

fn join_host(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
