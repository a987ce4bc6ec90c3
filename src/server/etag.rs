//! Entity tags: how every ETag the server sends is made, and how a
//! client's conditional headers are matched against one. One place, so a
//! file, a manifest rendering and a component follow the same rules.
//!
//! - A derived tag is `"KIND-HEX"`: the first 16 bytes of SHA-256 over
//!   what identifies the content (`zt-` a file, `m-` a manifest rendering,
//!   `c-` a component without a sha256 digest, `p-` a file whose digests
//!   are still being computed: from its header and identity, see
//!   `catalog::Found::provisional`). A component with a sha256
//!   digest is tagged `"sha256-HEX"` with the whole digest. All are strong.
//! - `If-None-Match` uses the weak comparison (RFC 9110 13.1.2): `W/` is
//!   ignored on either side, and `*` matches anything.
//! - `If-Range` uses the strong comparison: a weak tag never matches.

use sha2::{Digest as _, Sha256};

/// `"KIND-HEX"` over `parts`, hashed in order as given (callers put a
/// separator between parts that could run into each other).
pub(crate) fn derived(kind: &str, parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
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

/// Whether an `If-None-Match` list matches `etag` (weak comparison).
pub(crate) fn none_match(list: &str, etag: &str) -> bool {
    let bare = etag.trim_start_matches("W/");
    list.split(',')
        .map(str::trim)
        .any(|t| t == "*" || t.trim_start_matches("W/") == bare)
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
    fn derived_tags_are_quoted_and_stable() {
        let t = derived("zt", &[b"manifest", &7u64.to_le_bytes()]);
        assert!(t.starts_with("\"zt-") && t.ends_with('"') && t.len() == 2 + 3 + 32);
        assert_eq!(t, derived("zt", &[b"manifest", &7u64.to_le_bytes()]));
        assert_ne!(t, derived("zt", &[b"manifest", &8u64.to_le_bytes()]));
        assert_eq!(suffixed("\"abc\"", "decoded"), "\"abc-decoded\"");
        assert_eq!(quoted("sha256", &[0xab, 0x01]), "\"sha256-ab01\"");
    }
}
