//! The ztp/1 client: one QUIC connection, any number of requests on it.
//! Server messages on the control stream are handed to their requests by
//! `routes`; component streams are read, checked and delivered by
//! `streams`.

mod routes;
pub(crate) mod spread;
mod streams;

use std::net::SocketAddr;
use std::sync::Arc;

use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Connection, Endpoint};
use tokio::sync::{mpsc, oneshot};
use zt_format::{AlignedBuf, Limits};
use ztp_proto::{
    frame, Cancel, Code, Get, ManifestMsg, Message, ALPN, FEATURE_RANGES, FEATURE_ROWS,
    FEATURE_SLICES,
};

use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::fetch::Fetch;
use crate::options::Options;
use crate::pool::BufPool;
use crate::silence::Watch;
use crate::trust::watched_config;
use routes::{Route, Routes};

/// A connection to a ztp/1 server.
#[derive(Debug)]
pub struct QuicClient {
    conn: Connection,
    /// Held for as long as the connection: its socket.
    _endpoint: Endpoint,
    control: tokio::sync::Mutex<quinn::SendStream>,
    routes: Routes,
    options: Arc<Options>,
    pool: Arc<BufPool>,
    /// `quic://host:port`, which with a request's path names it in errors.
    origin: String,
    /// Requests in flight at once ([`REQUESTS`]): more wait their turn.
    requests: Arc<tokio::sync::Semaphore>,
}

/// Requests one connection has in flight at once, at most: what servers
/// bound them to (PROTOCOL.md section 9, ztserve's `quic.max_requests`),
/// so that callers past it (many threads each asking for a tensor) wait
/// their turn instead of each getting `too_many_requests`.
pub const REQUESTS: usize = 16;

/// Where a connection goes: the address, the name the server's
/// certificate is checked against, and the port the URL names (errors
/// name the URL, `quic://name:port/path`, even where `connect_to` or a
/// mirror sent the connection to another address).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dial<'a> {
    pub(crate) addr: SocketAddr,
    pub(crate) name: &'a str,
    pub(crate) port: u16,
}

/// A request sent and answered with its manifest.
struct Asked {
    routed: Routed,
    msg: ManifestMsg,
}

/// A request's place in its connection's routes, given up when dropped
/// (its fetch dropped, or the request failed).
pub(super) struct Routed {
    routes: Routes,
    pub(super) id: u64,
}

impl Drop for Routed {
    fn drop(&mut self) {
        if let Ok(mut session) = self.routes.lock() {
            session.forget(self.id);
        }
    }
}

/// The client's transport settings: windows as large as the server's
/// defaults, room for the server's component streams, and keep-alives so
/// that an idle but healthy connection (lazy loading) stays up while a
/// server that vanished is noticed within `idle_timeout`.
pub fn transport(idle_timeout: std::time::Duration) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(idle_timeout)
        .unwrap_or_else(|_| quinn::VarInt::from_u32(u32::MAX).into());
    t.stream_receive_window(quinn::VarInt::from_u32(16 << 20))
        .receive_window(quinn::VarInt::from_u32(64 << 20))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(256))
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(Some(idle_timeout / 3));
    t
}

/// Whether a connection failed in its TLS handshake on this side (a
/// refused certificate among the causes): QUIC carries TLS alerts as the
/// crypto error codes 0x100-0x1ff. Anything else (a timeout, a refused
/// connection) is not blamed on a certificate, even one refused meanwhile
/// for another connection to the same host.
fn tls_failed(e: &quinn::ConnectionError) -> bool {
    match e {
        quinn::ConnectionError::TransportError(t) => (0x100..=0x1ff).contains(&u64::from(t.code)),
        _ => false,
    }
}

