//! Strict CBOR decoding of manifests: depth-limited, no trailing bytes, no
//! duplicate map keys; plus typed accessors that name the field at fault.

use std::collections::HashSet;

use ciborium::Value;

use crate::error::Rule;
use crate::manifest::Attributes;

/// Default nesting limit. Manifests nest 4 levels; attributes may add some.
pub const DEFAULT_MAX_DEPTH: usize = 64;

/// Decodes exactly one CBOR item that fills `bytes`.
pub(crate) fn decode(bytes: &[u8], max_depth: usize) -> Result<Value, Rule> {
    let mut reader = bytes;
    let value: Value = ciborium::de::from_reader_with_recursion_limit(&mut reader, max_depth)
        .map_err(|e| match e {
            ciborium::de::Error::RecursionLimitExceeded => Rule::CborTooDeep { limit: max_depth },
            ciborium::de::Error::Io(e) => Rule::CborSyntax {
                detail: format!("truncated item ({e:?})"),
            },
            ciborium::de::Error::Syntax(at) => Rule::CborSyntax {
                detail: format!("syntax error at byte {at}"),
            },
            ciborium::de::Error::Semantic(at, msg) => Rule::CborSyntax {
                detail: match at {
                    Some(at) => format!("{msg} at byte {at}"),
                    None => msg,
                },
            },
        })?;
    if !reader.is_empty() {
        return Err(Rule::CborSyntax {
            detail: format!("{} trailing bytes after the manifest", reader.len()),
        });
    }
    check_duplicates(&value, "manifest")?;
    Ok(value)
}

fn check_duplicates(value: &Value, context: &str) -> Result<(), Rule> {
    match value {
        Value::Map(entries) => {
            let mut seen = HashSet::with_capacity(entries.len());
            for (i, (k, v)) in entries.iter().enumerate() {
                let duplicate = match k {
                    Value::Text(t) => !seen.insert(t.as_str()),
                    other => entries.iter().take(i).any(|(prev, _)| prev == other),
                };
                if duplicate {
                    return Err(Rule::DuplicateKey {
                        key: key_text(k),
                        context: context.to_owned(),
                    });
                }
                let inner = match k {
                    Value::Text(t) => t.as_str(),
                    _ => context,
                };
                check_duplicates(v, inner)?;
            }
            Ok(())
        }
        Value::Array(items) => items.iter().try_for_each(|v| check_duplicates(v, context)),
        Value::Tag(_, inner) => check_duplicates(inner, context),
        _ => Ok(()),
    }
}

fn key_text(k: &Value) -> String {
    match k {
        Value::Text(t) => t.clone(),
        other => format!("{other:?}"),
    }
}

/// A short name for the kind of a CBOR value, for error messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Integer(_) => "an integer",
        Value::Bytes(_) => "a byte string",
        Value::Float(_) => "a float",
        Value::Text(_) => "a text string",
        Value::Bool(_) => "a bool",
        Value::Null => "null",
        Value::Tag(..) => "a tagged item",
        Value::Array(_) => "an array",
        Value::Map(_) => "a map",
        _ => "an unknown item",
    }
}

/// A CBOR map with text keys, looked up by name. Non-text keys are ignored
/// (they are unknown keys, and unknown keys are ignored).
pub(crate) struct Map<'a> {
    entries: &'a [(Value, Value)],
}

impl<'a> Map<'a> {
    pub(crate) fn new(v: &'a Value, field: &str) -> Result<Self, Rule> {
        match v {
            Value::Map(entries) => Ok(Map { entries }),
            _ => Err(Rule::FieldType {
                field: field.to_owned(),
                expected: "a map",
            }),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.entries
            .iter()
            .find(|(k, _)| matches!(k, Value::Text(t) if t == key))
            .map(|(_, v)| v)
    }

    /// Text-keyed entries in file order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&'a str, &'a Value)> {
        self.entries.iter().filter_map(|(k, v)| match k {
            Value::Text(t) => Some((t.as_str(), v)),
            _ => None,
        })
    }

    pub(crate) fn text(&self, key: &'static str) -> Result<Option<&'a str>, Rule> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Text(t)) => Ok(Some(t)),
            Some(_) => Err(Rule::FieldType {
                field: key.to_owned(),
                expected: "a text string",
            }),
        }
    }

    pub(crate) fn u64(&self, key: &'static str) -> Result<Option<u64>, Rule> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => as_u64(v).map(Some).ok_or_else(|| Rule::FieldType {
                field: key.to_owned(),
                expected: "an unsigned integer",
            }),
        }
    }

    pub(crate) fn required_u64(&self, key: &'static str) -> Result<u64, Rule> {
        self.u64(key)?.ok_or(Rule::MissingField { field: key })
    }

    pub(crate) fn shape(&self, key: &'static str) -> Result<Option<Vec<u64>>, Rule> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => items
                .iter()
                .map(as_u64)
                .collect::<Option<Vec<u64>>>()
                .map(Some)
                .ok_or_else(|| Rule::FieldType {
                    field: key.to_owned(),
                    expected: "an array of unsigned integers",
                }),
            Some(_) => Err(Rule::FieldType {
                field: key.to_owned(),
                expected: "an array of unsigned integers",
            }),
        }
    }

    pub(crate) fn attributes(&self, key: &'static str) -> Result<Attributes, Rule> {
        match self.get(key) {
            None | Some(Value::Null) => Ok(Attributes::new()),
            Some(v) => {
                let map = Map::new(v, key)?;
                let mut out = Attributes::new();
                for (k, v) in map.entries {
                    match k {
                        Value::Text(t) => {
                            out.insert(t.clone(), v.clone());
                        }
                        _ => {
                            return Err(Rule::FieldType {
                                field: key.to_owned(),
                                expected: "a map with text keys",
                            })
                        }
                    }
                }
                Ok(out)
            }
        }
    }
}

pub(crate) fn as_u64(v: &Value) -> Option<u64> {
    match v {
        Value::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    }
}
