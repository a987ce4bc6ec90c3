//! A fetch that takes what the cache holds and asks the server only for
//! the rest: objects whose every component is cached are read from the
//! cache (checked against their digests, on the blocking pool, several at
//! once), the others are fetched as always, pinned to the manifest's ETag,
//! and stored as they arrive. A cached entry that fails its check is
//! removed and its object fetched after the rest. The consumer sees one
//! [`Fetch`], in completion order, bounded as the caller asked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::StreamExt as _;
use tokio::sync::mpsc;
use zt_format::{Component, Manifest};

use super::{Cache, Key, Scope};
use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::fetch::{Event, Fetch};
use crate::remote::Remote;
use crate::transport::Transport;
use crate::verify::{Delivered, Verification};

/// Network components stored in the cache at once, ahead of delivery.
const WRITES_IN_FLIGHT: usize = 4;

/// One component found in the cache.
#[derive(Debug)]
struct Hit {
    object: String,
    role: String,
    seq: u64,
    component: Component,
    key: Key,
}

/// What the forwarding task works with.
struct Job {
    cache: Cache,
    transport: Arc<dyn Transport>,
    url: String,
    remote: Arc<Remote>,
    tx: mpsc::UnboundedSender<crate::fetch::Arrival>,
    budget: Option<Budget>,
    max_buffered: Option<u64>,
    sent: AtomicU64,
}

/// Starts fetching `selected` (the objects of `remote`'s manifest that
/// `select` selects) through `cache`; `None` when no selected component
/// could be cached at all, for the caller to fetch as it would without
/// one.
pub(crate) async fn start(
    cache: &Cache,
    transport: &Arc<dyn Transport>,
    url: &str,
    (remote, select): (Arc<Remote>, &[String]),
    selected: Manifest,
    max_buffered: Option<u64>,
) -> Result<Option<Fetch>> {
    // One look at the disk per component: on the blocking pool.
    let (c, u, r) = (cache.clone(), url.to_owned(), Arc::clone(&remote));
    let (selected, planned) = tokio::task::spawn_blocking(move || {
        let planned = plan(&c, &u, &r.etag, &selected);
        (selected, planned)
    })
    .await
    .map_err(|e| Error::Transport(format!("{url}: looking in the cache: {e}")))?;
    let Some((hits, misses)) = planned else {
        return Ok(None);
    };
    let streams: u64 = selected
        .objects
        .values()
        .map(|o| o.components.len() as u64)
        .sum();
    // The first request now, any others (a selection's objects missing
    // past the cap on a request's names) once it is done.
    let mut requests = zt_format::select::requests(select, &misses, selected.objects.len());
    let later = requests.split_off(requests.len().min(1));
    let network = match requests.pop() {
        Some(first) => {
            Some(fetch_patterns(transport.as_ref(), &remote, &first, max_buffered).await?)
        }
        None => None,
    };
    let id = network.as_ref().map_or(0, |f| f.id);
    tracing::debug!(url, cached = hits.len(), fetched = misses.len(), "cache");
    let (tx, rx) = mpsc::unbounded_channel();
    let job = Job {
        cache: cache.clone(),
        transport: Arc::clone(transport),
        url: url.to_owned(),
        remote: Arc::clone(&remote),
        tx,
        budget: max_buffered.map(Budget::new),
        max_buffered,
        sent: AtomicU64::new(0),
    };
    tokio::spawn(job.run(hits, network, later));
    Ok(Some(Fetch::new(
        url,
        id,
        selected,
        remote.etag.clone(),
        remote.size,
        streams,
        rx,
    )))
}

