//! Entity tags: how every ETag the server sends is made, and how a
//! client's conditional headers are matched against one. One place, so a
//! file, a manifest rendering and a component follow the same rules.
//!
//! - A derived tag is `"KIND-HEX"`: the first 16 bytes of SHA-256 over
//!   what identifies the content (`zt-` a file, `m-` a manifest rendering,
//!   `c-` a component without a cryptographic digest, `p-` a file whose
//!   digests are still being computed: from its header and identity, see
//!   `catalog::Found::provisional`). A component with a sha256 (blake3)
//!   digest is tagged `"sha256-HEX"` (`"blake3-HEX"`) with the whole digest. A Hub
//!   repository's file is tagged with 40 hex digits over its identity,
//!   shaped as the Hub's object ids are (`repos::tag_of`). All are strong.
//! - `If-None-Match` uses the weak comparison (RFC 9110 13.1.2): `W/` is
//!   ignored on either side, and `*` matches anything.
//! - `If-Match` and `If-Range` use the strong comparison: a weak tag never
//!   matches.
//! - [`preconditions`] evaluates `If-Match`, `If-Unmodified-Since`,
//!   `If-None-Match` and `If-Modified-Since` in the order RFC 9110
//!   section 13.2.2 gives, for every route that serves bytes or a
//!   manifest; `If-Range` is left to the Range handling that follows.

use std::time::SystemTime;

use axum::http::{header, HeaderMap, Method};
use sha2::{Digest as _, Sha256};

/// `"KIND-HEX"` over `parts`, hashed in order as given (callers put a
/// separator between parts that could run into each other).
pub(crate) fn derived(kind: &str, parts: &[&[u8]]) -> String {
    derived_from(kind, parts.iter().copied())
}

/// [`derived`] of parts that come one at a time (none is kept: a tag of a
/// million components' digests is hashed as they are listed).
pub(crate) fn derived_from(
    kind: &str,
    parts: impl IntoIterator<Item = impl AsRef<[u8]>>,
) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_ref());
    }
    let sum = h.finalize();
    quoted(kind, sum.get(..16).unwrap_or_default())
}

/// `"KIND-HEX"` with `bytes` written out whole.
pub(crate) fn quoted(kind: &str, bytes: &[u8]) -> String {
    format!("\"{kind}-{}\"", hex(bytes))
}

/// The tag of a representation derived from the one tagged `etag` (the
/// decoded bytes of a stored component): `"TAG-SUFFIX"`.
pub(crate) fn suffixed(etag: &str, suffix: &str) -> String {
    format!(
        "\"{}-{suffix}\"",
        etag.trim_start_matches("W/").trim_matches('"')
    )
}

/// The entity tags of an `If-Match` or `If-None-Match` list, each as
/// written (`W/` and quotes kept), or `*`. A tag may hold a comma, so the
/// list is split on quotes, not on commas; what is not a tag is skipped.
fn tags(list: &str) -> impl Iterator<Item = &str> {
    let mut rest = list;
    std::iter::from_fn(move || loop {
        rest = rest.trim_start_matches(|c: char| c == ',' || c.is_ascii_whitespace());
        if rest.is_empty() {
            return None;
        }
        if let Some(after) = rest.strip_prefix('*') {
            rest = after;
            return Some("*");
        }
        let open = usize::from(rest.starts_with("W/")) * 2;
        let closed = rest
            .get(open..)
            .filter(|t| t.starts_with('"'))
            .and_then(|t| t.get(1..)?.find('"'))
            .map(|at| open + at + 2);
        match closed {
            Some(end) => {
                let (tag, after) = rest.split_at(end);
                rest = after;
                return Some(tag);
            }
            // Not a tag: skip to the next comma.
            None => rest = rest.find(',').and_then(|at| rest.get(at..)).unwrap_or(""),
        }
    })
}

/// Whether an `If-None-Match` list matches `etag` (weak comparison).
pub(crate) fn none_match(list: &str, etag: &str) -> bool {
    let bare = etag.trim_start_matches("W/");
    tags(list).any(|t| t == "*" || t.trim_start_matches("W/") == bare)
}

/// What a request's preconditions say ([`preconditions`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Serve the request (a Range header may still apply).
    Proceed,
    /// 304: the client's copy is current.
    NotModified,
    /// 412: the client asked for a version this is not; the header named.
    Failed(&'static str),
}

