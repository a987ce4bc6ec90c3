//! A dense numeric object's values summarised on the server, so that a
//! browser (the web page's tensor view) never receives a large tensor:
//! count, minimum, maximum, mean and standard deviation of the finite
//! values, counts of NaN and of each infinity, a 64-bin histogram between
//! the finite minimum and maximum, and, for a 2-D tensor, a grid of at most
//! 64 by 64 cells, each the mean of the finite values of its block.
//!
//! Computed streaming: two passes over the stored bytes in pieces of
//! `READ_CHUNK` (the first for the moments and the grid, the second for
//! the histogram), after the component's digest check; a zstd component
//! is decoded as it is read, a piece at a time (`zt_format::Decoder`), and
//! only within `limits.render_cap`. Each piece is summed in a turn of the
//! CPU pool (`crate::server::cpu`), which lets a summary in as one job or
//! refuses it as busy. Elements are read as numbers by
//! `zt_format::Values`. Summaries are kept per file version (by ETag) in
//! a cache bounded in entries and bytes ([`Cache`]): concurrent requests
//! for one summary share one computation, and what is evicted first is
//! what is cheapest to make again, not merely what is oldest.
//! Refused by name: formats other than dense (GGUF blocks, sparse,
//! quantized groups, ragged) and complex or unknown logical types.
//! Booleans count as 0 and 1.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;

use prometheus::{IntCounterVec, IntGauge, Registry};
use tokio::sync::OnceCell;

use crate::server::families::{counter_vec, gauge, register};

use serde::Serialize;
use zt_format::{Decoder, Encoding, Format, Object, Rule, Values};

use crate::server::cpu::{CpuError, CpuPool};
use crate::server::store::blob::Visit;
use crate::server::store::READ_CHUNK;

use crate::server::catalog::Served;

/// Histogram bins.
const BINS: usize = 64;
/// Most grid cells along each side.
const GRID: u64 = 64;
/// Most summaries kept.
const KEEP: usize = 1024;
/// Most bytes of summaries kept (a 2-D tensor's grid is up to 64 KiB).
const KEEP_BYTES: u64 = 16 << 20;

/// What a summary says (serialized as the endpoint's JSON).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub object: String,
    pub dtype: String,
    #[serde(rename = "type")]
    pub logical_type: String,
    pub shape: Vec<u64>,
    pub count: u64,
    pub finite: u64,
    pub nan: u64,
    pub pos_inf: u64,
    pub neg_inf: u64,
    /// Of the finite values; `None` when there are none.
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub mean: Option<f64>,
    pub std: Option<f64>,
    pub histogram: Histogram,
    /// For a 2-D tensor.
    pub grid: Option<Grid>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Histogram {
    /// The bins split `lo..=hi` evenly.
    pub lo: Option<f64>,
    pub hi: Option<f64>,
    pub counts: Vec<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct Grid {
    pub rows: u64,
    pub cols: u64,
    /// Row-major; a cell with no finite value is `None`.
    pub values: Vec<Option<f64>>,
}

/// Why there is no summary; each names the file, object and rule.
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// No such object.
    NotFound(String),
    /// Not a kind of object or value this can summarise, or too large.
    Unsupported(String),
    /// The bytes failed their digest.
    Corrupt(String),
    /// The bytes could not be read.
    Unreadable(String),
    /// Every CPU turn is taken and the queue is full, or the job failed.
    Cpu(CpuError),
}

/// The first pass: moments (Welford), extremes, non-finite counts, grid sums.
struct Moments {
    count: u64,
    finite: u64,
    nan: u64,
    pos_inf: u64,
    neg_inf: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
    /// For a 2-D tensor.
    grid: Option<GridSums>,
}

/// A 2-D tensor's shape, its grid's, and each cell's sum and count.
struct GridSums {
    rows: u64,
    cols: u64,
    grid_rows: u64,
    grid_cols: u64,
    cells: Vec<(f64, u64)>,
}

impl Moments {
    fn new(shape: &[u64]) -> Moments {
        let grid = match shape {
            [r, c] if *r > 0 && *c > 0 => {
                let (gr, gc) = ((*r).min(GRID), (*c).min(GRID));
                let cells = usize::try_from(gr * gc).unwrap_or(0);
                Some(GridSums {
                    rows: *r,
                    cols: *c,
                    grid_rows: gr,
                    grid_cols: gc,
                    cells: vec![(0.0, 0); cells],
                })
            }
            _ => None,
        };
        Moments {
            count: 0,
            finite: 0,
            nan: 0,
            pos_inf: 0,
            neg_inf: 0,
            mean: 0.0,
            m2: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
            grid,
        }
    }
}

