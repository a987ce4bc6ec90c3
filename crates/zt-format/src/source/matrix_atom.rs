//! MATRIX-ATOM files (seed 002; [`crate::atoms`]) as a source: the
//! 64-byte header (one read), then the document index when flag bit 1
//! says one follows the payload (a second read). An SVG-Tensor file
//! (`SVGTENSR`) is read in the same first read: a `grids` object of shape
//! `[atom_count, rows, cols]`, `u16`.
//!
//! The manifest holds an `atoms` object, dense, of shape
//! `[atom_count, atom_size]` and dtype `u16` or `u32`, whose `data` is the
//! payload; a `documents` object (`u64`, `[doc_count, 3]`: first atom,
//! atoms, real tokens) when the file has an index; and the header's fields
//! as the file's attributes (`matrix_atom.*`). Reading atoms `i..j` is a
//! row range of `atoms`. The payload's own CRC is checked wherever the
//! payload is read whole (the daemon's hashing, `zt ingest verify`).

use std::ops::Range;

use crate::atoms::svg_tensor::{self, SvgHeader};
use crate::atoms::{self, AtomDtype, AtomHeader, FLAG_INDEX, FLAG_SVG_TENSOR, HEADER_LEN};
use crate::component::Component;
use crate::components::Components;
use crate::container::{ManifestLocation, Parsed};
use crate::dtype::DType;
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{Attributes, CborValue, Format, Manifest, Object, Origin, Source};
use crate::options::Limits;
use crate::validate::{self, BlobArea};

use super::Loaded;

#[derive(Debug)]
pub(super) struct Plan {
    size: u64,
    header: Option<AtomHeader>,
    /// An SVG-Tensor file's header, instead of an atom file's.
    svg: Option<SvgHeader>,
    raw: Vec<u8>,
    index: Option<Vec<u8>>,
}

fn invalid(label: &str, rule: &'static str, detail: String) -> Error {
    Error::invalid(Location::file(label), Rule::Header { rule, detail })
}

impl Plan {
    pub(super) fn new(size: u64) -> Plan {
        Plan {
            size,
            header: None,
            svg: None,
            raw: Vec::new(),
            index: None,
        }
    }

    /// Where the index lies: after the payload, to the end of the file.
    fn index_range(&self, h: &AtomHeader) -> Range<u64> {
        let start = h
            .data_offset
            .saturating_add(h.payload_len().unwrap_or(u64::MAX));
        start.min(self.size)..self.size
    }

    pub(super) fn next_read(&self) -> Option<Range<u64>> {
        if self.svg.is_some() {
            return None;
        }
        match (&self.header, &self.index) {
            (None, _) => Some(0..self.size.min(HEADER_LEN as u64)),
            (Some(h), None) if h.flags & FLAG_INDEX != 0 => Some(self.index_range(h)),
            _ => None,
        }
    }

    pub(super) fn feed(&mut self, bytes: &[u8], label: &str, limits: &Limits) -> Result<()> {
        match &self.header {
            None if bytes.starts_with(svg_tensor::MAGIC) => {
                let h = SvgHeader::parse(bytes, self.size)
                    .map_err(|r| invalid(label, r.name(), r.to_string()))?;
                self.raw = bytes
                    .get(..svg_tensor::HEADER_LEN)
                    .unwrap_or(bytes)
                    .to_vec();
                self.svg = Some(h);
            }
            None => {
                let h = AtomHeader::parse(bytes, self.size)
                    .map_err(|r| invalid(label, r.name(), r.to_string()))?;
                self.raw = bytes.to_vec();
                self.header = Some(h);
            }
            Some(_) => {
                if bytes.len() as u64 > limits.manifest_cap {
                    return Err(invalid(
                        label,
                        "index-size",
                        format!(
                            "a document index of {} bytes is over the cap of {} [index-size]",
                            bytes.len(),
                            limits.manifest_cap
                        ),
                    ));
                }
                self.index = Some(bytes.to_vec());
            }
        }
        Ok(())
    }

