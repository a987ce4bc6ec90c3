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
//! 1,500; jumbo frames: 9,000), less the IP and UDP headers. Two sizes
//! of datagram are worth having, and nothing between them
//! ([`check_payload`]): up to [`GSO_PAYLOAD_MAX`] they go to the kernel
//! ten to a system call (segmentation offload, GSO); from
//! [`SINGLE_PAYLOAD_MIN`] up to [`PAYLOAD_MAX`], towards loopback peers
//! whose interface carries them, one to a call, each as large as a whole
//! batch, with a tenth of the packets to seal and acknowledge. Routes are
//! not consulted: a probe that the path does not carry is lost and tried
//! smaller, without counting as congestion, so a bound of 6,500 or less
//! above the path's MTU costs only a few probes (larger ones, loopback
//! only, start at the bound, with no probes). On one loopback
//! link, bare quinn moves a 1 GiB stream 2.3x faster at 6,500 bytes than
//! at quinn's default bound of 1,452, and 1.39x faster again at 65,507
//! bytes, one to a call (`docs/benchmarks.md`).

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

/// The largest UDP payload sent with segmentation offload (GSO): quinn
/// hands the kernel up to 10 datagrams per send, and one send carries at
/// most 65,507 bytes (a full batch of larger ones fails as `EMSGSIZE`,
/// which quinn counts as losses: measured, a bound of 8,952 bytes on
/// loopback sent slower than 1,452).
pub const GSO_PAYLOAD_MAX: u16 = 6_500;

/// The smallest UDP payload sent one datagram to a system call, without
/// GSO. Measured on loopback (bare quinn, 1 GiB): one 8,952-byte datagram
/// a call took 1.5x the time of ten 6,500-byte ones, 16,000 bytes about
/// the same, 32,000 bytes 0.88x and 65,507 bytes 0.72x.
pub const SINGLE_PAYLOAD_MIN: u16 = 32_000;

/// The largest UDP payload: an IPv4 datagram's 65,535 bytes less its IP and
/// UDP headers.
pub const PAYLOAD_MAX: u16 = 65_507;

/// The smallest payload QUIC allows.
pub const PAYLOAD_MIN: u16 = 1_200;

/// `payload` if it is a bound on datagrams worth configuring: 1,200 to
/// 6,500 bytes (sent in batches) or 32,000 to 65,507 (one to a send);
/// else why not, naming the ranges (for the caller to prefix with the
/// value and where it was given).
pub fn check_payload(payload: u16) -> Result<u16, String> {
    let reason = match payload {
        p if p < PAYLOAD_MIN => format!("QUIC needs {PAYLOAD_MIN} at least"),
        p if p > PAYLOAD_MAX => format!("an IPv4 datagram carries {PAYLOAD_MAX} at most"),
        p if !batched(p) && p < SINGLE_PAYLOAD_MIN => {
            format!("sizes between the ranges are slower than {GSO_PAYLOAD_MAX}")
        }
        p => return Ok(p),
    };
    Err(format!(
        "a datagram bound must be {PAYLOAD_MIN} to {GSO_PAYLOAD_MAX} (sent in batches, up to ten to a system call where the kernel offers GSO) or {SINGLE_PAYLOAD_MIN} to {PAYLOAD_MAX} (one to a call, towards loopback peers, as far as the interface carries them): {reason}"
    ))
}

/// The largest UDP payload QUIC may grow to towards `peer`: `configured`
/// (`quic.max_udp_payload`, `--max-udp-payload`), else what the
/// interfaces that may face `peer` carry ([`interface_payload`]). Within
/// 1,200..=65,507, and held to 6,500, in batches, where it would fall
/// between the two ranges of [`check_payload`] (jumbo frames) or reach
/// 32,000 towards a peer that is not on loopback: routes are not
/// consulted, so a remote peer's bound is only a guess (an InfiniBand
/// interface's 65,520 bytes may face it, or a 1,500-byte Ethernet one),
/// and connections with such a bound start at it, not with probes
/// ([`datagrams_up_to`]). A configured bound of 32,000 or more thus
/// applies to loopback peers only, as far as their interface carries it
/// (a daemon's one setting serves loopback and remote peers alike).
pub fn max_payload(configured: Option<u16>, peer: IpAddr) -> u16 {
    bound(configured, interface_payload(peer), is_loopback(peer))
}

