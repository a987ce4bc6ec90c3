//! The congestion controller for what the daemon sends (`quic.congestion`).
//!
//! `auto`, the default, lets each connection's round trip choose. Cubic,
//! like TCP, reads every lost packet as congestion and halves its window:
//! cheap where a round trip is short, ruinous where it is long and the
//! loss is random. BBR models the path's bandwidth and round trip instead
//! and holds its rate through random loss, but costs about a third on a
//! fast local link (docs/benchmarks.md, "Congestion control by round
//! trip"). So a path sends with BBR while its least round trip so far is
//! at least `quic.wide_area_rtt_ms`, and with a fresh Cubic from the end
//! of the first acknowledgement that finds it below that, for the rest of
//! the path's life (the least round trip only falls; quinn keeps the
//! controller when only an IPv4 client's port changes, and gives any other
//! new address a new path, which starts again with BBR).
//!
//! quinn updates a path's round trip after handing an acknowledgement to
//! the controller, and before the first sample shows its own initial
//! estimate: so the hand-over comes one acknowledgement late (on a local
//! network usually still within the handshake), and the bound must stay
//! under that estimate for BBR to be kept until a path is measured
//! ([`crate::server::config::MAX_WIDE_AREA_RTT_MS`]).

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{BbrConfig, Controller, ControllerFactory, ControllerMetrics, CubicConfig};
use quinn_proto::RttEstimator;

/// Builds a [`ByRoundTrip`] controller for each path.
#[derive(Debug)]
pub(super) struct ByRoundTripConfig {
    cubic: Arc<CubicConfig>,
    bbr: Arc<BbrConfig>,
    wide_area: Duration,
}

impl ByRoundTripConfig {
    /// Cubic as `cubic` configures it, BBR with quinn's defaults, and BBR
    /// for paths whose least round trip is at least `wide_area`.
    pub(super) fn new(cubic: CubicConfig, wide_area: Duration) -> Self {
        ByRoundTripConfig {
            cubic: Arc::new(cubic),
            bbr: Arc::new(BbrConfig::default()),
            wide_area,
        }
    }

    fn controller(self: Arc<Self>, now: Instant, mtu: u16) -> ByRoundTrip {
        ByRoundTrip {
            governing: Arc::clone(&self.bbr).build(now, mtu),
            wide_area: true,
            least: Duration::MAX,
            mtu,
            config: self,
        }
    }
}

impl ControllerFactory for ByRoundTripConfig {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(self.controller(now, current_mtu))
    }
}

/// BBR until the path's round trip says it is local, then Cubic; see the
/// module's documentation.
struct ByRoundTrip {
    config: Arc<ByRoundTripConfig>,
    governing: Box<dyn Controller>,
    /// Whether `governing` is BBR.
    wide_area: bool,
    /// The path's least round trip, as the last acknowledgement saw it.
    least: Duration,
    /// The path's MTU, for the Cubic that takes over.
    mtu: u16,
}

impl ByRoundTrip {
    /// Takes the path's least round trip so far (at `now`).
    fn observe(&mut self, now: Instant, min_rtt: Duration) {
        if self.wide_area && min_rtt < self.config.wide_area {
            self.governing = Arc::clone(&self.config.cubic).build(now, self.mtu);
            self.wide_area = false;
        }
    }
}

impl Controller for ByRoundTrip {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.governing.on_sent(now, bytes, last_packet_number);
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.governing.on_ack(now, sent, bytes, app_limited, rtt);
        self.least = rtt.min();
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.governing
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
        // Between acknowledgements, so each goes to one controller whole.
        self.observe(now, self.least);
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.governing
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.mtu = new_mtu;
        self.governing.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.governing.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.governing.metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(ByRoundTrip {
            config: Arc::clone(&self.config),
            governing: self.governing.clone_box(),
            wide_area: self.wide_area,
            least: self.least,
            mtu: self.mtu,
        })
    }

    fn initial_window(&self) -> u64 {
        self.governing.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The name of the controller in charge of a connection's sending
/// (`quinn::Connection::congestion_state`), for `/metrics`: "bbr",
/// "new_reno", or "cubic" (also for a type this daemon does not build).
pub(super) fn name(controller: Box<dyn Controller>) -> &'static str {
    let any = controller.into_any();
    if let Some(chosen) = any.downcast_ref::<ByRoundTrip>() {
        return if chosen.wide_area { "bbr" } else { "cubic" };
    }
    if any.is::<quinn::congestion::Bbr>() {
        "bbr"
    } else if any.is::<quinn::congestion::NewReno>() {
        "new_reno"
    } else {
        "cubic"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn controller(wide_area_ms: u64) -> ByRoundTrip {
        // 6,500-byte datagrams: a first window of four, 26,000 bytes.
        let cubic = zt_client::udp::cubic(6_500);
        let config = ByRoundTripConfig::new(cubic, Duration::from_millis(wide_area_ms));
        Arc::new(config).controller(Instant::now(), 1200)
    }

    #[test]
    fn bbr_governs_until_a_round_trip_under_the_bound_then_cubic_for_good() {
        let mut c = controller(10);
        let now = Instant::now();
        // Before any sample (quinn's initial estimate), and while samples
        // stay wide-area: BBR, with its own first window (240,000 bytes).
        assert_eq!(c.window(), 240_000);
        c.observe(now, Duration::from_millis(333));
        c.observe(now, Duration::from_millis(50));
        // The bound itself is wide-area.
        c.observe(now, Duration::from_millis(10));
        assert_eq!(name(c.clone_box()), "bbr");
        // The first round trip under the bound hands over to a fresh
        // Cubic, with the window it was configured to start at.
        c.observe(now, Duration::from_micros(9_999));
        assert_eq!(name(c.clone_box()), "cubic");
        assert_eq!(c.window(), 26_000);
        // A loss is Cubic's now; the least round trip never grows again.
        c.on_congestion_event(now, now, false, 1_200);
        c.observe(now, Duration::from_millis(50));
        assert_eq!(name(c.clone_box()), "cubic");
        assert!(c.window() < 26_000, "{}", c.window());
    }

    #[test]
    fn the_cubic_that_takes_over_has_the_paths_mtu() {
        let mut c = controller(10);
        c.on_mtu_update(6_500);
        c.observe(Instant::now(), Duration::from_millis(1));
        // Cubic's least window is two datagrams of the path's MTU.
        c.on_congestion_event(Instant::now(), Instant::now(), true, 1_200);
        assert_eq!(c.window(), 13_000);
    }

    #[test]
    fn fixed_controllers_are_named_as_configured() {
        let now = Instant::now();
        let bbr = Arc::new(BbrConfig::default()).build(now, 1200);
        let reno = Arc::new(quinn::congestion::NewRenoConfig::default()).build(now, 1200);
        let cubic = Arc::new(CubicConfig::default()).build(now, 1200);
        assert_eq!(name(bbr), "bbr");
        assert_eq!(name(reno), "new_reno");
        assert_eq!(name(cubic), "cubic");
    }
}
