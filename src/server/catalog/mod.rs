//! The catalog: every served file under the root (`.zt`, safetensors,
//! GGUF, MATRIX-ATOM, and the files that name others: sharded
//! checkpoints' indexes and ingest packs' manifests; recognised by name
//! and read through [`zt_format::source`]), validated, with the open file
//! handle that serves it.
//!
//! Files are read with `pread` through the handle kept here, never mapped:
//! a file truncated in place makes its requests fail, not the daemon. A
//! file replaced by rename keeps serving its old bytes to requests that
//! already hold the old entry, while new requests get the new one.
//!
//! A file with components that carry no digest is [`Entry::Pending`] until
//! the digest store has them (from its records, or by hashing the file in
//! the background); a request gets what it needs through
//! [`Catalog::resolve`].
//!
//! `served` holds what an entry is made of, `resolve` what a request is
//! served while digests are computed, `index` links a multi-file entry
//! (a sharded checkpoint's index, an ingest pack) to its member files,
//! and `walk` finds the files.

mod index;
mod resolve;
mod served;
mod walk;

use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, Weak};
use std::time::SystemTime;

use zt_format::{read_source_at, DigestAlgorithm, Limits, Source};

use super::config::{DigestChoice, DigestsConfig};
use super::digests::{Computed, DigestMetrics, Hasher, Pending, Settle, Store};

pub(crate) use index::IndexFile;
pub(crate) use resolve::Need;
pub(crate) use served::{Found, Identity};
pub(crate) use served::{Served, Unavailable};
use walk::walk;

/// One catalog entry.
#[derive(Debug, Clone)]
pub enum Entry {
    Served(Arc<Served>),
    /// Listed; its digests are being computed.
    Pending(Arc<Pending>),
    /// A file that names others (a sharded checkpoint's index, an ingest
    /// pack's manifest), linked to them on request.
    Index(Arc<IndexFile>),
    Unavailable(Arc<Unavailable>),
}

impl Entry {
    fn identity(&self) -> Identity {
        match self {
            Entry::Served(s) => s.identity,
            Entry::Pending(p) => p.found.identity,
            Entry::Index(i) => i.identity,
            Entry::Unavailable(u) => u.identity,
        }
    }
}

/// An immutable view of the catalog.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub entries: BTreeMap<String, Entry>,
}

impl Snapshot {
    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path)
    }

    pub fn served(&self) -> impl Iterator<Item = &Arc<Served>> {
        self.entries.values().filter_map(|e| match e {
            Entry::Served(s) => Some(s),
            _ => None,
        })
    }

    pub(crate) fn indexes(&self) -> impl Iterator<Item = &Arc<IndexFile>> {
        self.entries.values().filter_map(|e| match e {
            Entry::Index(i) => Some(i),
            _ => None,
        })
    }

    pub(crate) fn pending(&self) -> impl Iterator<Item = &Arc<Pending>> {
        self.entries.values().filter_map(|e| match e {
            Entry::Pending(p) => Some(p),
            _ => None,
        })
    }

    pub fn unavailable(&self) -> impl Iterator<Item = &Arc<Unavailable>> {
        self.entries.values().filter_map(|e| match e {
            Entry::Unavailable(u) => Some(u),
            _ => None,
        })
    }
}

type Current = Arc<RwLock<Arc<Snapshot>>>;

fn read(current: &Current) -> Arc<Snapshot> {
    match current.read() {
        Ok(g) => Arc::clone(&g),
        Err(p) => Arc::clone(&p.into_inner()),
    }
}

/// Computed digests: the store of records and the hasher thread.
#[derive(Debug)]
struct Digests {
    algorithm: DigestAlgorithm,
    store: Arc<Store>,
    hasher: Hasher,
    metrics: Arc<DigestMetrics>,
}

/// The catalog of a root directory.
#[derive(Debug)]
pub struct Catalog {
    root: PathBuf,
    limits: Limits,
    current: Current,
    /// `None` when computing digests is off.
    digests: Option<Digests>,
    digest_metrics: Arc<DigestMetrics>,
    /// Files whose extension named a source that their first bytes did
    /// not confirm (a `.bin` that is no MATRIX-ATOM file), by identity:
    /// not read again until they change.
    passed_over: std::sync::Mutex<std::collections::HashMap<String, Identity>>,
}

/// Whether a file name is one the catalog ignores: dotfiles and files
/// still being written.
pub(super) fn ignored_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".part") || name.ends_with(".tmp")
}

