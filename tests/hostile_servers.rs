//! The client against servers that break ztp/1: a scripted QUIC server
//! (real TLS, real quinn) answers one `get` for a two-layer file, then
//! misbehaves. Every misbehaviour fails the request with an error naming
//! what broke, delivers no byte that was not verified, and never hangs;
//! a server that breaks the framing gets its connection closed with
//! `protocol_violation`.

mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use quinn::crypto::rustls::QuicServerConfig;
use quinn::{Connection, Endpoint, RecvStream, SendStream};
use zt_client::trust::Trust;
use zt_client::ztp::QuicClient;
use zt_client::Options;
use zt_format::ZtFile;
use ztp_proto::{
    frame, frame_header, Code, ComponentHeader, Deframer, Done, ErrorMsg, Get, ManifestMsg, Message,
};
use ztserve::server::config::QuicConfig;
use ztserve::server::quic::cert;

/// The served file: its manifest and bytes, and the first component's
/// header as an honest server would send it.
struct Model {
    manifest: Vec<u8>,
    bytes: Vec<u8>,
    first: ComponentHeader,
}

fn model() -> Model {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.zt");
    common::layered_model(&path, 0..2);
    let f = ZtFile::open(&path).unwrap();
    let (name, obj) = f.manifest().objects.iter().next().unwrap();
    let (role, c) = obj.components.iter().next().unwrap();
    let first = ComponentHeader {
        id: 1,
        object: name.to_owned(),
        component: role.to_owned(),
        seq: 0,
        dtype: c.dtype.name().to_owned(),
        logical_type: None,
        encoding: c.encoding.name().to_owned(),
        length: c.length,
        uncompressed_length: c.uncompressed_length,
        digest: c.digest.as_ref().map(|d| d.to_string()),
        offset: c.offset,
    };
    assert!(
        first.digest.is_some(),
        "the model's components carry digests"
    );
    Model {
        manifest: zt_format::manifest_cbor(f.manifest()),
        bytes: std::fs::read(&path).unwrap(),
        first,
    }
}

/// One scripted server connection: the control stream, the client's `get`,
/// and the model it asks for.
struct Script {
    conn: Connection,
    control: SendStream,
    /// The control stream's other half, for a script that reads on.
    recv: RecvStream,
    get: Get,
    model: Arc<Model>,
}

impl Script {
    /// Sends `m` on the control stream (unless the client has gone: the
    /// script runs on regardless, as a careless server would).
    async fn say(&mut self, m: Message) {
        let _ = self.control.write_all(&frame(&m).unwrap()).await;
    }

    /// An `error` for request `id` (for the connection, without one).
    async fn refuse(&mut self, id: Option<u64>, code: Code, message: String) {
        let e = ErrorMsg {
            id,
            code,
            message,
            retry_after_ms: None,
        };
        self.say(Message::Error(e)).await;
    }

    /// The manifest, announcing `streams` component streams.
    async fn manifest(&mut self, streams: u64) {
        self.manifest_offering(streams, Vec::new()).await;
    }

    /// The manifest, announcing `streams` streams and `features`.
    async fn manifest_offering(&mut self, streams: u64, features: Vec<String>) {
        let m = ManifestMsg {
            id: self.get.id,
            etag: "\"zt-hostile\"".into(),
            size: self.model.bytes.len() as u64,
            manifest: self.model.manifest.clone().into(),
            streams,
            features,
        };
        self.say(Message::Manifest(m)).await;
    }

    /// One component stream carrying exactly `bytes` (while the client is
    /// there to take it).
    async fn stream(&self, bytes: &[u8]) {
        let Ok(mut s) = self.conn.open_uni().await else {
            return;
        };
        if s.write_all(bytes).await.is_ok() && s.finish().is_ok() {
            let _ = s.stopped().await;
        }
    }

    /// The first component's header (as changed by `edit`), then `body`.
    async fn component(&self, edit: impl FnOnce(&mut ComponentHeader), body: &[u8]) {
        let mut h = self.model.first.clone();
        h.id = self.get.id;
        edit(&mut h);
        let mut bytes = frame_header(&h).unwrap();
        bytes.extend_from_slice(body);
        self.stream(&bytes).await;
    }

