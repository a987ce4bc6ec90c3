//! The one JSON schema for manifests, shared by `zt info --json`, the HTTP
//! manifest endpoint and the client. It is documented in `docs/manifest-json.md`.
//!
//! [`ManifestDoc`] writes the document straight to a serializer, with no
//! `serde_json::Value` tree in between (a 100,000-object manifest is tens
//! of megabytes of JSON; a tree of it costs ten times that); keys come in
//! sorted order, as a `Value` would give them. [`manifest_json`] is the
//! same document as a `Value`, for callers that edit it.
//!
//! Attribute values are CBOR; they map to JSON as numbers, strings, bools,
//! null, arrays and objects. Byte strings become `{"$bytes": "<hex>"}`, tags
//! are dropped in favour of their content, and non-finite floats become null.

use std::collections::BTreeMap;

use crate::{layer_index, Attributes, CborValue, Component, Manifest, Object, Origin};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::Value;

/// The schema identifier carried in every document.
pub const SCHEMA: &str = "ztserve.manifest/1";

/// The JSON Schema (draft 2020-12) of every document [`manifest_json`]
/// renders (`schema/manifest.schema.json`); the daemon serves it at
/// `/v1/schema/manifest.json`, and the interop tests validate every
/// manifest against it with an independent validator.
pub const JSON_SCHEMA: &str = include_str!("../schema/manifest.schema.json");

/// Converts one CBOR value to JSON.
pub fn cbor_to_json(v: &CborValue) -> Value {
    serde_json::to_value(Cbor(v)).unwrap_or(Value::Null)
}

/// JSON for an attribute map.
pub fn attributes_json(a: &Attributes) -> Value {
    serde_json::to_value(Attrs(a)).unwrap_or(Value::Null)
}

/// JSON for one component.
pub fn component_json(c: &Component) -> Value {
    serde_json::to_value(ComponentDoc(c)).unwrap_or(Value::Null)
}

/// JSON for one object.
pub fn object_json(name: &str, o: &Object) -> Value {
    serde_json::to_value(ObjectDoc(name, o)).unwrap_or(Value::Null)
}

/// The name of a manifest's origin in JSON.
pub fn origin_name(o: Origin) -> &'static str {
    match o {
        Origin::V1 => "v1",
        Origin::V1_0 => "v1.0",
        Origin::V0_1 => "v0.1",
    }
}

/// JSON for a manifest (filter it first to list only some objects).
pub fn manifest_json(m: &Manifest) -> Value {
    serde_json::to_value(ManifestDoc(m)).unwrap_or(Value::Null)
}

/// A manifest as its JSON document, serialized directly:
/// `serde_json::to_writer(w, &ManifestDoc(&m))`.
#[derive(Debug, Clone, Copy)]
pub struct ManifestDoc<'a>(pub &'a Manifest);

impl Serialize for ManifestDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let m = self.0;
        let mut map = s.serialize_map(Some(7))?;
        map.serialize_entry("attributes", &Attrs(&m.attributes))?;
        map.serialize_entry("files", &Files(m))?;
        map.serialize_entry("objects", &Objects(m))?;
        map.serialize_entry("origin", origin_name(m.origin))?;
        map.serialize_entry("schema", SCHEMA)?;
        map.serialize_entry("source", m.source.name())?;
        map.serialize_entry("version", &m.version)?;
        map.end()
    }
}

/// A manifest's JSON document up to its objects: `{"attributes":…,
/// "files":…,"objects":{`, in [`ManifestDoc`]'s order; [`json_object`]
/// follows for each object, then [`json_tail`].
pub(crate) fn json_head(m: &Manifest, mut w: impl std::io::Write) -> serde_json::Result<()> {
    w.write_all(b"{\"attributes\":")
        .map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut w, &Attrs(&m.attributes))?;
    w.write_all(b",\"files\":").map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut w, &Files(m))?;
    w.write_all(b",\"objects\":{")
        .map_err(serde_json::Error::io)
}

/// One entry of the document's `objects` (`first` of them: no comma).
pub(crate) fn json_object(
    first: bool,
    name: &str,
    o: &Object,
    mut w: impl std::io::Write,
) -> serde_json::Result<()> {
    if !first {
        w.write_all(b",").map_err(serde_json::Error::io)?;
    }
    serde_json::to_writer(&mut w, name)?;
    w.write_all(b":").map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut w, &ObjectDoc(name, o))
}

/// The document after its objects.
pub(crate) fn json_tail(m: &Manifest, mut w: impl std::io::Write) -> serde_json::Result<()> {
    w.write_all(b"},\"origin\":")
        .map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut w, origin_name(m.origin))?;
    w.write_all(b",\"schema\":")
        .map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut w, SCHEMA)?;
    w.write_all(b",\"source\":")
        .map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut w, m.source.name())?;
    w.write_all(b",\"version\":")
        .map_err(serde_json::Error::io)?;
    serde_json::to_writer(&mut w, &m.version)?;
    w.write_all(b"}").map_err(serde_json::Error::io)
}

