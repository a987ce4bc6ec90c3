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
//! only within `limits.render_cap`. Elements are read as numbers by
//! `zt_format::Values`. Summaries are kept per file version (by ETag).
//! Refused by name: formats other than dense (GGUF blocks, sparse,
//! quantized groups, ragged) and complex or unknown logical types.
//! Booleans count as 0 and 1.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use zt_format::{Decoder, Encoding, Format, Object, Rule, Values};

use crate::server::store::blob::{Stop, Visit};
use crate::server::store::READ_CHUNK;

use crate::server::catalog::Served;

/// Histogram bins.
const BINS: usize = 64;
/// Most grid cells along each side.
const GRID: u64 = 64;
/// Most summaries kept; past it the oldest half is dropped.
const KEEP: usize = 1024;

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
        let pass = Pass {
            decoder,
            values: self.values,
            sink,
        };
        let read = self.holder.file.visit(self.range.clone(), true, pass).await;
        let mut done = read.map_err(|stop| match stop {
            // A read that failed is the file's fault, not the data's.
            Stop::Read(why) => Refusal::Unreadable((self.at)("unreadable", why.to_string())),
            Stop::By(rule) => corrupt(rule),
        })?;
        if let Some(d) = done.decoder.take() {
            let (values, sink) = (&done.values, &mut done.sink);
            d.finish(|p| {
                values.each(p, |x| sink.add(x));
                Ok::<(), Rule>(())
            })
            .map_err(corrupt)?;
        }
        Ok(done.sink)
    }
}

/// Summaries kept per file version.
#[derive(Debug, Default)]
pub(crate) struct Cache {
    kept: Mutex<HashMap<(String, String), Arc<Summary>>>,
}

impl Cache {
    /// The summary of `object` of `served` (it reads the object the first
    /// time: on the runtime, the elements summed on the blocking pool).
    pub(crate) async fn get(
        &self,
        served: &Arc<Served>,
        object: &str,
        cap: u64,
    ) -> Result<Arc<Summary>, Refusal> {
        let key = (served.etag.clone(), object.to_owned());
        if let Some(s) = self.kept.lock().ok().and_then(|k| k.get(&key).cloned()) {
            return Ok(s);
        }
        let s = Arc::new(summarise(served, object, cap).await?);
        if let Ok(mut kept) = self.kept.lock() {
            if kept.len() >= KEEP {
                let drop: Vec<_> = kept.keys().take(KEEP / 2).cloned().collect();
                for k in drop {
                    kept.remove(&k);
                }
            }
            kept.insert(key, Arc::clone(&s));
        }
        Ok(s)
    }
}

/// Reads and summarises `object`'s `data` component (checked first).
async fn summarise(served: &Arc<Served>, object: &str, cap: u64) -> Result<Summary, Refusal> {
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
        crate::server::integrity::checks::Refusal::Corrupt(why) => Refusal::Corrupt(why),
        crate::server::integrity::checks::Refusal::Unreadable(why) => Refusal::Unreadable(why),
    })?;
    let owner = served.owner(object, "data");
    let holder = owner.as_ref().unwrap_or(served);
    let elements = Elements {
        holder,
        range: c.offset..c.offset.saturating_add(c.length),
        decoded,
        cap,
        values,
        at: &at,
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
}
