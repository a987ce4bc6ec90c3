//! Keeping the catalog current: file events (debounced) trigger rescans,
//! and a periodic rescan catches whatever events missed, or everything when
//! no watcher could be set up (for example when inotify watches run out).

use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::State;

/// Starts the watcher task.
pub(super) fn spawn(state: Arc<State>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let _watcher = if state.config.catalog.watch {
            make_watcher(&state, tx)
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
            let s = Arc::clone(&state);
            let result = tokio::task::spawn_blocking(move || s.catalog.rescan()).await;
            if let Ok((added, removed, changed)) = result {
                if added + removed + changed > 0 {
                    tracing::info!(added, removed, changed, "catalog updated");
                }
            }
        }
    })
}

fn make_watcher(state: &State, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
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
    match watcher.watch(state.catalog.root(), RecursiveMode::Recursive) {
        Ok(()) => Some(watcher),
        Err(e) => {
            tracing::warn!(error = %e, interval_secs = state.config.catalog.rescan_interval_secs,
                "cannot watch the root (inotify watches exhausted?); falling back to periodic rescans");
            None
        }
    }
}