/// What a pass over a component's elements hands each one to.
trait Sink: Send + 'static {
    fn add(&mut self, x: f64);
}

impl Sink for Moments {
    fn add(&mut self, x: f64) {
        let k = self.count;
        self.count += 1;
        if x.is_nan() {
            self.nan += 1;
            return;
        }
        if x.is_infinite() {
            if x > 0.0 {
                self.pos_inf += 1;
            } else {
                self.neg_inf += 1;
            }
            return;
        }
        self.finite += 1;
        let d = x - self.mean;
        self.mean += d / self.finite as f64;
        self.m2 += d * (x - self.mean);
        self.min = self.min.min(x);
        self.max = self.max.max(x);
        if let Some(g) = &mut self.grid {
            let (r, c) = (k / g.cols, k % g.cols);
            let cell = (r * g.grid_rows / g.rows) * g.grid_cols + c * g.grid_cols / g.cols;
            if let Some(slot) = g.cells.get_mut(usize::try_from(cell).unwrap_or(usize::MAX)) {
                slot.0 += x;
                slot.1 += 1;
            }
        }
    }
}

/// The second pass: the histogram of the finite values between the first
/// pass's extremes.
struct Bins {
    lo: f64,
    width: f64,
    counts: Vec<u64>,
}

impl Sink for Bins {
    fn add(&mut self, x: f64) {
        if !x.is_finite() {
            return;
        }
        let i = if self.width > 0.0 {
            (((x - self.lo) / self.width) as usize).min(BINS - 1)
        } else {
            0
        };
        if let Some(b) = self.counts.get_mut(i) {
            *b += 1;
        }
    }
}

/// One pass over a component's elements: its stored pieces, decoded as
/// they come when it is zstd, each element read as a number and handed
/// to the sink.
struct Pass<S> {
    decoder: Option<Decoder>,
    values: Values,
    sink: S,
}

impl<S: Sink> Pass<S> {
    /// Decodes what the decoder still holds, and gives the sink back.
    fn finish(mut self) -> Result<S, Rule> {
        if let Some(d) = self.decoder.take() {
            let (values, sink) = (&self.values, &mut self.sink);
            d.finish(|p| {
                values.each(p, |x| sink.add(x));
                Ok::<(), Rule>(())
            })?;
        }
        Ok(self.sink)
    }
}

impl<S: Sink> Visit for Pass<S> {
    type Error = Rule;

    fn piece(&mut self, bytes: &[u8]) -> Result<(), Rule> {
        let (values, sink) = (&self.values, &mut self.sink);
        match &mut self.decoder {
            Some(d) => d.feed(bytes, |p| {
                values.each(p, |x| sink.add(x));
                Ok::<(), Rule>(())
            }),
            None => {
                values.each(bytes, |x| sink.add(x));
                Ok(())
            }
        }
    }
}

/// A component's elements, read a pass at a time.
struct Elements<'a> {
    holder: &'a Served,
    range: std::ops::Range<u64>,
    /// The decoded length of a zstd component.
    decoded: Option<u64>,
    cap: u64,
    values: Values,
    /// Names the file, object and rule in a refusal.
    at: &'a (dyn Fn(&str, String) -> String + Sync),
    cpu: &'a CpuPool,
    /// Names the file and object in a refusal as busy.
    what: &'a str,
    /// Whether the summary was let in by the pool (its first piece's
    /// turn): later pieces wait for their turn whatever the queue.
    admitted: AtomicBool,
}

