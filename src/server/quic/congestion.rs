//! The congestion controller for what the daemon sends (`quic.congestion`).
//!
//! `auto`, the default, lets each connection's round trip choose. Cubic,
//! like TCP, reads every lost packet as congestion and halves its window,
//! which costs little where a round trip is short and a great deal where
//! it is long: at 50 ms and 1 % random loss ztp/1 with Cubic moved an
//! 8 MiB model 15 times slower than with BBR, which models the path's
//! bandwidth and round trip and holds its rate through random loss. BBR
//! in turn costs a third on a fast local link (docs/benchmarks.md). So a
//! connection sends with BBR while its least round trip so far is at
//! least `quic.wide_area_rtt_ms`, and with Cubic from the first one below
//! it for good (the least round trip only falls). Both controllers see
//! every event from the start, so the one that takes over knows the path.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::congestion::{BbrConfig, Controller, ControllerFactory, ControllerMetrics, CubicConfig};
use quinn_proto::RttEstimator;

/// Builds a [`ByRoundTrip`] controller for each connection.
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
}

impl ByRoundTripConfig {
    fn controller(&self, now: Instant, current_mtu: u16) -> ByRoundTrip {
        ByRoundTrip {
            cubic: Arc::clone(&self.cubic).build(now, current_mtu),
            bbr: Some(Arc::clone(&self.bbr).build(now, current_mtu)),
            wide_area: self.wide_area,
        }
    }
}

impl ControllerFactory for ByRoundTripConfig {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(self.controller(now, current_mtu))
    }
}

/// Cubic and, while the path looks wide-area, BBR in charge; see the
/// module's documentation.
struct ByRoundTrip {
    cubic: Box<dyn Controller>,
    /// In charge until the path's least round trip falls below
    /// `wide_area`; dropped then.
    bbr: Option<Box<dyn Controller>>,
    wide_area: Duration,
}

impl ByRoundTrip {
    fn governing(&self) -> &dyn Controller {
        match &self.bbr {
            Some(bbr) => bbr.as_ref(),
            None => self.cubic.as_ref(),
        }
    }

    fn each(&mut self, mut event: impl FnMut(&mut dyn Controller)) {
        event(self.cubic.as_mut());
        if let Some(bbr) = &mut self.bbr {
            event(bbr.as_mut());
        }
    }

    /// Takes the path's least round trip so far.
    fn observe(&mut self, min_rtt: Duration) {
        if min_rtt < self.wide_area {
            self.bbr = None;
        }
    }
}

impl Controller for ByRoundTrip {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.each(|c| c.on_sent(now, bytes, last_packet_number));
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.each(|c| c.on_ack(now, sent, bytes, app_limited, rtt));
        // Acknowledgements come after the round trip is sampled; before
        // the first sample there is none, so BBR's start stands.
        self.observe(rtt.min());
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.each(|c| c.on_end_acks(now, in_flight, app_limited, largest_packet_num_acked));
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.each(|c| c.on_congestion_event(now, sent, is_persistent_congestion, lost_bytes));
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.each(|c| c.on_mtu_update(new_mtu));
    }

    fn window(&self) -> u64 {
        self.governing().window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.governing().metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(ByRoundTrip {
            cubic: self.cubic.clone_box(),
            bbr: self.bbr.as_ref().map(|b| b.clone_box()),
            wide_area: self.wide_area,
        })
    }

    fn initial_window(&self) -> u64 {
        self.governing().initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The name of the controller in charge of a connection's sending
/// (`quinn::Connection::congestion_state`), for `/metrics`.
pub(super) fn name(controller: Box<dyn Controller>) -> &'static str {
    let any = controller.into_any();
    if let Some(chosen) = any.downcast_ref::<ByRoundTrip>() {
        return if chosen.bbr.is_some() { "bbr" } else { "cubic" };
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
        let mut cubic = CubicConfig::default();
        cubic.initial_window(26_000);
        let config = ByRoundTripConfig::new(cubic, Duration::from_millis(wide_area_ms));
        config.controller(Instant::now(), 1200)
    }

    #[test]
    fn bbr_governs_until_a_round_trip_under_the_bound_then_cubic_for_good() {
        let mut c = controller(10);
        // Before any sample, and while samples stay wide-area: BBR, with
        // its own first window (quinn's 240,000 bytes).
        assert_eq!(c.window(), 240_000);
        c.observe(Duration::from_millis(50));
        assert_eq!(name(c.clone_box()), "bbr");
        // The first round trip under the bound hands over to Cubic, with
        // the window it was configured to start at.
        c.observe(Duration::from_micros(9_999));
        assert_eq!(name(c.clone_box()), "cubic");
        assert_eq!(c.window(), 26_000);
        // The least round trip never grows again; Cubic stays.
        c.observe(Duration::from_millis(50));
        assert_eq!(name(c.clone_box()), "cubic");
    }

    #[test]
    fn both_controllers_see_every_event_while_undecided() {
        let mut c = controller(10);
        let now = Instant::now();
        // A loss seen while BBR is in charge also reaches Cubic, which
        // then takes over with a window already cut.
        c.on_sent(now, 12_000, 10);
        c.on_congestion_event(now, now, false, 1_200);
        c.observe(Duration::from_millis(1));
        assert!(c.window() < 26_000, "{}", c.window());
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
