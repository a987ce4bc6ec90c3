//! The HTTP transport: the manifest through Range requests on the file
//! (footer, then manifest), then components as parallel Range requests over
//! a pool of connections. It needs nothing but Range support from the
//! server, so it works against ztserve and against nginx serving the raw
//! file alike. Every request after the first carries `If-Range` with the
//! file's ETag, so a file replaced mid-fetch is noticed, not mixed.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use reqwest::header::{CONTENT_RANGE, ETAG, IF_RANGE, RANGE};
use reqwest::StatusCode;
use tokio::sync::{mpsc, Semaphore};
use zt_format::{AlignedBuf, Limits, Manifest};

use super::trust::{client_config, Trust};
use super::verify::{Check, Delivered, Transport};
use super::Fetch;

/// Components larger than this are fetched as several ranges in parallel.
const SPLIT: u64 = 16 << 20;

/// A remote `.zt` file over HTTP(S).
#[derive(Debug, Clone)]
pub struct HttpSource {
    client: reqwest::Client,
    url: String,
    token: Option<String>,
    connections: usize,
    allow_unverified: bool,
    component_cap: u64,
    limits: Limits,
}

/// The remote file's identity and manifest.
#[derive(Debug, Clone)]
pub struct Remote {
    pub manifest: Manifest,
    pub etag: String,
    pub size: u64,
}

