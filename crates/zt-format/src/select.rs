//! Selections: which objects a request, a fetch or a listing wants.
//!
//! - A pattern is matched against the whole object name, case-sensitively.
//! - `*` matches any run of characters and `?` any one character; both
//!   cross `.` and `/`. `\` makes the next character literal.
//! - A pattern without wildcards is an exact name.
//! - Several patterns select the union of their matches.
//! - A pattern that matches nothing is an error that names it.
//! - At most [`MAX_PATTERNS`] patterns of at most [`MAX_PATTERN_CHARS`]
//!   characters each, of which at most [`MAX_WILDCARD_PATTERNS`] have
//!   wildcards: a selection is a request's, and its cost is the server's.
//!
//! Matching costs at most the name's length times the longest run of
//! characters between two `*` of the pattern: each run is found at the
//! leftmost place it fits after the one before (which is where a match
//! would put it, if there is one), so nothing is tried twice. Exact names
//! are looked up, not matched.

use std::collections::HashMap;
use std::fmt;

use crate::Manifest;

/// Most patterns in one selection.
pub const MAX_PATTERNS: usize = 4096;

/// Most patterns with a wildcard in one selection.
pub const MAX_WILDCARD_PATTERNS: usize = 64;

/// Most characters in one pattern.
pub const MAX_PATTERN_CHARS: usize = 1024;

/// One parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    Any,
    One,
}

/// A compiled glob pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    tokens: Vec<Token>,
}

impl Pattern {
    /// Parses a pattern. A trailing lone `\` is an error, and so is one of
    /// more than [`MAX_PATTERN_CHARS`] characters.
    pub fn new(text: &str) -> Result<Self, SelectError> {
        if text.chars().count() > MAX_PATTERN_CHARS {
            return Err(SelectError::TooLong(text.chars().take(64).collect()));
        }
        let mut tokens = Vec::with_capacity(text.len());
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            tokens.push(match c {
                '*' => Token::Any,
                '?' => Token::One,
                '\\' => match chars.next() {
                    Some(e) => Token::Literal(e),
                    None => return Err(SelectError::TrailingEscape(text.to_owned())),
                },
                c => Token::Literal(c),
            });
        }
        Ok(Pattern {
            text: text.to_owned(),
            tokens,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the pattern has no wildcards.
    fn is_exact(&self) -> bool {
        self.tokens.iter().all(|t| matches!(t, Token::Literal(_)))
    }

    /// The exact name this pattern stands for, when it has no wildcards.
    pub fn exact(&self) -> Option<String> {
        self.tokens
            .iter()
            .map(|t| match t {
                Token::Literal(c) => Some(*c),
                _ => None,
            })
            .collect()
    }

    /// Whether `name` matches the whole pattern.
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        self.matches_chars(&name)
    }

    /// Whether `name` (as characters) matches the whole pattern: the runs
    /// between `*`s placed leftmost in turn, the first at the start and
    /// the last at the end unless a `*` frees them.
    fn matches_chars(&self, name: &[char]) -> bool {
        let mut runs = self.tokens.split(|t| *t == Token::Any);
        let Some(first) = runs.next() else {
            return name.is_empty();
        };
        if !self.tokens.contains(&Token::Any) {
            return first.len() == name.len() && fits(first, name);
        }
        // The last run is anchored at the end: set it aside first.
        let mut middle: Vec<&[Token]> = runs.collect();
        let last = middle.pop().unwrap_or_default();
        let Some(end) = name.len().checked_sub(last.len()) else {
            return false;
        };
        if !name.get(end..).is_some_and(|tail| fits(last, tail)) || first.len() > end {
            return false;
        }
        if !fits(first, name) {
            return false;
        }
        let (mut at, body) = (first.len(), name.get(..end).unwrap_or_default());
        for run in middle.iter().filter(|r| !r.is_empty()) {
            match leftmost(run, body, at) {
                Some(found) => at = found.saturating_add(run.len()),
                None => return false,
            }
        }
        true
    }
}

/// Whether `run` (literals and `?`) matches the start of `name`.
fn fits(run: &[Token], name: &[char]) -> bool {
    run.len() <= name.len()
        && run.iter().zip(name).all(|(t, c)| match t {
            Token::Literal(l) => l == c,
            _ => true,
        })
}

/// The first place at or after `from` where `run` fits inside `name`.
fn leftmost(run: &[Token], name: &[char], from: usize) -> Option<usize> {
    let last = name.len().checked_sub(run.len())?;
    (from..=last).find(|&at| name.get(at..).is_some_and(|rest| fits(run, rest)))
}

/// Why a selection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SelectError {
    /// A pattern ends in an unpaired `\`.
    TrailingEscape(String),
    /// Patterns that matched no object.
    NoMatch(Vec<String>),
    /// A pattern longer than [`MAX_PATTERN_CHARS`] (its first characters).
    TooLong(String),
    /// More patterns than [`MAX_PATTERNS`], or more with wildcards than
    /// [`MAX_WILDCARD_PATTERNS`]: how many, and which cap.
    TooMany { count: usize, cap: usize },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::TrailingEscape(p) => {
                write!(f, "pattern {p:?} ends in an unpaired backslash")
            }
            SelectError::NoMatch(ps) => {
                let list: Vec<String> = ps.iter().map(|p| format!("{p:?}")).collect();
                write!(f, "no object matches {}", list.join(", "))
            }
            SelectError::TooLong(start) => write!(
                f,
                "pattern {start:?}... is longer than {MAX_PATTERN_CHARS} characters (select-too-long)"
            ),
            SelectError::TooMany { count, cap } if *cap == MAX_WILDCARD_PATTERNS => write!(
                f,
                "{count} patterns with wildcards, over the cap of {cap} (select-too-many)"
            ),
            SelectError::TooMany { count, cap } => {
                write!(f, "{count} patterns, over the cap of {cap} (select-too-many)")
            }
        }
    }
}