impl Elements<'_> {
    /// Hands every element to `sink`, the stored bytes read in pieces (and
    /// decoded as they come), and gives it back.
    async fn pass<S: Sink>(&self, sink: S) -> Result<S, Refusal> {
        let corrupt = |rule: Rule| Refusal::Corrupt((self.at)("zstd-corrupt", rule.to_string()));
        let piece = usize::try_from(READ_CHUNK).unwrap_or(usize::MAX);
        let decoder = match self.decoded {
            Some(n) => Some(Decoder::new(n, self.cap, piece).map_err(corrupt)?),
            None => None,
        };
        let mut pass = Pass {
            decoder,
            values: self.values,
            sink,
        };
        let mut pieces = self.holder.file.pieces(self.range.clone(), true);
        while let Some(read) = pieces.next().await {
            // A read that failed is the file's fault, not the data's.
            let bytes =
                read.map_err(|e| Refusal::Unreadable((self.at)("unreadable", e.to_string())))?;
            pass = self
                .turn(move || pass.piece(&bytes).map(|()| pass))
                .await?
                .map_err(corrupt)?;
        }
        if pass.decoder.is_none() {
            return Ok(pass.sink);
        }
        self.turn(move || pass.finish()).await?.map_err(corrupt)
    }

    /// Runs `job` in a turn of the CPU pool: the summary's first job is
    /// let in (or refused as busy), the later ones wait for their turn.
    async fn turn<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Refusal> {
        let done = match self.admitted.swap(true, Ordering::Relaxed) {
            false => self.cpu.run(self.what, job).await,
            true => self.cpu.wait_turn(self.what, job).await,
        };
        done.map_err(Refusal::Cpu)
    }
}

/// A summary being made, or made: shared by every request for it.
type Slot = Arc<OnceCell<Result<Arc<Summary>, Refusal>>>;

/// Summaries kept per file version: at most [`KEEP`] of them and
/// [`KEEP_BYTES`] of their bytes. Eviction is by cost (greedy-dual): each
/// summary's priority is the cache's clock plus the bytes read to make it
/// per byte it holds, renewed on each use; the lowest goes first, and the
/// clock moves up to it. A cheap summary used once is evicted before an
/// expensive one, which a stream of cheap ones cannot push out.
#[derive(Debug)]
pub(crate) struct Cache {
    state: Mutex<Kept>,
    /// `ztserve_summaries_total`, by result: made, or shared or kept
    /// (hit).
    results: IntCounterVec,
    /// `ztserve_summary_cache_bytes`.
    held: IntGauge,
    /// Where the values are summed: a summary is let in as one CPU-heavy
    /// job (or refused as busy), and sums each piece in a turn of its own.
    cpu: Arc<CpuPool>,
}

impl Cache {
    /// An empty cache whose summaries are summed on `cpu`.
    pub(crate) fn new(cpu: Arc<CpuPool>) -> Cache {
        let c = Cache {
            state: Mutex::default(),
            cpu,
            results: counter_vec(
                "ztserve_summaries_total",
                "Summary requests by where their summary came from: made (miss), or shared with a request making it or kept (hit).",
                &["result"],
            ),
            held: gauge(
                "ztserve_summary_cache_bytes",
                "Bytes of value summaries kept for later requests.",
            ),
        };
        for result in ["miss", "hit"] {
            c.results.with_label_values(&[result]);
        }
        c
    }
}

#[derive(Debug, Default)]
struct Kept {
    slots: HashMap<(String, String), Entry>,
    /// Bytes of the summaries held.
    bytes: u64,
    /// The priority of the last one evicted.
    clock: f64,
}

impl Kept {
    /// Evicts the finished summaries of lowest priority, never `keep`,
    /// until at most `entries` and `bytes` are held; the clock moves up to
    /// each one evicted.
    fn evict(&mut self, keep: &(String, String), entries: usize, bytes: u64) {
        while self.slots.len() > entries || self.bytes > bytes {
            let lowest = self
                .slots
                .iter()
                .filter(|(k, e)| e.size > 0 && *k != keep)
                .min_by(|a, b| a.1.priority.total_cmp(&b.1.priority))
                .map(|(k, e)| (k.clone(), e.priority));
            let Some((k, priority)) = lowest else { break };
            if let Some(gone) = self.slots.remove(&k) {
                self.bytes = self.bytes.saturating_sub(gone.size);
                self.clock = priority;
            }
        }
    }
}

#[derive(Debug)]
struct Entry {
    slot: Slot,
    /// Eviction priority (`clock + cost / size` when last used).
    priority: f64,
    /// Bytes read to make it, and the bytes it holds (0 while made).
    cost: u64,
    size: u64,
}

