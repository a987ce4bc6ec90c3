//! The catalog: every served file under the root (`.zt`, safetensors,
//! GGUF, MATRIX-ATOM, and the files that name others: sharded
//! checkpoints' indexes and ingest packs' manifests; recognised by name
//! and read through [`zt_format::source`]), validated, with the
//! [`Blob`] that serves it.
//!
//! The root is a directory or a prefix in object storage (a `dyn Root` of
//! the store, which lists the files and opens each as a [`Blob`]; how
//! bytes are read is the store's). An entry keeps the handle it was
//! opened with: a file replaced by rename keeps serving its old bytes to
//! requests that already hold the old entry, while new requests get the
//! new one. An object is keyed by its ETag, size and time as listed; its
//! header is read with the ranged GETs its source's read plan asks for
//! (a `.zt` file's footer, then its manifest), once per version; a
//! replaced object fails the requests that still hold the old entry as
//! "changed on the server" (its reads are pinned to the listed ETag). A
//! listing that fails keeps the catalog as it was.
//!
//! A file with components that carry no digest is [`Entry::Pending`] until
//! the digest store has them (from its records, or by hashing the file in
//! the background); a request gets what it needs through
//! [`Catalog::resolve`].
//!
//! `served` holds what an entry is made of, `pending` a file waiting for
//! its digests (and the hasher's queue of them), `resolve` what a request
//! is served while digests are computed, `index` links a multi-file entry
//! (a sharded checkpoint's index, an ingest pack) to its member files,
//! `listing` is what `/v1/files` lists, `etag` makes every ETag, and
//! `hasher` is the task that computes the digests pending files lack.
//!
//! May use: `store` (listing, opening and reading the files), `integrity`
//! (computing the digests files lack, checking a component before its
//! bytes go out), `config` (the catalog's and digests' settings) and
//! `zt-format` (every source's header). Knows nothing of requests or
//! transports.

pub(crate) mod etag;
mod hasher;
mod index;
mod listing;
pub(crate) mod pending;
pub(crate) mod repos;
mod resolve;
mod served;
#[cfg(test)]
mod tests;
pub(crate) mod tree;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock, Weak};
use std::time::SystemTime;

use zt_format::{DigestAlgorithm, Limits, Source};

use crate::server::config::{DigestChoice, DigestsConfig};
use crate::server::integrity::digests::{Computed, DigestMetrics, Store};
use crate::server::integrity::slice_digests::SliceDigests;
use crate::server::store;
use crate::server::store::error::StoreError;
use crate::server::store::root::{Opened, Root, Seen};
use futures_util::StreamExt as _;
use hasher::{Hasher, Settle};
use pending::Pending;
pub(crate) use repos::Repos;

pub(crate) use crate::server::store::Identity;
pub(crate) use index::IndexFile;
pub(crate) use resolve::Need;
pub(crate) use served::Found;
pub(crate) use served::{Served, Unavailable};

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

    /// Whether the file was not served for the open-file limit (a reason
    /// the store tags `[open-file-limit]`), which may pass.
    fn over_open_file_limit(&self) -> bool {
        matches!(self, Entry::Unavailable(u) if u.reason.contains("[open-file-limit]"))
    }
}

/// An immutable view of the catalog.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub entries: BTreeMap<String, Entry>,
    /// Every regular file of the root as last listed, model files or not
    /// (the daemon's own state left out): what the Hub's repositories
    /// are made of.
    pub(crate) files: Arc<BTreeMap<String, Seen>>,
    /// The repositories of `files`, grouped on first use.
    repos: std::sync::OnceLock<Arc<Repos>>,
}

impl Snapshot {
    fn new(entries: BTreeMap<String, Entry>, files: Arc<BTreeMap<String, Seen>>) -> Snapshot {
        Snapshot {
            entries,
            files,
            repos: Default::default(),
        }
    }

    /// A snapshot of new `entries` over `before`'s files, and their
    /// repositories if `before` grouped them already.
    fn over(entries: BTreeMap<String, Entry>, before: &Snapshot) -> Snapshot {
        let snap = Snapshot::new(entries, Arc::clone(&before.files));
        if let Some(r) = before.repos_ready() {
            let _ = snap.repos.set(r);
        }
        snap
    }

    pub fn get(&self, path: &str) -> Option<&Entry> {
        self.entries.get(path)
    }