impl std::error::Error for SelectError {}

/// `name` with its glob characters escaped: a pattern that selects exactly
/// that name.
pub fn escape(name: &str) -> String {
    let mut s = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '*' | '?' | '\\') {
            s.push('\\');
        }
        s.push(c);
    }
    s
}

/// Whether `patterns` fit in one request by the measure [`by_name`]
/// cuts by: one ztp/1 message carries them.
pub fn fits_one_request(patterns: &[String]) -> bool {
    let bytes = patterns
        .iter()
        .fold(0usize, |n, p| n.saturating_add(p.len()).saturating_add(3));
    patterns.len() <= MAX_PATTERNS && bytes <= MAX_REQUEST_NAME_BYTES
}

/// The requests that fetch the objects `missing` of the `all` that
/// `select` selects: one of `select` itself when every object is missing
/// (a fresh fetch: the server's order, layer 0 first, whatever their
/// number) and `select` [`fits_one_request`], else [`by_name`]; none
/// when nothing is missing.
pub fn requests<S: AsRef<str>>(select: &[String], missing: &[S], all: usize) -> Vec<Vec<String>> {
    if !missing.is_empty() && missing.len() == all && fits_one_request(select) {
        vec![select.to_vec()]
    } else {
        by_name(missing)
    }
}

/// The most bytes of names [`by_name`] puts in one request: a ztp/1
/// request is one message of at most 64 KiB (`quic.max_request_bytes`),
/// and a name's CBOR costs up to three bytes more than the name.
pub const MAX_REQUEST_NAME_BYTES: usize = 48 << 10;

/// Requests of exactly `objects`, in their order: their names, escaped,
/// in pieces within a request's caps ([`MAX_PATTERNS`] names,
/// [`MAX_REQUEST_NAME_BYTES`] bytes of them), to fetch one after another.
/// A client that names more objects than that in one request is refused
/// (`select-too-many`, or a ztp/1 message too large).
pub fn by_name<S: AsRef<str>>(objects: &[S]) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut bytes = 0usize;
    for o in objects {
        let name = escape(o.as_ref());
        let cost = name.len().saturating_add(3);
        match out.last_mut() {
            Some(piece)
                if piece.len() < MAX_PATTERNS
                    && bytes.saturating_add(cost) <= MAX_REQUEST_NAME_BYTES =>
            {
                bytes = bytes.saturating_add(cost);
                piece.push(name);
            }
            _ => {
                bytes = cost;
                out.push(vec![name]);
            }
        }
    }
    out
}