impl Cache {
    /// The summary of `object` of `served`: kept, being made by another
    /// request (waited for), or made now (read on the runtime, summed on
    /// the CPU pool, which lets it in as one job or refuses it as busy, in
    /// a task of its own: a request that goes away leaves it to those
    /// waiting). Refusals are not kept.
    pub(crate) async fn get(
        &self,
        served: &Arc<Served>,
        object: &str,
        cap: u64,
    ) -> Result<Arc<Summary>, Refusal> {
        let key = (served.etag.clone(), object.to_owned());
        let slot = {
            let mut kept = self.lock();
            let clock = kept.clock;
            let entry = kept.slots.entry(key.clone()).or_insert_with(|| Entry {
                slot: Slot::default(),
                priority: clock,
                cost: 0,
                size: 0,
            });
            if entry.size > 0 {
                entry.priority = clock + entry.cost as f64 / entry.size as f64;
            }
            Arc::clone(&entry.slot)
        };
        let (of, name) = (Arc::clone(served), object.to_owned());
        let mut miss = false;
        let made = slot
            .get_or_init(|| async {
                miss = true;
                let cpu = Arc::clone(&self.cpu);
                let made = tokio::spawn(async move { summarise(&of, &name, cap, &cpu).await });
                match made.await {
                    Ok(made) => made.map(Arc::new),
                    Err(e) => Err(Refusal::Unreadable(format!("summarising failed: {e}"))),
                }
            })
            .await
            .clone();
        let result = if miss { "miss" } else { "hit" };
        self.results.with_label_values(&[result]).inc();
        self.settle(&key, &slot, &made, served, object);
        made
    }

