//! The control stream against the real daemon, read by a bare quinn
//! client: the manifest arrives before any component stream however busy
//! the connection is, a close during a transfer reaches a client whose
//! receive buffers were full, with its code, and a `share` of a request
//! carries its positions alone and counts them in its `done`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use quinn::{Connection, RecvStream, SendStream};
use ztp_proto::{frame, Code, Deframer, Get, Message};

use common::quic::get;
use common::Server;

/// `n` objects of `len` bytes each with crc32c digests, under layer names
/// (so a request has many streams and a manifest of many frames' worth).
fn many_objects(path: &std::path::Path, n: u32, len: usize) {
    let mut w = zt_format::Writer::new(Vec::new(), "many").unwrap();
    let opts = zt_format::StoreOptions {
        digest: Some(zt_format::DigestAlgorithm::Crc32c),
        ..Default::default()
    };
    for i in 0..n {
        let data: Vec<u8> = (0..len).map(|b| (b as u32 ^ i) as u8).collect();
        let name = format!("model.layers.{}.mlp.experts.{}.weight", i / 8, i % 8);
        w.add_dense(&name, &[len as u64], zt_format::DType::U8, &data, opts)
            .unwrap();
    }
    std::fs::write(path, w.finish().unwrap()).unwrap();
}

/// Whatever the control stream has already received, without waiting.
fn take_buffered(recv: &mut RecvStream, d: &mut Deframer) {
    let mut buf = vec![0u8; 64 * 1024];
    while let Some(Ok(Some(n))) = recv.read(&mut buf).now_or_never() {
        d.push(&buf[..n]);
    }
}

/// Reads what the control stream has next into `d`.
async fn read_more(recv: &mut RecvStream, d: &mut Deframer, buf: &mut [u8]) {
    let n = recv.read(buf).await.unwrap().expect("control stream open");
    d.push(&buf[..n]);
}

/// Reads control messages until `done` for `id`, checking each is whole.
async fn until_done(recv: &mut RecvStream, d: &mut Deframer, id: u64) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while let Some(m) = d.next_message().unwrap() {
            if matches!(m, Message::Done(ref done) if done.id == id) {
                return;
            }
        }
        read_more(recv, d, &mut buf).await;
    }
}

/// One request on `conn`: when its first component stream is accepted,
/// the whole manifest must already be on the control stream.
async fn manifest_came_first(
    conn: &Connection,
    send: &mut SendStream,
    recv: &mut RecvStream,
    id: u64,
) -> bool {
    send.write_all(&get(id, "many.zt")).await.unwrap();
    let mut d = Deframer::new(1 << 30);
    let first = conn.accept_uni().await.unwrap();
    take_buffered(recv, &mut d);
    let first_message = d.next_message().unwrap();
    let ok = matches!(first_message, Some(Message::Manifest(ref m)) if m.id == id);
    let streams = match first_message {
        Some(Message::Manifest(m)) => m.streams,
        _ => 0,
    };
    // Drain this request's streams (each read as it opens: the server
    // opens the next as one finishes) before the next request.
    let drain = |mut s: RecvStream| tokio::spawn(async move { s.read_to_end(usize::MAX).await });
    let mut readers = vec![drain(first)];
    for _ in 1..streams {
        readers.push(drain(conn.accept_uni().await.unwrap()));
    }
    for r in readers {
        r.await.unwrap().unwrap();
    }
    if ok {
        until_done(recv, &mut d, id).await;
    }
    ok
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_arrives_before_any_component_stream_under_load() {
    let root = tempfile::tempdir().unwrap();
    many_objects(&root.path().join("many.zt"), 600, 8 << 10);
    let s = Server::start_quic(root.path(), &[]);
    let (addr, fp) = s.quic.clone().unwrap();
    // Four clients at once, each asking again and again.
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (addr, fp) = (addr.clone(), fp.clone());
        clients.push(tokio::spawn(async move {
            let conn = common::quic::raw_connect(&addr, &fp, None).await;
            let (mut send, mut recv) = conn.open_bi().await.unwrap();
            let mut late = 0;
            for id in 1..=6 {
                if !manifest_came_first(&conn, &mut send, &mut recv, id).await {
                    late += 1;
                }
            }
            late
        }));
    }
    let mut late = 0;
    for c in clients {
        late += c.await.unwrap();
    }
    assert_eq!(
        late, 0,
        "requests whose first component stream beat the manifest"
    );
}

