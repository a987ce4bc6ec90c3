//! Where an open handle's bytes come from: zt-client's one client, over
//! ztp/1, HTTP or a local file alike, and the tasks that fetch a group of
//! objects into the [`Table`].

use std::borrow::Cow;
use std::sync::Arc;

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use zt_client::{Client, Delivered, Remote};
use zt_format::rows::Rows;
use zt_format::slice::Slice;

use crate::buffer::Bytes;
use crate::error::{Failure, Kind};
use crate::table::{Fetch, Part, Table};

/// Cheap to clone: a caller takes its own handle and lets go of the lock.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    pub(crate) client: Arc<Client>,
    /// The manifest as read (of the selected objects), with the version
    /// every fetch is pinned to.
    pub(crate) remote: Arc<Remote>,
    /// The selection the manifest was read with: a fetch of every object
    /// it holds asks for this.
    pub(crate) select: Arc<[String]>,
    /// The most bytes one fetch holds received but not yet taken.
    pub(crate) max_buffered: u64,
    /// Hand cached components over as mappings of the cache's files
    /// (`mmap=True`) instead of reading them into memory.
    pub(crate) mmap: bool,
}

impl Source {
    /// Starts `work` into `table`, on `rt`.
    pub(crate) fn start(
        &self,
        rt: &Runtime,
        work: Fetch,
        table: Arc<Table>,
        cap: u64,
    ) -> JoinHandle<()> {
        let source = self.clone();
        rt.spawn(async move {
            let work = match source.mmap {
                true => source.mapped(work, &table).await,
                false => work,
            };
            if !work.names.is_empty() {
                fetch(&source, &work, &table, cap).await;
            }
        })
    }

    /// Delivers the objects of `work` whose every component the cache
    /// holds (raw), mapped from it and checked, several at once on the
    /// blocking pool; returns the rest, to be fetched.
    async fn mapped(&self, mut work: Fetch, table: &Table) -> Fetch {
        let Some(cache) = self
            .client
            .options
            .cache
            .clone()
            .filter(|_| !self.client.is_local())
        else {
            return work;
        };
        let parallel = std::thread::available_parallelism().map_or(2, |n| n.get());
        // Where each name was asked for: the rest go on in that order.
        let place: std::collections::HashMap<String, usize> = work
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let mut groups: Vec<Vec<String>> = vec![Vec::new(); parallel];
        for (i, n) in work.names.drain(..).enumerate() {
            groups[i % parallel].push(n);
        }
        let tasks: Vec<_> = groups
            .into_iter()
            .map(|names| {
                let (cache, source) = (cache.clone(), self.clone());
                let asked = names.clone();
                let task = tokio::task::spawn_blocking(move || {
                    names
                        .into_iter()
                        .map(|n| {
                            let got = cache.map_object(&source.client.url, &source.remote, &n);
                            (n, got)
                        })
                        .collect::<Vec<_>>()
                });
                (asked, task)
            })
            .collect();
        for (asked, task) in tasks {
            // A task that died maps nothing: its objects are fetched.
            let got = task
                .await
                .unwrap_or_else(|_| asked.into_iter().map(|n| (n, None)).collect());
            for (name, got) in got {
                match got {
                    Some(Ok(parts)) => {
                        for m in parts {
                            let part = Part {
                                role: m.role,
                                data: Bytes::Mapped(m.map),
                                dtype: m.component.dtype,
                                logical: m.component.logical_type,
                            };
                            table.deliver(work.id, &name, part);
                        }
                    }
                    // Not cached, or an entry failed its check (removed):
                    // fetched like the rest.
                    _ => work.names.push(name),
                }
            }
        }
        work.names.sort_by_key(|n| place.get(n).copied());
        work
    }

    /// Rows `rows` of `object`'s data, verified: from the server with a
    /// digest of exactly those bytes, or cut from the object's component
    /// after it was checked whole (a plain Range server, a local file).
    pub(crate) async fn rows(&self, object: &str, rows: Rows) -> Result<Part, Failure> {
        // Rows the object cannot have are refused here, naming their rule.
        if let Some(obj) = self.remote.manifest.objects.get(object) {
            rows.span(obj).map_err(|e| {
                let mut f = Failure::new(
                    Kind::Other,
                    format!("{}: object {object:?}: {e}", self.client.url),
                );
                f.rule = Some(e.rule());
                f
            })?;
        }
        let d = self
            .client
            .read_rows(&self.remote, object, rows)
            .await
            .map_err(Failure::from)?;
        let (_, part) = decode(d, 0).map_err(Failure::from)?;
        Ok(part)
    }

    /// Slice `slice` of `object`'s data, verified, and its shape: gathered
    /// by the server with a digest of exactly those bytes, or cut from the
    /// object's component after it was checked whole (ztp/1 as yet, a
    /// plain Range server, a local file).
    pub(crate) async fn slice(
        &self,
        object: &str,
        slice: &Slice,
    ) -> Result<(Part, Vec<u64>), Failure> {
        // A slice the object cannot have is refused here, naming its rule.
        if let Some(obj) = self.remote.manifest.objects.get(object) {
            slice.gather(obj, u64::MAX).map_err(|e| {
                let mut f = Failure::new(
                    Kind::Other,
                    format!("{}: object {object:?}: {e}", self.client.url),
                );
                f.rule = Some(e.rule());
                f
            })?;
        }
        let (d, shape) = self
            .client
            .read_slice(&self.remote, object, slice)
            .await
            .map_err(Failure::from)?;
        let (_, part) = decode(d, 0).map_err(Failure::from)?;
        Ok((part, shape))
    }
}

/// The requests for `work` (the source's own selection when it names
/// every object the handle has, else their names in pieces within a
/// request's cap, one after another): each verified component into
/// `table` as it arrives; whatever did not arrive, failed with the
/// reason.
async fn fetch(source: &Source, work: &Fetch, table: &Table, cap: u64) {
    let (client, etag, max_buffered) = (&source.client, &source.remote.etag, source.max_buffered);
    let all = source.remote.manifest.objects.len();
    let (by, names) = (work.id, work.names.as_slice());
    for select in zt_format::select::requests(&source.select, names, all) {
        let mut fetch = match client
            .fetch_bounded(&select, Some(etag), max_buffered)
            .await
        {
            Ok(f) => f,
            Err(e) => return table.ended(by, names, &Failure::from(e)),
        };
        while let Some(item) = fetch.next().await {
            match item.and_then(|d| decode(d, cap)) {
                Ok((object, part)) => table.deliver(by, &object, part),
                Err(e) => {
                    let f = Failure::from(e);
                    match f.object.clone() {
                        // One object failed its check (or, from a local
                        // file, could not be read): the others go on.
                        Some(o) if f.kind == Kind::Integrity || client.is_local() => {
                            table.fail(Some(by), &o, f)
                        }
                        _ => return table.ended(by, names, &f),
                    }
                }
            }
        }
    }
    let why = Failure::new(
        Kind::Protocol,
        "the transfer ended before the object arrived",
    );
    table.ended(by, names, &why);
}

/// The delivered component's decoded bytes, in the buffer it arrived in
/// when it needs no decoding.
fn decode(d: Delivered, cap: u64) -> zt_client::Result<(String, Part)> {
    let owned = match d.decoded(cap)? {
        Cow::Owned(b) => Some(b),
        Cow::Borrowed(_) => None,
    };
    let part = Part {
        role: d.component,
        data: Bytes::Owned(owned.unwrap_or(d.data)),
        dtype: d.dtype,
        logical: d.logical_type,
    };
    Ok((d.object, part))
}
