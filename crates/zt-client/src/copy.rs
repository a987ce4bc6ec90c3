//! Byte-identical copies: a served file written as it is (a safetensors
//! or GGUF file through [`crate::output::fetch_to_file`], named after its
//! source), and a sharded checkpoint written into a directory
//! ([`copy_sharded`]).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use zt_format::{Manifest, Source};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::output::{component, fetch_to_file, Progress, Written};

/// A copy's layout: every component in place, the synthesized ones (no
/// byte range of the file; their bytes are in the header) left out.
pub(crate) fn in_place(m: &Manifest) -> Manifest {
    let mut out = m.clone();
    out.objects
        .retain(|_, o| o.components.values().all(|c| !c.synthesized));
    out
}

/// The byte ranges of `0..size` no component of `m` covers.
pub(crate) fn gaps(m: &Manifest, size: u64) -> Vec<std::ops::Range<u64>> {
    let mut spans: Vec<(u64, u64)> = m
        .components()
        .map(|(_, _, c)| (c.offset, c.offset.saturating_add(c.length)))
        .collect();
    spans.sort_unstable();
    let mut out = Vec::new();
    let mut pos = 0;
    for (s, e) in spans {
        if s > pos {
            out.push(pos..s);
        }
        pos = pos.max(e);
    }
    if pos < size {
        out.push(pos..size);
    }
    out
}

/// Reads the copy's header back and checks it describes every component
/// where the manifest does.
pub(crate) fn check_copy(
    part: &Path,
    source: Source,
    local: &Manifest,
    client: &Client,
) -> Result<()> {
    let label = part.display().to_string();
    let f = File::open(part).map_err(|e| Error::io(format!("reading {label}"), e))?;
    let limits = zt_format::Limits {
        manifest_cap: client.options.manifest_cap,
        ..zt_format::Limits::default()
    };
    let got = zt_format::read_source_at(&f, source, &label, &limits)?
        .parsed
        .manifest;
    for (o, r, want) in local.components() {
        let have = component(&got, o, r);
        let same = have.is_some_and(|h| {
            (h.offset, h.length, h.dtype, &h.logical_type)
                == (want.offset, want.length, want.dtype, &want.logical_type)
        });
        if !same {
            return Err(Error::Protocol(format!(
                "{}: the header received does not place object {o:?}, component {r:?} where the manifest does",
                client.url
            )));
        }
    }
    let extra = got
        .objects
        .iter()
        .filter(|(n, obj)| {
            obj.components.values().all(|c| !c.synthesized) && !local.objects.contains_key(*n)
        })
        .map(|(n, _)| n.as_str())
        .next();
    if let Some(n) = extra {
        return Err(Error::Protocol(format!(
            "{}: the header received holds object {n:?}, which the manifest does not",
            client.url
        )));
    }
    Ok(())
}

/// Fetches a sharded checkpoint into the directory `dir`: every shard as a
/// byte-identical copy (each verified and checked as [`fetch_to_file`]
/// checks one, and each the version the index's manifest names), then
/// the index itself, written last and atomically, so a directory that
/// holds the index holds every shard it names. Over HTTP or ztp/1, like
/// the copies it is made of.
pub async fn copy_sharded(client: &Client, dir: &Path, progress: Progress<'_>) -> Result<Written> {
    let remote = client.manifest().await?;
    let source = remote.manifest.source;
    if source != Source::SafetensorsIndex {
        return Err(Error::Usage(format!(
            "{}: a {source} file, not a sharded checkpoint's index: -o DIR/ writes an index and its shards",
            client.url
        )));
    }
    // A transport that cannot carry raw bytes fails before a byte moves.
    client.read_ranges(&[], &remote.etag).await?;
    let index_name = crate::url_path::file_name(&client.url)
        .filter(|n| zt_format::source::by_name(n) == Some(Source::SafetensorsIndex))
        .ok_or_else(|| {
            Error::Usage(format!(
                "{}: the URL does not end in the index's name",
                client.url
            ))
        })?;
    let io = |what: String| move |e| Error::io(what, e);
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let (mut objects, mut bytes, mut resumed) = (0, 0, 0);
    for (name, part) in &remote.manifest.files {
        let shard = Client::connect(
            &crate::http::beside(&client.url, name)?,
            (*client.options).clone(),
        )
        .await?;
        let now = shard.manifest().await?.etag;
        if part.etag.as_deref() != Some(now.as_str()) {
            return Err(Error::Changed {
                url: shard.url.clone(),
                detail: format!(
                    "since its index was read (ETag {now}, the index names {:?})",
                    part.etag
                ),
            });
        }
        let out = dir.join(name);
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)
                .map_err(io(format!("creating {}", parent.display())))?;
        }
        let w = fetch_to_file(&shard, &[], &out, progress).await?;
        (objects, bytes, resumed) = (objects + w.objects, bytes + w.bytes, resumed + w.resumed);
    }
    let raw = client
        .read_ranges(std::slice::from_ref(&(0..remote.size)), &remote.etag)
        .await?
        .pop()
        .unwrap_or_default();
    let limits = zt_format::Limits {
        manifest_cap: client.options.manifest_cap,
        ..zt_format::Limits::default()
    };
    let index = zt_format::source::safetensors_index::parse(&client.url, &raw, &limits)?;
    let named: Vec<&str> = remote.manifest.files.keys().map(String::as_str).collect();
    if index.shards().into_iter().collect::<Vec<_>>() != named {
        return Err(Error::Protocol(format!(
            "{}: the index received names other shards than its manifest",
            client.url
        )));
    }
    // Beside its place, synced, then renamed: never a partial index.
    let path = dir.join(&index_name);
    let tmp = zt_format::temp_path(&path);
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(&raw).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(format!("writing {}", path.display()), e));
    }
    Ok(Written {
        path,
        objects,
        bytes,
        resumed,
    })
}
