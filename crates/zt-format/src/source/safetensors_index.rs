//! A sharded safetensors checkpoint: `NAME.safetensors.index.json`, a JSON
//! object with `weight_map` (tensor name to shard file, relative to the
//! index's directory) and an optional `metadata` object. Its entry is a
//! multi-file entry: the union of the shards' tensors, each component
//! naming the shard it lives in (`file`), each shard with its size and own
//! ETag in the manifest's `files`. The shards stay entries of their own.
//!
//! The index alone says nothing about offsets: [`parse`] reads the index,
//! and [`merge`] builds the manifest once the shards' manifests are known.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{Attributes, CborValue, FilePart, Manifest, Source};
use crate::options::Limits;
use crate::validate::{self, BlobArea};

use super::safetensors::{entries, header_error};

/// A parsed index.
#[derive(Debug, Clone, PartialEq)]
pub struct Index {
    /// `metadata`, as attributes of the entry.
    pub metadata: Attributes,
    /// Tensor name to shard file.
    pub weight_map: BTreeMap<String, String>,
}

impl Index {
    /// Every shard the index names.
    pub fn shards(&self) -> BTreeSet<&str> {
        self.weight_map.values().map(String::as_str).collect()
    }
}

/// Whether a shard name is a plain relative path below the index's
/// directory: no `..`, no absolute path, no backslash or NUL, no empty
/// segment. A manifest's `files` are held to it too: a client writes
/// them below a directory.
pub fn safe_shard(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['\\', '\0'])
        && name
            .split('/')
            .all(|seg| !seg.is_empty() && seg != "." && seg != "..")
}

fn json_to_cbor(v: &Value) -> CborValue {
    match v {
        Value::String(s) => CborValue::Text(s.clone()),
        Value::Bool(b) => CborValue::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => CborValue::Integer(u.into()),
            (_, Some(i), _) => CborValue::Integer(i.into()),
            (_, _, Some(f)) => CborValue::Float(f),
            _ => CborValue::Null,
        },
        Value::Null => CborValue::Null,
        Value::Array(a) => CborValue::Array(a.iter().map(json_to_cbor).collect()),
        Value::Object(o) => CborValue::Map(
            o.iter()
                .map(|(k, v)| (CborValue::Text(k.clone()), json_to_cbor(v)))
                .collect(),
        ),
    }
}

/// Reads an index of `bytes`, as strictly as a safetensors header.
pub fn parse(label: &str, bytes: &[u8], limits: &Limits) -> Result<Index> {
    let at = Location::file(label);
    if bytes.len() as u64 > limits.manifest_cap {
        return Err(header_error(
            at,
            "header-over-cap",
            format!(
                "the index is {} bytes, over the cap of {}",
                bytes.len(),
                limits.manifest_cap
            ),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        header_error(
            at.clone(),
            "header-utf8",
            format!("the index is not UTF-8: {e}"),
        )
    })?;
    let mut index = Index {
        metadata: Attributes::new(),
        weight_map: BTreeMap::new(),
    };
    let mut saw_map = false;
    for (key, value) in entries(text, &at, "the index")? {
        match key.as_str() {
            "metadata" => {
                let v: Value = serde_json::from_str(value.get()).unwrap_or(Value::Null);
                let Value::Object(m) = v else {
                    return Err(Error::invalid(
                        at,
                        Rule::FieldType {
                            field: "metadata".to_owned(),
                            expected: "an object",
                        },
                    ));
                };
                index.metadata = m
                    .iter()
                    .map(|(k, v)| (k.clone(), json_to_cbor(v)))
                    .collect();
            }
            "weight_map" => {
                saw_map = true;
                for (tensor, shard) in entries(value.get(), &at, "weight_map")? {
                    let shard: String = serde_json::from_str(shard.get()).map_err(|_| {
                        header_error(
                            at.object(&tensor),
                            "index-weight-map",
                            "weight_map values are shard file names (strings)".to_owned(),
                        )
                    })?;
                    if !safe_shard(&shard) {
                        return Err(header_error(
                            at.object(&tensor),
                            "index-shard-path",
                            format!("shard {shard:?} is not a plain relative path below the index"),
                        ));
                    }
                    index.weight_map.insert(tensor, shard);
                }
            }
            _ => {}
        }
    }
    if !saw_map {
        return Err(Error::invalid(
            at,
            Rule::MissingField {
                field: "weight_map",
            },
        ));
    }
    // The merged manifest holds every tensor of the map (its shards are
    // each held to the same cap).
    limits
        .within_memory(index.weight_map.len() as u64, bytes.len() as u64)
        .map_err(|rule| Error::invalid(at, rule))?;
    Ok(index)
}

/// One shard as its own entry serves it.
#[derive(Debug, Clone, Copy)]
pub struct Shard<'a> {
    pub manifest: &'a Manifest,
    pub part: &'a FilePart,
}

