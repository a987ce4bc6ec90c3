//! Byte-identical copies of a served file (a safetensors or GGUF file
//! written as it is by `output::fetch_to_file`, named after its source):
//! their layout, the bytes between components, and the check of a copy
//! found on disk.

use std::ops::Range;
use std::path::Path;

use zt_format::{Manifest, Source};

use crate::error::{Error, Result};

/// A copy's layout: every component in place, the synthesized ones (no
/// byte range of the file; their bytes are in the header) left out.
pub(crate) fn in_place(m: &Manifest) -> Manifest {
    let mut out = m.clone();
    out.objects
        .retain(|_, o| o.components.values().all(|c| !c.synthesized));
    out
}

/// The byte ranges of `0..size` no component of `m` covers.
pub(crate) fn gaps(m: &Manifest, size: u64) -> Vec<std::ops::Range<u64>> {
    let mut spans: Vec<(u64, u64)> = m
        .components()
        .map(|(_, _, c)| (c.offset, c.offset.saturating_add(c.length)))
        .collect();
    spans.sort_unstable();
    let mut out = Vec::new();
    let mut pos = 0;
    for (s, e) in spans {
        if s > pos {
            out.push(pos..s);
        }
        pos = pos.max(e);
    }
    if pos < size {
        out.push(pos..size);
    }
    out
}

/// Bytes of components a read of the gaps may also carry, at most, to
/// join two gaps into one read: a GGUF file's tensors are padded to
/// their alignment, so a file of thousands of small tensors has
/// thousands of gaps, each a request of its own otherwise. Only
/// components this small are read twice (their verified bytes are
/// written; these are not), so a copy moves at most twice the bytes of
/// its smallest tensors more, and holds no more in memory.
pub(crate) const JOIN_ACROSS: u64 = 4 << 10;

/// The reads that fetch `gaps` (sorted, apart): each a range of the file
/// and the gaps within it, consecutive gaps joined when at most
/// [`JOIN_ACROSS`] bytes lie between them.
pub(crate) fn reads(gaps: &[Range<u64>]) -> Vec<(Range<u64>, &[Range<u64>])> {
    let mut out: Vec<(Range<u64>, &[Range<u64>])> = Vec::new();
    let mut first = 0;
    for (i, g) in gaps.iter().enumerate() {
        let Some(prev) = i.checked_sub(1).and_then(|p| gaps.get(p)) else {
            continue;
        };
        if g.start.saturating_sub(prev.end) > JOIN_ACROSS {
            push_read(&mut out, gaps, first..i);
            first = i;
        }
    }
    push_read(&mut out, gaps, first..gaps.len());
    out
}

fn push_read<'a>(
    out: &mut Vec<(Range<u64>, &'a [Range<u64>])>,
    gaps: &'a [Range<u64>],
    at: Range<usize>,
) {
    let Some(within) = gaps.get(at) else {
        return;
    };
    if let (Some(a), Some(b)) = (within.first(), within.last()) {
        out.push((a.start..b.end, within));
    }
}

/// Reads the copy's header back (blocking) and checks it describes every
/// component where the manifest does; `url`, the copy's source, names it
/// in the errors.
pub(crate) fn check_copy(
    part: &Path,
    source: Source,
    local: &Manifest,
    manifest_cap: u64,
    url: &str,
) -> Result<()> {
    let options = zt_format::ReadOptions {
        limits: zt_format::Limits {
            manifest_cap,
            ..zt_format::Limits::default()
        },
        // Only where the header places each component is compared here;
        // the components were verified as they arrived.
        verify: zt_format::Verify::Skip,
    };
    let copy = zt_format::ZtFile::open_as(part, source, options)?;
    let got = copy.manifest();
    for (o, r, want) in local.components() {
        let have = got.component(o, r);
        let same = have.is_some_and(|h| {
            (h.offset, h.length, h.dtype, &h.logical_type)
                == (want.offset, want.length, want.dtype, &want.logical_type)
        });
        if !same {
            return Err(Error::Protocol(format!(
                "{}: the header received does not place object {o:?}, component {r:?} where the manifest does",
                url
            )));
        }
    }
    let extra = got
        .objects
        .iter()
        .filter(|(n, obj)| {
            obj.components.values().all(|c| !c.synthesized) && !local.objects.contains_key(n)
        })
        .map(|(n, _)| n)
        .next();
    if let Some(n) = extra {
        return Err(Error::Protocol(format!(
            "{}: the header received holds object {n:?}, which the manifest does not",
            url
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_close_together_are_read_together() {
        let gaps = [0..100, 132..140, 4236..4240, 9000..9010, 9020..9021];
        let reads = reads(&gaps);
        let spans: Vec<_> = reads.iter().map(|(s, _)| s.clone()).collect();
        // 4,096 bytes between the second and third gap join them; 4,760
        // between the third and fourth do not.
        assert_eq!(spans, [0..4240, 9000..9021]);
        assert_eq!(reads[0].1, &gaps[..3]);
        assert_eq!(reads[1].1, &gaps[3..]);
        assert!(super::reads(&[]).is_empty());
        let one = [5..6, 9000..9001];
        assert_eq!(super::reads(&one[..1])[0].0, 5..6);
    }
}