/// The components of `selected` the cache holds, whole objects only (one
/// missing component fetches its object), in the send order with each
/// object's components together; and the objects to fetch. `None` when no
/// selected component could be cached at all.
fn plan(
    cache: &Cache,
    url: &str,
    etag: &str,
    selected: &Manifest,
) -> Option<(Vec<Hit>, Vec<String>)> {
    let key = |o: &str, r: &str, c: &Component| {
        let scope = Scope {
            url,
            etag,
            object: o,
            component: r,
        };
        c.digest.as_ref().and_then(|d| Cache::key(d, scope))
    };
    let keyed = selected
        .objects
        .iter()
        .flat_map(|(o, obj)| obj.components.iter().map(move |(r, c)| (o, r, c)))
        .any(|(o, r, c)| key(o, r, c).is_some());
    if !keyed {
        return None;
    }
    let order = zt_format::send_order(selected, &[]);
    let mut first: HashMap<&str, usize> = HashMap::new();
    let mut cached: HashMap<&str, bool> = HashMap::new();
    let mut keys = Vec::with_capacity(order.len());
    for (i, (o, r, c)) in order.iter().enumerate() {
        first.entry(o).or_insert(i);
        let key = key(o, r, c).filter(|k| cache.has(k));
        *cached.entry(o).or_insert(true) &= key.is_some();
        keys.push(key);
    }
    let mut hits = Vec::new();
    let mut misses = Vec::new();
    for (seq, ((o, r, c), key)) in order.iter().zip(keys).enumerate() {
        match key.filter(|_| cached.get(o) == Some(&true)) {
            Some(key) => hits.push(Hit {
                object: (*o).to_owned(),
                role: (*r).to_owned(),
                seq: seq as u64,
                component: (*c).clone(),
                key,
            }),
            None if first.get(o) == Some(&seq) => misses.push((*o).to_owned()),
            None => {}
        }
    }
    hits.sort_by_key(|h| (first.get(h.object.as_str()).copied(), h.seq));
    Some((hits, misses))
}

/// A fetch of `select`, pinned to `remote`'s ETag.
async fn fetch_patterns(
    transport: &dyn Transport,
    remote: &Remote,
    select: &[String],
    max_buffered: Option<u64>,
) -> Result<Fetch> {
    transport
        .fetch(select, Some(&remote.etag), max_buffered)
        .await
}

impl Job {
    /// Delivers the hits and the first network request's components,
    /// then those of the `later` requests and, last, the objects whose
    /// cached entries failed their check, fetched again.
    async fn run(self, hits: Vec<Hit>, network: Option<Fetch>, later: Vec<Vec<String>>) {
        let (failed, whole) = tokio::join!(self.read_cached(hits), self.forward(network));
        let again = zt_format::select::by_name(&failed);
        let mut whole = whole;
        for request in later.into_iter().chain(again) {
            if self.tx.is_closed() {
                return;
            }
            if !whole {
                // The connection was lost (said so): nothing more is asked.
                break;
            }
            let f = fetch_patterns(
                self.transport.as_ref(),
                &self.remote,
                &request,
                self.max_buffered,
            )
            .await;
            match f {
                Ok(f) => whole = self.forward(Some(f)).await,
                Err(e) => {
                    let _ = self.tx.send((Event::Lost(e), None));
                    break;
                }
            }
        }
        let sent = self.sent.load(Ordering::Relaxed);
        let _ = self.tx.send((Event::Done { sent }, None));
    }

