//! What has arrived, shared between the runtime's fetch tasks (which put
//! verified components in) and the caller's threads (which wait for and
//! take whole objects). An object is handed out once: taking it removes
//! it, so the library holds no reference to memory a caller owns.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard, TryLockError};
use std::time::Instant;

use zt_format::{DType, LogicalType};

use crate::error::{Failure, Kind};
use crate::interrupt::TICK;

/// One verified, decoded component.
#[derive(Debug)]
pub(crate) struct Part {
    pub(crate) role: String,
    pub(crate) data: crate::buffer::Bytes,
    pub(crate) dtype: DType,
    pub(crate) logical: Option<LogicalType>,
}

#[derive(Debug)]
enum Slot {
    /// Requested by fetch `by`; `parts` so far, of `expected`. Only that
    /// fetch fills or fails it: an earlier fetch of the same object, still
    /// winding down after its copy was taken, must not touch this one.
    Waiting {
        by: u64,
        parts: Vec<Part>,
        expected: usize,
    },
    Ready(Vec<Part>),
    Failed(Failure),
}

/// A group of objects asked for together, yielded in arrival order.
#[derive(Debug, Default)]
struct Batch {
    /// Arrived (or failed), not yet yielded.
    arrived: VecDeque<String>,
    /// Not arrived yet.
    outstanding: HashSet<String>,
}

/// Objects one request must fetch, and the fetch's id, which every
/// delivery and failure from it carries.
#[derive(Debug)]
pub(crate) struct Fetch {
    pub(crate) id: u64,
    pub(crate) names: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    slots: HashMap<String, Slot>,
    /// Callers waiting in [`Table::take`], by object: the first to take
    /// an object leaves a copy for the others.
    takers: HashMap<String, usize>,
    batches: HashMap<u64, Batch>,
    next_fetch: u64,
    /// Why nothing more will arrive (the handle was closed).
    closed: Option<String>,
}

/// An object taken: its components, or why it will not arrive.
pub(crate) type Taken = Result<Vec<Part>, Failure>;

/// What a wait ended with.
#[derive(Debug)]
pub(crate) enum Waited<T> {
    Got(T),
    /// The deadline passed first.
    TimedOut,
}

#[derive(Debug, Default)]
pub(crate) struct Table {
    state: Mutex<State>,
    changed: Condvar,
}

impl Table {
    fn lock(&self) -> MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Asks for `names` (each with its number of components) as batch
    /// `id` (numbered by the caller): returns the fetch the caller must
    /// start for those not already arrived or on their way. `taker` names
    /// the one object the caller will [`Table::take`] (`counted`), counted
    /// among its takers from now, so that another caller that takes it
    /// first leaves a copy.
    pub(crate) fn request(&self, id: u64, names: &[(String, usize)], taker: Option<&str>) -> Fetch {
        let mut st = self.lock();
        if let Some(name) = taker {
            *st.takers.entry(name.to_owned()).or_default() += 1;
        }
        let by = st.next_fetch;
        st.next_fetch += 1;
        let mut batch = Batch::default();
        let mut fetch = Vec::new();
        for (name, expected) in names {
            match st.slots.get(name) {
                Some(Slot::Ready(_)) => batch.arrived.push_back(name.clone()),
                Some(Slot::Waiting { .. }) => {
                    batch.outstanding.insert(name.clone());
                }
                Some(Slot::Failed(_)) | None => {
                    st.slots.insert(
                        name.clone(),
                        Slot::Waiting {
                            by,
                            parts: Vec::new(),
                            expected: *expected,
                        },
                    );
                    batch.outstanding.insert(name.clone());
                    fetch.push(name.clone());
                }
            }
        }
        st.batches.insert(id, batch);
        Fetch {
            id: by,
            names: fetch,
        }
    }

