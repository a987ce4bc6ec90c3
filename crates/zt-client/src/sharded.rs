//! Fetches into a path, whatever it names: a directory receives a whole
//! sharded checkpoint (each shard a byte-identical copy, then its index),
//! anything else one file (`output::fetch_to_file`).

use std::fs::File;
use std::io::Write;
use std::path::Path;

use zt_format::Source;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::output::{fetch_to_file, Progress, Written};

/// Fetches `select` from `client` into `out`, whatever `out` names: a
/// directory (an existing one, or a path ending in `/`) receives a whole
/// sharded checkpoint, byte-identical ([`copy_sharded`]);
/// anything else is [`fetch_to_file`].
pub async fn fetch_to_path(
    client: &Client,
    select: &[String],
    out: &Path,
    progress: Progress<'_>,
) -> Result<Written> {
    let into_dir = out.as_os_str().to_string_lossy().ends_with('/') || out.is_dir();
    if !into_dir {
        return fetch_to_file(client, select, out, progress).await;
    }
    if !select.is_empty() {
        return Err(Error::Usage(format!(
            "{}: a directory receives a whole sharded checkpoint; write a selection as a .zt file (-o NAME.zt)",
            out.display()
        )));
    }
    copy_sharded(client, out, progress).await
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
            &crate::ranges::beside(&client.url, name)?,
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