    /// Reads the hits, several objects at once, and delivers each object
    /// whole as soon as all of it passed; returns the objects that did
    /// not. Each object reserves its bytes of the budget before it is
    /// read (an object larger than the whole budget goes through alone),
    /// held until the consumer takes its last component.
    async fn read_cached(&self, hits: Vec<Hit>) -> Vec<String> {
        let parallel = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut objects: Vec<Vec<Hit>> = Vec::new();
        for hit in hits {
            match objects.last_mut() {
                Some(o) if o.first().is_some_and(|h| h.object == hit.object) => o.push(hit),
                _ => objects.push(vec![hit]),
            }
        }
        let reads = futures_util::stream::iter(objects).map(|parts| async move {
            if self.tx.is_closed() {
                return (parts, None, None);
            }
            let bytes: u64 = parts.iter().map(|h| h.component.length).sum();
            let held = match &self.budget {
                Some(b) => b.reserve(bytes).await,
                None => None,
            };
            let cache = self.cache.clone();
            let keys: Vec<(Key, u64)> = parts
                .iter()
                .map(|h| (h.key.clone(), h.component.length))
                .collect();
            let got = tokio::task::spawn_blocking(move || {
                keys.iter()
                    .map(|(key, len)| cache.get(key, *len))
                    .collect::<Vec<_>>()
            })
            .await
            .ok();
            (parts, got, held)
        });
        let mut reads = std::pin::pin!(reads.buffered(parallel));
        let mut failed: Vec<String> = Vec::new();
        while let Some((parts, got, held)) = reads.next().await {
            if self.tx.is_closed() {
                return Vec::new();
            }
            let object = parts.first().map(|h| h.object.clone()).unwrap_or_default();
            let mut whole = Vec::with_capacity(parts.len());
            for (hit, read) in parts.into_iter().zip(got.into_iter().flatten()) {
                match read {
                    Some(Ok(data)) => whole.push(delivered(hit, data)),
                    Some(Err(why)) => {
                        tracing::warn!(url = %self.url, object = %hit.object, component = %hit.role, "{why}; fetching it again");
                    }
                    // Pruned meanwhile by another process.
                    None => {}
                }
            }
            let expected = self
                .remote
                .manifest
                .objects
                .get(&object)
                .map(|o| o.components.len());
            if Some(whole.len()) != expected {
                failed.push(object);
                continue;
            }
            let last = whole.len().saturating_sub(1);
            let mut held = held;
            for (i, d) in whole.into_iter().enumerate() {
                let h = if i == last { held.take() } else { None };
                if self.tx.send((Event::Component(Ok(d)), h)).is_ok() {
                    self.sent.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        failed
    }

    /// Forwards `network`'s components, each stored in the cache first
    /// (a few at once) when it was verified against a digest; whether it
    /// ended whole (not lost, nor the consumer gone).
    async fn forward(&self, network: Option<Fetch>) -> bool {
        let Some(network) = network else { return true };
        let items = futures_util::stream::unfold(network, |mut f| async move {
            f.next().await.map(|item| (item, f))
        });
        // The outer budget is reserved before a component is stored, so
        // at most it (and the network fetch's own) is held in between.
        let stored = items
            .map(|item| async move {
                let d = item?;
                let held = match &self.budget {
                    Some(b) => b.reserve(d.data.len() as u64).await,
                    None => None,
                };
                self.store(d).await.map(|d| (d, held))
            })
            .buffered(WRITES_IN_FLIGHT);
        let mut stored = std::pin::pin!(stored);
        while let Some(item) = stored.next().await {
            let event = match item {
                Ok((d, held)) => {
                    if self.tx.send((Event::Component(Ok(d)), held)).is_err() {
                        return false;
                    }
                    self.sent.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                // The connection is gone: nothing more comes, say so as it was said.
                Err(e @ Error::Transport(_)) => {
                    let _ = self.tx.send((Event::Lost(e), None));
                    return false;
                }
                Err(e) => (Event::Component(Err(e)), None),
            };
            if self.tx.send(event).is_err() {
                return false;
            }
        }
        true
    }

    /// `d`, after its bytes were stored (on the blocking pool).
    async fn store(&self, d: Delivered) -> Result<Delivered> {
        let key = match (&d.digest, d.verification) {
            (Some(digest), Verification::Verified) => Cache::key(
                digest,
                Scope {
                    url: &self.url,
                    etag: &self.remote.etag,
                    object: &d.object,
                    component: &d.component,
                },
            ),
            _ => None,
        };
        let Some(key) = key else { return Ok(d) };
        let cache = self.cache.clone();
        tokio::task::spawn_blocking(move || {
            cache.put(&key, d.data.as_slice());
            d
        })
        .await
        .map_err(|e| Error::Transport(format!("storing a component in the cache: {e}")))
    }
}

/// A cached component as a fetch delivers it: verified (the cache checked it).
fn delivered(hit: Hit, data: zt_format::AlignedBuf) -> Delivered {
    let c = hit.component;
    Delivered {
        object: hit.object,
        component: hit.role,
        seq: hit.seq,
        dtype: c.dtype,
        logical_type: c.logical_type,
        encoding: c.encoding,
        uncompressed_length: c.uncompressed_length,
        digest: Some(hit.key.digest),
        data,
        verification: Verification::Verified,
    }
}
