//! Legacy files: v1.0 (a map with `tensors`, long dtype names) and v0.1
//! (`ZTEN0001`, a CBOR array of tensor maps), read into the same model.
//!
//! Only v1.2 rules that legacy writers could not know about are relaxed:
//! a misaligned offset is a warning (the data is copied on read), zstd needs
//! no `uncompressed_length` (the size comes from the shape or the zstd frame).
//!
//! v0.1 sparse tensors come in two spellings:
//! - `layout: "sparse"` with `sparse_format: "csr"|"coo"`. The tensor's own
//!   `offset`/`size` hold the values; the index arrays are given either as
//!   maps (`indices: {offset, size}`) or as flat keys (`indices_offset`,
//!   `indices_size`); roles are `indices`/`indptr` for CSR and `coords` for COO.
//!   Without them the blob is read as the combined layout below.
//! - `layout: "sparsecsr"|"sparsecoo"`, as the 0.1.0 writer produced: one blob.
//!   CSR is `indptr (rows+1 x u64) | indices (nnz x u64) | values (nnz x dtype)`;
//!   COO holds `nnz` records of `ndim x u64` indices followed by one value.
//!   `nnz` comes from the blob's decoded size.

use std::collections::BTreeMap;

use ciborium::Value;

use crate::cbor::{self, Map};
use crate::component::{Component, Encoding};
use crate::components::Components;
use crate::digest::Digest;
use crate::dtype::{unknown_dtype_hint, DType};
use crate::error::{Error, Location, Result, Rule};
use crate::legacy_layout::{CsrRole, Extract, Part};
use crate::manifest::{element_count, Attributes, Format, Manifest, Object, Origin};
use crate::parse_v1::check_version;
use crate::warning::Warning;

/// The object attribute that keeps a v1.0 dtype for components of unknown
/// formats, which are read as `u8`.
pub const LEGACY_DTYPE_ATTRIBUTE: &str = "legacy_dtype";

fn legacy_dtype(s: &str, at: &Location) -> Result<DType> {
    DType::from_legacy_name(s)
        .or_else(|| DType::from_name(s))
        .ok_or_else(|| {
            Error::invalid(
                at.clone(),
                Rule::UnknownDtype {
                    value: s.to_owned(),
                    hint: unknown_dtype_hint(s),
                },
            )
        })
}

fn legacy_encoding(s: Option<&str>, at: &Location) -> Result<Encoding> {
    match s {
        None | Some("raw") => Ok(Encoding::Raw),
        Some("zstd") => Ok(Encoding::Zstd),
        Some(other) => Err(Error::invalid(
            at.clone(),
            Rule::UnknownEncoding {
                value: other.to_owned(),
            },
        )),
    }
}

fn parse_digest(s: Option<&str>, at: &Location) -> Result<Option<Digest>> {
    s.map(Digest::parse)
        .transpose()
        .map_err(|r| Error::invalid(at.clone(), r))
}

/// The decoded size of a dense tensor, used for legacy zstd without a length.
fn dense_size(shape: &[u64], dtype: DType, at: &Location) -> Result<u64> {
    element_count(shape)
        .and_then(|n| n.checked_mul(dtype.size()))
        .ok_or_else(|| {
            Error::invalid(
                at.clone(),
                Rule::ShapeOverflow {
                    shape: shape.to_vec(),
                },
            )
        })
}

