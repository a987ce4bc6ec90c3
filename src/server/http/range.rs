//! Range requests: parsing with `http-range-header`, resolution against a
//! length, and merging of overlapping or adjacent ranges.

use std::num::NonZeroUsize;
use std::ops::Range;

use http_range_header::{
    parse_range_header_with_max_ranges, RangeUnsatisfiableError, SyntacticallyCorrectRange,
};

/// What a Range header asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ranges {
    /// No usable Range header: send everything.
    Full,
    /// Satisfiable ranges, sorted and merged.
    Some(Vec<Range<u64>>),
    /// None of the ranges can be satisfied (416).
    Unsatisfiable,
    /// More ranges than allowed (416, with an explanation).
    TooMany,
}

/// Resolves a Range header value against `len` bytes.
pub(crate) fn resolve(header: &str, len: u64, max_ranges: usize) -> Ranges {
    // Parse generously, then enforce our own cap after merging.
    let parse_cap =
        NonZeroUsize::new(max_ranges.saturating_mul(4).max(1)).unwrap_or(NonZeroUsize::MIN);
    let parsed = match parse_range_header_with_max_ranges(header, parse_cap) {
        Ok(p) => p,
        Err(RangeUnsatisfiableError::Rejected(_)) => return Ranges::TooMany,
        // A malformed header is ignored, as RFC 9110 allows.
        Err(_) => return Ranges::Full,
    };
    let mut out: Vec<Range<u64>> = parsed
        .into_ranges()
        .into_iter()
        .filter_map(|r| match r {
            SyntacticallyCorrectRange::FromStart(s) if s < len => Some(s..len),
            SyntacticallyCorrectRange::FromLast(n) if n > 0 && len > 0 => {
                Some(len.saturating_sub(n)..len)
            }
            SyntacticallyCorrectRange::Indexed(a, b) if a < len => {
                Some(a..b.saturating_add(1).min(len))
            }
            _ => None,
        })
        .collect();
    if out.is_empty() {
        return Ranges::Unsatisfiable;
    }
    out.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(out.len());
    for r in out {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    if merged.len() > max_ranges {
        return Ranges::TooMany;
    }
    Ranges::Some(merged)
}

#[cfg(test)]
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    #[test]
    fn resolution() {
        assert_eq!(resolve("bytes=0-7", 100, 8), Ranges::Some(vec![0..8]));
        assert_eq!(resolve("bytes=-16", 100, 8), Ranges::Some(vec![84..100]));
        assert_eq!(resolve("bytes=90-", 100, 8), Ranges::Some(vec![90..100]));
        assert_eq!(resolve("bytes=90-200", 100, 8), Ranges::Some(vec![90..100]));
        assert_eq!(resolve("bytes=100-", 100, 8), Ranges::Unsatisfiable);
        assert_eq!(
            resolve("bytes=0-1,5-9,3-6", 100, 8),
            Ranges::Some(vec![0..2, 3..10])
        );
        assert_eq!(resolve("bytes=0-1,2-3", 100, 8), Ranges::Some(vec![0..4]));
        assert_eq!(resolve("items=0-1", 100, 8), Ranges::Full);
        assert_eq!(resolve("bytes=0-0,2-2,4-4", 100, 2), Ranges::TooMany);
        assert_eq!(resolve("bytes=-0", 100, 2), Ranges::Unsatisfiable);
        assert_eq!(resolve("bytes=0-", 0, 2), Ranges::Unsatisfiable);
    }
}
