//! GGUF (v2 and v3, little-endian): the magic `GGUF`, a version, the
//! tensor and metadata counts, the metadata key/values, the tensor infos,
//! padding to `general.alignment` (32 by default), then the tensors' data.
//!
//! - Tensors become objects, their dimensions reversed (GGUF lists them
//!   innermost first): F32, F16, BF16, F64 and the integer types as dense
//!   objects; block-quantized types as `gguf_block` objects (`u8` data of
//!   elements ÷ block size × type size bytes, `type` the ggml name in lower
//!   case); a type id we do not know as an `opaque` object running to the
//!   next tensor.
//! - Metadata key/values become file attributes, except arrays of more
//!   than [`INLINE_ARRAY`] elements, which become objects named `@KEY`
//!   (numbers: dense objects over the array's bytes in the file; strings:
//!   `ragged` `u8` objects whose `offsets` and `values` the server
//!   synthesizes, since GGUF stores each string with its length inline).
//!
//! The header has no length field, so the read plan reads a prefix and
//! doubles it until the header parses, within the manifest cap.

use std::ops::Range;

use crate::component::Component;
use crate::components::Components;
use crate::container::{ManifestLocation, Parsed, Synthesized};
use crate::dtype::{DType, LogicalType};
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{element_count, Attributes, CborValue, Format, Manifest, Object, Source};
use crate::options::Limits;
use crate::validate::{self, BlobArea};

use super::Loaded;

/// Arrays longer than this become objects of their own.
pub const INLINE_ARRAY: u64 = 16;

/// The first read; most headers of models (not vocabularies) fit.
const FIRST_READ: u64 = 1 << 20;

/// Prefix of the objects made from metadata arrays (`@tokenizer.ggml.tokens`).
pub const METADATA_PREFIX: &str = "@";

/// A ggml tensor type: id, lower-case name, elements per block, bytes per block.
type GgmlType = (u32, &'static str, u64, u64);

/// The ggml types, as llama.cpp's `gguf` package (0.19.0) lists them.
const GGML_TYPES: [GgmlType; 34] = [
    (0, "f32", 1, 4),
    (1, "f16", 1, 2),
    (2, "q4_0", 32, 18),
    (3, "q4_1", 32, 20),
    (6, "q5_0", 32, 22),
    (7, "q5_1", 32, 24),
    (8, "q8_0", 32, 34),
    (9, "q8_1", 32, 40),
    (10, "q2_k", 256, 84),
    (11, "q3_k", 256, 110),
    (12, "q4_k", 256, 144),
    (13, "q5_k", 256, 176),
    (14, "q6_k", 256, 210),
    (15, "q8_k", 256, 292),
    (16, "iq2_xxs", 256, 66),
    (17, "iq2_xs", 256, 74),
    (18, "iq3_xxs", 256, 98),
    (19, "iq1_s", 256, 50),
    (20, "iq4_nl", 32, 18),
    (21, "iq3_s", 256, 110),
    (22, "iq2_s", 256, 82),
    (23, "iq4_xs", 256, 136),
    (24, "i8", 1, 1),
    (25, "i16", 1, 2),
    (26, "i32", 1, 4),
    (27, "i64", 1, 8),
    (28, "f64", 1, 8),
    (29, "iq1_m", 256, 56),
    (30, "bf16", 1, 2),
    (34, "tq1_0", 256, 54),
    (35, "tq2_0", 256, 66),
    (39, "mxfp4", 32, 17),
    (40, "nvfp4", 64, 36),
    (41, "q1_0", 128, 18),
];

/// The dense dtype of a plain ggml type.
fn dense_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        "f64" => DType::F64,
        "i8" => DType::I8,
        "i16" => DType::I16,
        "i32" => DType::I32,
        "i64" => DType::I64,
        _ => return None,
    })
}

#[derive(Debug)]
pub(super) struct Plan {
    size: u64,
    have: Vec<u8>,
    /// How many bytes of the file the next read should end at.
    want: u64,
    done: Option<Result<Parsed>>,
}

