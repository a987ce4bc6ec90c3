//! A file that names other served files and is served as one entry with
//! them (a multi-file entry): a sharded checkpoint's index
//! (`*.safetensors.index.json`, with its shards) or an ingest pack's
//! `ingest_manifest.json` (with its atom file, its SVG-Tensor projection
//! and its symbol map, [`zt_format::source::matrix_atom_pack`]). Read and parsed at scan
//! time, served raw as itself, and linked to its member files (each an
//! entry of its own) when a request asks for it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use zt_format::container::Synthesized;
use zt_format::source::matrix_atom_pack::ServedPack;
use zt_format::source::safetensors_index::Index;
use zt_format::{Manifest, Source};

use super::served::{Served, Unavailable};
use super::{settled, Catalog, Entry};
use crate::server::catalog::etag;
use crate::server::integrity::checks::Checks;

use crate::server::store::root::{read_capped, Opened};
use crate::server::store::Blob;
use crate::server::store::Identity;

/// What a multi-file entry's file says.
#[derive(Debug)]
pub(crate) enum Names {
    /// A sharded checkpoint's index.
    Shards(Index),
    /// An ingest pack's manifest, with its symbol map.
    Pack(Box<ServedPack>),
}

/// A multi-file entry's file: served raw as itself, and as one entry once
/// linked to its member files ([`Catalog::resolve`]).
#[derive(Debug)]
pub struct IndexFile {
    pub(crate) path: String,
    pub(super) file: Blob,
    pub(super) size: u64,
    pub(super) modified: SystemTime,
    pub(super) identity: Identity,
    pub(super) raw: Vec<u8>,
    pub(crate) names: Names,
    /// The last linking, with the member ETags it was made from.
    pub(super) linked: std::sync::Mutex<Option<(Vec<String>, Arc<Served>)>>,
    /// Held while a linking is made: requests that find none wait for
    /// the one being made instead of each merging the members again.
    pub(super) linking: tokio::sync::Mutex<()>,
}

impl IndexFile {
    /// The ETag of the last linking, if any.
    pub(crate) fn etag(&self) -> Option<String> {
        let g = self.linked.lock().ok()?;
        g.as_ref().map(|(_, s)| s.etag.clone())
    }

    /// The member files' catalog paths: this file's directory joined with each name.
    pub(super) fn member_path(&self, name: &str) -> String {
        zt_format::source::matrix_atom_pack::beside(&self.path, name)
    }

    /// The member files, by the names this file gives them.
    pub(crate) fn members(&self) -> Vec<&str> {
        match &self.names {
            Names::Shards(ix) => ix.shards().into_iter().collect(),
            Names::Pack(p) => p.members(),
        }
    }

    pub(crate) fn source(&self) -> Source {
        match &self.names {
            Names::Shards(_) => Source::SafetensorsIndex,
            Names::Pack(_) => Source::MatrixAtomPack,
        }
    }

    /// How many objects the entry serves, when known before linking (a
    /// pack's depend on its members).
    pub(crate) fn objects(&self) -> Option<usize> {
        match &self.names {
            Names::Shards(ix) => Some(ix.weight_map.len()),
            Names::Pack(_) => {
                let g = self.linked.lock().ok()?;
                g.as_ref().map(|(_, s)| s.manifest.objects.len())
            }
        }
    }
}

