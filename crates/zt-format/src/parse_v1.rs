//! Reading a v1.1/v1.2 manifest (a map with `version` and `objects`) into the model.

use std::collections::BTreeMap;

use ciborium::Value;

use crate::cbor::{self, Map};
use crate::digest::Digest;
use crate::dtype::{unknown_dtype_hint, DType, LogicalType};
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{Component, Encoding, Format, Manifest, Object, Origin};
use crate::warning::Warning;

/// The major and minor version this crate implements.
pub(crate) const SUPPORTED: (u64, u64) = (1, 2);

/// Parses `"MAJOR.MINOR[.PATCH]"`, applying the version policy: another
/// major version is an error, a newer minor version a warning.
pub(crate) fn check_version(
    version: &str,
    at: &Location,
    warnings: &mut Vec<Warning>,
) -> Result<(u64, u64)> {
    let bad = |reason: &str| {
        Error::invalid(
            at.clone(),
            Rule::Version {
                version: version.to_owned(),
                reason: reason.to_owned(),
            },
        )
    };
    let mut parts = version.split('.');
    let mut next = || -> Option<u64> { parts.next().and_then(|p| p.parse().ok()) };
    let major = next().ok_or_else(|| bad("expected MAJOR.MINOR[.PATCH]"))?;
    let minor = next().unwrap_or(0);
    if major != SUPPORTED.0 {
        return Err(bad(&format!(
            "major version {major} differs from the supported {}",
            SUPPORTED.0
        )));
    }
    if minor > SUPPORTED.1 {
        warnings.push(Warning::new(
            at.clone(),
            format!(
                "file version {version} is newer than {}.{}; fields it added are ignored",
                SUPPORTED.0, SUPPORTED.1
            ),
        ));
    }
    Ok((major, minor))
}

pub(crate) fn manifest(
    root: &Value,
    at: &Location,
    warnings: &mut Vec<Warning>,
) -> Result<Manifest> {
    let inv = |rule| Error::invalid(at.clone(), rule);
    let map = match root {
        Value::Map(_) => Map::new(root, "manifest").map_err(inv)?,
        other => {
            return Err(inv(Rule::ManifestNotMap {
                found: cbor::kind(other),
                expected: "map",
            }))
        }
    };
    let version = map
        .text("version")
        .map_err(inv)?
        .ok_or_else(|| inv(Rule::MissingField { field: "version" }))?;
    check_version(version, at, warnings)?;
    let attributes = map.attributes("attributes").map_err(inv)?;
    let objects_value = map
        .get("objects")
        .ok_or_else(|| inv(Rule::MissingField { field: "objects" }))?;
    let objects_map = Map::new(objects_value, "objects").map_err(inv)?;
    let mut objects = BTreeMap::new();
    for (name, value) in objects_map.iter() {
        let obj = object(value, &at.object(name))?;
        objects.insert(name.to_owned(), obj);
    }
    Ok(Manifest {
        version: version.to_owned(),
        origin: Origin::V1,
        attributes,
        objects,
    })
}

fn object(value: &Value, at: &Location) -> Result<Object> {
    let inv = |rule| Error::invalid(at.clone(), rule);
    let map = Map::new(value, "object").map_err(inv)?;
    let shape = map
        .shape("shape")
        .map_err(inv)?
        .ok_or_else(|| inv(Rule::MissingField { field: "shape" }))?;
    let format = map
        .text("format")
        .map_err(inv)?
        .ok_or_else(|| inv(Rule::MissingField { field: "format" }))?;
    let attributes = map.attributes("attributes").map_err(inv)?;
    let comps_value = map.get("components").ok_or_else(|| {
        inv(Rule::MissingField {
            field: "components",
        })
    })?;
    let comps = Map::new(comps_value, "components").map_err(inv)?;
    let object_name = at.object.as_deref().unwrap_or_default();
    let mut components = BTreeMap::new();
    for (role, v) in comps.iter() {
        let c = component(v, &at.component(object_name, role))?;
        components.insert(role.to_owned(), c);
    }
    Ok(Object {
        shape,
        format: Format::parse(format),
        attributes,
        components,
    })
}

fn component(value: &Value, at: &Location) -> Result<Component> {
    let inv = |rule| Error::invalid(at.clone(), rule);
    let map = Map::new(value, "component").map_err(inv)?;
    let dtype_text = map
        .text("dtype")
        .map_err(inv)?
        .ok_or_else(|| inv(Rule::MissingField { field: "dtype" }))?;
    let dtype = DType::from_name(dtype_text).ok_or_else(|| {
        inv(Rule::UnknownDtype {
            value: dtype_text.to_owned(),
            hint: unknown_dtype_hint(dtype_text),
        })
    })?;
    let logical_type = map.text("type").map_err(inv)?.map(LogicalType::parse);
    let encoding = match map.text("encoding").map_err(inv)? {
        None | Some("raw") => Encoding::Raw,
        Some("zstd") => Encoding::Zstd,
        Some(other) => {
            return Err(inv(Rule::UnknownEncoding {
                value: other.to_owned(),
            }))
        }
    };
    let digest = map
        .text("digest")
        .map_err(inv)?
        .map(Digest::parse)
        .transpose()
        .map_err(inv)?;
    Ok(Component {
        dtype,
        logical_type,
        offset: map.required_u64("offset").map_err(inv)?,
        length: map.required_u64("length").map_err(inv)?,
        uncompressed_length: map.u64("uncompressed_length").map_err(inv)?,
        encoding,
        digest,
        legacy: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_policy() {
        let at = Location::file("t");
        let mut w = Vec::new();
        assert_eq!(check_version("1.2.0", &at, &mut w).unwrap(), (1, 2));
        assert!(w.is_empty());
        check_version("1.3.0", &at, &mut w).unwrap();
        assert_eq!(w.len(), 1);
        assert!(check_version("2.0.0", &at, &mut w).is_err());
        assert!(check_version("x", &at, &mut w).is_err());
    }
}
