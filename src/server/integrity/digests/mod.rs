//! The digest store: digests the daemon computes for components that
//! carry none of their own (every safetensors tensor, `.zt` components
//! written without one), so that clients verify every byte of every
//! source alike. One store, one configuration section (`[digests]`) and
//! one metric family (`ztserve_digest_*`). Row ranges (`?rows=`, ztp/1
//! `rows`) are hashed as they are sent, never stored: the rows are read
//! for sending anyway, and a digest per range asked for would grow
//! without bound; they are counted in the same family.
//!
//! A file whose digests are not known yet is listed as soon as its header
//! is read and hashed in the background at a limited rate. A request that
//! names what it needs (a component, a manifest `?select=`, a ztp/1 get
//! with a selection) hashes only that, at full speed, and is served at
//! once under the file's provisional ETag; its raw bytes need no digest
//! and are served at once too. A request for the whole manifest waits
//! until every digest is in, and moves the file to the front at full
//! speed. Digests are kept in `state_dir/digests`, keyed by the file's
//! identity, so a restart does not hash again and a changed file is
//! hashed anew. It is a cache: replicas never depend on it.

mod store;
mod verifier;
mod worker;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use store::{Computed, Store};
pub(crate) use verifier::start as start_verifier;
pub(crate) use worker::{Hasher, Settle};

/// The `ztserve_digest_*` counters.
#[derive(Debug, Default)]
pub(crate) struct DigestMetrics {
    files: AtomicU64,
    bytes: AtomicU64,
    failures: AtomicU64,
    pending: AtomicU64,
    pub(crate) store_hits: AtomicU64,
    /// Row ranges sent under a digest of their own, and their bytes.
    pub(crate) rows: AtomicU64,
    pub(crate) row_bytes: AtomicU64,
    /// Responses cut off because a component failed its digest after
    /// their headers went out.
    aborts: AtomicU64,
    /// The background verifier's components checked, their bytes, and
    /// the components left as of its last pass.
    verified: AtomicU64,
    verified_bytes: AtomicU64,
    unverified: AtomicU64,
}

impl DigestMetrics {
    /// Counts bytes read to compute digests.
    pub(crate) fn count_hashed(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn count_abort(&self) {
        self.aborts.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_verified(&self, bytes: u64) {
        self.verified.fetch_add(1, Ordering::Relaxed);
        self.verified_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn set_unverified(&self, n: u64) {
        self.unverified.store(n, Ordering::Relaxed);
    }

    /// Appends the family in Prometheus text format.
    pub(crate) fn render(&self, out: &mut String) {
        let rows = [
            (
                "files_total",
                "counter",
                "Files whose missing digests were computed.",
                &self.files,
            ),
            (
                "bytes_total",
                "counter",
                "Bytes read to compute digests.",
                &self.bytes,
            ),
            (
                "failures_total",
                "counter",
                "Files that could not be hashed.",
                &self.failures,
            ),
            (
                "pending",
                "gauge",
                "Files waiting to be hashed.",
                &self.pending,
            ),
            (
                "store_hits_total",
                "counter",
                "Files whose computed digests came from the store instead of hashing.",
                &self.store_hits,
            ),
            (
                "rows_total",
                "counter",
                "Row ranges hashed to be sent under a digest of their own.",
                &self.rows,
            ),
            (
                "rows_bytes_total",
                "counter",
                "Bytes of row ranges hashed.",
                &self.row_bytes,
            ),
            (
                "verified_total",
                "counter",
                "Components whose digest the background verifier checked against the file.",
                &self.verified,
            ),
            (
                "verified_bytes_total",
                "counter",
                "Bytes the background verifier read.",
                &self.verified_bytes,
            ),
            (
                "unverified",
                "gauge",
                "Served components not checked against their digest yet (background verifier's count).",
                &self.unverified,
            ),
            (
                "aborts_total",
                "counter",
                "Responses cut off because a component failed its digest after their headers went out.",
                &self.aborts,
            ),
        ];
        for (name, kind, help, v) in rows {
            let _ = writeln!(out, "# HELP ztserve_digest_{name} {help}\n# TYPE ztserve_digest_{name} {kind}\nztserve_digest_{name} {}", v.load(Ordering::Relaxed));
        }
    }
}
