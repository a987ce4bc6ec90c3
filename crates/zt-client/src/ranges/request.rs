//! One Range request and its answer, held to exactly what was asked: a
//! `206` whose `Content-Range` names the bytes wanted and whose body is
//! exactly that long, the version pinned with `If-Range`; a refusal read
//! for its reason, at most [`ERROR_TEXT`] bytes of it.

use reqwest::header::{CONTENT_RANGE, ETAG, IF_RANGE, RANGE};
use reqwest::StatusCode;

use crate::error::{quote, Error, Result, Status};

use super::HttpSource;

/// The bytes a Range request asks for.
#[derive(Debug, Clone)]
pub(super) enum Want {
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
pub(super) struct Span {
    pub(super) first: u64,
    pub(super) last: u64,
    pub(super) total: u64,
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
    pub(super) fn end(&self) -> u64 {
        self.last + 1
    }
}

impl HttpSource {
    pub(super) fn request(&self, range: &str, etag: Option<&str>) -> reqwest::RequestBuilder {
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
    /// and the `Content-Range`. A refusal for a passing reason (busy, with
    /// `Retry-After`) is waited out ([`crate::busy`]).
    pub(super) async fn send_range(
        &self,
        want: &Want,
        etag: Option<&str>,
    ) -> Result<(reqwest::Response, Option<String>, Span)> {
        crate::busy::patiently(self.options.busy_wait, || self.send_range_once(want, etag)).await
    }

    /// [`HttpSource::send_range`], sent once.
    async fn send_range_once(
        &self,
        want: &Want,
        etag: Option<&str>,
    ) -> Result<(reqwest::Response, Option<String>, Span)> {
        let spec = want.to_string();
        let resp = self.request(&spec, etag).send().await.map_err(|e| {
            let what = format!("GET {} ({spec})", self.url);
            crate::causes::request_failed(&what, &e, &self.watch)
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
                let retry_after = passing(&resp);
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
                    retry_after,
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
    pub(super) async fn get_range(
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
    pub(super) async fn fill(&self, start: u64, into: &mut [u8], etag: &str) -> Result<()> {
        let want = Want::Exact(start..start + into.len() as u64);
        let (resp, _, _) = self.send_range(&want, Some(etag)).await?;
        self.read_body(resp, &want, into).await
    }

    /// Reads `resp`'s body into `into`, which it must fill exactly: a body
    /// that runs longer fails at its first extra byte (whatever its
    /// `Content-Length` claimed), one that ends short fails as resumable.
    pub(super) async fn read_body(
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

    /// Sends a GET (with the bearer token) that must answer 200.
    pub(super) async fn get_ok(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<reqwest::Response> {
        self.get_expecting(req, url, StatusCode::OK).await
    }

    /// Sends a GET (with the bearer token) that must answer `want`,
    /// waiting out refusals for a passing reason ([`crate::busy`]).
    pub(super) async fn get_expecting(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
        want: StatusCode,
    ) -> Result<reqwest::Response> {
        crate::busy::patiently(self.options.busy_wait, || async {
            // A GET has no body to stream: it always clones.
            let again = req.try_clone().ok_or_else(|| {
                Error::Usage(format!("GET {url}: the request cannot be sent again"))
            })?;
            self.get_expecting_once(again, url, want).await
        })
        .await
    }

    /// [`HttpSource::get_expecting`], sent once.
    async fn get_expecting_once(
        &self,
        mut req: reqwest::RequestBuilder,
        url: &str,
        want: StatusCode,
    ) -> Result<reqwest::Response> {
        if let Some(t) = &self.options.token {
            req = req.bearer_auth(t);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| crate::causes::request_failed(&format!("GET {url}"), &e, &self.watch))?;
        let status = resp.status();
        if status != want {
            let retry_after = passing(&resp);
            let body = error_text(resp).await;
            return Err(Error::Server {
                status: Status::Http(status.as_u16()),
                message: format!("{url}: HTTP {status}: {}", quote(body.trim())),
                retry_after,
            });
        }
        Ok(resp)
    }
}

/// The wait a refusal for a passing reason asks for: a `503` or `429`
/// with a `Retry-After` header (other statuses carry none that means
/// "busy").
fn passing(resp: &reqwest::Response) -> Option<std::time::Duration> {
    let busy = matches!(
        resp.status(),
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS
    );
    let header = resp.headers().get(reqwest::header::RETRY_AFTER)?;
    busy.then(|| crate::busy::retry_after_header(header.to_str().ok()?))
        .flatten()
}

/// A whole response body of at most `cap` bytes.
pub(super) async fn read_capped(
    mut resp: reqwest::Response,
    cap: usize,
    url: &str,
) -> Result<Vec<u8>> {
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
