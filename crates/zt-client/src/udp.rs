//! UDP sockets and datagram sizes for QUIC bulk transfer, shared by the
//! server and the client.
//!
//! With the kernel's default buffers (about 200 KiB) a fast sender overruns
//! the receiver and QUIC spends its time recovering dropped packets; 4 MiB
//! each way keeps a 2-core loopback transfer CPU-bound instead.
//!
//! Each packet costs its own encryption, header and (without offloads) a
//! system call, so larger datagrams move more for the same CPU: quinn's
//! MTU discovery probes up from 1,200 bytes to an upper bound
//! ([`max_payload`]), by default the largest MTU of the interfaces that
//! are up (the loopback one for a loopback peer: 65,536 bytes; Ethernet:
//! 1,500; jumbo frames: 9,000), less the IP and UDP headers, and never
//! more than [`GSO_PAYLOAD_MAX`]. Routes are not consulted: a bound above
//! the path's MTU costs lost probes, nothing else.
//! A probe that the path does not carry is lost and tried smaller, without
//! counting as congestion, so a bound above the path's MTU costs only a
//! few probes. On one loopback link, bare quinn moves a 1 GiB stream 2.3x
//! faster at 6,500 bytes than at quinn's default bound of 1,452
//! (`docs/benchmarks.md`).

use std::net::{IpAddr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use std::io;

/// The buffer size both ends ask for unless configured otherwise.
pub const DEFAULT_BUFFER_BYTES: usize = 4 << 20;

/// Binds a UDP socket at `addr` with `want`-byte send and receive buffers,
/// warning when the kernel grants less (`net.core.rmem_max`/`wmem_max`).
pub fn bind(addr: SocketAddr, want: usize) -> io::Result<std::net::UdpSocket> {
    fn what(doing: String) -> impl FnOnce(io::Error) -> io::Error {
        move |e| io::Error::new(e.kind(), format!("{doing}: {e}"))
    }
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        s.set_only_v6(false)
            .map_err(what("enabling dual-stack IPv6 for QUIC".into()))?;
    }
    let _ = s.set_recv_buffer_size(want);
    let _ = s.set_send_buffer_size(want);
    let (rcv, snd) = (
        s.recv_buffer_size().unwrap_or(0),
        s.send_buffer_size().unwrap_or(0),
    );
    // Linux reports double the granted size (bookkeeping included), so a
    // value below `want` means the kernel clamped the request.
    if rcv < want || snd < want {
        tracing::warn!(wanted = want, recv = rcv, send = snd,
            "UDP socket buffers are smaller than requested; raise net.core.rmem_max and net.core.wmem_max for full QUIC throughput");
    }
    s.bind(&addr.into())
        .map_err(what(format!("binding UDP {addr}")))?;
    Ok(s.into())
}

/// The largest UDP payload used with segmentation offload (GSO): quinn
/// hands the kernel up to 10 datagrams per send, and one send carries at
/// most 65,507 bytes (larger ones fail as `EMSGSIZE`, which quinn counts as
/// losses: measured, a bound of 8,952 bytes on loopback sent slower than
/// 1,452).
pub const GSO_PAYLOAD_MAX: u16 = 6_500;

/// The smallest payload QUIC allows.
pub const PAYLOAD_MIN: u16 = 1_200;

/// The largest UDP payload QUIC may grow to towards `peer`: `configured`
/// (`quic.max_udp_payload`, `--max-udp-payload`), else what the
/// interfaces that may face `peer` carry ([`interface_payload`]); in 1,200..=6,500
/// ([`GSO_PAYLOAD_MAX`]).
pub fn max_payload(configured: Option<u16>, peer: IpAddr) -> u16 {
    configured
        .unwrap_or_else(|| interface_payload(peer))
        .clamp(PAYLOAD_MIN, GSO_PAYLOAD_MAX)
}

/// The MTU of the interfaces that may face `peer`, less the IP and UDP
/// headers: for a loopback address the loopback interface's, else the
/// largest of the other interfaces' that are up (Linux's
/// `/sys/class/net`); 1,452 (an Ethernet MTU under IPv6) where none can be
/// read.
pub fn interface_payload(peer: IpAddr) -> u16 {
    let headers: u32 = if unmapped(peer).is_ipv4() {
        20 + 8
    } else {
        40 + 8
    };
    interface_mtu(is_loopback(peer))
        .map(|mtu| u16::try_from(mtu.saturating_sub(headers)).unwrap_or(u16::MAX))
        .unwrap_or(1_452)
}

/// Whether `peer` is a loopback address, IPv4-mapped ones included.
pub fn is_loopback(peer: IpAddr) -> bool {
    unmapped(peer).is_loopback()
}