/// A bare client on its own single-threaded runtime, with a small UDP
/// receive buffer: while the test blocks that thread, the kernel drops
/// what arrives, as it does for a client too slow for its link.
fn slow_client(addr: &str, fp: &str) -> (tokio::runtime::Runtime, Connection) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = rt.block_on(async {
        zt_client::trust::install_provider();
        let trust = zt_client::trust::Trust::fingerprint(fp).unwrap();
        let tls = zt_client::trust::client_config(&trust, ztp_proto::ALPN).unwrap();
        let config = quinn::ClientConfig::new(Arc::new(
            quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap(),
        ));
        let sock = zt_client::udp::bind("127.0.0.1:0".parse().unwrap(), 64 << 10).unwrap();
        let mut ep = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            sock,
            Arc::new(quinn::TokioRuntime),
        )
        .unwrap();
        ep.set_default_client_config(config);
        ep.connect(addr.parse().unwrap(), "localhost")
            .unwrap()
            .await
            .unwrap()
    });
    (rt, conn)
}

/// What told the client the connection was closing, and with which code.
#[derive(Debug, PartialEq, Eq)]
enum Heard {
    /// `error` without an id on the control stream.
    Announced(u64),
    /// The CONNECTION_CLOSE.
    Closed(u64),
    /// Anything else (a stateless reset, a timeout): the code was lost.
    Lost(String),
}

#[test]
fn a_close_during_a_transfer_reaches_a_client_whose_buffers_were_full() {
    let root = tempfile::tempdir().unwrap();
    common::fetch::big_model(root.path());
    let s = Server::start_quic(root.path(), &[]);
    let (addr, fp) = s.quic.clone().unwrap();
    let (rt, conn) = slow_client(&addr, &fp);
    let started = Instant::now();
    let heard = rt.block_on(async {
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(&get(1, "big.zt")).await.unwrap();
        let mut d = Deframer::new(1 << 30);
        let mut buf = vec![0u8; 64 * 1024];
        while !matches!(d.next_message().unwrap(), Some(Message::Manifest(_))) {
            let n = recv.read(&mut buf).await.unwrap().unwrap();
            d.push(&buf[..n]);
        }
        // Component bytes are pouring in. Reusing the id in flight is a
        // protocol violation: the server closes the connection. Meanwhile
        // this client reads nothing, and its small socket buffer overflows.
        send.write_all(&get(1, "big.zt")).await.unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        let heard = async {
            loop {
                match recv.read(&mut buf).await {
                    Ok(Some(n)) => d.push(&buf[..n]),
                    Ok(None) => {}
                    Err(quinn::ReadError::ConnectionLost(
                        quinn::ConnectionError::ApplicationClosed(c),
                    )) => return Heard::Closed(c.error_code.into_inner()),
                    Err(e) => return Heard::Lost(e.to_string()),
                }
                while let Ok(Some(m)) = d.next_message() {
                    if let Message::Error(e) = m {
                        if e.id.is_none() {
                            return Heard::Announced(u64::from(e.code.value()));
                        }
                    }
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(15), heard)
            .await
            .unwrap_or(Heard::Lost("nothing within 15 s".into()))
    });
    let violation = u64::from(Code::ProtocolViolation.value());
    assert!(
        heard == Heard::Announced(violation) || heard == Heard::Closed(violation),
        "the client heard {heard:?} after {:?}",
        started.elapsed()
    );
    // The close itself follows once the announcement is acknowledged.
    let closed = rt.block_on(common::quic::close_code_within(
        &conn,
        Duration::from_secs(10),
    ));
    assert_eq!(closed, Some(violation));
    // The daemon serves on.
    assert_eq!(common::curl(&[], &s.url("/healthz")).status, 200);
}

/// The three shares of a request (`share: [i, 3]`), each on the same
/// connection: every manifest is the whole selection's, its `streams` and
/// its `done` count that share alone, and together they carry every
/// position of the request's order exactly once, balanced by bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shares_of_a_request_carry_each_component_once_balanced_by_bytes() {
    let root = common::sample_root();
    let s = Server::start_quic(root.path(), &[]);
    let (addr, fp) = s.quic.clone().unwrap();
    let conn = common::quic::raw_connect(&addr, &fp, None).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    for index in 0..3u64 {
        let share = Get {
            id: index,
            path: "sample.zt".into(),
            share: Some((index, 3)),
            ..Get::default()
        };
        send.write_all(&frame(&Message::Get(share)).unwrap())
            .await
            .unwrap();
    }
    // 39 components in all.
    let streams = {
        let conn = conn.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            while got.len() < 39 {
                let mut s = conn.accept_uni().await.unwrap();
                let bytes = s.read_to_end(64 << 20).await.unwrap();
                let mut d = Deframer::new(ztp_proto::MAX_CLIENT_MESSAGE);
                d.push(&bytes);
                let h = d.next_header().unwrap().unwrap();
                got.push((h.id, h.seq, h.length));
            }
            got
        })
    };
    let mut d = Deframer::new(64 << 20);
    let mut buf = vec![0u8; 64 * 1024];
    let (mut manifests, mut dones) = (Vec::new(), Vec::new());
    while dones.len() < 3 {
        while let Some(m) = d.next_message().unwrap() {
            match m {
                Message::Manifest(m) => manifests.push(m),
                Message::Done(x) => dones.push(x),
                other => panic!("{other:?}"),
            }
        }
        if dones.len() < 3 {
            read_more(&mut recv, &mut d, &mut buf).await;
        }
    }
    let got = streams.await.unwrap();
    let file = std::fs::read(root.path().join("sample.zt")).unwrap();
    let whole = zt_format::ZtFile::from_bytes("sample.zt", &file, Default::default()).unwrap();
    let limits = zt_format::Limits::default();
    let mut load = [0u64; 3];
    for m in &manifests {
        assert!(m.features.iter().any(|f| f == "shares"));
        let (manifest, _) = zt_format::container::decode_manifest(
            "sample.zt",
            &m.manifest,
            file.len() as u64,
            &limits,
            zt_format::container::View::File,
        )
        .unwrap();
        assert_eq!(
            manifest.objects.len(),
            whole.manifest().objects.len(),
            "the whole manifest"
        );
        let mine: Vec<_> = got.iter().filter(|(id, ..)| *id == m.id).collect();
        assert_eq!(m.streams, mine.len() as u64, "share {}", m.id);
        let done = dones.iter().find(|x| x.id == m.id).unwrap();
        assert_eq!(
            (done.sent, done.cancelled),
            (mine.len() as u64, 0),
            "share {}",
            m.id
        );
        load[m.id as usize] = mine.iter().map(|(.., len)| len).sum();
    }
    let mut seqs: Vec<u64> = got.iter().map(|(_, seq, _)| *seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..39).collect::<Vec<u64>>(), "every position once");
    let largest = got.iter().map(|(.., len)| *len).max().unwrap();
    let (most, least) = (load.iter().max().unwrap(), load.iter().min().unwrap());
    assert!(most - least <= largest, "balanced by bytes: {load:?}");
}