struct Files<'a>(&'a Manifest);

impl Serialize for Files<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Part<'a> {
            etag: &'a Option<String>,
            size: u64,
        }
        s.collect_map(self.0.files.iter().map(|(k, f)| {
            (
                k,
                Part {
                    etag: &f.etag,
                    size: f.size,
                },
            )
        }))
    }
}

struct Objects<'a>(&'a Manifest);

impl Serialize for Objects<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.objects.iter().map(|(k, o)| (k, ObjectDoc(k, o))))
    }
}

struct ObjectDoc<'a>(&'a str, &'a Object);

impl Serialize for ObjectDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (name, o) = (self.0, self.1);
        let mut map = s.serialize_map(Some(5))?;
        map.serialize_entry("attributes", &Attrs(&o.attributes))?;
        map.serialize_entry("components", &Comps(o))?;
        map.serialize_entry("format", o.format.name())?;
        map.serialize_entry("layer", &layer_index(name))?;
        map.serialize_entry("shape", &o.shape)?;
        map.end()
    }
}

struct Comps<'a>(&'a Object);

impl Serialize for Comps<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut sorted: Vec<(&str, &Component)> = self.0.components.iter().collect();
        sorted.sort_by_key(|(k, _)| *k);
        s.collect_map(sorted.into_iter().map(|(k, c)| (k, ComponentDoc(c))))
    }
}

struct ComponentDoc<'a>(&'a Component);

impl Serialize for ComponentDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.0;
        let by = |_: &crate::Digest| if c.digest_computed { "server" } else { "file" };
        let mut map = s.serialize_map(Some(10))?;
        map.serialize_entry("digest", &c.digest.as_ref().map(|d| d.as_str()))?;
        map.serialize_entry("digest_by", &c.digest.as_ref().map(by))?;
        map.serialize_entry("dtype", c.dtype.name())?;
        map.serialize_entry("encoding", c.encoding.name())?;
        map.serialize_entry("file", &c.file.as_deref())?;
        map.serialize_entry("length", &c.length)?;
        map.serialize_entry("offset", &c.offset)?;
        let placement = if c.synthesized { "synthesized" } else { "file" };
        map.serialize_entry("placement", placement)?;
        map.serialize_entry("type", &c.logical_type.as_ref().map(|t| t.name()))?;
        map.serialize_entry("uncompressed_length", &c.uncompressed_length)?;
        map.end()
    }
}

/// Attributes: keys are already unique and sorted.
struct Attrs<'a>(&'a Attributes);

impl Serialize for Attrs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, Cbor(v))))
    }
}

/// One CBOR value as JSON: numbers, strings, bools, null, arrays and
/// objects (keys sorted, the last of a repeated key kept; a key that is
/// not text becomes its JSON text). Byte strings become
/// `{"$bytes": "<hex>"}`, tags give way to their content, and non-finite
/// floats become null.
struct Cbor<'a>(&'a CborValue);

impl Serialize for Cbor<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            CborValue::Integer(i) => {
                let i = i128::from(*i);
                if let Ok(u) = u64::try_from(i) {
                    s.serialize_u64(u)
                } else if let Ok(n) = i64::try_from(i) {
                    s.serialize_i64(n)
                } else {
                    s.serialize_str(&i.to_string())
                }
            }
            CborValue::Float(f) if f.is_finite() => s.serialize_f64(*f),
            CborValue::Text(t) => s.serialize_str(t),
            CborValue::Bool(b) => s.serialize_bool(*b),
            CborValue::Bytes(b) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("$bytes", &hex_string(b))?;
                map.end()
            }
            CborValue::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(&Cbor(v))?;
                }
                seq.end()
            }
            CborValue::Map(entries) => {
                let sorted: BTreeMap<String, &CborValue> = entries
                    .iter()
                    .map(|(k, v)| {
                        let key = match k {
                            CborValue::Text(t) => t.clone(),
                            other => serde_json::to_string(&Cbor(other)).unwrap_or_default(),
                        };
                        (key, v)
                    })
                    .collect();
                s.collect_map(sorted.iter().map(|(k, v)| (k, Cbor(v))))
            }
            CborValue::Tag(_, inner) => Cbor(inner).serialize(s),
            _ => s.serialize_unit(),
        }
    }
}

fn hex_string(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_is_json_and_names_this_rendering() {
        let v: Value = serde_json::from_str(JSON_SCHEMA).unwrap();
        assert_eq!(v["$schema"], "https://json-schema.org/draft/2020-12/schema");
        assert_eq!(v["properties"]["schema"]["const"], SCHEMA);
        // Every key the renderer writes is one the schema names.
        let m = manifest_json(&Manifest::default());
        for key in m.as_object().unwrap().keys() {
            assert!(v["properties"].get(key).is_some(), "{key}");
        }
        // It names every source this crate renders, and no other.
        let names: Vec<&str> = crate::Source::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(v["properties"]["source"]["enum"], serde_json::json!(names));
    }
}
