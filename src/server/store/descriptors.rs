//! The open-file budget. Every local file the daemon serves holds a
//! descriptor for as long as it is served (its identity and bytes are
//! the handle's), so a root of more files than the process may open
//! would take every descriptor: the daemon could then accept no
//! connection, nor write its own files (it exited, failing to write its
//! certificate). Files are held open up to the open-file limit
//! (`RLIMIT_NOFILE`, raised to its hard maximum at start) less a reserve
//! for connections, sockets and the daemon's own files; past it a file
//! is listed as unavailable, the reason naming the limit.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Descriptors held by served files now.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Whether a refusal was logged (once a process).
static WARNED: AtomicBool = AtomicBool::new(false);

/// The least kept back for everything else, and the share of the limit.
const RESERVE_LEAST: u64 = 256;
const RESERVE_SHARE: u64 = 4;

/// One file's descriptor, counted until dropped.
#[derive(Debug)]
pub(crate) struct Held(());

impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The open-file limit now, and the reserve kept back from it.
fn limits() -> (u64, u64) {
    static LIMITS: OnceLock<(u64, u64)> = OnceLock::new();
    *LIMITS.get_or_init(|| {
        let soft = rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(u64::MAX, |(soft, _)| soft);
        (soft, reserve(soft))
    })
}

/// What is kept back from a limit of `soft`: a quarter, at least
/// [`RESERVE_LEAST`], at most half (a small limit still serves files).
fn reserve(soft: u64) -> u64 {
    RESERVE_LEAST.max(soft / RESERVE_SHARE).min(soft / 2)
}

/// What a descriptor is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Hold {
    /// A served file's, held for as long as it is served: within the
    /// limit less the whole reserve.
    Served,
    /// A file read for one request or check (a pack's map, a Hub plain
    /// file): these may also take half the reserve, so files served up to
    /// their cap leave them room.
    Passing,
}

/// A descriptor for a file to be opened, or why not: the files held open
/// already take all the limit leaves them.
pub(crate) fn take(hold: Hold) -> io::Result<Held> {
    let (limit, reserve) = limits();
    let kept = match hold {
        Hold::Served => reserve,
        Hold::Passing => reserve / 2,
    };
    let cap = usize::try_from(limit.saturating_sub(kept)).unwrap_or(usize::MAX);
    let fits = HELD.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
        (n < cap).then_some(n + 1)
    });
    if fits.is_ok() {
        return Ok(Held(()));
    }
    let why = format!(
        "the daemon holds {cap} files open, its open-file limit ({limit}, RLIMIT_NOFILE) less {reserve} kept for connections [open-file-limit]: raise the limit (ulimit -n; LimitNOFILE=; docker --ulimit nofile=)"
    );
    if hold == Hold::Served && !WARNED.swap(true, Ordering::SeqCst) {
        tracing::warn!(
            limit,
            reserve,
            held = cap,
            "open-file limit reached: files past it are not served"
        );
    }
    Err(io::Error::other(why))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_leaves_room_for_files_whatever_the_limit() {
        assert_eq!(reserve(1024), 256);
        assert_eq!(reserve(1 << 20), 1 << 18);
        assert_eq!(reserve(256), 128);
        assert_eq!(reserve(u64::MAX), u64::MAX / 4);
        // A held descriptor is given back when dropped (the count is the
        // process's: other tests take and give back theirs meanwhile).
        drop(take(Hold::Passing).unwrap());
    }
}