/// Reads control messages until `pick` takes one.
async fn until<T>(
    recv: &mut RecvStream,
    d: &mut Deframer,
    mut pick: impl FnMut(Message) -> Option<T>,
) -> T {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        while let Some(m) = d.next_message().unwrap() {
            if let Some(t) = pick(m) {
                return t;
            }
        }
        read_more(recv, d, &mut buf).await;
    }
}

/// Reads every component stream `conn` accepts to its end, until the
/// connection closes; how many were read whole.
fn read_every_stream(conn: &Connection) -> tokio::task::JoinHandle<u64> {
    let conn = conn.clone();
    tokio::spawn(async move {
        let mut whole = 0u64;
        while let Ok(mut uni) = conn.accept_uni().await {
            if uni.read_to_end(usize::MAX).await.is_ok() {
                whole += 1;
            }
        }
        whole
    })
}

/// The `done` of request `id`.
async fn done_of(recv: &mut RecvStream, d: &mut Deframer, id: u64) -> ztp_proto::Done {
    until(recv, d, |m| match m {
        Message::Done(done) if done.id == id => Some(done),
        _ => None,
    })
    .await
}

/// A connection whose one request (`big.zt`'s manifest alone) was
/// answered, and its control stream (kept open by the caller).
async fn answered_once(addr: &str, fp: &str) -> (Connection, SendStream, RecvStream) {
    let conn = common::quic::raw_connect(addr, fp, None).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let only_manifest = Get {
        id: 1,
        path: "big.zt".into(),
        manifest_only: true,
        ..Get::default()
    };
    send.write_all(&frame(&Message::Get(only_manifest)).unwrap())
        .await
        .unwrap();
    until_done(&mut recv, &mut Deframer::new(1 << 30), 1).await;
    (conn, send, recv)
}

/// A daemon serving `big.zt` with its shutdown deadline two minutes off,
/// its QUIC address and fingerprint, a runtime for the clients, and the
/// folders to keep while it runs.
fn far_deadline_server() -> (
    Server,
    String,
    String,
    tokio::runtime::Runtime,
    [tempfile::TempDir; 2],
) {
    let root = tempfile::tempdir().unwrap();
    common::fetch::big_model(root.path());
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(dir.path(), "shutdown_timeout_secs = 120\n");
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let (addr, fp) = s.quic.clone().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    (s, addr, fp, rt, [root, dir])
}

