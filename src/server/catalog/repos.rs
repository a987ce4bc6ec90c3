//! The root's files as the Hugging Face Hub's repositories: a directory
//! `ORG/NAME/` is the model repository `ORG/NAME`, a top-level `NAME/`
//! the model repository `NAME` (the old ids without an organisation), and
//! `datasets/ORG/NAME/` (or `datasets/NAME/`) a dataset repository. A
//! repository's files are every regular file below its directory, model
//! files or not; a file at `a/b/c/d.json` belongs to `a` (as `b/c/d.json`)
//! and to `a/b` (as `c/d.json`), and a request's id says which it means.
//!
//! Each file has a tag made from its identity (for a local file its
//! device, inode, size and times; for an object its key, ETag, size and
//! time as listed), and a repository has a commit id made from its files'
//! paths and tags: 40 hex digits, stable while no file changes, new when
//! any does. The daemon keeps no history, so only the current commit is
//! served.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::SystemTime;

use sha2::{Digest as _, Sha256};

use super::etag;
use super::tree::{self, Folders, Tagged};
use crate::server::store::root::{ignored_name, Seen};
use crate::server::store::Identity;

/// The kind of a repository, as the Hub's URLs name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Model,
    Dataset,
}

impl Kind {
    /// The folder under the root whose directories are repositories of
    /// this kind (`None`: the root itself).
    fn folder(self) -> Option<&'static str> {
        match self {
            Kind::Model => None,
            Kind::Dataset => Some("datasets"),
        }
    }
}

/// One file of a repository.
#[derive(Debug, Clone)]
pub(crate) struct RepoFile {
    /// Its path under the root (the catalog's key).
    pub(crate) rel: String,
    pub(crate) size: u64,
    pub(crate) modified: SystemTime,
    /// Its strong ETag (quoted): 40 hex digits made from its identity
    /// ([`tag_of`]).
    pub(crate) tag: String,
}

/// A repository: its files by path within it, and its commit id.
#[derive(Debug)]
pub(crate) struct Repo {
    pub(crate) kind: Kind,
    pub(crate) id: String,
    pub(crate) files: BTreeMap<String, RepoFile>,
    /// 40 lowercase hex digits.
    pub(crate) commit: String,
    /// The latest modification time of its files.
    pub(crate) modified: SystemTime,
    /// Its folders, indexed on first use ([`Repo::folders`]).
    folders: OnceLock<Folders>,
}

/// Every repository of a snapshot's files.
#[derive(Debug, Default)]
pub(crate) struct Repos {
    by_id: BTreeMap<(Kind, String), Repo>,
}

impl Repos {
    /// The repositories `files` (keyed by their path under the root) make.
    pub(crate) fn of(files: &BTreeMap<String, Seen>) -> Repos {
        let mut grouped: BTreeMap<(Kind, String), BTreeMap<String, RepoFile>> = BTreeMap::new();
        for seen in files.values() {
            // No part a dotfile, whatever led there (a listing never
            // names one; this holds if one ever did); no backslash, which
            // no Hub URL may carry (listed, it could never be fetched, and
            // a snapshot of the repository would fail on it).
            if seen.rel.split('/').any(ignored_name) || seen.rel.contains('\\') {
                continue;
            }
            let file = RepoFile {
                rel: seen.rel.clone(),
                size: seen.size,
                modified: seen.modified,
                tag: tag_of(&seen.identity),
            };
            for (kind, id, path) in homes(&seen.rel) {
                grouped
                    .entry((kind, id))
                    .or_default()
                    .insert(path, file.clone());
            }
        }
        let by_id = grouped
            .into_iter()
            .map(|((kind, id), files)| {
                let repo = Repo {
                    commit: commit(&files),
                    modified: files
                        .values()
                        .map(|f| f.modified)
                        .max()
                        .unwrap_or(SystemTime::UNIX_EPOCH),
                    kind,
                    id: id.clone(),
                    files,
                    folders: OnceLock::new(),
                };
                ((kind, id), repo)
            })
            .collect();
        Repos { by_id }
    }

    /// The repository `id` of `kind`, if the root has one.
    pub(crate) fn get(&self, kind: Kind, id: &str) -> Option<&Repo> {
        self.by_id.get(&(kind, id.to_owned()))
    }