    pub(super) fn finish(self, label: &str) -> Result<Loaded> {
        if let Some(s) = self.svg {
            return svg_manifest(label, &s, self.raw, self.size);
        }
        let Some(h) = self.header.clone() else {
            return Err(super::incomplete(label));
        };
        let at = Location::file(label);
        let mut manifest = Manifest {
            source: Source::MatrixAtom,
            origin: Origin::V1,
            ..Manifest::new()
        };
        manifest.attributes = attributes(&h);
        let dtype = match h.dtype {
            AtomDtype::U16 => DType::U16,
            AtomDtype::U32 => DType::U32,
        };
        let payload = h.payload_len().unwrap_or(0);
        manifest.objects.insert(
            "atoms".to_owned(),
            object(
                vec![h.atom_count, u64::from(h.atom_size)],
                Component::raw(dtype, None, h.data_offset, payload),
            ),
        );
        let index_start = self.index_range(&h).start;
        let mut raw = self.raw;
        if let Some(index) = &self.index {
            let docs = atoms::index::parse(index, h.atom_count, h.atom_size)
                .map_err(|r| invalid(label, r.name(), r.to_string()))?;
            let start = index_start;
            let len = (docs.len() as u64).saturating_mul(24);
            manifest.objects.insert(
                "documents".to_owned(),
                object(
                    vec![docs.len() as u64, 3],
                    Component::raw(DType::U64, None, start.saturating_add(16), len),
                ),
            );
            raw.extend_from_slice(index);
        }
        let blob_area = BlobArea {
            start: h.data_offset,
            end: self.size,
        };
        let mut warnings = Vec::new();
        validate::manifest(&manifest, blob_area, &at, &mut warnings)?;
        Ok(Loaded {
            parsed: Parsed {
                manifest,
                location: ManifestLocation::header(0, HEADER_LEN as u64, self.size),
                blob_area,
                warnings,
                synthesized: Default::default(),
            },
            raw,
        })
    }
}

/// An SVG-Tensor file: a `grids` object, `[atom_count, rows, cols]` of
/// `u16`, and the header's fields as attributes (`svg_tensor.*`).
fn svg_manifest(label: &str, s: &SvgHeader, raw: Vec<u8>, size: u64) -> Result<Loaded> {
    let at = Location::file(label);
    let mut manifest = Manifest {
        source: Source::MatrixAtom,
        origin: Origin::V1,
        ..Manifest::new()
    };
    let int = |v: u64| CborValue::Integer(v.into());
    for (k, v) in [
        ("svg_tensor.version", int(1)),
        ("svg_tensor.rows", int(u64::from(s.rows))),
        ("svg_tensor.cols", int(u64::from(s.cols))),
        ("svg_tensor.atom_count", int(s.atom_count)),
    ] {
        manifest.attributes.insert(k.to_owned(), v);
    }
    manifest.objects.insert(
        "grids".to_owned(),
        object(
            vec![s.atom_count, u64::from(s.rows), u64::from(s.cols)],
            Component::raw(
                DType::U16,
                None,
                s.data_offset,
                s.payload_len().unwrap_or(0),
            ),
        ),
    );
    let blob_area = BlobArea {
        start: s.data_offset,
        end: size,
    };
    let mut warnings = Vec::new();
    validate::manifest(&manifest, blob_area, &at, &mut warnings)?;
    Ok(Loaded {
        parsed: Parsed {
            manifest,
            location: ManifestLocation::header(0, svg_tensor::HEADER_LEN as u64, size),
            blob_area,
            warnings,
            synthesized: Default::default(),
        },
        raw,
    })
}

fn object(shape: Vec<u64>, data: Component) -> Object {
    let mut components = Components::new();
    components.insert("data".to_owned(), data);
    Object {
        shape,
        format: Format::Dense,
        attributes: Attributes::new(),
        components,
    }
}

