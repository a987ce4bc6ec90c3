//! safetensors: an 8-byte little-endian header size `N`, `N` bytes of JSON
//! (an object of tensor infos and an optional `__metadata__` map of
//! strings), then the tensors' bytes back to back.
//!
//! Each tensor becomes a dense object with one `data` component whose
//! offset is absolute in the file; `__metadata__` becomes the file's
//! attributes. The header is held to the same strictness as a `.zt`
//! manifest: a size cap, UTF-8 JSON that is an object without duplicate
//! keys, offsets in order and in bounds, no overlaps, lengths equal to
//! shape × dtype, and (as the safetensors crate requires) tensors that
//! cover the data area exactly. A dtype we cannot express is listed as an
//! `opaque` object naming it and the reason, never dropped.

use std::ops::Range;

use serde::de::{DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::component::Component;
use crate::components::Components;
use crate::container::{ManifestLocation, Parsed};
use crate::dtype::{DType, LogicalType};
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{
    element_count, Attributes, CborValue, Format, Manifest, Object, Origin, Source,
};
use crate::options::Limits;
use crate::validate::{self, BlobArea};

use super::Loaded;

/// The first read: most headers fit, so most files need one read.
const PREFIX: u64 = 64 * 1024;

/// The safetensors dtypes that map to a dtype of ours, with that dtype
/// and logical type.
pub const DTYPES: [(&str, DType, Option<&str>); 18] = [
    ("F64", DType::F64, None),
    ("F32", DType::F32, None),
    ("F16", DType::F16, None),
    ("BF16", DType::BF16, None),
    ("I64", DType::I64, None),
    ("I32", DType::I32, None),
    ("I16", DType::I16, None),
    ("I8", DType::I8, None),
    ("U64", DType::U64, None),
    ("U32", DType::U32, None),
    ("U16", DType::U16, None),
    ("U8", DType::U8, None),
    ("BOOL", DType::Bool, None),
    ("F8_E4M3", DType::U8, Some("f8_e4m3fn")),
    ("F8_E5M2", DType::U8, Some("f8_e5m2")),
    ("F8_E4M3FNUZ", DType::U8, Some("f8_e4m3fnuz")),
    ("F8_E5M2FNUZ", DType::U8, Some("f8_e5m2fnuz")),
    ("C64", DType::F32, Some("complex64")),
];

/// safetensors dtypes with no dtype of ours, and their bits per element.
const OPAQUE: [(&str, u64, &str); 4] = [
    (
        "F8_E8M0",
        8,
        "an 8-bit exponent-only scale type, which zTensor has no type for",
    ),
    ("F6_E2M3", 6, "a 6-bit float, which zTensor has no type for"),
    ("F6_E3M2", 6, "a 6-bit float, which zTensor has no type for"),
    ("F4", 4, "a 4-bit float, which zTensor has no type for"),
];

#[derive(Debug)]
pub(super) struct Plan {
    size: u64,
    /// The bytes read so far, from the file's start (the rest of the
    /// header is appended as it comes).
    prefix: Option<Vec<u8>>,
    /// `N`, once the prefix is in.
    header_len: u64,
    /// Whether the rest of the header was read.
    rest_read: bool,
}

impl Plan {
    pub(super) fn new(size: u64) -> Plan {
        Plan {
            size,
            prefix: None,
            header_len: 0,
            rest_read: false,
        }
    }

    /// The end of the header: `8 + N`.
    fn header_end(&self) -> u64 {
        self.header_len.saturating_add(8)
    }

    pub(super) fn next_read(&self) -> Option<Range<u64>> {
        let prefix = match &self.prefix {
            None => return Some(0..self.size.min(PREFIX)),
            Some(p) => p.len() as u64,
        };
        (!self.rest_read && prefix < self.header_end()).then(|| prefix..self.header_end())
    }

    pub(super) fn feed(&mut self, bytes: &[u8], label: &str, limits: &Limits) -> Result<()> {
        if let Some(prefix) = &mut self.prefix {
            // Onto the prefix at once: a large header is held once, not
            // as two pieces joined later.
            prefix.reserve_exact(bytes.len());
            prefix.extend_from_slice(bytes);
            self.rest_read = true;
            return Ok(());
        }
        let fail = |rule, detail| Err(header_error(Location::file(label), rule, detail));
        let Some(size_bytes) = bytes.get(..8) else {
            return fail(
                "too-short",
                format!(
                    "file is {} bytes, too short for a safetensors header size",
                    self.size
                ),
            );
        };
        let mut le = [0u8; 8];
        le.copy_from_slice(size_bytes);
        let n = u64::from_le_bytes(le);
        if n > limits.manifest_cap {
            return fail(
                "header-over-cap",
                format!(
                    "header size {n} exceeds the cap of {} bytes",
                    limits.manifest_cap
                ),
            );
        }
        if n.checked_add(8).is_none_or(|end| end > self.size) {
            return fail(
                "header-larger-than-file",
                format!("header size {n} does not fit in a {}-byte file", self.size),
            );
        }
        self.header_len = n;
        self.prefix = Some(bytes.to_vec());
        Ok(())
    }

    pub(super) fn finish(self, label: &str, size: u64, limits: &Limits) -> Result<Loaded> {
        let end = usize::try_from(self.header_end()).unwrap_or(usize::MAX);
        let mut raw = self.prefix.unwrap_or_default();
        if raw.len() < end || end < 8 {
            return Err(header_error(
                Location::file(label),
                "incomplete-read",
                "the header was not read to its end".to_owned(),
            ));
        }
        // In place: a large header is not copied again.
        raw.truncate(end);
        raw.drain(..8);
        let parsed = parse_header(label, &raw, size, limits)?;
        Ok(Loaded { parsed, raw })
    }
}

pub(super) fn header_error(at: Location, rule: &'static str, detail: String) -> Error {
    Error::invalid(at, Rule::Header { rule, detail })
}

/// The JSON header's top-level entries in file order, with the first
/// repeated key (serde_json's maps keep only the last).
#[derive(Debug, Default)]
struct Entries {
    list: Vec<(String, Box<RawValue>)>,
    duplicate: Option<String>,
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Entries, A::Error> {
                let mut out = Entries::default();
                let mut seen = std::collections::HashSet::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    if !seen.insert(k.clone()) && out.duplicate.is_none() {
                        out.duplicate = Some(k.clone());
                    }
                    out.list.push((k, v));
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// One tensor's entry; serde refuses a repeated or missing field.
#[derive(Debug, Deserialize)]
struct Info {
    dtype: String,
    shape: Vec<u64>,
    data_offsets: (u64, u64),
}

/// `Ok` when `text` is a JSON object, by its first character (the parse
/// that follows says whether it is valid).
fn an_object(text: &str, at: &Location) -> Result<()> {
    match text.trim_start().starts_with('{') {
        true => Ok(()),
        false => Err(Error::invalid(
            at.clone(),
            Rule::ManifestNotMap {
                found: "not an object",
                expected: "JSON object",
            },
        )),
    }
}

/// An object map parsed strictly: valid JSON, an object, no repeated key.
pub(super) fn entries(
    text: &str,
    at: &Location,
    what: &str,
) -> Result<Vec<(String, Box<RawValue>)>> {
    an_object(text, at)?;
    let e: Entries = serde_json::from_str(text).map_err(|e| {
        header_error(
            at.clone(),
            "header-json",
            format!("{what} is not valid JSON: {e}"),
        )
    })?;
    if let Some(key) = e.duplicate {
        return Err(Error::invalid(
            at.clone(),
            Rule::DuplicateKey {
                key,
                context: what.to_owned(),
            },
        ));
    }
    Ok(e.list)
}

/// The header's entries read one at a time into a manifest, each tensor's
/// info parsed and turned into its object as it comes (the header's JSON
/// is never held as a list besides the manifest), counted against
/// `limits.manifest_memory`.
struct Tensors<'a> {
    /// The objects in file order; a map is built from them at once, its
    /// nodes full (inserting them one by one left a map of a million
    /// objects half empty: 445 bytes an entry instead of about 120).
    objects: Vec<(String, Object)>,
    metadata: Option<Box<RawValue>>,
    data_start: u64,
    header: u64,
    at: &'a Location,
    limits: &'a Limits,
    /// Why reading stopped, when it was for a rule of ours.
    failed: Option<Error>,
}

impl<'de> DeserializeSeed<'de> for &mut Tensors<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for &mut Tensors<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        use serde::de::Error as _;
        let mut stop = |e: Error| {
            self.failed = Some(e);
            A::Error::custom("stopped")
        };
        while let Some(name) = map.next_key::<String>()? {
            let value = map.next_value::<Box<RawValue>>()?;
            let duplicate = |key: &str| {
                let rule = Rule::DuplicateKey {
                    key: key.to_owned(),
                    context: "the header".to_owned(),
                };
                Error::invalid(self.at.clone(), rule)
            };
            if name == "__metadata__" {
                if self.metadata.replace(value).is_some() {
                    return Err(stop(duplicate(&name)));
                }
                continue;
            }
            let count = (self.objects.len() as u64).saturating_add(1);
            if let Err(rule) = self.limits.within_memory(count, self.header) {
                return Err(stop(Error::invalid(self.at.clone(), rule)));
            }
            let oat = self.at.object(&name);
            let info: Info = match serde_json::from_str(value.get()) {
                Ok(info) => info,
                Err(e) => {
                    return Err(stop(header_error(
                        oat,
                        "tensor-info",
                        format!("tensor info is not {{dtype, shape, data_offsets}}: {e}"),
                    )))
                }
            };
            let object = object(&info, self.data_start, &oat).map_err(&mut stop)?;
            self.objects.push((name, object));
        }
        Ok(())
    }
}

