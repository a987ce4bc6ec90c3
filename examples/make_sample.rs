//! Writes the deterministic sample model shipped as `models/sample.zt`:
//! a 4-layer decoder with Llama-style names, bf16 weights, f32 norms.
//!
//! `cargo run --example make_sample -- models/sample.zt`

use std::path::PathBuf;

use half::bf16;
use zt_format::{write_atomic, CborValue, DType, DigestAlgorithm, StoreOptions, Writer};

/// xorshift64*: deterministic on every platform, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        (x as f32 / (1u64 << 24) as f32 - 0.5) * 0.08
    }
}

const HIDDEN: u64 = 128;
const INTER: u64 = 344;
const VOCAB: u64 = 1000;
const LAYERS: u64 = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out: PathBuf = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "models/sample.zt".into())
        .into();
    let mut rng = Rng(0x005e_ed0f_2a7e_5e27);
    let mut weights: Vec<(String, Vec<u64>, bool)> = vec![(
        "model.embed_tokens.weight".into(),
        vec![VOCAB, HIDDEN],
        false,
    )];
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        for (n, shape) in [
            ("input_layernorm.weight", vec![HIDDEN]),
            ("self_attn.q_proj.weight", vec![HIDDEN, HIDDEN]),
            ("self_attn.k_proj.weight", vec![HIDDEN, HIDDEN]),
            ("self_attn.v_proj.weight", vec![HIDDEN, HIDDEN]),
            ("self_attn.o_proj.weight", vec![HIDDEN, HIDDEN]),
            ("post_attention_layernorm.weight", vec![HIDDEN]),
            ("mlp.gate_proj.weight", vec![INTER, HIDDEN]),
            ("mlp.up_proj.weight", vec![INTER, HIDDEN]),
            ("mlp.down_proj.weight", vec![HIDDEN, INTER]),
        ] {
            let norm = n.contains("norm");
            weights.push((format!("{p}.{n}"), shape, norm));
        }
    }
    weights.push(("model.norm.weight".into(), vec![HIDDEN], true));
    weights.push(("lm_head.weight".into(), vec![VOCAB, HIDDEN], false));
    let store = StoreOptions {
        zstd_level: None,
        digest: Some(DigestAlgorithm::Sha256),
    };
    let label = out.display().to_string();
    write_atomic(&out, |w| {
        let mut writer = Writer::new(w, &label)?;
        writer.set_attribute("model_name", CborValue::Text("ztserve-sample-4l".into()));
        writer.set_attribute("license", CborValue::Text("Apache-2.0".into()));
        writer.set_attribute("framework", CborValue::Text("synthetic".into()));
        for (name, shape, norm) in &weights {
            let n: u64 = shape.iter().product();
            if *norm {
                let v: Vec<f32> = (0..n).map(|_| 1.0 + rng.next()).collect();
                writer.add_dense(name, shape, DType::F32, bytemuck::cast_slice(&v), store)?;
            } else {
                let v: Vec<bf16> = (0..n).map(|_| bf16::from_f32(rng.next())).collect();
                writer.add_dense(name, shape, DType::BF16, bytemuck::cast_slice(&v), store)?;
            }
        }
        writer.finish()?;
        Ok(())
    })?;
    println!("wrote {}", out.display());
    Ok(())
}
