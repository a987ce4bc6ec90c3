//! Byte-identical copies of a served file (a safetensors or GGUF file
//! written as it is by `output::fetch_to_file`, named after its source):
//! their layout, the bytes between components, and the check of a copy
//! found on disk.

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
