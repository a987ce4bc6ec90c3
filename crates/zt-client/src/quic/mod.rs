//! The ztp/1 client: one QUIC connection, any number of requests on it.
//! Server messages on the control stream are handed to their requests by
//! `routes`; component streams are read, checked and delivered by
//! `streams`.

mod routes;
mod silence;
mod streams;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use quinn::crypto::rustls::QuicClientConfig;
use quinn::{Connection, Endpoint};
use tokio::sync::{mpsc, oneshot};
use zt_format::{AlignedBuf, Limits};
use ztp_proto::{frame, Cancel, Code, Get, Message, ALPN};

use super::budget::Budget;
use super::pool::BufPool;
use super::trust::{client_config, Trust};
use super::Fetch;
use routes::{Route, Routes};
pub use silence::{Watch, SILENCE};

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
        crate::trust::install_provider();
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
        tokio::spawn(routes::read_control(
            recv,
            Arc::clone(&routes),
            options.manifest_cap,
            conn.clone(),
        ));
        let pool = Arc::new(BufPool::default());
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
        let watch = Watch::new(self.conn.clone(), path);
        let m = watch
            .unless_silent("its manifest", mrx)
            .await?
            .map_err(|_| anyhow!("connection closed before the manifest arrived"))??;
        let limits = Limits {
            manifest_cap: self.options.manifest_cap,
            ..Limits::default()
        };
        let (manifest, _) =
            zt_format::container::decode_manifest(path, &m.manifest, m.size, &limits)?;
        Ok(Fetch::new(id, manifest, m.etag, m.size, m.streams, drx).watched(watch))
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