/// Reads a v1.0 manifest (`tensors`).
pub(crate) fn manifest_v1_0(
    root: &Map<'_>,
    at: &Location,
    warnings: &mut Vec<Warning>,
) -> Result<Manifest> {
    let inv = |rule| Error::invalid(at.clone(), rule);
    let version = root
        .text("version")
        .map_err(inv)?
        .ok_or_else(|| inv(Rule::MissingField { field: "version" }))?;
    check_version(version, at, warnings)?;
    let mut attributes = root.attributes("attributes").map_err(inv)?;
    if let Some(g) = root.text("generator").map_err(inv)? {
        attributes
            .entry("generator".to_owned())
            .or_insert_with(|| Value::Text(g.to_owned()));
    }
    let tensors = Map::new(
        root.get("tensors")
            .ok_or_else(|| inv(Rule::MissingField { field: "tensors" }))?,
        "tensors",
    )
    .map_err(inv)?;
    let mut objects = BTreeMap::new();
    for (name, v) in tensors.iter() {
        let at = at.object(name);
        let inv = |rule| Error::invalid(at.clone(), rule);
        let t = Map::new(v, "tensor").map_err(inv)?;
        let dtype_text = t
            .text("dtype")
            .map_err(inv)?
            .ok_or_else(|| inv(Rule::MissingField { field: "dtype" }))?;
        let shape = t
            .shape("shape")
            .map_err(inv)?
            .ok_or_else(|| inv(Rule::MissingField { field: "shape" }))?;
        let format = Format::parse(t.text("format").map_err(inv)?.unwrap_or("dense"));
        let mut obj_attributes = t.attributes("attributes").map_err(inv)?;
        let known = !matches!(format, Format::Other(_));
        let tensor_dtype = if known {
            Some(legacy_dtype(dtype_text, &at)?)
        } else {
            obj_attributes.insert(
                LEGACY_DTYPE_ATTRIBUTE.to_owned(),
                Value::Text(dtype_text.to_owned()),
            );
            None
        };
        let comps = Map::new(
            t.get("components").ok_or_else(|| {
                inv(Rule::MissingField {
                    field: "components",
                })
            })?,
            "components",
        )
        .map_err(inv)?;
        let mut components = Components::new();
        for (role, cv) in comps.iter() {
            let cat = at.component(name, role);
            let cinv = |rule| Error::invalid(cat.clone(), rule);
            let c = Map::new(cv, "component").map_err(cinv)?;
            let dtype = match tensor_dtype {
                Some(_) if format.index_components().contains(&role) => DType::U64,
                Some(d) => d,
                None => DType::U8,
            };
            let encoding = legacy_encoding(c.text("encoding").map_err(cinv)?, &cat)?;
            let uncompressed_length = match (encoding, &format, role) {
                (Encoding::Zstd, Format::Dense, "data") => Some(dense_size(&shape, dtype, &cat)?),
                (Encoding::Zstd, ..) => c.u64("uncompressed_length").map_err(cinv)?,
                (Encoding::Raw, ..) => None,
            };
            components.insert(
                role.to_owned(),
                Component {
                    dtype,
                    logical_type: None,
                    offset: c.required_u64("offset").map_err(cinv)?,
                    length: c.required_u64("length").map_err(cinv)?,
                    uncompressed_length,
                    encoding,
                    digest: parse_digest(c.text("digest").map_err(cinv)?, &cat)?,
                    digest_computed: false,
                    synthesized: false,
                    file: None,
                    legacy: None,
                    slot: 0,
                },
            );
        }
        objects.insert(
            name.to_owned(),
            Object {
                shape,
                format,
                attributes: obj_attributes,
                components,
            },
        );
    }
    Ok(Manifest {
        version: version.to_owned(),
        origin: Origin::V1_0,
        source: crate::Source::Zt,
        files: Default::default(),
        attributes,
        objects: objects.into_iter().collect(),
    })
}

/// Reads a v0.1 manifest (an array of tensor maps).
pub(crate) fn manifest_v0_1(root: &Value, at: &Location) -> Result<Manifest> {
    let items = match root {
        Value::Array(items) => items,
        other => {
            return Err(Error::invalid(
                at.clone(),
                Rule::ManifestNotMap {
                    found: cbor::kind(other),
                    expected: "array (v0.1)",
                },
            ))
        }
    };
    let mut objects = BTreeMap::new();
    for (i, item) in items.iter().enumerate() {
        let label = format!("#{i}");
        let item_at = at.object(&label);
        let t = Map::new(item, "tensor").map_err(|r| Error::invalid(item_at.clone(), r))?;
        let name = t
            .text("name")
            .map_err(|r| Error::invalid(item_at.clone(), r))?
            .ok_or_else(|| Error::invalid(item_at.clone(), Rule::MissingField { field: "name" }))?;
        let oat = at.object(name);
        if objects.contains_key(name) {
            return Err(Error::invalid(
                oat,
                Rule::DuplicateKey {
                    key: name.to_owned(),
                    context: "tensor names".to_owned(),
                },
            ));
        }
        let obj = tensor_v0_1(&t, &oat)?;
        objects.insert(name.to_owned(), obj);
    }
    Ok(Manifest {
        version: "0.1.0".to_owned(),
        origin: Origin::V0_1,
        source: crate::Source::Zt,
        files: Default::default(),
        attributes: Attributes::new(),
        objects: objects.into_iter().collect(),
    })
}