    /// The Hub's repositories of this snapshot's files, grouped once
    /// (hashing every file's path and tag: with many files, call it off
    /// the runtime the first time, see [`Snapshot::repos_ready`]).
    pub(crate) fn repos(&self) -> Arc<Repos> {
        Arc::clone(self.repos.get_or_init(|| Arc::new(Repos::of(&self.files))))
    }

    /// The repositories, if [`Snapshot::repos`] grouped them already.
    pub(crate) fn repos_ready(&self) -> Option<Arc<Repos>> {
        self.repos.get().cloned()
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

/// Computed digests: the store of records and the hasher.
#[derive(Debug)]
struct Digests {
    algorithm: DigestAlgorithm,
    store: Arc<Store>,
    hasher: Hasher,
    metrics: Arc<DigestMetrics>,
}

/// The catalog of a root.
#[derive(Debug)]
pub struct Catalog {
    root: Arc<dyn Root>,
    /// Why the last listing of an object-storage root failed, if it did.
    store_error: std::sync::Mutex<Option<StoreError>>,
    limits: Limits,
    current: Current,
    /// `None` when computing digests is off.
    digests: Option<Digests>,
    digest_metrics: Arc<DigestMetrics>,
    /// Digests of slices already gathered, by version, object and slice.
    slice_digests: SliceDigests,
    /// Files whose extension named a source that their first bytes did
    /// not confirm (a `.bin` that is no MATRIX-ATOM file), by identity:
    /// not read again until they change.
    passed_over: std::sync::Mutex<std::collections::HashMap<String, Identity>>,
    /// Held by the rescan or refresh under way: they run one at a time.
    rescanning: tokio::sync::Mutex<()>,
    /// When [`Catalog::refresh`] last loaded each path again.
    reloaded: std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>,
    /// The daemon's own files and folders (its state directory, token
    /// file, TLS certificate and key), canonical: never listed, even when
    /// they lie under the root.
    own: Vec<std::path::PathBuf>,
}

/// The least time between two loads of one path by [`Catalog::refresh`].
const RELOAD_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

impl Catalog {
    /// A catalog of `root` (a directory is canonicalized); empty until
    /// [`Catalog::rescan`]. Digests the files lack are computed as
    /// `digests` says and kept under `state_dir`; in the background only
    /// when `background` (otherwise for the requests that need them).
    pub(crate) fn new(
        root: Arc<dyn Root>,
        limits: Limits,
        digests: &DigestsConfig,
        state_dir: &Path,
        own: &[&Path],
        background: bool,
    ) -> std::io::Result<Self> {
        let current: Current = Arc::default();
        let metrics = Arc::new(DigestMetrics::default());
        let algorithm = match digests.algorithm {
            DigestChoice::Sha256 => Some(DigestAlgorithm::Sha256),
            DigestChoice::Crc32c => Some(DigestAlgorithm::Crc32c),
            DigestChoice::Blake3 => Some(DigestAlgorithm::Blake3),
            DigestChoice::Off => None,
        };
        let digests = algorithm.map(|algorithm| {
            let store = Arc::new(Store::new(state_dir));
            let settle = settler(Arc::downgrade(&current), Arc::clone(&store), algorithm);
            let rate = digests.rate_mib_s.saturating_mul(1 << 20);
            Digests {
                algorithm,
                hasher: Hasher::new(algorithm, rate, background, Arc::clone(&metrics), settle),
                store,
                metrics: Arc::clone(&metrics),
            }
        });
        // Made here if it is not there yet (a read-only working directory
        // is no error: the daemon may never write state), so that its
        // files can be told apart from the root's.
        let _ = std::fs::create_dir_all(state_dir);
        Ok(Catalog {
            own: std::iter::once(state_dir)
                .chain(own.iter().copied())
                .filter_map(canonical)
                .collect(),
            root,
            store_error: std::sync::Mutex::new(None),
            limits,
            current,
            digests,
            digest_metrics: metrics,
            slice_digests: SliceDigests::default(),
            passed_over: Default::default(),
            rescanning: Default::default(),
            reloaded: Default::default(),
        })
    }

    pub(crate) fn root(&self) -> &dyn Root {
        self.root.as_ref()
    }

    /// Why the store did not answer at the last listing or check, if it
    /// did not.
    pub(crate) fn store_error(&self) -> Option<StoreError> {
        self.store_error.lock().ok()?.clone()
    }

    /// Records how the store answered a check; whether it had failed before.
    pub(crate) fn set_store_error(&self, error: Option<StoreError>) -> bool {
        match self.store_error.lock() {
            Ok(mut g) => std::mem::replace(&mut *g, error).is_some(),
            Err(_) => false,
        }
    }

    /// Whether a listed file is one of the daemon's own ([`Catalog::own`]).
    fn is_own_state(&self, seen: &Seen) -> bool {
        match &seen.at {
            store::root::At::Path(p) => self.own.iter().any(|o| p.starts_with(o)),
            store::root::At::Object(_) => false,
        }
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        read(&self.current)
    }

    pub(crate) fn digest_metrics(&self) -> &DigestMetrics {
        &self.digest_metrics
    }

    pub(crate) fn slice_digests(&self) -> &SliceDigests {
        &self.slice_digests
    }

    /// Brings `rel`'s entry up to date after a request or a read found the
    /// file changed under it: the file alone is looked at again
    /// (a `stat` of a local file, as a scan would see it; a HEAD of an
    /// object) and, when it is not the version listed, loaded again in its
    /// place (or taken out, gone). One at a time with rescans, so requests
    /// that find the same change at once load it once; and a path is
    /// loaded again at most once per 250 ms (`RELOAD_EVERY`), so a file
    /// being written in place for minutes costs a load four times a second,
    /// not one per request (requests wait that out asleep, and one that
    /// finds the file changed again after its load answers `changing`).
    pub async fn refresh(&self, rel: &str) {
        let _one = self.rescanning.lock().await;
        if !self.may_reload(rel) {
            return;
        }
        let seen = match self.root.stat(rel).await {
            Ok(seen) => seen,
            Err(e) => {
                tracing::warn!(file = rel, error = %e, "cannot look at the changed file again");
                return;
            }
        };
        let seen = seen.filter(|s| !self.is_own_state(s));
        let snap = self.snapshot();
        let before = snap.get(rel).cloned();
        let listed = snap.files.get(rel).map(|s| s.identity);
        drop(snap);
        let now = seen.as_ref().map(|s| s.identity);
        let entry_now = seen.as_ref().and_then(|s| s.source).and(now);
        let passed = before.is_none() && seen.as_ref().is_some_and(|s| self.passed_over(s));
        if listed == now && (before.as_ref().map(Entry::identity) == entry_now || passed) {
            return;
        }
        // `None`: the entry stays as it is then (a digest settle may have
        // replaced it meanwhile).
        let entry = match (&seen, &before) {
            (Some(seen), Some(e)) if e.identity() == seen.identity => None,
            // Read outside the catalog's lock: an object's header is read
            // from the store.
            (Some(seen), _) => Some(match seen.source {
                Some(source) => self.examine(seen, source, true).await,
                None => None,
            }),
            (None, _) => Some(None),
        };
        let mut guard = match self.current.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut entries = guard.entries.clone();
        let replaced = entry.is_some();
        match entry {
            Some(Some(e)) => {
                entries.insert(rel.to_owned(), e);
            }
            Some(None) => {
                entries.remove(rel);
            }
            None => {}
        }
        let mut files = (*guard.files).clone();
        match seen {
            Some(seen) => files.insert(rel.to_owned(), seen),
            None => files.remove(rel),
        };
        *guard = Arc::new(Snapshot::new(entries, Arc::new(files)));
        drop(guard);
        if let (true, Some(Entry::Pending(p))) = (replaced, &before) {
            p.retire();
        }
        tracing::info!(file = rel, "catalogued again: it changed under its entry");
    }

    /// How long until [`Catalog::refresh`] may load `rel` again: a request
    /// that finds it changed waits that long (asleep, holding no thread)
    /// before asking, rather than being answered `changing`.
    pub fn reload_after(&self, rel: &str) -> std::time::Duration {
        let since = self
            .reloaded
            .lock()
            .ok()
            .and_then(|r| r.get(rel).map(std::time::Instant::elapsed));
        since.map_or(std::time::Duration::ZERO, |s| {
            RELOAD_EVERY.saturating_sub(s)
        })
    }

    /// Whether `rel` was not loaded again by [`Catalog::refresh`] within
    /// [`RELOAD_EVERY`]; notes that it is now. Paths are forgotten once a
    /// thousand are remembered (the bound on this map).
    fn may_reload(&self, rel: &str) -> bool {
        let Ok(mut recent) = self.reloaded.lock() else {
            return true;
        };
        let now = std::time::Instant::now();
        if recent
            .get(rel)
            .is_some_and(|at| now.duration_since(*at) < RELOAD_EVERY)
        {
            return false;
        }
        if recent.len() >= 1024 {
            recent.clear();
        }
        recent.insert(rel.to_owned(), now);
        true
    }

    /// Rescans the tree, reusing entries whose files did not change.
    /// Returns (added, removed, changed) counts.
    pub async fn rescan(&self) -> (usize, usize, usize) {
        let _one = self.rescanning.lock().await;
        let old = self.snapshot();
        let Some(found) = self.scan().await else {
            return (0, 0, 0);
        };
        let files: BTreeMap<String, Seen> = found
            .into_iter()
            .filter(|s| !self.is_own_state(s))
            .map(|s| (s.rel.clone(), s))
            .collect();
        // Unchanged files keep their repositories, grouped once.
        let unchanged = files.len() == old.files.len()
            && files
                .iter()
                .zip(old.files.iter())
                .all(|((a, x), (b, y))| a == b && x.identity == y.identity);
        let files = match unchanged {
            true => Arc::clone(&old.files),
            false => Arc::new(files),
        };
        let (mut added, mut changed) = (0, 0);
        let sourced: Vec<(Seen, Source)> = files
            .values()
            .filter_map(|seen| Some((seen.clone(), seen.source?)))
            .collect();
        let looks = sourced.into_iter().map(|(seen, source)| {
            let prev = old.get(&seen.rel).cloned();
            async move {
                let entry = match &prev {
                    // Refused for the open-file limit: asked again, as
                    // descriptors may have been given back since.
                    Some(e) if e.identity() == seen.identity && !e.over_open_file_limit() => {
                        Some(e.clone())
                    }
                    // A new file's first bytes are checked; a changed
                    // one's were once.
                    _ => self.examine(&seen, source, prev.is_none()).await,
                };
                (seen.rel, prev.is_some(), entry)
            }
        });
        let mut looks = futures_util::stream::iter(looks).buffered(LOADS_AT_ONCE);
        let mut entries = BTreeMap::new();
        while let Some((rel, was, entry)) = looks.next().await {
            let Some(entry) = entry else { continue };
            let kept = old.get(&rel).is_some_and(|e| same(e, &entry));
            if !kept {
                if was {
                    changed += 1;
                } else {
                    added += 1;
                }
            }
            entries.insert(rel, entry);
        }
        drop(looks);
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
        let snap = match Arc::ptr_eq(&files, &old.files) {
            true => Snapshot::over(entries, &old),
            false => Snapshot::new(entries, files),
        };
        *guard = Arc::new(snap);
        drop(guard);
        (added, removed, changed)
    }

    /// Every regular file of the root, or `None` when the store could not
    /// be listed (the catalog stays as it was).
    async fn scan(&self) -> Option<Vec<Seen>> {
        let listed = self.root.list().await;
        let error = listed.as_ref().err().cloned();
        if let Some(e) = &error {
            tracing::warn!(root = self.root.describe(), error = %e, "cannot list the store; the catalog is kept as it was");
        }
        // A directory's listing never fails: its error stays `None`.
        self.set_store_error(error);
        listed.ok()
    }

    /// The entry of a listed file: opened, its first bytes checked (when
    /// `check_magic`) and its header read; `None` when the file is not
    /// one of the source its extension names
    /// ([`zt_format::source::magic`]: that answer is kept until it
    /// changes, so it is not opened again).
    async fn examine(&self, seen: &Seen, source: Source, check_magic: bool) -> Option<Entry> {
        let magics = zt_format::source::magic(source).filter(|_| check_magic);
        if magics.is_some() && self.passed_over(seen) {
            return None;
        }
        let opened = match self.root.open(seen).await {
            Ok(opened) => opened,
            // Not passed over: a failure is no answer; the next scan asks again.
            Err(reason) if magics.is_some() => {
                tracing::debug!(file = seen.rel, %reason, "cannot open it to read its first bytes");
                return None;
            }
            Err(reason) => return Some(self.unavailable(seen, reason.to_string(), seen.identity)),
        };
        if let Some(magics) = magics {
            let head = match opened.blob.read_async(8, 0, None).await {
                Ok(head) => head,
                Err(error) => {
                    tracing::debug!(file = seen.rel, %error, "cannot read its first bytes");
                    return None;
                }
            };
            if !magics.iter().any(|m| **m == *head) {
                tracing::debug!(file = seen.rel, %source, "not a {source} file by its first bytes; not served");
                self.pass_over(seen);
                return None;
            }
            if let Ok(mut passed) = self.passed_over.lock() {
                passed.remove(&seen.rel);
            }
        }
        Some(self.load(seen, source, opened).await)
    }

    /// Whether `seen` is this version of a file found before not to be
    /// the source its name says (a `.bin` that is no MATRIX-ATOM file):
    /// the Hub's URLs serve it as a plain file.
    pub(crate) fn passed_over(&self, seen: &Seen) -> bool {
        self.passed_over
            .lock()
            .is_ok_and(|p| p.get(&seen.rel) == Some(&seen.identity))
    }

    /// Remembers that this version of `seen` is not the source its name
    /// says.
    fn pass_over(&self, seen: &Seen) {
        if let Ok(mut passed) = self.passed_over.lock() {
            passed.insert(seen.rel.clone(), seen.identity);
        }
    }

    /// The entry of a file that is not served, and why.
    fn unavailable(&self, seen: &Seen, reason: String, identity: Identity) -> Entry {
        // Past the open-file limit, one warning (the store's) says so for
        // all, and every scan asks again.
        if reason.contains("[open-file-limit]") {
            tracing::debug!(file = seen.rel, %reason, "file is not served");
        } else {
            tracing::warn!(file = seen.rel, %reason, "file is not served");
        }
        Entry::Unavailable(Arc::new(Unavailable {
            path: seen.rel.clone(),
            size: seen.size,
            modified: seen.modified,
            reason,
            identity,
        }))
    }

    async fn load(&self, seen: &Seen, source: Source, opened: Opened) -> Entry {
        let (rel, modified) = (seen.rel.as_str(), seen.modified);
        let Opened {
            blob: file,
            size,
            identity,
        } = opened;
        if matches!(source, Source::SafetensorsIndex | Source::MatrixAtomPack) {
            let opened = Opened {
                blob: file,
                size,
                identity,
            };
            return self.load_index(rel, opened, modified, source).await;
        }
        let fm = match file.header(source, rel, size, &self.limits).await {
            Ok(fm) => fm,
            Err(e) => return self.unavailable(seen, named(&e), identity),
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
            tag: Default::default(),
        };
        let digests = match &self.digests {
            Some(d) if found.lacks_digests() => d,
            _ => return settled(found.serve(None, false), rel, size, modified, identity),
        };
        let (store, owned, algorithm) = (
            Arc::clone(&digests.store),
            rel.to_owned(),
            digests.algorithm,
        );
        // The records are local files: read on the blocking pool.
        let kept = tokio::task::spawn_blocking(move || store.load(&owned, &identity, algorithm))
            .await
            .ok()
            .flatten();
        match kept {
            Some(computed) => {
                digests.metrics.store_hits.inc();
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

/// `path` as listings name it (symlinks resolved), or, while it does not
/// exist, absolute under its nearest existing folder's canonical path.
fn canonical(path: &Path) -> Option<std::path::PathBuf> {
    if let Ok(p) = path.canonicalize() {
        return Some(p);
    }
    let abs = std::path::absolute(path).ok()?;
    let mut rest = Vec::new();
    let mut at = abs.as_path();
    while let Some(parent) = at.parent() {
        rest.push(at.file_name()?.to_owned());
        if let Ok(base) = parent.canonicalize() {
            return Some(rest.iter().rev().fold(base, |p, part| p.join(part)));
        }
        at = parent;
    }
    None
}

/// Files a rescan opens and reads the headers of at once: a store's GETs
/// overlap (a listing of a thousand new objects is not a thousand round
/// trips in a row), a directory's reads share the blocking pool.
const LOADS_AT_ONCE: usize = 8;

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
    Arc::new(
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
                    let file = f.file.clone();
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
                        tag: f.tag.clone(),
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
        *guard = Arc::new(Snapshot::over(entries, &guard));
    }
}

/// A file's refusal as the listing gives it: the error, naming the file
/// (and object), and the rule's stable name.
fn named(e: &zt_format::Error) -> String {
    match e.rule() {
        Some(rule) => format!("{e} [{}]", rule.name()),
        None => e.to_string(),
    }
}
