//! NumPy `.npy` input (also the entries of `.npz` archives).

use std::borrow::Cow;

use anyhow::{bail, Context, Result};
use zt_format::DType;

use super::Item;

const MAGIC: &[u8] = b"\x93NUMPY";

/// Parses one `.npy` file into a dense item.
pub(super) fn item<'a>(
    label: &str,
    name: String,
    position: u64,
    bytes: &'a [u8],
) -> Result<Item<'a>> {
    let (header, data) = split(bytes).with_context(|| format!("{label}: not a valid .npy file"))?;
    let descr = field(header, "descr").with_context(|| format!("{label}: header has no descr"))?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    if field(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
        bail!("{label}: Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
    }
    let shape = parse_shape(field(header, "shape").unwrap_or("()"))
        .with_context(|| format!("{label}: bad shape in header"))?;
    let (order, code) = descr.split_at(descr.len().min(1));
    let dtype = match code {
        "f8" => DType::F64,
        "f4" => DType::F32,
        "f2" => DType::F16,
        "i8" => DType::I64,
        "i4" => DType::I32,
        "i2" => DType::I16,
        "i1" => DType::I8,
        "u8" => DType::U64,
        "u4" => DType::U32,
        "u2" => DType::U16,
        "u1" => DType::U8,
        "b1" => DType::Bool,
        _ => bail!("{label}: numpy dtype {descr:?} has no zTensor dtype"),
    };
    let count =
        zt_format::element_count(&shape).with_context(|| format!("{label}: shape overflows"))?;
    let len = usize::try_from(count.saturating_mul(dtype.size()))?;
    let data = data.get(..len).with_context(|| {
        format!(
            "{label}: data holds {} bytes, shape needs {len}",
            data.len()
        )
    })?;
    let data = if order == ">" && dtype.size() > 1 {
        let mut v = data.to_vec();
        for c in v.chunks_exact_mut(dtype.size() as usize) {
            c.reverse();
        }
        Cow::Owned(v)
    } else {
        Cow::Borrowed(data)
    };
    Ok(Item::dense(name, position, shape, dtype, None, data))
}

fn split(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let (&major, rest) = rest.split_first()?;
    let (_, rest) = rest.split_first()?;
    let (len, rest) = if major == 1 {
        let (l, r) = rest.split_at_checked(2)?;
        (u16::from_le_bytes(l.try_into().ok()?) as usize, r)
    } else {
        let (l, r) = rest.split_at_checked(4)?;
        (u32::from_le_bytes(l.try_into().ok()?) as usize, r)
    };
    let (header, data) = rest.split_at_checked(len)?;
    Some((std::str::from_utf8(header).ok()?, data))
}

/// The raw text of a key's value in the header's Python dict literal.
fn field<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let start = header.find(&format!("'{key}'"))?;
    let rest = header.get(start..)?.split_once(':')?.1.trim_start();
    if rest.starts_with('(') {
        rest.split_inclusive(')').next()
    } else {
        rest.split(',').next().map(str::trim)
    }
}

fn parse_shape(s: &str) -> Option<Vec<u64>> {
    s.trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.trim_end_matches('L').parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_header() {
        let h = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }";
        assert_eq!(field(h, "descr"), Some("'<f4'"));
        assert_eq!(parse_shape(field(h, "shape").unwrap()), Some(vec![3, 4]));
        assert_eq!(parse_shape("(5,)"), Some(vec![5]));
        assert_eq!(parse_shape("()"), Some(vec![]));
    }
}