/// Parses and validates a header of `raw` bytes in a `size`-byte file.
pub(super) fn parse_header(label: &str, raw: &[u8], size: u64, limits: &Limits) -> Result<Parsed> {
    let at = Location::file(label);
    let text = std::str::from_utf8(raw).map_err(|e| {
        header_error(
            at.clone(),
            "header-utf8",
            format!("header is not UTF-8: {e}"),
        )
    })?;
    an_object(text, &at)?;
    let data_start = (raw.len() as u64).saturating_add(8);
    let mut tensors = Tensors {
        objects: Vec::new(),
        metadata: None,
        data_start,
        header: raw.len() as u64,
        at: &at,
        limits,
        failed: None,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let read = (&mut tensors).deserialize(&mut de).and_then(|()| de.end());
    if let Some(e) = tensors.failed.take() {
        return Err(e);
    }
    read.map_err(|e| {
        header_error(
            at.clone(),
            "header-json",
            format!("the header is not valid JSON: {e}"),
        )
    })?;
    let mut objects = tensors.objects;
    // Stable: a name given twice is found next to itself, in file order.
    objects.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some(pair) = objects
        .windows(2)
        .find(|w| w.first().map(|a| &a.0) == w.get(1).map(|b| &b.0))
    {
        let key = pair.first().map(|a| a.0.clone()).unwrap_or_default();
        return Err(Error::invalid(
            at.clone(),
            Rule::DuplicateKey {
                key,
                context: "the header".to_owned(),
            },
        ));
    }
    let mut manifest = Manifest {
        source: Source::Safetensors,
        origin: Origin::V1,
        objects: objects.into_iter().collect(),
        ..Manifest::new()
    };
    if let Some(m) = tensors.metadata {
        manifest.attributes = metadata(m.get(), &at)?;
    }
    let blob_area = BlobArea {
        start: data_start,
        end: size,
    };
    let mut warnings = Vec::new();
    validate::manifest(&manifest, blob_area, &at, &mut warnings)?;
    covered(&manifest, blob_area, &at)?;
    Ok(Parsed {
        manifest,
        location: ManifestLocation::header(8, raw.len() as u64, size),
        blob_area,
        warnings,
        synthesized: Default::default(),
    })
}

/// `__metadata__`: a map of strings, kept as text attributes.
fn metadata(json: &str, at: &Location) -> Result<Attributes> {
    let mut out = Attributes::new();
    for (k, v) in entries(json, at, "__metadata__")? {
        let s: String = serde_json::from_str(v.get()).map_err(|_| {
            Error::invalid(
                at.clone(),
                Rule::FieldType {
                    field: format!("__metadata__.{k}"),
                    expected: "a string",
                },
            )
        })?;
        out.insert(k, CborValue::Text(s));
    }
    Ok(out)
}

fn object(info: &Info, data_start: u64, at: &Location) -> Result<Object> {
    let (begin, end) = info.data_offsets;
    if begin > end {
        return Err(header_error(
            at.clone(),
            "offsets-order",
            format!("data_offsets [{begin}, {end}] end before they begin"),
        ));
    }
    let offset = data_start.checked_add(begin).ok_or_else(|| {
        Error::invalid(
            at.clone(),
            Rule::RangeOverflow {
                offset: data_start,
                length: begin,
            },
        )
    })?;
    let length = end.saturating_sub(begin);
    let mut attributes = Attributes::new();
    let known = DTYPES.iter().find(|(n, _, _)| *n == info.dtype);
    let (format, dtype, logical_type) = match known {
        Some((_, d, t)) => (Format::Dense, *d, t.map(LogicalType::parse)),
        None => {
            let (bits, reason) = OPAQUE
                .iter()
                .find(|(n, _, _)| *n == info.dtype)
                .map_or((None, "a dtype this reader does not know"), |(_, b, r)| {
                    (Some(*b), *r)
                });
            if let Some(bits) = bits {
                opaque_length(&info.shape, bits, length, &info.dtype, at)?;
            }
            attributes.insert(
                "source_type".to_owned(),
                CborValue::Text(info.dtype.clone()),
            );
            attributes.insert(
                "reason".to_owned(),
                CborValue::Text(format!(
                    "safetensors dtype {} is {reason}; its bytes are served as stored",
                    info.dtype
                )),
            );
            (Format::Opaque, DType::U8, None)
        }
    };
    let data = Component::raw(dtype, logical_type, offset, length);
    let mut components = Components::new();
    components.insert("data".to_owned(), data);
    Ok(Object {
        shape: info.shape.clone(),
        format,
        attributes,
        components,
    })
}

/// A sub-byte or unknown-to-us type still has a size: elements × bits / 8.
fn opaque_length(shape: &[u64], bits: u64, length: u64, dtype: &str, at: &Location) -> Result<()> {
    let overflow = || {
        Error::invalid(
            at.clone(),
            Rule::ShapeOverflow {
                shape: shape.to_vec(),
            },
        )
    };
    let total_bits = element_count(shape)
        .and_then(|n| n.checked_mul(bits))
        .ok_or_else(overflow)?;
    let expected = total_bits.div_ceil(8);
    if total_bits % 8 != 0 || expected != length {
        return Err(Error::invalid(
            at.component(at.object.as_deref().unwrap_or_default(), "data"),
            Rule::LengthMismatch {
                actual: length,
                expected,
                shape: shape.to_vec(),
                dtype: dtype.to_owned(),
            },
        ));
    }
    Ok(())
}

/// The tensors must cover the data area back to back: a gap or trailing
/// bytes would be bytes no digest and no manifest speaks for.
fn covered(m: &Manifest, area: BlobArea, at: &Location) -> Result<()> {
    let mut spans: Vec<(u64, u64)> = m
        .components()
        .map(|(_, _, c)| (c.offset, c.offset.saturating_add(c.length)))
        .filter(|(s, e)| e > s)
        .collect();
    spans.sort_unstable();
    let mut pos = area.start;
    for (s, e) in spans {
        if s > pos {
            return Err(gap(at, pos, s));
        }
        pos = pos.max(e);
    }
    if pos < area.end {
        return Err(gap(at, pos, area.end));
    }
    Ok(())
}

fn gap(at: &Location, start: u64, end: u64) -> Error {
    header_error(
        at.clone(),
        "incomplete",
        format!("bytes {start}..{end} belong to no tensor (safetensors tensors cover the data area back to back)"),
    )
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;

    fn file(header: &str, data: usize) -> Vec<u8> {
        let mut f = (header.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(header.as_bytes());
        f.resize(f.len() + data, 0);
        f
    }

    fn rule_of(header: &str, data: usize) -> String {
        let f = file(header, data);
        let e = super::super::parse(Source::Safetensors, "t.safetensors", &f, &Limits::default())
            .unwrap_err();
        assert!(e.to_string().starts_with("t.safetensors"), "{e}");
        e.rule().unwrap().name().to_owned()
    }

    #[test]
    fn a_valid_header_becomes_dense_objects_with_absolute_offsets() {
        let h = r#"{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[16,24]},"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        let f = file(h, 24);
        let l = super::super::parse(Source::Safetensors, "t", &f, &Limits::default()).unwrap();
        let m = &l.parsed.manifest;
        assert_eq!(m.source, Source::Safetensors);
        assert_eq!(m.attributes["format"], CborValue::Text("pt".into()));
        let a = &m.objects["a"].components["data"];
        assert_eq!(
            (a.offset, a.length, a.dtype),
            (8 + h.len() as u64, 16, DType::F32)
        );
        let b = &m.objects["b"].components["data"];
        assert_eq!((b.offset, b.dtype), (8 + h.len() as u64 + 16, DType::BF16));
        assert_eq!(l.raw, h.as_bytes());
    }

    /// A header of more tensors than `limits.manifest_memory` holds is
    /// refused by name as its entries are read, naming the count reached.
    #[test]
    fn headers_past_the_memory_cap_are_refused_as_they_are_read() {
        let entries: Vec<String> = (0..100)
            .map(|i| {
                format!(
                    r#""t{i:03}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
                    i + 1
                )
            })
            .collect();
        let h = format!("{{{}}}", entries.join(","));
        let f = file(&h, 100);
        let room = |memory| Limits {
            manifest_memory: memory,
            ..Limits::default()
        };
        let fits = crate::OBJECT_MEMORY * 100 + h.len() as u64;
        let parse =
            |memory| super::super::parse(Source::Safetensors, "t.safetensors", &f, &room(memory));
        assert_eq!(parse(fits).unwrap().parsed.manifest.objects.len(), 100);
        let e = parse(fits - 1).unwrap_err();
        assert_eq!(e.rule().unwrap().name(), "manifest-over-memory");
        assert!(e.to_string().starts_with("t.safetensors"), "{e}");
        assert!(e.to_string().contains("100 objects"), "{e}");
        // Refused at the first object past the cap, the rest unread.
        let e = parse(h.len() as u64 + crate::OBJECT_MEMORY * 10).unwrap_err();
        assert!(e.to_string().contains(" 11 objects or more"), "{e}");
    }

    #[test]
    fn fp8_complex_and_unknown_dtypes_are_mapped_or_listed() {
        let h = r#"{"e":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]},"c":{"dtype":"C64","shape":[1],"data_offsets":[2,10]},"s":{"dtype":"F8_E8M0","shape":[2],"data_offsets":[10,12]},"q":{"dtype":"F4","shape":[4],"data_offsets":[12,14]},"z":{"dtype":"X9","shape":[3],"data_offsets":[14,17]}}"#;
        let f = file(h, 17);
        let l = super::super::parse(Source::Safetensors, "t", &f, &Limits::default()).unwrap();
        let o = &l.parsed.manifest.objects;
        assert_eq!(o["e"].components["data"].type_name(), "f8_e4m3fn");
        assert_eq!(o["c"].components["data"].type_name(), "complex64");
        for name in ["s", "q", "z"] {
            assert_eq!(o[name].format, Format::Opaque, "{name}");
            assert!(o[name].attributes.contains_key("reason"));
        }
    }

    #[test]
    fn each_rule_is_named() {
        let t = |dtype: &str, shape: &str, offs: &str| {
            format!(r#"{{"t":{{"dtype":"{dtype}","shape":{shape},"data_offsets":{offs}}}}}"#)
        };
        assert_eq!(rule_of(&t("F32", "[2]", "[0,8]"), 4), "out-of-bounds");
        assert_eq!(rule_of(&t("F32", "[3]", "[0,8]"), 8), "length-mismatch");
        assert_eq!(rule_of(&t("F32", "[2]", "[8,0]"), 8), "offsets-order");
        assert_eq!(rule_of(&t("F32", "[2]", "[0,8]"), 12), "incomplete");
        assert_eq!(rule_of(&t("F32", "[2]", "[4,12]"), 12), "incomplete");
        assert_eq!(rule_of(&t("F32", "[-2]", "[0,8]"), 8), "tensor-info");
        assert_eq!(rule_of(&t("F4", "[3]", "[0,2]"), 2), "length-mismatch");
        assert_eq!(
            rule_of(&t("F32", "[4294967296,4294967296,2]", "[0,8]"), 8),
            "shape-overflow"
        );
        assert_eq!(rule_of("[1,2]", 0), "manifest-not-map");
        assert_eq!(rule_of("{\"a\":", 0), "header-json");
        let two = r#"{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
        assert_eq!(rule_of(two, 2), "duplicate-key");
        let overlap = r#"{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#;
        assert_eq!(rule_of(overlap, 3), "overlap");
        assert_eq!(rule_of(r#"{"__metadata__":{"a":1}}"#, 0), "field-type");
    }

    #[test]
    fn sizes_are_checked_before_anything_is_read() {
        let mut p = Plan::new(100);
        assert_eq!(p.next_read(), Some(0..100));
        let mut huge = u64::MAX.to_le_bytes().to_vec();
        huge.resize(100, 0);
        assert!(p.feed(&huge, "t", &Limits::default()).is_err());
        let mut p = Plan::new(1 << 20);
        let mut first = 200_000u64.to_le_bytes().to_vec();
        first.resize(PREFIX as usize, b' ');
        p.feed(&first, "t", &Limits::default()).unwrap();
        assert_eq!(p.next_read(), Some(PREFIX..200_008));
    }
}
