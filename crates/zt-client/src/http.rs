//! The HTTP transport: the manifest through Range requests on the file
//! (footer, then manifest), then components as parallel Range requests over
//! a pool of connections. It needs nothing but Range support from the
//! server, so it works against ztserve and against nginx serving the raw
//! file alike. Every request after the first carries `If-Range` with the
//! file's ETag, so a file replaced mid-fetch is noticed, not mixed.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use reqwest::header::{HeaderMap, ACCEPT, CONTENT_RANGE, ETAG, IF_RANGE, LINK, RANGE};
use reqwest::StatusCode;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use zt_format::source::Probe;
use zt_format::{AlignedBuf, Limits, Origin, Source};

use crate::budget::{Budget, Held};
use crate::error::{quote, At, Error, Result, Status};
use crate::fetch::{Event, Fetch};
use crate::options::Options;
use crate::pool::BufPool;
use crate::remote::Remote;
use crate::trust::{watched_config, Refusals};
use crate::verify::{Check, Delivered};

/// A component part's turn: a connection slot, and for a component's first
/// part the budget its buffer holds (bounded fetches only).
type Turn = (OwnedSemaphorePermit, Option<Held>);

/// What reading a file's manifest over HTTP found: the [`Remote`], and
/// what only this transport needs of it.
#[derive(Debug, Clone)]
pub(crate) struct Described {
    pub(crate) remote: Remote,
    /// Where synthesized components, which are no byte range of the
    /// file, come from.
    pub(crate) synthesized: SynthesizedAt,
    /// A ztserve's API base for the file (`.../v1/files/{path}`), where
    /// its components and their rows can be asked for by name.
    pub(crate) api: Option<String>,
}

/// Where synthesized components (GGUF string arrays) come from over HTTP.
#[derive(Debug, Clone, Default)]
pub(crate) enum SynthesizedAt {
    /// The client read the header itself and holds their bytes.
    Here(zt_format::container::Synthesized),
    /// A ztserve's component route: `{base}/objects/{object}/{component}`.
    Route(String),
    /// Nowhere.
    #[default]
    None,
}

/// Components larger than this are fetched as several ranges in parallel.
const SPLIT: usize = 4 << 20;

/// A remote `.zt` file over HTTP(S).
#[derive(Debug, Clone)]
pub struct HttpSource {
    client: reqwest::Client,
    url: String,
    options: Arc<Options>,
    limits: Limits,
    pool: Arc<BufPool>,
    /// What the TLS check refused, for the error a request fails with.
    refusals: Refusals,
}

/// The bytes a Range request asks for.
#[derive(Debug, Clone)]
enum Want {
    /// Exactly these.
    Exact(std::ops::Range<u64>),
    /// The file's last N (all of it, if it is shorter).
    Last(u64),
}

/// The `Range` header's value.
impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Want::Exact(r) => write!(f, "bytes={}-{}", r.start, r.end.saturating_sub(1)),
            Want::Last(n) => write!(f, "bytes=-{n}"),
        }
    }
}

impl Want {
    /// Whether a 206 for `span` holds exactly the bytes asked for.
    fn is(&self, span: &Span) -> bool {
        match self {
            Want::Exact(r) => span.first == r.start && span.end() == r.end,
            Want::Last(n) => {
                span.end() == span.total && span.end() - span.first == (*n).min(span.total)
            }
        }
    }
}

/// The start of an error response's body, to quote in the error: at most
/// [`ERROR_TEXT`] bytes are read, whatever the server sends.
async fn error_text(mut resp: reqwest::Response) -> String {
    let mut body = Vec::new();
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = ERROR_TEXT.saturating_sub(body.len());
        body.extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
        if body.len() >= ERROR_TEXT {
            break;
        }
    }
    String::from_utf8_lossy(&body).into_owned()
}

/// The most of an error body [`error_text`] reads.
const ERROR_TEXT: usize = 16 * 1024;

