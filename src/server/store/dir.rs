//! A directory as a [`Root`]: walked for its files (symlinks followed only
//! when they resolve inside it, at most `MAX_DEPTH` deep), each opened
//! as a local file, and watched for file events (inotify, through
//! `notify`).

use futures_util::future::BoxFuture;
use std::path::{Component as PathPart, Path, PathBuf};
use std::time::SystemTime;

use notify::{RecursiveMode, Watcher as _};
use tokio::sync::mpsc;

use super::descriptors::Hold;
use super::error::{OpenError, StoreError};
use super::root::{ignored_name, read_capped, At, Opened, Root, Seen, Watching, MAX_DEPTH};
use super::{Blob, Identity};

/// A directory of served files (canonicalized).
#[derive(Debug)]
pub(crate) struct DirRoot {
    dir: PathBuf,
    /// Its path as text, for [`Root::describe`].
    shown: String,
}

impl DirRoot {
    pub(crate) fn open(dir: &Path) -> std::io::Result<DirRoot> {
        let dir = dir.canonicalize()?;
        Ok(DirRoot {
            shown: dir.display().to_string(),
            dir,
        })
    }
}

impl Root for DirRoot {
    fn describe(&self) -> &str {
        &self.shown
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Seen>, StoreError>> {
        let dir = self.dir.clone();
        Box::pin(async move {
            Ok(blocking(move || {
                let mut found = Vec::new();
                walk(&dir, &dir, &dir, &mut found, 0);
                found
            })
            .await
            .unwrap_or_default())
        })
    }

    fn stat<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Option<Seen>, StoreError>> {
        let (dir, rel) = (self.dir.clone(), rel.to_owned());
        Box::pin(async move { Ok(blocking(move || one(&dir, &rel)).await.flatten()) })
    }

    fn open<'a>(&'a self, seen: &'a Seen) -> BoxFuture<'a, Result<Opened, OpenError>> {
        self.open_as(seen, Hold::Served)
    }

    fn open_passing<'a>(&'a self, seen: &'a Seen) -> BoxFuture<'a, Result<Opened, OpenError>> {
        self.open_as(seen, Hold::Passing)
    }

    fn read_small<'a>(
        &'a self,
        rel: &'a str,
        cap: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, OpenError>> {
        let (dir, owned) = (self.dir.clone(), rel.to_owned());
        Box::pin(async move {
            let stopping = OpenError::Stopping { rel: owned.clone() };
            let opened = blocking(move || {
                let path = dir
                    .join(&owned)
                    .canonicalize()
                    .map_err(|e| OpenError::NoMember {
                        rel: owned.clone(),
                        why: e.to_string(),
                    })?;
                if !path.starts_with(&dir) {
                    // Where it leads is the operator's to know, not a client's.
                    tracing::warn!(file = owned, target = %path.display(), "a pack member is a symlink out of the root");
                    return Err(OpenError::OutsideRoot { rel: owned });
                }
                if hidden_inside(&dir, &path) {
                    let why = "it is, or leads to, a file the root hides (a dotfile, a file being written)";
                    return Err(OpenError::NoMember {
                        rel: owned,
                        why: why.to_owned(),
                    });
                }
                open_local(&owned, &path, Hold::Passing)
            })
            .await
            .unwrap_or(Err(stopping))?;
            read_capped(rel, &opened, cap).await
        })
    }

    fn reads_in_background(&self, _asked: bool) -> bool {
        true
    }

    fn watch(&self, tx: mpsc::Sender<()>) -> Option<Watching> {
        let handler = move |res: notify::Result<notify::Event>| match res {
            Ok(_) => {
                let _ = tx.try_send(());
            }
            Err(e) => tracing::warn!(error = %e, "file watch error; relying on periodic rescans"),
        };
        let mut watcher = match notify::recommended_watcher(handler) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch files; falling back to periodic rescans");
                return None;
            }
        };
        match watcher.watch(&self.dir, RecursiveMode::Recursive) {
            Ok(()) => Some(Box::new(watcher)),
            Err(e) => {
                tracing::warn!(error = %e, root = self.shown,
                    "cannot watch the root (inotify watches exhausted?); falling back to periodic rescans");
                None
            }
        }
    }
}

impl DirRoot {
    /// Opens a listed file, its descriptor taken as `hold`.
    fn open_as<'a>(
        &'a self,
        seen: &'a Seen,
        hold: Hold,
    ) -> BoxFuture<'a, Result<Opened, OpenError>> {
        let rel = seen.rel.clone();
        let at = match &seen.at {
            At::Path(abs) => Ok(abs.clone()),
            At::Object(_) => Err(OpenError::OtherRoot { rel: rel.clone() }),
        };
        Box::pin(async move {
            let abs = at?;
            let stopping = OpenError::Stopping { rel: rel.clone() };
            blocking(move || open_local(&rel, &abs, hold))
                .await
                .unwrap_or(Err(stopping))
        })
    }
}

/// Runs directory and file-system calls on the blocking pool; `None` if
/// the runtime is shutting down.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(f).await.ok()
}