/// [`max_payload`] towards a peer whose interfaces carry `carried` bytes,
/// on loopback or not.
fn bound(configured: Option<u16>, carried: u16, loopback: bool) -> u16 {
    let payload = match configured {
        Some(c) if batched(c) => c,
        Some(c) => c.min(carried),
        None => carried,
    }
    .clamp(PAYLOAD_MIN, PAYLOAD_MAX);
    match check_payload(payload) {
        Ok(p) if batched(p) || loopback => p,
        _ => GSO_PAYLOAD_MAX,
    }
}

/// The most an endpoint facing `peer` tells it it may send: what the
/// interfaces carry ([`max_payload`] with no bound of its own), or
/// `configured` if larger. A bound limits what an end sends, not what it
/// takes: a ztserve on loopback sends its large datagrams one to a call
/// whatever the client accepts, so a client that accepted only small ones
/// would get them one to a call, slower than in batches.
pub fn accepted_payload(configured: Option<u16>, peer: IpAddr) -> u16 {
    max_payload(None, peer)
        .max(configured.unwrap_or(PAYLOAD_MIN))
        .clamp(PAYLOAD_MIN, PAYLOAD_MAX)
}

/// Whether datagrams of up to `payload` bytes go to the kernel in batches
/// (GSO): those of [`GSO_PAYLOAD_MAX`] or less.
pub fn batched(payload: u16) -> bool {
    payload <= GSO_PAYLOAD_MAX
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
/// `payload` x 64 (GRO) x 32 (a batch), 13 MiB at 6,500 bytes and 128 MiB
/// at 65,507, its pages touched only as datagrams land in them.
pub fn endpoint_config(payload: u16) -> quinn::EndpointConfig {
    let mut config = quinn::EndpointConfig::default();
    // In range by construction; quinn's default (1,472) otherwise.
    let _ = config.max_udp_payload_size(payload.clamp(PAYLOAD_MIN, PAYLOAD_MAX).max(1_472));
    config
}

/// Sizes `transport` for datagrams of up to `payload` bytes: MTU
/// discovery up to `payload`, datagrams sent in batches (GSO) if they are
/// small enough ([`batched`]) and one to a system call, from the first,
/// if not, and a congestion window to match
/// (CUBIC, quinn's default, starting at [`initial_window`]`(payload)`;
/// quinn's own would not let one 32,000-byte datagram out). A caller
/// that sets another controller sizes its window the same way.
pub fn datagrams_up_to(transport: &mut quinn::TransportConfig, payload: u16) {
    let mut mtu = quinn::MtuDiscoveryConfig::default();
    mtu.upper_bound(payload);
    transport.mtu_discovery_config(Some(mtu));
    transport.enable_segmentation_offload(batched(payload));
    if !batched(payload) {
        // Such a bound is the loopback interface's (`max_payload`), which
        // is the whole path: start at it, with nothing left to discover.
        // Probing up to it from quinn's 1,200 bytes would cost a system
        // call a datagram meanwhile, and each probe, a datagram of up to
        // 64 KiB of padding, costs its receiver about 0.7 ms of CPU
        // (quinn parses padding a byte at a time): connections that
        // started at 32,000 bytes sent eleven each way, while the first
        // request and its manifest were in flight. Should datagrams this
        // large be lost anyway, quinn's black-hole detection drops to
        // 1,200 bytes, and discovery probes up again a minute later
        // (quinn's cooldown).
        transport.initial_mtu(payload);
    }
    transport.congestion_controller_factory(std::sync::Arc::new(cubic(payload)));
}

/// CUBIC, quinn's default controller, starting at
/// [`initial_window`]`(payload)` (see [`datagrams_up_to`]).
pub fn cubic(payload: u16) -> quinn::congestion::CubicConfig {
    let mut cubic = quinn::congestion::CubicConfig::default();
    cubic.initial_window(initial_window(payload));
    cubic
}

/// The congestion window a connection whose datagrams may grow to
/// `payload` bytes starts with (CUBIC and NewReno; see
/// [`datagrams_up_to`]): four such datagrams, at least quinn's default of
/// 12,000 bytes (what 1,452-byte paths keep), and for the datagrams sent
/// one to a call (loopback only, [`max_payload`]) ten.
///
/// quinn lets a datagram out only while what is in flight, that datagram
/// and (within a batch) the one being built stay under its window, and
/// its window grows only with acknowledged data (MTU probes earn none).
/// At its fixed 12,000 bytes, once discovery reached 6,500 bytes one
/// datagram of data went out at a time, and the receiver acknowledges a
/// lone datagram only after its ACK delay (25 ms): on
/// loopback, connecting and reading 1.3 MB over bare quinn took 3 ms or,
/// in most runs, 30 ms, one gap of 26 ms after the last probe; and
/// starting at 32,000 bytes no datagram fitted at all (the connection
/// hung). Four datagrams let at least two out at once, which the
/// receiver acknowledges at once (docs/benchmarks.md, thirty-second
/// session).
pub fn initial_window(payload: u16) -> u64 {
    let datagrams = if batched(payload) { 4 } else { 10 };
    (datagrams * u64::from(payload)).max(12_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_window_lets_two_datagrams_out_at_once() {
        // How many datagrams quinn lets out before an ACK, at worst: each
        // while in flight, it and one being built stay under the window.
        let lets_out = |payload: u16| {
            let (window, d) = (initial_window(payload), u64::from(payload));
            (0..).take_while(|n| n * d + 2 * d < window).count()
        };
        for payload in [PAYLOAD_MIN, 1_452, 3_000, GSO_PAYLOAD_MAX] {
            assert!(lets_out(payload) >= 2, "{payload}");
        }
        for payload in [SINGLE_PAYLOAD_MIN, PAYLOAD_MAX] {
            assert!(lets_out(payload) >= 8, "{payload}");
        }
        // Remote paths keep quinn's default.
        assert_eq!(initial_window(1_452), 12_000);
    }

    #[test]
    fn payloads_stay_within_quic_and_offload_limits() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let far: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(max_payload(Some(100), lo), PAYLOAD_MIN);
        assert_eq!(max_payload(Some(3_000), lo), 3_000);
        assert_eq!(max_payload(Some(3_000), far), 3_000);
        // Between the ranges: batched at the most, not one to a call.
        assert_eq!(max_payload(Some(9_000), lo), GSO_PAYLOAD_MAX);
        for (p, ok) in [
            (1_199, false),
            (1_200, true),
            (6_500, true),
            (6_501, false),
            (31_999, false),
            (32_000, true),
            (65_507, true),
            (65_508, false),
        ] {
            assert_eq!(check_payload(p).is_ok(), ok, "{p}");
        }
        let why = |p| check_payload(p).unwrap_err();
        assert!(
            why(1_000).ends_with("QUIC needs 1200 at least"),
            "{}",
            why(1_000)
        );
        assert!(why(9_000).ends_with("slower than 6500"), "{}", why(9_000));
        assert!(
            why(u16::MAX).ends_with("65507 at most"),
            "{}",
            why(u16::MAX)
        );
        assert!(batched(6_500) && !batched(32_000));
        // A large bound for loopback peers only: a remote one stays in
        // batches, whatever its interfaces (routes are not consulted), an
        // InfiniBand interface's 65,492 bytes among them.
        assert_eq!(bound(None, 65_492, false), GSO_PAYLOAD_MAX);
        assert_eq!(bound(Some(60_000), 65_492, false), GSO_PAYLOAD_MAX);
        assert_eq!(bound(None, 65_507, true), 65_507);
        assert_eq!(bound(Some(60_000), 65_507, true), 60_000);
        assert_eq!(bound(Some(PAYLOAD_MAX), 1_472, true), 1_472);
        assert_eq!(bound(None, 8_972, true), GSO_PAYLOAD_MAX);
        assert_eq!(bound(None, 1_472, false), 1_472);
        let remote = max_payload(None, far);
        assert!(batched(remote), "{remote}");
        assert!(batched(max_payload(Some(60_000), far)));
        assert!(batched(max_payload(
            Some(PAYLOAD_MAX),
            "2001:db8::1".parse().unwrap()
        )));
        // What an end accepts: what the interfaces carry, or its bound if
        // larger, never less.
        assert_eq!(accepted_payload(Some(PAYLOAD_MAX), far), PAYLOAD_MAX);
        assert_eq!(
            accepted_payload(Some(PAYLOAD_MIN), lo),
            max_payload(None, lo)
        );
        // Loopback carries 65,536 bytes where /sys says so: IPv4's most,
        // and IPv6's, whose header is 20 bytes longer.
        if interface_mtu(true).is_some_and(|m| m >= 65_536) {
            assert_eq!(max_payload(None, lo), PAYLOAD_MAX);
            assert_eq!(max_payload(Some(60_000), lo), 60_000);
            assert_eq!(max_payload(None, "::1".parse().unwrap()), 65_488);
            assert_eq!(
                max_payload(None, "::ffff:127.0.0.1".parse().unwrap()),
                PAYLOAD_MAX
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
