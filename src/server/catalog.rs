//! The catalog: every served file under the root (`.zt` and safetensors,
//! recognised by extension and read through [`zt_format::source`]),
//! validated, with the open file handle that serves it.
//!
//! Files are read with `pread` through the handle kept here, never mapped:
//! a file truncated in place makes its requests fail, not the daemon. A
//! file replaced by rename keeps serving its old bytes to requests that
//! already hold the old entry, while new requests get the new one.
//!
//! A file with components that carry no digest is [`Entry::Pending`] until
//! the digest store has them (from its records, or by hashing the file in
//! the background); requests for it wait through [`Catalog::resolve`].

use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component as PathPart, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLock, Weak};
use std::time::SystemTime;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use zt_format::container::Synthesized;
use zt_format::{read_source_at, Digest, DigestAlgorithm, Limits, Manifest, Origin, Source};

use super::checks::{Checks, Refusal};
use super::config::{DigestChoice, DigestsConfig};
use super::digests::{Computed, DigestMetrics, Hasher, Pending, Settle, Store};
use super::etag;

/// A served file.
#[derive(Debug)]
pub struct Served {
    /// Path under the root, with `/` separators.
    pub path: String,
    pub file: File,
    pub size: u64,
    pub modified: SystemTime,
    /// Strong ETag (quoted), from the content: the header bytes, the size
    /// and every component's digest (the file's own or computed), so the
    /// same on every replica serving the same bytes.
    pub etag: String,
    /// With every digest the file lacks filled in by the digest store.
    pub manifest: Manifest,
    /// The source's header bytes as stored (a `.zt` file's CBOR manifest,
    /// a safetensors file's JSON header).
    pub manifest_raw: Vec<u8>,
    /// Whether the digest store filled in any digest.
    pub computed: bool,
    /// The bytes of synthesized components (GGUF string arrays), by
    /// object and role; they are served from here, never read from the file.
    synthesized: BTreeMap<(String, String), Bytes>,
    /// A multi-file entry's files (a sharded checkpoint's shards), by the
    /// name its components give in `file`: each served as an entry of its own.
    shards: BTreeMap<String, Arc<Served>>,
    pub warnings: Vec<String>,
    /// Each component's digest check, done on first use.
    checks: Checks,
    identity: Identity,
}

impl Served {
    /// Checks one component's bytes against its digest, once (blocking:
    /// the first call reads the component). A component of another file
    /// is checked by that file's entry.
    pub fn check(&self, object: &str, role: &str) -> Result<(), Refusal> {
        if let Some(owner) = self.owner(object, role) {
            return owner.check(object, role);
        }
        self.checks
            .check(&self.file, &self.path, &self.manifest, object, role)
    }

    /// The entry that holds a component living in another file (a shard
    /// of a sharded checkpoint); `None` for one of this file. The shard
    /// knows the object by the same name.
    pub fn owner(&self, object: &str, role: &str) -> Option<Arc<Served>> {
        let c = self.manifest.objects.get(object)?.components.get(role)?;
        self.shards.get(c.file.as_ref()?).cloned()
    }

    /// A synthesized component's bytes; `None` for one that is a range of
    /// the file.
    pub fn synthesized(&self, object: &str, role: &str) -> Option<Bytes> {
        self.synthesized
            .get(&(object.to_owned(), role.to_owned()))
            .cloned()
    }

    /// Checks every component whose stored bytes overlap one of `spans`.
    pub fn check_spans(&self, spans: &[std::ops::Range<u64>]) -> Result<(), Refusal> {
        for (o, obj) in &self.manifest.objects {
            let here = |c: &zt_format::Component| !c.synthesized && c.file.is_none();
            for (r, c) in obj.components.iter().filter(|(_, c)| here(c)) {
                let end = c.offset.saturating_add(c.length);
                if spans.iter().any(|s| s.start < end && c.offset < s.end) {
                    self.check(o, r)?;
                }
            }
        }
        Ok(())
    }

    /// The manifest's CBOR as the file stores it, when nothing was added
    /// to it (a v1.2 `.zt` file whose components all carry digests).
    pub fn stored_cbor(&self) -> Option<&[u8]> {
        let m = &self.manifest;
        (m.source == Source::Zt && m.origin == Origin::V1 && !self.computed)
            .then_some(self.manifest_raw.as_slice())
    }
}

