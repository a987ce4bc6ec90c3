//! A sharded checkpoint's index (`*.safetensors.index.json`): read and
//! parsed at scan time, served raw as itself, and linked to its shards
//! (each an entry of its own) when a request asks for the model.

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::Arc;
use std::time::SystemTime;

use zt_format::Manifest;

use super::served::{Identity, Served, Unavailable};
use super::{settled, Catalog, Entry};
use crate::server::checks::Checks;
use crate::server::etag;

/// A `*.safetensors.index.json` file: served raw as itself, and as one
/// model once linked to its shards ([`Catalog::resolve`]).
#[derive(Debug)]
pub struct IndexFile {
    pub(crate) path: String,
    pub(super) file: File,
    pub(super) size: u64,
    pub(super) modified: SystemTime,
    pub(super) identity: Identity,
    pub(super) raw: Vec<u8>,
    pub(crate) index: zt_format::source::safetensors_index::Index,
    /// The last linking, with the shard ETags it was made from.
    pub(super) linked: std::sync::Mutex<Option<(Vec<String>, Arc<Served>)>>,
}

impl IndexFile {
    /// The ETag of the last linking, if any.
    pub(crate) fn etag(&self) -> Option<String> {
        let g = self.linked.lock().ok()?;
        g.as_ref().map(|(_, s)| s.etag.clone())
    }

    /// The shards' catalog paths: the index's directory joined with each name.
    pub(super) fn shard_path(&self, name: &str) -> String {
        match self.path.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{name}"),
            None => name.to_owned(),
        }
    }
}

impl Catalog {
    /// An index linked to its shards as they are served now (each shard
    /// resolved first): the served model, or why it is not served.
    pub(super) async fn link(&self, ix: &Arc<IndexFile>) -> Entry {
        let unavailable = |reason: String| {
            Entry::Unavailable(Arc::new(Unavailable {
                path: ix.path.clone(),
                size: ix.size,
                modified: ix.modified,
                reason,
                identity: ix.identity,
            }))
        };
        let mut shards = BTreeMap::new();
        for name in ix.index.shards() {
            let path = ix.shard_path(name);
            let mut entry = self.snapshot().get(&path).cloned();
            if let Some(Entry::Pending(p)) = &entry {
                p.wait().await;
                entry = self.snapshot().get(&path).cloned();
            }
            match entry {
                Some(Entry::Served(s)) => {
                    shards.insert(name.to_owned(), s);
                }
                Some(Entry::Unavailable(u)) => {
                    return unavailable(format!(
                        "{}: shard {name:?} is not served: {}",
                        ix.path, u.reason
                    ))
                }
                _ => {
                    return unavailable(format!(
                        "{}: shard {name:?} ({path}) is not served",
                        ix.path
                    ))
                }
            }
        }
        let etags: Vec<String> = shards.values().map(|s| s.etag.clone()).collect();
        if let Ok(g) = ix.linked.lock() {
            if let Some((was, served)) = g.as_ref().filter(|(was, _)| *was == etags) {
                let _ = was;
                return Entry::Served(Arc::clone(served));
            }
        }
        match build_index(ix, shards, &etags) {
            Ok(served) => {
                let served = Arc::new(served);
                if let Ok(mut g) = ix.linked.lock() {
                    *g = Some((etags, Arc::clone(&served)));
                }
                Entry::Served(served)
            }
            Err(reason) => unavailable(reason),
        }
    }
}

impl Catalog {
    /// Reads and parses an index file; it is linked to its shards when a
    /// request asks for it.
    pub(super) fn load_index(
        &self,
        rel: &str,
        file: File,
        size: u64,
        modified: SystemTime,
        identity: Identity,
    ) -> Entry {
        let read = || -> Result<(Vec<u8>, zt_format::source::safetensors_index::Index), String> {
            if size > self.limits.manifest_cap {
                return Err(format!(
                    "{rel}: the index is {size} bytes, over the cap of {}",
                    self.limits.manifest_cap
                ));
            }
            let mut raw = vec![0u8; usize::try_from(size).map_err(|e| e.to_string())?];
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut raw, 0)
                .map_err(|e| format!("{rel}: reading the index: {e}"))?;
            let index = zt_format::source::safetensors_index::parse(rel, &raw, &self.limits)
                .map_err(|e| e.to_string())?;
            Ok((raw, index))
        };
        match read() {
            Ok((raw, index)) => Entry::Index(Arc::new(IndexFile {
                path: rel.to_owned(),
                file,
                size,
                modified,
                identity,
                raw,
                index,
                linked: std::sync::Mutex::new(None),
            })),
            Err(reason) => settled(Err(reason), rel, size, modified, identity),
        }
    }
}

/// The served model of an index and its shards.
fn build_index(
    ix: &IndexFile,
    shards: BTreeMap<String, Arc<Served>>,
    etags: &[String],
) -> Result<Served, String> {
    use zt_format::source::safetensors_index::{merge, Shard};
    let parts: BTreeMap<String, zt_format::FilePart> = shards
        .iter()
        .map(|(n, s)| {
            let part = zt_format::FilePart {
                size: s.size,
                etag: Some(s.etag.clone()),
            };
            (n.clone(), part)
        })
        .collect();
    let views: BTreeMap<String, Shard<'_>> = shards
        .iter()
        .filter_map(|(n, s)| {
            let part = parts.get(n)?;
            Some((
                n.clone(),
                Shard {
                    manifest: &s.manifest,
                    part,
                },
            ))
        })
        .collect();
    let manifest = merge(&ix.path, &ix.index, &views).map_err(|e| e.to_string())?;
    let mut parts_for_tag: Vec<&[u8]> = vec![&ix.raw];
    parts_for_tag.extend(etags.iter().map(|e| e.as_bytes()));
    let file = ix
        .file
        .try_clone()
        .map_err(|e| format!("{}: duplicating the file handle: {e}", ix.path))?;
    Ok(Served {
        path: ix.path.clone(),
        file,
        size: ix.size,
        modified: ix.modified,
        etag: etag::derived("safetensors-index", &parts_for_tag),
        provisional: None,
        checks: Checks::new(&Manifest::default(), false),
        manifest,
        manifest_raw: ix.raw.clone(),
        computed: true,
        warnings: Vec::new(),
        identity: ix.identity,
        synthesized: BTreeMap::new(),
        shards,
    })
}
