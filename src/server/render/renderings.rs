//! Manifest renderings (JSON and CBOR, whole or `?select=`ed, and the
//! ztp/1 manifest), made once per file version and shared: concurrent
//! requests for the same rendering wait for the one being made, and later
//! ones take it from a cache bounded in bytes (least recently used out
//! first). A rendering larger than a quarter of the cache is shared by
//! the requests that wait for it, then dropped: the next request makes it
//! again. A rendering is made off the async runtime, written straight to
//! its buffer (no JSON tree), and stops, refused, once it passes the
//! per-request cap (`limits.render_cap`): no request holds more than that
//! for a manifest, however many objects the file has. (HTTP then streams
//! the rendering instead, `crate::server::http`'s streamed manifest; ztp/1
//! refuses the request.)

use std::collections::HashMap;
use std::hash::Hash;
use std::io::Write;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use prometheus::{IntCounterVec, IntGauge, Registry};
use tokio::sync::OnceCell;

use crate::server::families::{counter_vec, gauge, register};

/// Which rendering of a file version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    /// The file's ETag: a new version is a new key.
    pub(crate) etag: String,
    pub(crate) kind: Kind,
    /// The `select` patterns as given (empty: the whole manifest).
    pub(crate) select: Vec<String>,
}

/// The encodings a manifest is rendered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Json,
    /// HTTP's CBOR: the file's own manifest bytes where they are exact.
    Cbor,
    /// The ztp/1 manifest message's CBOR, always re-encoded.
    Ztp,
}

/// A rendering, or why a request cannot have one (a bad selection, one
/// that matches nothing, or one past the cap); either is the same for
/// every request with the same key.
#[derive(Debug, Clone)]
pub(crate) enum Rendered {
    Body {
        bytes: Bytes,
        /// The representation's ETag (the file's, the encoding and the
        /// objects selected).
        etag: String,
        /// Where the bytes came from: `json`, `file` (the CBOR the file
        /// stores) or `re-encoded` (`X-Zt-Manifest-Source`).
        source: &'static str,
    },
    Refused(Refused),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The patterns do not parse.
    BadSelect(String),
    /// They match no object.
    NoMatch(String),
    /// The rendering passed the per-request cap.
    TooLarge(String),
    /// The rendering task failed (a bug: details in the log).
    Failed(String),
}

type Slot = Arc<OnceCell<Arc<Rendered>>>;

#[derive(Debug, Default)]
struct State {
    slots: HashMap<Key, (Slot, u64)>,
    /// Bytes held by finished renderings in `slots`.
    bytes: u64,
    tick: u64,
}

/// The cache, with its counters for `/metrics`.
#[derive(Debug)]
pub struct Renderings {
    /// Most bytes of renderings kept for later requests.
    capacity: u64,
    /// Most bytes one rendering may take.
    cap: u64,
    state: Mutex<State>,
    /// `ztserve_manifest_renderings_total`, by result: a rendering made
    /// (miss), shared or cached (hit), past the cap (refused), or an HTTP
    /// request's streamed past the cap (streamed).
    results: IntCounterVec,
    /// `ztserve_manifest_render_cache_bytes`: what `State::bytes` holds.
    held: IntGauge,
}

impl Renderings {
    pub fn new(capacity: u64, cap: u64) -> Renderings {
        let r = Renderings {
            capacity,
            cap,
            state: Mutex::default(),
            results: counter_vec(
                "ztserve_manifest_renderings_total",
                "Manifest requests by where their rendering came from: made (miss), or shared or cached (hit); refused counts renderings that passed limits.render_cap, streamed the HTTP requests then served one written out as it was made.",
                &["result"],
            ),
            held: gauge(
                "ztserve_manifest_render_cache_bytes",
                "Bytes of manifest renderings kept for later requests.",
            ),
        };
        for result in ["miss", "hit", "refused", "streamed"] {
            r.results.with_label_values(&[result]);
        }
        r
    }

    fn count(&self, result: &str) {
        self.results.with_label_values(&[result]).inc();
    }

