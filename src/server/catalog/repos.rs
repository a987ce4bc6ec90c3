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
use std::ops::Bound;
use std::sync::OnceLock;
use std::time::SystemTime;

use sha2::{Digest as _, Sha256};

use super::etag;
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
    /// Its folders' ids, made on first use ([`Repo::folders`]).
    folders: OnceLock<BTreeMap<String, String>>,
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
    /// Whether `revision` names this repository's current state: `main`,
    /// the empty revision, or its commit id.
    pub(crate) fn is_current(&self, revision: &str) -> bool {
        revision.is_empty() || revision == "main" || revision.eq_ignore_ascii_case(&self.commit)
    }

    /// One page of the files and folders directly under the folder `dir`
    /// (`""`: the top), or of every file and folder below it when
    /// `recursive` (as the Hub lists them): at most `limit` entries in path
    /// order, those after the path `after` when given, and whether more
    /// follow; `None` when `dir` is no folder of the repository (a file's
    /// path included). A page costs its entries' lookups, whatever the
    /// repository's size: the folders are indexed once per snapshot
    /// ([`Repo::folders`]).
    pub(crate) fn tree_page(
        &self,
        dir: &str,
        recursive: bool,
        after: Option<&str>,
        limit: usize,
    ) -> Option<(Vec<Item<'_>>, bool)> {
        let folders = self.folders();
        if !dir.is_empty() && !folders.contains_key(dir) {
            return None;
        }
        let prefix = match dir.is_empty() {
            true => String::new(),
            false => format!("{dir}/"),
        };
        let mut files = Below::new(&self.files, &prefix, after, recursive)
            .fuse()
            .peekable();
        let mut dirs = Below::new(folders, &prefix, after, recursive)
            .fuse()
            .peekable();
        let mut out = Vec::new();
        loop {
            let file_first = match (files.peek(), dirs.peek()) {
                (None, None) => return Some((out, false)),
                (Some((f, _)), Some((d, _))) => f < d,
                (f, _) => f.is_some(),
            };
            if out.len() == limit {
                return Some((out, true));
            }
            let item = match file_first {
                true => files.next().map(|(path, file)| Item::File { path, file }),
                false => dirs.next().map(|(path, oid)| Item::Folder { path, oid }),
            };
            out.extend(item);
        }
    }

    /// Every folder of the repository by its path, with its id
    /// ([`fold_in`]'s, over the files below it in path order): made on
    /// first use, once per snapshot, in one pass over the files.
    fn folders(&self) -> &BTreeMap<String, String> {
        self.folders.get_or_init(|| {
            let mut done = BTreeMap::new();
            // The folders the last file lay in, outermost first, each with
            // its hash so far (a folder's files come one after another).
            let mut open: Vec<(&str, Sha256)> = Vec::new();
            for (path, f) in &self.files {
                let ancestors: Vec<&str> = path
                    .match_indices('/')
                    .filter_map(|(i, _)| path.get(..i))
                    .collect();
                let shared = open
                    .iter()
                    .zip(&ancestors)
                    .take_while(|((a, _), b)| a == *b)
                    .count();
                for (folder, h) in open.drain(shared..) {
                    done.insert(folder.to_owned(), oid_of(h));
                }
                open.extend(
                    ancestors
                        .get(shared..)
                        .unwrap_or_default()
                        .iter()
                        .map(|a| (*a, Sha256::new())),
                );
                for (_, h) in &mut open {
                    fold_in(h, f);
                }
            }
            for (folder, h) in open {
                done.insert(folder.to_owned(), oid_of(h));
            }
            done
        })
    }

    /// The entry at `path`: its file, or the folder of the files below it.
    pub(crate) fn entry(&self, path: &str) -> Option<Item<'_>> {
        if let Some((p, f)) = self.files.get_key_value(path) {
            return Some(Item::File { path: p, file: f });
        }
        let (path, oid) = self.folders().get_key_value(path)?;
        Some(Item::Folder { path, oid })
    }
}

/// The entries of a map keyed by path that lie below `prefix`, after
/// `after`, in order: all of them when `recursive`, else only those
/// directly under it (a deeper one's siblings below its folder skipped in
/// one lookup, so a listing never walks a subfolder's files).
struct Below<'a, 'p, V> {
    map: &'a BTreeMap<String, V>,
    prefix: &'p str,
    recursive: bool,
    /// Where the next lookup starts.
    from: Bound<String>,
}

impl<'a, 'p, V> Below<'a, 'p, V> {
    fn new(
        map: &'a BTreeMap<String, V>,
        prefix: &'p str,
        after: Option<&str>,
        recursive: bool,
    ) -> Below<'a, 'p, V> {
        let from = match after {
            Some(a) if a >= prefix => Bound::Excluded(a.to_owned()),
            _ => Bound::Included(prefix.to_owned()),
        };
        Below {
            map,
            prefix,
            recursive,
            from,
        }
    }
}