/// A union of patterns; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    patterns: Vec<Pattern>,
    /// The patterns without wildcards, by the name each stands for, and
    /// the pattern's place in `patterns`.
    exact: Vec<(String, usize)>,
}

impl Selection {
    /// Everything.
    pub fn all() -> Self {
        Selection::default()
    }

    /// Parses patterns, within the caps ([`MAX_PATTERNS`],
    /// [`MAX_WILDCARD_PATTERNS`], [`MAX_PATTERN_CHARS`]).
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, SelectError> {
        if patterns.len() > MAX_PATTERNS {
            return Err(SelectError::TooMany {
                count: patterns.len(),
                cap: MAX_PATTERNS,
            });
        }
        let patterns: Vec<Pattern> = patterns
            .iter()
            .map(|p| Pattern::new(p.as_ref()))
            .collect::<Result<_, _>>()?;
        let exact: Vec<(String, usize)> = patterns
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((p.exact()?, i)))
            .collect();
        let wild = patterns.len().saturating_sub(exact.len());
        if wild > MAX_WILDCARD_PATTERNS {
            return Err(SelectError::TooMany {
                count: wild,
                cap: MAX_WILDCARD_PATTERNS,
            });
        }
        Ok(Selection { patterns, exact })
    }

    pub fn is_all(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Whether `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        if self.is_all() || self.exact.iter().any(|(e, _)| e == name) {
            return true;
        }
        let chars: Vec<char> = name.chars().collect();
        self.wildcards().any(|(_, p)| p.matches_chars(&chars))
    }

    /// The patterns with wildcards, with their places.
    fn wildcards(&self) -> impl Iterator<Item = (usize, &Pattern)> {
        self.patterns
            .iter()
            .enumerate()
            .filter(|(_, p)| !p.is_exact())
    }

    /// The selected names, in the order given; fails naming every pattern
    /// that matched nothing.
    pub fn apply<'a, I>(&self, names: I) -> Result<Vec<&'a str>, SelectError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut hit = vec![false; self.patterns.len()];
        let exact: HashMap<&str, Vec<usize>> =
            self.exact.iter().fold(Default::default(), |mut m, (e, i)| {
                m.entry(e.as_str()).or_insert_with(Vec::new).push(*i);
                m
            });
        let wild: Vec<(usize, &Pattern)> = self.wildcards().collect();
        let mut out = Vec::new();
        let mut chars = Vec::new();
        for name in names {
            let mut selected = self.is_all();
            for &i in exact.get(name).into_iter().flatten() {
                if let Some(h) = hit.get_mut(i) {
                    *h = true;
                }
                selected = true;
            }
            if !wild.is_empty() {
                chars.clear();
                chars.extend(name.chars());
            }
            for &(i, p) in &wild {
                if p.matches_chars(&chars) {
                    if let Some(h) = hit.get_mut(i) {
                        *h = true;
                    }
                    selected = true;
                }
            }
            if selected {
                out.push(name);
            }
        }
        let missing: Vec<String> = self
            .patterns
            .iter()
            .zip(&hit)
            .filter(|(_, h)| !**h)
            .map(|(p, _)| p.as_str().to_owned())
            .collect();
        if missing.is_empty() {
            Ok(out)
        } else {
            Err(SelectError::NoMatch(missing))
        }
    }
}

impl Selection {
    /// `m` restricted to the selected objects (all of it when the
    /// selection is empty); fails like [`Selection::apply`].
    pub fn filter(&self, m: &Manifest) -> Result<Manifest, SelectError> {
        if self.is_all() {
            return Ok(m.clone());
        }
        let names = self.apply(m.objects.keys())?;
        Ok(Manifest {
            version: m.version.clone(),
            origin: m.origin,
            source: m.source,
            files: m.files.clone(),
            attributes: m.attributes.clone(),
            objects: names
                .into_iter()
                .filter_map(|n| m.objects.get_key_value(n))
                .map(|(k, o)| (k, o.clone()))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh fetch is one request of its own selection; a resumed one
    /// asks for the names still missing, escaped, in pieces within the cap.
    #[test]
    fn requests_stay_within_the_cap_on_patterns() {
        let cap = MAX_PATTERNS;
        let names = |n: usize| (0..n).map(|i| format!("o{i}")).collect::<Vec<_>>();
        assert!(requests::<String>(&[], &[], 3).is_empty());
        let whole = requests(&[], &names(cap + 5), cap + 5);
        assert_eq!(whole, vec![Vec::<String>::new()]);
        let mine = vec!["layers.*".to_owned()];
        assert_eq!(requests(&mine, &names(10), 10), vec![mine.clone()]);
        let pieces = requests(&mine, &names(cap * 2 + 1), cap * 2 + 2);
        let sizes: Vec<usize> = pieces.iter().map(Vec::len).collect();
        assert_eq!(sizes, [cap, cap, 1]);
        assert_eq!(pieces.concat(), names(cap * 2 + 1));
        assert_eq!(requests(&mine, &["a*b"], 2), vec![vec![escape("a*b")]]);
        // Long names: pieces by bytes, in order, none over the budget.
        let long: Vec<String> = (0..3000)
            .map(|i| format!("model.layers.{i}.mlp.experts.17.down_proj.weight"))
            .collect();
        let pieces = by_name(&long);
        assert!(pieces.len() > 2, "{}", pieces.len());
        for p in &pieces {
            let bytes: usize = p.iter().map(|n| n.len() + 3).sum();
            assert!(bytes <= MAX_REQUEST_NAME_BYTES, "{bytes}");
        }
        assert_eq!(pieces.concat(), long);
        // A selection of the user's own too long for one request: the
        // objects it selects, by name, in pieces.
        let some: Vec<String> = long.iter().take(900).cloned().collect();
        assert!(fits_one_request(&some) && !fits_one_request(&long));
        assert_eq!(requests(&long, &long, long.len()), pieces);
        assert_eq!(requests(&some, &some, 900), vec![some.clone()]);
    }

    fn m(p: &str, n: &str) -> bool {
        Pattern::new(p).unwrap().matches(n)
    }

    #[test]
    fn wildcards_cross_dots_and_slashes() {
        assert!(m(
            "model.layers.*.weight",
            "model.layers.12.mlp.up_proj.weight"
        ));
        assert!(m("*", "a/b.c"));
        assert!(m("a?c", "a.c"));
        assert!(m("a?c", "a/c"));
        assert!(!m("a?c", "ac"));
        assert!(!m("Model.*", "model.x"));
        assert!(m("*.bias", "x.bias"));
        assert!(!m("*.bias", "x.bias2"));
        assert!(m("**a**", "xxaxx"));
    }

    #[test]
    fn escapes_and_exact_names() {
        assert!(m(r"a\*b", "a*b"));
        assert!(!m(r"a\*b", "axb"));
        assert_eq!(Pattern::new(r"a\?").unwrap().exact(), Some("a?".into()));
        assert_eq!(Pattern::new("a*").unwrap().exact(), None);
        assert!(Pattern::new("a\\").is_err());
    }

    #[test]
    fn an_escaped_name_selects_exactly_itself() {
        for name in ["a*b?", "back\\slash", "plain.name"] {
            let p = Pattern::new(&escape(name)).unwrap();
            assert_eq!(p.exact().as_deref(), Some(name));
            assert!(p.matches(name));
        }
        assert!(!Pattern::new(&escape("a*")).unwrap().matches("ab"));
    }

    #[test]
    fn union_and_unmatched_patterns() {
        let names = ["a.0", "a.1", "b.0"];
        let s = Selection::new(&["a.*", "b.0"]).unwrap();
        assert_eq!(s.apply(names).unwrap(), names);
        let s = Selection::new(&["a.0", "zz*", "q"]).unwrap();
        let err = s.apply(names).unwrap_err();
        assert_eq!(err, SelectError::NoMatch(vec!["zz*".into(), "q".into()]));
        assert!(err.to_string().contains("\"zz*\""));
        assert_eq!(Selection::all().apply(names).unwrap().len(), 3);
    }

    #[test]
    fn pathological_patterns_stay_linear() {
        let name = "a".repeat(5000);
        let p = format!("{}b", "*a".repeat(50));
        assert!(!m(&p, &name));
    }

    /// Every pattern of a small alphabet against every name of it, up to
    /// a few characters: the leftmost-run matcher answers as a plain
    /// backtracking one does.
    #[test]
    fn the_matcher_agrees_with_backtracking_everywhere_small() {
        fn slow(p: &[Token], n: &[char]) -> bool {
            match p.split_first() {
                None => n.is_empty(),
                Some((Token::Any, rest)) => {
                    (0..=n.len()).any(|i| n.get(i..).is_some_and(|t| slow(rest, t)))
                }
                Some((Token::One, rest)) => n.split_first().is_some_and(|(_, t)| slow(rest, t)),
                Some((Token::Literal(c), rest)) => n
                    .split_first()
                    .is_some_and(|(first, t)| first == c && slow(rest, t)),
            }
        }
        fn all(alphabet: &[char], len: usize) -> Vec<String> {
            let mut out = vec![String::new()];
            for _ in 0..len {
                let next: Vec<String> = out
                    .iter()
                    .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                    .collect();
                out.extend(next);
            }
            out.sort();
            out.dedup();
            out
        }
        let patterns = all(&['a', 'b', '*', '?'], 4);
        let names = all(&['a', 'b'], 5);
        let mut checked = 0;
        for p in &patterns {
            let pat = Pattern::new(p).unwrap();
            for n in &names {
                let chars: Vec<char> = n.chars().collect();
                assert_eq!(
                    pat.matches(n),
                    slow(&pat.tokens, &chars),
                    "{p:?} against {n:?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    /// Issue 28: the attack of two 15 KB patterns against long names is
    /// refused, and the longest patterns allowed against 1,000-character
    /// names cost each name about its length times the longest run.
    #[test]
    fn patterns_are_capped_in_length_and_count() {
        let long = format!("{}b", "*a".repeat(7_500));
        assert!(matches!(Pattern::new(&long), Err(SelectError::TooLong(_))));
        let wild: Vec<String> = (0..=MAX_WILDCARD_PATTERNS)
            .map(|i| format!("{i}.*"))
            .collect();
        let err = Selection::new(&wild).unwrap_err();
        assert_eq!(
            err,
            SelectError::TooMany {
                count: MAX_WILDCARD_PATTERNS + 1,
                cap: MAX_WILDCARD_PATTERNS
            }
        );
        assert!(err.to_string().contains("select-too-many"), "{err}");
        // Exact names are looked up: thousands are fine.
        let exact: Vec<String> = (0..MAX_PATTERNS).map(|i| format!("t.{i}")).collect();
        let names: Vec<String> = (0..MAX_PATTERNS).map(|i| format!("t.{i}")).collect();
        let s = Selection::new(&exact).unwrap();
        assert_eq!(
            s.apply(names.iter().map(String::as_str)).unwrap().len(),
            MAX_PATTERNS
        );
        let too_many: Vec<String> = (0..=MAX_PATTERNS).map(|i| format!("t.{i}")).collect();
        assert!(matches!(
            Selection::new(&too_many),
            Err(SelectError::TooMany { .. })
        ));
        // The costliest allowed: 64 patterns of about 1,024 characters of
        // `*a*a...*b*` against names of 1,000 `a`s: each run placed once,
        // the `b` looked for across the rest of the name once.
        let worst: Vec<String> = (0..MAX_WILDCARD_PATTERNS)
            .map(|i| format!("{}*b{i}*", "*a".repeat(MAX_PATTERN_CHARS / 2 - 4)))
            .collect();
        let s = Selection::new(&worst).unwrap();
        let name = "a".repeat(1000);
        let names = vec![name.as_str(); 200];
        assert!(matches!(s.apply(names), Err(SelectError::NoMatch(_))));
    }
}