/// A file that exists but is not served.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub path: String,
    pub size: u64,
    pub modified: SystemTime,
    pub reason: String,
    identity: Identity,
}

/// What tells a changed file from an unchanged one between scans (and
/// keys the digest store): an in-place rewrite of the same size changes
/// the change time, a replacement the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Identity {
    fn of(m: &Metadata) -> Self {
        let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: ns(m.mtime(), m.mtime_nsec()),
            ctime_ns: ns(m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A file whose header was read and validated: what a served entry is
/// made of once its digests are known.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) path: String,
    pub(crate) file: File,
    size: u64,
    modified: SystemTime,
    identity: Identity,
    pub(crate) manifest: Manifest,
    raw: Vec<u8>,
    warnings: Vec<String>,
    pub(crate) synthesized: Synthesized,
}

impl Found {
    /// Whether a component lacks a digest.
    fn lacks_digests(&self) -> bool {
        self.manifest
            .components()
            .any(|(_, _, c)| c.digest.is_none())
    }

    /// The served entry, with `computed` digests filled in; `fresh` when
    /// they were just computed from this file handle's bytes (rather than
    /// read from the store, which the first request for a component then
    /// checks against the file).
    fn serve(self, computed: Option<&Computed>, fresh: bool) -> Result<Served, String> {
        let Found {
            path,
            file,
            size,
            modified,
            identity,
            mut manifest,
            raw,
            warnings,
            synthesized,
        } = self;
        let mut filled = false;
        if let Some(computed) = computed {
            for (o, obj) in manifest.objects.iter_mut() {
                for (r, c) in obj.components.iter_mut() {
                    if c.digest.is_some() {
                        continue;
                    }
                    let Some(text) = computed.get(o).and_then(|m| m.get(r)) else {
                        return Err(format!(
                            "{path}: no computed digest for object {o:?}, component {r:?}"
                        ));
                    };
                    c.digest = Some(Digest::parse(text).map_err(|e| format!("{path}: {e}"))?);
                    c.digest_computed = true;
                    filled = true;
                }
            }
        }
        let tag = manifest.source.name();
        let etag = if manifest.components().any(|(_, _, c)| c.digest.is_none()) {
            // Digests are off: nothing speaks for the tensors' bytes but
            // the file's modification time.
            let mtime = identity.mtime_ns.to_le_bytes();
            etag::derived(tag, &[&raw, &size.to_le_bytes(), &mtime])
        } else if filled {
            let digests: Vec<u8> = manifest
                .components()
                .flat_map(|(o, r, c)| {
                    let d = c.digest.as_ref().map(Digest::as_str).unwrap_or_default();
                    [
                        o.as_bytes(),
                        b"\0",
                        r.as_bytes(),
                        b"\0",
                        d.as_bytes(),
                        b"\0",
                    ]
                    .concat()
                })
                .collect();
            etag::derived(tag, &[&raw, &size.to_le_bytes(), &digests])
        } else {
            // Unchanged for `.zt` files with digests: the manifest names
            // every component's digest.
            etag::derived(tag, &[&raw, &size.to_le_bytes()])
        };
        tracing::debug!(
            file = path,
            objects = manifest.objects.len(),
            "serving file"
        );
        let checks = Checks::new(&manifest);
        if fresh {
            checks.computed_pass(&manifest);
        }
        Ok(Served {
            path,
            file,
            size,
            modified,
            etag,
            checks,
            manifest,
            manifest_raw: raw,
            computed: filled,
            warnings,
            identity,
            synthesized: synthesized
                .into_iter()
                .map(|(k, v)| (k, Bytes::from(v)))
                .collect(),
            shards: BTreeMap::new(),
        })
    }
}

/// One catalog entry.
#[derive(Debug, Clone)]
pub enum Entry {
    Served(Arc<Served>),
    /// Listed; its digests are being computed.
    Pending(Arc<Pending>),
    /// A sharded checkpoint's index, linked to its shards on request.
    Index(Arc<IndexFile>),
    Unavailable(Arc<Unavailable>),
}

/// A `*.safetensors.index.json` file: served raw as itself, and as one
/// model once linked to its shards ([`Catalog::resolve`]).
#[derive(Debug)]
pub struct IndexFile {
    pub(crate) path: String,
    file: File,
    size: u64,
    modified: SystemTime,
    identity: Identity,
    raw: Vec<u8>,
    pub(crate) index: zt_format::source::safetensors_index::Index,
    /// The last linking, with the shard ETags it was made from.
    linked: std::sync::Mutex<Option<(Vec<String>, Arc<Served>)>>,
}

impl IndexFile {
    /// The ETag of the last linking, if any.
    pub(crate) fn etag(&self) -> Option<String> {
        let g = self.linked.lock().ok()?;
        g.as_ref().map(|(_, s)| s.etag.clone())
    }

    /// The shards' catalog paths: the index's directory joined with each name.
    fn shard_path(&self, name: &str) -> String {
        match self.path.rsplit_once('/') {
            Some((dir, _)) => format!("{dir}/{name}"),
            None => name.to_owned(),
        }
    }
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
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        read(&self.current)
    }

    /// The entry at `path` once it is served or unavailable: a pending
    /// entry is hashed first (at full speed), and this waits for it.
    /// An entry still pending after its wait (the hasher thread is gone)
    /// is returned as it is.
    pub async fn resolve(&self, path: &str) -> Option<Entry> {
        let entry = self.snapshot().get(path).cloned()?;
        if let Entry::Index(ix) = &entry {
            return Some(self.link(ix).await);
        }
        let Entry::Pending(p) = entry else {
            return Some(entry);
        };
        p.wait().await;
        match self.snapshot().get(path).cloned() {
            Some(Entry::Pending(now)) if Arc::ptr_eq(&now, &p) => p.settled().cloned(),
            other => other,
        }
    }

    /// Whether `path` needs [`Catalog::resolve`] before it is served: it
    /// waits for its digests, or is an index to link to its shards.
    pub fn is_pending(&self, path: &str) -> bool {
        matches!(
            self.snapshot().get(path),
            Some(Entry::Pending(_) | Entry::Index(_))
        )
    }

    /// An index linked to its shards as they are served now (each shard
    /// resolved first): the served model, or why it is not served.
    async fn link(&self, ix: &Arc<IndexFile>) -> Entry {
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
        if source == Source::SafetensorsIndex {
            return self.load_index(rel, file, size, modified, identity);
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

impl Catalog {
    /// Reads and parses an index file; it is linked to its shards when a
    /// request asks for it.
    fn load_index(
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
        checks: Checks::new(&Manifest::default()),
        manifest,
        manifest_raw: ix.raw.clone(),
        computed: true,
        warnings: Vec::new(),
        identity: ix.identity,
        synthesized: BTreeMap::new(),
        shards,
    })
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

/// Deepest directory nesting followed, against symlink loops and abuse.
const MAX_DEPTH: usize = 32;

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf, Metadata, Source)>, depth: usize) {
    if depth > MAX_DEPTH {
        tracing::warn!(dir = %dir.display(), "directory nesting too deep; not scanned");
        return;
    }
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot read directory");
            return;
        }
    };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if ignored_name(name) {
            continue;
        }
        let path = entry.path();
        let Ok(lmeta) = entry.metadata() else {
            continue;
        };
        let (target, meta) = if lmeta.file_type().is_symlink() {
            // Follow a symlink only if it resolves inside the root.
            match path.canonicalize() {
                Ok(t) if t.starts_with(root) => match t.metadata() {
                    Ok(m) => (t, m),
                    Err(_) => continue,
                },
                Ok(t) => {
                    tracing::warn!(link = %path.display(), target = %t.display(), "symlink points outside the root; ignored");
                    continue;
                }
                Err(_) => continue,
            }
        } else {
            (path.clone(), lmeta)
        };
        if meta.is_dir() {
            walk(root, &target, out, depth + 1);
        } else if meta.is_file() {
            let source = zt_format::source::by_name(name);
            if let (Some(source), Some(rel)) = (source, relative(root, &path)) {
                out.push((rel, target, meta, source));
            }
        }
    }
}

/// The `/`-separated path of `path` under `root`.
fn relative(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel
        .components()
        .map(|c| match c {
            PathPart::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect();
    Some(parts?.join("/"))
}