    /// A component arrived, verified, through fetch `by`.
    pub(crate) fn deliver(&self, by: u64, object: &str, part: Part) {
        let mut st = self.lock();
        let Some(Slot::Waiting {
            by: owner,
            parts,
            expected,
        }) = st.slots.get_mut(object)
        else {
            return;
        };
        if *owner != by {
            return;
        }
        parts.push(part);
        if parts.len() < *expected {
            return;
        }
        let parts = std::mem::take(parts);
        st.slots.insert(object.to_owned(), Slot::Ready(parts));
        arrived(&mut st, object);
        drop(st);
        self.changed.notify_all();
    }

    /// `object`, asked of fetch `by`, will not arrive: why. `None` fails
    /// it whichever fetch it waits on.
    pub(crate) fn fail(&self, by: Option<u64>, object: &str, why: Failure) {
        let mut st = self.lock();
        match st.slots.get(object) {
            Some(Slot::Waiting { by: owner, .. }) if by.is_none_or(|b| b == *owner) => {}
            _ => return,
        }
        st.slots.insert(object.to_owned(), Slot::Failed(why));
        arrived(&mut st, object);
        drop(st);
        self.changed.notify_all();
    }

    /// After fetch `by` ended: every one of `names` still waiting on it
    /// failed.
    pub(crate) fn ended(&self, by: u64, names: &[String], why: &Failure) {
        for n in names {
            self.fail(Some(by), n, why.clone().about(n, None));
        }
    }

    /// Nothing more will arrive: every waiting object fails with `why`.
    pub(crate) fn close(&self, why: &str) {
        let waiting: Vec<String> = {
            let mut st = self.lock();
            st.closed = Some(why.to_owned());
            st.slots
                .iter()
                .filter(|(_, s)| matches!(s, Slot::Waiting { .. }))
                .map(|(n, _)| n.clone())
                .collect()
        };
        let why = Failure::new(Kind::Other, why);
        for n in waiting {
            self.fail(None, &n, why.clone().about(&n, None));
        }
    }