impl Catalog {
    /// A multi-file entry linked to its members as they are served now
    /// (each member resolved first): the served entry, or why it is not
    /// served.
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
        let (what, rule) = match ix.names {
            Names::Shards(_) => ("shard", "index-missing-shard"),
            Names::Pack(_) => ("file of the pack", "pack-member"),
        };
        for name in ix.members() {
            let path = ix.member_path(name);
            let mut entry = self.snapshot().get(&path).cloned();
            if let Some(Entry::Pending(p)) = &entry {
                p.wait().await;
                // Settled before the catalog lists what it settled into:
                // take that from the pending entry itself.
                entry = match self.snapshot().get(&path).cloned() {
                    Some(Entry::Pending(now)) if Arc::ptr_eq(&now, p) => p.settled().cloned(),
                    other => other,
                };
            }
            match entry {
                Some(Entry::Served(s)) => {
                    shards.insert(name.to_owned(), s);
                }
                Some(Entry::Unavailable(u)) => {
                    return unavailable(format!(
                        "{}: {what} {name:?} is not served: {}",
                        ix.path, u.reason
                    ))
                }
                _ => {
                    return unavailable(format!(
                        "{}: {what} {name:?} ({path}) is not served [{rule}]",
                        ix.path
                    ))
                }
            }
        }
        let etags: Vec<String> = shards.values().map(|s| s.etag.clone()).collect();
        let linked = || {
            let g = ix.linked.lock().ok()?;
            let (_, served) = g.as_ref().filter(|(was, _)| *was == etags)?;
            Some(Entry::Served(Arc::clone(served)))
        };
        if let Some(served) = linked() {
            return served;
        }
        let _one = ix.linking.lock().await;
        if let Some(served) = linked() {
            return served;
        }
        // Merging the members' manifests (thousands of objects in a large
        // checkpoint) is the blocking pool's work.
        let (file, given) = (Arc::clone(ix), etags.clone());
        let built = off_runtime(move || build_index(&file, shards, &given)).await;
        match built {
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
    /// Reads and parses a multi-file entry's file (and a pack's symbol
    /// map, a file of the tree beside it); it is linked to its members
    /// when a request asks for it. Parsed on the blocking pool: either
    /// may be as large as the manifest cap.
    pub(super) async fn load_index(
        &self,
        rel: &str,
        opened: Opened,
        modified: SystemTime,
        source: Source,
    ) -> Entry {
        let (size, identity) = (opened.size, opened.identity);
        let cap = self.limits.manifest_cap;
        let limits = self.limits;
        let read = async {
            let raw = read_capped(rel, &opened, cap)
                .await
                .map_err(|e| e.to_string())?;
            let owned = rel.to_owned();
            if source != Source::MatrixAtomPack {
                let parse = move || {
                    let index = zt_format::source::safetensors_index::parse(&owned, &raw, &limits)
                        .map_err(|e| e.to_string())?;
                    Ok((raw, Names::Shards(index)))
                };
                return off_runtime(parse).await;
            }
            let ingest = ServedPack::read_manifest(rel, &raw).map_err(|e| e.to_string())?;
            let map_rel = zt_format::source::matrix_atom_pack::beside(rel, &ingest.tokenizer);
            let map_json = self
                .root()
                .read_small(&map_rel, cap)
                .await
                .map_err(|e| e.to_string())?;
            off_runtime(move || {
                let pack =
                    ServedPack::new(&owned, ingest, map_json, cap).map_err(|e| e.to_string())?;
                Ok((raw, Names::Pack(Box::new(pack))))
            })
            .await
        };
        match read.await {
            Ok((raw, names)) => Entry::Index(Arc::new(IndexFile {
                path: rel.to_owned(),
                file: opened.blob,
                size,
                modified,
                identity,
                raw,
                names,
                linked: std::sync::Mutex::new(None),
                linking: tokio::sync::Mutex::new(()),
            })),
            Err(reason) => settled(Err(reason), rel, size, modified, identity),
        }
    }
}

/// Runs a parse on the blocking pool.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("the blocking pool: {e}"))?
}

/// The served entry of a multi-file entry's file and its members.
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
    let (manifest, synthesized): (Manifest, Synthesized) = match &ix.names {
        Names::Shards(index) => (
            merge(&ix.path, index, &views).map_err(|e| e.to_string())?,
            Synthesized::new(),
        ),
        Names::Pack(pack) => {
            let members = views
                .iter()
                .map(|(n, v)| {
                    let m = zt_format::source::matrix_atom_pack::Member {
                        manifest: v.manifest,
                        part: v.part,
                    };
                    (n.clone(), m)
                })
                .collect();
            pack.merge(&ix.path, &members).map_err(|e| e.to_string())?
        }
    };
    let mut parts_for_tag: Vec<&[u8]> = vec![&ix.raw];
    parts_for_tag.extend(etags.iter().map(|e| e.as_bytes()));
    let file = ix.file.clone();
    Ok(Served {
        path: ix.path.clone(),
        file,
        size: ix.size,
        modified: ix.modified,
        etag: etag::derived(ix.source().name(), &parts_for_tag),
        provisional: None,
        checks: Checks::new(&Manifest::default(), false),
        manifest,
        cbor: None,
        computed: true,
        warnings: Vec::new(),
        identity: ix.identity,
        synthesized: synthesized
            .into_iter()
            .map(|(k, v)| (k, bytes::Bytes::from(v)))
            .collect(),
        shards,
    })
}
