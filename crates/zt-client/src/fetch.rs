//! One request's results: its manifest, then components as they complete.

use std::collections::HashSet;

use tokio::sync::mpsc;
use zt_format::Manifest;

use crate::budget::Held;
use crate::error::{Error, Result};
use crate::silence::Watch;
use crate::verify::{as_announced, Delivered};

/// What a transport hands a [`Fetch`]. Moved once per component through a
/// channel, never stored in bulk: the size difference does not matter.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub(crate) enum Event {
    /// A component, or why it failed.
    Component(Result<Delivered>),
    /// The server's `done`: how many components it sent whole (streams
    /// cancelled before they opened never arrive).
    Done { sent: u64 },
    /// The request's connection is gone (or broke the protocol): nothing
    /// more will come for it, and the fetch fails with this error.
    Lost(Error),
    /// Another share of a spread fetch was set up.
    Joined,
    /// A spread fetch's components may also come on `conn`: the fetch is
    /// silent only while it is too.
    Watch(quinn::Connection),
}

/// An event, with the budget it holds until the consumer takes it
/// (bounded fetches only).
pub(crate) type Arrival = (Event, Option<Held>);

/// One request's results: the manifest, then components as they complete.
#[derive(Debug)]
pub struct Fetch {
    pub id: u64,
    /// What was fetched (its URL, or the local file), named by errors.
    source: String,
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
    /// Components sent whole, once every share's `done` has said so.
    done_sent: Option<u64>,
    /// How many requests the fetch is spread over (each ends with a
    /// `done`), how many of them are set up (their streams counted), how
    /// many `done`s came, and what they said was sent.
    shares: u64,
    joined: u64,
    dones: u64,
    sent: u64,
    /// A connection of the fetch was lost: the fetch has failed, and says
    /// so once.
    lost: bool,
    /// A ztp/1 request's connection, failing a wait it stays silent through
    /// (HTTP has its sockets' read timeout instead).
    watch: Option<Watch>,
    /// Run once when the fetch is dropped: the transport forgets the request.
    release: Option<Release>,
    /// The components delivered so far (object, component), each of which
    /// may come once.
    delivered: HashSet<(String, String)>,
}

/// What a dropped [`Fetch`] tells its transport.
struct Release(Box<dyn FnOnce() + Send + Sync>);

impl std::fmt::Debug for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Release")
    }
}

impl Drop for Fetch {
    fn drop(&mut self) {
        if let Some(Release(r)) = self.release.take() {
            r();
        }
    }
}

impl Fetch {
    pub(crate) fn new(
        source: impl Into<String>,
        id: u64,
        manifest: Manifest,
        etag: String,
        size: u64,
        streams: u64,
        rx: mpsc::UnboundedReceiver<Arrival>,
    ) -> Self {
        Fetch {
            id,
            source: source.into(),
            manifest,
            etag,
            size,
            streams,
            received: 0,
            rx,
            ok: 0,
            done_sent: None,
            shares: 1,
            joined: 1,
            dones: 0,
            sent: 0,
            lost: false,
            watch: None,
            release: None,
            delivered: HashSet::new(),
        }
    }

    /// Runs `release` once this fetch is dropped.
    pub(crate) fn on_drop(mut self, release: impl FnOnce() + Send + Sync + 'static) -> Self {
        self.release = Some(Release(Box::new(release)));
        self
    }

    /// The fetch is spread over `shares` requests, each ending with its
    /// own `done` ([`crate::ztp`]'s spread fetches): the first share was
    /// set up when the fetch was made, each other one says so with
    /// [`Event::Joined`].
    pub(crate) fn in_shares(mut self, shares: u64) -> Self {
        self.shares = shares.max(1);
        self
    }

    /// Fails [`Fetch::next`] when `watch`'s connection stays silent.
    pub(crate) fn watched(mut self, watch: Watch) -> Self {
        self.watch = Some(watch);
        self
    }

    /// The next verified component, in completion order; `None` when all
    /// announced components are accounted for. Taking a component gives
    /// its bytes back to a bounded fetch's budget.
    pub async fn next(&mut self) -> Option<Result<Delivered>> {
        loop {
            if self.lost {
                return None;
            }
            match self.done_sent {
                Some(sent) if self.ok >= sent => return None,
                None if self.joined >= self.shares && self.received >= self.streams => return None,
                _ => {}
            }
            let arrival = match &self.watch {
                Some(w) => w.unless_silent("a component", self.rx.recv()).await,
                None => Ok(self.rx.recv().await),
            };
            let item = match arrival.transpose() {
                Some(Err(silent)) => Err(silent),
                Some(Ok((Event::Done { sent }, _))) => {
                    self.dones += 1;
                    self.sent = self.sent.saturating_add(sent);
                    if self.dones >= self.shares {
                        self.done_sent = Some(self.sent);
                    }
                    continue;
                }
                Some(Ok((Event::Joined, _))) => {
                    self.joined += 1;
                    continue;
                }
                Some(Ok((Event::Watch(conn), _))) => {
                    self.watch = self.watch.take().map(|w| w.and(conn));
                    continue;
                }
                Some(Ok((Event::Component(item), _held))) => item,
                // The other shares' components are no use without this
                // one's: the fetch ends here, whatever else is in flight.
                Some(Ok((Event::Lost(e), _))) => {
                    self.lost = true;
                    Err(e)
                }
                // Every sender is gone without a word: say whose.
                None => Err(Error::Transport(format!(
                    "{}: the transfer ended before every component arrived",
                    self.source
                ))),
            };
            self.received += 1;
            // Verified against the digest its transport named: now that it
            // is the manifest's, and everything else as announced.
            let item = item.and_then(|d| {
                let again = !self
                    .delivered
                    .insert((d.object.clone(), d.component.clone()));
                as_announced(&d, &self.manifest, again, &self.source).map(|()| d)
            });
            let item = match item {
                Ok(d) => {
                    self.ok += 1;
                    Ok(d)
                }
                // Say how much of the request the failure cost.
                Err(Error::Transport(why)) => Err(Error::Transport(format!(
                    "{} of {} components undelivered: {why}",
                    self.streams.saturating_sub(self.ok),
                    self.streams
                ))),
                Err(e) => Err(e),
            };
            return Some(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_transfer_that_ends_without_a_word_names_its_source() {
        let (tx, rx) = mpsc::unbounded_channel();
        let url = "quic://127.0.0.1:7070/big.zt";
        let mut fetch = Fetch::new(url, 1, Manifest::default(), "\"e\"".into(), 0, 3, rx);
        drop(tx);
        let err = fetch
            .next()
            .await
            .expect("an error")
            .unwrap_err()
            .to_string();
        assert!(err.contains("3 of 3 components undelivered"), "{err}");
        assert!(err.contains(url), "{err}");
    }
}