impl<'a, V> Iterator for Below<'a, '_, V> {
    type Item = (&'a String, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let from = std::mem::replace(&mut self.from, Bound::Unbounded);
            let (path, v) = self.map.range((from, Bound::Unbounded)).next()?;
            let rest = path.strip_prefix(self.prefix)?;
            match rest.find('/').filter(|_| !self.recursive) {
                None => {
                    self.from = Bound::Excluded(path.clone());
                    return Some((path, v));
                }
                // Deeper: on past every path under `prefix` + that folder
                // (`/` + 1 is `0`).
                Some(slash) => {
                    let folder = path.get(..self.prefix.len() + slash).unwrap_or_default();
                    self.from = Bound::Included(format!("{folder}0"));
                }
            }
        }
    }
}

/// A folder's id: 40 hex digits of SHA-256 over the root paths and tags
/// of the files below it, in path order ([`fold_in`] each, then
/// [`oid_of`]).
fn fold_in(h: &mut Sha256, f: &RepoFile) {
    h.update(f.rel.as_bytes());
    h.update(b"\0");
    h.update(f.tag.as_bytes());
}

fn oid_of(h: Sha256) -> String {
    etag::hex(h.finalize().get(..20).unwrap_or_default())
}

/// An entry of a repository's tree.
#[derive(Debug)]
pub(crate) enum Item<'a> {
    File { path: &'a str, file: &'a RepoFile },
    Folder { path: &'a str, oid: &'a str },
}

impl Item<'_> {
    pub(crate) fn path(&self) -> &str {
        match self {
            Item::File { path, .. } => path,
            Item::Folder { path, .. } => path,
        }
    }
}

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

    /// Pages of a tree, each cut anywhere, make exactly the listing the
    /// Hub gives: files and folders in path order, folders before names
    /// that sort between them and their files (`a/b` < `a/b-x` < `a/b/c`),
    /// each folder's id over the files below it.
    #[test]
    fn pages_of_a_tree_list_every_entry_once_in_path_order() {
        let paths = [
            "a/b/c",
            "a/b-x.txt",
            "a/b/d/e",
            "a/b0",
            "a/é/f",
            "a.txt",
            "z",
            "a/b/d/g",
            "a/c",
            "q/r/s/t/u",
        ];
        let files: BTreeMap<String, RepoFile> = paths
            .iter()
            .map(|p| {
                let f = RepoFile {
                    rel: format!("org/m/{p}"),
                    size: p.len() as u64,
                    modified: SystemTime::UNIX_EPOCH,
                    tag: format!("\"{p}\""),
                };
                (p.to_string(), f)
            })
            .collect();
        let repo = Repo {
            kind: Kind::Model,
            id: "org/m".into(),
            commit: commit(&files),
            modified: SystemTime::UNIX_EPOCH,
            files,
            folders: OnceLock::new(),
        };
        // What a listing must say, made the plain way.
        let expected = |dir: &str, recursive: bool| -> Vec<(String, String)> {
            let prefix = if dir.is_empty() {
                String::new()
            } else {
                format!("{dir}/")
            };
            let mut out = BTreeMap::new();
            for (path, f) in &repo.files {
                let Some(rest) = path.strip_prefix(&prefix) else {
                    continue;
                };
                let parts: Vec<&str> = rest.split('/').collect();
                for n in 1..parts.len() {
                    if n == 1 || recursive {
                        let folder = format!("{prefix}{}", parts[..n].join("/"));
                        let below: Vec<&RepoFile> = repo
                            .files
                            .iter()
                            .filter(|(p, _)| p.starts_with(&format!("{folder}/")))
                            .map(|(_, f)| f)
                            .collect();
                        let mut h = Sha256::new();
                        below.iter().for_each(|f| fold_in(&mut h, f));
                        out.insert(folder, oid_of(h));
                    }
                }
                if recursive || parts.len() == 1 {
                    out.insert(path.clone(), f.tag.clone());
                }
            }
            out.into_iter().collect()
        };
        let said = |i: &Item<'_>| match i {
            Item::File { path, file } => (path.to_string(), file.tag.clone()),
            Item::Folder { path, oid } => (path.to_string(), oid.to_string()),
        };
        for dir in ["", "a", "a/b", "q/r"] {
            for recursive in [false, true] {
                let want = expected(dir, recursive);
                for limit in [1, 2, 3, 1000] {
                    let (mut got, mut after) = (Vec::new(), None::<String>);
                    loop {
                        let (page, more) = repo
                            .tree_page(dir, recursive, after.as_deref(), limit)
                            .unwrap();
                        assert!(page.len() <= limit);
                        got.extend(page.iter().map(said));
                        after = page.last().map(|i| i.path().to_owned());
                        if !more {
                            break;
                        }
                    }
                    assert_eq!(got, want, "{dir:?} recursive {recursive} by {limit}");
                }
            }
        }
        for missing in ["a/b-x.txt", "nope", "a/b/c/"] {
            assert!(
                repo.tree_page(missing, true, None, 10).is_none(),
                "{missing}"
            );
        }
        let folder = repo.entry("a/b").map(|i| said(&i));
        let want = expected("a", false).into_iter().find(|(p, _)| p == "a/b");
        assert_eq!(folder, want);
        assert!(repo.entry("a/b/").is_none());
    }
}