impl Plan {
    pub(super) fn new(size: u64) -> Plan {
        Plan {
            size,
            have: Vec::new(),
            want: size.min(FIRST_READ),
            done: None,
        }
    }

    pub(super) fn next_read(&self) -> Option<Range<u64>> {
        let have = self.have.len() as u64;
        (self.done.is_none() && (have < self.want || have == 0)).then_some(have..self.want)
    }

    pub(super) fn feed(&mut self, bytes: &[u8], label: &str, limits: &Limits) -> Result<()> {
        self.have.extend_from_slice(bytes);
        match parse_header(label, &self.have, self.size, limits) {
            Err(Short) if (self.have.len() as u64) < self.size => {
                let next = self.want.saturating_mul(2).min(self.size);
                if next > limits.manifest_cap {
                    return Err(header_error(
                        Location::file(label),
                        "header-over-cap",
                        format!(
                            "the header runs past {} bytes, the cap",
                            limits.manifest_cap
                        ),
                    ));
                }
                self.want = next;
                Ok(())
            }
            Err(Short) => Err(header_error(
                Location::file(label),
                "truncated",
                format!(
                    "the header runs past the end of the {}-byte file",
                    self.size
                ),
            )),
            Ok(done) => {
                done.as_ref().map_err(clone_error)?;
                self.done = Some(done);
                Ok(())
            }
        }
    }

    pub(super) fn finish(self, label: &str) -> Result<Loaded> {
        let parsed = self.done.unwrap_or_else(|| Err(super::incomplete(label)))?;
        let end = usize::try_from(parsed.location.length).unwrap_or(usize::MAX);
        let raw = self.have.get(..end).unwrap_or(&self.have).to_vec();
        Ok(Loaded { parsed, raw })
    }
}

/// `Error` is not `Clone`: the plan keeps the first and reports a copy.
fn clone_error(e: &Error) -> Error {
    match e {
        Error::Invalid { at, rule } => Error::invalid(at.clone(), rule.clone()),
        Error::Io {
            at,
            context,
            source,
        } => Error::io(
            at.clone(),
            context,
            std::io::Error::new(source.kind(), source.to_string()),
        ),
    }
}

fn header_error(at: Location, rule: &'static str, detail: String) -> Error {
    Error::invalid(at, Rule::Header { rule, detail })
}

/// The header needs more bytes than were read.
#[derive(Debug)]
struct Short;

/// A little-endian cursor over the bytes read so far.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64) -> std::result::Result<&'a [u8], Short> {
        let n = usize::try_from(n).map_err(|_| Short)?;
        let end = self.pos.checked_add(n).ok_or(Short)?;
        let s = self.buf.get(self.pos..end).ok_or(Short)?;
        self.pos = end;
        Ok(s)
    }

    fn fixed<const N: usize>(&mut self) -> std::result::Result<[u8; N], Short> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N as u64)?);
        Ok(a)
    }

    fn u32(&mut self) -> std::result::Result<u32, Short> {
        self.fixed::<4>().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> std::result::Result<u64, Short> {
        self.fixed::<8>().map(u64::from_le_bytes)
    }

    fn string(&mut self) -> std::result::Result<&'a [u8], Short> {
        let n = self.u64()?;
        self.take(n)
    }
}

/// A header that parsed, or broke a rule; `Err(Short)` when more bytes are needed.
type Step = std::result::Result<Result<Parsed>, Short>;

/// What went wrong in the header, before we know whether it is short.
enum Fault {
    Short,
    Rule(Error),
}

impl From<Short> for Fault {
    fn from(_: Short) -> Self {
        Fault::Short
    }
}

/// The byte width of a scalar metadata value type, `None` for strings
/// and arrays.
fn scalar_size(t: u32) -> Option<u64> {
    Some(match t {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        10..=12 => 8,
        _ => return None,
    })
}

