//! `zt cache`: what the component cache holds, a check of every entry,
//! and pruning it to a size.

use std::io::Write;
use std::path::PathBuf;
use std::time::SystemTime;

use anyhow::{bail, Context, Result};
use zt_client::cache::Cache;

/// What `zt cache` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum Action {
    /// List the entries, least recently used first, and their total.
    List,
    /// Read every entry and check it against the digest it is named by;
    /// remove those that fail (exit 1 when any did).
    Verify,
    /// Remove the least recently used entries until the rest hold at most SIZE.
    Prune {
        /// The size to prune to (K, M, G, T; 0 empties the cache)
        #[arg(long, value_name = "SIZE", value_parser = zt_client::cache::parse_size)]
        to: u64,
    },
}

/// The cache `dir` names, else the tools' default.
pub fn open(dir: Option<PathBuf>) -> Result<Cache> {
    let Some(dir) = dir.or_else(Cache::default_dir) else {
        bail!("no cache: ZTSERVE_CACHE is off, or there is no home folder (give --cache-dir)");
    };
    let max = Cache::default_max_bytes().map_err(anyhow::Error::msg)?;
    Cache::open(&dir, max).with_context(|| format!("opening the cache {}", dir.display()))
}

/// Runs `action` on `cache`; `Ok(false)` when `verify` removed anything.
pub fn run(out: &mut dyn Write, cache: &Cache, action: &Action) -> Result<bool> {
    let dir = cache.dir().display();
    match action {
        Action::List => {
            let mut entries = cache.entries()?;
            entries.sort_by_key(|e| e.used);
            let now = SystemTime::now();
            for e in &entries {
                let age = now.duration_since(e.used).unwrap_or_default().as_secs();
                writeln!(out, "{:>14}  {:>8}s ago  {}", e.len, age, e.digest.as_str())?;
            }
            let total: u64 = entries.iter().map(|e| e.len).sum();
            writeln!(
                out,
                "{dir}: {} entries, {total} bytes (bound {} bytes)",
                entries.len(),
                cache.max_bytes()
            )?;
            Ok(true)
        }
        Action::Verify => {
            let v = cache.verify()?;
            for (path, why) in &v.removed {
                writeln!(out, "removed {}: {why}", path.display())?;
            }
            writeln!(
                out,
                "{dir}: {} entries ({} bytes) verified, {} removed",
                v.checked,
                v.bytes,
                v.removed.len()
            )?;
            Ok(v.removed.is_empty())
        }
        Action::Prune { to } => {
            let p = cache.prune(*to)?;
            writeln!(
                out,
                "{dir}: removed {} entries ({} bytes), {} bytes left",
                p.removed, p.freed, p.left
            )?;
            Ok(true)
        }
    }
}