/// Shutting down (SIGTERM) with the deadline two minutes off, four
/// connections open: one that never opened its control stream, one whose
/// only request was answered, and one that then ended its control stream
/// are closed with `shutting_down` at once; a busy one has a new `get`
/// refused with `shutting_down`, gets every stream of its request in
/// flight and its `done`, and is closed with `shutting_down` after that.
/// The daemon exits long before its deadline. (Before, every open
/// connection was kept to the deadline.)
#[test]
fn shutting_down_closes_idle_connections_at_once_and_busy_ones_once_answered() {
    let (mut s, addr, fp, rt, _dirs) = far_deadline_server();
    let shutting_down = Some(u64::from(Code::ShuttingDown.value()));
    rt.block_on(async {
        let silent = common::quic::raw_connect(&addr, &fp, None).await;
        let (answered, _a_send, _a_recv) = answered_once(&addr, &fp).await;
        // The same, then its control stream ended by the client.
        let (ended, mut e_send, _e_recv) = answered_once(&addr, &fp).await;
        e_send.finish().unwrap();

        let busy = common::quic::raw_connect(&addr, &fp, None).await;
        let (mut send, mut recv) = busy.open_bi().await.unwrap();
        let mut d = Deframer::new(1 << 30);
        send.write_all(&get(1, "big.zt")).await.unwrap();
        let streams = until(&mut recv, &mut d, |m| match m {
            Message::Manifest(m) => Some(m.streams),
            _ => None,
        })
        .await;
        // Its component streams are not read yet: flow control keeps the
        // request in flight.
        s.terminate();
        let limit = Duration::from_secs(10);
        assert_eq!(
            common::quic::close_code_within(&silent, limit).await,
            shutting_down
        );
        assert_eq!(
            common::quic::close_code_within(&answered, limit).await,
            shutting_down
        );
        assert_eq!(
            common::quic::close_code_within(&ended, limit).await,
            shutting_down
        );
        assert!(
            busy.close_reason().is_none(),
            "closed with a request in flight"
        );
        send.write_all(&get(2, "big.zt")).await.unwrap();
        let refused = until(&mut recv, &mut d, |m| match m {
            Message::Error(e) if e.id == Some(2) => Some(e.code),
            _ => None,
        })
        .await;
        assert_eq!(refused, Code::ShuttingDown);
        let read = read_every_stream(&busy);
        let done = done_of(&mut recv, &mut d, 1).await;
        assert_eq!((done.sent, done.cancelled), (streams, 0));
        assert_eq!(
            common::quic::close_code_within(&busy, limit).await,
            shutting_down
        );
        assert_eq!(read.await.unwrap(), streams, "streams read in full");
    });
    assert_eq!(s.wait(Duration::from_secs(30)), Some(0));
}

/// A client that asks for a file and ends its control stream at once,
/// reading nothing yet, while the daemon shuts down: it still gets every
/// stream and its `done` before the close with `shutting_down` (the
/// server's end of the control stream is acknowledged before it closes).
#[test]
fn a_client_that_ended_its_control_stream_gets_its_done_before_the_shutdown_close() {
    let (mut s, addr, fp, rt, _dirs) = far_deadline_server();
    rt.block_on(async {
        let conn = common::quic::raw_connect(&addr, &fp, None).await;
        let (mut send, mut recv) = conn.open_bi().await.unwrap();
        send.write_all(&get(1, "big.zt")).await.unwrap();
        send.finish().unwrap();
        let mut d = Deframer::new(1 << 30);
        let streams = until(&mut recv, &mut d, |m| match m {
            Message::Manifest(m) => Some(m.streams),
            _ => None,
        })
        .await;
        s.terminate();
        assert!(common::eventually(Duration::from_secs(10), || {
            common::curl(&[], &s.url("/readyz")).status != 200
        }));
        let read = read_every_stream(&conn);
        let done = done_of(&mut recv, &mut d, 1).await;
        assert_eq!((done.sent, done.cancelled), (streams, 0));
        let code = common::quic::close_code_within(&conn, Duration::from_secs(10)).await;
        assert_eq!(code, Some(u64::from(Code::ShuttingDown.value())));
        assert_eq!(read.await.unwrap(), streams, "streams read in full");
    });
    assert_eq!(s.wait(Duration::from_secs(30)), Some(0));
}
