//! Range requests over HTTP(S) as a [`Transport`]: any server that
//! answers them (ztserve's `/path` or `/v1/files/path`, nginx, a CDN).
//! What a manifest read found beyond the [`Remote`] (where components
//! that are no byte range of the file come from, a ztserve's API base for
//! rows) is kept here with the manifest last read, which a fetch reuses
//! instead of asking again when it holds every object the fetch selects.

use std::ops::Range;
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use futures_util::{StreamExt as _, TryStreamExt as _};
use zt_format::select::Selection;
use zt_format::{AlignedBuf, Component, Digest, Manifest};

use super::{cut_rows, RowsAsked, SliceAsked, Transport};
use crate::error::{Error, Result};
use crate::fetch::Fetch;
use crate::ranges::{Described, HttpSource, SynthesizedAt};
use crate::remote::{select_from, Remote};
use crate::verify::{Delivered, Verification};

#[derive(Debug)]
pub(crate) struct HttpTransport {
    pub(crate) source: HttpSource,
    /// The URL the client was given, for errors.
    pub(crate) url: String,
    /// The manifest last read and the selection it was read for, taken
    /// by the next `fetch` when it holds every object the fetch selects
    /// ([`covers`]).
    pub(crate) cached: Mutex<Option<(Vec<String>, Described)>>,
    /// A ztserve's API base for the file (`.../v1/files/{path}`), once a
    /// manifest read found one: where rows are asked for by name.
    pub(crate) api: Mutex<Option<String>>,
}

impl HttpTransport {
    pub(crate) fn new(source: HttpSource, url: &str) -> HttpTransport {
        HttpTransport {
            source,
            url: url.to_owned(),
            cached: Mutex::default(),
            api: Mutex::default(),
        }
    }

    /// Reads the manifest, and remembers what it found.
    async fn describe(&self, select: &[String]) -> Result<Described> {
        let d = self.source.manifest(select).await?;
        if let Ok(mut api) = self.api.lock() {
            api.clone_from(&d.api);
        }
        Ok(d)
    }

    /// `object`'s whole `data` component, fetched and checked against its
    /// digest (what rows and slices are cut from where the server cuts
    /// none). Of raw dense data: never a synthesized component.
    async fn whole_data(&self, remote: &Remote, object: &str) -> Result<Delivered> {
        let one = [zt_format::select::escape(object)];
        let manifest = select_from(&remote.manifest, &one)?;
        let whole = Remote {
            manifest,
            ..remote.clone()
        };
        let mut f = self.source.fetch(whole, SynthesizedAt::None, &[], None)?;
        f.next()
            .await
            .ok_or_else(|| Error::Protocol(format!("{}: {object}: nothing arrived", self.url)))?
    }
}

impl Transport for HttpTransport {
    fn manifest<'a>(&'a self, select: &'a [String]) -> BoxFuture<'a, Result<Remote>> {
        Box::pin(async move {
            let d = self.describe(select).await?;
            let remote = d.remote.clone();
            if let Ok(mut c) = self.cached.lock() {
                *c = Some((select.to_vec(), d));
            }
            Ok(remote)
        })
    }

    fn fetch<'a>(
        &'a self,
        select: &'a [String],
        if_match: Option<&'a str>,
        max_buffered: Option<u64>,
    ) -> BoxFuture<'a, Result<Fetch>> {
        Box::pin(async move {
            // Range requests carry If-Range, so a stale cache cannot mix versions.
            // Kept for the next fetch pinned to the same version (the
            // pieces of one fetch of many objects); taken by any other.
            let cached = self
                .cached
                .lock()
                .ok()
                .and_then(|mut c| match (&*c, if_match) {
                    (Some((_, d)), Some(want)) if d.remote.etag == want => c.clone(),
                    _ => c.take(),
                });
            let described = match cached {
                Some((read_for, d)) if covers(&read_for, &d.remote.manifest, select) => d,
                _ => self.describe(select).await?,
            };
            let Described {
                remote,
                synthesized,
                ..
            } = described;
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
            self.source.fetch(
                Remote { manifest, ..remote },
                synthesized,
                &[],
                max_buffered,
            )
        })
    }

    fn read_ranges<'a>(
        &'a self,
        ranges: &'a [Range<u64>],
        etag: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>>> {
        Box::pin(async move {
            // In order, as many at once as a fetch's connections.
            let parallel = self.source.connections();
            let source = &self.source;
            futures_util::stream::iter(ranges.iter().cloned())
                .map(move |r| source.read_range(r, etag))
                .buffered(parallel)
                .try_collect()
                .await
        })
    }

    /// From a ztserve's component route with `?rows=` (its
    /// `Content-Digest` checked); from a plain Range server, which has no
    /// row digests, the whole component is fetched, checked against its
    /// digest, and the rows copied out.
    fn read_rows<'a>(&'a self, asked: RowsAsked<'a>) -> BoxFuture<'a, Result<Delivered>> {
        Box::pin(async move {
            let api = self.api.lock().ok().and_then(|a| a.clone());
            let (object, c) = (asked.object, asked.data);
            match api {
                Some(base) => {
                    let got = self
                        .source
                        .read_rows(&base, &asked.remote.etag, object, asked.rows, asked.len)
                        .await?;
                    Ok(attested(object, c, got))
                }
                None => {
                    let d = self.whole_data(asked.remote, object).await?;
                    cut_rows(&self.url, &asked, d)
                }
            }
        })
    }

    /// From a ztserve's component route with `?slice=` (its
    /// `Content-Digest` checked); from a plain Range server, the whole
    /// component checked and the slice cut from it.
    fn read_slice<'a>(&'a self, asked: SliceAsked<'a>) -> BoxFuture<'a, Result<Delivered>> {
        Box::pin(async move {
            let api = self.api.lock().ok().and_then(|a| a.clone());
            let Some(base) = api else {
                let d = self.whole_data(asked.remote, asked.object).await?;
                return super::cut_slice(&self.url, asked.gather, 0, d);
            };
            let (object, c) = (asked.object, asked.data);
            let got = self
                .source
                .read_slice(
                    &base,
                    &asked.remote.etag,
                    object,
                    &asked.gather.spec(),
                    asked.gather.len(),
                )
                .await?;
            Ok(attested(object, c, got))
        })
    }

    fn recycle(&self, buf: AlignedBuf) {
        self.source.recycle(buf);
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// Part of `object`'s `data` component `c` that the server cut and
/// attested (rows, a slice), as a delivered component checked against
/// that digest.
fn attested(object: &str, c: &Component, (data, digest): (AlignedBuf, Digest)) -> Delivered {
    Delivered {
        object: object.to_owned(),
        component: "data".to_owned(),
        seq: 0,
        dtype: c.dtype,
        logical_type: c.logical_type.clone(),
        encoding: c.encoding,
        uncompressed_length: None,
        digest: Some(digest),
        data,
        verification: Verification::Verified,
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
