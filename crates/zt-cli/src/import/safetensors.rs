//! safetensors input.

use std::borrow::Cow;

use anyhow::{bail, Context, Result};
use safetensors::{Dtype, SafeTensors};
use zt_format::{Attributes, DType};

use super::{text, Item};

/// Maps a safetensors dtype to a storage dtype and logical type.
pub(crate) fn from_safetensors(d: Dtype) -> Option<(DType, Option<&'static str>)> {
    Some(match d {
        Dtype::F64 => (DType::F64, None),
        Dtype::F32 => (DType::F32, None),
        Dtype::F16 => (DType::F16, None),
        Dtype::BF16 => (DType::BF16, None),
        Dtype::I64 => (DType::I64, None),
        Dtype::I32 => (DType::I32, None),
        Dtype::I16 => (DType::I16, None),
        Dtype::I8 => (DType::I8, None),
        Dtype::U64 => (DType::U64, None),
        Dtype::U32 => (DType::U32, None),
        Dtype::U16 => (DType::U16, None),
        Dtype::U8 => (DType::U8, None),
        Dtype::BOOL => (DType::Bool, None),
        Dtype::F8_E4M3 => (DType::U8, Some("f8_e4m3fn")),
        Dtype::F8_E5M2 => (DType::U8, Some("f8_e5m2")),
        _ => return None,
    })
}

pub(super) fn items<'a>(label: &str, bytes: &'a [u8]) -> Result<(Vec<Item<'a>>, Attributes)> {
    let st = SafeTensors::deserialize(bytes)
        .with_context(|| format!("{label}: not a valid safetensors file"))?;
    let (_, meta) =
        SafeTensors::read_metadata(bytes).with_context(|| format!("{label}: reading metadata"))?;
    let mut attributes = Attributes::new();
    if let Some(m) = meta.metadata() {
        for (k, v) in m {
            attributes.insert(k.clone(), text(v));
        }
    }
    let mut items = Vec::new();
    for (name, view) in st.tensors() {
        let Some((dtype, logical)) = from_safetensors(view.dtype()) else {
            bail!(
                "{label}: tensor {name:?} has dtype {:?}, which zTensor cannot store",
                view.dtype()
            );
        };
        let data = view.data();
        // Position: where the tensor's data sat in the input.
        let position = (data.as_ptr() as usize).saturating_sub(bytes.as_ptr() as usize) as u64;
        let shape = view.shape().iter().map(|&d| d as u64).collect();
        items.push(Item::dense(
            name,
            position,
            shape,
            dtype,
            logical,
            Cow::Borrowed(data),
        ));
    }
    Ok((items, attributes))
}
