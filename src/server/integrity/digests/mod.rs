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

use prometheus::{IntCounter, IntGauge, Registry};

use crate::server::families::{counter, gauge, register};

pub(crate) use store::{Computed, Store};

/// The `ztserve_digest_*` family.
#[derive(Debug)]
pub(crate) struct DigestMetrics {
    files: IntCounter,
    bytes: IntCounter,
    failures: IntCounter,
    pub(crate) pending: IntGauge,
    pub(crate) store_hits: IntCounter,
    /// Row ranges sent under a digest of their own, and their bytes.
    pub(crate) rows: IntCounter,
    pub(crate) row_bytes: IntCounter,
    /// Responses cut off because a component failed its digest after
    /// their headers went out.
    aborts: IntCounter,
    /// The background verifier's components checked, their bytes, and
    /// the components left as of its last pass.
    verified: IntCounter,
    verified_bytes: IntCounter,
    unverified: IntGauge,
}

impl Default for DigestMetrics {
    fn default() -> Self {
        DigestMetrics {
            files: counter(
                "ztserve_digest_files_total",
                "Files whose missing digests were computed.",
            ),
            bytes: counter("ztserve_digest_bytes_total", "Bytes read to compute digests."),
            failures: counter(
                "ztserve_digest_failures_total",
                "Files that could not be hashed.",
            ),
            pending: gauge("ztserve_digest_pending", "Files waiting to be hashed."),
            store_hits: counter(
                "ztserve_digest_store_hits_total",
                "Files whose computed digests came from the store instead of hashing.",
            ),
            rows: counter(
                "ztserve_digest_rows_total",
                "Row ranges hashed to be sent under a digest of their own.",
            ),
            row_bytes: counter(
                "ztserve_digest_rows_bytes_total",
                "Bytes of row ranges hashed.",
            ),
            aborts: counter(
                "ztserve_digest_aborts_total",
                "Responses cut off because a component failed its digest after their headers went out.",
            ),
            verified: counter(
                "ztserve_digest_verified_total",
                "Components whose digest the background verifier checked against the file.",
            ),
            verified_bytes: counter(
                "ztserve_digest_verified_bytes_total",
                "Bytes the background verifier read.",
            ),
            unverified: gauge(
                "ztserve_digest_unverified",
                "Served components not checked against their digest yet (background verifier's count).",
            ),
        }
    }
}

impl DigestMetrics {
    /// Counts bytes read to compute digests.
    pub(crate) fn count_hashed(&self, n: u64) {
        self.bytes.inc_by(n);
    }

    pub(crate) fn count_abort(&self) {
        self.aborts.inc();
    }

    pub(crate) fn count_verified(&self, bytes: u64) {
        self.verified.inc();
        self.verified_bytes.inc_by(bytes);
    }

    pub(crate) fn set_unverified(&self, n: u64) {
        self.unverified.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts a file hashed, or one that could not be.
    pub(crate) fn count_file(&self, hashed: bool) {
        if hashed {
            self.files.inc();
        } else {
            self.failures.inc();
        }
    }

    /// Registers the family in the daemon's registry.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(
            registry,
            &[
                &self.files,
                &self.bytes,
                &self.failures,
                &self.pending,
                &self.store_hits,
                &self.rows,
                &self.row_bytes,
                &self.aborts,
                &self.verified,
                &self.verified_bytes,
                &self.unverified,
            ],
        )
    }
}
