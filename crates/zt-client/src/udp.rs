//! UDP sockets sized for QUIC bulk transfer, shared by the server and the client.
//!
//! With the kernel's default buffers (about 200 KiB) a fast sender overruns
//! the receiver and QUIC spends its time recovering dropped packets; 4 MiB
//! each way keeps a 2-core loopback transfer CPU-bound instead.

use std::net::SocketAddr;

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