/// The entry's manifest: every tensor of the weight map, taken from its
/// shard's manifest (digests included), its components naming the shard.
pub fn merge(label: &str, index: &Index, shards: &BTreeMap<String, Shard<'_>>) -> Result<Manifest> {
    let at = Location::file(label);
    let mut m = Manifest {
        source: Source::SafetensorsIndex,
        attributes: index.metadata.clone(),
        ..Manifest::new()
    };
    // Each shard's name, shared by its components.
    let mut names: BTreeMap<&str, std::sync::Arc<str>> = BTreeMap::new();
    for (tensor, shard_name) in &index.weight_map {
        let shard = shards.get(shard_name).ok_or_else(|| {
            header_error(
                at.object(tensor),
                "index-missing-shard",
                format!("shard {shard_name:?} is not served"),
            )
        })?;
        let mut obj = shard.manifest.objects.get(tensor).cloned().ok_or_else(|| {
            header_error(
                at.object(tensor),
                "index-missing-tensor",
                format!("shard {shard_name:?} holds no tensor {tensor:?}"),
            )
        })?;
        for (_, c) in obj.components.iter_mut() {
            let name = names
                .entry(shard_name)
                .or_insert_with(|| std::sync::Arc::from(shard_name.as_str()));
            c.file = Some(std::sync::Arc::clone(name));
        }
        m.objects.insert(tensor.clone(), obj);
        m.files.insert(shard_name.clone(), shard.part.clone());
    }
    m.objects.shrink_to_fit();
    let mut warnings = Vec::new();
    validate::manifest(&m, BlobArea { start: 0, end: 0 }, &at, &mut warnings)?;
    Ok(m)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn an_index_names_safe_shards_only() {
        let ok = br#"{"metadata":{"total_size":16},"weight_map":{"a":"m-1.safetensors","b":"sub/m-2.safetensors"}}"#;
        let i = parse("i.json", ok, &Limits::default()).unwrap();
        assert_eq!(i.shards().len(), 2);
        assert_eq!(i.metadata["total_size"], CborValue::Integer(16.into()));
        let rule = |b: &[u8]| {
            parse("i.json", b, &Limits::default())
                .unwrap_err()
                .rule()
                .unwrap()
                .name()
                .to_owned()
        };
        assert_eq!(
            rule(br#"{"weight_map":{"a":"../x.safetensors"}}"#),
            "index-shard-path"
        );
        assert_eq!(
            rule(br#"{"weight_map":{"a":"/etc/x"}}"#),
            "index-shard-path"
        );
        assert_eq!(rule(br#"{"weight_map":{"a":3}}"#), "index-weight-map");
        assert_eq!(rule(br#"{"metadata":{}}"#), "missing-field");
        assert_eq!(
            rule(br#"{"weight_map":{"a":"x","a":"y"}}"#),
            "duplicate-key"
        );
        assert_eq!(rule(b"[]"), "manifest-not-map");
    }
}
