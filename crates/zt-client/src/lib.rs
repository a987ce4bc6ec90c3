//! The client: remote manifests and verified component delivery.
//!
//! [`quic::QuicClient`] speaks ztp/1 (see `proto/PROTOCOL.md`). Every
//! component is received into a 64-byte-aligned buffer, its digest computed
//! while the bytes arrive, and it is delivered only once the digest matches.
//!
//! ```no_run
//! use ztserve::client::trust::Trust;
//! use ztserve::client::{output, Client, Options};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! // quic://… speaks ztp/1; http(s)://… uses Range requests (ztserve or
//! // any server with Range support, such as nginx serving the raw file).
//! let options = Options {
//!     trust: Trust::fingerprint("5d:41:…:2a")?,
//!     ..Options::default()
//! };
//! let client = Client::connect("quic://models.example:7070/llama.zt", options).await?;
//! let (manifest, etag, size) = client.manifest().await?;
//! println!("{etag}: {size} bytes, {} objects", manifest.objects.len());
//!
//! // Only layer 0, lazily: components arrive in send order, each checked.
//! let mut fetch = client.fetch(&["model.layers.0.*".to_owned()], None).await?;
//! while let Some(component) = fetch.next().await {
//!     let c = component?;
//!     println!("{} / {}: {} bytes", c.object, c.component, c.data.len());
//!     client.recycle(c.data); // optional: a later component reuses it
//! }
//!
//! // The whole file, written as a valid .zt (resumable, renamed when complete).
//! output::fetch_to_file(&client, &[], "llama.zt".as_ref(), &mut |_, _, _| {}).await?;
//! # Ok(())
//! # }
//! ```

mod budget;
pub mod http;
pub mod output;
mod part;
mod pool;
pub mod quic;
pub mod remote;
pub mod trust;
pub mod udp;
mod verify;

use anyhow::Result;
use tokio::sync::mpsc;
use zt_format::Manifest;

pub use remote::{Client, Options, Via};
pub use verify::{Delivered, Refusal, Refused, Transport, Verification};

/// A server's own words (an error body, an `error` message), cut to their
/// first 300 characters to quote in an error.
pub(crate) fn quote(text: &str) -> String {
    match text.char_indices().nth(300) {
        Some((cut, _)) => format!(
            "{} [cut at 300 characters]",
            text.get(..cut).unwrap_or(text)
        ),
        None => text.to_owned(),
    }
}

/// The server's `done`: how many components it sent whole.
#[derive(Debug, thiserror::Error)]
#[error("request done: {0} components sent")]
pub(crate) struct DoneMarker(pub(crate) u64);

/// What a transport hands a [`Fetch`]: a component (or an error), with
/// the budget it holds until the consumer takes it (bounded fetches only).
pub(crate) type Arrival = (Result<Delivered>, Option<budget::Held>);

/// One request's results: the manifest, then components as they complete.
#[derive(Debug)]
pub struct Fetch {
    pub id: u64,
    /// The selected objects, with their offsets in the remote file.
    pub manifest: Manifest,
    /// The remote file's ETag and size.
    pub etag: String,
    pub size: u64,
    /// Components that will be delivered.
    pub streams: u64,
    received: u64,
    rx: mpsc::UnboundedReceiver<Arrival>,
    ok: u64,
    /// Components sent whole, once the server's `done` has said so.
    done_sent: Option<u64>,
    /// A ztp/1 request's connection, failing a wait it stays silent through
    /// (HTTP has its sockets' read timeout instead).
    watch: Option<quic::Watch>,
}

impl Fetch {
    pub(crate) fn new(
        id: u64,
        manifest: Manifest,
        etag: String,
        size: u64,
        streams: u64,
        rx: mpsc::UnboundedReceiver<Arrival>,
    ) -> Self {
        Fetch {
            id,
            manifest,
            etag,
            size,
            streams,
            received: 0,
            rx,
            ok: 0,
            done_sent: None,
            watch: None,
        }
    }

    /// Fails [`Fetch::next`] when `watch`'s connection stays silent.
    pub(crate) fn watched(mut self, watch: quic::Watch) -> Self {
        self.watch = Some(watch);
        self
    }

    /// The next verified component, in completion order; `None` when all
    /// announced components are accounted for. Taking a component gives
    /// its bytes back to a bounded fetch's budget.
    pub async fn next(&mut self) -> Option<Result<Delivered>> {
        loop {
            match self.done_sent {
                Some(sent) if self.ok >= sent => return None,
                None if self.received >= self.streams => return None,
                _ => {}
            }
            let arrival = match &self.watch {
                Some(w) => w.unless_silent("a component", self.rx.recv()).await,
                None => Ok(self.rx.recv().await),
            };
            let item = match arrival.transpose() {
                Some(Err(silent)) => Err(silent),
                Some(Ok((Err(e), _))) if e.downcast_ref::<DoneMarker>().is_some() => {
                    self.done_sent = e.downcast_ref::<DoneMarker>().map(|d| d.0);
                    continue;
                }
                Some(Ok((item, _held))) => item,
                None => {
                    Err(Transport("connection lost before every component arrived".into()).into())
                }
            };
            self.received += 1;
            let item = match item {
                Ok(d) => {
                    self.ok += 1;
                    Ok(d)
                }
                // Say how much of the request the failure cost.
                Err(e) if e.downcast_ref::<Transport>().is_some() => Err(e.context(format!(
                    "{} of {} components undelivered",
                    self.streams.saturating_sub(self.ok),
                    self.streams
                ))),
                Err(e) => Err(e),
            };
            return Some(item);
        }
    }
}