/// A 206's `Content-Range: bytes FIRST-LAST/TOTAL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    first: u64,
    last: u64,
    total: u64,
}

impl Span {
    /// `None` unless `v` is a satisfied byte range with a known total.
    fn parse(v: &str) -> Option<Span> {
        let (range, total) = v.trim().strip_prefix("bytes ")?.split_once('/')?;
        let (first, last) = range.split_once('-')?;
        let span = Span {
            first: first.trim().parse().ok()?,
            last: last.trim().parse().ok()?,
            total: total.trim().parse().ok()?,
        };
        (span.first <= span.last && span.last < span.total).then_some(span)
    }

    /// One past the last byte.
    fn end(&self) -> u64 {
        self.last + 1
    }
}

impl HttpSource {
    /// A source for the file at `url`, with `options.connections`
    /// requests at once.
    pub fn new(url: &str, options: &Arc<Options>) -> Result<Self> {
        crate::trust::install_provider();
        let (tls, refusals) = watched_config(&options.trust, b"http/1.1")?;
        // A silent server counts as lost after the same time over both
        // transports (the error is a resumable transport error).
        let silent = options.idle_timeout.max(Duration::from_millis(1));
        let mut builder = reqwest::Client::builder();
        if let Ok(u) = reqwest::Url::parse(url) {
            if let (Some(host), Some(port)) = (u.host_str(), u.port_or_known_default()) {
                if let Some(addr) = options.pinned(host, port) {
                    builder = builder.resolve(host, addr);
                }
            }
        }
        let client = builder
            .use_preconfigured_tls(tls)
            .pool_max_idle_per_host(options.connections.max(1))
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
            refusals,
        })
    }

    /// Takes back a delivered component's buffer for a later component.
    pub fn recycle(&self, buf: AlignedBuf) {
        self.pool.give(buf);
    }

    fn request(&self, range: &str, etag: Option<&str>) -> reqwest::RequestBuilder {
        let mut r = self.client.get(&self.url).header(RANGE, range);
        if let Some(e) = etag {
            r = r.header(IF_RANGE, e);
        }
        if let Some(t) = &self.options.token {
            r = r.bearer_auth(t);
        }
        r
    }

    /// Sends one Range request and checks its status and that the server
    /// sends the bytes asked for (`want`); returns the response, the ETag
    /// and the `Content-Range`.
    async fn send_range(
        &self,
        want: &Want,
        etag: Option<&str>,
    ) -> Result<(reqwest::Response, Option<String>, Span)> {
        let spec = want.to_string();
        let resp = self.request(&spec, etag).send().await.map_err(|e| {
            let what = format!("GET {} ({spec})", self.url);
            crate::causes::request_failed(&what, &e, &self.refusals)
        })?;
        match resp.status() {
            StatusCode::PARTIAL_CONTENT => {}
            StatusCode::OK if etag.is_some() => {
                return Err(Error::Changed {
                    url: self.url.clone(),
                    detail: format!("during the fetch (ETag no longer {})", etag.unwrap_or("")),
                })
            }
            StatusCode::OK => {
                return Err(Error::Protocol(format!(
                    "{}: the server ignored the Range request",
                    self.url
                )))
            }
            s => {
                let body = error_text(resp).await;
                let doc: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
                if s == StatusCode::CONFLICT && doc["error"] == "corrupt" {
                    // ztserve checked the bytes against their digest: no
                    // retry or resume can fix that.
                    return Err(Error::Corrupt {
                        at: None,
                        message: format!(
                            "{} ({spec}): the server refused corrupt bytes: {}",
                            self.url,
                            doc["detail"].as_str().unwrap_or(body.trim())
                        ),
                    });
                }
                return Err(Error::Server {
                    status: Status::Http(s.as_u16()),
                    message: format!("{}: HTTP {s}: {}", self.url, quote(body.trim())),
                });
            }
        }
        let tag = resp
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let header = resp
            .headers()
            .get(CONTENT_RANGE)
            .and_then(|v| v.to_str().ok());
        let span = header.and_then(Span::parse).ok_or_else(|| {
            Error::Protocol(format!(
                "{}: asked for {spec}, got a 206 without a valid Content-Range ({header:?})",
                self.url
            ))
        })?;
        if !want.is(&span) {
            return Err(Error::Protocol(format!(
                "{}: asked for {spec}, the server sent bytes {}-{}/{}",
                self.url, span.first, span.last, span.total
            )));
        }
        Ok((resp, tag, span))
    }

    /// Reads the bytes `want` names, requiring a 206 for exactly them;
    /// returns them, the ETag and the file size.
    async fn get_range(
        &self,
        want: Want,
        etag: Option<&str>,
    ) -> Result<(bytes::Bytes, Option<String>, u64)> {
        let (resp, tag, span) = self.send_range(&want, etag).await?;
        // The span was checked against what was asked for: its size is known.
        let len = usize::try_from(span.end() - span.first)
            .map_err(|_| Error::Protocol(format!("{}: a {}-byte range", self.url, span.total)))?;
        let mut body = vec![0u8; len];
        self.read_body(resp, &want, &mut body).await?;
        Ok((body.into(), tag, span.total))
    }

    /// Bytes `range` of the file, which must still have `etag`.
    pub(crate) async fn read_range(
        &self,
        range: std::ops::Range<u64>,
        etag: &str,
    ) -> Result<Vec<u8>> {
        if range.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .get_range(Want::Exact(range), Some(etag))
            .await?
            .0
            .to_vec())
    }

    /// Reads bytes `start..start + into.len()` of the file straight into
    /// `into`, as the body arrives.
    async fn fill(&self, start: u64, into: &mut [u8], etag: &str) -> Result<()> {
        let want = Want::Exact(start..start + into.len() as u64);
        let (resp, _, _) = self.send_range(&want, Some(etag)).await?;
        self.read_body(resp, &want, into).await
    }

    /// Reads `resp`'s body into `into`, which it must fill exactly: a body
    /// that runs longer fails at its first extra byte (whatever its
    /// `Content-Length` claimed), one that ends short fails as resumable.
    async fn read_body(
        &self,
        mut resp: reqwest::Response,
        want: &Want,
        into: &mut [u8],
    ) -> Result<()> {
        let spec = want.to_string();
        let mut pos = 0usize;
        loop {
            let chunk = resp
                .chunk()
                .await
                .map_err(|e| broke_off(&self.url, &spec, Some(pos), &e))?;
            let Some(chunk) = chunk else { break };
            into.get_mut(pos..pos + chunk.len())
                .ok_or_else(|| {
                    Error::Protocol(format!("{}: asked for {spec}, got more bytes", self.url))
                })?
                .copy_from_slice(&chunk);
            pos += chunk.len();
        }
        if pos != into.len() {
            return Err(Error::Transport(format!(
                "{}: asked for {spec}, the body ended after {pos} bytes",
                self.url
            )));
        }
        Ok(())
    }

    /// Reads the file's header through its source's read plan (the
    /// source is named by the URL's extension; `.zt` when it names none),
    /// starting from the footer, which also gives the size and ETag. A
    /// ztserve names the file's manifest in a `Link: rel="describedby"`
    /// header: for a source that carries no digests (safetensors, a `.zt`
    /// file written without them) the manifest comes from there instead,
    /// with the digests the server computed, so every byte is verified,
    /// restricted to the objects `select` names (every object when empty),
    /// so that the server hashes only those if it has not yet. A server
    /// that was still hashing the file can finish between the footer and
    /// the manifest, which then names the file's final ETag: the header
    /// is read again once, under that ETag.
    pub(crate) async fn manifest(&self, select: &[String]) -> Result<Described> {
        match self.manifest_once(select).await {
            Err(Error::Changed { .. }) => self.manifest_once(select).await,
            other => other,
        }
    }

    async fn manifest_once(&self, select: &[String]) -> Result<Described> {
        let want = Want::Last(16);
        let (resp, etag, span) = self.send_range(&want, None).await?;
        let described = describedby(&self.url, resp.headers());
        let tail_len = usize::try_from(span.end() - span.first).unwrap_or(0);
        let mut tail = vec![0u8; tail_len];
        self.read_body(resp, &want, &mut tail).await?;
        let size = span.total;
        let etag = etag.ok_or_else(|| {
            Error::Protocol(format!(
                "{}: the server sends no ETag; a consistent fetch needs one",
                self.url
            ))
        })?;
        let source = crate::url_path::file_name(&self.url)
            .and_then(|n| zt_format::source::by_name(&n))
            .unwrap_or(Source::Zt);
        if let (false, Some(url)) = (source == Source::Zt, &described) {
            return self.server_manifest(url, select, size, etag).await;
        }
        let tail_range = size - tail.len() as u64..size;
        let mut probe = Probe::new(source, &self.url, size, self.limits);
        while let Some(r) = probe.next_read() {
            let bytes = if r == tail_range {
                tail.clone()
            } else {
                self.get_range(Want::Exact(r), Some(&etag))
                    .await?
                    .0
                    .to_vec()
            };
            probe.feed(&bytes)?;
        }
        let parsed = probe.finish()?.parsed;
        let manifest = parsed.manifest;
        let undigested = manifest.components().any(|(_, _, c)| c.digest.is_none());
        match described {
            Some(url) if undigested && manifest.origin == Origin::V1 => {
                self.server_manifest(&url, select, size, etag).await
            }
            _ => {
                // The file's own manifest names every object: restricted
                // here as a server restricts the one it renders, or a
                // `.zt` file over HTTP answers a selection with every
                // object (issue 26).
                let manifest = if select.is_empty() {
                    manifest
                } else {
                    crate::remote::select_from(&manifest, select)
                        .map_err(|e| e.within(&self.url))?
                };
                Ok(Described {
                    remote: Remote {
                        manifest,
                        etag,
                        size,
                    },
                    synthesized: SynthesizedAt::Here(parsed.synthesized),
                    api: described.as_deref().map(api_base),
                })
            }
        }
    }

    /// The manifest a ztserve renders for the file (CBOR), checked to be
    /// of the version whose ETag the footer came with.
    async fn server_manifest(
        &self,
        url: &str,
        select: &[String],
        size: u64,
        etag: String,
    ) -> Result<Described> {
        let mut target = reqwest::Url::parse(url).map_err(|e| {
            Error::Protocol(format!("{}: its manifest link {url:?}: {e}", self.url))
        })?;
        if !select.is_empty() {
            let mut q = target.query_pairs_mut();
            for g in select {
                q.append_pair("select", g);
            }
        }
        let req = self
            .client
            .get(target.as_str())
            .header(ACCEPT, "application/cbor");
        let resp = self.get_ok(req, url).await?;
        let of = resp
            .headers()
            .get("x-zt-etag")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if of.as_deref() != Some(etag.as_str()) {
            return Err(Error::Changed {
                url: self.url.clone(),
                detail: format!(
                    "while its manifest was read (ETag {etag}, the manifest is of {})",
                    of.as_deref().unwrap_or("an unnamed version")
                ),
            });
        }
        let cap = usize::try_from(self.limits.manifest_cap).unwrap_or(usize::MAX);
        let body = read_capped(resp, cap, url).await?;
        let (manifest, _) = zt_format::container::decode_manifest(
            &self.url,
            &body,
            size,
            &self.limits,
            zt_format::container::View::File,
        )?;
        let base = api_base(url);
        Ok(Described {
            remote: Remote {
                manifest,
                etag,
                size,
            },
            synthesized: SynthesizedAt::Route(base.clone()),
            api: Some(base),
        })
    }

    /// Starts fetching every object of `remote.manifest` (already filtered
    /// to the selection), explicit `order` first, at most `connections`
    /// requests at a time; components are delivered as they complete,
    /// synthesized ones from `synthesized`. With `max_buffered`, no
    /// request goes out for a component whose bytes would not fit beside
    /// those delivered but not yet taken.
    pub(crate) fn fetch(
        &self,
        remote: Remote,
        synthesized: SynthesizedAt,
        order: &[String],
        max_buffered: Option<u64>,
    ) -> Result<Fetch> {
        let manifest = remote.manifest;
        let items: Vec<(At, zt_format::Component)> = zt_format::send_order(&manifest, order)
            .into_iter()
            .map(|(o, r, c)| {
                let at = At {
                    object: o.to_owned(),
                    component: r.to_owned(),
                };
                (at, c.clone())
            })
            .collect();
        for (at, c) in &items {
            if c.is_transformed() {
                return Err(Error::Usage(format!("{}: {at} is in a legacy layout that byte ranges cannot carry; convert the file with zt pack", self.url)));
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let n = items.len() as u64;
        let synthesized = Arc::new(synthesized);
        let files = manifest.files.clone();
        // Every part of every component waits for a turn that one driver
        // hands out strictly in send order, so the first layer's requests
        // go out first whatever order the tasks happen to run in.
        // A component's first turn also waits for room in the budget.
        let mut turns: Vec<(oneshot::Sender<Turn>, Option<u64>)> = Vec::new();
        for (seq, item) in items.into_iter().enumerate() {
            let length = item.1.length;
            let parts = usize::try_from(length.div_ceil(SPLIT as u64).max(1)).unwrap_or(usize::MAX);
            let (give, take): (Vec<_>, Vec<_>) = (0..parts).map(|_| oneshot::channel()).unzip();
            turns.extend(
                give.into_iter()
                    .enumerate()
                    .map(|(i, g)| (g, (i == 0).then_some(length))),
            );
            // A component of a sharded checkpoint is read from its shard,
            // under the shard's own ETag.
            let (src, etag) = match &item.1.file {
                None => (self.clone(), remote.etag.clone()),
                Some(f) => {
                    let part = files.get(f).and_then(|p| p.etag.clone()).ok_or_else(|| {
                        Error::Protocol(format!(
                            "{}: the manifest gives no ETag for file {f:?}",
                            self.url
                        ))
                    })?;
                    (self.for_file(f)?, part)
                }
            };
            let tx = tx.clone();
            let synthesized = Arc::clone(&synthesized);
            tokio::spawn(async move {
                let mut held = None;
                let r = src
                    .component(&item, seq as u64, &etag, take, &mut held, &synthesized)
                    .await;
                let _ = tx.send((Event::Component(r), held));
            });
        }
        let slots = Arc::new(Semaphore::new(self.options.connections.max(1)));
        let budget = max_buffered.map(Budget::new);
        tokio::spawn(async move {
            for (turn, length) in turns {
                let held = match (&budget, length) {
                    (Some(b), Some(len)) => b.reserve(len).await,
                    _ => None,
                };
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                // A component that already failed drops its turns, and
                // the permit (and budget) go straight back.
                let _ = turn.send((permit, held));
            }
        });
        Ok(Fetch::new(0, manifest, remote.etag, remote.size, n, rx))
    }

    async fn component(
        &self,
        (at, c): &(At, zt_format::Component),
        seq: u64,
        etag: &str,
        turns: Vec<oneshot::Receiver<Turn>>,
        held: &mut Option<Held>,
        synthesized: &SynthesizedAt,
    ) -> Result<Delivered> {
        let cap = self.options.component_cap;
        if c.length > cap {
            let why = format!("{} bytes exceed the cap of {cap}", c.length);
            return Err(Error::corrupt(at, why));
        }
        let mut check = Check::new(
            c.digest.as_ref(),
            self.options.allow_unverified,
            self.options.require_digest,
            at,
        )?;
        let gone = || Error::Transport(format!("{at}: the fetch was dropped"));
        let mut turns = turns.into_iter();
        // The first part's turn comes before the buffer is allocated, so
        // queued components hold no memory.
        let (first, budget) = turns.next().ok_or_else(gone)?.await.map_err(|_| gone())?;
        *held = budget;
        // Every byte is overwritten by the parts below, or the component fails.
        let mut data = self
            .pool
            .take(c.length)
            .map_err(|r| Error::corrupt(at, r))?;
        if c.synthesized {
            // No byte range of the file holds it: its bytes are here, or
            // at the server's component route. One part, one turn.
            drop(turns);
            self.synthesized_bytes(at, synthesized, data.as_mut_slice())
                .await?;
            check.update(data.as_slice());
            let verification = check.finish(at)?;
            return Ok(delivered(at, seq, c, data, verification));
        }
        // Parts are fetched at once, each streamed straight to its place in
        // the aligned buffer; the digest takes each part as soon as every
        // part before it is in, so hashing overlaps the transfer.
        let mut parts = FuturesUnordered::new();
        let mut first = Some(first);
        for (i, part) in data.as_mut_slice().chunks_mut(SPLIT).enumerate() {
            let held = first.take();
            let turn = if held.is_none() { turns.next() } else { None };
            let pos = c.offset + (i * SPLIT) as u64;
            parts.push(async move {
                let _permit = match (held, turn) {
                    (Some(p), _) => p,
                    (None, Some(t)) => t.await.map_err(|_| gone())?.0,
                    (None, None) => return Err(gone()),
                };
                self.fill(pos, part, etag)
                    .await
                    .map(|()| (i, part))
                    .map_err(|e| e.within(&at.to_string()))
            });
        }
        let mut arrived: Vec<Option<&mut [u8]>> = Vec::new();
        let mut next = 0usize;
        while let Some(r) = parts.next().await {
            let (i, part) = r?;
            if arrived.len() <= i {
                arrived.resize_with(i + 1, || None);
            }
            if let Some(slot) = arrived.get_mut(i) {
                *slot = Some(part);
            }
            while let Some(Some(part)) = arrived.get(next) {
                check.update(part);
                next += 1;
            }
        }
        drop((parts, arrived));
        let verification = check.finish(at)?;
        Ok(delivered(at, seq, c, data, verification))
    }

    /// The same source for `name`, a file of a multi-file entry, beside
    /// this one (a shard next to its index).
    fn for_file(&self, name: &str) -> Result<HttpSource> {
        Ok(HttpSource {
            url: beside(&self.url, name)?,
            ..self.clone()
        })
    }

    /// Sends a GET (with the bearer token) that must answer 200.
    async fn get_ok(&self, req: reqwest::RequestBuilder, url: &str) -> Result<reqwest::Response> {
        self.get_expecting(req, url, StatusCode::OK).await
    }

    /// Sends a GET (with the bearer token) that must answer `want`.
    async fn get_expecting(
        &self,
        mut req: reqwest::RequestBuilder,
        url: &str,
        want: StatusCode,
    ) -> Result<reqwest::Response> {
        if let Some(t) = &self.options.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| {
            crate::causes::request_failed(&format!("GET {url}"), &e, &self.refusals)
        })?;
        let status = resp.status();
        if status != want {
            let body = error_text(resp).await;
            return Err(Error::Server {
                status: Status::Http(status.as_u16()),
                message: format!("{url}: HTTP {status}: {}", quote(body.trim())),
            });
        }
        Ok(resp)
    }

    /// Rows `rows` (`len` bytes) of `object`'s `data` from a ztserve's
    /// component route under `base`, pinned to version `etag`: a `206`
    /// whose `Content-Digest` (sha-256 of exactly these bytes, attested by
    /// the server) they must match. Returns the bytes and that digest.
    pub(crate) async fn read_rows(
        &self,
        base: &str,
        etag: &str,
        object: &str,
        rows: zt_format::rows::Rows,
        len: u64,
    ) -> Result<(AlignedBuf, zt_format::Digest)> {
        let at = At {
            object: object.to_owned(),
            component: "data".to_owned(),
        };
        let mut url =
            reqwest::Url::parse(base).map_err(|e| Error::Protocol(format!("{base}: {e}")))?;
        url.path_segments_mut()
            .map_err(|()| Error::Protocol(format!("{base}: not a base URL")))?
            .extend(["objects", object, "data"]);
        url.query_pairs_mut()
            .append_pair("rows", &format!("{}:{}", rows.start, rows.end))
            .append_pair("v", etag.trim_matches('"'));
        let req = self.client.get(url.as_str());
        let resp = self
            .get_expecting(req, url.as_str(), StatusCode::PARTIAL_CONTENT)
            .await?;
        let claimed = resp
            .headers()
            .get("content-digest")
            .and_then(|v| v.to_str().ok())
            .and_then(content_digest_sha256)
            .ok_or_else(|| Error::Unverifiable {
                at: Some(at.clone()),
                message: format!("{url}: {at}: rows came without a sha-256 Content-Digest"),
            })?;
        let mut buf = AlignedBuf::zeroed(len).map_err(|r| Error::corrupt(&at, r))?;
        let want = Want::Exact(0..len);
        self.read_body(resp, &want, buf.as_mut_slice()).await?;
        let mut h = zt_format::Hasher::new(zt_format::DigestAlgorithm::Sha256);
        h.update(buf.as_slice());
        let got = h.finish();
        if got.sha256() != Some(&claimed) {
            return Err(Error::corrupt(
                &at,
                format!(
                    "rows {}:{} do not match their Content-Digest (got {})",
                    rows.start,
                    rows.end,
                    got.as_str()
                ),
            ));
        }
        Ok((buf, got))
    }

    /// A synthesized component's bytes into `into` (exactly its length).
    async fn synthesized_bytes(
        &self,
        at: &At,
        from: &SynthesizedAt,
        into: &mut [u8],
    ) -> Result<()> {
        let key = (at.object.clone(), at.component.clone());
        match from {
            SynthesizedAt::Here(map) => {
                let b = map.get(&key).filter(|b| b.len() == into.len());
                let b = b.ok_or_else(|| {
                    Error::Protocol(format!("{}: {at} has no bytes of its length", self.url))
                })?;
                into.copy_from_slice(b);
                Ok(())
            }
            SynthesizedAt::Route(base) => {
                let mut url = reqwest::Url::parse(base)
                    .map_err(|e| Error::Protocol(format!("{base}: {e}")))?;
                url.path_segments_mut()
                    .map_err(|()| Error::Protocol(format!("{base}: not a base URL")))?
                    .extend(["objects", &at.object, &at.component]);
                let resp = self
                    .get_ok(self.client.get(url.as_str()), url.as_str())
                    .await?;
                let want = Want::Exact(0..into.len() as u64);
                self.read_body(resp, &want, into).await
            }
            SynthesizedAt::None => Err(Error::Protocol(format!(
                "{}: {at} is synthesized by the server, and this transport cannot reach it",
                self.url
            ))),
        }
    }
}

