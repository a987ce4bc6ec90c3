//! What a process keeps for its whole life and a child forked from it
//! must not share: the TLS configurations kept per trust policy (their
//! session stores and refusal logs) and the system's root certificates.
//! Their locks are taken by I/O threads; a child forked while one of its
//! parent's threads held one would wait for it for ever (`fork` copies
//! only the thread that called it), and the parent's session tickets are
//! the parent's. So each value is tagged with the process that made it,
//! found without taking a lock, and a child makes its own on first use,
//! leaving the parent's alone (leaked, not dropped: dropping could meet
//! the same locks). The Python package forks under `DataLoader` workers
//! and `multiprocessing` (docs/python.md, "Processes").

use std::sync::Arc;

use arc_swap::ArcSwapOption;

/// A value and the process that made it.
#[derive(Debug)]
pub(crate) struct Owned<T> {
    pid: u32,
    pub(crate) value: T,
}

/// A value per process.
#[derive(Debug)]
pub(crate) struct PerProcess<T> {
    slot: ArcSwapOption<Owned<T>>,
}

impl<T> PerProcess<T> {
    pub(crate) const fn new() -> Self {
        PerProcess {
            slot: ArcSwapOption::const_empty(),
        }
    }

    /// This process's value, made with `make` on its first use here.
    /// Threads of one process that meet it unmade at once may each make
    /// one; the last kept wins (the values here are caches).
    pub(crate) fn get(&self, make: impl FnOnce() -> T) -> Arc<Owned<T>> {
        self.get_for(std::process::id(), make)
    }

    fn get_for(&self, pid: u32, make: impl FnOnce() -> T) -> Arc<Owned<T>> {
        if let Some(current) = self.slot.load_full().filter(|c| c.pid == pid) {
            return current;
        }
        let fresh = Arc::new(Owned { pid, value: make() });
        if let Some(before) = self.slot.swap(Some(Arc::clone(&fresh))) {
            if before.pid != pid {
                // The parent's, whose locks its threads may have held.
                std::mem::forget(before);
            }
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn a_child_makes_its_own_and_never_waits_for_the_parents_lock() {
        let kept: PerProcess<Mutex<u32>> = PerProcess::new();
        let parent = kept.get_for(1, || Mutex::new(7));
        assert!(Arc::ptr_eq(&parent, &kept.get_for(1, || Mutex::new(0))));
        // The parent's lock held, as by a thread a forked child lacks.
        let held = parent.value.lock().unwrap();
        let child = kept.get_for(2, || Mutex::new(0));
        assert_eq!(
            *child.value.lock().unwrap(),
            0,
            "the child's own, not waited for"
        );
        assert!(Arc::ptr_eq(&child, &kept.get_for(2, || Mutex::new(9))));
        assert_eq!(*held, 7);
    }
}