    /// Waits until `object` arrived or failed and takes it; `check` runs
    /// between waits (to let the caller notice an interrupt) and stops
    /// the wait with its error.
    /// `counted`: the caller was counted among the object's takers when it
    /// asked for it ([`Table::request`]).
    pub(crate) fn take<E>(
        &self,
        object: &str,
        counted: bool,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<Waited<Taken>, E> {
        let mut st = self.lock();
        if !counted {
            *st.takers.entry(object.to_owned()).or_default() += 1;
        }
        loop {
            match st.slots.get(object) {
                Some(Slot::Waiting { .. }) => {}
                Some(_) => {
                    // Leaving in the same hold of the lock as taking: the
                    // takers still counted are exactly those left waiting.
                    let others = leave(&mut st, object);
                    let got = match st.slots.remove(object) {
                        Some(Slot::Ready(parts)) => Ok(parts),
                        Some(Slot::Failed(f)) => {
                            // Every other caller waiting for it learns why.
                            if others > 0 {
                                st.slots.insert(object.to_owned(), Slot::Failed(f.clone()));
                            }
                            Err(f)
                        }
                        _ => Err(Failure::new(Kind::Other, "lost track of the object")),
                    };
                    // Another caller asked for the same object meanwhile
                    // (two threads, one tensor): it gets a copy of its own.
                    if let (Ok(parts), true) = (&got, others > 0) {
                        if let Some(copy) = copies(parts) {
                            st.slots.insert(object.to_owned(), Slot::Ready(copy));
                        }
                    }
                    return Ok(Waited::Got(got));
                }
                None => {
                    leave(&mut st, object);
                    let why = st.closed.clone().unwrap_or_else(|| {
                        format!("object {object:?} was not asked for, or was already taken")
                    });
                    return Ok(Waited::Got(Err(Failure::new(Kind::Other, why))));
                }
            }
            st = match self.wait(st, deadline, &mut check) {
                Ok(Some(st)) => st,
                Ok(None) => {
                    leave(&mut self.lock(), object);
                    return Ok(Waited::TimedOut);
                }
                Err(e) => {
                    leave(&mut self.lock(), object);
                    return Err(e);
                }
            };
        }
    }

    /// The next object of `batch` to arrive, taken, or `None` once every
    /// one was yielded. An object someone else took meanwhile is skipped.
    pub(crate) fn next<E>(
        &self,
        batch: u64,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Result<(), E>,
    ) -> Result<Waited<Option<(String, Taken)>>, E> {
        let mut st = self.lock();
        loop {
            let Some(b) = st.batches.get_mut(&batch) else {
                return Ok(Waited::Got(None));
            };
            if let Some(name) = b.arrived.pop_front() {
                let got = match st.slots.remove(&name) {
                    Some(Slot::Ready(parts)) => Ok(parts),
                    Some(Slot::Failed(f)) => Err(f),
                    Some(waiting) => {
                        st.slots.insert(name, waiting);
                        continue;
                    }
                    None => continue,
                };
                return Ok(Waited::Got(Some((name, got))));
            }
            if b.outstanding.is_empty() {
                st.batches.remove(&batch);
                return Ok(Waited::Got(None));
            }
            st = match self.wait(st, deadline, &mut check)? {
                Some(st) => st,
                None => return Ok(Waited::TimedOut),
            };
        }
    }

    /// The objects that arrived and were not taken, moved out, unless
    /// another thread holds the table (in a forked child: a thread of the
    /// parent's, which will never let go): then none.
    pub(crate) fn take_arrived_unless_held(&self) -> Vec<(String, Vec<Part>)> {
        let mut st = match self.state.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return Vec::new(),
        };
        let names: Vec<String> = st
            .slots
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Ready(_)))
            .map(|(n, _)| n.clone())
            .collect();
        names
            .into_iter()
            .filter_map(|n| match st.slots.remove(&n) {
                Some(Slot::Ready(parts)) => Some((n, parts)),
                _ => None,
            })
            .collect()
    }

    /// Objects that arrived elsewhere (`take_arrived_unless_held`), ready
    /// to be taken here as if fetched.
    pub(crate) fn adopt(&self, arrived: Vec<(String, Vec<Part>)>) {
        let mut st = self.lock();
        for (name, parts) in arrived {
            st.slots.insert(name, Slot::Ready(parts));
        }
    }

    /// Forgets a batch nobody will read from again.
    pub(crate) fn drop_batch(&self, batch: u64) {
        self.lock().batches.remove(&batch);
    }

    /// One wait for a change, at most [`TICK`] so that `check` runs often;
    /// `None` once the deadline passed.
    fn wait<'a, E>(
        &'a self,
        st: MutexGuard<'a, State>,
        deadline: Option<Instant>,
        check: &mut impl FnMut() -> Result<(), E>,
    ) -> Result<Option<MutexGuard<'a, State>>, E> {
        let mut slice = TICK;
        if let Some(d) = deadline {
            match d.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => slice = slice.min(left),
                _ => return Ok(None),
            }
        }
        let st = match self.changed.wait_timeout(st, slice) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
        drop(st);
        check()?;
        Ok(Some(self.lock()))
    }
}

/// One taker of `object` gone (it took it, or gave up): how many are
/// still waiting for it.
fn leave(st: &mut State, object: &str) -> usize {
    let Some(n) = st.takers.get_mut(object) else {
        return 0;
    };
    *n = n.saturating_sub(1);
    let left = *n;
    if left == 0 {
        st.takers.remove(object);
    }
    left
}

/// A copy of every part, in memory of its own (`None` if one could not be
/// made: the next caller fetches the object again).
fn copies(parts: &[Part]) -> Option<Vec<Part>> {
    parts
        .iter()
        .map(|p| {
            Some(Part {
                role: p.role.clone(),
                data: p.data.copy()?,
                dtype: p.dtype,
                logical: p.logical.clone(),
            })
        })
        .collect()
}

/// Moves `object` from outstanding to arrived in every batch waiting for it.
fn arrived(st: &mut State, object: &str) {
    for b in st.batches.values_mut() {
        if b.outstanding.remove(object) {
            b.arrived.push_back(object.to_owned());
        }
    }
}
