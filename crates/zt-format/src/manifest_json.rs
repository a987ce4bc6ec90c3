//! The one JSON schema for manifests, shared by `zt info --json`, the HTTP
//! manifest endpoint and the client. It is documented in `docs/manifest-json.md`.
//!
//! Attribute values are CBOR; they map to JSON as numbers, strings, bools,
//! null, arrays and objects. Byte strings become `{"$bytes": "<hex>"}`, tags
//! are dropped in favour of their content, and non-finite floats become null.

use crate::{layer_index, Attributes, CborValue, Component, Manifest, Object, Origin};
use serde_json::{json, Map, Value};

/// The schema identifier carried in every document.
pub const SCHEMA: &str = "ztserve.manifest/1";

/// The JSON Schema (draft 2020-12) of every document [`manifest_json`]
/// renders (`schema/manifest.schema.json`); the daemon serves it at
/// `/v1/schema/manifest.json`, and the interop tests validate every
/// manifest against it with an independent validator.
pub const JSON_SCHEMA: &str = include_str!("../schema/manifest.schema.json");

/// Converts one CBOR value to JSON.
pub fn cbor_to_json(v: &CborValue) -> Value {
    match v {
        CborValue::Integer(i) => {
            let i = i128::from(*i);
            if let Ok(u) = u64::try_from(i) {
                json!(u)
            } else if let Ok(s) = i64::try_from(i) {
                json!(s)
            } else {
                json!(i.to_string())
            }
        }
        CborValue::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        CborValue::Text(t) => json!(t),
        CborValue::Bool(b) => json!(b),
        CborValue::Bytes(b) => json!({ "$bytes": hex_string(b) }),
        CborValue::Array(items) => Value::Array(items.iter().map(cbor_to_json).collect()),
        CborValue::Map(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                let key = match k {
                    CborValue::Text(t) => t.clone(),
                    other => cbor_to_json(other).to_string(),
                };
                m.insert(key, cbor_to_json(v));
            }
            Value::Object(m)
        }
        CborValue::Tag(_, inner) => cbor_to_json(inner),
        _ => Value::Null,
    }
}

fn hex_string(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// JSON for an attribute map.
pub fn attributes_json(a: &Attributes) -> Value {
    Value::Object(
        a.iter()
            .map(|(k, v)| (k.clone(), cbor_to_json(v)))
            .collect(),
    )
}

/// JSON for one component.
pub fn component_json(c: &Component) -> Value {
    json!({
        "dtype": c.dtype.name(),
        "type": c.logical_type.as_ref().map(|t| t.name()),
        "offset": c.offset,
        "placement": if c.synthesized { "synthesized" } else { "file" },
        "file": c.file,
        "length": c.length,
        "uncompressed_length": c.uncompressed_length,
        "encoding": c.encoding.name(),
        "digest": c.digest.as_ref().map(|d| d.as_str()),
        "digest_by": c.digest.as_ref().map(|_| if c.digest_computed { "server" } else { "file" }),
    })
}

/// JSON for one object.
pub fn object_json(name: &str, o: &Object) -> Value {
    let comps: Map<String, Value> = o
        .components
        .iter()
        .map(|(k, c)| (k.clone(), component_json(c)))
        .collect();
    json!({
        "shape": o.shape,
        "format": o.format.name(),
        "layer": layer_index(name),
        "attributes": attributes_json(&o.attributes),
        "components": comps,
    })
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
    let objects: Map<String, Value> = m
        .objects
        .iter()
        .map(|(k, o)| (k.clone(), object_json(k, o)))
        .collect();
    json!({
        "schema": SCHEMA,
        "version": m.version,
        "origin": origin_name(m.origin),
        "source": m.source.name(),
        "files": m.files.iter().map(|(k, f)| (k.clone(), json!({ "size": f.size, "etag": f.etag }))).collect::<Map<String, Value>>(),
        "attributes": attributes_json(&m.attributes),
        "objects": objects,
    })
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
    }
}