/// The receive window of a connection of a fetch over `connections`: 64
/// MiB for the first, which may carry the whole fetch alone (a server
/// without `shares`, or the others not opened), and a share of 128 MiB
/// for each of the others (64 MiB for the second of two, 16 MiB each
/// from eight on: eight such connections loaded 1 GiB at 3 GB/s over
/// loopback as fast as with 64 MiB each, docs/benchmarks.md,
/// twenty-ninth session), so that what a stalled consumer leaves
/// buffered in the connections grows slower than their number.
fn receive_window(connections: usize, first: bool) -> quinn::VarInt {
    let each = if first {
        64 << 20
    } else {
        ((128usize << 20) / connections.max(1)).clamp(16 << 20, 64 << 20)
    };
    quinn::VarInt::from_u32(u32::try_from(each).unwrap_or(16 << 20))
}

/// Dropping the client closes its connection with `ok`, so the server
/// frees it at once instead of waiting out its idle timeout.
impl Drop for QuicClient {
    fn drop(&mut self) {
        self.conn
            .close(quinn::VarInt::from_u32(Code::Ok.value()), b"client done");
    }
}

/// What a path keeps percent-encoded when an error names its URL (a
/// file's name may hold spaces, `?` or `#`).
const NOT_IN_A_PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// `quic://host:port`: a server as a URL names it (an IPv6 address in
/// brackets).
fn origin(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("quic://[{host}]:{port}")
    } else {
        format!("quic://{host}:{port}")
    }
}

/// `origin` and `path` as one URL, the path percent-encoded.
fn url_of(origin: &str, path: &str) -> String {
    let path = percent_encoding::utf8_percent_encode(path, NOT_IN_A_PATH);
    format!("{origin}/{path}")
}

/// The most [`QuicClient::close`] waits for its close to leave.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

