//! Finding the served files under the root: walking a directory, or
//! taking a store's listing.

use std::fs::Metadata;
use std::path::{Component as PathPart, Path, PathBuf};

use zt_format::Source;

use super::{ignored_name, At, Seen};
use crate::server::store::object_root::Listed;
use crate::server::store::Identity;

/// Deepest directory nesting followed, against symlink loops and abuse.
const MAX_DEPTH: usize = 32;

pub(super) fn walk(
    root: &Path,
    dir: &Path,
    out: &mut Vec<(String, PathBuf, Metadata, Source)>,
    depth: usize,
) {
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

/// The file at `rel` under `root` as a walk would find it, if it would:
/// no part of its path a dotfile, a file being written, `.` or `..`;
/// inside the root once symlinks are resolved; a regular file named as a
/// source is.
pub(super) fn one(root: &Path, rel: &str) -> Option<Seen> {
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
        modified: meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
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

/// A listed object, if it is one the catalog serves: named as a source
/// is, with no part of its key a dotfile, a file being written, `.` or
/// `..`, and no deeper than a directory walk goes.
pub(super) fn listed(l: Listed) -> Option<Seen> {
    let mut parts = l.key.split('/');
    let hidden = parts.any(|p| p.is_empty() || p == "." || p == ".." || ignored_name(p));
    let depth = l.key.matches('/').count();
    let name = l.key.rsplit('/').next()?;
    if hidden || depth > MAX_DEPTH + 1 {
        return None;
    }
    let source = zt_format::source::by_name(name)?;
    Some(Seen {
        identity: Identity::of_object(&l),
        at: At::Object(l.etag),
        size: l.size,
        modified: l.modified,
        source,
        rel: l.key,
    })
}
