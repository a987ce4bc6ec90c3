//! Prometheus metrics through one registry per daemon (the `prometheus`
//! crate): each part of the daemon owns its metric family's handles
//! (made with `crate::server::families`) and registers them in
//! [`Metrics::registry`] when the daemon starts; `/metrics` is that
//! registry in the text format. HTTP metrics are labelled by route
//! template, never by raw path.

use std::time::Duration;

use prometheus::{
    Encoder as _, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Registry, TextEncoder,
};

use crate::server::families::{
    counter, counter_vec, defined, gauge, gauge_vec, histogram, register,
};

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// The daemon's registry and its own families: requests, bytes sent,
/// QUIC connections and streams, files changed under a request, files in
/// the catalog, the ztp/1 send budget.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
    bytes_sent: IntCounter,
    quic_bytes_sent: IntCounter,
    quic_connections: IntGauge,
    quic_streams: IntGauge,
    /// Requests that found their file changed under the catalogued
    /// version, by when: before the headers, and mid-response (cut).
    changed: IntCounterVec,
    files: IntGaugeVec,
    send_budget_held: IntGauge,
    quic_path: QuicPath,
}

/// What ended QUIC connections reported of their UDP path, and the
/// socket's offloads.
#[derive(Debug)]
struct QuicPath {
    mtu: Histogram,
    udp: IntCounterVec,
    lost: IntCounterVec,
    congestion: IntCounterVec,
    gso: IntGauge,
    gro: IntGauge,
}

/// Buckets of the path MTU reached: QUIC's least, Ethernet under IPv6 and
/// IPv4, then larger links, up to the most sent in batches (GSO) and the
/// least and most sent one to a system call (loopback).
const MTU_BUCKETS: &[f64] = &[
    1200.0, 1452.0, 1472.0, 3000.0, 6000.0, 6500.0, 32000.0, 65507.0,
];

impl QuicPath {
    fn new() -> QuicPath {
        let udp = counter_vec(
            "ztserve_quic_udp_total",
            "UDP traffic of ended QUIC connections: datagrams and the system calls that carried them, by direction (tx: datagrams per call above 1 means segmentation offload, GSO, is in use), and the MTU probes among the datagrams sent (none towards loopback peers at bounds of 32,000 bytes or more, whose datagrams start at the bound).",
            &["direction", "what"],
        );
        let lost = counter_vec(
            "ztserve_quic_lost_total",
            "Packets and bytes that ended QUIC connections declared lost, and MTU probes lost (not among the packets).",
            &["what"],
        );
        for labels in [
            ["tx", "datagrams"],
            ["tx", "calls"],
            ["tx", "mtu_probes"],
            ["rx", "datagrams"],
        ] {
            udp.with_label_values(&labels);
        }
        for what in ["packets", "bytes", "mtu_probes"] {
            lost.with_label_values(&[what]);
        }
        let congestion = counter_vec(
            "ztserve_quic_congestion_total",
            "Ended QUIC connections by the congestion controller in charge of their sending when they ended (with quic.congestion = \"auto\", the path's round trip chooses).",
            &["controller"],
        );
        for controller in ["cubic", "bbr", "new_reno"] {
            congestion.with_label_values(&[controller]);
        }
        QuicPath {
            mtu: histogram(
                "ztserve_quic_path_mtu_bytes",
                "The UDP payload size (path MTU) each QUIC connection had when it ended, as its MTU discovery left it (quic.max_udp_payload bounds it).",
                MTU_BUCKETS,
            ),
            udp,
            lost,
            congestion,
            gso: gauge(
                "ztserve_quic_gso_segments",
                "Most datagrams the kernel takes in one send on the QUIC socket (1: no segmentation offload).",
            ),
            gro: gauge(
                "ztserve_quic_gro_segments",
                "Most datagrams the kernel may coalesce into one receive on the QUIC socket (1: no receive offload).",
            ),
        }
    }
}

/// One open thing counted by a gauge, for as long as it is held.
#[derive(Debug)]
pub struct Held(IntGauge);

impl Held {
    fn new(gauge: &IntGauge) -> Held {
        gauge.inc();
        Held(gauge.clone())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let m = Metrics {
            registry: Registry::new(),
            requests: counter_vec(
                "ztserve_http_requests_total",
                "HTTP requests by route template and status.",
                &["route", "status"],
            ),
            latency: defined(HistogramVec::new(
                HistogramOpts::new(
                    "ztserve_http_request_duration_seconds",
                    "Time to response headers, by route template.",
                )
                .buckets(BUCKETS.to_vec()),
                &["route"],
            )),
            bytes_sent: counter("ztserve_bytes_sent_total", "Body bytes sent."),
            quic_bytes_sent: counter(
                "ztserve_quic_bytes_sent_total",
                "Component bytes sent over QUIC.",
            ),
            quic_connections: gauge("ztserve_quic_connections", "Open QUIC connections."),
            quic_streams: gauge("ztserve_quic_streams", "Open component streams."),
            changed: counter_vec(
                "ztserve_file_changed_total",
                "Requests whose file changed (rewritten in place) under the catalogued version: before the headers (the file catalogued again and its new version served) or mid-response (the connection or stream cut).",
                &["when"],
            ),
            files: gauge_vec(
                "ztserve_files",
                "Files in the catalog by state.",
                &["state"],
            ),
            send_budget_held: gauge(
                "ztserve_quic_send_budget_held_bytes",
                "Component bytes read for ztp/1 and not yet acknowledged by the clients (quic.send_budget_bytes bounds it).",
            ),
            quic_path: QuicPath::new(),
        };
        // Both labels of each are known now: they show as 0 before the
        // first such event.
        for when in ["before_headers", "mid_response"] {
            m.changed.with_label_values(&[when]);
        }
        for state in ["served", "unavailable"] {
            m.files.with_label_values(&[state]);
        }
        let own = register(
            &m.registry,
            &[
                &m.requests,
                &m.changed,
                &m.latency,
                &m.bytes_sent,
                &m.quic_bytes_sent,
                &m.quic_connections,
                &m.quic_streams,
                &m.send_budget_held,
                &m.files,
                &m.quic_path.mtu,
                &m.quic_path.udp,
                &m.quic_path.lost,
                &m.quic_path.congestion,
                &m.quic_path.gso,
                &m.quic_path.gro,
            ],
        );
        defined(own);
        m
    }
}

