//! Rectangular slices of a raw dense object: a half-open range per
//! dimension (step 1), and the contiguous runs of the stored bytes they
//! gather, in row-major order. One definition for the server's HTTP form
//! (`?slice=0:4096,1024:2048`), ztp/1 and every client, so that they
//! agree on the bounds, the shape and what cannot be sliced.
//!
//! Written `START:END` per dimension, separated by commas; `:` (or an
//! empty `START` or `END`) is the whole dimension or its start or end,
//! and dimensions left out at the end are whole, as in numpy. An empty
//! range (`START == END`) is an empty slice.

use std::fmt;
use std::ops::Range;

use crate::manifest::Object;

/// Most dimensions a slice may name.
pub const MAX_RANK: usize = 64;

/// A slice as written: a bound or none per end, per dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slice {
    dims: Vec<(Option<u64>, Option<u64>)>,
}

/// Why a slice cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceError {
    /// Not `START:END[,START:END...]` with unsigned integers.
    Malformed(String),
    /// More dimensions than the object has.
    Rank { given: usize, rank: usize },
    /// A range backwards or past its dimension.
    OutOfBounds {
        dim: usize,
        start: u64,
        end: u64,
        len: u64,
    },
    /// Not a raw dense object of whole-byte elements: the reason.
    NotRawDense(String),
    /// More contiguous runs than the server gathers for one slice.
    TooManyPieces { pieces: u64, cap: u64 },
}

impl SliceError {
    /// The rule's name, as errors name it.
    pub fn rule(&self) -> &'static str {
        match self {
            SliceError::Malformed(_) => "slice-malformed",
            SliceError::Rank { .. } | SliceError::OutOfBounds { .. } => "slice-out-of-bounds",
            SliceError::NotRawDense(_) => "slice-not-raw-dense",
            SliceError::TooManyPieces { .. } => "slice-too-many-pieces",
        }
    }
}

impl fmt::Display for SliceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SliceError::Malformed(text) => write!(
                f,
                "slice {text:?} is not START:END per dimension, separated by commas [slice-malformed]"
            ),
            SliceError::Rank { given, rank } => write!(
                f,
                "the slice names {given} dimensions; the object has {rank} [slice-out-of-bounds]"
            ),
            SliceError::OutOfBounds {
                dim,
                start,
                end,
                len,
            } => write!(
                f,
                "dimension {dim}: {start}:{end} is backwards or outside 0:{len} [slice-out-of-bounds]"
            ),
            SliceError::NotRawDense(why) => write!(f, "{why} [slice-not-raw-dense]"),
            SliceError::TooManyPieces { pieces, cap } => write!(
                f,
                "the slice gathers {pieces} separate runs of bytes; at most {cap} [slice-too-many-pieces]"
            ),
        }
    }
}

impl std::error::Error for SliceError {}

/// Where a slice's bytes lie in an object's `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gather {
    /// The slice's ranges, every dimension resolved.
    pub ranges: Vec<Range<u64>>,
    /// Its shape.
    pub shape: Vec<u64>,
    /// How many runs of bytes it gathers, each `run` bytes long.
    pub pieces: u64,
    pub run: u64,
    /// Bytes per element, and per step of each dimension.
    strides: Vec<u64>,
    /// The dimensions before the first one the runs span.
    outer: usize,
}

impl Slice {
    /// Parses `START:END[,START:END...]`.
    pub fn parse(text: &str) -> Result<Slice, SliceError> {
        let bad = || SliceError::Malformed(text.chars().take(256).collect());
        if text.is_empty() {
            return Err(bad());
        }
        let bound = |s: &str| -> Result<Option<u64>, SliceError> {
            match s {
                "" => Ok(None),
                _ if s.bytes().all(|c| c.is_ascii_digit()) => {
                    s.parse().map(Some).map_err(|_| bad())
                }
                _ => Err(bad()),
            }
        };
        let mut dims = Vec::new();
        for part in text.split(',') {
            let (a, b) = part.split_once(':').ok_or_else(bad)?;
            dims.push((bound(a)?, bound(b)?));
            if dims.len() > MAX_RANK {
                return Err(bad());
            }
        }
        Ok(Slice { dims })
    }

    /// A slice of the given ranges.
    pub fn of(ranges: &[Range<u64>]) -> Slice {
        Slice {
            dims: ranges
                .iter()
                .map(|r| (Some(r.start), Some(r.end)))
                .collect(),
        }
    }

