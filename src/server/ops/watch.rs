//! Keeping the catalog current: file events (debounced) trigger rescans,
//! and a periodic rescan catches whatever events missed, or everything when
//! no watcher could be set up (for example when inotify watches run out).
//! An object-storage root has no events: it is listed every
//! `catalog.rescan_interval_secs`, and checked every
//! `storage.check_interval_secs` (a one-page listing), which `/readyz`
//! reports; a store that answers again is listed at once.

use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::server::store::object_root::StoreError;
use crate::server::State;

/// Starts the watcher task.
pub(crate) fn spawn(state: Arc<State>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let dir = state.catalog.root().dir().map(ToOwned::to_owned);
        let _watcher = if let (true, Some(dir)) = (state.config.catalog.watch, dir) {
            make_watcher(&state, &dir, tx)
        } else {
            None
        };
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

fn make_watcher(
    state: &State,
    dir: &std::path::Path,
    tx: mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    let handler = move |res: notify::Result<notify::Event>| match res {
        Ok(_) => {
            let _ = tx.try_send(());
        }
        Err(e) => tracing::warn!(error = %e, "file watch error; relying on periodic rescans"),
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch files; falling back to periodic rescans");
            return None;
        }
    };
    match watcher.watch(dir, RecursiveMode::Recursive) {
        Ok(()) => Some(watcher),
        Err(e) => {
            tracing::warn!(error = %e, interval_secs = state.config.catalog.rescan_interval_secs,
                "cannot watch the root (inotify watches exhausted?); falling back to periodic rescans");
            None
        }
    }
}

/// Starts the store check of an object-storage root (none for a directory).
pub(crate) fn spawn_store_check(state: Arc<State>) -> Option<JoinHandle<()>> {
    let store = Arc::clone(state.catalog.root().store()?);
    let every = Duration::from_secs(state.config.storage.check_interval_secs.max(1));
    Some(tokio::spawn(async move {
        let mut interval = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                // Reads found objects replaced: list them again now.
                keys = store.changed() => {
                    for k in keys {
                        state.catalog.refresh(&k).await;
                    }
                    continue;
                }
            }
            // A store cut off may not refuse, only stay silent.
            let answer = match tokio::time::timeout(every.max(CHECK_TIMEOUT), store.check()).await {
                Ok(answer) => answer.err(),
                Err(_) => Some(StoreError::Unreachable {
                    url: store.url().to_owned(),
                    detail: format!(
                        "no answer to a listing within {:?}",
                        every.max(CHECK_TIMEOUT)
                    ),
                }),
            };
            if let Some(e) = &answer {
                tracing::warn!(root = store.url(), error = %e, "the store does not answer; not ready");
            }
            let ok = answer.is_none();
            let was_failing = state.catalog.set_store_error(answer);
            if ok && was_failing {
                tracing::info!(root = store.url(), "the store answers again; listing it");
                state.catalog.rescan().await;
            }
        }
    }))
}

/// The least time a store check waits for its answer.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
