//! One fetch spread over several connections to one server. Share `i` of
//! `n` (a `get` with `share`, the feature `shares`: PROTOCOL.md section 4)
//! carries the components the server deals it, in the fetch's order and
//! balanced by bytes, so every connection starts on layer 0 and together
//! they keep the per-layer order. Each connection is a congestion window and a
//! driver task of its own: one connection is mostly one core.
//!
//! The first share goes out at once on the client's own connection. Its
//! manifest says how many components there are (a fetch of one tensor
//! stays on one connection) and under which ETag, and the fetch is handed
//! over then: the first share's components (layer 0 among them) are
//! delivered while the other shares are set up, in a task of their own.
//! They ask for exactly that version (`if_match`) and join the fetch as
//! their manifests come in and pass (nothing of a share reaches the fetch
//! before), watched for silence from the moment their connections are
//! known. The other connections are opened the
//! first time a fetch has components for them and kept for later fetches;
//! one that cannot be opened (within 3 s; none is tried again for 30 s
//! after a failure), and a share answered otherwise than asked (another
//! version: another connection may reach another replica; no `shares`
//! feature there; an error), leave the share to the first connection.
//! Every share is verified as any request is, holds at most its part of
//! a bounded fetch's budget (`max_buffered` / `n`; the first share takes
//! the parts of shares left empty, and a component larger than its part
//! comes through alone), and all of them feed one [`Fetch`], which ends
//! once every share's `done` is in, or at once when any of its connections
//! is lost. While a spread fetch lives, its connections do (even past
//! the client's drop); after [`Spread::close`] no connection is opened.
//!
//! The first connection is opened again for the next request once it has
//! closed (the server shut down or restarted, the network dropped it):
//! a client kept open outlives a server's restart, as over HTTP. What was
//! in flight on it when it closed has failed. Opening it again is tried
//! once at a time, within the connection's idle timeout; after a failure,
//! requests for [`REOPEN_BACKOFF`] get that failure at once instead of
//! each waiting out a handshake of its own. The new connection knows no
//! features until its first manifest (PROTOCOL.md section 4): what the
//! old one was told is not assumed.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::{mpsc, Mutex};
use ztp_proto::{Get, FEATURE_SHARES};

use super::routes::Delivery;
use super::{Asked, Dial, QuicClient};
use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::fetch::{Event, Fetch};
use crate::pool::BufPool;

/// The client's connection, and the others it opened for spread fetches.
#[derive(Debug)]
pub(crate) struct Spread {
    /// Replaced when it has closed ([`Spread::first`]); locked only for a
    /// moment, never across an await.
    first: std::sync::Mutex<Arc<QuicClient>>,
    /// Held while the first connection is opened again: one attempt at a
    /// time, and how the last one failed.
    reopening: Mutex<Option<(Instant, Error)>>,
    /// Where the first connection went and whom it verified, for the
    /// others and for opening it again.
    addr: SocketAddr,
    server_name: String,
    /// The port the URL names (errors name the URL).
    port: u16,
    options: Arc<crate::Options>,
    /// Component buffers, shared by every connection.
    pool: Arc<BufPool>,
    more: Mutex<More>,
    /// [`Spread::close`] ran: no connection is opened any more.
    closed: AtomicBool,
}

/// How long after a failure to open the first connection again requests
/// fail at once with that failure.
const REOPEN_BACKOFF: Duration = Duration::from_secs(1);

/// The connections a client opened besides its first.
#[derive(Debug, Default)]
struct More {
    open: Vec<Arc<QuicClient>>,
    /// When opening one last failed.
    failed: Option<Instant>,
}

/// How long opening another connection may take before its share goes to
/// the first connection instead.
const OPEN_WAIT: Duration = Duration::from_secs(3);

/// How long after a failure to open another connection none is tried.
const OPEN_BACKOFF: Duration = Duration::from_secs(30);

/// The version of the file a spread fetch's first share found.
struct Version {
    etag: String,
    size: u64,
}