/// Opens the file at `abs` (`rel` under the root), with the identity the
/// handle has, its descriptor taken from the open-file budget as `hold`.
fn open_local(rel: &str, abs: &Path, hold: Hold) -> Result<Opened, OpenError> {
    let failed = |doing| {
        move |error| OpenError::Io {
            rel: rel.to_owned(),
            doing,
            error,
        }
    };
    // Never blocking on a FIFO (one put where a listed file was, or named
    // by a pack): it would hold a blocking thread for good.
    // A served file's descriptor is held for as long as it is served:
    // within the open-file budget, or the file is not served.
    let held = super::descriptors::take(hold).map_err(failed("opening file"))?;
    let file = zt_format::open_regular(abs).map_err(failed("opening file"))?;
    let m = file.metadata().map_err(failed("reading metadata"))?;
    let identity = Identity::of(&m);
    Ok(Opened {
        blob: Blob::local(file, identity, held),
        size: m.len(),
        identity,
    })
}

/// Lists the files under `shown` (a folder as the root's paths name it,
/// through any symlinks) whose real, canonical path is `real`. A symlink is
/// followed only when it resolves inside the root, and a folder link that
/// leads back to a folder being walked (a loop) is not; what a link leads
/// to is listed under the link's own path, as `stat` finds it.
fn walk(root: &Path, shown: &Path, real: &Path, out: &mut Vec<Seen>, depth: usize) {
    if depth > MAX_DEPTH {
        tracing::warn!(dir = %shown.display(), "directory nesting too deep; not scanned");
        return;
    }
    let rd = match std::fs::read_dir(real) {
        Ok(rd) => rd,
        Err(e) => {
            tracing::warn!(dir = %shown.display(), error = %e, "cannot read directory");
            return;
        }
    };
    for entry in rd.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if ignored_name(name) {
            continue;
        }
        let (path, seen_as) = (entry.path(), shown.join(name));
        let Ok(lmeta) = entry.metadata() else {
            continue;
        };
        let (target, meta) = if lmeta.file_type().is_symlink() {
            // Follow a symlink only if it resolves inside the root, to
            // what a listing would show there itself.
            match path.canonicalize() {
                Ok(t) if hidden_inside(root, &t) => {
                    tracing::warn!(link = %seen_as.display(), target = %t.display(), "symlink points at a hidden file or folder; ignored");
                    continue;
                }
                Ok(t) if t.starts_with(root) => match t.metadata() {
                    Ok(m) => (t, m),
                    Err(_) => continue,
                },
                Ok(t) => {
                    tracing::warn!(link = %seen_as.display(), target = %t.display(), "symlink points outside the root; ignored");
                    continue;
                }
                Err(_) => continue,
            }
        } else {
            (path, lmeta)
        };
        if meta.is_dir() {
            if real.starts_with(&target) {
                tracing::warn!(link = %seen_as.display(), target = %target.display(), "symlink loops back to a folder above it; ignored");
                continue;
            }
            walk(root, &seen_as, &target, out, depth + 1);
        } else if meta.is_file() {
            let source = zt_format::source::by_name(name);
            if let Some(rel) = relative(root, &seen_as) {
                out.push(Seen {
                    rel,
                    size: meta.len(),
                    modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                    identity: Identity::of(&meta),
                    source,
                    at: At::Path(target),
                });
            }
        }
    }
}

/// The file at `rel` under `root` as a walk would find it, if it would:
/// no part of its path a dotfile, a file being written, `.` or `..`;
/// inside the root once symlinks are resolved; a regular file.
fn one(root: &Path, rel: &str) -> Option<Seen> {
    let bad = |p: &str| p.is_empty() || p == "." || p == ".." || ignored_name(p);
    if rel.split('/').any(bad) || rel.matches('/').count() > MAX_DEPTH + 1 {
        return None;
    }
    let target = root.join(rel).canonicalize().ok()?;
    let meta = target.metadata().ok().filter(std::fs::Metadata::is_file)?;
    if !target.starts_with(root) || hidden_inside(root, &target) {
        return None;
    }
    let source = zt_format::source::by_name(rel.rsplit('/').next()?);
    Some(Seen {
        rel: rel.to_owned(),
        size: meta.len(),
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        identity: Identity::of(&meta),
        at: At::Path(target),
        source,
    })
}

/// Whether `target` (canonical) lies inside `root` under a name a listing
/// leaves out (a dotfile or dot folder, a file being written): a symlink
/// must not serve what the root's own path would not. The object stores
/// that version-control tools link a working tree's files into
/// ([`LINKED_STORES`]) are the exception: their files are what the links
/// stand for.
fn hidden_inside(root: &Path, target: &Path) -> bool {
    let Ok(rel) = target.strip_prefix(root) else {
        return false;
    };
    let Some(parts) = names(rel) else {
        return true;
    };
    let Some(first) = parts.iter().position(|p| ignored_name(p)) else {
        return false;
    };
    let rest = &parts[first..];
    let store = LINKED_STORES
        .iter()
        .find(|s| rest.len() > s.len() && rest.starts_with(s));
    match store {
        Some(s) => rest[s.len()..].iter().any(|p| ignored_name(p)),
        None => true,
    }
}

/// Folders under a dot folder that a working tree's files are symlinks
/// into, served through those links: git-annex's (and DataLad's) object
/// store, DVC's cache.
const LINKED_STORES: &[&[&str]] = &[&[".git", "annex", "objects"], &[".dvc", "cache"]];

/// The `/`-separated path of `path` under `root`.
fn relative(root: &Path, path: &Path) -> Option<String> {
    Some(names(path.strip_prefix(root).ok()?)?.join("/"))
}

/// The names a relative path is made of (`None` if one is not UTF-8, or
/// the path is not plain names).
fn names(rel: &Path) -> Option<Vec<&str>> {
    rel.components()
        .map(|c| match c {
            PathPart::Normal(s) => s.to_str(),
            _ => None,
        })
        .collect()
}
