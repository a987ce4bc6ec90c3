//! The UDP path of each connection: how large its datagrams may grow (a
//! server configuration per kind of peer), and whether the kernel batches
//! them (GSO and GRO). What each connection reported when it ended goes to
//! `/metrics` (`ztserve_quic_path_mtu_bytes`, `ztserve_quic_udp_total`).
//!
//! The bound on a connection's datagrams is `quic.max_udp_payload`, else
//! what the interfaces carry ([`zt_client::udp::max_payload`]): a loopback
//! peer, a remote IPv4 one and a remote IPv6 one get different bounds, so
//! the endpoint keeps a server configuration for each (one configuration
//! but for its transport settings: one certificate, one token key) and
//! picks one per incoming connection.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use quinn::{ServerConfig, TransportConfig};

/// The server configurations by kind of peer.
#[derive(Debug)]
pub(super) struct Paths {
    loopback: Arc<ServerConfig>,
    remote_v4: Arc<ServerConfig>,
    remote_v6: Arc<ServerConfig>,
    largest: u16,
}

impl Paths {
    /// `base` with, for each kind of peer, `transport(bound)`, whose
    /// datagrams grow to that kind's bound; `configured`:
    /// `quic.max_udp_payload`.
    pub(super) fn new(
        configured: Option<u16>,
        base: &ServerConfig,
        transport: impl Fn(u16) -> anyhow::Result<TransportConfig>,
    ) -> anyhow::Result<Paths> {
        let bound = |peer: IpAddr| zt_client::udp::max_payload(configured, peer);
        // Any loopback address (IPv6's bound, 19 bytes less than IPv4's,
        // serves both), and any other (ones for documentation).
        let near = bound(Ipv4Addr::LOCALHOST.into()).min(bound(Ipv6Addr::LOCALHOST.into()));
        let far_v4 = bound(Ipv4Addr::new(192, 0, 2, 1).into());
        let far_v6 = bound(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1).into());
        tracing::info!(
            loopback = near,
            remote_ipv4 = far_v4,
            remote_ipv6 = far_v6,
            "ztp/1 datagrams grow (MTU discovery) up to these payload sizes (quic.max_udp_payload)"
        );
        let make = |up_to: u16| -> anyhow::Result<Arc<ServerConfig>> {
            let t = transport(up_to)?;
            let mut config = base.clone();
            config.transport_config(Arc::new(t));
            Ok(Arc::new(config))
        };
        Ok(Paths {
            loopback: make(near)?,
            remote_v4: make(far_v4)?,
            remote_v6: make(far_v6)?,
            largest: near.max(far_v4).max(far_v6),
        })
    }

    /// The largest payload a peer may be asked to send.
    pub(super) fn largest(&self) -> u16 {
        self.largest
    }

    /// The configuration the endpoint starts with (each incoming
    /// connection is then given its own: [`Paths::config_for`]).
    pub(super) fn any(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.remote_v6)
    }

    /// The configuration for a connection from `peer`.
    pub(super) fn config_for(&self, peer: IpAddr) -> Arc<ServerConfig> {
        let v4 = match peer {
            IpAddr::V4(_) => true,
            IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some(),
        };
        Arc::clone(match (zt_client::udp::is_loopback(peer), v4) {
            (true, _) => &self.loopback,
            (false, true) => &self.remote_v4,
            (false, false) => &self.remote_v6,
        })
    }

    /// The offloads the kernel grants `socket`: most datagrams per send
    /// (GSO) and per receive (GRO), 1 for none; logged.
    pub(super) fn offloads(socket: &std::net::UdpSocket) -> (usize, usize) {
        match quinn::udp::UdpSocketState::new(socket.into()) {
            Ok(s) => {
                let (gso, gro) = (s.max_gso_segments(), s.gro_segments());
                tracing::info!(
                    gso,
                    gro,
                    "QUIC UDP offloads: datagrams per send (GSO) and per receive (GRO)"
                );
                (gso, gro)
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the QUIC socket's offloads");
                (1, 1)
            }
        }
    }
}