/// The dense dtype a numeric metadata array is served as.
fn scalar_dtype(t: u32) -> Option<DType> {
    Some(match t {
        0 => DType::U8,
        1 => DType::I8,
        2 => DType::U16,
        3 => DType::I16,
        4 => DType::U32,
        5 => DType::I32,
        6 => DType::F32,
        7 => DType::Bool,
        10 => DType::U64,
        11 => DType::I64,
        12 => DType::F64,
        _ => return None,
    })
}

fn scalar_value(t: u32, b: &[u8]) -> CborValue {
    let mut a = [0u8; 8];
    if let Some(d) = a.get_mut(..b.len()) {
        d.copy_from_slice(b);
    }
    let u = u64::from_le_bytes(a);
    #[allow(clippy::cast_possible_truncation)]
    match t {
        0 | 2 | 4 | 10 => CborValue::Integer(u.into()),
        1 => CborValue::Integer(i64::from(u as u8 as i8).into()),
        3 => CborValue::Integer(i64::from(u as u16 as i16).into()),
        5 => CborValue::Integer(i64::from(u as u32 as i32).into()),
        11 => CborValue::Integer((u as i64).into()),
        6 => CborValue::Float(f64::from(f32::from_bits(u as u32))),
        12 => CborValue::Float(f64::from_bits(u)),
        7 => CborValue::Bool(u != 0),
        _ => CborValue::Null,
    }
}

fn text(b: &[u8], at: &Location, what: &str) -> std::result::Result<String, Fault> {
    String::from_utf8(b.to_vec()).map_err(|_| {
        Fault::Rule(header_error(
            at.clone(),
            "utf8",
            format!("{what} is not UTF-8"),
        ))
    })
}

fn one(role: &str, c: Component) -> Components {
    let mut cs = Components::new();
    cs.insert(role.to_owned(), c);
    cs
}

/// One metadata value: an attribute, or (long arrays) an object.
#[allow(clippy::too_many_arguments)]
fn value(
    c: &mut Cursor<'_>,
    t: u32,
    key: &str,
    at: &Location,
    attributes: &mut Attributes,
    objects: &mut Vec<(String, Object)>,
    synthesized: &mut Synthesized,
) -> std::result::Result<(), Fault> {
    let bad = |detail: String| Fault::Rule(header_error(at.object(key), "value-type", detail));
    if let Some(n) = scalar_size(t) {
        let b = c.take(n)?;
        attributes.insert(key.to_owned(), scalar_value(t, b));
        return Ok(());
    }
    match t {
        8 => {
            let s = c.string()?;
            attributes.insert(key.to_owned(), CborValue::Text(text(s, at, key)?));
            Ok(())
        }
        9 => {
            let et = c.u32()?;
            let count = c.u64()?;
            let start = c.pos as u64;
            if et == 8 {
                let mut items = Vec::new();
                let mut offsets = vec![0u64];
                let mut values = Vec::new();
                for _ in 0..count {
                    let s = c.string()?;
                    if count <= INLINE_ARRAY {
                        items.push(CborValue::Text(text(s, at, key)?));
                    } else {
                        values.extend_from_slice(s);
                        offsets.push(values.len() as u64);
                    }
                }
                if count <= INLINE_ARRAY {
                    attributes.insert(key.to_owned(), CborValue::Array(items));
                } else {
                    let name = format!("{METADATA_PREFIX}{key}");
                    let offsets: Vec<u8> = offsets.iter().flat_map(|o| o.to_le_bytes()).collect();
                    let mut comps = Components::new();
                    for (role, dtype, bytes) in [
                        ("offsets", DType::U64, offsets),
                        ("values", DType::U8, values),
                    ] {
                        let mut comp = Component::raw(dtype, None, 0, bytes.len() as u64);
                        comp.synthesized = true;
                        comps.insert(role.to_owned(), comp);
                        synthesized.insert((name.clone(), role.to_owned()), bytes);
                    }
                    let mut a = Attributes::new();
                    a.insert("gguf_key".to_owned(), CborValue::Text(key.to_owned()));
                    a.insert("gguf_type".to_owned(), CborValue::Text("string".to_owned()));
                    objects.push((
                        name,
                        Object {
                            shape: vec![count],
                            format: Format::Ragged,
                            attributes: a,
                            components: comps,
                        },
                    ));
                }
                return Ok(());
            }
            let Some(size) = scalar_size(et) else {
                return Err(bad(format!("array of value type {et}, which GGUF arrays of arrays or unknown types are not read")));
            };
            let len = count.checked_mul(size).ok_or(Short)?;
            let bytes = c.take(len)?;
            if count <= INLINE_ARRAY {
                let items = bytes
                    .chunks(usize::try_from(size).unwrap_or(1))
                    .map(|b| scalar_value(et, b))
                    .collect();
                attributes.insert(key.to_owned(), CborValue::Array(items));
            } else if let Some(dtype) = scalar_dtype(et) {
                let name = format!("{METADATA_PREFIX}{key}");
                let mut a = Attributes::new();
                a.insert("gguf_key".to_owned(), CborValue::Text(key.to_owned()));
                objects.push((
                    name,
                    Object {
                        shape: vec![count],
                        format: Format::Dense,
                        attributes: a,
                        components: one("data", Component::raw(dtype, None, start, len)),
                    },
                ));
            }
            Ok(())
        }
        other => Err(bad(format!("unknown value type {other}"))),
    }
}

