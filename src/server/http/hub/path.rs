//! The Hub's URLs, split into what they ask for. The raw path is split on
//! `/` before any percent-decoding: a revision arrives as one segment
//! (`refs%2Fpr%2F1`), a file's path as one segment per folder (a
//! `paths-info` or `tree` path as one encoded segment), and a decoded
//! part that is empty, `.`, `..`, or holds a `/`, `\` or NUL is refused
//! before anything is looked up.

use percent_encoding::percent_decode_str;

use crate::server::catalog::repos::Kind;

/// Longest revision looked at; longer ones are no revision of ours.
pub(super) const MAX_REVISION: usize = 256;

/// What a Hub URL names: a repository (by kind and the candidate ids its
/// path allows, longest first), and what follows its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Asked<'a> {
    pub(super) kind: Kind,
    /// The raw segments of the path after the kind's prefix.
    pub(super) segments: Vec<&'a str>,
}

/// A request under a repository, once its id is known: the segments
/// after the id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Under {
    /// `resolve/{revision}/{path}`
    Resolve { revision: String, path: String },
    /// `` (the repository's information) or `revision/{revision}`.
    Info { revision: String },
    /// `tree/{revision}[/{path}]`
    Tree { revision: String, path: String },
    /// `paths-info/{revision}`
    PathsInfo { revision: String },
    /// `refs`
    Refs,
    /// `xet-read-token/{revision}`: the Xet storage's URL and token.
    XetToken { revision: String },
}

/// Why a Hub URL names no file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bad {
    /// A path that is not a file's path (`..`, an encoded `/`, ...).
    Entry(String),
    /// A revision that is not UTF-8 or too long.
    Revision(String),
    /// No request the Hub's API has.
    Route,
}

/// A resolve URL's parts (`[datasets/]ID/resolve/REV/PATH`): the kind and
/// raw segments, when the path has `resolve` where a one- or two-part id
/// would put it.
pub(super) fn resolve_url(path: &str) -> Option<Asked<'_>> {
    let rest = path.strip_prefix('/')?;
    let (kind, rest) = match rest.strip_prefix("datasets/") {
        Some(r) => (Kind::Dataset, r),
        None => (Kind::Model, rest),
    };
    let segments: Vec<&str> = rest.split('/').collect();
    let looks = segments.get(1) == Some(&"resolve") || segments.get(2) == Some(&"resolve");
    looks.then_some(Asked { kind, segments })
}

/// An API URL's parts (`/api/models/...`, `/api/datasets/...`).
pub(super) fn api_url(path: &str) -> Option<Asked<'_>> {
    let rest = path.strip_prefix("/api/")?;
    let (kind, rest) = if let Some(r) = rest.strip_prefix("models/") {
        (Kind::Model, r)
    } else {
        (Kind::Dataset, rest.strip_prefix("datasets/")?)
    };
    Some(Asked {
        kind,
        segments: rest.split('/').collect(),
    })
}

impl Asked<'_> {
    /// The ids this URL may name with what follows each, the two-part id
    /// first: `a/b/resolve/main/c` is `a/b`'s `c`, or `a`'s
    /// `resolve/main/c`... if the root has no `a/b`.
    pub(super) fn candidates(&self) -> Vec<(String, &[&str])> {
        (1..=2)
            .rev()
            .filter(|n| self.segments.len() >= *n)
            .filter_map(|n| {
                let (id, rest) = self.segments.split_at(n);
                let parts: Option<Vec<String>> = id.iter().map(|s| decode_part(s)).collect();
                Some((parts?.join("/"), rest))
            })
            .collect()
    }
}

/// What the segments after a repository's id ask for.
pub(super) fn under(rest: &[&str], resolve: bool) -> Result<Under, Bad> {
    match rest {
        ["resolve", revision, path @ ..] if resolve && !path.is_empty() => Ok(Under::Resolve {
            revision: revision_of(revision)?,
            path: file_path(path)?,
        }),
        _ if resolve => Err(Bad::Route),
        [] => Ok(Under::Info {
            revision: "main".to_owned(),
        }),
        ["revision", revision] => Ok(Under::Info {
            revision: revision_of(revision)?,
        }),
        ["tree", revision, path @ ..] => Ok(Under::Tree {
            revision: revision_of(revision)?,
            path: folder_path(path)?,
        }),
        ["paths-info", revision] => Ok(Under::PathsInfo {
            revision: revision_of(revision)?,
        }),
        ["refs"] => Ok(Under::Refs),
        ["xet-read-token", revision] => Ok(Under::XetToken {
            revision: revision_of(revision)?,
        }),
        _ => Err(Bad::Route),
    }
}

