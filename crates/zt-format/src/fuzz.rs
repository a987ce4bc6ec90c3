//! The bodies of the `read_file` (with the manifest also read in pieces),
//! `read_safetensors`, `read_gguf` and `read_atoms` fuzz targets, shared
//! with the corpus replay test.

use crate::{Limits, ReadOptions, Verify, ZtFile};

/// Opens `data` as a `.zt` file and reads everything in it, under small
/// caps. Any panic, or an allocation past the caps, is a bug.
#[doc(hidden)]
pub fn read_everything(data: &[u8]) {
    read_everything_as("fuzz.zt", data);
    manifest_in_pieces(data);
}

/// The manifest of `data` as a v1 `.zt` file (where its footer says it
/// is, else `data` itself) decoded serially and in pieces on several
/// threads: the two must agree.
#[doc(hidden)]
pub fn manifest_in_pieces(data: &[u8]) {
    let footer = data
        .len()
        .checked_sub(crate::container::FOOTER_LEN as usize);
    let manifest = footer
        .and_then(|f| {
            let (len, magic) = data.get(f..)?.split_at_checked(8)?;
            let len = usize::try_from(u64::from_le_bytes(len.try_into().ok()?)).ok()?;
            (magic == crate::container::MAGIC).then(|| data.get(f.checked_sub(len)?..f))?
        })
        .unwrap_or(data);
    crate::parse_v1::check_against_serial(manifest);
}

/// The same for `data` as a safetensors file, read through its source's
/// read plan.
#[doc(hidden)]
pub fn read_safetensors(data: &[u8]) {
    read_everything_as("fuzz.safetensors", data);
}

/// The same for `data` as a GGUF file.
#[doc(hidden)]
pub fn read_gguf(data: &[u8]) {
    read_everything_as("fuzz.gguf", data);
}

/// `data` as a MATRIX-ATOM file (read through its source and whole: the
/// header, the payload's CRC and ids, the document index) and as an
/// SVG-Tensor file checked against it.
#[doc(hidden)]
pub fn read_atoms(data: &[u8]) {
    use crate::atoms::{index, svg_tensor::SvgHeader, AtomHeader, FLAG_INDEX};
    read_everything_as("fuzz.atoms", data);
    let size = data.len() as u64;
    if let Ok(h) = AtomHeader::parse(data, size) {
        let start = usize::try_from(h.data_offset).unwrap_or(usize::MAX);
        let len = usize::try_from(h.payload_len().unwrap_or(0)).unwrap_or(usize::MAX);
        if let Some(payload) = data.get(start..).and_then(|p| p.get(..len)) {
            let _ = h.check_payload(payload);
            if h.flags & FLAG_INDEX != 0 {
                let rest = data.get(start.saturating_add(len)..).unwrap_or(&[]);
                let _ = index::parse(rest, h.atom_count, h.atom_size);
            }
        }
        if let Ok(s) = SvgHeader::parse(data, size) {
            let _ = s.check_against(&h);
        }
    }
    if let Ok(s) = SvgHeader::parse(data, size) {
        let _ = s.payload_len();
    }
}

/// A small valid GGUF file (three tensors, metadata, a long string array
/// and a long number array): a fuzz seed and a test fixture.
#[doc(hidden)]
pub fn gguf_sample() -> Vec<u8> {
    crate::source::gguf::sample::sample()
}

/// A GGUF file of `n` i8 tensors of `len` elements each, padded to the
/// default alignment: a test fixture with a gap after every tensor.
#[doc(hidden)]
pub fn gguf_of_small_tensors(n: usize, len: usize) -> Vec<u8> {
    crate::source::gguf::sample::of_small_tensors(n, len)
}

/// Opens `data` as the file `label` names (its extension picks the
/// source) and reads everything in it.
fn read_everything_as(label: &str, data: &[u8]) {
    for verify in [Verify::Digests, Verify::Skip] {
        let options = ReadOptions {
            limits: Limits {
                manifest_cap: 1 << 20,
                decompress_cap: 1 << 20,
                ..Limits::default()
            },
            verify,
        };
        let Ok(file) = ZtFile::from_bytes(label, data, options) else {
            return;
        };
        let _ = file.verify();
        let names: Vec<(String, String)> = file
            .manifest()
            .components()
            .map(|(o, c, _)| (o.to_owned(), c.to_owned()))
            .collect();
        for (o, c) in names {
            if let Ok(t) = file.component_tensor(&o, &c) {
                let _ = t.as_bools();
                let _ = t.as_slice::<f32>();
            }
        }
        let _ = crate::manifest_cbor(file.manifest());
    }
}
