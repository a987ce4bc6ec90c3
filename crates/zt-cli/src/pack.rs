//! `zt pack`: tensors from safetensors, `.npy`, `.npz` and `.zt` files into
//! one v1.2 file, blobs in layer order so that the file streams well.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use indicatif::{ProgressBar, ProgressStyle};
use zt_format::{layer_order, write_atomic, ComponentData, ReadOptions, StoreOptions, Writer};

use crate::import::{Item, Source};

/// Options for [`run`].
#[derive(Debug, Clone, Copy)]
pub struct PackOptions {
    pub store: StoreOptions,
    pub read: ReadOptions,
    pub progress: bool,
}

/// What was written.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub objects: usize,
    pub bytes_in: u64,
}

/// Packs `inputs` into `output`, atomically.
pub fn run(inputs: &[PathBuf], output: &Path, opts: PackOptions) -> Result<Summary> {
    let sources = inputs
        .iter()
        .map(|p| Source::load(p, opts.read))
        .collect::<Result<Vec<_>>>()?;
    let mut items: Vec<Item<'_>> = Vec::new();
    let mut attributes = zt_format::Attributes::new();
    let mut seen: HashMap<String, &Path> = HashMap::new();
    for (source, path) in sources.iter().zip(inputs) {
        let label = path.display().to_string();
        let (mut its, attrs) = source.items(&label)?;
        // Input order first, then position inside the input.
        its.sort_by_key(|i| i.position);
        for it in &its {
            if let Some(prev) = seen.insert(it.name.clone(), path) {
                bail!(
                    "object {:?} appears in both {} and {}; rename one before packing",
                    it.name,
                    prev.display(),
                    path.display()
                );
            }
        }
        for (k, v) in attrs {
            attributes.entry(k).or_insert(v);
        }
        items.extend(its);
    }
    let keyed: Vec<(&str, u64)> = items
        .iter()
        .enumerate()
        .map(|(rank, it)| (it.name.as_str(), rank as u64))
        .collect();
    let order = layer_order(&keyed);
    let total: u64 = items.iter().map(Item::byte_len).sum();
    let bar = progress_bar(opts.progress, total);
    let label = output.display().to_string();
    write_atomic(output, |w| {
        let mut writer = Writer::new(w, &label)?;
        for (k, v) in &attributes {
            writer.set_attribute(k, v.clone());
        }
        for &i in &order {
            let Some(it) = items.get(i) else { continue };
            let comps: Vec<ComponentData<'_>> = it
                .components
                .iter()
                .map(|c| ComponentData {
                    role: &c.role,
                    dtype: c.dtype,
                    logical_type: c.logical_type.as_deref(),
                    data: &c.data,
                })
                .collect();
            writer.add_object(
                &it.name,
                &it.shape,
                &it.format,
                it.attributes.clone(),
                &comps,
                opts.store,
            )?;
            bar.inc(it.byte_len());
        }
        writer.finish()?;
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(Summary {
        objects: items.len(),
        bytes_in: total,
    })
}

fn progress_bar(enabled: bool, total: u64) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    if let Ok(style) =
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
    {
        bar.set_style(style);
    }
    bar
}

/// A `--compress` choice: `None` for raw, or a zstd level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compress(pub Option<i32>);

/// Parses `none`, `zstd` or `zstd:LEVEL` (default level 3).
pub fn parse_compress(s: &str) -> Result<Compress, String> {
    match s.split_once(':') {
        None if s == "zstd" => Ok(Compress(Some(3))),
        None if s == "none" => Ok(Compress(None)),
        Some(("zstd", level)) => {
            let l: i32 = level
                .parse()
                .map_err(|_| format!("bad zstd level {level:?}"))?;
            if !(1..=22).contains(&l) {
                return Err(format!("zstd level {l} is outside 1..=22"));
            }
            Ok(Compress(Some(l)))
        }
        _ => Err(format!("expected zstd, zstd:LEVEL or none, got {s:?}")),
    }
}