    /// Where this slice of `obj`'s `data` lies: every bound checked, at
    /// most `cap` runs.
    pub fn gather(&self, obj: &Object, cap: u64) -> Result<Gather, SliceError> {
        let not = |why: String| Err(SliceError::NotRawDense(why));
        let c = crate::rows::raw_dense_data(obj, "cannot be sliced")
            .map_err(SliceError::NotRawDense)?;
        let rank = obj.shape.len();
        if rank == 0 {
            return not("a scalar has no dimensions to slice".to_owned());
        }
        if self.dims.len() > rank {
            return Err(SliceError::Rank {
                given: self.dims.len(),
                rank,
            });
        }
        let mut ranges = Vec::with_capacity(rank);
        for (dim, &len) in obj.shape.iter().enumerate() {
            let (a, b) = self.dims.get(dim).copied().unwrap_or((None, None));
            let (start, end) = (a.unwrap_or(0), b.unwrap_or(len));
            if start > end || end > len {
                return Err(SliceError::OutOfBounds {
                    dim,
                    start,
                    end,
                    len,
                });
            }
            ranges.push(start..end);
        }
        let count = obj
            .shape
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d))
            .ok_or_else(|| SliceError::NotRawDense("its shape overflows".to_owned()))?;
        // Whole-byte elements: the stored length is the element count
        // times the element's size.
        let elem = match count {
            0 => 1,
            n => match (c.length.checked_rem(n), c.length.checked_div(n)) {
                (Some(0), Some(e)) if e > 0 => e,
                _ => return not("its elements are not whole bytes".to_owned()),
            },
        };
        // Bytes per step of each dimension, row-major.
        let mut strides = Vec::with_capacity(rank);
        let mut step = elem;
        for &len in obj.shape.iter().rev() {
            strides.push(step);
            step = step.saturating_mul(len);
        }
        strides.reverse();
        // Runs span the trailing dimensions taken whole, and the one
        // before them as far as it is taken.
        let whole_tail = ranges
            .iter()
            .zip(&obj.shape)
            .rev()
            .take_while(|(r, &n)| r.start == 0 && r.end == n)
            .count();
        let outer = rank.saturating_sub(whole_tail.saturating_add(1));
        let len = |r: &Range<u64>| r.end.saturating_sub(r.start);
        let run = ranges
            .get(outer)
            .map_or(0, len)
            .saturating_mul(strides.get(outer).copied().unwrap_or(0));
        let pieces = ranges
            .get(..outer)
            .unwrap_or_default()
            .iter()
            .try_fold(1u64, |n, r| n.checked_mul(len(r)))
            .unwrap_or(u64::MAX);
        let pieces = if run == 0 { 0 } else { pieces };
        if pieces > cap {
            return Err(SliceError::TooManyPieces { pieces, cap });
        }
        Ok(Gather {
            shape: ranges.iter().map(len).collect(),
            ranges,
            pieces,
            run,
            strides,
            outer,
        })
    }
}

impl fmt::Display for Slice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if let Some(a) = a {
                write!(f, "{a}")?;
            }
            f.write_str(":")?;
            if let Some(b) = b {
                write!(f, "{b}")?;
            }
        }
        Ok(())
    }
}

impl Gather {
    /// The slice's bytes in all.
    pub fn len(&self) -> u64 {
        self.pieces.saturating_mul(self.run)
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The slice written out whole (`0:4,1:3`), for headers and logs.
    pub fn spec(&self) -> String {
        let parts: Vec<String> = self
            .ranges
            .iter()
            .map(|r| format!("{}:{}", r.start, r.end))
            .collect();
        parts.join(",")
    }

    /// The runs, in order, as offsets into the component and lengths.
    pub fn runs(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        let outer = self.ranges.get(..self.outer).unwrap_or_default();
        let base = self.ranges.get(self.outer).map_or(0, |r| r.start);
        let base = base.saturating_mul(self.strides.get(self.outer).copied().unwrap_or(0));
        let mut index: Vec<u64> = outer.iter().map(|r| r.start).collect();
        let mut left = self.pieces;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            left = left.saturating_sub(1);
            let at = index
                .iter()
                .zip(&self.strides)
                .fold(base, |at, (i, s)| at.saturating_add(i.saturating_mul(*s)));
            // The next index, row-major.
            for (i, r) in index.iter_mut().zip(outer).rev() {
                *i = i.saturating_add(1);
                if *i < r.end {
                    break;
                }
                *i = r.start;
            }
            Some(at..at.saturating_add(self.run))
        })
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::component::Component;
    use crate::{Components, DType, Format};

