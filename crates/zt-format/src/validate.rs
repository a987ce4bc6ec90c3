//! The structural rules every manifest must pass, whatever its version.
//! v1.2-only rules (alignment, zstd lengths) are relaxed for legacy origins.

use crate::aligned::ALIGNMENT;
use crate::component::{Component, Encoding};
use crate::dtype::DType;
use crate::error::{Error, Location, Result, Rule};
use crate::manifest::{element_count, Format, Manifest, Object};
use crate::warning::Warning;

/// The part of the file where blobs may lie: after the header, before the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobArea {
    pub start: u64,
    pub end: u64,
}

pub(crate) fn manifest(
    m: &Manifest,
    area: BlobArea,
    at: &Location,
    warnings: &mut Vec<Warning>,
) -> Result<()> {
    // Other sources place tensors where their format puts them.
    manifest_with(m, area, m.source.is_aligned(), at, warnings)
}

/// [`manifest`], with the 64-byte alignment of offsets checked only when
/// `aligned` (a view of part of a component, such as rows, starts where
/// the rows do).
pub(crate) fn manifest_with(
    m: &Manifest,
    area: BlobArea,
    aligned: bool,
    at: &Location,
    warnings: &mut Vec<Warning>,
) -> Result<()> {
    let legacy = m.origin.is_legacy();
    // Extents by the file they lie in (`None`: the served file).
    let mut extents: Vec<(Option<&str>, u64, u64, &str, &str)> = Vec::new();
    for (name, obj) in &m.objects {
        object(name, obj, at, legacy)?;
        for (role, c) in &obj.components {
            let cat = || at.component(name, role);
            let inv = |rule| Error::invalid(cat(), rule);
            if c.synthesized {
                // Not in the file: no place in it to check.
                if m.source.is_aligned() {
                    return Err(inv(Rule::FieldType {
                        field: "placement".to_owned(),
                        expected: "\"file\" (a .zt file holds every component)",
                    }));
                }
                continue;
            }
            if aligned && c.offset % ALIGNMENT != 0 {
                if legacy {
                    warnings.push(Warning::new(
                        cat(),
                        format!(
                            "offset {} is not a multiple of 64; it is copied on read",
                            c.offset
                        ),
                    ));
                } else {
                    return Err(inv(Rule::Misaligned { offset: c.offset }));
                }
            }
            let end = c.offset.checked_add(c.length).ok_or_else(|| {
                inv(Rule::RangeOverflow {
                    offset: c.offset,
                    length: c.length,
                })
            })?;
            // A component of another file lies anywhere in that file.
            let area = match &c.file {
                None => area,
                Some(f) => match m.files.get(&**f) {
                    Some(part) => BlobArea {
                        start: 0,
                        end: part.size,
                    },
                    None => {
                        return Err(inv(Rule::UnknownFile {
                            file: f.to_string(),
                        }))
                    }
                },
            };
            if c.offset < area.start || end > area.end {
                return Err(inv(Rule::OutOfBounds {
                    start: c.offset,
                    end,
                    area_start: area.start,
                    area_end: area.end,
                }));
            }
            if c.length > 0 {
                extents.push((c.file.as_deref(), c.offset, end, name, role));
            }
        }
    }
    // Legacy sparse blobs are shared by the components cut from them.
    // Usually already in offset order; checking the order by the start
    // alone suffices, since equal starts with non-zero lengths overlap
    // anyway (the sort includes the end for the legacy dedup below).
    if !extents.is_sorted_by_key(|e| (e.0, e.1)) {
        // Most manifests name no other file: offsets alone, compared
        // without the file's name.
        if extents.iter().all(|e| e.0.is_none()) {
            extents.sort_unstable_by_key(|e| (e.1, e.2));
        } else {
            extents.sort_unstable_by_key(|e| (e.0, e.1, e.2));
        }
    }
    extents.dedup_by(|b, a| legacy && a.0 == b.0 && a.1 == b.1 && a.2 == b.2);
    for pair in extents.windows(2) {
        if let [(a_file, _, a_end, a_obj, a_role), (b_file, b_start, b_end, b_obj, b_role)] = pair {
            if a_file == b_file && b_start < a_end {
                return Err(Error::invalid(
                    at.component(b_obj, b_role),
                    Rule::Overlap {
                        start: *b_start,
                        end: *b_end,
                        other_object: (*a_obj).to_owned(),
                        other_component: (*a_role).to_owned(),
                    },
                ));
            }
        }
    }
    Ok(())
}

pub(crate) fn object(name: &str, obj: &Object, at: &Location, legacy: bool) -> Result<()> {
    for role in obj.format.required_components() {
        if !obj.components.contains_key(role) {
            return Err(Error::invalid(
                at.object(name),
                Rule::MissingComponent {
                    format: obj.format.name().to_owned(),
                    role,
                },
            ));
        }
    }
    if obj.format == Format::Ragged {
        crate::ragged::check_object(obj)
            .map_err(|(role, rule)| Error::invalid(at.component(name, role), rule))?;
    }
    let count = element_count(&obj.shape);
    for (role, c) in &obj.components {
        let inv = |rule| Error::invalid(at.component(name, role), rule);
        if obj.format.index_components().contains(&role) && c.dtype != DType::U64 {
            return Err(inv(Rule::SparseIndexDtype {
                found: c.dtype.name().to_owned(),
            }));
        }
        if let Some(t) = &c.logical_type {
            if let Some(required) = t.required_dtype() {
                if required != c.dtype {
                    return Err(inv(Rule::TypeDtype {
                        logical: t.name().to_owned(),
                        expected: required.name(),
                        found: c.dtype.name().to_owned(),
                    }));
                }
            }
        }
        if c.encoding == Encoding::Zstd && c.uncompressed_length.is_none() && !legacy {
            return Err(inv(Rule::ZstdWithoutLength));
        }
        if c.is_transformed() {
            continue;
        }
        if let Some(decoded) = c.decoded_length() {
            if decoded.checked_rem(c.dtype.size()) != Some(0) {
                return Err(inv(Rule::PartialElement {
                    length: decoded,
                    dtype: c.dtype.name().to_owned(),
                }));
            }
            if obj.format == Format::Dense && role == "data" && known_ratio(c) {
                let expected = count
                    .and_then(|n| n.checked_mul(c.ratio()))
                    .and_then(|n| n.checked_mul(c.dtype.size()))
                    .ok_or_else(|| {
                        inv(Rule::ShapeOverflow {
                            shape: obj.shape.clone(),
                        })
                    })?;
                if decoded != expected {
                    return Err(inv(Rule::LengthMismatch {
                        actual: decoded,
                        expected,
                        shape: obj.shape.clone(),
                        dtype: c.type_name().to_owned(),
                    }));
                }
            }
        }
    }
    Ok(())
}

/// Unknown logical types may pack elements in ways we cannot size.
fn known_ratio(c: &Component) -> bool {
    !matches!(c.logical_type, Some(crate::LogicalType::Other(_)))
}