/// `ip`, an IPv4 address if it is one mapped into IPv6.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// The largest MTU among the loopback interfaces (`loopback`) or among the
/// others, of those up (`operstate` up, or unknown as loopback's is).
fn interface_mtu(loopback: bool) -> Option<u32> {
    const IFF_LOOPBACK: u32 = 0x8;
    let read = |dir: &std::path::Path, name: &str| -> Option<u32> {
        let text = std::fs::read_to_string(dir.join(name)).ok()?;
        let text = text.trim();
        match text.strip_prefix("0x") {
            Some(hex) => u32::from_str_radix(hex, 16).ok(),
            None => text.parse().ok(),
        }
    };
    std::fs::read_dir("/sys/class/net")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|dir| read(dir, "flags").is_some_and(|f| (f & IFF_LOOPBACK != 0) == loopback))
        .filter(|dir| {
            let state = std::fs::read_to_string(dir.join("operstate")).unwrap_or_default();
            matches!(state.trim(), "up" | "unknown")
        })
        .filter_map(|dir| read(&dir, "mtu"))
        .max()
}

/// An endpoint that accepts datagrams of up to `payload` bytes (what it
/// tells its peers they may send). Its receive buffer grows with it:
/// `payload` x 64 (GRO) x 32 (a batch), 13 MiB at 6,500 bytes, touched
/// only as datagrams arrive.
pub fn endpoint_config(payload: u16) -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::default();
    // In range by construction; quinn's default (1,472) otherwise.
    let _ = config.max_udp_payload_size(payload.clamp(PAYLOAD_MIN, GSO_PAYLOAD_MAX).max(1_472));
    config
}

/// Has `transport` discover the path's MTU up to `payload` bytes, its
/// congestion window (CUBIC, quinn's default) starting at
/// [`initial_window`]`(payload)`.
pub fn discover_up_to(transport: &mut quinn::TransportConfig, payload: u16) {
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(payload);
    transport.mtu_discovery_config(Some(mtu));
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(initial_window(payload));
    transport.congestion_controller_factory(std::sync::Arc::new(cubic));
}

/// The congestion window a connection whose datagrams may grow to
/// `payload` bytes starts with: ten such datagrams (RFC 9002's
/// recommendation, 7.2), and never less than quinn's 14,720 bytes, which
/// is what remote peers keep (1,452-byte datagrams).
///
/// RFC 9002 also caps the window at 14,720 bytes for any datagram size
/// under 7,360, which stalls a short exchange on a path with larger
/// datagrams: quinn sends only while a window holds what is in flight
/// and two more datagrams, the MTU probes earn no window (the sender is
/// not yet sending data), so once discovery reaches 6,500 bytes one
/// datagram of data is all a 14,720-byte window lets out, and the
/// receiver acknowledges a lone datagram only after its ACK delay (25
/// ms). Measured on loopback: connect and read 1.3 MB over bare quinn
/// took 3 ms or, in most runs, 30 ms, one gap of 26 ms after the last
/// probe (docs/benchmarks.md, thirty-second session).
pub fn initial_window(payload: u16) -> u64 {
    (10 * u64::from(payload)).max(14_720)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_window_holds_ten_datagrams_or_quinns_default() {
        assert_eq!(initial_window(1_452), 14_720);
        assert_eq!(initial_window(PAYLOAD_MIN), 14_720);
        // Room for a datagram in flight and two more at the largest size.
        assert_eq!(initial_window(GSO_PAYLOAD_MAX), 65_000);
        assert!(initial_window(GSO_PAYLOAD_MAX) > 3 * u64::from(GSO_PAYLOAD_MAX));
    }

    #[test]
    fn payloads_stay_within_quic_and_offload_limits() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(max_payload(Some(100), lo), PAYLOAD_MIN);
        assert_eq!(max_payload(Some(60_000), lo), GSO_PAYLOAD_MAX);
        assert_eq!(max_payload(Some(3_000), lo), 3_000);
        // Loopback carries 65,536 bytes where /sys says so.
        if interface_mtu(true).is_some_and(|m| m >= 9_000) {
            assert_eq!(max_payload(None, lo), GSO_PAYLOAD_MAX);
            assert_eq!(max_payload(None, "::1".parse().unwrap()), GSO_PAYLOAD_MAX);
            assert_eq!(
                max_payload(None, "::ffff:127.0.0.1".parse().unwrap()),
                GSO_PAYLOAD_MAX
            );
        }
        // IPv6 headers are 20 bytes longer than IPv4's.
        if interface_mtu(false).is_none() {
            return;
        }
        let (v4, v6) = (
            interface_payload("192.0.2.1".parse().unwrap()),
            interface_payload("2001:db8::1".parse().unwrap()),
        );
        assert_eq!(v4 - v6, 20, "{v4} {v6}");
        assert_eq!(
            interface_payload("::ffff:192.0.2.1".parse().unwrap()),
            v4,
            "an IPv4-mapped peer is an IPv4 one"
        );
    }
}
