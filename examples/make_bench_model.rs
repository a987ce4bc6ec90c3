//! Writes models for the network benchmarks (not shipped; sizes are flags).
//!
//! `cargo run --release --example make_bench_model -- OUT.zt one-tensor GIB`
//! `cargo run --release --example make_bench_model -- OUT.zt layers N_LAYERS MIB_PER_LAYER`
//! `cargo run --release --example make_bench_model -- OUT.zt many N_OBJECTS`
//! `cargo run --release --example make_bench_model -- OUT.safetensors layers-safetensors N_LAYERS MIB_PER_LAYER`

use std::path::PathBuf;

use zt_format::DigestAlgorithm;

#[path = "../benches/support/model.rs"]
mod model;

const USAGE: &str =
    "usage: OUT.zt one-tensor GIB | layers N MIB | many N | OUT.safetensors layers-safetensors N MIB";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let out = PathBuf::from(args.first().ok_or(USAGE)?);
    let crc = Some(DigestAlgorithm::Crc32c);
    match args.get(1).map(String::as_str) {
        Some("one-tensor") => {
            model::one_tensor(&out, args.get(2).map_or(Ok(1), |s| s.parse())?, crc)?
        }
        Some("layers") => model::layers(
            &out,
            args.get(2).map_or(Ok(32), |s| s.parse())?,
            args.get(3).map_or(Ok(32), |s| s.parse())?,
            crc,
        )?,
        Some("layers-safetensors") => model::layers_safetensors(
            &out,
            args.get(2).map_or(Ok(32), |s| s.parse())?,
            args.get(3).map_or(Ok(32), |s| s.parse())?,
        )?,
        Some("many") => model::many_objects(&out, args.get(2).map_or(Ok(10_000), |s| s.parse())?)?,
        _ => return Err(USAGE.into()),
    }
    println!("wrote {}", out.display());
    Ok(())
}