impl Catalog {
    /// A catalog of `root` (canonicalized); empty until [`Catalog::rescan`].
    /// Digests the files lack are computed as `digests` says and kept
    /// under `state_dir`.
    pub fn new(
        root: &Path,
        limits: Limits,
        digests: &DigestsConfig,
        state_dir: &Path,
    ) -> std::io::Result<Self> {
        let current: Current = Arc::default();
        let metrics = Arc::new(DigestMetrics::default());
        let algorithm = match digests.algorithm {
            DigestChoice::Sha256 => Some(DigestAlgorithm::Sha256),
            DigestChoice::Crc32c => Some(DigestAlgorithm::Crc32c),
            DigestChoice::Off => None,
        };
        let digests = algorithm.map(|algorithm| {
            let store = Arc::new(Store::new(state_dir));
            let settle = settler(Arc::downgrade(&current), Arc::clone(&store), algorithm);
            let rate = digests.rate_mib_s.saturating_mul(1 << 20);
            Digests {
                algorithm,
                hasher: Hasher::start(algorithm, rate, Arc::clone(&metrics), settle),
                store,
                metrics: Arc::clone(&metrics),
            }
        });
        Ok(Catalog {
            root: root.canonicalize()?,
            limits,
            current,
            digests,
            digest_metrics: metrics,
            passed_over: Default::default(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        read(&self.current)
    }

    pub(crate) fn digest_metrics(&self) -> &DigestMetrics {
        &self.digest_metrics
    }

    /// Rescans the tree, reusing entries whose files did not change.
    /// Returns (added, removed, changed) counts.
    pub fn rescan(&self) -> (usize, usize, usize) {
        let old = self.snapshot();
        let mut found = Vec::new();
        walk(&self.root, &self.root, &mut found, 0);
        let mut entries = BTreeMap::new();
        let (mut added, mut changed) = (0, 0);
        for (rel, abs, meta, source) in found {
            let id = Identity::of(&meta);
            if old.get(&rel).is_none() && !self.confirmed(&rel, &abs, id, source) {
                continue;
            }
            let entry = match old.get(&rel) {
                Some(e) if e.identity() == id => e.clone(),
                prev => {
                    if prev.is_some() {
                        changed += 1;
                    } else {
                        added += 1;
                    }
                    self.load(&rel, &abs, &meta, source)
                }
            };
            entries.insert(rel, entry);
        }
        let mut removed = 0;
        for (k, e) in &old.entries {
            let kept = entries.get(k).is_some_and(|n| same(n, e));
            if !kept {
                if let Entry::Pending(p) = e {
                    p.retire();
                }
            }
            removed += usize::from(!entries.contains_key(k));
        }
        // A pending entry the hasher settled while this scan ran stays
        // settled: the swap happens under the lock the hasher takes.
        let mut guard = match self.current.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for e in entries.values_mut() {
            if let Some(settled) = match &*e {
                Entry::Pending(mine) => mine.settled().cloned(),
                _ => None,
            } {
                *e = settled;
            }
        }
        *guard = Arc::new(Snapshot { entries });
        drop(guard);
        (added, removed, changed)
    }

    /// Whether a file whose extension names `source` starts as that source
    /// must ([`zt_format::source::magic`]); the answer for a file that
    /// does not is kept until the file changes.
    fn confirmed(&self, rel: &str, abs: &Path, id: Identity, source: Source) -> bool {
        let Some(magics) = zt_format::source::magic(source) else {
            return true;
        };
        let Ok(mut passed) = self.passed_over.lock() else {
            return true;
        };
        if passed.get(rel) == Some(&id) {
            return false;
        }
        let mut head = [0u8; 8];
        let starts = File::open(abs)
            .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0))
            .is_ok_and(|()| magics.iter().any(|m| **m == head));
        if starts {
            passed.remove(rel);
        } else {
            tracing::debug!(file = rel, %source, "not a {source} file by its first bytes; not served");
            passed.insert(rel.to_owned(), id);
        }
        starts
    }

    fn load(&self, rel: &str, abs: &Path, meta: &Metadata, source: Source) -> Entry {
        let identity = Identity::of(meta);
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let unavailable = |reason: String, identity: Identity| {
            tracing::warn!(file = rel, %reason, "file is not served");
            Entry::Unavailable(Arc::new(Unavailable {
                path: rel.to_owned(),
                size: meta.len(),
                modified,
                reason,
                identity,
            }))
        };
        let file = match File::open(abs) {
            Ok(f) => f,
            Err(e) => return unavailable(format!("{rel}: opening file: {e}"), identity),
        };
        // Measure the handle we keep: the path may already name a newer file.
        let (size, identity) = match file.metadata() {
            Ok(m) => (m.len(), Identity::of(&m)),
            Err(e) => return unavailable(format!("{rel}: reading metadata: {e}"), identity),
        };
        if matches!(source, Source::SafetensorsIndex | Source::MatrixAtomPack) {
            return self.load_index(rel, file, size, modified, identity, source);
        }
        let fm = match read_source_at(&file, source, rel, &self.limits) {
            Ok(fm) => fm,
            Err(e) => return unavailable(e.to_string(), identity),
        };
        let found = Found {
            path: rel.to_owned(),
            file,
            size,
            modified,
            identity,
            manifest: fm.parsed.manifest,
            raw: fm.raw,
            warnings: fm.parsed.warnings.iter().map(ToString::to_string).collect(),
            synthesized: fm.parsed.synthesized,
        };
        let digests = match &self.digests {
            Some(d) if found.lacks_digests() => d,
            _ => return settled(found.serve(None, false), rel, size, modified, identity),
        };
        match digests.store.load(rel, &identity, digests.algorithm) {
            Some(computed) => {
                digests.metrics.store_hits.fetch_add(1, Ordering::Relaxed);
                settled(
                    found.serve(Some(&computed), false),
                    rel,
                    size,
                    modified,
                    identity,
                )
            }
            None => Entry::Pending(digests.hasher.enqueue(found)),
        }
    }
}

/// Whether two entries are the same version of a file.
fn same(a: &Entry, b: &Entry) -> bool {
    match (a, b) {
        (Entry::Served(x), Entry::Served(y)) => Arc::ptr_eq(x, y),
        (Entry::Pending(x), Entry::Pending(y)) => Arc::ptr_eq(x, y),
        (Entry::Index(x), Entry::Index(y)) => Arc::ptr_eq(x, y),
        (Entry::Unavailable(x), Entry::Unavailable(y)) => Arc::ptr_eq(x, y),
        _ => false,
    }
}

/// The served entry, or the reason it cannot be.
fn settled(
    served: Result<Served, String>,
    rel: &str,
    size: u64,
    modified: SystemTime,
    identity: Identity,
) -> Entry {
    match served {
        Ok(s) => Entry::Served(Arc::new(s)),
        Err(reason) => {
            tracing::warn!(file = rel, %reason, "file is not served");
            Entry::Unavailable(Arc::new(Unavailable {
                path: rel.to_owned(),
                size,
                modified,
                reason,
                identity,
            }))
        }
    }
}

/// What the hasher does with a finished file: record its digests, and
/// replace its pending entry (if the catalog still lists that version)
/// with the served file, or with the reason it is not served.
fn settler(
    current: Weak<RwLock<Arc<Snapshot>>>,
    store: Arc<Store>,
    algorithm: DigestAlgorithm,
) -> Settle {
    Box::new(
        move |pending: &Arc<Pending>, result: Result<Computed, String>| {
            let Some(current) = current.upgrade() else {
                return;
            };
            if pending.is_retired() {
                return;
            }
            let f = &pending.found;
            let (path, size, modified, identity) = (f.path.clone(), f.size, f.modified, f.identity);
            let entry = match result {
                Ok(computed) => {
                    store.save(&path, &identity, algorithm, &computed);
                    let file = match f.file.try_clone() {
                        Ok(file) => file,
                        Err(e) => {
                            let why = format!("{path}: duplicating the file handle: {e}");
                            return replace(
                                &current,
                                pending,
                                settled(Err(why), &path, size, modified, identity),
                            );
                        }
                    };
                    let found = Found {
                        path: path.clone(),
                        file,
                        size,
                        modified,
                        identity,
                        manifest: f.manifest.clone(),
                        raw: f.raw.clone(),
                        warnings: f.warnings.clone(),
                        synthesized: f.synthesized.clone(),
                    };
                    settled(
                        found.serve(Some(&computed), true),
                        &path,
                        size,
                        modified,
                        identity,
                    )
                }
                Err(why) => settled(Err(why), &path, size, modified, identity),
            };
            replace(&current, pending, entry);
        },
    )
}

/// Puts `entry` where `pending` is listed, if it still is (a scan that
/// lists it later takes the entry from `pending` itself).
fn replace(current: &Current, pending: &Arc<Pending>, entry: Entry) {
    pending.settle(entry.clone());
    let mut guard = match current.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let path = &pending.found.path;
    let listed = matches!(guard.get(path), Some(Entry::Pending(p)) if Arc::ptr_eq(p, pending));
    if listed {
        let mut entries = guard.entries.clone();
        entries.insert(path.clone(), entry);
        *guard = Arc::new(Snapshot { entries });
    }
}
