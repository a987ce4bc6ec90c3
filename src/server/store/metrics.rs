//! The `ztserve_store_*` family: an object-storage root's requests by
//! operation, the ones that failed, bytes read, piece-cache hits and the
//! bytes it holds, and ranged GETs by duration. Registered in the
//! daemon's registry (`ops::metrics`) when the root is an
//! object store.

use std::time::Duration;

use prometheus::{Histogram, IntCounter, IntCounterVec, IntGauge, Registry};

use crate::server::families::{counter, counter_vec, gauge, histogram, register};

/// Upper bounds, in seconds, of the GET duration histogram.
const GET_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// A request to the store.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op {
    List,
    Head,
    Get,
}

#[derive(Debug)]
pub(crate) struct StoreMetrics {
    requests: IntCounterVec,
    failures: IntCounter,
    bytes: IntCounter,
    cache_hits: IntCounter,
    /// Bytes the piece cache holds, set by the cache as it changes.
    pub(crate) cache_bytes: IntGauge,
    get_seconds: Histogram,
}

impl Default for StoreMetrics {
    fn default() -> Self {
        let m = StoreMetrics {
            requests: counter_vec(
                "ztserve_store_requests_total",
                "Requests to the object store, by operation.",
                &["op"],
            ),
            failures: counter(
                "ztserve_store_failures_total",
                "Object store requests that failed after the client's retries.",
            ),
            bytes: counter(
                "ztserve_store_bytes_total",
                "Bytes read from the object store.",
            ),
            cache_hits: counter(
                "ztserve_store_cache_hits_total",
                "Reads served from recently read pieces instead of the store (storage.cache_bytes).",
            ),
            cache_bytes: gauge(
                "ztserve_store_cache_bytes",
                "Bytes of recently read pieces held in memory, with what keeping them costs (storage.cache_bytes bounds it).",
            ),
            get_seconds: histogram(
                "ztserve_store_get_seconds",
                "Ranged GETs to the object store, by duration.",
                &GET_BUCKETS,
            ),
        };
        for op in [Op::List, Op::Head, Op::Get] {
            m.requests.with_label_values(&[op.label()]);
        }
        m
    }
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::List => "list",
            Op::Head => "head",
            Op::Get => "get",
        }
    }
}

impl StoreMetrics {
    pub(crate) fn request(&self, op: Op) {
        self.requests.with_label_values(&[op.label()]).inc();
    }

    pub(crate) fn failure(&self) {
        self.failures.inc();
    }

    pub(crate) fn read(&self, bytes: u64) {
        self.bytes.inc_by(bytes);
    }

    pub(crate) fn cache_hit(&self) {
        self.cache_hits.inc();
    }

    pub(crate) fn get_took(&self, took: Duration) {
        self.get_seconds.observe(took.as_secs_f64());
    }

    /// Registers the family in the daemon's registry.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(
            registry,
            &[
                &self.requests,
                &self.failures,
                &self.bytes,
                &self.cache_hits,
                &self.cache_bytes,
                &self.get_seconds,
            ],
        )
    }
}
