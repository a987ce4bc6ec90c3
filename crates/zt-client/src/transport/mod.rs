//! The one door a [`crate::Client`] goes through: a transport reads a
//! file's manifest, fetches its components verified, reads byte ranges
//! and rows, and takes buffers back. Three implement it, one per kind of
//! URL: `quic://` (`quic.rs`, over the ztp/1 client of [`crate::ztp`]),
//! `http(s)://` (`http.rs`, over the Range client of [`crate::ranges`]),
//! and a local file (`local.rs`, for callers such as the Python package
//! that open a path and a URL alike). The client holds a `dyn Transport` and never asks
//! which; what one transport needs to remember of a manifest (where the
//! HTTP transport finds components that are no byte range of the file)
//! stays inside it, so a [`Remote`] is the same whichever read it.

pub(crate) mod http;
pub(crate) mod local;
pub(crate) mod quic;

use std::fmt;
use std::ops::Range;

use futures_util::future::BoxFuture;
use zt_format::rows::Rows;
use zt_format::slice::Gather;
use zt_format::{AlignedBuf, Component};

use crate::error::Result;
use crate::fetch::Fetch;
use crate::remote::Remote;
use crate::verify::Delivered;

/// Rows of one object a caller asks for: the manifest it read, the
/// object, the rows, their place in its `data` component and that
/// component.
#[derive(Debug)]
pub(crate) struct RowsAsked<'a> {
    pub(crate) remote: &'a Remote,
    pub(crate) object: &'a str,
    pub(crate) rows: Rows,
    /// Where the rows lie in the component, and how many bytes they are.
    pub(crate) start: u64,
    pub(crate) len: u64,
    pub(crate) data: &'a Component,
}

/// A slice of one object a caller asks for: the manifest it read, the
/// object, where the slice's bytes lie in its `data` component, and that
/// component.
#[derive(Debug)]
pub(crate) struct SliceAsked<'a> {
    pub(crate) remote: &'a Remote,
    pub(crate) object: &'a str,
    pub(crate) gather: &'a Gather,
    pub(crate) data: &'a Component,
}

/// How a client reaches one file.
pub(crate) trait Transport: Send + Sync + fmt::Debug {
    /// The manifest of the objects `select` names (every object when
    /// empty), with the file's ETag and size.
    fn manifest<'a>(&'a self, select: &'a [String]) -> BoxFuture<'a, Result<Remote>>;

    /// Starts fetching the objects `select` names, pinned to `if_match`
    /// when given, holding at most `max_buffered` bytes delivered and not
    /// yet taken when given.
    fn fetch<'a>(
        &'a self,
        select: &'a [String],
        if_match: Option<&'a str>,
        max_buffered: Option<u64>,
    ) -> BoxFuture<'a, Result<Fetch>>;

    /// Byte ranges of the file at version `etag`; empty `ranges` only
    /// checks that the transport can carry them.
    fn read_ranges<'a>(
        &'a self,
        ranges: &'a [Range<u64>],
        etag: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>>>;

    /// The rows asked for, verified, as the object's `data` cut to them.
    fn read_rows<'a>(&'a self, asked: RowsAsked<'a>) -> BoxFuture<'a, Result<Delivered>>;

    /// The slice asked for, verified, its elements in row-major order. By
    /// default the rows it spans are read as this transport reads rows
    /// (over ztp/1 those rows alone, with their digest) and the slice cut
    /// from them; a transport whose server gathers slices does better.
    fn read_slice<'a>(&'a self, asked: SliceAsked<'a>) -> BoxFuture<'a, Result<Delivered>> {
        Box::pin(slice_from_rows(self, asked))
    }

    /// Takes back a delivered component's buffer for a later component.
    fn recycle(&self, buf: AlignedBuf);

    /// Ends the session (a QUIC connection closed and heard).
    fn close(&self) -> BoxFuture<'_, ()>;

    /// Whether the file is local: it has no server, and its ETag is the
    /// client's own name for the version it opened.
    fn is_local(&self) -> bool {
        false
    }
}

/// The slice asked for, cut from the rows it spans, read as `transport`
/// reads rows: what a transport whose server does not gather slices does.
pub(crate) async fn slice_from_rows<T: Transport + ?Sized>(
    transport: &T,
    asked: SliceAsked<'_>,
) -> Result<Delivered> {
    let label = format!("object {:?}", asked.object);
    let first = asked.gather.ranges.first().cloned().unwrap_or(0..0);
    let rows = Rows {
        start: first.start,
        end: first.end,
    };
    let obj = asked.remote.manifest.objects.get(asked.object);
    let (start, len) = obj
        .ok_or_else(|| crate::Error::Protocol(format!("{label}: not in the manifest")))
        .and_then(|o| {
            rows.span(o)
                .map_err(|e| crate::Error::Usage(format!("{label}: {e}")))
        })?;
    let d = transport
        .read_rows(RowsAsked {
            remote: asked.remote,
            object: asked.object,
            rows,
            start,
            len,
            data: asked.data,
        })
        .await?;
    cut_slice(&label, asked.gather, start, d)
}

/// `rows` cut out of `whole`, the object's verified `data` component, into
/// a buffer of their own: what a transport without row digests delivers.
pub(crate) fn cut_rows(url: &str, asked: &RowsAsked<'_>, whole: Delivered) -> Result<Delivered> {
    let at = whole.at();
    let part = usize::try_from(asked.start)
        .ok()
        .zip(usize::try_from(asked.start + asked.len).ok())
        .and_then(|(a, b)| whole.data.as_slice().get(a..b))
        .ok_or_else(|| crate::Error::Protocol(format!("{url}: {at}: shorter than its rows")))?;
    let data = AlignedBuf::copy_from(part).map_err(|r| crate::Error::corrupt(&at, r))?;
    Ok(Delivered {
        data,
        digest: None,
        ..whole
    })
}

/// `gather` copied out of `part`, verified bytes of the object's `data`
/// component from byte `offset` on (the rows the slice spans, or all of
/// it), into a buffer of its own: what a transport without slice digests
/// delivers.
pub(crate) fn cut_slice(
    url: &str,
    gather: &Gather,
    offset: u64,
    whole: Delivered,
) -> Result<Delivered> {
    let at = whole.at();
    let len = usize::try_from(gather.len())
        .map_err(|_| crate::Error::Usage(format!("{url}: {at}: the slice is too large")))?;
    let mut out = Vec::with_capacity(len);
    for run in gather.runs() {
        let bytes = run
            .start
            .checked_sub(offset)
            .zip(run.end.checked_sub(offset));
        let part = bytes
            .and_then(|(a, b)| usize::try_from(a).ok().zip(usize::try_from(b).ok()))
            .and_then(|(a, b)| whole.data.as_slice().get(a..b))
            .ok_or_else(|| {
                crate::Error::Protocol(format!("{url}: {at}: shorter than its slice"))
            })?;
        out.extend_from_slice(part);
    }
    let data = AlignedBuf::copy_from(&out).map_err(|r| crate::Error::corrupt(&at, r))?;
    Ok(Delivered {
        data,
        digest: None,
        ..whole
    })
}
