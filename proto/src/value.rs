//! Reading typed fields out of a CBOR map, naming the field at fault.

use ciborium::Value;

/// Why a message could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldError {
    #[error("message is not a CBOR map")]
    NotMap,
    #[error("missing field {0:?}")]
    Missing(&'static str),
    #[error("field {field:?} must be {expected}")]
    Type {
        field: &'static str,
        expected: &'static str,
    },
    #[error("duplicate key {0:?}")]
    Duplicate(String),
    #[error("unknown message type {0:?}")]
    UnknownType(String),
}

/// A decoded map with text keys; other keys are ignored, as unknown keys are.
pub(crate) struct Fields<'a>(Vec<(&'a str, &'a Value)>);

impl<'a> Fields<'a> {
    pub(crate) fn new(v: &'a Value) -> Result<Self, FieldError> {
        let Value::Map(entries) = v else {
            return Err(FieldError::NotMap);
        };
        let mut out: Vec<(&str, &Value)> = Vec::with_capacity(entries.len());
        for (k, v) in entries {
            if let Value::Text(k) = k {
                if out.iter().any(|(seen, _)| *seen == k) {
                    return Err(FieldError::Duplicate(k.clone()));
                }
                out.push((k, v));
            }
        }
        Ok(Fields(out))
    }

    fn get(&self, k: &str) -> Option<&'a Value> {
        self.0
            .iter()
            .find(|(key, _)| *key == k)
            .map(|(_, v)| *v)
            .filter(|v| !v.is_null())
    }

    pub(crate) fn text(&self, k: &'static str) -> Result<String, FieldError> {
        self.opt_text(k)?.ok_or(FieldError::Missing(k))
    }

    pub(crate) fn opt_text(&self, k: &'static str) -> Result<Option<String>, FieldError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Text(t)) => Ok(Some(t.clone())),
            Some(_) => Err(FieldError::Type {
                field: k,
                expected: "a text string",
            }),
        }
    }

    pub(crate) fn uint(&self, k: &'static str) -> Result<u64, FieldError> {
        self.opt_uint(k)?.ok_or(FieldError::Missing(k))
    }

    pub(crate) fn opt_uint(&self, k: &'static str) -> Result<Option<u64>, FieldError> {
        match self.get(k) {
            None => Ok(None),
            Some(Value::Integer(i)) => u64::try_from(*i).map(Some).map_err(|_| FieldError::Type {
                field: k,
                expected: "an unsigned integer",
            }),
            Some(_) => Err(FieldError::Type {
                field: k,
                expected: "an unsigned integer",
            }),
        }
    }

    pub(crate) fn bytes(&self, k: &'static str) -> Result<Vec<u8>, FieldError> {
        match self.get(k) {
            None => Err(FieldError::Missing(k)),
            Some(Value::Bytes(b)) => Ok(b.clone()),
            Some(_) => Err(FieldError::Type {
                field: k,
                expected: "a byte string",
            }),
        }
    }

    /// An optional `[a, b]` of two unsigned integers.
    pub(crate) fn pair(&self, k: &'static str) -> Result<Option<(u64, u64)>, FieldError> {
        let bad = || FieldError::Type {
            field: k,
            expected: "an array [start, end] of two unsigned integers",
        };
        match self.get(k) {
            None => Ok(None),
            Some(v) => two_uints(v).map(Some).ok_or_else(bad),
        }
    }

    /// An array of `[start, end]` pairs of unsigned integers, start <= end.
    pub(crate) fn ranges(&self, k: &'static str) -> Result<Vec<(u64, u64)>, FieldError> {
        let bad = || FieldError::Type {
            field: k,
            expected: "an array of [start, end] pairs, start <= end",
        };
        match self.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| two_uints(v).filter(|(a, b)| a <= b).ok_or_else(bad))
                .collect(),
            Some(_) => Err(bad()),
        }
    }

    pub(crate) fn texts(&self, k: &'static str) -> Result<Vec<String>, FieldError> {
        match self.get(k) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::Text(t) => Ok(t.clone()),
                    _ => Err(FieldError::Type {
                        field: k,
                        expected: "an array of text strings",
                    }),
                })
                .collect(),
            Some(_) => Err(FieldError::Type {
                field: k,
                expected: "an array of text strings",
            }),
        }
    }
}

/// Builds a CBOR map from pairs, leaving out `None`s.
pub(crate) fn map(pairs: Vec<(&str, Option<Value>)>) -> Value {
    Value::Map(
        pairs
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (Value::Text(k.to_owned()), v)))
            .collect(),
    )
}

pub(crate) fn text(s: &str) -> Option<Value> {
    Some(Value::Text(s.to_owned()))
}

pub(crate) fn uint(n: u64) -> Option<Value> {
    Some(Value::Integer(n.into()))
}

pub(crate) fn pair(a: u64, b: u64) -> Value {
    Value::Array(vec![Value::Integer(a.into()), Value::Integer(b.into())])
}

pub(crate) fn ranges(v: &[(u64, u64)]) -> Option<Value> {
    (!v.is_empty()).then(|| {
        Value::Array(
            v.iter()
                .map(|&(a, b)| {
                    Value::Array(vec![Value::Integer(a.into()), Value::Integer(b.into())])
                })
                .collect(),
        )
    })
}

pub(crate) fn texts(v: &[String]) -> Option<Value> {
    (!v.is_empty()).then(|| Value::Array(v.iter().map(|s| Value::Text(s.clone())).collect()))
}

/// `[a, b]`: an array of exactly two unsigned integers.
fn two_uints(v: &Value) -> Option<(u64, u64)> {
    let uint = |v: &Value| match v {
        Value::Integer(i) => u64::try_from(*i).ok(),
        _ => None,
    };
    match v {
        Value::Array(p) => match p.as_slice() {
            [a, b] => Some((uint(a)?, uint(b)?)),
            _ => None,
        },
        _ => None,
    }
}
