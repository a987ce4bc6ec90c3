//! A file's manifest over HTTP: its source's header read with Range
//! requests (the footer first, which gives the size and ETag), or, for a
//! file without digests, the manifest a ztserve renders for it with the
//! digests it computed (its `Link: rel="describedby"`).

use reqwest::header::{HeaderMap, ACCEPT, LINK};
use zt_format::source::Probe;
use zt_format::{Origin, Source};

use crate::error::{Error, Result};
use crate::remote::Remote;

use super::request::{read_capped, Want};
use super::HttpSource;

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

impl HttpSource {
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
        // A selection longer than a request line may be (ztserve takes
        // 16 KiB of headers) is applied here, to the whole manifest.
        let query: usize = select.iter().map(|g| g.len() * 3 + 8).sum();
        let by_server = query <= MAX_SELECT_QUERY;
        if by_server && !select.is_empty() {
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
        let view = zt_format::container::View::File;
        let mut manifest =
            crate::decode::manifest(&self.url, body, size, self.limits, view).await?;
        if !by_server {
            manifest = crate::remote::select_from(&manifest, select)?;
        }
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
}

/// The longest `?select=` query a manifest is asked for with, in bytes
/// (each pattern counted as if every character were percent-encoded).
const MAX_SELECT_QUERY: usize = 8 << 10;

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

/// The file's API base from its manifest link: `.../v1/files/{path}`.
fn api_base(manifest_url: &str) -> String {
    let base = manifest_url.split('?').next().unwrap_or(manifest_url);
    base.strip_suffix("/manifest").unwrap_or(base).to_owned()
}
