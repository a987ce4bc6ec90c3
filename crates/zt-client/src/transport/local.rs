//! A local file as a [`Transport`], so that a caller opens a path as it
//! opens a URL: read through zt-format's reader (mapped, every
//! component checked against its digest on first access unless the
//! options allow unverified bytes), components delivered in send order
//! from the blocking pool, rows cut from the checked component. Its ETag
//! is the client's own name for the version it opened: the file's size
//! and modification time.

use std::ops::Range;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use tokio::sync::mpsc;
use zt_format::{AlignedBuf, Data, ReadOptions, Verify, ZtFile};

use super::{cut_rows, RowsAsked, Transport};
use crate::budget::Budget;
use crate::error::{At, Error, Result};
use crate::fetch::{Event, Fetch};
use crate::options::Options;
use crate::remote::{select_from, Remote};
use crate::verify::{Delivered, Verification};

#[derive(Debug)]
pub(crate) struct LocalTransport {
    file: Arc<ZtFile>,
    etag: String,
    check: Checking,
}

/// How components are checked, from the client's options.
#[derive(Debug, Clone, Copy)]
struct Checking {
    /// Digests are checked (`!allow_unverified`).
    verified: bool,
    /// A component without a digest is refused (`require_digest`; a
    /// caller that reads its own files, such as the Python package, turns
    /// it off for a path).
    require_digest: bool,
}

impl LocalTransport {
    /// Opens `path`: its digests checked as components are read, unless
    /// `options.allow_unverified`.
    pub(crate) async fn open(path: &str, options: &Options) -> Result<LocalTransport> {
        let check = Checking {
            verified: !options.allow_unverified,
            require_digest: options.require_digest,
        };
        let verified = check.verified;
        let read = ReadOptions {
            verify: if verified {
                Verify::Digests
            } else {
                Verify::Skip
            },
            ..ReadOptions::default()
        };
        let owned = path.to_owned();
        let (file, modified) = tokio::task::spawn_blocking(move || {
            let modified = std::fs::metadata(&owned)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            ZtFile::open_with(&owned, read).map(|f| (f, modified))
        })
        .await
        .map_err(|e| Error::Usage(format!("{path}: opening: {e}")))??;
        let etag = format!("\"local-{:x}-{modified:x}\"", file.bytes().len());
        Ok(LocalTransport {
            file: Arc::new(file),
            etag,
            check,
        })
    }

    fn remote(&self, select: &[String]) -> Result<Remote> {
        Ok(Remote {
            manifest: select_from(self.file.manifest(), select)
                .map_err(|e| e.within(self.file.label()))?,
            etag: self.etag.clone(),
            size: self.file.bytes().len() as u64,
        })
    }
}

/// One component read and checked by the reader: its stored bytes, or,
/// for a component in a legacy layout, its decoded bytes delivered as raw
/// (with no digest: the one it carries is of the stored bytes, checked
/// by the reader).
fn read(file: &ZtFile, object: &str, role: &str, seq: u64, check: Checking) -> Result<Delivered> {
    let at = At {
        object: object.to_owned(),
        component: role.to_owned(),
    };
    let c = file
        .object(object)
        .ok()
        .and_then(|o| o.components.get(role))
        .ok_or_else(|| Error::Protocol(format!("{}: {at}: no such component", file.label())))?;
    if check.require_digest && c.digest.is_none() {
        return Err(Error::Unverifiable {
            at: Some(at.clone()),
            message: format!(
                "{}: {at} carries no digest, and the client requires one",
                file.label()
            ),
        });
    }
    let copy = |b: &[u8]| AlignedBuf::copy_from(b).map_err(|r| Error::corrupt(&at, r));
    let (data, encoding, uncompressed_length, digest) = if c.is_transformed() {
        let data = match file.read(object, role)? {
            Data::Owned(b) => b,
            Data::Borrowed(b) => copy(b)?,
        };
        (data, zt_format::Encoding::Raw, None, None)
    } else {
        (
            copy(file.stored(object, role)?)?,
            c.encoding,
            c.uncompressed_length,
            c.digest.clone(),
        )
    };
    let verification = if check.verified && c.digest.is_some() {
        Verification::Verified
    } else {
        Verification::Unverified
    };
    Ok(Delivered {
        object: object.to_owned(),
        component: role.to_owned(),
        seq,
        dtype: c.dtype,
        logical_type: c.logical_type.clone(),
        encoding,
        uncompressed_length,
        digest,
        data,
        verification,
    })
}

