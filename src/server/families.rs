//! Metric families, as every part of the daemon defines its own with the
//! `prometheus` crate: a counter, a gauge or a histogram (labelled or
//! not), and registering them in the daemon's one registry
//! (`ops::metrics`). A leaf: it uses nothing else of the daemon, so the
//! store, the catalog and the renderers can each keep their family beside
//! what it counts.

use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

/// A metric this daemon defines: its name and labels are constants, so a
/// definition the crate refuses is a bug in this file's callers, which
/// the test of every family catches.
pub(crate) fn defined<T>(made: prometheus::Result<T>) -> T {
    made.unwrap_or_else(|e| panic!("metric definition refused: {e}"))
}

/// A counter named `name`.
pub(crate) fn counter(name: &str, help: &str) -> IntCounter {
    defined(IntCounter::new(name, help))
}

/// A counter of `name` by `labels`.
pub(crate) fn counter_vec(name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    defined(IntCounterVec::new(Opts::new(name, help), labels))
}

/// A gauge named `name`.
pub(crate) fn gauge(name: &str, help: &str) -> IntGauge {
    defined(IntGauge::new(name, help))
}

/// A gauge of `name` by `labels`.
pub(crate) fn gauge_vec(name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    defined(IntGaugeVec::new(Opts::new(name, help), labels))
}

/// A histogram of seconds with upper bounds `buckets`.
pub(crate) fn histogram(name: &str, help: &str, buckets: &[f64]) -> Histogram {
    defined(Histogram::with_opts(
        HistogramOpts::new(name, help).buckets(buckets.to_vec()),
    ))
}

/// A metric handle of any kind, to register a clone of (handles share
/// their values).
pub(crate) trait Family {
    fn boxed(&self) -> Box<dyn Collector>;
}

impl<C: Collector + Clone + 'static> Family for C {
    fn boxed(&self) -> Box<dyn Collector> {
        Box::new(self.clone())
    }
}

/// Registers `families` in `registry`.
pub(crate) fn register(registry: &Registry, families: &[&dyn Family]) -> prometheus::Result<()> {
    for f in families {
        registry.register(f.boxed())?;
    }
    Ok(())
}
