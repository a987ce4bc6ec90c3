//! Splitting a raw request path under `/v1/files/` into the catalog file
//! and what is asked of it. The path is split on raw `/` before any
//! percent-decoding, so an object name may contain an encoded `/` or `.`.

use percent_encoding::percent_decode_str;

use super::error::AppError;
use crate::server::catalog::Snapshot;

/// What a request under `/v1/files/{path}` wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    File,
    Manifest,
    Component {
        object: String,
        component: String,
    },
    /// `objects`: the objects as a table.
    Objects,
    /// `summaries/{object}`: the object's values summarised.
    Summary {
        object: String,
    },
}

/// Decodes one path segment; `None` if it is not UTF-8.
fn decode(seg: &str) -> Option<String> {
    percent_decode_str(seg)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// Whether a decoded segment of the file part is safe: no traversal, no
/// separators or NULs smuggled in through encoding, nothing absolute. A
/// `:` is a name's own (`run-2026-12-02T10:00:00/`): the path must still
/// name a catalogued file exactly.
fn safe_segment(s: &str) -> bool {
    !(s.is_empty() || s == "." || s == ".." || s.contains(['/', '\\', '\0']))
}

/// Splits `rest` (the raw path after `/v1/files/`) into a catalog path and a target.
pub(crate) fn split(rest: &str, snapshot: &Snapshot) -> Result<(String, Target), AppError> {
    let not_found = || AppError::not_found(format!("no served file at {rest:?}"));
    let raw: Vec<&str> = rest.split('/').collect();
    let mut file = Vec::new();
    for (i, seg) in raw.iter().enumerate() {
        let d = decode(seg).ok_or_else(not_found)?;
        if !safe_segment(&d) {
            return Err(not_found());
        }
        file.push(d);
        if file
            .last()
            .is_none_or(|s| zt_format::source::by_name(s).is_none())
        {
            continue;
        }
        let path = file.join("/");
        if snapshot.get(&path).is_none() {
            continue;
        }
        let tail = raw.get(i + 1..).unwrap_or_default();
        let target = match tail {
            [] => Target::File,
            ["manifest"] => Target::Manifest,
            ["objects"] => Target::Objects,
            ["summaries", object] => Target::Summary {
                object: decode(object).ok_or_else(not_found)?,
            },
            ["objects", object, component] => Target::Component {
                object: decode(object).ok_or_else(not_found)?,
                component: decode(component).ok_or_else(not_found)?,
            },
            _ => {
                return Err(AppError::not_found(format!(
                    "no such resource under {path:?}: {:?}",
                    tail.join("/")
                )))
            }
        };
        return Ok((path, target));
    }
    Err(not_found())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_segments() {
        for s in ["", ".", "..", "a/b", "a\\b", "a\0", "c:\\x"] {
            assert!(!safe_segment(s), "{s:?}");
        }
        assert!(safe_segment("model.zt"));
        assert!(safe_segment("2026-12-02T10:00:00"));
    }
}
