//! Selections: which objects a request, a fetch or a listing wants.
//!
//! - A pattern is matched against the whole object name, case-sensitively.
//! - `*` matches any run of characters and `?` any one character; both
//!   cross `.` and `/`. `\` makes the next character literal.
//! - A pattern without wildcards is an exact name.
//! - Several patterns select the union of their matches.
//! - A pattern that matches nothing is an error that names it.

use std::fmt;

use crate::Manifest;

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
    /// Parses a pattern. A trailing lone `\` is an error.
    pub fn new(text: &str) -> Result<Self, SelectError> {
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
    // Both cursors stay below their slice's length, so `+ 1` cannot overflow.
    #[allow(clippy::arithmetic_side_effects)]
    pub fn matches(&self, name: &str) -> bool {
        let name: Vec<char> = name.chars().collect();
        // Iterative wildcard matching with one backtrack point: linear in
        // practice, never exponential.
        let (mut p, mut n) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while n < name.len() {
            match self.tokens.get(p) {
                Some(Token::Any) => {
                    star = Some((p, n));
                    p += 1;
                }
                Some(Token::One) => {
                    p += 1;
                    n += 1;
                }
                Some(Token::Literal(c)) if name.get(n) == Some(c) => {
                    p += 1;
                    n += 1;
                }
                _ => match star {
                    Some((sp, sn)) => {
                        p = sp + 1;
                        n = sn + 1;
                        star = Some((sp, sn + 1));
                    }
                    None => return false,
                },
            }
        }
        self.tokens
            .get(p..)
            .is_some_and(|rest| rest.iter().all(|t| *t == Token::Any))
    }
}

/// Why a selection failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// A pattern ends in an unpaired `\`.
    TrailingEscape(String),
    /// Patterns that matched no object.
    NoMatch(Vec<String>),
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

/// A union of patterns; empty selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    patterns: Vec<Pattern>,
}

impl Selection {
    /// Everything.
    pub fn all() -> Self {
        Selection::default()
    }

    /// Parses patterns.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, SelectError> {
        let patterns = patterns
            .iter()
            .map(|p| Pattern::new(p.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Selection { patterns })
    }

    pub fn is_all(&self) -> bool {
        self.patterns.is_empty()
    }

    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// Whether `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        self.is_all() || self.patterns.iter().any(|p| p.matches(name))
    }

    /// The selected names, in the order given; fails naming every pattern
    /// that matched nothing.
    pub fn apply<'a, I>(&self, names: I) -> Result<Vec<&'a str>, SelectError>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut hit = vec![false; self.patterns.len()];
        let mut out = Vec::new();
        for name in names {
            let mut selected = self.is_all();
            for (p, h) in self.patterns.iter().zip(hit.iter_mut()) {
                if p.matches(name) {
                    *h = true;
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
        let names = self.apply(m.objects.keys().map(String::as_str))?;
        Ok(Manifest {
            version: m.version.clone(),
            origin: m.origin,
            source: m.source,
            files: m.files.clone(),
            attributes: m.attributes.clone(),
            objects: names
                .into_iter()
                .filter_map(|n| m.objects.get_key_value(n))
                .map(|(k, o)| (k.clone(), o.clone()))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