impl HttpSource {
    /// A source for the file at `url`, with `connections` requests at once.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        url: &str,
        trust: &Trust,
        token: Option<String>,
        connections: usize,
        allow_unverified: bool,
        component_cap: u64,
        manifest_cap: u64,
    ) -> Result<Self> {
        crate::server::tls::install_provider();
        let tls = client_config(trust, b"http/1.1")?;
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .pool_max_idle_per_host(connections.max(1))
            .tcp_nodelay(true)
            .build()
            .context("building the HTTP client")?;
        Ok(HttpSource {
            client,
            url: url.to_owned(),
            token,
            connections: connections.max(1),
            allow_unverified,
            component_cap,
            limits: Limits {
                manifest_cap,
                ..Limits::default()
            },
        })
    }

    fn request(&self, range: &str, etag: Option<&str>) -> reqwest::RequestBuilder {
        let mut r = self.client.get(&self.url).header(RANGE, range);
        if let Some(e) = etag {
            r = r.header(IF_RANGE, e);
        }
        if let Some(t) = &self.token {
            r = r.bearer_auth(t);
        }
        r
    }

    /// Reads bytes `start..end` of the file, requiring a 206 for exactly them.
    async fn range(
        &self,
        start: u64,
        end: u64,
        etag: Option<&str>,
    ) -> Result<(bytes::Bytes, Option<String>, u64)> {
        let spec = format!("bytes={}-{}", start, end.saturating_sub(1));
        self.get_range(&spec, etag, Some(end - start)).await
    }

    /// Sends one Range request; returns the body, the ETag and the file size.
    async fn get_range(
        &self,
        spec: &str,
        etag: Option<&str>,
        expect: Option<u64>,
    ) -> Result<(bytes::Bytes, Option<String>, u64)> {
        let resp = self
            .request(spec, etag)
            .send()
            .await
            .map_err(|e| Transport(format!("GET {} ({spec}): {e}", self.url)))?;
        match resp.status() {
            StatusCode::PARTIAL_CONTENT => {}
            StatusCode::OK if etag.is_some() => bail!(
                "{}: the file changed on the server during the fetch (ETag no longer {})",
                self.url,
                etag.unwrap_or("")
            ),
            StatusCode::OK => bail!("{}: the server ignored the Range request", self.url),
            s => {
                let body = resp.text().await.unwrap_or_default();
                bail!("{}: HTTP {s}: {}", self.url, body.trim());
            }
        }
        let tag = resp
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let total = resp
            .headers()
            .get(CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.rsplit('/').next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| anyhow!("{}: 206 without a Content-Range total", self.url))?;
        let body = resp
            .bytes()
            .await
            .map_err(|e| Transport(format!("reading {} ({spec}): {e}", self.url)))?;
        if expect.is_some_and(|n| body.len() as u64 != n) {
            bail!("{}: asked for {spec}, got {} bytes", self.url, body.len());
        }
        Ok((body, tag, total))
    }

    /// Fetches the footer and the manifest.
    pub async fn manifest(&self) -> Result<Remote> {
        let (tail, etag, size) = self.get_range("bytes=-16", None, None).await?;
        let etag = etag.ok_or_else(|| {
            anyhow!(
                "{}: the server sends no ETag; a consistent fetch needs one",
                self.url
            )
        })?;
        let (head, _, _) = self.range(0, 8.min(size), Some(&etag)).await?;
        let loc = zt_format::container::locate(&self.url, size, &head, &tail, &self.limits)?;
        let (raw, _, _) = self
            .range(loc.offset, loc.offset + loc.length, Some(&etag))
            .await?;
        let parsed = zt_format::container::decode(&self.url, &loc, &raw, &self.limits)?;
        Ok(Remote {
            manifest: parsed.manifest,
            etag,
            size,
        })
    }

    /// Starts fetching `items` (in the given order), at most `connections`
    /// requests at a time; components are delivered as they complete.
    pub fn fetch(&self, remote: Remote, selected: &[&str], order: &[String]) -> Result<Fetch> {
        let mut manifest = remote.manifest.clone();
        manifest
            .objects
            .retain(|k, _| selected.contains(&k.as_str()));
        let items: Vec<(String, String, zt_format::Component)> =
            crate::order::send_order(&manifest, selected, order)
                .into_iter()
                .map(|(o, r, c)| (o.to_owned(), r.to_owned(), c.clone()))
                .collect();
        for (o, r, c) in &items {
            if c.is_transformed() {
                bail!("{}: object {o:?} component {r:?} is in a legacy layout that byte ranges cannot carry; convert the file with zt pack", self.url);
            }
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let slots = Arc::new(Semaphore::new(self.connections));
        let n = items.len() as u64;
        for (seq, (object, role, c)) in items.into_iter().enumerate() {
            let (src, tx, slots, etag) = (
                self.clone(),
                tx.clone(),
                Arc::clone(&slots),
                remote.etag.clone(),
            );
            tokio::spawn(async move {
                let r = src
                    .component(&object, &role, &c, seq as u64, &etag, &slots)
                    .await;
                let _ = tx.send(r);
            });
        }
        Ok(Fetch::new(0, manifest, remote.etag, remote.size, n, rx))
    }

    async fn component(
        &self,
        object: &str,
        role: &str,
        c: &zt_format::Component,
        seq: u64,
        etag: &str,
        slots: &Arc<Semaphore>,
    ) -> Result<Delivered> {
        let label = format!("object {object:?}, component {role:?}");
        if c.length > self.component_cap {
            bail!(
                "{label}: {} bytes exceed the cap of {}",
                c.length,
                self.component_cap
            );
        }
        let digest = c.digest.as_ref().map(|d| d.as_str().to_owned());
        let mut check = Check::new(digest.as_deref(), self.allow_unverified, &label)?;
        let mut data = AlignedBuf::zeroed(c.length).map_err(|r| anyhow!("{label}: {r}"))?;
        // Large components: several ranges at once, each landing at its
        // place in the aligned buffer, whatever order they finish in.
        let mut parts = tokio::task::JoinSet::new();
        let mut start = 0u64;
        while start < c.length || (c.length == 0 && start == 0) {
            let end = (start + SPLIT).min(c.length);
            let (src, slots, etag) = (self.clone(), Arc::clone(slots), etag.to_owned());
            let (a, b) = (c.offset + start, c.offset + end);
            parts.spawn(async move {
                let _permit = slots.acquire_owned().await;
                if a == b {
                    return Ok((start, bytes::Bytes::new()));
                }
                src.range(a, b, Some(&etag))
                    .await
                    .map(|(body, _, _)| (start, body))
            });
            if c.length == 0 {
                break;
            }
            start = end;
        }
        while let Some(r) = parts.join_next().await {
            let (at, body) = r
                .map_err(|e| anyhow!("{label}: {e}"))?
                .with_context(|| label.clone())?;
            let at = usize::try_from(at)?;
            data.as_mut_slice()
                .get_mut(at..at + body.len())
                .ok_or_else(|| anyhow!("{label}: range outside the component"))?
                .copy_from_slice(&body);
        }
        check.update(data.as_slice());
        let verification = check.finish(&label)?;
        Ok(Delivered {
            object: object.to_owned(),
            component: role.to_owned(),
            seq,
            dtype: c.dtype.name().to_owned(),
            logical_type: c.logical_type.as_ref().map(|t| t.name().to_owned()),
            encoding: c.encoding.name().to_owned(),
            uncompressed_length: c.uncompressed_length,
            digest,
            data,
            verification,
        })
    }
}
