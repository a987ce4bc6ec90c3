//! One client for both transports: `quic://host:port/path.zt` speaks
//! ztp/1; `http(s)://host:port/any/path.zt` uses Range requests on that URL
//! (ztserve's `/path` or `/v1/files/path`, or any plain server such as
//! nginx).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use zt_format::select::Selection;
use zt_format::Manifest;

use crate::error::{Error, Result};
use crate::fetch::Fetch;
use crate::http::HttpSource;
use crate::options::{Options, Via};
use crate::quic::QuicClient;
use crate::remote::{select_from, Remote, SynthesizedAt};

#[derive(Debug)]
pub(crate) enum Transport {
    Quic {
        client: QuicClient,
        path: String,
    },
    Http {
        source: HttpSource,
        /// The manifest last read and the selection it was read for,
        /// reused by `fetch` instead of asked for again when it holds
        /// every object the fetch selects ([`covers`]).
        cached: Mutex<Option<(Vec<String>, Remote)>>,
    },
}

/// A remote `.zt` file.
#[derive(Debug)]
pub struct Client {
    pub(crate) transport: Transport,
    pub url: String,
    pub options: Arc<Options>,
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
        let transport = match via {
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
                Transport::Quic {
                    client: QuicClient::connect(addr, &host, Arc::clone(&options)).await?,
                    path: file,
                }
            }
            Via::Http => {
                let http_url = if scheme == "quic" {
                    format!("http://{}/v1/files{}", join_host(&host, port), path)
                } else {
                    url.to_owned()
                };
                Transport::Http {
                    source: HttpSource::new(&http_url, &options)?,
                    cached: Mutex::default(),
                }
            }
        };
        Ok(Client {
            transport,
            url: url.to_owned(),
            options,
        })
    }

    /// Ends the session: over QUIC, closes the connection and waits
    /// briefly for the server to hear it (dropping a client closes it too,
    /// but a process that exits at once may not get the close out).
    pub async fn close(&self) {
        if let Transport::Quic { client, .. } = &self.transport {
            client.close().await;
        }
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
        match &self.transport {
            Transport::Quic { client, path } => {
                let mut f = client.get_manifest(path, select).await?;
                Ok(Remote {
                    manifest: std::mem::take(&mut f.manifest),
                    etag: std::mem::take(&mut f.etag),
                    size: f.size,
                    synthesized: SynthesizedAt::None,
                    api: None,
                })
            }
            Transport::Http { source, cached } => {
                let r = source.manifest(select).await?;
                if let Ok(mut c) = cached.lock() {
                    *c = Some((select.to_vec(), r.clone()));
                }
                Ok(r)
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
        match &self.transport {
            Transport::Quic { client, path } => {
                client
                    .request(path, select, &[], if_match, false, max_buffered)
                    .await
            }
            Transport::Http { source, cached } => {
                // Range requests carry If-Range, so a stale cache cannot mix versions.
                let remote = match cached.lock().ok().and_then(|mut c| c.take()) {
                    Some((read_for, r)) if covers(&read_for, &r.manifest, select) => r,
                    _ => source.manifest(select).await?,
                };
                if let Some(want) = if_match {
                    if remote.etag != want {
                        return Err(Error::Changed {
                            url: self.url.clone(),
                            detail: format!("(ETag {want} is now {})", remote.etag),
                        });
                    }
                }
                let manifest =
                    select_from(&remote.manifest, select).map_err(|e| e.within(&self.url))?;
                source.fetch(Remote { manifest, ..remote }, &[], max_buffered)
            }
        }
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
        match &self.transport {
            Transport::Quic { client, path } => {
                let offered = client
                    .features()
                    .is_some_and(|f| f.iter().any(|x| x == ztp_proto::FEATURE_RANGES));
                if !offered {
                    return Err(Error::Usage(format!(
                        "{}: the server does not offer byte ranges over ztp/1 (feature {:?}); fetch a byte-identical copy over http(s), or write a .zt file (-o NAME.zt)",
                        self.url,
                        ztp_proto::FEATURE_RANGES
                    )));
                }
                if ranges.is_empty() {
                    return Ok(Vec::new());
                }
                let pairs: Vec<(u64, u64)> = ranges.iter().map(|r| (r.start, r.end)).collect();
                let mut fetch = client.request_ranges(path, &pairs, etag).await?;
                let mut out: Vec<Option<Vec<u8>>> = vec![None; ranges.len()];
                while let Some(d) = fetch.next().await {
                    let d = d?;
                    let i = pairs
                        .iter()
                        .position(|(a, b)| d.object == ztp_proto::range_object(*a, *b))
                        .ok_or_else(|| {
                            Error::Protocol(format!(
                                "{}: bytes {} were not asked for",
                                self.url, d.object
                            ))
                        })?;
                    if let Some(slot) = out.get_mut(i) {
                        *slot = Some(d.data.as_slice().to_vec());
                    }
                }
                out.into_iter()
                    .zip(&pairs)
                    .map(|(b, (s, e))| {
                        b.ok_or_else(|| {
                            Error::Transport(format!("{}: bytes {s}..{e} did not arrive", self.url))
                        })
                    })
                    .collect()
            }
            Transport::Http { source, .. } => {
                let mut out = Vec::with_capacity(ranges.len());
                for r in ranges {
                    out.push(source.read_range(r.clone(), etag).await?);
                }
                Ok(out)
            }
        }
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

/// Whether a manifest read for `read_for` (restricted to it) holds every
/// object `select` can match: it was read for every object, or for the
/// same patterns, or `select` names exact objects that it holds (what
/// `fetch_to_file` and the Python package ask for after reading it).
fn covers(read_for: &[String], m: &Manifest, select: &[String]) -> bool {
    if read_for.is_empty() || read_for == select {
        return true;
    }
    match Selection::new(select) {
        Ok(s) if !s.is_all() => s
            .patterns()
            .iter()
            .all(|p| p.exact().is_some_and(|name| m.objects.contains_key(&name))),
        _ => false,
    }
}

fn join_host(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(names: &[&str]) -> Manifest {
        let mut m = Manifest::new();
        for n in names {
            let o = zt_format::Object {
                shape: vec![1],
                format: zt_format::Format::Dense,
                attributes: Default::default(),
                components: Default::default(),
            };
            m.objects.insert((*n).to_owned(), o);
        }
        m
    }

    #[test]
    fn a_cached_manifest_is_reused_only_when_it_holds_the_selection() {
        let s = |v: &[&str]| v.iter().map(|p| (*p).to_owned()).collect::<Vec<_>>();
        let m = manifest(&["a.0", "a.1"]);
        assert!(covers(&[], &m, &s(&["b.*"])), "read whole");
        assert!(covers(&s(&["a.*"]), &m, &s(&["a.*"])), "the same patterns");
        assert!(
            covers(&s(&["a.*"]), &m, &s(&["a.0", "a\\.1"])),
            "names it holds"
        );
        assert!(!covers(&s(&["a.*"]), &m, &s(&["b.*"])), "another glob");
        assert!(!covers(&s(&["a.*"]), &m, &s(&["b.0"])), "a name it lacks");
        assert!(!covers(&s(&["a.*"]), &m, &[]), "every object");
    }
}
