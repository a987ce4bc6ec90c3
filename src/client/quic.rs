//! The ztp/1 client: one QUIC connection, any number of requests on it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Connection, Endpoint, RecvStream};
use tokio::sync::{mpsc, oneshot};
use zt_format::{AlignedBuf, Limits};
use ztp_proto::{frame, Cancel, Code, Deframer, Get, ManifestMsg, Message, ALPN};

use super::budget::Budget;
use super::pool::BufPool;
use super::trust::{client_config, Trust};
use super::verify::{Check, Delivered, Refusal, Refused, Transport};
use super::{Arrival, Fetch};

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub trust: Trust,
    pub token: Option<String>,
    /// Accept components whose digest algorithm is unknown.
    pub allow_unverified: bool,
    /// Largest manifest accepted, in bytes.
    pub manifest_cap: u64,
    /// Largest single component accepted, in bytes.
    pub component_cap: u64,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            trust: Trust::System,
            token: None,
            allow_unverified: false,
            manifest_cap: zt_format::DEFAULT_MANIFEST_CAP,
            component_cap: 64 << 30,
        }
    }
}

type Delivery = mpsc::UnboundedSender<Arrival>;

#[derive(Debug)]
struct Route {
    /// The file asked for, to name in errors.
    path: String,
    manifest: Option<oneshot::Sender<Result<ManifestMsg>>>,
    deliver: Delivery,
    /// A bounded request's budget: a stream waits for room before its
    /// bytes are read (and quinn's flow control holds the server back).
    budget: Option<Budget>,
}

type Routes = Arc<Mutex<HashMap<u64, Route>>>;

/// A connection to a ztp/1 server.
#[derive(Debug)]
pub struct QuicClient {
    conn: Connection,
    _endpoint: Endpoint,
    control: tokio::sync::Mutex<quinn::SendStream>,
    next_id: AtomicU64,
    routes: Routes,
    options: Arc<ClientOptions>,
    pool: Arc<BufPool>,
}

/// Hands `err` to the request `id`, or to every request when the
/// connection itself failed (no id), each naming its own file.
fn route_error(routes: &Routes, id: Option<u64>, code: Option<Code>, err: &str) {
    let Ok(mut r) = routes.lock() else { return };
    let ids: Vec<u64> = match id {
        Some(i) => vec![i],
        None => r.keys().copied().collect(),
    };
    // Without an id the connection itself failed: a transport error. A
    // component the server refused as corrupt can never be fetched.
    let make = |path: &str| -> anyhow::Error {
        match (id, code) {
            (Some(_), Some(Code::Corrupt)) => Refused {
                kind: Refusal::Corrupt,
                message: err.to_owned(),
            }
            .into(),
            (Some(_), _) => anyhow!("{err}"),
            (None, _) => Transport(format!("{path}: {err}")).into(),
        }
    };
    for i in ids {
        if let Some(route) = r.get_mut(&i) {
            let e = make(&route.path);
            match route.manifest.take() {
                Some(tx) => {
                    let _ = tx.send(Err(e));
                }
                None => {
                    let _ = route.deliver.send((Err(e), None));
                }
            }
        }
    }
}

/// How long a silent server is given before the connection counts as lost.
pub const IDLE_TIMEOUT_MS: u32 = 10_000;

/// The client's transport settings: windows as large as the server's
/// defaults, room for the server's component streams, and keep-alives so
/// that an idle but healthy connection (lazy loading) stays up while a
/// server that vanished is noticed within [`IDLE_TIMEOUT_MS`].
pub fn transport() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(quinn::VarInt::from_u32(16 << 20))
        .receive_window(quinn::VarInt::from_u32(64 << 20))
        .max_concurrent_uni_streams(quinn::VarInt::from_u32(256))
        .max_idle_timeout(Some(quinn::VarInt::from_u32(IDLE_TIMEOUT_MS).into()))
        .keep_alive_interval(Some(std::time::Duration::from_millis(
            u64::from(IDLE_TIMEOUT_MS) / 3,
        )));
    t
}

/// Dropping the client closes its connection with `ok`, so the server
/// frees it at once instead of waiting out its idle timeout.
impl Drop for QuicClient {
    fn drop(&mut self) {
        self.conn
            .close(quinn::VarInt::from_u32(Code::Ok.value()), b"client done");
    }
}