impl Metrics {
    /// The registry every part of the daemon registers its families in.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Records one finished request.
    pub fn record(&self, route: &'static str, status: u16, elapsed: Duration) {
        let code = axum::http::StatusCode::from_u16(status);
        let code = code
            .as_ref()
            .map_or("other", axum::http::StatusCode::as_str);
        self.requests.with_label_values(&[route, code]).inc();
        self.latency
            .with_label_values(&[route])
            .observe(elapsed.as_secs_f64());
    }

    pub fn add_bytes(&self, n: u64) {
        self.bytes_sent.inc_by(n);
    }

    /// Component bytes sent over QUIC (also counted in `bytes_sent`).
    pub fn add_quic_bytes(&self, n: u64) {
        self.quic_bytes_sent.inc_by(n);
    }

    /// Counts an open QUIC connection until the returned value is dropped.
    pub fn quic_connection(&self) -> Held {
        Held::new(&self.quic_connections)
    }

    /// Adds what an ended QUIC connection reported of its path, and the
    /// congestion controller in charge at its end.
    pub fn quic_ended(&self, stats: &quinn::ConnectionStats, controller: &str) {
        let p = &self.quic_path;
        p.congestion.with_label_values(&[controller]).inc();
        let add = |labels: &[&str], n: u64| p.udp.with_label_values(labels).inc_by(n);
        add(&["tx", "datagrams"], stats.udp_tx.datagrams);
        add(&["tx", "calls"], stats.udp_tx.ios);
        add(&["tx", "mtu_probes"], stats.path.sent_plpmtud_probes);
        add(&["rx", "datagrams"], stats.udp_rx.datagrams);
        let lost = |what: &str, n: u64| p.lost.with_label_values(&[what]).inc_by(n);
        lost("packets", stats.path.lost_packets);
        lost("bytes", stats.path.lost_bytes);
        lost("mtu_probes", stats.path.lost_plpmtud_probes);
        // Last: tests take a connection's path MTU as the sign that the
        // rest of what it ended with is in.
        p.mtu.observe(f64::from(stats.path.current_mtu));
    }

    /// Records the offloads the kernel grants the QUIC socket.
    pub fn quic_offloads(&self, gso: usize, gro: usize) {
        let n = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
        self.quic_path.gso.set(n(gso));
        self.quic_path.gro.set(n(gro));
    }

    /// Counts an open component stream until the returned value is dropped.
    pub fn quic_stream(&self) -> Held {
        Held::new(&self.quic_streams)
    }

    /// Counts a response cut because its file changed under it.
    pub fn count_changed_abort(&self) {
        self.changed.with_label_values(&["mid_response"]).inc();
    }

    /// Counts a request that found its file changed before its headers
    /// (and was answered from the refreshed catalog).
    pub fn count_changed_refresh(&self) {
        self.changed.with_label_values(&["before_headers"]).inc();
    }

    pub fn bytes_sent(&self) -> u64 {
        self.bytes_sent.get()
    }

    /// The registry in Prometheus text format (version 0.0.4), after
    /// setting the gauges read at scrape time: the catalog's files by
    /// state and the send budget held.
    pub fn render(&self, served: usize, unavailable: usize, send_budget_held: u64) -> String {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.files
            .with_label_values(&["served"])
            .set(n(served as u64));
        self.files
            .with_label_values(&["unavailable"])
            .set(n(unavailable as u64));
        self.send_budget_held.set(n(send_budget_held));
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "encoding metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family shows with its HELP and TYPE lines, labelled samples
    /// in the text format the tests and dashboards read.
    #[test]
    fn families_render_in_the_text_format() {
        let m = Metrics::default();
        m.record("/v1/files/{*path}", 206, Duration::from_millis(3));
        m.add_bytes(10);
        let _conn = m.quic_connection();
        m.count_changed_abort();
        let text = m.render(3, 1, 4096);
        for line in [
            "# TYPE ztserve_http_requests_total counter",
            "ztserve_http_requests_total{route=\"/v1/files/{*path}\",status=\"206\"} 1",
            "ztserve_http_request_duration_seconds_bucket{route=\"/v1/files/{*path}\",le=\"0.005\"} 1",
            "ztserve_http_request_duration_seconds_count{route=\"/v1/files/{*path}\"} 1",
            "ztserve_bytes_sent_total 10",
            "ztserve_quic_connections 1",
            "ztserve_file_changed_total{when=\"mid_response\"} 1",
            "ztserve_file_changed_total{when=\"before_headers\"} 0",
            "ztserve_files{state=\"served\"} 3",
            "ztserve_files{state=\"unavailable\"} 1",
            "# TYPE ztserve_quic_send_budget_held_bytes gauge",
            "ztserve_quic_send_budget_held_bytes 4096",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
    }
}
