//! Prometheus metrics, labelled by route template (never by raw path).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

/// Counters of a running daemon.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    latency: Mutex<BTreeMap<&'static str, Histogram>>,
    bytes_sent: AtomicU64,
    quic_bytes_sent: AtomicU64,
    quic_connections: Arc<AtomicU64>,
    quic_streams: Arc<AtomicU64>,
    /// Requests that found their file changed under the catalogued
    /// version: before the headers, and mid-response (cut).
    changed_before: AtomicU64,
    changed_mid: AtomicU64,
}

/// One open thing counted by a gauge, for as long as it is held.
#[derive(Debug)]
pub struct Held(Arc<AtomicU64>);

impl Held {
    fn new(gauge: &Arc<AtomicU64>) -> Held {
        gauge.fetch_add(1, Ordering::Relaxed);
        Held(Arc::clone(gauge))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    /// Records one finished request.
    pub fn record(&self, route: &'static str, status: u16, elapsed: Duration) {
        if let Ok(mut r) = self.requests.lock() {
            *r.entry((route, status)).or_default() += 1;
        }
        if let Ok(mut l) = self.latency.lock() {
            let h = l.entry(route).or_default();
            let secs = elapsed.as_secs_f64();
            for (b, c) in BUCKETS.iter().zip(h.counts.iter_mut()) {
                if secs <= *b {
                    *c += 1;
                }
            }
            h.count += 1;
            h.sum += secs;
        }
    }

    pub fn add_bytes(&self, n: u64) {
        self.bytes_sent.fetch_add(n, Ordering::Relaxed);
    }

    /// Component bytes sent over QUIC (also counted in `bytes_sent`).
    pub fn add_quic_bytes(&self, n: u64) {
        self.quic_bytes_sent.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts an open QUIC connection until the returned value is dropped.
    pub fn quic_connection(&self) -> Held {
        Held::new(&self.quic_connections)
    }

    /// Counts an open component stream until the returned value is dropped.
    pub fn quic_stream(&self) -> Held {
        Held::new(&self.quic_streams)
    }

    /// Counts a response cut because its file changed under it.
    pub fn count_changed_abort(&self) {
        self.changed_mid.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request that found its file changed before its headers
    /// (and was answered from the refreshed catalog).
    pub fn count_changed_refresh(&self) {
        self.changed_before.fetch_add(1, Ordering::Relaxed);
    }

    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.load(Ordering::Relaxed)
    }

    /// Prometheus text exposition.
    pub fn render(&self, served: usize, unavailable: usize) -> String {
        let mut out = String::new();
        out.push_str(
            "# HELP ztserve_http_requests_total HTTP requests by route template and status.\n",
        );
        out.push_str("# TYPE ztserve_http_requests_total counter\n");
        if let Ok(r) = self.requests.lock() {
            for ((route, status), n) in r.iter() {
                let _ = writeln!(
                    out,
                    "ztserve_http_requests_total{{route=\"{route}\",status=\"{status}\"}} {n}"
                );
            }
        }
        out.push_str("# HELP ztserve_http_request_duration_seconds Time to response headers, by route template.\n");
        out.push_str("# TYPE ztserve_http_request_duration_seconds histogram\n");
        if let Ok(l) = self.latency.lock() {
            for (route, h) in l.iter() {
                for (b, c) in BUCKETS.iter().zip(h.counts.iter()) {
                    let _ = writeln!(out, "ztserve_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"{b}\"}} {c}");
                }
                let _ = writeln!(out, "ztserve_http_request_duration_seconds_bucket{{route=\"{route}\",le=\"+Inf\"}} {}", h.count);
                let _ = writeln!(
                    out,
                    "ztserve_http_request_duration_seconds_sum{{route=\"{route}\"}} {}",
                    h.sum
                );
                let _ = writeln!(
                    out,
                    "ztserve_http_request_duration_seconds_count{{route=\"{route}\"}} {}",
                    h.count
                );
            }
        }
        out.push_str("# HELP ztserve_bytes_sent_total Body bytes sent.\n# TYPE ztserve_bytes_sent_total counter\n");
        let _ = writeln!(out, "ztserve_bytes_sent_total {}", self.bytes_sent());
        out.push_str("# HELP ztserve_quic_bytes_sent_total Component bytes sent over QUIC.\n# TYPE ztserve_quic_bytes_sent_total counter\n");
        let _ = writeln!(
            out,
            "ztserve_quic_bytes_sent_total {}",
            self.quic_bytes_sent.load(Ordering::Relaxed)
        );
        out.push_str("# HELP ztserve_quic_connections Open QUIC connections.\n# TYPE ztserve_quic_connections gauge\n");
        let _ = writeln!(
            out,
            "ztserve_quic_connections {}",
            self.quic_connections.load(Ordering::Relaxed)
        );
        out.push_str("# HELP ztserve_quic_streams Open component streams.\n# TYPE ztserve_quic_streams gauge\n");
        let _ = writeln!(
            out,
            "ztserve_quic_streams {}",
            self.quic_streams.load(Ordering::Relaxed)
        );
        out.push_str("# HELP ztserve_file_changed_total Requests whose file changed (rewritten in place) under the catalogued version: before the headers (the file catalogued again and its new version served) or mid-response (the connection or stream cut).\n# TYPE ztserve_file_changed_total counter\n");
        let _ = writeln!(
            out,
            "ztserve_file_changed_total{{when=\"before_headers\"}} {}",
            self.changed_before.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "ztserve_file_changed_total{{when=\"mid_response\"}} {}",
            self.changed_mid.load(Ordering::Relaxed)
        );
        out.push_str(
            "# HELP ztserve_files Files in the catalog by state.\n# TYPE ztserve_files gauge\n",
        );
        let _ = writeln!(out, "ztserve_files{{state=\"served\"}} {served}");
        let _ = writeln!(out, "ztserve_files{{state=\"unavailable\"}} {unavailable}");
        out
    }
}
