//! ztp/1 as a [`Transport`]: one QUIC connection to a ztserve, the file
//! named by its path; ranges, rows and slices as `get`s carrying them.

use std::collections::HashMap;
use std::ops::Range;

use futures_util::future::BoxFuture;
use zt_format::AlignedBuf;

use super::{RowsAsked, SliceAsked, Transport};
use crate::error::{Error, Result};
use crate::fetch::Fetch;
use crate::remote::Remote;
use crate::verify::Delivered;
use crate::ztp::spread::{Asking, Spread};
use crate::ztp::QuicClient;

/// Byte ranges asked for in one request, at most.
const RANGES_PER_REQUEST: usize = 2048;

#[derive(Debug)]
pub(crate) struct QuicTransport {
    /// The client's connection, and the others a fetch spreads over.
    pub(crate) conns: std::sync::Arc<Spread>,
    /// The file's path on the server.
    pub(crate) path: String,
    /// The URL, for errors.
    pub(crate) url: String,
}

impl QuicTransport {
    /// Whether the server offers `feature`: as `first` was told, or, on a
    /// connection that has had no manifest yet (opened again after its
    /// server restarted), as a manifest-only request for `object` then
    /// says (one round trip; PROTOCOL.md section 4: no request depends on
    /// a feature the connection has not been told of).
    async fn offers(&self, first: &QuicClient, feature: &str, object: &str) -> Result<bool> {
        if let Some(known) = first.offers(feature) {
            return Ok(known);
        }
        let select = [zt_format::select::escape(object)];
        drop(first.get_manifest(&self.path, &select).await?);
        Ok(first.offers(feature) == Some(true))
    }

    /// Patterns the server would refuse fail here, as the user's mistake
    /// (a usage error, as over HTTP), not as the server's `no_match`.
    fn check(&self, select: &[String]) -> Result<()> {
        zt_format::select::Selection::new(select)
            .map(drop)
            .map_err(|e| Error::Usage(format!("{}: {e}", self.url)))
    }

    /// The one component a request for `what` (rows, a slice) of
    /// `object` delivers: `len` bytes of that object, verified.
    async fn only(&self, mut f: Fetch, object: &str, len: u64, what: &str) -> Result<Delivered> {
        let d = f.next().await.ok_or_else(|| {
            Error::Protocol(format!("{}: {object}: no {what} arrived", self.url))
        })??;
        if d.object != object || d.data.len() as u64 != len {
            return Err(Error::Protocol(format!(
                "{}: asked for {len} bytes of {what} of {object:?}, got {} of {:?}",
                self.url,
                d.data.len(),
                d.object
            )));
        }
        Ok(d)
    }
}

impl Transport for QuicTransport {
    fn manifest<'a>(&'a self, select: &'a [String]) -> BoxFuture<'a, Result<Remote>> {
        Box::pin(async move {
            self.check(select)?;
            let first = self.conns.first().await?;
            // A selection too long for one request is applied here, to the
            // whole manifest.
            let by_server = zt_format::select::fits_one_request(select);
            let asked = if by_server { select } else { &[] };
            let mut f = first.get_manifest(&self.path, asked).await?;
            let mut manifest = std::mem::take(&mut f.manifest);
            if !by_server {
                manifest = crate::remote::select_from(&manifest, select)?;
            }
            Ok(Remote {
                manifest,
                etag: std::mem::take(&mut f.etag),
                size: f.size,
            })
        })
    }

    fn fetch<'a>(
        &'a self,
        select: &'a [String],
        if_match: Option<&'a str>,
        max_buffered: Option<u64>,
    ) -> BoxFuture<'a, Result<Fetch>> {
        Box::pin(async move {
            self.check(select)?;
            let asking = Asking {
                path: &self.path,
                select,
                if_match,
                max_buffered,
            };
            self.conns.fetch(asking).await
        })
    }

    fn read_ranges<'a>(
        &'a self,
        ranges: &'a [Range<u64>],
        etag: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>>> {
        Box::pin(async move {
            let first = self.conns.first().await?;
            // Unknown on a connection that has had no manifest yet: the
            // answer's features are checked then.
            let offered = first.offers(ztp_proto::FEATURE_RANGES);
            if offered == Some(false) {
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
            let mut out: Vec<Option<Vec<u8>>> = vec![None; ranges.len()];
            // A request is one message of at most 64 KiB: a range costs at
            // most 19 bytes of it.
            for (n, piece) in pairs.chunks(RANGES_PER_REQUEST).enumerate() {
                let at: HashMap<String, usize> = piece
                    .iter()
                    .enumerate()
                    .map(|(i, (a, b))| (ztp_proto::range_object(*a, *b), i))
                    .collect();
                let mut fetch = first.request_ranges(&self.path, piece, etag).await?;
                while let Some(d) = fetch.next().await {
                    let d = d?;
                    let i = at.get(&d.object).copied().ok_or_else(|| {
                        Error::Protocol(format!(
                            "{}: bytes {} were not asked for",
                            self.url, d.object
                        ))
                    })?;
                    if let Some(slot) = out.get_mut(n * RANGES_PER_REQUEST + i) {
                        *slot = Some(d.data.as_slice().to_vec());
                    }
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
        })
    }

    fn read_rows<'a>(&'a self, asked: RowsAsked<'a>) -> BoxFuture<'a, Result<Delivered>> {
        Box::pin(async move {
            let (object, rows) = (asked.object, asked.rows);
            let first = self.conns.first().await?;
            if !self.offers(&first, ztp_proto::FEATURE_ROWS, object).await? {
                return Err(Error::Usage(format!(
                    "{}: the server does not offer rows over ztp/1 (feature {:?})",
                    self.url,
                    ztp_proto::FEATURE_ROWS
                )));
            }
            let f = first
                .request_rows(
                    &self.path,
                    object,
                    (rows.start, rows.end),
                    &asked.remote.etag,
                )
                .await?;
            self.only(f, object, asked.len, "rows").await
        })
    }

    fn read_slice<'a>(&'a self, asked: SliceAsked<'a>) -> BoxFuture<'a, Result<Delivered>> {
        Box::pin(async move {
            let first = self.conns.first().await?;
            let offered = self
                .offers(&first, ztp_proto::FEATURE_SLICES, asked.object)
                .await?;
            if !offered {
                return super::slice_from_rows(self, asked).await;
            }
            let (object, len) = (asked.object, asked.gather.len());
            let ranges = asked
                .gather
                .ranges
                .iter()
                .map(|r| (r.start, r.end))
                .collect();
            let f = first
                .request_slice(&self.path, object, ranges, &asked.remote.etag)
                .await?;
            self.only(f, object, len, "a slice").await
        })
    }

    fn recycle(&self, buf: AlignedBuf) {
        self.conns.recycle(buf);
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.conns.close())
    }
}
