//! Keeping the catalog current: file events (debounced) trigger rescans,
//! and a periodic rescan catches whatever events missed, or everything when
//! no watcher could be set up (for example when inotify watches run out).
//! An object-storage root has no events: it is listed every
//! `catalog.rescan_interval_secs`, and checked every
//! `storage.check_interval_secs` (a one-page listing), which `/readyz`
//! reports; a store that answers again is listed at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::server::State;

/// Starts the watcher task.
pub(crate) fn spawn(state: Arc<State>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let _events = state
            .config
            .catalog
            .watch
            .then(|| state.catalog.root().watch(tx))
            .flatten();
        let debounce = Duration::from_millis(state.config.catalog.debounce_ms);
        let mut interval = tokio::time::interval(Duration::from_secs(
            state.config.catalog.rescan_interval_secs.max(1),
        ));
        interval.tick().await;
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                Some(()) = rx.recv() => {
                    // Let a burst of events settle into one rescan.
                    tokio::time::sleep(debounce).await;
                    while rx.try_recv().is_ok() {}
                }
            }
            let (added, removed, changed) = state.catalog.rescan().await;
            if added + removed + changed > 0 {
                tracing::info!(added, removed, changed, "catalog updated");
            }
        }
    })
}

/// Starts the checks of a root that can fail apart from its reads (an
/// object store; none for a directory), and looks again at once at the
/// files its reads found replaced.
pub(crate) fn spawn_store_check(state: Arc<State>) -> Option<JoinHandle<()>> {
    if !state.catalog.root().is_checked() {
        return None;
    }
    let every = Duration::from_secs(state.config.storage.check_interval_secs.max(1));
    Some(tokio::spawn(async move {
        let root = state.catalog.root();
        let mut interval = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                // Reads found objects replaced: list them again now.
                keys = root.replaced() => {
                    for k in keys {
                        state.catalog.refresh(&k).await;
                    }
                    continue;
                }
            }
            let answer = root.check(every.max(CHECK_TIMEOUT)).await.err();
            if let Some(e) = &answer {
                tracing::warn!(root = root.describe(), error = %e, "the store does not answer; not ready");
            }
            let ok = answer.is_none();
            let was_failing = state.catalog.set_store_error(answer);
            if ok && was_failing {
                tracing::info!(
                    root = root.describe(),
                    "the store answers again; listing it"
                );
                state.catalog.rescan().await;
            }
        }
    }))
}

/// The least time a store check waits for its answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
