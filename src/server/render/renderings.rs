//! Manifest renderings (JSON and CBOR, whole or `?select=`ed, and the
//! ztp/1 manifest), made once per file version and shared: concurrent
//! requests for the same rendering wait for the one being made, and later
//! ones take it from a cache bounded in bytes and in entries (least
//! recently used out first). Refusals (a selection that matches nothing)
//! are kept too, so a flood of distinct selections costs the cache what
//! each one holds: every entry is charged its key, its bytes and the
//! map's own share, and the gauge reports that sum. A rendering larger
//! than a quarter of the cache is shared by
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

use crate::server::cpu::{CpuError, CpuPool};
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
    /// No turn on the CPU pool (`limits.cpu_queue`): retry shortly.
    Busy(String),
}

impl Refused {
    /// Why, in words.
    fn text(&self) -> &str {
        match self {
            Refused::BadSelect(t)
            | Refused::NoMatch(t)
            | Refused::TooLarge(t)
            | Refused::Failed(t)
            | Refused::Busy(t) => t,
        }
    }
}

/// What an entry costs beyond its key and bytes: the map's slot, the
/// shared cell and the rendering's own allocation headers.
const ENTRY: u64 = 256;

/// Most renderings kept, however small: eviction scans them all.
const MAX_ENTRIES: usize = 4096;

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
    /// Where renderings are made.
    cpu: Arc<CpuPool>,
    state: Mutex<State>,
    /// `ztserve_manifest_renderings_total`, by result: a rendering made
    /// (miss), shared or cached (hit), past the cap (refused), or an HTTP
    /// request's streamed past the cap (streamed).
    results: IntCounterVec,
    /// `ztserve_manifest_render_cache_bytes`: what `State::bytes` holds.
    held: IntGauge,
}

