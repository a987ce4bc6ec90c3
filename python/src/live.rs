//! What an open handle reads through in one process: its source (the
//! client and its connections), the table its fetches fill, and their
//! tasks. A child forked from the process that opened the handle sets the
//! parent's aside on first use, keeping only the objects that had arrived
//! whole, and opens the source again for itself, every fetch still pinned
//! to the version (ETag) the parent read: the child gets the same bytes or
//! an error naming the change (docs/python.md, "Processes").

use std::sync::Arc;

use tokio::task::JoinHandle;

use crate::process::Maker;
use crate::source::Source;
use crate::table::Table;

#[derive(Debug)]
pub(crate) struct Live {
    /// The process this belongs to.
    pub(crate) maker: Maker,
    /// `None` once closed (which dropped the client and its connections).
    pub(crate) source: Option<Source>,
    pub(crate) table: Arc<Table>,
    pub(crate) tasks: Vec<JoinHandle<()>>,
    /// Batches numbered below this were started by the process this one
    /// was forked from, in a table this process never reads.
    first_batch: u64,
    next_batch: u64,
}

impl Live {
    /// Reading through `source` (`None`: closed, as `label` says), its
    /// batches numbered from `first_batch`.
    pub(crate) fn new(source: Option<Source>, first_batch: u64, label: &str) -> Live {
        let table = Arc::<Table>::default();
        if source.is_none() {
            table.close(&closed_why(label));
        }
        Live {
            maker: Maker::this(),
            source,
            table,
            tasks: Vec::new(),
            first_batch,
            next_batch: first_batch,
        }
    }

    /// The number of the next batch started.
    pub(crate) fn number_batch(&mut self) -> u64 {
        let id = self.next_batch;
        self.next_batch += 1;
        id
    }

    /// Where a forked child numbers its batches from: after every one
    /// this process started.
    pub(crate) fn batches_after(&self) -> u64 {
        self.next_batch
    }

    /// Whether `batch` was started before this process was forked (in
    /// its parent, or further up), and so never arrives here.
    pub(crate) fn asked_before_fork(&self, batch: u64) -> bool {
        match self.maker.forked() {
            // Still the parent's state: every batch it numbered.
            true => batch < self.next_batch,
            false => batch < self.first_batch,
        }
    }

    /// Keeps `task`, forgetting those finished.
    pub(crate) fn track(&mut self, task: JoinHandle<()>) {
        self.tasks.retain(|t| !t.is_finished());
        self.tasks.push(task);
    }

    /// Cancels everything in flight (waiting callers get an error) and
    /// drops the source, closing its connections.
    pub(crate) fn close(&mut self, label: &str) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.source = None;
        self.table.close(&closed_why(label));
    }

    /// A parent's state in a forked child, replaced by `with`: leaked, its
    /// locks, tasks and connections untouched (the table's lock may have
    /// been held by a parent's I/O thread at the fork; closing the
    /// connections would close the parent's, whose sockets the child
    /// shares; dropping the tasks would wait on the parent's runtime).
    /// With `keep_arrived`, the objects that had arrived in the parent
    /// and were not taken move to `with`'s table: the child's copies of
    /// the parent's memory, verified there, not fetched again (none if a
    /// parent's thread held the table at the fork).
    pub(crate) fn set_aside(&mut self, with: Live, keep_arrived: bool) {
        let parent = std::mem::replace(self, with);
        if keep_arrived {
            self.table.adopt(parent.table.take_arrived_unless_held());
        }
        std::mem::forget(parent);
    }
}

pub(crate) fn closed_why(label: &str) -> String {
    format!("{label}: the handle was closed")
}
