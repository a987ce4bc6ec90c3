//! One client for every transport: `quic://host:port/path.zt` speaks
//! ztp/1; `http(s)://host:port/any/path.zt` uses Range requests on that URL
//! (ztserve's `/path` or `/v1/files/path`, or any plain server such as
//! nginx); a local path is read in place ([`Client::open_local`]). Each is
//! a [`Transport`]; the client never asks which.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::fetch::Fetch;
use crate::options::{Options, Via};
use crate::ranges::HttpSource;
use crate::remote::{select_from, Remote};
use crate::transport::http::HttpTransport;
use crate::transport::local::LocalTransport;
use crate::transport::quic::QuicTransport;
use crate::transport::Transport;
use crate::ztp::spread::Spread;

/// A remote `.zt` file (or a local one, [`Client::open_local`]).
#[derive(Debug)]
pub struct Client {
    pub(crate) transport: Arc<dyn Transport>,
    pub url: String,
    pub options: Arc<Options>,
    /// The last manifest read, and the selection it was read for: what a
    /// fetch pinned to its ETag takes the cache's keys from, without
    /// asking again.
    known: Mutex<Option<(Vec<String>, Arc<Remote>)>>,
}

/// A URL's scheme, host, port (7070 unless given or implied) and path.
pub(crate) fn split_url(url: &str) -> Result<(String, String, u16, String)> {
    let u = url::Url::parse(url).map_err(|e| Error::Usage(format!("bad URL {url:?}: {e}")))?;
    let host = u
        .host_str()
        .ok_or_else(|| Error::Usage(format!("{url}: no host")))?
        .trim_matches(['[', ']'])
        .to_owned();
    let port = u.port_or_known_default().unwrap_or(7070);
    Ok((u.scheme().to_owned(), host, port, u.path().to_owned()))
}

impl Client {
    /// Connects to `url`.
    pub async fn connect(url: &str, options: Options) -> Result<Client> {
        let (scheme, host, port, path) = split_url(url)?;
        let via = match (options.via, scheme.as_str()) {
            (Some(via), _) => via,
            (None, "quic") => Via::Quic,
            (None, "http" | "https") => Via::Http,
            (None, other) => {
                return Err(Error::Usage(format!(
                    "{url}: unsupported scheme {other:?} (quic, http or https)"
                )))
            }
        };
        let options = Arc::new(options);
        let transport: Arc<dyn Transport> = match via {
            Via::Quic => {
                // Before any packet: a path no file can have fails here.
                let file = crate::url_path::ztp_path(url)?;
                let addr: SocketAddr = match options.pinned(&host, port) {
                    Some(addr) => addr,
                    // Resolved on tokio's blocking pool, not on this task's thread.
                    None => tokio::net::lookup_host((host.as_str(), port))
                        .await
                        .map_err(|e| Error::Transport(format!("resolving {host}: {e}")))?
                        .next()
                        .ok_or_else(|| Error::Transport(format!("{host}: no address")))?,
                };
                let server = crate::ztp::Dial {
                    addr,
                    name: &host,
                    port,
                };
                Arc::new(QuicTransport {
                    conns: Arc::new(Spread::connect(server, Arc::clone(&options)).await?),
                    path: file,
                    url: url.to_owned(),
                })
            }
            Via::Http => {
                let http_url = if scheme == "quic" {
                    format!("http://{}/v1/files{}", join_host(&host, port), path)
                } else {
                    url.to_owned()
                };
                Arc::new(HttpTransport::new(
                    HttpSource::new(&http_url, &options)?,
                    url,
                ))
            }
        };
        Ok(Client {
            transport,
            url: url.to_owned(),
            options,
            known: Mutex::default(),
        })
    }

    /// Opens `source`: a `quic://`, `http://` or `https://` URL as
    /// [`Client::connect`] does, anything else as a local path
    /// ([`Client::open_local`]).
    pub async fn open(source: &str, options: Options) -> Result<Client> {
        if Client::is_url(source) {
            Client::connect(source, options).await
        } else {
            Client::open_local(source, options).await
        }
    }

    /// Opens the local file at `path` (any source zt-format reads), to be
    /// read as a remote one is: its components checked against their
    /// digests as they are read, unless `options.allow_unverified`.
    pub async fn open_local(path: &str, options: Options) -> Result<Client> {
        let transport = LocalTransport::open(path, &options).await?;
        Ok(Client {
            transport: Arc::new(transport),
            url: path.to_owned(),
            options: Arc::new(options),
            known: Mutex::default(),
        })
    }

