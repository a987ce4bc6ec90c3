//! A repository's tree as the Hub lists it: pages of the files and
//! folders under a folder (one level, or every one below it), in path
//! order, each folder with an id made from the files below it; and the
//! entry at one path (`paths-info`).
//!
//! A page costs a lookup per entry whatever the repository's size: the
//! folders are indexed once per snapshot, on first use ([`Folders`]), a
//! recursive page merges the files and the folders after its cursor, and
//! a page of one level is read from the folder's list of what lies
//! directly under it. (Building the whole listing for every page made a
//! client paging a repository of n files pay n²/1000.)

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;

use sha2::{Digest as _, Sha256};

use super::etag;

/// A file of a tree: what its folders' ids are made of.
pub(crate) trait Tagged {
    /// Its path under the root.
    fn rel(&self) -> &str;
    /// Its ETag.
    fn tag(&self) -> &str;
}

/// An entry of a repository's tree (its files `F`).
#[derive(Debug)]
pub(crate) enum Item<'a, F> {
    File { path: &'a str, file: &'a F },
    Folder { path: &'a str, oid: &'a str },
}

impl<F> Item<'_, F> {
    pub(crate) fn path(&self) -> &str {
        match self {
            Item::File { path, .. } | Item::Folder { path, .. } => path,
        }
    }
}

/// A repository's folders: each one's id by its path, and what lies
/// directly under each folder (the top's under `""`), in path order, a
/// file before a folder of the same path (which only object keys can
/// make).
#[derive(Debug, Default)]
pub(crate) struct Folders {
    oids: BTreeMap<String, String>,
    children: HashMap<String, Vec<Child>>,
}

/// An entry directly under a folder: its name there (its path's last
/// part; the folder's path is the list's key).
#[derive(Debug)]
struct Child {
    name: Box<str>,
    folder: bool,
}

impl Folders {
    /// The index of `files`, in one pass over them (a folder's files come
    /// one after another in path order) and a sort of each folder's list.
    pub(crate) fn of<F: Tagged>(files: &BTreeMap<String, F>) -> Folders {
        let mut oids = BTreeMap::new();
        // The folders the last file lay in, outermost first, each with
        // its hash so far.
        let mut open: Vec<(&str, Sha256)> = Vec::new();
        for (path, f) in files {
            debug_assert!(
                !path.split('/').any(str::is_empty),
                "{path:?}: a listing leaves out empty parts"
            );
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
                oids.insert(folder.to_owned(), oid_of(h));
            }
            let opened = ancestors.get(shared..).unwrap_or_default();
            open.extend(opened.iter().map(|a| (*a, Sha256::new())));
            for (_, h) in &mut open {
                fold_in(h, f);
            }
        }
        for (folder, h) in open {
            oids.insert(folder.to_owned(), oid_of(h));
        }
        let mut children: HashMap<String, Vec<Child>> = HashMap::new();
        let files = files.keys().map(|p| (p, false));
        for (path, folder) in files.chain(oids.keys().map(|p| (p, true))) {
            let (parent, name) = path.rsplit_once('/').unwrap_or(("", path));
            let name = name.into();
            children
                .entry(parent.to_owned())
                .or_default()
                .push(Child { name, folder });
        }
        // One parent's names sort as their paths do.
        for list in children.values_mut() {
            list.sort_by(|a, b| (&a.name, a.folder).cmp(&(&b.name, b.folder)));
        }
        Folders { oids, children }
    }
}

/// One page of the files and folders directly under the folder `dir`
/// (`""`: the top), or of every file and folder below it when
/// `recursive` (as the Hub lists them): at most `limit` entries (at least
/// one; one more where a file and a folder of one path would be cut apart) in
/// path order, those after the path `after` when given, and whether
/// more follow; `None` when `dir` is no folder of the
/// repository (a file's path included).
pub(crate) fn page<'a, F>(
    files: &'a BTreeMap<String, F>,
    index: &'a Folders,
    dir: &str,
    recursive: bool,
    after: Option<&str>,
    limit: usize,
) -> Option<(Vec<Item<'a, F>>, bool)> {
    debug_assert!(limit > 0, "a page of no entries never ends a listing");
    let known = match dir.is_empty() {
        true => !files.is_empty(),
        false => index.oids.contains_key(dir),
    };
    if !known {
        return None;
    }
    let mut entries: Box<dyn Iterator<Item = Item<'a, F>>> = match recursive {
        true => {
            let prefix = format!("{dir}/");
            let prefix = if dir.is_empty() { "" } else { &prefix };
            let files = below(files, prefix, after);
            let folders = below(&index.oids, prefix, after);
            let mut files = files
                .map(|(path, file)| Item::File { path, file })
                .peekable();
            let mut folders = folders
                .map(|(path, oid)| Item::Folder { path, oid })
                .peekable();
            let next = move || match (files.peek(), folders.peek()) {
                (Some(f), Some(d)) if f.path() > d.path() => folders.next(),
                (Some(_), _) => files.next(),
                (None, _) => folders.next(),
            };
            Box::new(std::iter::from_fn(next))
        }
        false => {
            let list = index.children.get(dir).map_or(&[][..], Vec::as_slice);
            let from = after.map_or(0, |a| list.partition_point(|c| !past(dir, c, a)));
            let rest = list.get(from..).unwrap_or_default();
            Box::new(rest.iter().filter_map(move |c| child(files, index, dir, c)))
        }
    };
    let mut page: Vec<Item<'a, F>> = entries.by_ref().take(limit).collect();
    let mut rest = entries.peekable();
    // A file and a folder of one path (which only object keys make) end
    // a page together: the next page's cursor is a path, and starts
    // after everything at it.
    if let (Some(Item::File { path, .. }), Some(Item::Folder { path: d, .. })) =
        (page.last(), rest.peek())
    {
        if path == d {
            page.extend(rest.next());
        }
    }
    let more = rest.peek().is_some();
    Some((page, more))
}

