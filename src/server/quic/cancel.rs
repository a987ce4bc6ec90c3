//! One request's cancellation state: the client's `cancel` of the whole
//! request, an object of it or one component, noted by the control loop
//! and asked by each component's stream before every write.
//!
//! A cancel is kept only if it names something the request sends and is
//! not cancelled already: what a client can make the request hold is
//! bounded by the request's own components, and a storm of cancels wakes
//! the request's writers at most once per object and component.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use tokio::sync::Notify;

/// What of one object is cancelled.
#[derive(Debug)]
enum Cancelled {
    Object,
    Components(HashSet<String>),
}

/// Cancellation state of one request.
#[derive(Debug, Default)]
pub(super) struct RequestCtl {
    all: AtomicBool,
    /// The request's components, by object.
    sends: HashMap<String, HashSet<String>>,
    parts: Mutex<HashMap<String, Cancelled>>,
    pub(super) notify: Notify,
}

impl RequestCtl {
    /// The state of a request sending `components` (object, component).
    pub(super) fn new<'a>(components: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut sends: HashMap<String, HashSet<String>> = HashMap::new();
        for (object, component) in components {
            sends
                .entry(object.to_owned())
                .or_default()
                .insert(component.to_owned());
        }
        RequestCtl {
            sends,
            ..RequestCtl::default()
        }
    }

    /// Cancels the request (no object), an object of it, or one component;
    /// the writers are woken only if that changed anything.
    pub(super) fn cancel(&self, object: Option<String>, component: Option<String>) {
        let changed = match object {
            None => !self.all.swap(true, Ordering::SeqCst),
            Some(o) => self.cancel_part(o, component),
        };
        if changed {
            self.notify.notify_waiters();
        }
    }

    fn cancel_part(&self, object: String, component: Option<String>) -> bool {
        let Some(roles) = self.sends.get(&object) else {
            return false;
        };
        if component.as_ref().is_some_and(|c| !roles.contains(c)) {
            return false;
        }
        let Ok(mut parts) = self.parts.lock() else {
            return false;
        };
        match (parts.get_mut(&object), component) {
            (Some(Cancelled::Object), _) => false,
            (Some(Cancelled::Components(done)), Some(c)) => done.insert(c),
            (_, None) => {
                parts.insert(object, Cancelled::Object);
                true
            }
            (None, Some(c)) => {
                parts.insert(object, Cancelled::Components(HashSet::from([c])));
                true
            }
        }
    }

    pub(super) fn is_cancelled(&self, object: &str, component: &str) -> bool {
        self.all.load(Ordering::SeqCst)
            || self.parts.lock().is_ok_and(|p| match p.get(object) {
                Some(Cancelled::Object) => true,
                Some(Cancelled::Components(c)) => c.contains(component),
                None => false,
            })
    }

    /// Objects and components noted as cancelled (for tests).
    #[cfg(test)]
    fn noted(&self) -> usize {
        self.parts.lock().map_or(0, |p| {
            p.values()
                .map(|c| match c {
                    Cancelled::Object => 1,
                    Cancelled::Components(c) => c.len(),
                })
                .sum()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctl() -> RequestCtl {
        RequestCtl::new([("a", "data"), ("b", "data"), ("b", "offsets")])
    }

    #[test]
    fn cancels_name_what_the_request_sends() {
        let c = ctl();
        c.cancel(Some("b".into()), Some("offsets".into()));
        assert!(c.is_cancelled("b", "offsets"));
        assert!(!c.is_cancelled("b", "data"));
        assert!(!c.is_cancelled("a", "data"));
        c.cancel(Some("a".into()), None);
        assert!(c.is_cancelled("a", "data"));
        c.cancel(None, None);
        assert!(c.is_cancelled("b", "data"));
    }

    #[test]
    fn a_storm_of_cancels_holds_nothing_it_does_not_send() {
        let c = ctl();
        for i in 0..10_000 {
            c.cancel(Some(format!("nope{i}")), None);
            c.cancel(Some("a".into()), Some(format!("nope{i}")));
            c.cancel(Some("b".into()), Some("data".into()));
        }
        assert_eq!(c.noted(), 1, "only b's data, once");
        c.cancel(Some("b".into()), None);
        c.cancel(Some("b".into()), Some("offsets".into()));
        assert_eq!(c.noted(), 1, "the whole of b replaces its parts");
        assert!(c.is_cancelled("b", "offsets"));
    }
}
