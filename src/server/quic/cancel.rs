//! One request's cancellation state: the client's `cancel` of the whole
//! request, an object of it or one component, noted by the control loop
//! and asked by each component's stream before every write.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

/// Cancellation state of one request.
#[derive(Debug, Default)]
pub(super) struct RequestCtl {
    all: AtomicBool,
    parts: Mutex<Vec<(String, Option<String>)>>,
    pub(super) notify: Notify,
}

impl RequestCtl {
    /// Cancels the request (no object), an object of it, or one component.
    pub(super) fn cancel(&self, object: Option<String>, component: Option<String>) {
        match object {
            None => self.all.store(true, Ordering::SeqCst),
            Some(o) => {
                if let Ok(mut p) = self.parts.lock() {
                    p.push((o, component));
                }
            }
        }
        self.notify.notify_waiters();
    }

    pub(super) fn is_cancelled(&self, object: &str, component: &str) -> bool {
        self.all.load(Ordering::SeqCst)
            || self.parts.lock().is_ok_and(|p| {
                p.iter()
                    .any(|(o, c)| o == object && c.as_deref().is_none_or(|c| c == component))
            })
    }
}