impl QuicClient {
    /// Closes the connection with `ok` and waits until the close has been
    /// handed to the socket (at most half a second), so a process that
    /// exits next does not leave the server holding the connection until
    /// its idle timeout. It does not wait out the closing connection's
    /// draining period (three probe timeouts, about 80 ms on loopback),
    /// which only absorbs late packets: `zt info quic://` took 90 ms where
    /// HTTP took 6. Best effort, as any close over UDP: quinn says when
    /// it built the close datagram, not when the socket took it (a full
    /// socket buffer keeps it a moment longer).
    pub async fn close(&self) {
        // Already closed (by the server, an idle timeout, an error):
        // nothing more will be sent.
        if self.conn.close_reason().is_some() {
            return;
        }
        let before = self.conn.stats().udp_tx.datagrams;
        self.conn
            .close(quinn::VarInt::from_u32(Code::Ok.value()), b"client done");
        let sent = async {
            // A closed connection sends nothing but its close; its driver
            // builds the datagram and hands it to the socket in one turn.
            // One more millisecond covers an acknowledgement that went out
            // between `before` and the close.
            while self.conn.stats().udp_tx.datagrams == before {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, sent).await;
    }

    /// Connects to `addr`, verifying the server as `server_name` under the trust policy.
    pub async fn connect(
        addr: SocketAddr,
        server_name: &str,
        options: Arc<Options>,
    ) -> Result<Self> {
        let at = Dial {
            addr,
            name: server_name,
            port: addr.port(),
        };
        Self::connect_sharing(at, options, Arc::default(), true).await
    }

    /// [`QuicClient::connect`] to `at`, taking component buffers from
    /// `pool` (a spread fetch's connections share one); `first` unless it
    /// is one of a spread fetch's other connections. Its requests' errors
    /// name `quic://{at.name}:{at.port}/PATH`.
    async fn connect_sharing(
        at: Dial<'_>,
        options: Arc<Options>,
        pool: Arc<BufPool>,
        first: bool,
    ) -> Result<Self> {
        let Dial {
            addr,
            name: server_name,
            port,
        } = at;
        crate::trust::install_provider();
        let (tls, watch) = watched_config(&options.trust, ALPN, server_name)?;
        let quic_tls = QuicClientConfig::try_from(tls)
            .map_err(|e| Error::Usage(format!("TLS for QUIC: {e}")))?;
        let mut config = quinn::ClientConfig::new(Arc::new(quic_tls));
        // Datagrams as large as the path to `addr` carries (udp.rs).
        let payload = crate::udp::max_payload(options.max_udp_payload, addr.ip());
        let mut t = transport(options.idle_timeout);
        t.receive_window(receive_window(options.quic_connections(), first));
        crate::udp::datagrams_up_to(&mut t, payload);
        config.transport_config(Arc::new(t));
        let bind = match addr {
            SocketAddr::V6(_) => SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 0)),
            SocketAddr::V4(_) => SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, 0)),
        };
        let transport = |e: &dyn std::fmt::Display| {
            Error::Transport(format!("connecting to {addr} over QUIC: {e}"))
        };
        let sock =
            crate::udp::bind(bind, crate::udp::DEFAULT_BUFFER_BYTES).map_err(|e| transport(&e))?;
        let mut endpoint = Endpoint::new(
            crate::udp::endpoint_config(crate::udp::accepted_payload(
                options.max_udp_payload,
                addr.ip(),
            )),
            None,
            sock,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|e| transport(&e))?;
        endpoint.set_default_client_config(config);
        let conn = endpoint
            .connect(addr, server_name)
            .map_err(|e| transport(&e))?
            .await
            .map_err(|e| match watch.last().filter(|_| tls_failed(&e)) {
                // quinn reports the handshake's failure as text; the check
                // kept why it refused the certificate.
                Some(refused) => Error::Tls(format!("connecting to {addr} over QUIC: {refused}")),
                None => transport(&e),
            })?;
        let (send, recv) = conn
            .open_bi()
            .await
            .map_err(|e| Error::Transport(format!("{addr}: opening the control stream: {e}")))?;
        let routes: Routes = Arc::default();
        tokio::spawn(routes::read_control(
            recv,
            Arc::clone(&routes),
            options.manifest_cap,
            conn.clone(),
        ));
        tokio::spawn(streams::accept_streams(
            conn.clone(),
            Arc::clone(&routes),
            Arc::clone(&options),
            Arc::clone(&pool),
        ));
        Ok(QuicClient {
            conn,
            _endpoint: endpoint,
            control: tokio::sync::Mutex::new(send),
            routes,
            options,
            pool,
            origin: origin(server_name, port),
            requests: Arc::new(tokio::sync::Semaphore::new(REQUESTS)),
        })
    }

    async fn send(&self, m: &Message) -> Result<()> {
        let bytes =
            frame(m).map_err(|e| Error::Usage(format!("a request too large to send: {e}")))?;
        // The server closes the connection on a larger one.
        let body = bytes.len().saturating_sub(4);
        if body > ztp_proto::MAX_CLIENT_MESSAGE {
            return Err(Error::Usage(format!(
                "a ztp/1 request of {body} bytes, over the cap of {} on a client's message (message_too_large): select with fewer or shorter patterns",
                ztp_proto::MAX_CLIENT_MESSAGE
            )));
        }
        self.control
            .lock()
            .await
            .write_all(&bytes)
            .await
            .map_err(|e| Error::Transport(format!("sending on the control stream: {e}")))
    }

    /// Asks for `path` with a selection and an optional explicit order.
    pub async fn get(
        &self,
        path: &str,
        select: &[String],
        order: &[String],
        if_match: Option<&str>,
    ) -> Result<Fetch> {
        self.request(path, select, order, if_match, false, None)
            .await
    }

    pub(crate) async fn request(
        &self,
        path: &str,
        select: &[String],
        order: &[String],
        if_match: Option<&str>,
        manifest_only: bool,
        max_buffered: Option<u64>,
    ) -> Result<Fetch> {
        let get = Get {
            path: path.to_owned(),
            select: select.to_vec(),
            order: order.to_vec(),
            token: self.options.token.clone(),
            if_match: if_match.map(str::to_owned),
            manifest_only,
            ..Get::default()
        };
        self.ask(get, max_buffered).await
    }

    /// Raw byte ranges of `path` (the server must name the feature
    /// [`ztp_proto::FEATURE_RANGES`]), a stream each, delivered as
    /// components of objects `@bytes/START-END` without digests.
    pub(crate) async fn request_ranges(
        &self,
        path: &str,
        ranges: &[(u64, u64)],
        if_match: &str,
    ) -> Result<Fetch> {
        let get = Get {
            path: path.to_owned(),
            token: self.options.token.clone(),
            if_match: Some(if_match.to_owned()),
            ranges: ranges.to_vec(),
            ..Get::default()
        };
        self.ask(get, None).await
    }

    /// Rows `rows` of `object` (the server must name the feature
    /// [`ztp_proto::FEATURE_ROWS`]): one stream, delivered as the object's
    /// `data` cut to those rows, checked against the digest of exactly
    /// those bytes that the server computed.
    pub(crate) async fn request_rows(
        &self,
        path: &str,
        object: &str,
        rows: (u64, u64),
        if_match: &str,
    ) -> Result<Fetch> {
        let get = Get {
            rows: Some(rows),
            ..self.one_object(path, object, if_match)
        };
        self.ask(get, None).await
    }

    /// Slice `ranges` (`[start, end)` per dimension from the first) of
    /// `object` (the server must name the feature
    /// [`ztp_proto::FEATURE_SLICES`]): one stream of the gathered bytes,
    /// checked against the digest of exactly those bytes that the server
    /// computed.
    pub(crate) async fn request_slice(
        &self,
        path: &str,
        object: &str,
        ranges: Vec<(u64, u64)>,
        if_match: &str,
    ) -> Result<Fetch> {
        let get = Get {
            slice: ranges,
            ..self.one_object(path, object, if_match)
        };
        self.ask(get, None).await
    }

    /// A `get` of exactly `object` of `path` at version `if_match`.
    fn one_object(&self, path: &str, object: &str, if_match: &str) -> Get {
        Get {
            path: path.to_owned(),
            select: vec![zt_format::select::escape(object)],
            token: self.options.token.clone(),
            if_match: Some(if_match.to_owned()),
            ..Get::default()
        }
    }

    async fn ask(&self, get: Get, max_buffered: Option<u64>) -> Result<Fetch> {
        // Rows and slices start where they start: not on 64-byte boundaries.
        let view = if get.rows.is_some() || !get.slice.is_empty() {
            zt_format::container::View::Parts
        } else {
            zt_format::container::View::File
        };
        let path = get.path.clone();
        let name = self.name_of(&path);
        // What the server must have named for this `get` to be answered as
        // asked (one without it would send whole objects instead).
        let needs = match () {
            () if !get.ranges.is_empty() => Some(("byte ranges", FEATURE_RANGES)),
            () if !get.slice.is_empty() => Some(("slices", FEATURE_SLICES)),
            () if get.rows.is_some() => Some(("rows", FEATURE_ROWS)),
            () => None,
        };
        let (dtx, drx) = mpsc::unbounded_channel();
        let asked = self
            .send_get(get, dtx, max_buffered.map(Budget::new))
            .await?;
        if let Some((what, feature)) = needs {
            if !asked.msg.features.iter().any(|f| f == feature) {
                // Whatever it would send instead is not wanted.
                let _ = self.cancel(asked.routed.id, None, None).await;
                return Err(Error::Usage(format!(
                    "{name}: the server does not offer {what} over ztp/1 (feature {feature:?})"
                )));
            }
        }
        let manifest = self.decode(&path, &asked.msg, view).await?;
        let m = asked.msg;
        let routed = asked.routed;
        Ok(
            Fetch::new(name, routed.id, manifest, m.etag, m.size, m.streams, drx)
                .watched(self.watch(&path))
                // The request stays routable until the fetch is dropped: its
                // last streams may be read after its `done`.
                .on_drop(move || drop(routed)),
        )
    }

    /// The manifest a `manifest` message carries for a request for
    /// `path`, decoded and validated (its errors name the URL).
    async fn decode(
        &self,
        path: &str,
        m: &ManifestMsg,
        view: zt_format::container::View,
    ) -> Result<zt_format::Manifest> {
        let limits = Limits {
            manifest_cap: self.options.manifest_cap,
            ..Limits::default()
        };
        let name = self.name_of(path);
        crate::decode::manifest(&name, m.manifest.clone(), m.size, limits, view).await
    }

    /// This connection, watched for silence on behalf of a request for `path`.
    fn watch(&self, path: &str) -> Watch {
        Watch::new(
            self.conn.clone(),
            &self.name_of(path),
            self.options.silence_timeout,
        )
    }

    /// What errors about a request for `path` call it: its URL.
    pub(crate) fn name_of(&self, path: &str) -> String {
        url_of(&self.origin, path)
    }

    /// Sends `get` and waits for its `manifest` message (not decoded); its
    /// components go to `deliver`, each after reserving its length in
    /// `budget` when given. A request waits for a turn among the
    /// connection's [`REQUESTS`]; one the server refuses as
    /// `too_many_requests` (it counts a request until its `done`, which may
    /// come after the client is through with it, and may bound fewer) is
    /// sent again after a pause, for as long as the server may stay silent;
    /// one refused for a passing reason (`retry_after_ms`: the server is
    /// busy) is sent again after the server's wait, for at most
    /// [`Options::busy_wait`](crate::Options::busy_wait) from the first
    /// ([`crate::busy`]).
    async fn send_get(
        &self,
        get: Get,
        deliver: routes::Delivery,
        budget: Option<Budget>,
    ) -> Result<Asked> {
        let name = self.name_of(&get.path);
        // Refusals are retried for a silence timeout from the first.
        let mut until = None;
        let mut pause = std::time::Duration::from_millis(5);
        let mut waits = crate::busy::Waits::new(self.options.busy_wait);
        loop {
            // A turn comes as the requests before it are answered: waited
            // for while the connection moves data, failing only when it
            // stays silent as long as a server may.
            let turn = Arc::clone(&self.requests).acquire_owned();
            let turn = match self
                .watch(&get.path)
                .unless_silent("a turn among its requests", turn)
                .await?
            {
                Ok(turn) => turn,
                Err(_) => {
                    return Err(Error::Transport(format!(
                        "{name}: the connection is closed"
                    )))
                }
            };
            let asked = self
                .ask_once(get.clone(), deliver.clone(), budget.clone(), turn, &name)
                .await;
            match asked {
                Err(Error::Server {
                    status: crate::Status::Ztp(Code::TooManyRequests),
                    ..
                }) if tokio::time::Instant::now() + pause
                    < *until.get_or_insert_with(|| {
                        tokio::time::Instant::now() + self.options.silence_timeout
                    }) =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(std::time::Duration::from_millis(200));
                }
                Err(e) => match waits.next(&e) {
                    Some(wait) => tokio::time::sleep(wait).await,
                    None => return Err(waits.gave_up(e)),
                },
                answered => return answered,
            }
        }
    }

    /// [`QuicClient::send_get`] once, in `turn`.
    async fn ask_once(
        &self,
        get: Get,
        deliver: routes::Delivery,
        budget: Option<Budget>,
        turn: tokio::sync::OwnedSemaphorePermit,
        name: &str,
    ) -> Result<Asked> {
        let (mtx, mrx) = oneshot::channel();
        let route = Route {
            name: name.to_owned(),
            manifest: Some(mtx),
            deliver,
            budget,
            turn: Some(turn),
        };
        let path = get.path.clone();
        // The session hands out the id and routes the request's messages
        // and streams until it is forgotten (the fetch dropped, or a failure).
        let get = match self.routes.lock() {
            Ok(mut session) => session.request(get, route),
            Err(_) => return Err(Error::Transport(format!("{name}: the connection failed"))),
        };
        let routed = Routed {
            routes: Arc::clone(&self.routes),
            id: get.id,
        };
        self.send(&Message::Get(get))
            .await
            .map_err(|e| e.within(name))?;
        let msg = self
            .watch(&path)
            .unless_silent("its manifest", mrx)
            .await?
            .map_err(|_| {
                Error::Transport(format!(
                    "{name}: connection closed before the manifest arrived"
                ))
            })??;
        Ok(Asked { routed, msg })
    }

    /// The manifest of `path` alone (`manifest_only`), restricted to the
    /// objects `select` names (every object when empty).
    pub async fn get_manifest(&self, path: &str, select: &[String]) -> Result<Fetch> {
        self.request(path, select, &[], None, true, None).await
    }

    /// Cancels a request, an object of it, or one component.
    pub async fn cancel(
        &self,
        id: u64,
        object: Option<&str>,
        component: Option<&str>,
    ) -> Result<()> {
        self.send(&Message::Cancel(Cancel {
            id,
            object: object.map(str::to_owned),
            component: component.map(str::to_owned),
        }))
        .await
    }

    /// What the server supports beyond ztp/1 as first published, once a
    /// manifest on this connection has said it (PROTOCOL.md, "Features");
    /// `None` before the first manifest.
    pub fn features(&self) -> Option<Vec<String>> {
        self.routes.lock().ok()?.features().map(<[String]>::to_vec)
    }

    /// Whether the server named `feature` in a manifest on this
    /// connection (`None`: none has arrived yet).
    pub fn offers(&self, feature: &str) -> Option<bool> {
        let routes = self.routes.lock().ok()?;
        routes.features().map(|f| f.iter().any(|x| x == feature))
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Takes back a delivered component's buffer for a later component.
    pub fn recycle(&self, buf: AlignedBuf) {
        self.pool.give(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::{origin, receive_window, tls_failed, url_of};

    /// Only a TLS alert this side raised (QUIC's crypto error codes)
    /// lets a connection's error be blamed on a refused certificate; a
    /// timeout, a reset, other transport errors, or the peer closing
    /// (even with an alert of its own) do not, whatever the shared log of
    /// refusals holds.
    #[test]
    fn only_a_tls_alert_is_a_failed_handshake() {
        use quinn::{ApplicationClose, ConnectionClose, ConnectionError, TransportErrorCode};
        // bad_certificate (42) and the alerts at both ends of the range.
        for alert in [42, 0, 0xff] {
            let e = ConnectionError::TransportError(TransportErrorCode::crypto(alert).into());
            assert!(tls_failed(&e), "alert {alert}");
        }
        for code in [
            TransportErrorCode::PROTOCOL_VIOLATION,
            TransportErrorCode::CONNECTION_REFUSED,
            TransportErrorCode::CRYPTO_BUFFER_EXCEEDED,
        ] {
            let e = ConnectionError::TransportError(code.into());
            assert!(!tls_failed(&e), "{code:?}");
        }
        let peer_alert = ConnectionClose {
            error_code: TransportErrorCode::crypto(42),
            frame_type: None,
            reason: bytes::Bytes::new(),
        };
        let peer_app = ApplicationClose {
            error_code: 0u32.into(),
            reason: bytes::Bytes::new(),
        };
        for e in [
            ConnectionError::TimedOut,
            ConnectionError::Reset,
            ConnectionError::LocallyClosed,
            ConnectionError::ConnectionClosed(peer_alert),
            ConnectionError::ApplicationClosed(peer_app),
        ] {
            assert!(!tls_failed(&e), "{e:?}");
        }
    }

    #[test]
    fn errors_name_a_url_with_brackets_and_escapes_where_due() {
        assert_eq!(origin("::1", 7070), "quic://[::1]:7070");
        assert_eq!(origin("models.example", 443), "quic://models.example:443");
        let url = url_of("quic://h:1", "a b/c?d#e%f/\u{e9}.zt");
        assert_eq!(url, "quic://h:1/a%20b/c%3Fd%23e%25f/%C3%A9.zt");
    }

    #[test]
    fn more_connections_share_the_receive_windows() {
        let mib = |n: u32| quinn::VarInt::from_u32(n << 20);
        for connections in [0, 1, 2, 8, 64] {
            assert_eq!(receive_window(connections, true), mib(64), "{connections}");
        }
        for (connections, window) in [(2, 64), (4, 32), (8, 16), (64, 16)] {
            assert_eq!(
                receive_window(connections, false),
                mib(window),
                "{connections}"
            );
        }
    }
}