fn tensor_v0_1(t: &Map<'_>, at: &Location) -> Result<Object> {
    let inv = |rule| Error::invalid(at.clone(), rule);
    let dtype_text = t
        .text("dtype")
        .map_err(inv)?
        .ok_or_else(|| inv(Rule::MissingField { field: "dtype" }))?;
    let dtype = legacy_dtype(dtype_text, at)?;
    let shape = t.shape("shape").map_err(inv)?.unwrap_or_default();
    let offset = t.required_u64("offset").map_err(inv)?;
    let size = t.required_u64("size").map_err(inv)?;
    let encoding = legacy_encoding(t.text("encoding").map_err(inv)?, at)?;
    let digest = parse_digest(t.text("checksum").map_err(inv)?, at)?;
    let big_endian = t.text("data_endianness").map_err(inv)? == Some("big");
    let layout = t.text("layout").map_err(inv)?.unwrap_or("dense");
    let sparse_format = t.text("sparse_format").map_err(inv)?;
    let kind = match (layout, sparse_format) {
        ("dense", _) => Format::Dense,
        ("sparse", Some("csr")) | ("sparsecsr", _) => Format::SparseCsr,
        ("sparse", Some("coo")) | ("sparsecoo", _) => Format::SparseCoo,
        (other, sf) => {
            let v = match sf {
                Some(sf) => format!("{other}/{sf}"),
                None => other.to_owned(),
            };
            return Err(inv(Rule::FieldType {
                field: format!("layout {v:?}"),
                expected: "dense, sparse (csr|coo), sparsecsr or sparsecoo",
            }));
        }
    };
    let blob = |dtype: DType, part: Part, uncompressed: Option<u64>| Component {
        dtype,
        logical_type: None,
        offset,
        length: size,
        uncompressed_length: uncompressed,
        encoding,
        digest: digest.clone(),
        digest_computed: false,
        synthesized: false,
        file: None,
        legacy: ((big_endian && dtype.size() > 1) || part != Part::Whole).then(|| {
            Box::new(Extract {
                big_endian,
                width: dtype.size(),
                part,
            })
        }),
        slot: 0,
    };
    let mut components = Components::new();
    match kind {
        Format::Dense => {
            let unc = match encoding {
                Encoding::Zstd => Some(dense_size(&shape, dtype, at)?),
                Encoding::Raw => None,
            };
            components.insert("data".to_owned(), blob(dtype, Part::Whole, unc));
        }
        Format::SparseCsr | Format::SparseCoo => {
            let roles: &[&str] = if kind == Format::SparseCsr {
                &["indices", "indptr"]
            } else {
                &["coords"]
            };
            let separate = roles
                .iter()
                .map(|r| separate_part(t, r, at))
                .collect::<Result<Option<Vec<_>>>>()?;
            if let Some(parts) = separate {
                // Seed spelling with separate arrays: the tensor's blob holds the values.
                components.insert("values".to_owned(), blob(dtype, Part::Whole, None));
                for (role, (off, len)) in roles.iter().zip(parts) {
                    components.insert(
                        (*role).to_owned(),
                        Component {
                            dtype: DType::U64,
                            logical_type: None,
                            offset: off,
                            length: len,
                            uncompressed_length: None,
                            encoding,
                            digest: None,
                            digest_computed: false,
                            synthesized: false,
                            file: None,
                            legacy: big_endian.then(|| {
                                Box::new(Extract {
                                    big_endian,
                                    width: 8,
                                    part: Part::Whole,
                                })
                            }),
                            slot: 0,
                        },
                    );
                }
            } else if kind == Format::SparseCsr {
                let rows = shape.first().copied().unwrap_or(0);
                for (role, r) in [
                    ("indptr", CsrRole::Indptr),
                    ("indices", CsrRole::Indices),
                    ("values", CsrRole::Values),
                ] {
                    let d = if r == CsrRole::Values {
                        dtype
                    } else {
                        DType::U64
                    };
                    let part = Part::Csr {
                        role: r,
                        rows,
                        value_size: dtype.size(),
                    };
                    components.insert(role.to_owned(), blob(d, part, None));
                }
            } else {
                let ndim = shape.len() as u64;
                for (role, values) in [("coords", false), ("values", true)] {
                    let d = if values { dtype } else { DType::U64 };
                    let part = Part::Coo {
                        values,
                        ndim,
                        value_size: dtype.size(),
                    };
                    components.insert(role.to_owned(), blob(d, part, None));
                }
            }
        }
        _ => {}
    }
    Ok(Object {
        shape,
        format: kind,
        attributes: Attributes::new(),
        components,
    })
}

/// Finds a separately stored index array in the seed spelling of v0.1 sparse tensors.
fn separate_part(t: &Map<'_>, role: &str, at: &Location) -> Result<Option<(u64, u64)>> {
    let inv = |rule| Error::invalid(at.clone(), rule);
    if let Some(v) = t.get(role) {
        let m = Map::new(v, role).map_err(inv)?;
        let off = m.required_u64("offset").map_err(inv)?;
        let len = match m.u64("size").map_err(inv)? {
            Some(l) => l,
            None => m.required_u64("length").map_err(inv)?,
        };
        return Ok(Some((off, len)));
    }
    let find = |suffix: &str| {
        t.iter()
            .find(|(k, _)| k.strip_prefix(role).and_then(|r| r.strip_prefix('_')) == Some(suffix))
            .map(|(_, v)| cbor::as_u64(v))
    };
    match (find("offset"), find("size").or_else(|| find("length"))) {
        (Some(Some(o)), Some(Some(l))) => Ok(Some((o, l))),
        (None, None) => Ok(None),
        _ => Err(inv(Rule::FieldType {
            field: format!("{role}_offset/{role}_size"),
            expected: "unsigned integers",
        })),
    }
}
