//! Fetches into a path, whatever it names: a directory receives a whole
//! sharded checkpoint (each shard a byte-identical copy, then its index),
//! anything else one file (`output::fetch_to_file`).

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use zt_format::source::safetensors_index::safe_shard;
use zt_format::Source;

use crate::blocking::blocking;
use crate::client::Client;
use crate::error::{Error, Result};
use crate::output::{fetch_to_file, fetch_version_to_file, Progress, Written};

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

/// Where the shards of a fetch into a directory are written until every
/// one is in: a folder of that directory's own.
pub const STAGING: &str = ".zt-fetching";

/// Fetches a sharded checkpoint into the directory `dir`: every shard as a
/// byte-identical copy (each verified and checked as [`fetch_to_file`]
/// checks one, and each the version the index's manifest names), then
/// the index itself. Over HTTP or ztp/1, like the copies it is made of.
///
/// The shards are written below `STAGING/INDEX_NAME/` (folders of this
/// user's alone, refused otherwise) until every one is in, so a fetch
/// that fails while fetching leaves what the directory held as it was
/// (and a second run resumes each shard's partial file there). Then the
/// directory's old index goes, the shards move into place, and the new
/// index is written last and atomically: a directory that holds an index
/// holds every shard it names, of that index's version, never shards of
/// two versions beside one index (a fetch stopped while moving them
/// leaves no index).
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
    // Each shard is written below `dir` under the name the manifest gives
    // it: a safetensors file at a plain relative path, or nothing is.
    for name in remote.manifest.files.keys() {
        let staged = name.split('/').next() == Some(STAGING);
        if staged
            || !safe_shard(name)
            || zt_format::source::by_name(name) != Some(Source::Safetensors)
        {
            return Err(Error::Protocol(format!(
                "{}: the index names the shard {name:?}, which is not a .safetensors file at a plain relative path below it",
                client.url
            )));
        }
    }
    // The index itself, read and checked before any shard: it names the
    // shards its manifest does.
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
    let names: Vec<String> = remote.manifest.files.keys().cloned().collect();
    let mut staged = Staged {
        dir: dir.to_owned(),
        index_name,
        names,
        lock: None,
    };
    // Folders made and moves done on a blocking thread, never on the
    // runtime's (a slow or remote filesystem stalls only that thread).
    let staged = blocking(move || staged.prepare().map(|()| staged)).await?;
    let (mut objects, mut bytes, mut resumed) = (0, 0, 0);
    for (name, part) in &remote.manifest.files {
        let shard = Client::connect(
            &crate::ranges::beside(&client.url, name)?,
            (*client.options).clone(),
        )
        .await?;
        let Some(version) = part.etag.as_deref() else {
            return Err(Error::Protocol(format!(
                "{}: the index's manifest names no ETag for its shard {name:?}",
                client.url
            )));
        };
        let out = staged.staging().join(name);
        let w = fetch_version_to_file(&shard, &[], &out, progress, Some(version)).await?;
        (objects, bytes, resumed) = (objects + w.objects, bytes + w.bytes, resumed + w.resumed);
    }
    let path = blocking(move || staged.install(&raw)).await?;
    Ok(Written {
        path,
        objects,
        bytes,
        resumed,
    })
}

/// A sharded checkpoint's place: the directory, the index's name there,
/// and the shards' names (relative paths, checked as safe).
struct Staged {
    dir: PathBuf,
    index_name: String,
    names: Vec<String>,
    /// The staging folder, locked ([`crate::lock`]) from [`Self::prepare`]
    /// until this is dropped: after [`Self::install`], which runs to its
    /// end even when the fetch is stopped during it, so a retry started
    /// meanwhile fails instead of staging shards that the install would
    /// move or remove.
    lock: Option<std::fs::File>,
}

impl Staged {
    fn top(&self) -> PathBuf {
        self.dir.join(STAGING)
    }

    /// Where the shards are written until every one is in.
    fn staging(&self) -> PathBuf {
        self.top().join(&self.index_name)
    }

    /// Makes the directory, the staging folders (this user's alone), and
    /// every shard's folder in them.
    fn prepare(&mut self) -> Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        create_dir_all(&self.dir)?;
        private_dir(&self.top())?;
        let staging = self.staging();
        let lock = crate::lock::open_locked(&staging, "another fetch into this folder", || {
            private_dir(&staging)?;
            let no_links = rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::DIRECTORY;
            OpenOptions::new()
                .read(true)
                .custom_flags(no_links.bits() as i32)
                .open(&staging)
                .map_err(|e| Error::io(format!("opening {}", staging.display()), e))
        })?;
        self.lock = Some(lock);
        for name in &self.names {
            if let Some(parent) = staging.join(name).parent() {
                create_dir_all(parent)?;
            }
        }
        Ok(())
    }

    /// Every shard is in: removes the old index, moves the shards into
    /// place, writes the new index `raw` atomically, and clears the
    /// staging folder; returns the index's path.
    fn install(&self, raw: &[u8]) -> Result<PathBuf> {
        let (dir, staging) = (&self.dir, self.staging());
        // The old index goes first, so that no moment shows an index
        // beside shards of another version.
        let path = dir.join(&self.index_name);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io(format!("removing {}", path.display()), e))
            }
            _ => {}
        }
        for name in &self.names {
            let (from, to) = (staging.join(name), dir.join(name));
            if let Some(parent) = to.parent() {
                create_dir_all(parent)?;
            }
            std::fs::rename(&from, &to).map_err(|e| {
                Error::io(format!("moving {} to {}", from.display(), to.display()), e)
            })?;
        }
        // Beside its place, synced, then renamed: never a partial index.
        let tmp = zt_format::temp_path(&path);
        // A new file, never one (or a link) found in its place.
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| f.write_all(raw).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io(format!("writing {}", path.display()), e));
        }
        // What is left in this index's folder is this fetch's own (emptied
        // folders); the folder above goes only once no other fetch uses it.
        let _ = std::fs::remove_dir_all(&staging);
        let _ = std::fs::remove_dir(self.top());
        Ok(path)
    }
}

fn create_dir_all(folder: &Path) -> Result<()> {
    std::fs::create_dir_all(folder)
        .map_err(|e| Error::io(format!("creating {}", folder.display()), e))
}

/// Makes `folder` if it is missing, readable and writable by this user
/// alone, and refuses one that is not a folder of this user's alone (a
/// link, another user's, or one others may write): shards are checked
/// there and then moved into place, so no one else may swap them.
fn private_dir(folder: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _};
    match std::fs::DirBuilder::new().mode(0o700).create(folder) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::io(format!("creating {}", folder.display()), e))
        }
        _ => {}
    }
    let meta = std::fs::symlink_metadata(folder)
        .map_err(|e| Error::io(format!("reading {}", folder.display()), e))?;
    let mine = meta.uid() == rustix::process::geteuid().as_raw();
    if !meta.is_dir() || !mine || meta.mode() & 0o022 != 0 {
        return Err(Error::Usage(format!(
            "{}: not a folder of this user's alone (a link, another user's, or writable by others): shards are not staged there; remove it",
            folder.display()
        )));
    }
    Ok(())
}
