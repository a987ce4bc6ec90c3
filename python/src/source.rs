//! Where an open handle's bytes come from: a server (through zt-client,
//! over ztp/1 or HTTP) or a local file (through zt-format's readers), and
//! the tasks that fetch a group of objects into the [`Table`].

use std::borrow::Cow;
use std::sync::Arc;

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use zt_client::{Client, Delivered, Remote};
use zt_format::rows::Rows;
use zt_format::{AlignedBuf, Manifest, ZtFile};

use crate::error::{Failure, Kind};
use crate::table::{Fetch, Part, Table};

/// Cheap to clone: a caller takes its own handle and lets go of the lock.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    Remote {
        client: Arc<Client>,
        /// The manifest as read, with the version every fetch is pinned to.
        remote: Arc<Remote>,
        /// The most bytes one fetch holds received but not yet taken.
        max_buffered: u64,
    },
    Local(Arc<ZtFile>),
}

impl Source {
    /// Starts `work` (objects of `m`) into `table`, on `rt`.
    pub(crate) fn start(
        &self,
        rt: &Runtime,
        m: &Manifest,
        work: Fetch,
        table: Arc<Table>,
        cap: u64,
    ) -> JoinHandle<()> {
        match self {
            Source::Remote {
                client,
                remote,
                max_buffered,
            } => {
                let (client, etag, max) = (Arc::clone(client), remote.etag.clone(), *max_buffered);
                rt.spawn(async move { fetch(&client, &etag, max, &work, &table, cap).await })
            }
            Source::Local(file) => {
                let file = Arc::clone(file);
                let wanted: Vec<(String, Vec<String>)> = work
                    .names
                    .iter()
                    .map(|n| {
                        let roles = m
                            .objects
                            .get(n)
                            .map(|o| o.components.keys().map(str::to_owned).collect())
                            .unwrap_or_default();
                        (n.clone(), roles)
                    })
                    .collect();
                rt.spawn_blocking(move || local(&file, work.id, &wanted, &table))
            }
        }
    }
}

impl Source {
    /// Rows `rows` of `object`'s data, verified: from the server with a
    /// digest of exactly those bytes, or cut from a local file's
    /// component after the reader checked the whole of it.
    pub(crate) fn rows(&self, rt: &Runtime, object: &str, rows: Rows) -> Result<Part, Failure> {
        match self {
            Source::Remote { client, remote, .. } => {
                let d = rt
                    .block_on(client.read_rows(remote, object, rows))
                    .map_err(Failure::from)?;
                let (_, part) = decode(d, 0).map_err(Failure::from)?;
                Ok(part)
            }
            Source::Local(file) => {
                let obj = file.object(object).map_err(|e| Failure::from(&e))?;
                let (start, len) = rows.span(obj).map_err(|e| {
                    let mut f = Failure::new(
                        Kind::Other,
                        format!("{}: object {object:?}: {e}", file.label()),
                    );
                    f.rule = Some(e.rule());
                    f
                })?;
                let whole = read_part(file, object, "data")?;
                let cut = usize::try_from(start)
                    .ok()
                    .zip(usize::try_from(start + len).ok())
                    .and_then(|(a, b)| whole.data.as_slice().get(a..b))
                    .ok_or_else(|| {
                        Failure::new(
                            Kind::Protocol,
                            format!(
                                "{}: object {object:?} is shorter than its rows",
                                file.label()
                            ),
                        )
                    })?;
                let data = AlignedBuf::copy_from(cut)
                    .map_err(|r| Failure::new(Kind::Other, format!("{}: {r}", file.label())))?;
                Ok(Part { data, ..whole })
            }
        }
    }
}

/// One request for `work`: each verified component into `table` as it
/// arrives; whatever did not arrive, failed with the reason.
async fn fetch(
    client: &Client,
    etag: &str,
    max_buffered: u64,
    work: &Fetch,
    table: &Table,
    cap: u64,
) {
    let (by, names) = (work.id, work.names.as_slice());
    let select: Vec<String> = names.iter().map(|n| zt_format::select::escape(n)).collect();
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
                    // One object failed its check: the others go on.
                    Some(o) if f.kind == Kind::Integrity => table.fail(Some(by), &o, f),
                    _ => return table.ended(by, names, &f),
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
        data: owned.unwrap_or(d.data),
        dtype: d.dtype,
        logical: d.logical_type,
    };
    Ok((d.object, part))
}

/// Reads each object's components from the local file, checked against
/// their digests by the reader, into buffers of their own.
fn local(file: &ZtFile, by: u64, wanted: &[(String, Vec<String>)], table: &Table) {
    for (object, roles) in wanted {
        for role in roles {
            match read_part(file, object, role) {
                Ok(part) => table.deliver(by, object, part),
                Err(f) => {
                    table.fail(Some(by), object, f.about(object, Some(role)));
                    break;
                }
            }
        }
    }
}

fn read_part(file: &ZtFile, object: &str, role: &str) -> Result<Part, Failure> {
    let c = file
        .object(object)
        .ok()
        .and_then(|o| o.components.get(role))
        .ok_or_else(|| {
            Failure::new(
                Kind::NotFound,
                format!("{}: no such component", file.label()),
            )
        })?;
    let (dtype, logical) = (c.dtype, c.logical_type.clone());
    let data = match file.read(object, role).map_err(|e| Failure::from(&e))? {
        zt_format::Data::Owned(b) => b,
        zt_format::Data::Borrowed(b) => AlignedBuf::copy_from(b)
            .map_err(|r| Failure::new(Kind::Other, format!("{}: {r}", file.label())))?,
    };
    Ok(Part {
        role: role.to_owned(),
        data,
        dtype,
        logical,
    })
}