    /// The first component's stored bytes.
    fn body(&self) -> Vec<u8> {
        let h = &self.model.first;
        self.model.bytes[h.offset as usize..(h.offset + h.length) as usize].to_vec()
    }

    async fn done(&mut self, sent: u64) {
        let id = self.get.id;
        self.say(Message::Done(Done {
            id,
            sent,
            cancelled: 0,
        }))
        .await;
    }
}

async fn read_get(recv: &mut RecvStream) -> Get {
    let mut d = Deframer::new(ztp_proto::MAX_CLIENT_MESSAGE);
    let mut buf = vec![0u8; 4096];
    loop {
        if let Some(Message::Get(g)) = d.next_message().unwrap() {
            return g;
        }
        let n = recv.read(&mut buf).await.unwrap().expect("a get");
        d.push(&buf[..n]);
    }
}

/// A server that runs `script` for its one connection; returns its address,
/// its certificate's fingerprint, and how the connection ended.
async fn serve<F, Fut>(script: F) -> (SocketAddr, String, tokio::task::JoinHandle<Connection>)
where
    F: FnOnce(Script) -> Fut + Send + 'static,
    Fut: Future<Output = Script> + Send,
{
    zt_client::trust::install_provider();
    let state = tempfile::tempdir().unwrap();
    let id = cert::identity(None, state.path()).unwrap();
    let fingerprint = id.fingerprint();
    let mut tls = rustls::ServerConfig::builder_with_provider(cert::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(id.chain, id.key)
        .unwrap();
    tls.alpn_protocols = vec![ztp_proto::ALPN.to_vec()];
    let mut config =
        quinn::ServerConfig::with_crypto(Arc::new(QuicServerConfig::try_from(tls).unwrap()));
    let transport = ztserve::server::quic::transport(&QuicConfig::default(), 1_452).unwrap();
    config.transport_config(Arc::new(transport));
    let endpoint = Endpoint::server(config, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = endpoint.local_addr().unwrap();
    let model = Arc::new(model());
    let task = tokio::spawn(async move {
        let conn = endpoint.accept().await.unwrap().await.unwrap();
        let (control, mut recv) = conn.accept_bi().await.unwrap();
        let get = read_get(&mut recv).await;
        let s = Script {
            conn: conn.clone(),
            control,
            recv,
            get,
            model,
        };
        // Hold the connection and its control stream open until the
        // client closes it.
        let _s = script(s).await;
        let _ = conn.closed().await;
        drop(endpoint);
        conn
    });
    (addr, fingerprint, task)
}

/// How long the test client lets a connection receive no stream data (the
/// default is 20 s; the option exists so that tests need not wait that).
const SILENCE: Duration = Duration::from_secs(4);

async fn client(addr: SocketAddr, fingerprint: &str, cap: Option<u64>) -> QuicClient {
    let mut options = Options {
        trust: Trust::fingerprint(fingerprint).unwrap(),
        idle_timeout: SILENCE / 2,
        silence_timeout: SILENCE,
        ..Options::default()
    };
    if let Some(cap) = cap {
        options.component_cap = cap;
    }
    QuicClient::connect(addr, "localhost", Arc::new(options))
        .await
        .unwrap()
}

/// Asks for `m.zt` and reads every outcome: the errors' texts (the first
/// one failing the request), and how many components were delivered.
async fn fetch_all(c: &QuicClient) -> (Vec<String>, usize, Vec<zt_client::Error>) {
    let mut f = match c.get("m.zt", &[], &[], None).await {
        Ok(f) => f,
        Err(e) => return (vec![e.to_string()], 0, vec![e]),
    };
    let (mut texts, mut delivered, mut errors) = (Vec::new(), 0, Vec::new());
    while let Some(item) = f.next().await {
        match item {
            Ok(_) => delivered += 1,
            Err(e) => {
                texts.push(e.to_string());
                errors.push(e);
                break;
            }
        }
    }
    (texts, delivered, errors)
}

/// A client of `quic://localhost/m.zt` at `addr`, spread over
/// `connections`, and its fetch of the whole file.
async fn spread_fetch(
    addr: SocketAddr,
    fingerprint: &str,
    connections: usize,
) -> (zt_client::Client, zt_client::Fetch) {
    let options = Options {
        trust: Trust::fingerprint(fingerprint).unwrap(),
        connections: Some(connections),
        connect_to: Some(addr),
        ..Options::default()
    };
    let c = zt_client::Client::connect("quic://localhost/m.zt", options)
        .await
        .unwrap();
    let f = c.fetch(&[], None).await.unwrap();
    (c, f)
}

/// How the server's end of the connection was closed by the client.
fn closed_with(conn: &Connection) -> Option<u64> {
    match conn.close_reason() {
        Some(quinn::ConnectionError::ApplicationClosed(a)) => Some(a.error_code.into_inner()),
        _ => None,
    }
}

/// Runs `script` against the client; asserts that the fetch failed with an
/// error containing every one of `says`, delivering nothing; returns the
/// error and the server's view of the connection once the client is gone.
async fn refused<F, Fut>(
    script: F,
    cap: Option<u64>,
    says: &[&str],
) -> (zt_client::Error, Connection)
where
    F: FnOnce(Script) -> Fut + Send + 'static,
    Fut: Future<Output = Script> + Send,
{
    let (addr, fp, server) = serve(script).await;
    let c = client(addr, &fp, cap).await;
    let (texts, delivered, mut errors) = fetch_all(&c).await;
    assert_eq!(delivered, 0, "nothing delivered: {texts:?}");
    let text = texts.first().cloned().unwrap_or_default();
    for s in says {
        assert!(text.contains(s), "{s:?} in {text:?}");
    }
    // Whatever failed, the error names the request by its URL.
    let url = format!("quic://localhost:{}/m.zt", addr.port());
    assert!(text.contains(&url), "{url:?} in {text:?}");
    drop(c);
    let conn = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
    (errors.remove(0), conn)
}

const VIOLATION: u64 = 0x01;
const OK: u64 = 0x00;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_framing_closes_the_connection_with_protocol_violation() {
    assert_eq!(Code::ProtocolViolation.value() as u64, VIOLATION);
    // Garbage where a component header belongs.
    let (_, conn) = refused(
        |mut s| async move {
            s.manifest(2).await;
            s.stream(b"\x00\x00\x00\x05hello, not cbor").await;
            s
        },
        None,
        &["m.zt", "the server broke ztp/1: malformed component header"],
    )
    .await;
    assert_eq!(closed_with(&conn), Some(VIOLATION));

    // A stream that ends inside its header.
    let (_, conn) = refused(
        |mut s| async move {
            s.manifest(2).await;
            let h = frame_header(&s.model.first).unwrap();
            s.stream(&h[..h.len() / 2]).await;
            s
        },
        None,
        &["m.zt", "ended inside its header"],
    )
    .await;
    assert_eq!(closed_with(&conn), Some(VIOLATION));

    // A component for a request the client never made.
    let (_, conn) = refused(
        |mut s| async move {
            s.manifest(2).await;
            let body = s.body();
            s.component(|h| h.id = 99, &body).await;
            s
        },
        None,
        &["request 99, which was never made", "model.layers.0.w"],
    )
    .await;
    assert_eq!(closed_with(&conn), Some(VIOLATION));

    // Garbage on the control stream.
    let (_, conn) = refused(
        |mut s| async move {
            s.control
                .write_all(b"\x00\x00\x00\x03\xff\xff\xff")
                .await
                .unwrap();
            s
        },
        None,
        &["m.zt", "the server broke ztp/1: malformed message"],
    )
    .await;
    assert_eq!(closed_with(&conn), Some(VIOLATION));

    // A manifest that is not a manifest: that request fails, naming the
    // file; the connection itself is sound.
    let (_, conn) = refused(
        |mut s| async move {
            s.model = Arc::new(Model {
                manifest: b"\xa1\x01\x02not a manifest".to_vec(),
                bytes: s.model.bytes.clone(),
                first: s.model.first.clone(),
            });
            s.manifest(2).await;
            s
        },
        None,
        &["m.zt"],
    )
    .await;
    assert_eq!(closed_with(&conn), Some(OK));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lying_components_fail_naming_the_object_and_component() {
    let what = "object \"model.layers.0.w\", component \"data\"";

    // Bytes that do not match their digest: refused as corrupt.
    let (e, _) = refused(
        |mut s| async move {
            s.manifest(2).await;
            let mut body = s.body();
            body[1000] ^= 0x40;
            s.component(|_| {}, &body).await;
            s.done(2).await;
            s
        },
        None,
        &[what, "digest mismatch"],
    )
    .await;
    assert!(
        matches!(&e, zt_client::Error::Corrupt { at: Some(at), .. } if at.component == "data"),
        "{e:?}"
    );

    // A digest the header changed: the same.
    refused(
        |mut s| async move {
            s.manifest(2).await;
            let body = s.body();
            s.component(|h| h.digest = Some("crc32c:0x00000000".into()), &body)
                .await;
            s
        },
        None,
        &[what, "digest mismatch"],
    )
    .await;

    // Fewer bytes than announced.
    refused(
        |mut s| async move {
            s.manifest(2).await;
            let body = s.body();
            s.component(|_| {}, &body[..10]).await;
            s
        },
        None,
        &[what, "stream ended after 10 of 1048576 bytes"],
    )
    .await;

    // More bytes than announced.
    refused(
        |mut s| async move {
            s.manifest(2).await;
            let mut body = s.body();
            body.extend_from_slice(b"extra");
            s.component(|_| {}, &body).await;
            s
        },
        None,
        &[what, "more bytes than its header announces"],
    )
    .await;

    // A length over the client's cap: refused before any buffer is taken.
    refused(
        |mut s| async move {
            s.manifest(2).await;
            s.component(|h| h.length = 1 << 40, b"").await;
            s
        },
        Some(4 << 20),
        &[what, "1099511627776 bytes exceed the cap of 4194304"],
    )
    .await;
}

/// Components whose stream header says other than the manifest did: a
/// digest dropped or replaced together with the bytes, a length the
/// manifest did not give, a component the manifest does not hold, one
/// sent twice. Each is refused, the bytes never delivered: the header must
/// not choose what its bytes are checked against (nor how many land at
/// the manifest's offset in a `zt fetch`'s file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_unlike_their_manifest_are_refused() {
    let what = "object \"model.layers.0.w\", component \"data\"";

    // The right bytes, the digest left out of the header: no longer
    // delivered unverified.
    refused(
        |mut s| async move {
            s.manifest(2).await;
            let body = s.body();
            s.component(|h| h.digest = None, &body).await;
            s
        },
        None,
        &[what, "digest None where the manifest says Some(\"crc32c:0x"],
    )
    .await;

    // Other bytes, of another length, under their own (correct) digest.
    refused(
        |mut s| async move {
            s.manifest(2).await;
            let body = s.body()[..2048].to_vec();
            let mut h = zt_format::Hasher::new(zt_format::DigestAlgorithm::Crc32c);
            h.update(&body);
            let digest = h.finish().to_string();
            s.component(|h| (h.length, h.digest) = (2048, Some(digest)), &body)
                .await;
            s
        },
        None,
        &[what, "length 2048 where the manifest says 1048576"],
    )
    .await;

    // A component the manifest does not list.
    refused(
        |mut s| async move {
            s.manifest(2).await;
            let body = s.body();
            s.component(|h| h.object = "not.in.the.manifest".into(), &body)
                .await;
            s
        },
        None,
        &["not.in.the.manifest", "is not in the request's manifest"],
    )
    .await;

    // The same component twice: delivered once, then refused.
    let (addr, fp, _server) = serve(|mut s| async move {
        s.manifest(2).await;
        let body = s.body();
        s.component(|_| {}, &body).await;
        s.component(|h| h.seq = 1, &body).await;
        s.done(2).await;
        s
    })
    .await;
    let c = client(addr, &fp, None).await;
    let (texts, delivered, _) = fetch_all(&c).await;
    assert_eq!(delivered, 1, "{texts:?}");
    let text = texts.first().cloned().unwrap_or_default();
    assert!(
        text.contains(what) && text.contains("arrived twice"),
        "{text}"
    );
}

/// A server that answers keep-alives but sends nothing: before the
/// manifest, and after it. Both requests fail after the silence timeout,
/// not never, naming the file and what was awaited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_fails_the_request_instead_of_hanging() {
    let started = Instant::now();
    let before = refused(
        |s| async { s },
        None,
        &["m.zt: the server sent no data for 4 s while its manifest was awaited"],
    );
    let after = refused(
        |mut s| async move {
            s.manifest(2).await;
            s
        },
        None,
        &[
            "2 of 2 components undelivered",
            "m.zt: the server sent no data for 4 s while a component was awaited",
        ],
    );
    tokio::join!(before, after);
    let took = started.elapsed();
    assert!(took >= SILENCE && took < SILENCE * 2, "{took:?}");
}

/// A server's `error` message of 1 MiB: the request fails with the code
/// and the message's first 300 characters, not a megabyte of text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_error_text_is_quoted_cut_short() {
    let (e, _) = refused(
        |mut s| async move {
            let id = Some(s.get.id);
            s.refuse(id, Code::NotFound, "z".repeat(1 << 20)).await;
            s
        },
        None,
        &["server error not_found", "zzz [cut at 300 characters]"],
    )
    .await;
    assert!(e.to_string().len() < 1024);
    // The server's code arrives typed, for a caller to match on.
    assert!(
        matches!(
            &e,
            zt_client::Error::Server { status, .. } if status.is_not_found()
        ),
        "{e:?}"
    );
}