    /// Whether [`Client::open`] takes `source` for a URL (`quic://`,
    /// `http://`, `https://`) rather than a local path.
    pub fn is_url(source: &str) -> bool {
        ["quic://", "http://", "https://"]
            .iter()
            .any(|p| source.starts_with(p))
    }

    /// Whether this client reads a local file ([`Client::open_local`]),
    /// whose ETag is its own name for the version it opened.
    pub fn is_local(&self) -> bool {
        self.transport.is_local()
    }

    /// Ends the session: over QUIC, closes the connection and waits
    /// briefly for the server to hear it (dropping a client closes it too,
    /// but a process that exits at once may not get the close out).
    pub async fn close(&self) {
        self.transport.close().await;
    }

    /// The remote manifest, with the file's ETag and size.
    pub async fn manifest(&self) -> Result<Remote> {
        self.manifest_of(&[]).await
    }

    /// The remote manifest of the objects `select` names (every object
    /// when empty). A ztserve still computing the file's digests hashes
    /// only those first, so one tensor of a cold file is not kept waiting
    /// for the rest; the ETag may then be the file's provisional one,
    /// which the server keeps accepting while the file is unchanged.
    pub async fn manifest_of(&self, select: &[String]) -> Result<Remote> {
        let remote = self.transport.manifest(select).await?;
        if self.options.cache.is_some() {
            if let Ok(mut known) = self.known.lock() {
                *known = Some((select.to_vec(), Arc::new(remote.clone())));
            }
        }
        Ok(remote)
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
        if let Some(cache) = self.options.cache.as_ref().filter(|_| !self.is_local()) {
            if let Some((remote, selected)) = self.pinned(select, if_match).await? {
                let url = &self.url;
                let cached = crate::cache::fetch::start(
                    cache,
                    &self.transport,
                    url,
                    (remote, select),
                    selected,
                    max_buffered,
                );
                if let Some(fetch) = cached.await? {
                    return Ok(fetch);
                }
            }
        }
        self.transport.fetch(select, if_match, max_buffered).await
    }

    /// The manifest a cached fetch of `select` pins to, and the objects
    /// it selects: the one last read when it is of `if_match`'s version
    /// and holds every object `select` can name (all of them, or the
    /// exact names asked for), else one read now. `None` when the version
    /// read is not `if_match` (the fetch then fails as it would uncached).
    async fn pinned(
        &self,
        select: &[String],
        if_match: Option<&str>,
    ) -> Result<Option<(Arc<Remote>, zt_format::Manifest)>> {
        let known = self.known.lock().ok().and_then(|k| k.clone());
        let usable = known.filter(|(read_for, remote)| {
            if_match == Some(remote.etag.as_str())
                && (read_for.is_empty()
                    || read_for == select
                    || !select.is_empty()
                        && select.iter().all(|p| {
                            zt_format::select::Pattern::new(p)
                                .ok()
                                .and_then(|p| p.exact())
                                .is_some_and(|n| remote.manifest.objects.contains_key(&n))
                        }))
        });
        let remote = match usable {
            Some((_, remote)) => remote,
            None => Arc::new(self.manifest_of(select).await?),
        };
        if if_match.is_some_and(|want| want != remote.etag) {
            return Ok(None);
        }
        let selected = select_from(&remote.manifest, select).map_err(|e| e.within(&self.url))?;
        Ok(Some((remote, selected)))
    }

    /// Byte ranges of the file, as it was when its ETag was `etag`: over
    /// HTTP by Range requests, over ztp/1 as a `get` with `ranges` (the
    /// server must name the feature `ranges`; a server that does not is a
    /// usage error, before anything moves). Empty `ranges` only checks that
    /// the transport can carry them.
    pub async fn read_ranges(
        &self,
        ranges: &[std::ops::Range<u64>],
        etag: &str,
    ) -> Result<Vec<Vec<u8>>> {
        self.transport.read_ranges(ranges, etag).await
    }

    /// Hands back a delivered component's buffer once its bytes are no
    /// longer needed, so a later component of this client can reuse it
    /// instead of faulting in fresh memory. Optional: dropping it is fine.
    pub fn recycle(&self, buf: zt_format::AlignedBuf) {
        self.transport.recycle(buf);
    }
}

fn join_host(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