/// Evaluates the request's preconditions against a representation tagged
/// `etag` (a strong tag), last changed at `modified`, in the order of RFC
/// 9110 section 13.2.2: `If-Match` (strong comparison; `is_version` also
/// accepts tags that name the same bytes, such as a file's provisional
/// tag), else `If-Unmodified-Since`; then `If-None-Match` (weak), else,
/// for GET and HEAD, `If-Modified-Since`. A date that does not parse is
/// ignored, as the RFC asks.
pub(crate) fn preconditions(
    headers: &HeaderMap,
    method: &Method,
    etag: &str,
    modified: SystemTime,
    is_version: impl Fn(&str) -> bool,
) -> Precondition {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    let date = |name| text(name).and_then(|v| httpdate::parse_http_date(v.trim()).ok());
    // HTTP dates have whole seconds.
    let secs = |t: SystemTime| {
        t.duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    if let Some(list) = text(header::IF_MATCH) {
        let matched = tags(list).any(|t| t == "*" || strong_match(t, etag) || is_version(t));
        if !matched {
            return Precondition::Failed("If-Match");
        }
    } else if let Some(since) = date(header::IF_UNMODIFIED_SINCE) {
        if secs(modified) > secs(since) {
            return Precondition::Failed("If-Unmodified-Since");
        }
    }
    let read = method == Method::GET || method == Method::HEAD;
    if let Some(list) = text(header::IF_NONE_MATCH) {
        if none_match(list, etag) {
            return if read {
                Precondition::NotModified
            } else {
                Precondition::Failed("If-None-Match")
            };
        }
    } else if let (true, Some(since)) = (read, date(header::IF_MODIFIED_SINCE)) {
        if secs(modified) <= secs(since) {
            return Precondition::NotModified;
        }
    }
    Precondition::Proceed
}

/// Whether an `If-Range` entity tag matches `etag` (strong comparison).
pub(crate) fn strong_match(tag: &str, etag: &str) -> bool {
    !tag.starts_with("W/") && !etag.starts_with("W/") && tag == etag
}

/// Lower-case hexadecimal.
pub(crate) fn hex(b: &[u8]) -> String {
    use std::fmt::Write as _;
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn if_none_match_is_weak_and_if_range_strong() {
        assert!(none_match("\"a\", \"b\"", "\"b\""));
        assert!(none_match("*", "\"b\""));
        assert!(none_match("W/\"b\"", "\"b\""));
        assert!(none_match("\"b\"", "W/\"b\""));
        assert!(!none_match("\"c\"", "\"b\""));
        assert!(strong_match("\"b\"", "\"b\""));
        assert!(!strong_match("W/\"b\"", "\"b\""));
        assert!(!strong_match("\"c\"", "\"b\""));
    }

    #[test]
    fn tag_lists_split_on_quotes_not_commas() {
        let got: Vec<_> = tags(" \"a,b\" , W/\"c\",*, junk, \"d\"").collect();
        assert_eq!(got, ["\"a,b\"", "W/\"c\"", "*", "\"d\""]);
        assert!(none_match("\"a,b\"", "\"a,b\""));
        assert_eq!(tags("").count(), 0);
        assert_eq!(tags("\"unclosed").count(), 0);
    }

    fn request(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn preconditions_follow_rfc_9110_order() {
        use Precondition::*;
        let modified = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000_000);
        let before = httpdate::fmt_http_date(modified - std::time::Duration::from_secs(60));
        let at = httpdate::fmt_http_date(modified);
        let eval = |pairs: &[(&str, &str)], method: Method| {
            preconditions(&request(pairs), &method, "\"t\"", modified, |t| {
                t == "\"old\""
            })
        };
        assert_eq!(eval(&[], Method::GET), Proceed);
        assert_eq!(
            eval(&[("if-match", "\"nope\"")], Method::GET),
            Failed("If-Match")
        );
        assert_eq!(
            eval(&[("if-match", "W/\"t\"")], Method::GET),
            Failed("If-Match")
        );
        assert_eq!(eval(&[("if-match", "\"x\", \"t\"")], Method::GET), Proceed);
        assert_eq!(eval(&[("if-match", "*")], Method::HEAD), Proceed);
        assert_eq!(eval(&[("if-match", "\"old\"")], Method::GET), Proceed);
        assert_eq!(
            eval(&[("if-unmodified-since", &before)], Method::GET),
            Failed("If-Unmodified-Since")
        );
        assert_eq!(eval(&[("if-unmodified-since", &at)], Method::GET), Proceed);
        assert_eq!(
            eval(&[("if-unmodified-since", "garbage")], Method::GET),
            Proceed
        );
        // If-Match wins over If-Unmodified-Since, which is then ignored.
        assert_eq!(
            eval(
                &[("if-match", "\"t\""), ("if-unmodified-since", &before)],
                Method::GET
            ),
            Proceed
        );
        // A failed If-Match is 412 even when If-None-Match would say 304.
        assert_eq!(
            eval(
                &[("if-match", "\"nope\""), ("if-none-match", "\"t\"")],
                Method::GET
            ),
            Failed("If-Match")
        );
        assert_eq!(
            eval(&[("if-none-match", "W/\"t\"")], Method::GET),
            NotModified
        );
        assert_eq!(
            eval(&[("if-none-match", "\"t\"")], Method::POST),
            Failed("If-None-Match")
        );
        assert_eq!(
            eval(&[("if-modified-since", &at)], Method::GET),
            NotModified
        );
        assert_eq!(
            eval(&[("if-modified-since", &before)], Method::GET),
            Proceed
        );
        // If-None-Match present: If-Modified-Since is ignored.
        assert_eq!(
            eval(
                &[("if-none-match", "\"x\""), ("if-modified-since", &at)],
                Method::GET
            ),
            Proceed
        );
    }

    #[test]
    fn derived_tags_are_quoted_and_stable() {
        let t = derived("zt", &[b"manifest", &7u64.to_le_bytes()]);
        assert!(t.starts_with("\"zt-") && t.ends_with('"') && t.len() == 2 + 3 + 32);
        assert_eq!(t, derived("zt", &[b"manifest", &7u64.to_le_bytes()]));
        assert_ne!(t, derived("zt", &[b"manifest", &8u64.to_le_bytes()]));
        assert_eq!(suffixed("\"abc\"", "decoded"), "\"abc-decoded\"");
        assert_eq!(quoted("sha256", &[0xab, 0x01]), "\"sha256-ab01\"");
    }
}
