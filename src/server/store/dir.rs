//! A directory as a [`Root`]: walked for its files (symlinks followed only
//! when they resolve inside it, at most `MAX_DEPTH` deep), each opened
//! as a local file.

use std::fs::File;
use std::path::{Component as PathPart, Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::object_root::{ObjectRoot, StoreError};
use super::root::{ignored_name, read_capped, At, Root, Seen, MAX_DEPTH};
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

    fn list(&self) -> Result<Vec<Seen>, StoreError> {
        let mut found = Vec::new();
        walk(&self.dir, &self.dir, &mut found, 0);
        Ok(found)
    }

    fn stat(&self, rel: &str) -> Result<Option<Seen>, StoreError> {
        Ok(one(&self.dir, rel))
    }

    fn open(&self, seen: &Seen) -> Result<(Blob, u64, Identity), String> {
        let rel = &seen.rel;
        let At::Path(abs) = &seen.at else {
            return Err(format!("{rel}: an object under a directory root"));
        };
        let file = File::open(abs).map_err(|e| format!("{rel}: opening file: {e}"))?;
        let m = file
            .metadata()
            .map_err(|e| format!("{rel}: reading metadata: {e}"))?;
        let identity = Identity::of(&m);
        Ok((Blob::local(file, identity), m.len(), identity))
    }

    fn read_small(&self, rel: &str, cap: u64) -> Result<Vec<u8>, String> {
        let path = self
            .dir
            .join(rel)
            .canonicalize()
            .map_err(|e| format!("{rel}: {e} [pack-member]"))?;
        if !path.starts_with(&self.dir) {
            // Where it leads is the operator's to know, not a client's.
            tracing::warn!(file = rel, target = %path.display(), "a pack member is a symlink out of the root");
            return Err(format!(
                "{rel}: lies outside the root (a symlink out of it) [pack-member]"
            ));
        }
        let file = File::open(&path).map_err(|e| format!("{rel}: opening: {e}"))?;
        let meta = file
            .metadata()
            .map_err(|e| format!("{rel}: reading metadata: {e}"))?;
        read_capped(
            rel,
            &Blob::local(file, Identity::of(&meta)),
            meta.len(),
            cap,
        )
    }

    fn dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }

    fn store(&self) -> Option<&Arc<ObjectRoot>> {
        None
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Seen>, depth: usize) {
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
/// inside the root once symlinks are resolved; a regular file named as a
/// source is.
fn one(root: &Path, rel: &str) -> Option<Seen> {
    let bad = |p: &str| p.is_empty() || p == "." || p == ".." || ignored_name(p);
    if rel.split('/').any(bad) || rel.matches('/').count() > MAX_DEPTH + 1 {
        return None;
    }
    let target = root.join(rel).canonicalize().ok()?;
    let meta = target.metadata().ok().filter(std::fs::Metadata::is_file)?;
    if !target.starts_with(root) {
        return None;
    }
    let source = zt_format::source::by_name(rel.rsplit('/').next()?)?;
    Some(Seen {
        rel: rel.to_owned(),
        size: meta.len(),
        modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        identity: Identity::of(&meta),
        at: At::Path(target),
        source,
    })
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