/// The entry at `path`: its file, or the folder of the files below it.
pub(crate) fn entry<'a, F>(
    files: &'a BTreeMap<String, F>,
    index: &'a Folders,
    path: &str,
) -> Option<Item<'a, F>> {
    if let Some((path, file)) = files.get_key_value(path) {
        return Some(Item::File { path, file });
    }
    let (path, oid) = index.oids.get_key_value(path)?;
    Some(Item::Folder { path, oid })
}

/// The entry `c` under `dir` names (always there: the index is made
/// from the files).
fn child<'a, F>(
    files: &'a BTreeMap<String, F>,
    index: &'a Folders,
    dir: &str,
    c: &Child,
) -> Option<Item<'a, F>> {
    let path = match dir.is_empty() {
        true => c.name.to_string(),
        false => format!("{dir}/{}", c.name),
    };
    match c.folder {
        true => {
            let (path, oid) = index.oids.get_key_value(&path)?;
            Some(Item::Folder { path, oid })
        }
        false => {
            let (path, file) = files.get_key_value(&path)?;
            Some(Item::File { path, file })
        }
    }
}

/// Whether `c`'s path under `dir` sorts after `cursor` (compared as the
/// path's bytes, without making it).
fn past(dir: &str, c: &Child, cursor: &str) -> bool {
    let slash: &[u8] = if dir.is_empty() { b"" } else { b"/" };
    let path = dir
        .bytes()
        .chain(slash.iter().copied())
        .chain(c.name.bytes());
    path.cmp(cursor.bytes()) == std::cmp::Ordering::Greater
}

/// The entries of `map` (keyed by path) below `prefix` and after `after`,
/// in order, found by one lookup.
fn below<'a, V>(
    map: &'a BTreeMap<String, V>,
    prefix: &str,
    after: Option<&str>,
) -> impl Iterator<Item = (&'a str, &'a V)> {
    let from = match after {
        Some(a) if a >= prefix => Bound::Excluded(a.to_owned()),
        _ => Bound::Included(prefix.to_owned()),
    };
    let prefix = prefix.to_owned();
    map.range((from, Bound::Unbounded))
        .take_while(move |(path, _)| path.starts_with(&prefix))
        .map(|(path, v)| (path.as_str(), v))
}

/// A folder's id: 40 hex digits of SHA-256 over the root paths and tags
/// of the files below it, in path order ([`fold_in`] each, then
/// [`oid_of`]).
fn fold_in<F: Tagged>(h: &mut Sha256, f: &F) {
    h.update(f.rel().as_bytes());
    h.update(b"\0");
    h.update(f.tag().as_bytes());
}