/// A verified component, ready for the consumer.
fn delivered(
    at: &At,
    seq: u64,
    c: &zt_format::Component,
    data: AlignedBuf,
    verification: crate::verify::Verification,
) -> Delivered {
    Delivered {
        object: at.object.clone(),
        component: at.component.clone(),
        seq,
        dtype: c.dtype,
        logical_type: c.logical_type.clone(),
        encoding: c.encoding,
        uncompressed_length: c.uncompressed_length,
        digest: c.digest.clone(),
        data,
        verification,
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

/// The absolute URL of a `Link: <...>; rel="describedby"` header.
fn describedby(base: &str, headers: &HeaderMap) -> Option<String> {
    let base = reqwest::Url::parse(base).ok()?;
    headers
        .get_all(LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|link| {
            let (target, params) = link.trim().split_once(';')?;
            let target = target.trim().strip_prefix('<')?.strip_suffix('>')?;
            let described = params
                .split(';')
                .any(|p| p.trim().trim_start_matches("rel=").trim_matches('"') == "describedby");
            described.then(|| base.join(target).ok().map(String::from))?
        })
}

/// A whole response body of at most `cap` bytes.
async fn read_capped(mut resp: reqwest::Response, cap: usize, url: &str) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| Error::Transport(format!("GET {url}: {}", crate::causes::chain(&e))))?
    {
        if body.len() + chunk.len() > cap {
            return Err(Error::Protocol(format!(
                "{url}: the manifest runs past the cap of {cap} bytes"
            )));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A response body that broke off: a transport error (resumable) that
/// says how far it got and why, down to the innermost cause (reqwest's own
/// message is only "error decoding response body").
fn broke_off(url: &str, spec: &str, after: Option<usize>, e: &reqwest::Error) -> Error {
    let why = crate::causes::chain(e);
    let at = after
        .map(|n| format!(" after {n} bytes"))
        .unwrap_or_default();
    Error::Transport(format!(
        "reading {url} ({spec}): the response broke off{at}: {why}"
    ))
}

/// The sha-256 value of a `Content-Digest` field (RFC 9530), if it has one.
fn content_digest_sha256(field: &str) -> Option<[u8; 32]> {
    use base64::Engine as _;
    field.split(',').find_map(|member| {
        let (alg, value) = member.trim().split_once('=')?;
        if !alg.trim().eq_ignore_ascii_case("sha-256") {
            return None;
        }
        let b64 = value.trim().strip_prefix(':')?.strip_suffix(':')?;
        let bytes = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
        bytes.try_into().ok()
    })
}

/// The file's API base from its manifest link: `.../v1/files/{path}`.
fn api_base(manifest_url: &str) -> String {
    let base = manifest_url.split('?').next().unwrap_or(manifest_url);
    base.strip_suffix("/manifest").unwrap_or(base).to_owned()
}

#[cfg(test)]
mod tests {
    use super::{Span, Want};

    #[test]
    fn a_206_must_hold_exactly_the_bytes_asked_for() {
        let span = |first, last, total| Span { first, last, total };
        assert!(Want::Exact(64..128).is(&span(64, 127, 4096)));
        assert!(!Want::Exact(64..128).is(&span(0, 63, 4096)));
        assert!(!Want::Exact(64..128).is(&span(64, 126, 4096)));
        assert!(Want::Last(16).is(&span(4080, 4095, 4096)));
        assert!(
            Want::Last(16).is(&span(0, 9, 10)),
            "a file shorter than asked"
        );
        assert!(!Want::Last(16).is(&span(0, 4095, 4096)), "the whole file");
        assert!(!Want::Last(16).is(&span(4079, 4094, 4096)), "not the end");
    }

    #[test]
    fn content_ranges_parse_only_when_satisfied_and_sized() {
        let s = |first, last, total| Some(Span { first, last, total });
        assert_eq!(Span::parse("bytes 0-15/16"), s(0, 15, 16));
        assert_eq!(Span::parse("bytes 64-127/4096"), s(64, 127, 4096));
        for bad in [
            "bytes */4096",
            "bytes 0-15/*",
            "bytes 16-15/4096",
            "bytes 0-4096/4096",
            "items 0-15/16",
            "bytes 0-15",
            "bytes -1-15/16",
            "",
        ] {
            assert_eq!(Span::parse(bad), None, "{bad:?}");
        }
    }
}
