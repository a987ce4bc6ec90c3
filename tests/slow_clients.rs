//! Slow and hostile HTTP clients cannot hold the daemon's connection slots:
//! a client dribbling its headers (slowloris), an idle keep-alive
//! connection and a client that stops reading its response are all cut
//! off, and the next client is served. Oversized headers get 431.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{curl, sample_root, Server};

/// A daemon with two connection slots and short timeouts.
fn tight(root: &std::path::Path, dir: &std::path::Path) -> Server {
    let cfg = common::config_file(
        dir,
        "[limits]\nmax_connections = 2\nheader_timeout_secs = 1\nidle_timeout_secs = 2\n",
    );
    Server::start(root, &["--config", &cfg])
}

/// Whether the server closed `s` within `limit` (EOF or reset).
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 65536];
    let start = Instant::now();
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
        if start.elapsed() > limit {
            return false;
        }
    }
}

/// `n` slowloris clients: each sends the start of `head` and then a
/// header byte every `every` for `bytes` rounds (bytes keep moving, so
/// only the header timeout can end them); the thread that dribbles.
fn lorises(
    s: &Server,
    n: usize,
    head: &[u8],
    every: Duration,
    bytes: usize,
) -> (Vec<TcpStream>, std::thread::JoinHandle<()>) {
    let clients: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            c.write_all(head).unwrap();
            c
        })
        .collect();
    let mut streams: Vec<TcpStream> = clients.iter().map(|c| c.try_clone().unwrap()).collect();
    let dribble = std::thread::spawn(move || {
        for _ in 0..bytes {
            for c in &mut streams {
                let _ = c.write_all(b"X");
            }
            std::thread::sleep(every);
        }
    });
    (clients, dribble)
}

/// Time for one plain request to be answered.
fn served_after(s: &Server) -> Duration {
    let start = Instant::now();
    let r = curl(&["--max-time", "20"], &s.url("/healthz"));
    assert_eq!(r.status, 200);
    start.elapsed()
}

#[test]
fn slowloris_clients_are_cut_off_and_others_served() {
    let root = sample_root();
    let dir = tempfile::tempdir().unwrap();
    let s = tight(root.path(), dir.path());
    // Fill both slots with clients that send a header byte every 300 ms.
    let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n";
    let (mut lorises, dribble) = lorises(&s, 2, head, Duration::from_millis(300), 20);
    std::thread::sleep(Duration::from_millis(200));
    let waited = served_after(&s);
    assert!(
        waited < Duration::from_secs(5),
        "a third client waited {waited:?} behind two slowloris connections"
    );
    for c in &mut lorises {
        assert!(
            closed_within(c, Duration::from_secs(5)),
            "slowloris connection still open"
        );
    }
    dribble.join().unwrap();
}

#[test]
fn idle_connections_and_stalled_readers_are_closed() {
    let root = sample_root();
    let mut w = zt_format::Writer::new(Vec::new(), "big").unwrap();
    let zeros = vec![0u8; 32 << 20];
    w.add_dense(
        "w",
        &[zeros.len() as u64],
        zt_format::DType::U8,
        &zeros,
        Default::default(),
    )
    .unwrap();
    std::fs::write(root.path().join("big.zt"), w.finish().unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let s = tight(root.path(), dir.path());

    // An idle connection: nothing sent at all.
    let mut idle = TcpStream::connect(&s.addr).unwrap();
    // A reader that asks for the whole 32 MiB file, reads nothing, and keeps
    // its receive buffer small, so the server's writes stall.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let addr: std::net::SocketAddr = s.addr.parse().unwrap();
    sock.connect(&addr.into()).unwrap();
    let mut stalled: TcpStream = sock.into();
    stalled
        .write_all(b"GET /v1/files/big.zt HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));

    // Both slots are taken; the idle timeout (2 s) frees them.
    let waited = served_after(&s);
    assert!(waited < Duration::from_secs(8), "waited {waited:?}");
    assert!(closed_within(&mut idle, Duration::from_secs(5)));
    // Both timers started together; give the stalled reader's (reset by
    // its last write) time to pass before draining, then the drain ends
    // early because the server cut the connection.
    std::thread::sleep(Duration::from_secs(3));
    let mut got = 0usize;
    stalled
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 65536];
    while let Ok(n) = stalled.read(&mut buf) {
        if n == 0 {
            break;
        }
        got += n;
    }
    assert!(
        got < 32 << 20,
        "the stalled response was cut off ({got} bytes read)"
    );
}

#[test]
fn oversized_headers_get_431_and_the_daemon_stays_up() {
    let root = sample_root();
    let s = Server::start(root.path(), &[]);
    let big = format!("X-Big: {}", "a".repeat(64 * 1024));
    let r = curl(&["-H", &big], &s.url("/healthz"));
    assert_eq!(r.status, 431);
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
}

/// Issue 28, item 2: while slow clients hold every slot, `/healthz`,
/// `/readyz` and `/metrics` are answered at once on a connection past the
/// slots (before, a probe waited in the kernel's backlog until a slot
/// freed); any other request on such a connection waits for a slot and is
/// served once one frees. Connections past the places too are closed at
/// once, and the places free after `limits.ops_header_timeout_ms`.
#[test]
fn probes_are_answered_while_slow_clients_hold_every_slot() {
    let root = sample_root();
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(
        dir.path(),
        "[limits]\nmax_connections = 2\nheader_timeout_secs = 3\nops_connections = 4\nops_header_timeout_ms = 500\n",
    );
    let s = Server::start(root.path(), &["--config", &cfg]);
    let head = b"GET /v1/files HTTP/1.1\r\nHost: x\r\n";
    let (_lorises, dribble) = lorises(&s, 2, head, Duration::from_millis(250), 12);
    std::thread::sleep(Duration::from_millis(200));
    for route in ["/healthz", "/readyz", "/metrics"] {
        let start = Instant::now();
        let r = curl(&["--max-time", "10"], &s.url(route));
        let took = start.elapsed();
        assert_eq!(r.status, 200, "{route}");
        assert!(
            took < Duration::from_millis(900),
            "{route} took {took:?} while slow clients held every slot"
        );
    }
    // A request for data waits for a slot, and is served when the header
    // timeout cuts a slow client off.
    let start = Instant::now();
    let r = curl(
        &["--max-time", "10"],
        &s.url("/v1/files/sample.zt/manifest"),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    dribble.join().unwrap();

    // A flood of silent connections: two take the slots (the slow
    // clients are gone), four the places past them, and each later one
    // takes the place of the oldest silent one, which is closed.
    let mut flood: Vec<TcpStream> = (0..12)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let mut closed = 0;
    for c in &mut flood {
        closed += usize::from(closed_within(c, Duration::from_millis(100)));
    }
    assert!(closed >= 6, "{closed} of 12 connections closed at once");
    assert!(closed < 12, "the places' last holders are kept");
    // A probe arriving while the flood holds every place takes the oldest
    // silent one's and is answered at once.
    let start = Instant::now();
    assert_eq!(curl(&["--max-time", "10"], &s.url("/healthz")).status, 200);
    assert!(start.elapsed() < Duration::from_millis(900));
}
