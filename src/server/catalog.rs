//! The catalog: every `.zt` file under the root, validated, with the open
//! file handle that serves it.
//!
//! Files are read with `pread` through the handle kept here, never mapped:
//! a file truncated in place makes its requests fail, not the daemon. A
//! file replaced by rename keeps serving its old bytes to requests that
//! already hold the old entry, while new requests get the new one.

use std::collections::BTreeMap;
use std::fs::{File, Metadata};
use std::os::unix::fs::MetadataExt;
use std::path::{Component as PathPart, Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use zt_format::{read_manifest_at, Limits, Manifest};

use super::checks::{Checks, Refusal};
use super::etag;

/// A served file.
#[derive(Debug)]
pub struct Served {
    /// Path under the root, with `/` separators.
    pub path: String,
    pub file: File,
    pub size: u64,
    pub modified: SystemTime,
    /// Strong ETag (quoted), from the manifest bytes and the size: the same
    /// on every replica serving the same file.
    pub etag: String,
    pub manifest: Manifest,
    /// The manifest's stored CBOR bytes.
    pub manifest_raw: Vec<u8>,
    pub warnings: Vec<String>,
    /// Each component's digest check, done on first use.
    checks: Checks,
    identity: Identity,
}

impl Served {
    /// Checks one component's bytes against its digest, once (blocking:
    /// the first call reads the component).
    pub fn check(&self, object: &str, role: &str) -> Result<(), Refusal> {
        self.checks
            .check(&self.file, &self.path, &self.manifest, object, role)
    }

    /// Checks every component whose stored bytes overlap one of `spans`.
    pub fn check_spans(&self, spans: &[std::ops::Range<u64>]) -> Result<(), Refusal> {
        for (o, obj) in &self.manifest.objects {
            for (r, c) in obj.components.iter() {
                let end = c.offset.saturating_add(c.length);
                if spans.iter().any(|s| s.start < end && c.offset < s.end) {
                    self.check(o, r)?;
                }
            }
        }
        Ok(())
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

/// What tells a changed file from an unchanged one between scans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Identity {
    fn of(m: &Metadata) -> Self {
        Identity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        }
    }
}

/// One catalog entry.
#[derive(Debug, Clone)]
pub enum Entry {
    Served(Arc<Served>),
    Unavailable(Arc<Unavailable>),
}

impl Entry {
    fn identity(&self) -> Identity {
        match self {
            Entry::Served(s) => s.identity,
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
            Entry::Unavailable(_) => None,
        })
    }

    pub fn unavailable(&self) -> impl Iterator<Item = &Arc<Unavailable>> {
        self.entries.values().filter_map(|e| match e {
            Entry::Unavailable(u) => Some(u),
            Entry::Served(_) => None,
        })
    }
}

/// The catalog of a root directory.
#[derive(Debug)]
pub struct Catalog {
    root: PathBuf,
    limits: Limits,
    current: RwLock<Arc<Snapshot>>,
}

/// Whether a file name is one the catalog ignores: dotfiles and files
/// still being written.
pub(super) fn ignored_name(name: &str) -> bool {
    name.starts_with('.') || name.ends_with(".part") || name.ends_with(".tmp")
}

impl Catalog {
    /// A catalog of `root` (canonicalized); empty until [`Catalog::rescan`].
    pub fn new(root: &Path, limits: Limits) -> std::io::Result<Self> {
        Ok(Catalog {
            root: root.canonicalize()?,
            limits,
            current: RwLock::new(Arc::new(Snapshot::default())),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The current snapshot.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        match self.current.read() {
            Ok(g) => Arc::clone(&g),
            Err(p) => Arc::clone(&p.into_inner()),
        }
    }

    /// Rescans the tree, reusing entries whose files did not change.
    /// Returns (added, removed, changed) counts.
    pub fn rescan(&self) -> (usize, usize, usize) {
        let old = self.snapshot();
        let mut found = Vec::new();
        walk(&self.root, &self.root, &mut found, 0);
        let mut entries = BTreeMap::new();
        let (mut added, mut changed) = (0, 0);
        for (rel, abs, meta) in found {
            let id = Identity::of(&meta);
            let entry = match old.get(&rel) {
                Some(e) if e.identity() == id => e.clone(),
                prev => {
                    if prev.is_some() {
                        changed += 1;
                    } else {
                        added += 1;
                    }
                    self.load(&rel, &abs, &meta)
                }
            };
            entries.insert(rel, entry);
        }
        let removed = old
            .entries
            .keys()
            .filter(|k| !entries.contains_key(*k))
            .count();
        let snapshot = Arc::new(Snapshot { entries });
        match self.current.write() {
            Ok(mut g) => *g = snapshot,
            Err(p) => *p.into_inner() = snapshot,
        }
        (added, removed, changed)
    }

    fn load(&self, rel: &str, abs: &Path, meta: &Metadata) -> Entry {
        let identity = Identity::of(meta);
        let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let unavailable = |reason: String| {
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
            Err(e) => return unavailable(format!("{rel}: opening file: {e}")),
        };
        // Measure the handle we keep: the path may already name a newer file.
        let (size, identity) = match file.metadata() {
            Ok(m) => (m.len(), Identity::of(&m)),
            Err(e) => return unavailable(format!("{rel}: reading metadata: {e}")),
        };
        match read_manifest_at(&file, rel, &self.limits) {
            Ok(fm) => {
                let etag = etag::derived("zt", &[&fm.raw, &size.to_le_bytes()]);
                tracing::debug!(
                    file = rel,
                    objects = fm.parsed.manifest.objects.len(),
                    "serving file"
                );
                Entry::Served(Arc::new(Served {
                    path: rel.to_owned(),
                    file,
                    size,
                    modified,
                    etag,
                    warnings: fm.parsed.warnings.iter().map(ToString::to_string).collect(),
                    checks: Checks::new(&fm.parsed.manifest),
                    manifest: fm.parsed.manifest,
                    manifest_raw: fm.raw,
                    identity,
                }))
            }
            Err(e) => unavailable(e.to_string()),
        }
    }
}

/// Deepest directory nesting followed, against symlink loops and abuse.
const MAX_DEPTH: usize = 32;

fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf, Metadata)>, depth: usize) {
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
        } else if meta.is_file() && name.ends_with(".zt") {
            if let Some(rel) = relative(root, &path) {
                out.push((rel, target, meta));
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
