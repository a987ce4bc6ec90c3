//! Optional bearer-token authentication.
//!
//! Tokens live in a file, one per line (blank lines and `#` comments are
//! skipped). The file is re-read when its modification time or size
//! changes, checked at most once a second, so tokens can be rotated without
//! a restart. Comparison takes the same time whatever the token.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};

/// How often the token file is checked for changes, at most.
const RECHECK: Duration = Duration::from_secs(1);

/// What identifies a version of the token file: modification time and size.
type Stamp = (Option<SystemTime>, u64);

#[derive(Debug)]
struct Loaded {
    tokens: HashSet<Vec<u8>>,
    stamp: Stamp,
    checked: Instant,
}

/// The set of valid tokens, backed by a file.
#[derive(Debug)]
pub struct Tokens {
    path: PathBuf,
    state: Mutex<Loaded>,
}

fn read(path: &Path) -> Result<(HashSet<Vec<u8>>, Stamp)> {
    let meta = std::fs::metadata(path).with_context(|| format!("token file {}", path.display()))?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading token file {}", path.display()))?;
    let tokens = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.as_bytes().to_vec())
        .collect();
    Ok((tokens, (meta.modified().ok(), meta.len())))
}

/// Compares without an early exit, so timing does not reveal a prefix.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Tokens {
    /// Loads the token file; an unreadable or empty file is an error.
    pub fn load(path: &Path) -> Result<Self> {
        let (tokens, stamp) = read(path)?;
        if tokens.is_empty() {
            anyhow::bail!("token file {} holds no tokens", path.display());
        }
        Ok(Tokens {
            path: path.to_owned(),
            state: Mutex::new(Loaded {
                tokens,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    fn refresh(&self, state: &mut Loaded) {
        if state.checked.elapsed() < RECHECK {
            return;
        }
        state.checked = Instant::now();
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.modified().ok(), m.len()));
        if stamp == Some(state.stamp) {
            return;
        }
        match read(&self.path) {
            Ok((tokens, stamp)) => {
                tracing::info!(file = %self.path.display(), tokens = tokens.len(), "token file reloaded");
                state.tokens = tokens;
                state.stamp = stamp;
            }
            // Keep the last good set: a half-written file must not lock everyone out.
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "cannot reload the token file; keeping the previous tokens")
            }
        }
    }

    /// Whether an `Authorization` header value carries a valid bearer token.
    pub fn allows(&self, authorization: Option<&str>) -> bool {
        let Some(token) = authorization.and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        }) else {
            return false;
        };
        let Ok(mut state) = self.state.lock() else {
            return false;
        };
        self.refresh(&mut state);
        let mut ok = false;
        for t in &state.tokens {
            ok |= same(t, token.as_bytes());
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("tokens");
        std::fs::write(&f, "# comment\n\nalpha\n beta \n").unwrap();
        let t = Tokens::load(&f).unwrap();
        assert!(t.allows(Some("Bearer alpha")));
        assert!(t.allows(Some("bearer beta")));
        assert!(!t.allows(Some("Bearer alph")));
        assert!(!t.allows(Some("Basic alpha")));
        assert!(!t.allows(None));
        std::fs::write(&f, "gamma-longer\n").unwrap();
        t.state.lock().unwrap().checked -= RECHECK;
        assert!(t.allows(Some("Bearer gamma-longer")));
        assert!(!t.allows(Some("Bearer alpha")));
        std::fs::write(&f, "").unwrap();
        assert!(Tokens::load(&f).is_err());
    }
}