/// Parses the header in `buf` (a prefix of a `size`-byte file).
fn parse_header(label: &str, buf: &[u8], size: u64, limits: &Limits) -> Step {
    match parse_inner(label, buf, size, limits) {
        Ok(p) => Ok(Ok(p)),
        Err(Fault::Short) => Err(Short),
        Err(Fault::Rule(e)) => Ok(Err(e)),
    }
}

fn parse_inner(
    label: &str,
    buf: &[u8],
    size: u64,
    limits: &Limits,
) -> std::result::Result<Parsed, Fault> {
    let at = Location::file(label);
    let fail = |rule, detail| Fault::Rule(header_error(at.clone(), rule, detail));
    let mut c = Cursor { buf, pos: 0 };
    let magic = c.take(4)?;
    if magic != b"GGUF" {
        return Err(Fault::Rule(Error::invalid(
            at.clone(),
            Rule::HeaderMagic {
                found: String::from_utf8_lossy(magic).into_owned(),
            },
        )));
    }
    let version = c.u32()?;
    if !(2..=3).contains(&version) {
        let why = if version.swap_bytes() <= 3 {
            " (a big-endian file; only little-endian GGUF is read)"
        } else {
            ""
        };
        return Err(fail(
            "version",
            format!("GGUF version {version} is not supported (2 and 3 are){why}"),
        ));
    }
    let tensors = c.u64()?;
    let kvs = c.u64()?;
    // Each entry takes at least 8 bytes: counts past the file are lies.
    if tensors.saturating_add(kvs) > size / 8 {
        return Err(fail(
            "counts",
            format!(
                "{tensors} tensors and {kvs} metadata entries cannot fit in a {size}-byte file"
            ),
        ));
    }
    // Refused before any is read when they would not fit.
    limits
        .within_memory(tensors, 0)
        .map_err(|rule| Fault::Rule(Error::invalid(at.clone(), rule)))?;
    let mut attributes = Attributes::new();
    let mut objects: Vec<(String, Object)> = Vec::new();
    let mut synthesized = Synthesized::new();
    let mut alignment = 32u64;
    let mut keys = std::collections::HashSet::new();
    for _ in 0..kvs {
        let key = text(c.string()?, &at, "a metadata key")?;
        if !keys.insert(key.clone()) {
            return Err(Fault::Rule(Error::invalid(
                at.clone(),
                Rule::DuplicateKey {
                    key,
                    context: "the metadata".to_owned(),
                },
            )));
        }
        let t = c.u32()?;
        value(
            &mut c,
            t,
            &key,
            &at,
            &mut attributes,
            &mut objects,
            &mut synthesized,
        )?;
        if key == "general.alignment" {
            alignment = match attributes.get(&key) {
                Some(CborValue::Integer(i)) => u64::try_from(*i).unwrap_or(0),
                _ => 0,
            };
            if alignment == 0 || !alignment.is_power_of_two() || t != 4 {
                return Err(fail(
                    "alignment",
                    format!(
                        "general.alignment must be a u32 power of two, found {:?}",
                        attributes.get(&key)
                    ),
                ));
            }
        }
    }
    let mut infos = Vec::new();
    for _ in 0..tensors {
        let name = text(c.string()?, &at, "a tensor name")?;
        let dims = c.u32()?;
        if dims > 8 {
            return Err(Fault::Rule(header_error(
                at.object(&name),
                "dimensions",
                format!("{dims} dimensions (GGML_MAX_DIMS is 4; at most 8 are read)"),
            )));
        }
        let mut shape = Vec::new();
        for _ in 0..dims {
            shape.push(c.u64()?);
        }
        shape.reverse();
        let type_id = c.u32()?;
        let offset = c.u64()?;
        infos.push((name, shape, type_id, offset));
    }
    let header_end = c.pos as u64;
    let mut data_start = header_end
        .checked_next_multiple_of(alignment)
        .ok_or(Short)?;
    if data_start > size && infos.is_empty() && header_end <= size {
        // No tensors, so nothing to pad for: llama.cpp's vocab-only files
        // end right after the header.
        data_start = size;
    }
    if data_start > size {
        return Err(fail(
            "truncated",
            format!(
                "the data section starts at {data_start}, past the end of the {size}-byte file"
            ),
        ));
    }
    let mut manifest = Manifest {
        source: Source::Gguf,
        ..Manifest::new()
    };
    manifest.attributes = attributes;
    let mut starts: Vec<u64> = infos
        .iter()
        .filter_map(|i| data_start.checked_add(i.3))
        .collect();
    starts.sort_unstable();
    // Tensors come in the file's order, not their names': the manifest's
    // table is built from this map once, at the end.
    let mut tensors = std::collections::BTreeMap::new();
    for (name, shape, type_id, rel) in infos {
        let oat = at.object(&name);
        let rule = |rule, detail| Fault::Rule(header_error(oat.clone(), rule, detail));
        if rel.checked_rem(alignment) != Some(0) {
            return Err(rule(
                "misaligned",
                format!("offset {rel} is not a multiple of the alignment {alignment}"),
            ));
        }
        let offset = data_start.checked_add(rel).ok_or_else(|| {
            Fault::Rule(Error::invalid(
                oat.clone(),
                Rule::RangeOverflow {
                    offset: data_start,
                    length: rel,
                },
            ))
        })?;
        let count = element_count(&shape).ok_or_else(|| {
            Fault::Rule(Error::invalid(
                oat.clone(),
                Rule::ShapeOverflow {
                    shape: shape.clone(),
                },
            ))
        })?;
        let object = match GGML_TYPES.iter().find(|t| t.0 == type_id) {
            Some(&(_, tname, block, bytes)) => {
                if count.checked_rem(block) != Some(0) {
                    return Err(rule(
                        "partial-block",
                        format!(
                            "{count} elements are not a whole number of {tname} blocks of {block}"
                        ),
                    ));
                }
                let length = count
                    .checked_div(block)
                    .and_then(|b| b.checked_mul(bytes))
                    .ok_or_else(|| {
                        Fault::Rule(Error::invalid(
                            oat.clone(),
                            Rule::ShapeOverflow {
                                shape: shape.clone(),
                            },
                        ))
                    })?;
                let mut a = Attributes::new();
                a.insert("gguf_type".to_owned(), CborValue::Text(tname.to_owned()));
                match dense_dtype(tname) {
                    Some(d) => Object {
                        shape,
                        format: Format::Dense,
                        attributes: a,
                        components: one("data", Component::raw(d, None, offset, length)),
                    },
                    None => {
                        a.insert("block_size".to_owned(), CborValue::Integer(block.into()));
                        a.insert("type_size".to_owned(), CborValue::Integer(bytes.into()));
                        Object {
                            shape,
                            format: Format::GgufBlock,
                            attributes: a,
                            components: one(
                                "data",
                                Component::raw(
                                    DType::U8,
                                    Some(LogicalType::parse(tname)),
                                    offset,
                                    length,
                                ),
                            ),
                        }
                    }
                }
            }
            None => {
                // Its size is unknown: it runs to the next tensor (or the end).
                let end = starts.iter().copied().find(|&s| s > offset).unwrap_or(size);
                let mut a = Attributes::new();
                a.insert(
                    "source_type".to_owned(),
                    CborValue::Text(format!("ggml type {type_id}")),
                );
                a.insert("reason".to_owned(), CborValue::Text(format!("ggml type {type_id} is unknown to this reader; its bytes are served as stored, up to the next tensor (alignment padding included)")));
                Object {
                    shape,
                    format: Format::Opaque,
                    attributes: a,
                    components: one(
                        "data",
                        Component::raw(DType::U8, None, offset, end.saturating_sub(offset)),
                    ),
                }
            }
        };
        if tensors.insert(name.clone(), object).is_some() {
            return Err(Fault::Rule(Error::invalid(
                at.clone(),
                Rule::DuplicateKey {
                    key: name,
                    context: "the tensor infos".to_owned(),
                },
            )));
        }
    }
    for (name, object) in objects {
        if tensors.contains_key(&name) {
            return Err(fail(
                "name-collision",
                format!("metadata array object {name:?} has the name of a tensor"),
            ));
        }
        tensors.insert(name, object);
    }
    manifest.objects = tensors.into_iter().collect();
    // Tensors lie in the data section; metadata arrays in the header.
    for (name, obj) in &manifest.objects {
        for c in obj.components.values() {
            let end = c.offset.saturating_add(c.length);
            let in_data = c.offset >= data_start && end <= size;
            if !c.synthesized && !name.starts_with(METADATA_PREFIX) && !in_data {
                return Err(Fault::Rule(Error::invalid(
                    at.component(name, "data"),
                    Rule::OutOfBounds {
                        start: c.offset,
                        end,
                        area_start: data_start,
                        area_end: size,
                    },
                )));
            }
        }
    }
    let mut warnings = Vec::new();
    validate::manifest(
        &manifest,
        BlobArea {
            start: 0,
            end: size,
        },
        &at,
        &mut warnings,
    )
    .map_err(Fault::Rule)?;
    Ok(Parsed {
        manifest,
        location: ManifestLocation::header(0, data_start, size),
        blob_area: BlobArea {
            start: data_start,
            end: size,
        },
        warnings,
        synthesized,
    })
}