impl Renderings {
    pub(crate) fn new(capacity: u64, cap: u64, cpu: Arc<CpuPool>) -> Renderings {
        let r = Renderings {
            capacity,
            cap,
            cpu,
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
    /// making it now, or made here by `render` (on the CPU pool, handed a
    /// writer that refuses to grow past the cap). A rendering the pool
    /// had no turn for is refused as busy to those waiting for it, and
    /// not kept.
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
                let job = self.cpu.run("rendering a manifest", move || {
                    let mut w = Capped::new(cap);
                    render(&mut w)
                });
                let rendered = job.await.unwrap_or_else(|e| match e {
                    CpuError::Busy { .. } => Rendered::Refused(Refused::Busy(e.to_string())),
                    CpuError::Failed { .. } => {
                        tracing::error!(error = %e, "manifest rendering failed");
                        Rendered::Refused(Refused::Failed(format!("rendering failed: {e}")))
                    }
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
            self.admit(&key, &slot, cost(&key, &got));
        } else {
            self.count("hit");
        }
        got
    }

    /// Counts a finished rendering against the capacity, evicting the
    /// least recently used ones (never one being made) until it fits and
    /// at most [`MAX_ENTRIES`] are kept; one larger than a quarter of the
    /// capacity is served but not kept.
    fn admit(&self, key: &Key, slot: &Slot, bytes: u64) {
        let mut st = self.lock();
        let still_mine = st.slots.get(key).is_some_and(|(s, _)| Arc::ptr_eq(s, slot));
        if !still_mine {
            return;
        }
        let now_only = slot.get().is_some_and(|r| {
            matches!(
                &**r,
                Rendered::Refused(Refused::Busy(_) | Refused::Failed(_))
            )
        });
        if bytes > self.capacity / 4 || now_only {
            st.slots.remove(key);
            return;
        }
        st.bytes += bytes;
        while st.bytes > self.capacity || st.slots.len() > MAX_ENTRIES {
            let oldest = st
                .slots
                .iter()
                .filter(|(k, (s, _))| *k != key && s.initialized())
                .min_by_key(|(_, (_, tick))| *tick)
                .map(|(k, _)| k.clone());
            let Some(oldest) = oldest else { break };
            if let Some((s, _)) = st.slots.remove(&oldest) {
                let freed = s.get().map_or(0, |r| cost(&oldest, r));
                st.bytes = st.bytes.saturating_sub(freed);
            }
        }
        self.held.set(i64::try_from(st.bytes).unwrap_or(i64::MAX));
    }
}

/// What keeping `r` under `key` costs the cache, in bytes.
fn cost(key: &Key, r: &Rendered) -> u64 {
    let strings = std::mem::size_of::<String>();
    let key_bytes = key.etag.len() + key.select.iter().map(|s| s.len() + strings).sum::<usize>();
    let held = match r {
        Rendered::Body { bytes, etag, .. } => bytes.len() + etag.len(),
        Rendered::Refused(why) => why.text().len(),
    };
    ENTRY + (key_bytes + held) as u64
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

    fn pool() -> Arc<CpuPool> {
        Arc::new(CpuPool::new(2, 64))
    }

    /// What `key(k)` with `body(len)` costs: one letter of key.
    fn costs(len: u64) -> u64 {
        ENTRY + 1 + len
    }

    #[tokio::test]
    async fn renders_once_keeps_within_capacity_and_refuses_past_the_cap() {
        let full = 4 * costs(40);
        let r = Renderings::new(full, 60, pool());
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
        assert_eq!(r.held(), full);
        // A fifth evicts the least recently used (a).
        r.get(key("e"), body(40)).await;
        assert_eq!(r.held(), full);
        r.get(key("a"), body(40)).await;
        assert_eq!(r.counted("miss"), 6);
        // Over a quarter of the capacity: served, not kept.
        r.get(key("f"), body(41)).await;
        assert_eq!(r.held(), full);
        r.get(key("f"), body(41)).await;
        assert_eq!(r.counted("miss"), 8);
        // Past the per-request cap: refused, and the refusal is charged
        // what it holds.
        let big = r.get(key("g"), body(61)).await;
        assert!(matches!(&*big, Rendered::Refused(Refused::TooLarge(_))));
        assert_eq!(r.counted("refused"), 1);
        assert!(r.held() <= full);
    }

    /// Issue 28: distinct selections that match nothing are refused, and
    /// each refusal kept is charged its key and reason: however many come,
    /// the cache holds at most its capacity and `MAX_ENTRIES`, and the
    /// gauge says what it holds.
    #[tokio::test]
    async fn a_flood_of_refused_selections_stays_within_the_cache() {
        let capacity = 1 << 20;
        let r = Renderings::new(capacity, 1 << 20, pool());
        for i in 0..(3 * MAX_ENTRIES) {
            let k = Key {
                etag: "\"v\"".to_owned(),
                kind: Kind::Json,
                select: vec![format!("{i}-{}", "x".repeat(400))],
            };
            let got = r
                .get(k, |_: &mut Capped| {
                    Rendered::Refused(Refused::NoMatch("no object matches".repeat(10)))
                })
                .await;
            assert!(matches!(&*got, Rendered::Refused(Refused::NoMatch(_))));
            let held = r.held();
            assert!(held > 0, "refusals are charged what they hold");
            assert!(held <= capacity, "{held} bytes held, over {capacity}");
            assert_eq!(r.held.get(), i64::try_from(held).unwrap());
        }
        assert!(r.lock().slots.len() <= MAX_ENTRIES);
        // Small refusals: the entry cap, not the bytes, is what bounds them.
        let r = Renderings::new(u64::MAX >> 1, 1 << 20, pool());
        for i in 0..(MAX_ENTRIES + 100) {
            let k = key(&i.to_string());
            r.get(k, |_: &mut Capped| {
                Rendered::Refused(Refused::NoMatch(String::new()))
            })
            .await;
        }
        assert_eq!(r.lock().slots.len(), MAX_ENTRIES);
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_rendering() {
        let r = Arc::new(Renderings::new(1 << 20, 1 << 20, pool()));
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
