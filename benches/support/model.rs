//! Synthetic models for the network benchmarks, shared by `benches/fetch`
//! and `examples/make_bench_model.rs`.

use std::path::Path;

use zt_format::{write_atomic, DType, DigestAlgorithm, StoreOptions, Writer};

/// `n` pseudo-random bytes (xorshift): incompressible, reproducible.
pub(crate) fn noise(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn store(digest: Option<DigestAlgorithm>) -> StoreOptions {
    StoreOptions {
        zstd_level: None,
        digest,
    }
}

/// One dense u8 tensor of `gib` GiB.
pub(crate) fn one_tensor(
    out: &Path,
    gib: usize,
    digest: Option<DigestAlgorithm>,
) -> Result<(), Box<dyn std::error::Error>> {
    let data = noise(gib << 30, 7);
    let label = out.display().to_string();
    write_atomic(out, |w| {
        let mut writer = Writer::new(w, &label)?;
        writer.add_dense(
            "weight",
            &[data.len() as u64],
            DType::U8,
            &data,
            store(digest),
        )?;
        writer.finish()?;
        Ok(())
    })?;
    Ok(())
}

/// `layers` transformer-style layers of `mib` MiB each (two bf16 tensors
/// per layer), plus an embedding before them and a norm after them.
pub(crate) fn layers(
    out: &Path,
    layers: u64,
    mib: usize,
    digest: Option<DigestAlgorithm>,
) -> Result<(), Box<dyn std::error::Error>> {
    let label = out.display().to_string();
    let half = (mib << 20) / 2;
    write_atomic(out, |w| {
        let mut writer = Writer::new(w, &label)?;
        let embed = noise(1 << 20, 99);
        writer.add_dense(
            "model.embed_tokens.weight",
            &[embed.len() as u64 / 2],
            DType::BF16,
            &embed,
            store(digest),
        )?;
        for l in 0..layers {
            for (i, part) in ["self_attn.qkv_proj.weight", "mlp.up_proj.weight"]
                .iter()
                .enumerate()
            {
                let data = noise(half, l * 2 + i as u64 + 1);
                let name = format!("model.layers.{l}.{part}");
                writer.add_dense(
                    &name,
                    &[data.len() as u64 / 2],
                    DType::BF16,
                    &data,
                    store(digest),
                )?;
            }
        }
        let norm = noise(4096, 98);
        writer.add_dense(
            "model.norm.weight",
            &[norm.len() as u64 / 2],
            DType::BF16,
            &norm,
            store(digest),
        )?;
        writer.finish()?;
        Ok(())
    })?;
    Ok(())
}

/// The tensors of [`layers`] (no digests: a safetensors file has none) as
/// one safetensors file: what a byte-identical copy is measured on.
pub(crate) fn layers_safetensors(
    out: &Path,
    layers: u64,
    mib: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    use safetensors::tensor::TensorView;
    let half = (mib << 20) / 2;
    let mut tensors: Vec<(String, Vec<u8>)> =
        vec![("model.embed_tokens.weight".into(), noise(1 << 20, 99))];
    for l in 0..layers {
        for (i, part) in ["self_attn.qkv_proj.weight", "mlp.up_proj.weight"]
            .iter()
            .enumerate()
        {
            tensors.push((
                format!("model.layers.{l}.{part}"),
                noise(half, l * 2 + i as u64 + 1),
            ));
        }
    }
    tensors.push(("model.norm.weight".into(), noise(4096, 98)));
    let views = tensors
        .iter()
        .map(|(name, data)| {
            let view = TensorView::new(safetensors::Dtype::BF16, vec![data.len() / 2], data)?;
            Ok((name.as_str(), view))
        })
        .collect::<Result<Vec<_>, safetensors::SafeTensorError>>()?;
    let part = out.with_extension("safetensors.part");
    safetensors::serialize_to_file(views, None, &part)?;
    // Readable by a web server running as another user (nginx), as the
    // .zt files are.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&part, std::fs::Permissions::from_mode(0o644))?;
    std::fs::rename(part, out)?;
    Ok(())
}

/// `n` tiny objects: a manifest-heavy file for connect-and-manifest latency.
pub(crate) fn many_objects(out: &Path, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let label = out.display().to_string();
    write_atomic(out, |w| {
        let mut writer = Writer::new(w, &label)?;
        for i in 0..n {
            let data = noise(64, i as u64 + 1);
            let name = format!("model.layers.{}.block.{}.weight", i / 100, i % 100);
            writer.add_dense(
                &name,
                &[16],
                DType::F32,
                &data,
                store(Some(DigestAlgorithm::Crc32c)),
            )?;
        }
        writer.finish()?;
        Ok(())
    })?;
    Ok(())
}
