//! `zt export`: dense objects to safetensors.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use zt_format::{write_atomic, Component, DType, Error, Format, Location, ZtFile};

use zt_format::manifest_json::cbor_to_json;

fn to_safetensors(c: &Component) -> Option<Dtype> {
    if let Some(t) = &c.logical_type {
        return match t.name() {
            "f8_e4m3fn" => Some(Dtype::F8_E4M3),
            "f8_e5m2" => Some(Dtype::F8_E5M2),
            _ => None,
        };
    }
    // A dtype added later has no safetensors spelling until given one here.
    Some(match c.dtype {
        DType::F64 => Dtype::F64,
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::I64 => Dtype::I64,
        DType::I32 => Dtype::I32,
        DType::I16 => Dtype::I16,
        DType::I8 => Dtype::I8,
        DType::U64 => Dtype::U64,
        DType::U32 => Dtype::U32,
        DType::U16 => Dtype::U16,
        DType::U8 => Dtype::U8,
        DType::Bool => Dtype::BOOL,
        _ => return None,
    })
}

/// Writes every object of `file` to a safetensors file at `output`.
/// Fails, writing nothing, if any object cannot be expressed there.
pub fn run(file: &ZtFile, output: &Path) -> Result<usize> {
    let m = file.manifest();
    let mut datas = Vec::with_capacity(m.objects.len());
    for (name, obj) in &m.objects {
        let at = || format!("{}: object {name:?}", file.label());
        if obj.format != Format::Dense {
            bail!(
                "{}: format {:?} cannot be expressed in safetensors (dense tensors only)",
                at(),
                obj.format.name()
            );
        }
        let c = obj
            .components
            .get("data")
            .context("dense object without data")?;
        let Some(dt) = to_safetensors(c) else {
            bail!(
                "{}: type {:?} has no safetensors dtype",
                at(),
                c.type_name()
            );
        };
        datas.push((name, dt, obj.shape.clone(), file.read(name, "data")?));
    }
    let mut views = Vec::with_capacity(datas.len());
    for (name, dt, shape, data) in &datas {
        let shape: Vec<usize> = shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<_, _>>()?;
        let view = TensorView::new(*dt, shape, data)
            .with_context(|| format!("{}: object {name:?}", file.label()))?;
        views.push((*name, view));
    }
    let metadata: HashMap<String, String> = m
        .attributes
        .iter()
        .map(|(k, v)| {
            let s = match cbor_to_json(v) {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect();
    let metadata = (!metadata.is_empty()).then_some(metadata);
    let bytes = safetensors::serialize(views, metadata).context("serializing safetensors")?;
    let label = output.display().to_string();
    write_atomic(output, |w| {
        std::io::Write::write_all(w, &bytes).map_err(|e| Error::Io {
            at: Location {
                file: label.clone(),
                ..Location::default()
            },
            context: "writing output",
            source: e,
        })
    })?;
    Ok(datas.len())
}