impl QuicClient {
    /// Connects to `addr`, verifying the server as `server_name` under the trust policy.
    pub async fn connect(
        addr: SocketAddr,
        server_name: &str,
        options: ClientOptions,
    ) -> Result<Self> {
        crate::server::tls::install_provider();
        let tls = client_config(&options.trust, ALPN)?;
        let mut config = quinn::ClientConfig::new(Arc::new(QuicClientConfig::try_from(tls)?));
        config.transport_config(Arc::new(transport()));
        let bind: SocketAddr = if addr.is_ipv6() {
            "[::]:0".parse()?
        } else {
            "0.0.0.0:0".parse()?
        };
        let sock = crate::udp::bind(bind, crate::udp::DEFAULT_BUFFER_BYTES)?;
        let mut endpoint = Endpoint::new(
            quinn::EndpointConfig::default(),
            None,
            sock,
            Arc::new(quinn::TokioRuntime),
        )
        .context("opening a UDP socket")?;
        endpoint.set_default_client_config(config);
        let conn = endpoint
            .connect(addr, server_name)?
            .await
            .with_context(|| format!("connecting to {addr} over QUIC"))?;
        let (send, recv) = conn.open_bi().await.context("opening the control stream")?;
        let routes: Routes = Arc::default();
        let options = Arc::new(options);
        tokio::spawn(read_control(
            recv,
            Arc::clone(&routes),
            options.manifest_cap,
            addr,
        ));
        let pool = Arc::new(BufPool::default());
        tokio::spawn(accept_streams(
            conn.clone(),
            Arc::clone(&routes),
            Arc::clone(&options),
            Arc::clone(&pool),
        ));
        Ok(QuicClient {
            conn,
            _endpoint: endpoint,
            control: tokio::sync::Mutex::new(send),
            next_id: AtomicU64::new(1),
            routes,
            options,
            pool,
        })
    }

    async fn send(&self, m: &Message) -> Result<()> {
        let bytes = frame(m)?;
        self.control
            .lock()
            .await
            .write_all(&bytes)
            .await
            .context("sending on the control stream")?;
        Ok(())
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
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (mtx, mrx) = oneshot::channel();
        let (dtx, drx) = mpsc::unbounded_channel();
        if let Ok(mut r) = self.routes.lock() {
            r.insert(
                id,
                Route {
                    path: path.to_owned(),
                    manifest: Some(mtx),
                    deliver: dtx,
                    budget: max_buffered.map(Budget::new),
                },
            );
        }
        let get = Get {
            id,
            path: path.to_owned(),
            select: select.to_vec(),
            order: order.to_vec(),
            token: self.options.token.clone(),
            if_match: if_match.map(str::to_owned),
            manifest_only,
        };
        self.send(&Message::Get(get)).await?;
        let m = mrx
            .await
            .map_err(|_| anyhow!("connection closed before the manifest arrived"))??;
        let limits = Limits {
            manifest_cap: self.options.manifest_cap,
            ..Limits::default()
        };
        let (manifest, _) =
            zt_format::container::decode_manifest(path, &m.manifest, m.size, &limits)?;
        Ok(Fetch::new(id, manifest, m.etag, m.size, m.streams, drx))
    }