fn decode(seg: &str) -> Option<String> {
    percent_decode_str(seg)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// One part of an id or a path, decoded; `None` if it is not one.
fn decode_part(seg: &str) -> Option<String> {
    decode(seg).filter(|d| safe_part(d))
}

/// Whether a decoded part of a path is a plain name: no traversal, no
/// separator or NUL smuggled in by encoding.
pub(super) fn safe_part(s: &str) -> bool {
    !(s.is_empty() || s == "." || s == ".." || s.contains(['/', '\\', '\0']))
}

fn revision_of(seg: &str) -> Result<String, Bad> {
    let shown = || seg.chars().take(64).collect::<String>();
    if seg.len() > MAX_REVISION * 3 {
        return Err(Bad::Revision(shown()));
    }
    match decode(seg) {
        Some(r) if r.len() <= MAX_REVISION => Ok(r),
        _ => Err(Bad::Revision(shown())),
    }
}

/// A file's path from one raw segment per part.
fn file_path(segments: &[&str]) -> Result<String, Bad> {
    let parts: Option<Vec<String>> = segments.iter().map(|s| decode_part(s)).collect();
    parts
        .map(|p| p.join("/"))
        .ok_or_else(|| Bad::Entry(segments.join("/")))
}

/// A folder's path in a tree URL: one encoded segment (`a%2Fb`), or, as
/// some clients send it, one segment per part; empty for the top.
fn folder_path(segments: &[&str]) -> Result<String, Bad> {
    let joined = segments
        .iter()
        .map(|s| decode(s))
        .collect::<Option<Vec<String>>>()
        .map(|p| p.join("/"))
        .ok_or_else(|| Bad::Entry(segments.join("/")))?;
    let trimmed = joined.trim_matches('/');
    if trimmed.is_empty() {
        return Ok(String::new());
    }
    checked_path(trimmed).ok_or(Bad::Entry(joined.clone()))
}

/// `path` (decoded, `/`-separated) if every part of it is a plain name.
pub(super) fn checked_path(path: &str) -> Option<String> {
    path.split('/').all(safe_part).then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_urls() {
        let a = resolve_url("/org/name/resolve/main/sub/config.json").unwrap();
        assert_eq!(a.kind, Kind::Model);
        let c = a.candidates();
        assert_eq!(c[0].0, "org/name");
        assert_eq!(
            under(c[0].1, true),
            Ok(Under::Resolve {
                revision: "main".into(),
                path: "sub/config.json".into()
            })
        );
        assert_eq!(c[1].0, "org");
        assert_eq!(under(c[1].1, true), Err(Bad::Route));
        let d = resolve_url("/datasets/name/resolve/refs%2Fpr%2F1/a.csv").unwrap();
        assert_eq!(d.kind, Kind::Dataset);
        let c = d.candidates();
        assert_eq!(c[1].0, "name");
        assert_eq!(
            under(c[1].1, true),
            Ok(Under::Resolve {
                revision: "refs/pr/1".into(),
                path: "a.csv".into()
            })
        );
        assert!(resolve_url("/model.zt").is_none());
        assert!(resolve_url("/a/b/c/resolve/main/x").is_none());
    }

    #[test]
    fn hostile_paths_are_refused() {
        for p in [
            "/org/name/resolve/main/../x",
            "/org/name/resolve/main/a%2F..%2F..%2Fetc",
            "/org/name/resolve/main/%2E%2E/x",
            "/org/name/resolve/main/a%5Cb",
            "/org/name/resolve/main/a%00b",
            "/org/name/resolve/main//x",
        ] {
            let a = resolve_url(p).unwrap();
            let c = a.candidates();
            assert!(
                matches!(under(c[0].1, true), Err(Bad::Entry(_))),
                "{p}: {:?}",
                under(c[0].1, true)
            );
        }
        let long = format!("/o/n/resolve/{}/x", "a".repeat(5000));
        let a = resolve_url(&long).unwrap();
        assert!(matches!(
            under(a.candidates()[0].1, true),
            Err(Bad::Revision(_))
        ));
        // An id part that is `..` names no repository.
        let a = resolve_url("/../name/resolve/main/x").unwrap();
        assert_eq!(a.candidates().len(), 0);
    }

    #[test]
    fn api_urls() {
        let a = api_url("/api/models/org/name/tree/main/sub%2Fdir").unwrap();
        let c = a.candidates();
        assert_eq!(c[0].0, "org/name");
        assert_eq!(
            under(c[0].1, false),
            Ok(Under::Tree {
                revision: "main".into(),
                path: "sub/dir".into()
            })
        );
        let a = api_url("/api/datasets/name/revision/abc").unwrap();
        assert_eq!(a.kind, Kind::Dataset);
        assert_eq!(
            under(a.candidates()[1].1, false),
            Ok(Under::Info {
                revision: "abc".into()
            })
        );
        assert_eq!(
            under(&["tree", "main", "a%2F..%2Fb"], false),
            Err(Bad::Entry("a/../b".into()))
        );
        assert!(api_url("/api/spaces/x").is_none());
    }
}
