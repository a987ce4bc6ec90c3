//! Writes models for the network benchmarks (not shipped; sizes are flags).
//!
//! `cargo run --release --example make_bench_model -- OUT.zt one-tensor GIB`
//! `cargo run --release --example make_bench_model -- OUT.zt layers N_LAYERS MIB_PER_LAYER`

use std::path::PathBuf;

use ztserve::format::{write_atomic, DType, DigestAlgorithm, StoreOptions, Writer};

fn bytes(n: usize, seed: u64) -> Vec<u8> {
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = PathBuf::from(
        args.first()
            .ok_or("usage: OUT.zt one-tensor GIB | layers N MIB")?,
    );
    let store = StoreOptions {
        zstd_level: None,
        digest: Some(DigestAlgorithm::Crc32c),
    };
    let label = out.display().to_string();
    match args.get(1).map(String::as_str) {
        Some("one-tensor") => {
            let gib: usize = args.get(2).map_or(Ok(1), |s| s.parse())?;
            let data = bytes(gib << 30, 7);
            write_atomic(&out, |w| {
                let mut writer = Writer::new(w, &label)?;
                writer.add_dense("weight", &[data.len() as u64], DType::U8, &data, store)?;
                writer.finish()?;
                Ok(())
            })?;
        }
        Some("layers") => {
            let n: u64 = args.get(2).map_or(Ok(32), |s| s.parse())?;
            let mib: usize = args.get(3).map_or(Ok(32), |s| s.parse())?;
            write_atomic(&out, |w| {
                let mut writer = Writer::new(w, &label)?;
                for l in 0..n {
                    for (i, part) in ["self_attn.qkv_proj.weight", "mlp.up_proj.weight"]
                        .iter()
                        .enumerate()
                    {
                        let data = bytes((mib << 20) / 2, l * 2 + i as u64 + 1);
                        let name = format!("model.layers.{l}.{part}");
                        writer.add_dense(
                            &name,
                            &[data.len() as u64 / 2],
                            DType::BF16,
                            &data,
                            store,
                        )?;
                    }
                }
                writer.finish()?;
                Ok(())
            })?;
        }
        _ => return Err("usage: OUT.zt one-tensor GIB | layers N MIB".into()),
    }
    println!("wrote {}", out.display());
    Ok(())
}