/// The header's fields as the file's attributes.
fn attributes(h: &AtomHeader) -> Attributes {
    let int = |v: u64| CborValue::Integer(v.into());
    let mut a = Attributes::new();
    let fields = [
        ("matrix_atom.version", int(1)),
        (
            "matrix_atom.dtype",
            CborValue::Text(h.dtype.name().to_owned()),
        ),
        ("matrix_atom.vocab_size", int(u64::from(h.vocab_size))),
        ("matrix_atom.atom_size", int(u64::from(h.atom_size))),
        ("matrix_atom.atom_count", int(h.atom_count)),
        ("matrix_atom.token_count", int(h.token_count)),
        ("matrix_atom.flags", int(u64::from(h.flags))),
        (
            "matrix_atom.svg_tensor",
            CborValue::Bool(h.flags & FLAG_SVG_TENSOR != 0),
        ),
        (
            "matrix_atom.index",
            CborValue::Bool(h.flags & FLAG_INDEX != 0),
        ),
        ("matrix_atom.header_crc32", int(u64::from(h.header_crc32))),
        ("matrix_atom.payload_crc32", int(u64::from(h.payload_crc32))),
    ];
    for (k, v) in fields {
        a.insert(k.to_owned(), v);
    }
    a
}

/// The atom file's header as its manifest's attributes give it (what a
/// client that fetched only the manifest knows of it), for an atom file
/// or an ingest pack; `None` for any other manifest.
pub fn header_of(m: &Manifest) -> Option<AtomHeader> {
    if !matches!(m.source, Source::MatrixAtom | Source::MatrixAtomPack) {
        return None;
    }
    let int = |k: &str| match m.attributes.get(k)? {
        CborValue::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    let dtype = match m.attributes.get("matrix_atom.dtype")? {
        CborValue::Text(t) if t == "uint16" => AtomDtype::U16,
        CborValue::Text(t) if t == "uint32" => AtomDtype::U32,
        _ => return None,
    };
    Some(AtomHeader {
        dtype,
        flags: u8::try_from(int("matrix_atom.flags")?).ok()?,
        vocab_size: u32::try_from(int("matrix_atom.vocab_size")?).ok()?,
        atom_size: u32::try_from(int("matrix_atom.atom_size")?).ok()?,
        atom_count: int("matrix_atom.atom_count")?,
        token_count: int("matrix_atom.token_count")?,
        data_offset: HEADER_LEN as u64,
        header_crc32: u32::try_from(int("matrix_atom.header_crc32")?).ok()?,
        payload_crc32: u32::try_from(int("matrix_atom.payload_crc32")?).ok()?,
    })
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use crate::atoms::pack::{PackOptions, Packer};
    use crate::atoms::AtomDtype;
    use crate::{Limits, Source};

    #[test]
    fn atoms_and_documents_are_objects_of_the_manifest() {
        let mut p = Packer::new(PackOptions {
            atom_size: 3,
            dtype: AtomDtype::U16,
            vocab_size: 50,
            pad_id: 0,
            index: true,
            svg_tensor: false,
        })
        .unwrap();
        p.push(&[1, 2, 3, 4]).unwrap();
        p.push(&[5]).unwrap();
        let packed = p.finish();
        let loaded = super::super::parse(
            Source::MatrixAtom,
            "t.bin",
            &packed.bytes,
            &Limits::default(),
        )
        .unwrap();
        let m = &loaded.parsed.manifest;
        let atoms = &m.objects["atoms"];
        assert_eq!(atoms.shape, [3, 3]);
        let c = &atoms.components["data"];
        assert_eq!((c.offset, c.length), (64, 18));
        let docs = &m.objects["documents"].components["data"];
        assert_eq!(docs.offset, 64 + 18 + 16);
        let rows: Vec<u64> = packed.bytes[docs.offset as usize..][..docs.length as usize]
            .chunks(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(rows, [0, 2, 4, 2, 1, 1]);
        // A damaged header is refused by its rule.
        let mut bad = packed.bytes.clone();
        bad[0x14] = 9;
        let e =
            super::super::parse(Source::MatrixAtom, "t.bin", &bad, &Limits::default()).unwrap_err();
        assert!(e.to_string().contains("atom-header-crc"), "{e}");
        assert_eq!(super::header_of(m), Some(packed.header));
    }
}