fn oid_of(h: Sha256) -> String {
    etag::hex(h.finalize().get(..20).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of a test's tree: its root path and tag.
    #[derive(Debug)]
    struct File(String, String);

    impl Tagged for File {
        fn rel(&self) -> &str {
            &self.0
        }

        fn tag(&self) -> &str {
            &self.1
        }
    }

    /// A tree of `paths` (each file's tag its path) and its index.
    struct Repo {
        files: BTreeMap<String, File>,
        index: Folders,
    }

    impl Repo {
        fn tree_page(
            &self,
            dir: &str,
            recursive: bool,
            after: Option<&str>,
            limit: usize,
        ) -> Option<(Vec<Item<'_, File>>, bool)> {
            page(&self.files, &self.index, dir, recursive, after, limit)
        }
    }

    fn repo_of(paths: &[&str]) -> Repo {
        let files: BTreeMap<String, File> = paths
            .iter()
            .map(|p| {
                (
                    p.to_string(),
                    File(format!("org/m/{p}"), format!("\"{p}\"")),
                )
            })
            .collect();
        let index = Folders::of(&files);
        Repo { files, index }
    }

    /// An entry as a listing says it: path, kind (file 0, folder 1), id.
    fn said(i: &Item<'_, File>) -> (String, u8, String) {
        match i {
            Item::File { path, file } => (path.to_string(), 0, file.1.clone()),
            Item::Folder { path, oid } => (path.to_string(), 1, oid.to_string()),
        }
    }

    /// What a listing of `dir` must say, made the plain way: every file
    /// and every folder on the way to one, sorted.
    fn expected(repo: &Repo, dir: &str, recursive: bool) -> Vec<(String, u8, String)> {
        let prefix = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let mut out = std::collections::BTreeSet::new();
        for (path, f) in &repo.files {
            let Some(rest) = path.strip_prefix(&prefix) else {
                continue;
            };
            let parts: Vec<&str> = rest.split('/').collect();
            for n in (1..parts.len()).filter(|n| *n == 1 || recursive) {
                let folder = format!("{prefix}{}", parts[..n].join("/"));
                let mut h = Sha256::new();
                let inside = format!("{folder}/");
                for (_, f) in repo.files.iter().filter(|(p, _)| p.starts_with(&inside)) {
                    fold_in(&mut h, f);
                }
                out.insert((folder, 1, oid_of(h)));
            }
            if recursive || parts.len() == 1 {
                out.insert((path.clone(), 0, f.1.clone()));
            }
        }
        out.into_iter().collect()
    }

    /// Pages of a tree, each cut anywhere, make exactly the listing the
    /// Hub gives: files and folders in path order, folders before names
    /// that sort between them and their files (`a` < `a.txt` < `a/b`,
    /// `a/b` < `a/b-x` < `a/b/c`), each folder's id over the files below
    /// it; a page after any cursor (an entry's path or not, before or past
    /// the folder) holds exactly the entries after it.
    #[test]
    fn pages_of_a_tree_list_every_entry_once_in_path_order() {
        let repo = repo_of(&[
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
            "m/n",
            "m/n0/o",
            "m/n0",
        ]);
        let cursors = [
            "", "0", "a", "a/", "a/b", "a/b-", "a/b/c", "a/b/d/zz", "a/c", "m/", "m/n0", "q/r/s",
            "zz",
        ];
        for dir in ["", "a", "a/b", "q/r", "m"] {
            for recursive in [false, true] {
                let want = expected(&repo, dir, recursive);
                for limit in [1, 2, 3, 1000] {
                    let (mut got, mut after) = (Vec::new(), None::<String>);
                    for pages in 1.. {
                        assert!(pages <= want.len() + 1, "{dir:?}: a listing without end");
                        let (page, more) = repo
                            .tree_page(dir, recursive, after.as_deref(), limit)
                            .unwrap();
                        let pair = page.len() == limit + 1
                            && page[limit - 1].path() == page[limit].path()
                            && matches!(
                                (&page[limit - 1], &page[limit]),
                                (Item::File { .. }, Item::Folder { .. })
                            );
                        assert!(page.len() == limit || pair || (!more && page.len() < limit));
                        got.extend(page.iter().map(said));
                        after = page.last().map(|i| i.path().to_owned());
                        if !more {
                            break;
                        }
                    }
                    assert_eq!(got, want, "{dir:?} recursive {recursive} by {limit}");
                }
                for cursor in cursors {
                    let (page, _) = repo.tree_page(dir, recursive, Some(cursor), 1000).unwrap();
                    let got: Vec<_> = page.iter().map(said).collect();
                    let past: Vec<_> = want
                        .iter()
                        .filter(|e| e.0.as_str() > cursor)
                        .cloned()
                        .collect();
                    assert_eq!(got, past, "{dir:?} recursive {recursive} after {cursor:?}");
                }
            }
        }
        for missing in ["a/b-x.txt", "nope", "a/b/c/", "a//b", "m/"] {
            assert!(
                repo.tree_page(missing, true, None, 10).is_none(),
                "{missing}"
            );
            assert!(
                repo.tree_page(missing, false, None, 10).is_none(),
                "{missing}"
            );
        }
        let folder = entry(&repo.files, &repo.index, "a/b").map(|i| said(&i));
        let want = expected(&repo, "a", false)
            .into_iter()
            .find(|e| e.0 == "a/b");
        assert_eq!(folder, want);
        assert!(entry(&repo.files, &repo.index, "a/b/").is_none());
    }

    /// Object keys can make a file and a folder of one path: the file
    /// comes first, as the Hub's sort of the two would put it.
    #[test]
    fn a_file_comes_before_a_folder_of_the_same_path() {
        let repo = repo_of(&["x", "x/y"]);
        for recursive in [false, true] {
            let (page, more) = repo.tree_page("", recursive, None, 10).unwrap();
            let got: Vec<_> = page.iter().map(said).collect();
            assert_eq!(got, expected(&repo, "", recursive));
            assert_eq!((got[0].1, got[1].1), (0, 1));
            assert!(!more);
            // Paged one by one, the folder is not skipped past with its file.
            let (page, more) = repo.tree_page("", recursive, None, 1).unwrap();
            let got: Vec<_> = page.iter().map(said).collect();
            assert_eq!(got, expected(&repo, "", recursive)[..2]);
            assert_eq!(more, recursive);
        }
    }
}