/// A server from before the `shares` feature ignores a spread fetch's
/// `share` and sends the whole selection; the client, seeing no `shares`
/// in the manifest's features, takes it all from the one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_shares_answers_a_spread_fetch_whole() {
    let (addr, fp, server) = serve(|mut s| async move {
        assert_eq!(
            s.get.share,
            Some((0, 4)),
            "the first share asks as one of four"
        );
        s.manifest(2).await;
        let file = ZtFile::from_bytes("m.zt", &s.model.bytes, Default::default()).unwrap();
        for (seq, (object, role, c)) in (0u64..).zip(file.manifest().components()) {
            let h = ComponentHeader {
                id: s.get.id,
                object: object.to_owned(),
                component: role.to_owned(),
                seq,
                offset: c.offset,
                length: c.length,
                digest: c.digest.as_ref().map(|d| d.to_string()),
                ..s.model.first.clone()
            };
            let mut bytes = frame_header(&h).unwrap();
            bytes.extend_from_slice(
                &s.model.bytes[c.offset as usize..(c.offset + c.length) as usize],
            );
            s.stream(&bytes).await;
        }
        s.done(2).await;
        s
    })
    .await;
    let (c, mut f) = spread_fetch(addr, &fp, 4).await;
    let mut seqs = Vec::new();
    while let Some(d) = f.next().await {
        let d = d.unwrap();
        assert_eq!(d.verification, zt_client::Verification::Verified);
        seqs.push(d.seq);
    }
    seqs.sort_unstable();
    assert_eq!(seqs, [0, 1], "both components, from the one connection");
    drop(f);
    c.close().await;
    drop(c);
    let conn = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(closed_with(&conn), Some(OK));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_refused_everywhere_fails_the_fetch_naming_the_url_once() {
    // The server takes one connection (the others never finish their
    // handshakes), offers shares, and refuses every share after the first.
    let (addr, fp, server) = serve(|mut s| async move {
        s.manifest_offering(1, vec![ztp_proto::FEATURE_SHARES.to_owned()])
            .await;
        // The share asked on the first connection, twice (once for the
        // connection that did not open, once as the fallback).
        for _ in 0..2 {
            let Ok(g) = tokio::time::timeout(Duration::from_secs(10), read_get(&mut s.recv)).await
            else {
                break;
            };
            let message = "no such version".to_owned();
            s.refuse(Some(g.id), Code::NotFound, message).await;
        }
        s
    })
    .await;
    let (c, mut f) = spread_fetch(addr, &fp, 2).await;
    let err = loop {
        match f.next().await {
            Some(Ok(_)) => continue,
            Some(Err(e)) => break e.to_string(),
            None => panic!("the fetch ended without its share"),
        }
    };
    // The URL as given (no port: the default), once, however many
    // connections the share was tried on.
    let url = "quic://localhost:7070/m.zt";
    assert!(err.contains("share 1 failed"), "{err}");
    assert!(err.contains("no such version"), "{err}");
    assert_eq!(err.matches(url).count(), 1, "the URL once: {err}");
    drop(f);
    c.close().await;
    drop(c);
    let _ = tokio::time::timeout(Duration::from_secs(10), server).await;
}
