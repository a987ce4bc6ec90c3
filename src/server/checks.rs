//! Each served component's digest, checked against the file once, the first
//! time the component is asked for (over HTTP or QUIC), and remembered for
//! as long as the file is unchanged. A component whose bytes do not match
//! its digest is never sent; it is refused naming the file, object,
//! component and rule.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use zt_format::{Component, Hasher, Manifest};

/// Bytes hashed per read.
const CHUNK: u64 = 1 << 20;

/// The outcome of each component's check, filled in on first use.
#[derive(Debug, Default)]
pub struct Checks {
    cells: HashMap<(String, String), OnceLock<Result<(), String>>>,
}

impl Checks {
    /// One unfilled cell per component of `m`.
    pub fn new(m: &Manifest) -> Checks {
        let cells = m
            .objects
            .iter()
            .flat_map(|(o, obj)| {
                obj.components
                    .keys()
                    .map(move |r| ((o.clone(), r.clone()), OnceLock::new()))
            })
            .collect();
        Checks { cells }
    }

    /// Checks the component once (blocking: it reads the component);
    /// later calls return the first answer. Components without a digest,
    /// or with an algorithm this build does not know, pass: there is
    /// nothing to check them against, and clients decide what to accept.
    pub fn check(
        &self,
        file: &File,
        path: &str,
        m: &Manifest,
        object: &str,
        role: &str,
    ) -> Result<(), String> {
        let Some(cell) = self.cells.get(&(object.to_owned(), role.to_owned())) else {
            return Ok(());
        };
        let Some(c) = m.objects.get(object).and_then(|o| o.components.get(role)) else {
            return Ok(());
        };
        cell.get_or_init(|| {
            hash(file, c).map_err(|e| format!("{path}: object {object:?}, component {role:?}: {e}"))
        })
        .clone()
    }
}

fn hash(file: &File, c: &Component) -> Result<(), String> {
    let Some(digest) = &c.digest else {
        return Ok(());
    };
    let Some(algorithm) = digest.algorithm() else {
        return Ok(());
    };
    let mut h = Hasher::new(algorithm);
    let mut buf = vec![0u8; usize::try_from(CHUNK.min(c.length)).unwrap_or(0)];
    let mut pos = c.offset;
    let end = c.offset.saturating_add(c.length);
    while pos < end {
        let n = usize::try_from(CHUNK.min(end - pos)).unwrap_or(0);
        let part = buf.get_mut(..n).unwrap_or_default();
        file.read_exact_at(part, pos)
            .map_err(|e| format!("reading {} bytes at {pos}: {e}", part.len()))?;
        h.update(part);
        pos += n as u64;
    }
    digest
        .compare(&h.finish())
        .map_err(|rule| format!("{}: {rule}", rule.name()))
}