impl Version {
    /// `share`, if it answered as a share (the server there names the
    /// feature) for this version.
    fn check(&self, share: Asked) -> Result<Asked> {
        let m = &share.msg;
        if !m.features.iter().any(|f| f == FEATURE_SHARES) {
            return Err(Error::Protocol(
                "the server there does not name the feature \"shares\"".into(),
            ));
        }
        if m.etag != self.etag || m.size != self.size {
            return Err(Error::Protocol(format!(
                "version {} ({} bytes) where the first share had {} ({} bytes)",
                m.etag, m.size, self.etag, self.size
            )));
        }
        Ok(share)
    }
}

/// How the other shares of a spread fetch are asked: share 0's `get`,
/// the version it found, and each share's part of the budget.
#[derive(Clone, Copy)]
struct Share<'a> {
    get: &'a Get,
    version: &'a Version,
    part: &'a (dyn Fn() -> Option<Budget> + Send + Sync),
}

impl Share<'_> {
    /// Share `i` asked on `conn` and checked, with a channel of its own:
    /// nothing of it reaches the fetch before it has passed.
    async fn ask(
        self,
        conn: &QuicClient,
        i: u64,
    ) -> Result<(Asked, mpsc::UnboundedReceiver<crate::fetch::Arrival>)> {
        let (tx, rx) = mpsc::unbounded_channel();
        let get = Get {
            share: self.get.share.map(|(_, n)| (i, n)),
            ..self.get.clone()
        };
        let asked = conn.send_get(get, tx, (self.part)()).await?;
        Ok((self.version.check(asked)?, rx))
    }
}

/// What a fetch asks for: the file, its selection and version.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Asking<'a> {
    pub(crate) path: &'a str,
    pub(crate) select: &'a [String],
    pub(crate) if_match: Option<&'a str>,
    pub(crate) max_buffered: Option<u64>,
}

impl Spread {
    /// Connects the first connection; the others wait for a fetch.
    pub(crate) async fn connect(at: Dial<'_>, options: Arc<crate::Options>) -> Result<Self> {
        let pool = Arc::<BufPool>::default();
        let first =
            QuicClient::connect_sharing(at, Arc::clone(&options), Arc::clone(&pool), true).await?;
        Ok(Spread {
            first: std::sync::Mutex::new(Arc::new(first)),
            reopening: Mutex::default(),
            addr: at.addr,
            server_name: at.name.to_owned(),
            port: at.port,
            options,
            pool,
            more: Mutex::default(),
            closed: AtomicBool::new(false),
        })
    }