    /// Registers the `ztserve_summar*` family in the daemon's registry.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.results, &self.held])
    }

    /// Keeps a finished summary (its cost: the stored bytes read to make
    /// it), or forgets a refusal; evicts past the bounds.
    fn settle(
        &self,
        key: &(String, String),
        slot: &Slot,
        made: &Result<Arc<Summary>, Refusal>,
        served: &Served,
        object: &str,
    ) {
        let mut kept = self.lock();
        let clock = kept.clock;
        let Some(entry) = kept
            .slots
            .get_mut(key)
            .filter(|e| Arc::ptr_eq(&e.slot, slot))
        else {
            return;
        };
        if entry.size > 0 {
            return;
        }
        let Ok(summary) = made else {
            kept.slots.remove(key);
            return;
        };
        let cost = served
            .manifest
            .objects
            .get(object)
            .map_or(1, |o| o.stored_bytes().max(1));
        let size = summary.held_bytes();
        entry.cost = cost;
        entry.size = size;
        entry.priority = clock + cost as f64 / size as f64;
        kept.bytes += size;
        kept.evict(key, KEEP, KEEP_BYTES);
        self.held.set(i64::try_from(kept.bytes).unwrap_or(i64::MAX));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

impl Summary {
    /// About what it holds in memory.
    fn held_bytes(&self) -> u64 {
        let grid = self.grid.as_ref().map_or(0, |g| g.values.len() * 16);
        let strings = self.object.len() + self.dtype.len() + self.logical_type.len();
        (std::mem::size_of::<Summary>() + strings + self.shape.len() * 8 + BINS * 8 + grid) as u64
    }
}

/// Reads and summarises `object`'s `data` component (checked first).
async fn summarise(
    served: &Arc<Served>,
    object: &str,
    cap: u64,
    cpu: &CpuPool,
) -> Result<Summary, Refusal> {
    let at =
        |rule: &str, why: String| format!("{}: object {object:?}: {why} [{rule}]", served.path);
    let unsupported = |rule: &str, why: String| Refusal::Unsupported(at(rule, why));
    let obj: &Object = served
        .manifest
        .objects
        .get(object)
        .ok_or_else(|| Refusal::NotFound(at("not-found", "no such object".to_owned())))?;
    if obj.format != Format::Dense {
        return Err(unsupported(
            "summary-format",
            format!(
                "a {} object cannot be summarised (dense only)",
                obj.format.name()
            ),
        ));
    }
    let c = obj
        .components
        .get("data")
        .ok_or_else(|| unsupported("summary-format", "no data component".to_owned()))?;
    let values = Values::of(c.dtype, c.logical_type.as_ref())
        .map_err(|why| unsupported("summary-type", format!("{why}: cannot be summarised")))?;
    let decoded = match (c.encoding, c.uncompressed_length) {
        (Encoding::Zstd, Some(n)) if n <= cap && c.length <= cap => Some(n),
        (Encoding::Zstd, _) => {
            return Err(unsupported(
                "summary-over-cap",
                format!("decodes past the per-request cap of {cap} bytes"),
            ))
        }
        _ => None,
    };
    served.check(object, "data").await.map_err(|r| match r {
        crate::server::integrity::checks::CheckFailure::Corrupt(why) => Refusal::Corrupt(why),
        crate::server::integrity::checks::CheckFailure::Unreadable(why) => Refusal::Unreadable(why),
    })?;
    let what = format!("{}: the summary of {object:?}", served.path);
    let owner = served.owner(object, "data");
    let holder = owner.as_ref().unwrap_or(served);
    let elements = Elements {
        holder,
        range: c.offset..c.offset.saturating_add(c.length),
        decoded,
        cap,
        values,
        at: &at,
        cpu,
        what: &what,
        admitted: AtomicBool::new(false),
    };
    let m = elements.pass(Moments::new(&obj.shape)).await?;
    let (lo, hi) = (m.min, m.max);
    let mut bins = vec![0u64; BINS];
    if m.finite > 0 {
        let second = Bins {
            lo,
            width: (hi - lo) / BINS as f64,
            counts: bins,
        };
        bins = elements.pass(second).await?.counts;
    }
    let finite = m.finite > 0;
    let grid = m.grid.map(|g| Grid {
        rows: g.grid_rows,
        cols: g.grid_cols,
        values: g
            .cells
            .into_iter()
            .map(|(sum, n)| (n > 0).then(|| sum / n as f64))
            .collect(),
    });
    Ok(Summary {
        object: object.to_owned(),
        dtype: c.dtype.name().to_owned(),
        logical_type: c
            .logical_type
            .as_ref()
            .map_or_else(|| c.dtype.name().to_owned(), |t| t.name().to_owned()),
        shape: obj.shape.clone(),
        count: m.count,
        finite: m.finite,
        nan: m.nan,
        pos_inf: m.pos_inf,
        neg_inf: m.neg_inf,
        min: finite.then_some(lo),
        max: finite.then_some(hi),
        mean: finite.then_some(m.mean),
        std: finite.then(|| (m.m2 / m.finite as f64).sqrt()),
        histogram: Histogram {
            lo: finite.then_some(lo),
            hi: finite.then_some(hi),
            counts: bins,
        },
        grid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_grid_and_non_finite_values() {
        let mut m = Moments::new(&[2, 3]);
        for x in [1.0, 2.0, 3.0, f64::NAN, 5.0, f64::INFINITY] {
            m.add(x);
        }
        assert_eq!((m.count, m.finite, m.nan, m.pos_inf), (6, 4, 1, 1));
        assert_eq!((m.min, m.max), (1.0, 5.0));
        assert!((m.mean - 2.75).abs() < 1e-12);
        let g = m.grid.unwrap();
        assert_eq!((g.grid_rows, g.grid_cols), (2, 3));
        assert_eq!(g.cells[0], (1.0, 1));
        assert_eq!(g.cells[3], (0.0, 0));
        assert_eq!(g.cells[5], (0.0, 0));
    }

    /// Kept summaries are bounded by count and bytes, and evicted by cost
    /// per byte: a stream of cheap summaries pushes out one another, never
    /// the expensive one.
    #[test]
    fn the_cache_evicts_the_cheapest_to_make_again_first() {
        let mut kept = Kept::default();
        let key = |n: usize| (format!("\"e{n}\""), "t".to_owned());
        let add = |kept: &mut Kept, n: usize, cost: u64, size: u64| {
            let priority = kept.clock + cost as f64 / size as f64;
            let entry = Entry {
                slot: Slot::default(),
                priority,
                cost,
                size,
            };
            kept.slots.insert(key(n), entry);
            kept.bytes += size;
            kept.evict(&key(n), 4, 10_000);
        };
        // One expensive summary (512 MiB read for 1 KB), then cheap ones.
        add(&mut kept, 0, 512 << 20, 1000);
        for n in 1..50 {
            add(&mut kept, n, 1000, 1000);
            assert!(kept.slots.len() <= 4 && kept.bytes <= 10_000);
            assert!(
                kept.slots.contains_key(&key(0)),
                "the expensive one went at {n}"
            );
            assert!(kept.slots.contains_key(&key(n)), "the newest went at {n}");
        }
        // Past the bytes: a large cheap one pushes out small cheap ones
        // until the bytes fit.
        add(&mut kept, 50, 1000, 8000);
        assert_eq!((kept.slots.len(), kept.bytes), (3, 10_000));
        assert!(kept.slots.contains_key(&key(0)) && kept.slots.contains_key(&key(50)));
    }
}
