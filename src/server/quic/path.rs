//! The UDP path of each connection: how large its datagrams may grow (a
//! server configuration per kind of peer), and whether the kernel batches
//! them (GSO and GRO). What each connection reported when it ended goes to
//! `/metrics` (`ztserve_quic_path_mtu_bytes`, `ztserve_quic_udp_total`).
//!
//! The bound on a connection's datagrams is `quic.max_udp_payload`, else
//! what the interface facing the peer carries ([`zt_client::udp`]): a
//! loopback peer and a remote one get different bounds, so the endpoint
//! keeps a server configuration for each and picks one per incoming
//! connection.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use quinn::ServerConfig;

/// The server configurations by kind of peer.
#[derive(Debug)]
pub(super) struct Paths {
    loopback: Arc<ServerConfig>,
    remote: Arc<ServerConfig>,
    largest: u16,
}

impl Paths {
    /// `make(bound)`: a server configuration whose MTU discovery stops at
    /// `bound` bytes; `configured`: `quic.max_udp_payload`.
    pub(super) fn new(
        configured: Option<u16>,
        make: impl Fn(u16) -> anyhow::Result<ServerConfig>,
    ) -> anyhow::Result<Paths> {
        // Any loopback address, and any other (one for documentation).
        let near = zt_client::udp::max_payload(configured, Ipv4Addr::LOCALHOST.into());
        let far = zt_client::udp::max_payload(configured, Ipv4Addr::new(192, 0, 2, 1).into());
        tracing::info!(
            loopback = near,
            remote = far,
            "ztp/1 datagrams grow (MTU discovery) up to these payload sizes (quic.max_udp_payload)"
        );
        Ok(Paths {
            loopback: Arc::new(make(near)?),
            remote: Arc::new(make(far)?),
            largest: near.max(far),
        })
    }

    /// The largest payload a peer may be asked to send.
    pub(super) fn largest(&self) -> u16 {
        self.largest
    }

    /// The configuration the endpoint starts with (each incoming
    /// connection is then given its own: [`Paths::config_for`]).
    pub(super) fn any(&self) -> Arc<ServerConfig> {
        Arc::clone(&self.remote)
    }

    /// The configuration for a connection from `peer`.
    pub(super) fn config_for(&self, peer: IpAddr) -> Arc<ServerConfig> {
        let loopback = zt_client::udp::is_loopback(peer);
        Arc::clone(if loopback {
            &self.loopback
        } else {
            &self.remote
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
