//! The background verifier: every served component's digest checked
//! against the file soon after the file is catalogued, at a limited rate
//! (`digests.rate_mib_s`, shared in spirit with background hashing), so
//! the first request for a component rarely pays for reading it twice.
//! It uses the same once-per-component checks as requests
//! (`integrity/checks.rs`): whichever comes first checks, the other finds the
//! answer. A component that fails is refused to every request from then
//! on, naming the file, object, component and rule. Off with
//! `digests.verify_background = false` (components are then checked on
//! first request only).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::server::catalog::{Entry, Served};
use crate::server::integrity::checks::CheckFailure;
use crate::server::State;

/// How long the verifier rests when nothing is left to check.
const IDLE: Duration = Duration::from_millis(500);

/// Starts the verifier task; it ends when the daemon's state is gone.
pub(crate) fn start(state: &Arc<State>, rate: u64) {
    tokio::spawn(run(Arc::downgrade(state), rate));
}

async fn run(state: Weak<State>, rate: u64) {
    // Files with a component that could not be read (truncated under the
    // daemon): left to requests until the file changes (a new entry).
    let mut unreadable: Vec<Weak<Served>> = Vec::new();
    loop {
        unreadable.retain(|w| w.strong_count() > 0);
        let Some(st) = state.upgrade() else { return };
        if !st.ready.load(Ordering::SeqCst) {
            drop(st);
            tokio::time::sleep(IDLE).await;
            continue;
        }
        let work: Vec<_> = st
            .catalog
            .snapshot()
            .served()
            .filter(|s| !unreadable.iter().any(|w| w.as_ptr() == Arc::as_ptr(s)))
            .map(|s| (Arc::clone(s), s.unchecked()))
            .filter(|(_, left)| !left.is_empty())
            .collect();
        let mut left: u64 = work.iter().map(|(_, l)| l.len() as u64).sum();
        st.catalog.digest_metrics().set_unverified(left);
        drop(st);
        if work.is_empty() {
            tokio::time::sleep(IDLE).await;
            continue;
        }
        // The rate holds from the start of each pass: time spent idle
        // earns no burst.
        let (started, mut read) = (Instant::now(), 0u64);
        for (served, components) in work {
            for cell in components {
                let Some((object, role, len)) = served.unchecked_component(cell) else {
                    left = left.saturating_sub(1);
                    continue;
                };
                let Some(st) = state.upgrade() else { return };
                // A file replaced or removed since the pass began is
                // skipped: its new entry comes up in the next pass.
                let current = matches!(
                    st.catalog.snapshot().get(&served.path),
                    Some(Entry::Served(s)) if Arc::ptr_eq(s, &served)
                );
                if !current {
                    break;
                }
                let metrics = st.catalog.digest_metrics();
                match served.check(&object, &role).await {
                    Ok(()) => metrics.count_verified(len),
                    Err(CheckFailure::Corrupt(why)) => {
                        metrics.count_verified(len);
                        tracing::error!(file = %served.path, reason = %why, "background verification: component failed its digest; it will be refused");
                    }
                    Err(CheckFailure::Unreadable(why)) => {
                        tracing::warn!(file = %served.path, reason = %why, "background verification: component unreadable; the file is left to requests until it changes");
                        unreadable.push(Arc::downgrade(&served));
                        break;
                    }
                }
                left = left.saturating_sub(1);
                metrics.set_unverified(left);
                drop(st);
                read += len;
                pace(started, read, rate).await;
            }
        }
    }
}

/// Waits until `read` bytes since `started` fit `rate` bytes a second.
async fn pace(started: Instant, read: u64, rate: u64) {
    if rate == 0 {
        return;
    }
    let due = Duration::from_secs_f64(read as f64 / rate as f64);
    if let Some(ahead) = due.checked_sub(started.elapsed()) {
        tokio::time::sleep(ahead).await;
    }
}