    /// Bytes of renderings held now.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.lock().bytes
    }

    /// Renderings counted under `result` so far.
    #[cfg(test)]
    fn counted(&self, result: &str) -> u64 {
        self.results.with_label_values(&[result]).get()
    }

    /// Registers the family in the daemon's registry.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.results, &self.held])
    }

    /// Counts an HTTP rendering streamed because it passed the cap.
    pub(crate) fn count_streamed(&self) {
        self.count("streamed");
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// The rendering `key` names: from the cache, from the request
    /// making it now, or made here by `render` (on the blocking pool,
    /// handed a writer that refuses to grow past the cap).
    pub(crate) async fn get<F>(&self, key: Key, render: F) -> Arc<Rendered>
    where
        F: FnOnce(&mut Capped) -> Rendered + Send + 'static,
    {
        let slot = {
            let mut st = self.lock();
            st.tick += 1;
            let tick = st.tick;
            let entry = st
                .slots
                .entry(key.clone())
                .or_insert_with(|| (Slot::default(), tick));
            entry.1 = tick;
            Arc::clone(&entry.0)
        };
        if let Some(done) = slot.get() {
            self.count("hit");
            return Arc::clone(done);
        }
        let cap = self.cap;
        let mut made = false;
        let got = slot
            .get_or_init(|| async {
                made = true;
                let job = tokio::task::spawn_blocking(move || {
                    let mut w = Capped::new(cap);
                    render(&mut w)
                });
                let rendered = job.await.unwrap_or_else(|e| {
                    tracing::error!(error = %e, "manifest rendering failed");
                    Rendered::Refused(Refused::Failed(format!("rendering failed: {e}")))
                });
                Arc::new(rendered)
            })
            .await;
        let got = Arc::clone(got);
        if made {
            self.count("miss");
            if matches!(&*got, Rendered::Refused(Refused::TooLarge(_))) {
                self.count("refused");
            }
            self.admit(&key, &slot, size(&got));
        } else {
            self.count("hit");
        }
        got
    }

    /// Counts a finished rendering against the capacity, evicting the
    /// least recently used ones (never one being made) until it fits; one
    /// larger than a quarter of the capacity is served but not kept.
    fn admit(&self, key: &Key, slot: &Slot, bytes: u64) {
        let mut st = self.lock();
        let still_mine = st.slots.get(key).is_some_and(|(s, _)| Arc::ptr_eq(s, slot));
        if !still_mine {
            return;
        }
        if bytes > self.capacity / 4 {
            st.slots.remove(key);
            return;
        }
        st.bytes += bytes;
        while st.bytes > self.capacity {
            let oldest = st
                .slots
                .iter()
                .filter(|(k, (s, _))| *k != key && s.initialized())
                .min_by_key(|(_, (_, tick))| *tick)
                .map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { break };
            if let Some((s, _)) = st.slots.remove(&oldest) {
                st.bytes = st.bytes.saturating_sub(s.get().map_or(0, |r| size(r)));
            }
        }
        self.held.set(i64::try_from(st.bytes).unwrap_or(i64::MAX));
    }
}

fn size(r: &Rendered) -> u64 {
    match r {
        Rendered::Body { bytes, etag, .. } => (bytes.len() + etag.len()) as u64,
        Rendered::Refused(_) => 0,
    }
}

/// A buffer that refuses to grow past its cap.
#[derive(Debug)]
pub(crate) struct Capped {
    buf: Vec<u8>,
    cap: u64,
    /// Whether a write was refused.
    pub(crate) over: bool,
}

impl Capped {
    fn new(cap: u64) -> Capped {
        Capped {
            buf: Vec::new(),
            cap,
            over: false,
        }
    }

    /// The bytes written, in an allocation of exactly their size.
    pub(crate) fn take(&mut self) -> Bytes {
        Bytes::from(std::mem::take(&mut self.buf).into_boxed_slice())
    }

    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if (self.buf.len() + data.len()) as u64 > self.cap {
            self.over = true;
            self.buf = Vec::new();
            return Err(std::io::Error::other("the rendering passed the cap"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn key(n: &str) -> Key {
        Key {
            etag: n.to_owned(),
            kind: Kind::Json,
            select: Vec::new(),
        }
    }

    fn body(len: usize) -> impl FnOnce(&mut Capped) -> Rendered + Send + 'static {
        move |w: &mut Capped| {
            if w.write_all(&vec![b'x'; len]).is_err() {
                return Rendered::Refused(Refused::TooLarge("over".into()));
            }
            Rendered::Body {
                bytes: w.take(),
                etag: String::new(),
                source: "test",
            }
        }
    }

    #[tokio::test]
    async fn renders_once_keeps_within_capacity_and_refuses_past_the_cap() {
        let r = Renderings::new(160, 60);
        let a = r.get(key("a"), body(40)).await;
        let again = r.get(key("a"), body(999)).await;
        assert!(
            Arc::ptr_eq(&a, &again),
            "the second request shares the first's"
        );
        assert_eq!((r.counted("miss"), r.counted("hit")), (1, 1));
        for k in ["b", "c", "d"] {
            r.get(key(k), body(40)).await;
        }
        assert_eq!(r.held(), 160);
        // A fifth evicts the least recently used (a).
        r.get(key("e"), body(40)).await;
        assert_eq!(r.held(), 160);
        r.get(key("a"), body(40)).await;
        assert_eq!(r.counted("miss"), 6);
        // Over a quarter of the capacity: served, not kept.
        r.get(key("f"), body(41)).await;
        assert_eq!(r.held(), 160);
        r.get(key("f"), body(41)).await;
        assert_eq!(r.counted("miss"), 8);
        // Past the per-request cap: refused, nothing held for it.
        let big = r.get(key("g"), body(61)).await;
        assert!(matches!(&*big, Rendered::Refused(Refused::TooLarge(_))));
        assert_eq!(r.counted("refused"), 1);
        assert!(r.held() <= 160);
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_rendering() {
        let r = Arc::new(Renderings::new(1 << 20, 1 << 20));
        let made = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (r, made) = (Arc::clone(&r), Arc::clone(&made));
            tasks.push(tokio::spawn(async move {
                r.get(key("x"), move |w: &mut Capped| {
                    made.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    body(10)(w)
                })
                .await
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(made.load(Ordering::Relaxed), 1);
    }
}
