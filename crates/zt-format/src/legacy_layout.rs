//! How a legacy blob becomes a component: the transformation a component
//! read from a v1.0 or v0.1 file carries (`Component::legacy`), applied
//! after the blob's checksum is checked and it is decompressed: combined
//! sparse blobs split into their parts, big-endian elements swapped.

use crate::aligned::AlignedBuf;
use crate::error::Rule;

/// How to turn a legacy blob (after checksum and decompression) into a component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Extract {
    /// Elements are big-endian: swap them after the checksum is checked.
    pub(crate) big_endian: bool,
    /// Element width of a [`Part::Whole`] component.
    pub(crate) width: u64,
    pub(crate) part: Part,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Whole,
    /// From a combined CSR blob with `rows` rows and values of `value_size` bytes.
    Csr {
        role: CsrRole,
        rows: u64,
        value_size: u64,
    },
    /// From a combined COO blob of `ndim`-dimensional records.
    Coo {
        values: bool,
        ndim: u64,
        value_size: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CsrRole {
    Indptr,
    Indices,
    Values,
}

impl Extract {
    /// Applies the transformation to a decoded blob.
    pub(crate) fn apply(&self, blob: &[u8], shape: &[u64]) -> Result<AlignedBuf, Rule> {
        let layout_err = |detail: String| Rule::LegacySparseLayout {
            length: blob.len() as u64,
            shape: shape.to_vec(),
            detail,
        };
        let mut out = match &self.part {
            Part::Whole => AlignedBuf::copy_from(blob)?,
            Part::Csr {
                role,
                rows,
                value_size,
            } => {
                let len = blob.len() as u64;
                let ptr_len = rows
                    .checked_add(1)
                    .and_then(|n| n.checked_mul(8))
                    .ok_or_else(|| layout_err("row count overflows".into()))?;
                let rest = len
                    .checked_sub(ptr_len)
                    .ok_or_else(|| layout_err("shorter than its indptr".into()))?;
                let record = value_size.saturating_add(8);
                if rest.checked_rem(record) != Some(0) {
                    return Err(layout_err(format!(
                        "{rest} bytes after indptr are not whole (u64, value) pairs"
                    )));
                }
                let nnz = rest.checked_div(record).unwrap_or(0);
                let idx_len = nnz.saturating_mul(8);
                let (start, n) = match role {
                    CsrRole::Indptr => (0, ptr_len),
                    CsrRole::Indices => (ptr_len, idx_len),
                    CsrRole::Values => (
                        ptr_len.saturating_add(idx_len),
                        rest.saturating_sub(idx_len),
                    ),
                };
                let bytes = slice(blob, start, n).ok_or_else(|| layout_err("range".into()))?;
                AlignedBuf::copy_from(bytes)?
            }
            Part::Coo {
                values,
                ndim,
                value_size,
            } => {
                let record = ndim
                    .checked_mul(8)
                    .and_then(|n| n.checked_add(*value_size))
                    .filter(|&r| r > 0)
                    .ok_or_else(|| layout_err("record size overflows".into()))?;
                let len = blob.len() as u64;
                if len.checked_rem(record) != Some(0) {
                    return Err(layout_err(format!("not whole {record}-byte records")));
                }
                let nnz = len.checked_div(record).unwrap_or(0);
                let rec = usize::try_from(record).map_err(|_| layout_err("record".into()))?;
                let idx = usize::try_from(ndim.saturating_mul(8))
                    .map_err(|_| layout_err("ndim".into()))?;
                let out_len = if *values {
                    nnz.saturating_mul(*value_size)
                } else {
                    nnz.saturating_mul(*ndim).saturating_mul(8)
                };
                let mut out = AlignedBuf::zeroed(out_len)?;
                let dst = out.as_mut_slice();
                let nnz_usize = usize::try_from(nnz).map_err(|_| layout_err("nnz".into()))?;
                for (i, record) in blob.chunks_exact(rec).enumerate() {
                    if *values {
                        let (_, v) = record.split_at(idx);
                        let at = i.saturating_mul(v.len());
                        if let Some(d) = dst.get_mut(at..at.saturating_add(v.len())) {
                            d.copy_from_slice(v);
                        }
                    } else {
                        // Structure of arrays: all of dimension 0, then dimension 1, ...
                        for (d, index) in record
                            .get(..idx)
                            .unwrap_or_default()
                            .chunks_exact(8)
                            .enumerate()
                        {
                            let at = d
                                .saturating_mul(nnz_usize)
                                .saturating_add(i)
                                .saturating_mul(8);
                            if let Some(t) = dst.get_mut(at..at.saturating_add(8)) {
                                t.copy_from_slice(index);
                            }
                        }
                    }
                }
                out
            }
        };
        if self.big_endian {
            // Index parts are u64 whatever the value size.
            let width = match &self.part {
                Part::Whole => self.width,
                Part::Csr {
                    role: CsrRole::Values,
                    value_size,
                    ..
                }
                | Part::Coo {
                    values: true,
                    value_size,
                    ..
                } => *value_size,
                _ => 8,
            };
            swap_in_place(out.as_mut_slice(), width);
        }
        Ok(out)
    }
}

/// Reverses the bytes of each `width`-byte element.
pub(crate) fn swap_in_place(data: &mut [u8], width: u64) {
    if let Ok(w @ 2..) = usize::try_from(width) {
        for chunk in data.chunks_exact_mut(w) {
            chunk.reverse();
        }
    }
}

fn slice(b: &[u8], start: u64, len: u64) -> Option<&[u8]> {
    let s = usize::try_from(start).ok()?;
    let e = s.checked_add(usize::try_from(len).ok()?)?;
    b.get(s..e)
}