    fn dense(shape: Vec<u64>, elem: u64) -> Object {
        let n: u64 = shape.iter().product();
        let c = Component::of_file(DType::U8, 64, n * elem);
        let mut components = Components::new();
        components.insert("data".to_owned(), c);
        Object {
            shape,
            format: Format::Dense,
            attributes: Default::default(),
            components,
        }
    }

    /// The byte offsets a slice covers, element by element, as numpy's
    /// indexing would visit them.
    fn naive(shape: &[u64], elem: u64, ranges: &[Range<u64>]) -> Vec<u64> {
        let mut out = Vec::new();
        let total: u64 = shape.iter().product();
        for flat in 0..total {
            let mut rest = flat;
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = rest % shape[d];
                rest /= shape[d];
            }
            if idx.iter().zip(ranges).all(|(i, r)| r.contains(i)) {
                out.extend(flat * elem..(flat + 1) * elem);
            }
        }
        out
    }

    #[test]
    fn every_slice_gathers_what_numpy_would() {
        let shapes: [&[u64]; 4] = [&[7], &[4, 5], &[3, 4, 5], &[2, 3, 2, 4]];
        for shape in shapes {
            for elem in [1, 2, 4] {
                let obj = dense(shape.to_vec(), elem);
                // Every range of every dimension, a few per dimension.
                let options: Vec<Vec<Range<u64>>> = shape
                    .iter()
                    .map(|&n| vec![0..n, 1..n, 0..1, 1..n.clamp(1, 2), 0..0])
                    .collect();
                let mut combo = vec![0usize; shape.len()];
                loop {
                    let ranges: Vec<Range<u64>> = combo
                        .iter()
                        .zip(&options)
                        .map(|(&i, o)| o[i].clone())
                        .collect();
                    let g = Slice::of(&ranges).gather(&obj, u64::MAX).unwrap();
                    let got: Vec<u64> = g.runs().flatten().collect();
                    assert_eq!(got, naive(shape, elem, &ranges), "{shape:?} {ranges:?}");
                    assert_eq!(g.len(), got.len() as u64);
                    let mut d = 0;
                    while d < combo.len() {
                        combo[d] += 1;
                        if combo[d] < options[d].len() {
                            break;
                        }
                        combo[d] = 0;
                        d += 1;
                    }
                    if d == combo.len() {
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn slices_parse_resolve_and_refuse_by_name() {
        let obj = dense(vec![8, 6], 4);
        let g = Slice::parse("2:4").unwrap().gather(&obj, 10).unwrap();
        assert_eq!((g.shape.clone(), g.pieces, g.run), (vec![2, 6], 1, 48));
        let g = Slice::parse(":,1:3").unwrap().gather(&obj, 10).unwrap();
        assert_eq!((g.shape.clone(), g.pieces, g.run), (vec![8, 2], 8, 8));
        assert_eq!(g.spec(), "0:8,1:3");
        for bad in ["", "1", "a:b", "1:2;3:4", "-1:2", "1:2:3"] {
            assert_eq!(
                Slice::parse(bad).unwrap_err().rule(),
                "slice-malformed",
                "{bad}"
            );
        }
        let e = Slice::parse("0:9").unwrap().gather(&obj, 10).unwrap_err();
        assert!(e.to_string().contains("dimension 0: 0:9"), "{e}");
        assert_eq!(e.rule(), "slice-out-of-bounds");
        let e = Slice::parse("3:2").unwrap().gather(&obj, 10).unwrap_err();
        assert_eq!(e.rule(), "slice-out-of-bounds");
        let e = Slice::parse("0:1,0:1,0:1")
            .unwrap()
            .gather(&obj, 10)
            .unwrap_err();
        assert_eq!(e.rule(), "slice-out-of-bounds");
        let e = Slice::parse(":,0:1").unwrap().gather(&obj, 7).unwrap_err();
        assert_eq!(e, SliceError::TooManyPieces { pieces: 8, cap: 7 });
        let g = Slice::parse("3:3").unwrap().gather(&obj, 0).unwrap();
        assert!(g.is_empty() && g.runs().next().is_none());
    }
}