    /// Every repository, by kind and id.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Repo> {
        self.by_id.values()
    }
}

/// The ETag of a repository's file at version `identity`: 40 hex digits
/// of SHA-256 over it, quoted, shaped as the Hub's object ids are (the
/// tree's `oid`; llama.cpp takes no other shape), so that the clients
/// that name cached blobs by ETag (huggingface_hub) and by `oid`
/// (llama.cpp) name them alike.
pub(crate) fn tag_of(identity: &Identity) -> String {
    let sum = Sha256::digest(identity.bytes());
    format!("\"{}\"", etag::hex(sum.get(..20).unwrap_or_default()))
}

/// The repositories a file at `rel` belongs to: (kind, id, its path there).
fn homes(rel: &str) -> Vec<(Kind, String, String)> {
    let parts: Vec<&str> = rel.split('/').collect();
    let (kind, parts) = match parts.split_first() {
        Some((first, rest)) if Some(*first) == Kind::Dataset.folder() => (Kind::Dataset, rest),
        _ => (Kind::Model, parts.as_slice()),
    };
    // `id` takes the first `n` parts; the file needs at least one more.
    (1..=2)
        .filter(|n| parts.len() > *n)
        .map(|n| (kind, parts[..n].join("/"), parts[n..].join("/")))
        .collect()
}

/// A repository's commit id: 40 hex digits of SHA-256 over its files'
/// paths and tags, in order.
fn commit(files: &BTreeMap<String, RepoFile>) -> String {
    let mut h = Sha256::new();
    for (path, f) in files {
        h.update(path.as_bytes());
        h.update(b"\0");
        h.update(f.tag.as_bytes());
        h.update(b"\n");
    }
    etag::hex(h.finalize().get(..20).unwrap_or_default())
}

impl Repo {
    /// Whether `revision` names this repository's current state: `main`
    /// (or its full name, `refs/heads/main`), the empty revision, or its
    /// commit id.
    pub(crate) fn is_current(&self, revision: &str) -> bool {
        matches!(revision, "" | "main" | "refs/heads/main")
            || revision.eq_ignore_ascii_case(&self.commit)
    }

    /// One page of its tree under the folder `dir` ([`tree::page`]).
    pub(crate) fn tree_page(
        &self,
        dir: &str,
        recursive: bool,
        after: Option<&str>,
        limit: usize,
    ) -> Option<(Vec<Item<'_>>, bool)> {
        tree::page(&self.files, self.folders(), dir, recursive, after, limit)
    }

    /// Its file at `rel` (a path under the root), if `rel` is in it.
    pub(crate) fn file_at(&self, rel: &str) -> Option<&RepoFile> {
        let (_, _, path) = homes(rel)
            .into_iter()
            .find(|(kind, id, _)| *kind == self.kind && *id == self.id)?;
        self.files.get(&path)
    }

    /// The entry at `path`: its file, or the folder of the files below it.
    pub(crate) fn entry(&self, path: &str) -> Option<Item<'_>> {
        tree::entry(&self.files, self.folders(), path)
    }

    /// Its folders, indexed on first use, once per snapshot.
    fn folders(&self) -> &Folders {
        self.folders.get_or_init(|| Folders::of(&self.files))
    }
}

impl Tagged for RepoFile {
    fn rel(&self) -> &str {
        &self.rel
    }

    fn tag(&self) -> &str {
        &self.tag
    }
}

/// An entry of a repository's tree.
pub(crate) type Item<'a> = tree::Item<'a, RepoFile>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_belongs_to_its_namespace_and_its_repository() {
        assert_eq!(
            homes("org/name/sub/config.json"),
            vec![
                (Kind::Model, "org".into(), "name/sub/config.json".into()),
                (Kind::Model, "org/name".into(), "sub/config.json".into()),
            ]
        );
        assert!(homes("top.zt").is_empty());
        assert_eq!(
            homes("datasets/org/name/data.csv"),
            vec![
                (Kind::Dataset, "org".into(), "name/data.csv".into()),
                (Kind::Dataset, "org/name".into(), "data.csv".into()),
            ]
        );
    }
}