    /// The first connection as it is now.
    fn current(&self) -> Arc<QuicClient> {
        Arc::clone(&self.first.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The first connection, opened again first if it has closed and the
    /// client has not been closed (one attempt at a time; see the module's
    /// note).
    pub(crate) async fn first(&self) -> Result<Arc<QuicClient>> {
        let current = self.current();
        if current.conn.close_reason().is_none() || self.closed.load(Ordering::Acquire) {
            return Ok(current);
        }
        let mut failed = self.reopening.lock().await;
        // Another request may have opened it again meanwhile.
        let current = self.current();
        if current.conn.close_reason().is_none() || self.closed.load(Ordering::Acquire) {
            return Ok(current);
        }
        if let Some((at, e)) = &*failed {
            if at.elapsed() < REOPEN_BACKOFF {
                let pause = REOPEN_BACKOFF.as_secs_f64();
                return Err(e.again(&format!(" (not tried again within {pause} s of it)")));
            }
        }
        let limit = self.options.idle_timeout;
        let again = match tokio::time::timeout(limit, self.open(true)).await {
            Ok(Ok(again)) => again,
            Ok(Err(e)) => {
                *failed = Some((Instant::now(), e.again("")));
                return Err(e);
            }
            Err(_) => {
                let e = Error::Transport(format!(
                    "connecting to {} over QUIC again: no handshake within {} s",
                    self.addr,
                    limit.as_secs_f64()
                ));
                *failed = Some((Instant::now(), e.again("")));
                return Err(e);
            }
        };
        *failed = None;
        let again = Arc::new(again);
        {
            let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
            // Closed meanwhile: `close` closed the connection it found,
            // so this one is closed here instead of replacing it.
            if !self.closed.load(Ordering::Acquire) {
                *first = Arc::clone(&again);
                tracing::debug!(server = %self.addr, "the connection had closed; connected again");
                return Ok(again);
            }
        }
        again.close().await;
        Ok(current)
    }

    /// A new connection to the server, taking buffers from the pool: the
    /// first again, or one of the others.
    async fn open(&self, first: bool) -> Result<QuicClient> {
        let options = Arc::clone(&self.options);
        let at = Dial {
            addr: self.addr,
            name: &self.server_name,
            port: self.port,
        };
        QuicClient::connect_sharing(at, options, Arc::clone(&self.pool), first).await
    }

    /// Gives a buffer back to the pool.
    pub(crate) fn recycle(&self, buf: zt_format::AlignedBuf) {
        self.pool.give(buf);
    }

    /// Fetches the selection over up to `options.quic_connections()`
    /// connections. The fetch is handed over as soon as the first share's
    /// manifest is in, and delivers that share's components at once; the
    /// other shares join it as they are set up ([`Spread::join`]).
    pub(crate) async fn fetch(self: &Arc<Self>, a: Asking<'_>) -> Result<Fetch> {
        let first = self.first().await?;
        let n = self.options.quic_connections() as u64;
        // Once a manifest on the connection has said the server lacks the
        // feature, no share is asked for. Before then the first `get` may
        // carry one: a server without the feature ignores it and sends the
        // whole selection, and its answer's `features` says so.
        let offered = first
            .features()
            .is_none_or(|f| f.iter().any(|x| x == FEATURE_SHARES));
        if n == 1 || !offered {
            let (path, select) = (a.path, a.select);
            return first
                .request(path, select, &[], a.if_match, false, a.max_buffered)
                .await;
        }
        let mut get = Get {
            path: a.path.to_owned(),
            select: a.select.to_vec(),
            token: self.options.token.clone(),
            if_match: a.if_match.map(str::to_owned),
            share: Some((0, n)),
            ..Get::default()
        };
        let (deliver, delivered) = mpsc::unbounded_channel();
        // Each share has its part of the budget. One budget for all would
        // be granted in the order the component streams open across the
        // connections: a large component on one could take all of it, and
        // hold the other shares' earlier (smaller) components back until
        // every byte of it had arrived.
        let most = a.max_buffered;
        let part = move || most.map(|b| Budget::new(b / n));
        let budget = part();
        let asked = first
            .send_get(get.clone(), deliver.clone(), budget.clone())
            .await?;
        let view = zt_format::container::View::File;
        let manifest = first.decode(a.path, &asked.msg, view).await?;
        let m = asked.msg;
        let spread = m.features.iter().any(|f| f == FEATURE_SHARES);
        let components = manifest.components().count() as u64;
        // Shares past the number of components are empty (each component
        // goes to a share that has none yet, while there is one).
        let shares = if spread { n.min(components).max(1) } else { 1 };
        // The shares that will not be asked leave their parts to the first.
        if let (Some(b), Some(most)) = (&budget, most) {
            b.grow(most / n * (n - shares));
        }
        if shares > 1 {
            // The other shares ask for exactly the version share 0 found.
            get.if_match = Some(m.etag.clone());
            let version = Version {
                etag: m.etag.clone(),
                size: m.size,
            };
            let first = Arc::clone(&first);
            tokio::spawn(Arc::clone(self).join(first, get, shares, version, deliver, part));
        }
        // A stream per component of the selection (PROTOCOL.md section
        // 4), whichever share carries it.
        let streams = if shares > 1 { components } else { m.streams };
        let routed = asked.routed;
        Ok(Fetch::new(
            first.name_of(a.path),
            routed.id,
            manifest,
            m.etag,
            m.size,
            streams,
            delivered,
        )
        .in_shares(shares)
        .watched(first.watch(a.path))
        // The first share stays routable until the fetch is dropped.
        .on_drop(move || drop(routed)))
    }

    /// Sets up shares 1 to `shares - 1` of the fetch whose share 0 asked
    /// `get` on `first` and found `version`, each on a connection of its
    /// own where one opens, else on `first`; `part` makes each share's
    /// budget.
    /// The fetch watches every connection for silence from the moment it
    /// is known ([`Event::Watch`]). Each share set up joins the fetch
    /// ([`Event::Joined`]) and only then delivers into it, so a share
    /// answered for another version, or whole by a server without the
    /// feature, never does; one that cannot be set up anywhere fails the
    /// fetch ([`Event::Lost`]). The shares stay routable until the fetch
    /// is dropped, and setting up stops as soon as it is.
    async fn join(
        self: Arc<Self>,
        first: Arc<QuicClient>,
        get: Get,
        shares: u64,
        version: Version,
        deliver: Delivery,
        part: impl Fn() -> Option<Budget> + Send + Sync,
    ) {
        let dropped = deliver.clone();
        let set_up = async {
            let others = self.others(shares - 1).await;
            for c in &others {
                let _ = deliver.send((Event::Watch(c.conn.clone()), None));
            }
            let on = |i: u64| -> &QuicClient {
                usize::try_from(i - 1)
                    .ok()
                    .and_then(|k| others.get(k))
                    .map_or(&*first, |c| c)
            };
            let asking = Share {
                get: &get,
                version: &version,
                part: &part,
            };
            let carried = (1..shares).map(|i| carry(asking, i, on(i), &first, deliver.clone()));
            join_all(carried).await;
        };
        tokio::select! {
            () = set_up => {}
            () = dropped.closed() => {}
        }
    }
}

/// Sets up share `i` on `conn` (or, failing that, on `first`) and
/// forwards its components into the fetch until the fetch is dropped; a
/// share that cannot be set up fails the fetch.
async fn carry(s: Share<'_>, i: u64, conn: &QuicClient, first: &QuicClient, deliver: Delivery) {
    let (asked, mut rx) = match s.ask(conn, i).await {
        Ok(share) => share,
        // Another connection may reach another replica (one with
        // another version of the file, or without the feature), or
        // fail: the first connection, which gave the manifest, carries
        // the share instead.
        Err(e) => {
            tracing::debug!(share = i, error = %e, "asking the first connection");
            match s.ask(first, i).await {
                Ok(share) => share,
                Err(again) => {
                    // Each error starts with the URL already: said once.
                    let url = first.name_of(&s.get.path);
                    let bare = |e: Error| {
                        let m = e.to_string();
                        m.strip_prefix(&format!("{url}: "))
                            .map_or(m.clone(), str::to_owned)
                    };
                    let e = Error::Transport(format!(
                        "{url}: share {i} failed on the connection to {} ({}) and on the first ({})",
                        conn.conn.remote_address(),
                        bare(e),
                        bare(again)
                    ));
                    let _ = deliver.send((Event::Lost(e), None));
                    return;
                }
            }
        }
    };
    let _ = deliver.send((Event::Joined, None));
    // The share stays routable while this forwards.
    let _routed = asked.routed;
    while let Some(arrival) = rx.recv().await {
        if deliver.send(arrival).is_err() {
            break;
        }
    }
}

impl Spread {
    /// Up to `count` open connections besides the first, opening what is
    /// missing (concurrently, each within [`OPEN_WAIT`]) and dropping those
    /// that have closed. After a failure to open one, none is tried for
    /// [`OPEN_BACKOFF`]: their shares go to the first connection.
    async fn others(&self, count: u64) -> Vec<Arc<QuicClient>> {
        let count = usize::try_from(count).unwrap_or(usize::MAX);
        let mut more = self.more.lock().await;
        if self.closed.load(Ordering::Acquire) {
            return Vec::new();
        }
        more.open.retain(|c| c.conn.close_reason().is_none());
        let resting = more.failed.is_some_and(|t| t.elapsed() < OPEN_BACKOFF);
        if more.open.len() < count && !resting {
            let opened = join_all(
                (more.open.len()..count).map(|_| tokio::time::timeout(OPEN_WAIT, self.open(false))),
            )
            .await;
            for c in opened {
                let why = match c {
                    Ok(Ok(c)) => {
                        more.open.push(Arc::new(c));
                        continue;
                    }
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no handshake within {} s", OPEN_WAIT.as_secs()),
                };
                if more.failed.is_none() {
                    tracing::warn!(server = %self.addr, error = %why,
                        "could not open another connection; its share of each fetch goes to the first");
                }
                more.failed = Some(Instant::now());
            }
        }
        more.open.iter().take(count).cloned().collect()
    }

    /// Closes every connection ([`QuicClient::close`]).
    pub(crate) async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let more = self.more.lock().await.open.clone();
        // An attempt to open it again that ends after this closes its own
        // connection (`first`).
        let first = self.current();
        tokio::join!(join_all(more.iter().map(|c| c.close())), first.close());
    }
}