/// A small GGUF writer and a sample file, for the unit tests and the fuzz
/// seeds and replay (`fuzz::gguf_sample`).
#[cfg(any(test, feature = "fuzzing"))]
#[path = "gguf_sample.rs"]
pub(crate) mod sample;

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::sample::{sample, tokens, W};
    use super::*;

    fn parse(f: &[u8]) -> Result<Loaded> {
        super::super::parse(Source::Gguf, "t.gguf", f, &Limits::default())
    }

    /// A tensor count past `limits.manifest_memory` is refused before any
    /// tensor is read.
    #[test]
    fn tensor_counts_past_the_memory_cap_are_refused() {
        let f = sample();
        let tiny = Limits {
            manifest_memory: 1,
            ..Limits::default()
        };
        let e = super::super::parse(Source::Gguf, "t.gguf", &f, &tiny).unwrap_err();
        assert_eq!(e.rule().unwrap().name(), "manifest-over-memory");
        assert!(e.to_string().starts_with("t.gguf"), "{e}");
    }

    #[test]
    fn tensors_metadata_and_arrays_become_objects() {
        let f = sample();
        let l = parse(&f).unwrap();
        let m = &l.parsed.manifest;
        assert_eq!(m.source, Source::Gguf);
        assert_eq!(
            m.attributes["general.architecture"],
            CborValue::Text("llama".into())
        );
        let w = &m.objects["blk.0.w"];
        assert_eq!(
            (w.format.clone(), w.shape.clone()),
            (Format::Dense, vec![3, 2])
        );
        let q = &m.objects["blk.0.q"];
        assert_eq!(q.format, Format::GgufBlock);
        assert_eq!(q.components["data"].length, 68);
        assert_eq!(q.components["data"].type_name(), "q8_0");
        let i = &m.objects["blk.1.i"].components["data"];
        assert_eq!((i.dtype, i.length), (DType::I8, 5));
        // Long arrays: scores are the file's bytes, tokens are synthesized.
        let scores = &m.objects["@tokenizer.ggml.scores"].components["data"];
        assert_eq!((scores.dtype, scores.length), (DType::F32, 80));
        let at = scores.offset as usize;
        assert_eq!(&f[at..at + 8], &[0, 0, 0, 0, 0, 0, 128, 63]);
        let t = &m.objects["@tokenizer.ggml.tokens"];
        assert_eq!(
            (t.format.clone(), t.shape.clone()),
            (Format::Ragged, vec![40])
        );
        assert!(t.components["values"].synthesized);
        let syn = &l.parsed.synthesized;
        let offs: Vec<u64> = syn[&("@tokenizer.ggml.tokens".into(), "offsets".into())]
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let vals = &syn[&("@tokenizer.ggml.tokens".into(), "values".into())];
        let back: Vec<String> = offs
            .windows(2)
            .map(|w| String::from_utf8(vals[w[0] as usize..w[1] as usize].to_vec()).unwrap())
            .collect();
        assert_eq!(back, tokens());
    }

    #[test]
    fn a_header_read_in_pieces_gives_the_same_manifest() {
        let f = sample();
        let mut p = Plan::new(f.len() as u64);
        p.want = 16;
        let mut reads = 0;
        while let Some(r) = p.next_read() {
            p.feed(
                &f[r.start as usize..r.end as usize],
                "t",
                &Limits::default(),
            )
            .unwrap();
            reads += 1;
        }
        assert!(reads > 3);
        let l = p.finish("t").unwrap();
        assert_eq!(l.parsed.manifest, parse(&f).unwrap().parsed.manifest);
    }

    #[test]
    fn each_rule_is_named() {
        let rule = |f: &[u8]| parse(f).unwrap_err().rule().unwrap().name().to_owned();
        let f = sample();
        assert_eq!(rule(&f[..f.len() - 1]), "out-of-bounds");
        assert_eq!(rule(&f[..60]), "truncated");
        // A file without tensors may end right after its header, unpadded.
        let mut w = W::new(0, 1);
        w.kv_str("general.name", "vocab");
        assert!(parse(&w.0).is_ok());
        let mut w = W::new(1, 0);
        w.tensor("w", &[0], 0, 0);
        assert_eq!(rule(&w.0), "truncated");
        let mut v = f.clone();
        v[4] = 1;
        assert_eq!(rule(&v), "version");
        let mut m = f.clone();
        m[0] = b'X';
        assert_eq!(rule(&m), "header-magic");
        let mut w = W::new(1, 0);
        w.tensor("w", &[33], 8, 0);
        assert_eq!(rule(&w.data(32, &[34])), "partial-block");
        let mut w = W::new(1, 0);
        w.tensor("w", &[4], 0, 8);
        assert_eq!(rule(&w.data(32, &[40])), "misaligned");
        let mut w = W::new(2, 0);
        w.tensor("a", &[16], 0, 0);
        w.tensor("b", &[16], 0, 32);
        assert_eq!(rule(&w.data(32, &[96])), "overlap");
        let mut w = W::new(0, 2);
        w.kv_u32("k", 1);
        w.kv_u32("k", 2);
        assert_eq!(rule(&w.data(32, &[])), "duplicate-key");
        let mut w = W::new(u64::MAX, 0);
        w.s("x");
        assert_eq!(rule(&w.data(32, &[])), "counts");
        let mut w = W::new(1, 0);
        w.tensor("w", &[4], 77, 0);
        let l = parse(&w.data(32, &[16])).unwrap();
        assert_eq!(l.parsed.manifest.objects["w"].format, Format::Opaque);
    }
}