impl Transport for LocalTransport {
    fn manifest<'a>(&'a self, select: &'a [String]) -> BoxFuture<'a, Result<Remote>> {
        Box::pin(std::future::ready(self.remote(select)))
    }

    fn fetch<'a>(
        &'a self,
        select: &'a [String],
        if_match: Option<&'a str>,
        max_buffered: Option<u64>,
    ) -> BoxFuture<'a, Result<Fetch>> {
        Box::pin(async move {
            if let Some(want) = if_match.filter(|w| *w != self.etag) {
                return Err(Error::Changed {
                    url: self.file.label().to_owned(),
                    detail: format!("(ETag {want} is now {})", self.etag),
                });
            }
            let remote = self.remote(select)?;
            let order: Vec<(String, String, u64)> = zt_format::send_order(&remote.manifest, &[])
                .into_iter()
                .map(|(o, r, c)| (o.to_owned(), r.to_owned(), c.length))
                .collect();
            let (tx, rx) = mpsc::unbounded_channel();
            let (file, check) = (Arc::clone(&self.file), self.check);
            let budget = max_buffered.map(Budget::new);
            let n = order.len() as u64;
            // In send order, each read on the blocking pool once the
            // budget has room for it; a consumer that drops the fetch
            // stops the reads.
            tokio::spawn(async move {
                for (seq, (object, role, length)) in order.into_iter().enumerate() {
                    let held = match &budget {
                        Some(b) => b.reserve(length).await,
                        None => None,
                    };
                    let f = Arc::clone(&file);
                    let at = format!("{}: object {object:?}, component {role:?}", f.label());
                    let got = tokio::task::spawn_blocking(move || {
                        read(&f, &object, &role, seq as u64, check)
                    })
                    .await
                    .unwrap_or_else(|e| Err(Error::Transport(format!("{at}: reading: {e}"))));
                    if tx.send((Event::Component(got), held)).is_err() {
                        return;
                    }
                }
            });
            Ok(Fetch::new(
                self.file.label(),
                0,
                remote.manifest,
                remote.etag,
                remote.size,
                n,
                rx,
            ))
        })
    }

    fn read_ranges<'a>(
        &'a self,
        ranges: &'a [Range<u64>],
        etag: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>>> {
        let label = self.file.label();
        let got = if etag != self.etag {
            Err(Error::Changed {
                url: label.to_owned(),
                detail: format!("(ETag {etag} is now {})", self.etag),
            })
        } else {
            ranges
                .iter()
                .map(|r| {
                    let bytes = usize::try_from(r.start)
                        .ok()
                        .zip(usize::try_from(r.end).ok())
                        .and_then(|(a, b)| self.file.bytes().get(a..b));
                    bytes.map(<[u8]>::to_vec).ok_or_else(|| {
                        Error::Usage(format!(
                            "{label}: bytes {}..{} are past its end",
                            r.start, r.end
                        ))
                    })
                })
                .collect()
        };
        Box::pin(std::future::ready(got))
    }

    fn read_rows<'a>(&'a self, asked: RowsAsked<'a>) -> BoxFuture<'a, Result<Delivered>> {
        Box::pin(async move {
            let (file, check) = (Arc::clone(&self.file), self.check);
            let object = asked.object.to_owned();
            let whole = tokio::task::spawn_blocking(move || read(&file, &object, "data", 0, check))
                .await
                .map_err(|e| Error::Usage(format!("{}: reading: {e}", self.file.label())))??;
            cut_rows(self.file.label(), &asked, whole)
        })
    }

    fn recycle(&self, _buf: AlignedBuf) {}

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn is_local(&self) -> bool {
        true
    }
}