    /// The manifest of `path` alone (`manifest_only`).
    pub async fn get_manifest(&self, path: &str) -> Result<Fetch> {
        self.request(path, &[], &[], None, true, None).await
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

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Takes back a delivered component's buffer for a later component.
    pub fn recycle(&self, buf: AlignedBuf) {
        self.pool.give(buf);
    }
}

async fn read_control(mut recv: RecvStream, routes: Routes, cap: u64, addr: SocketAddr) {
    let mut d = Deframer::new(usize::try_from(cap.saturating_add(4096)).unwrap_or(usize::MAX));
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match recv.read(&mut buf).await {
            Ok(Some(n)) => d.push(buf.get(..n).unwrap_or_default()),
            Ok(None) => break,
            Err(e) => {
                let why = match e {
                    quinn::ReadError::ConnectionLost(c) => lost(addr, &c),
                    e => format!("the server broke off the control stream: {e}"),
                };
                route_error(&routes, None, None, &why);
                return;
            }
        }
        loop {
            match d.next_message() {
                Ok(Some(Message::Manifest(m))) => {
                    if let Ok(mut r) = routes.lock() {
                        if let Some(tx) = r.get_mut(&m.id).and_then(|route| route.manifest.take()) {
                            let _ = tx.send(Ok(m));
                        }
                    }
                }
                Ok(Some(Message::Error(e))) => route_error(
                    &routes,
                    e.id,
                    Some(e.code),
                    &format!("server error {}: {}", e.code, e.message),
                ),
                Ok(Some(Message::Done(d))) => {
                    // Tell the fetch how many components were sent whole:
                    // streams cancelled before they opened never arrive.
                    if let Ok(r) = routes.lock() {
                        if let Some(route) = r.get(&d.id) {
                            let _ = route
                                .deliver
                                .send((Err(super::DoneMarker(d.sent).into()), None));
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    route_error(
                        &routes,
                        None,
                        None,
                        &format!("malformed message from the server: {e}"),
                    );
                    return;
                }
            }
        }
    }
}

async fn accept_streams(
    conn: Connection,
    routes: Routes,
    options: Arc<ClientOptions>,
    pool: Arc<BufPool>,
) {
    let why = loop {
        match conn.accept_uni().await {
            Ok(stream) => {
                let (routes, options, pool) =
                    (Arc::clone(&routes), Arc::clone(&options), Arc::clone(&pool));
                tokio::spawn(async move {
                    let (deliver, arrival) = receive(stream, &options, &routes, &pool).await;
                    if let Some(d) = deliver {
                        let _ = d.send(arrival);
                    }
                });
            }
            Err(e) => break e,
        }
    };
    route_error(&routes, None, None, &lost(conn.remote_address(), &why));
}

/// The error a request gets when its connection to `addr` is gone, saying
/// why (the server closing it, a timeout, a reset).
fn lost(addr: SocketAddr, why: &quinn::ConnectionError) -> String {
    format!("the QUIC connection to {addr} was lost: {why}")
}

/// Why a component stream broke after `pos` bytes: the server refusing a
/// corrupt component (never resumable), or the network (resumable).
fn stream_error(label: &str, pos: usize, e: quinn::ReadError) -> anyhow::Error {
    match e {
        quinn::ReadError::Reset(c) => match Code::from_value(c.into_inner()) {
            Some(Code::Corrupt) => Refused {
                kind: Refusal::Corrupt,
                message: format!(
                    "{label}: digest mismatch found by the server, which refused to send it"
                ),
            }
            .into(),
            Some(code) => Transport(format!(
                "{label}: the server reset the stream after {pos} bytes: {code}"
            ))
            .into(),
            None => Transport(format!(
                "{label}: the server reset the stream after {pos} bytes with code {c}"
            ))
            .into(),
        },
        e => Transport(format!("{label}: stream failed after {pos} bytes: {e}")).into(),
    }
}

/// Reads one component stream: header, then exactly `length` bytes into an
/// aligned buffer, hashed as they arrive.
async fn receive(
    mut stream: RecvStream,
    options: &ClientOptions,
    routes: &Routes,
    pool: &BufPool,
) -> (Option<Delivery>, Arrival) {
    let mut d = Deframer::new(ztp_proto::MAX_CLIENT_MESSAGE);
    let mut chunk = vec![0u8; 64 * 1024];
    let header = loop {
        match d.next_header() {
            Ok(Some(h)) => break h,
            Ok(None) => {}
            Err(e) => {
                return (
                    None,
                    (Err(anyhow!("malformed component header: {e}")), None),
                )
            }
        }
        match stream.read(&mut chunk).await {
            Ok(Some(n)) => d.push(chunk.get(..n).unwrap_or_default()),
            Ok(None) => {
                return (
                    None,
                    (
                        Err(anyhow!("component stream ended inside its header")),
                        None,
                    ),
                )
            }
            Err(e) => return (None, (Err(anyhow!("component stream failed: {e}")), None)),
        }
    };
    let (id, budget) = routes
        .lock()
        .ok()
        .and_then(|r| {
            r.get(&header.id)
                .map(|route| (route.deliver.clone(), route.budget.clone()))
        })
        .unzip();
    // Room in a bounded request's budget comes before the buffer (and
    // before reading on: until then quinn's flow control holds the server).
    let held = match budget.flatten() {
        Some(b) => b.reserve(header.length).await,
        None => None,
    };
    let label = format!(
        "object {:?}, component {:?}",
        header.object, header.component
    );
    let result = async {
        if header.length > options.component_cap {
            bail!(
                "{label}: {} bytes exceed the cap of {}",
                header.length,
                options.component_cap
            );
        }
        let mut check = Check::new(header.digest.as_deref(), options.allow_unverified, &label)?;
        // Every byte is overwritten below, or the component fails.
        let mut data = pool
            .take(header.length)
            .map_err(|r| anyhow!("{label}: {r}"))?;
        let rest = d.take_rest();
        let buf = data.as_mut_slice();
        let mut pos = rest.len().min(buf.len());
        if rest.len() > buf.len() {
            bail!("{label}: stream carries more bytes than its header announces");
        }
        buf.get_mut(..pos)
            .unwrap_or_default()
            .copy_from_slice(rest.get(..pos).unwrap_or_default());
        check.update(buf.get(..pos).unwrap_or_default());
        // Hash while the bytes arrive; nothing is delivered before the digest matches.
        while pos < buf.len() {
            match stream.read(buf.get_mut(pos..).unwrap_or_default()).await {
                Ok(Some(n)) => {
                    check.update(buf.get(pos..pos + n).unwrap_or_default());
                    pos += n;
                }
                Ok(None) => {
                    return Err(Transport(format!(
                        "{label}: stream ended after {pos} of {} bytes",
                        buf.len()
                    ))
                    .into())
                }
                Err(e) => return Err(stream_error(&label, pos, e)),
            }
        }
        match stream.read(&mut chunk).await {
            Ok(None) => {}
            Ok(Some(_)) => bail!("{label}: stream carries more bytes than its header announces"),
            Err(e) => return Err(stream_error(&label, pos, e)),
        }
        let verification = check.finish(&label)?;
        Ok(Delivered {
            object: header.object.clone(),
            component: header.component.clone(),
            seq: header.seq,
            dtype: header.dtype.clone(),
            logical_type: header.logical_type.clone(),
            encoding: header.encoding.clone(),
            uncompressed_length: header.uncompressed_length,
            digest: header.digest.clone(),
            data,
            verification,
        })
    }
    .await;
    (id, (result, held))
}
