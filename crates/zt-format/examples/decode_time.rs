use std::time::Instant;
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

fn main() {
    let path = std::path::PathBuf::from("/tmp/many.zt");
    if !path.exists() {
        let f = std::fs::File::create(&path).unwrap();
        let mut w = Writer::new(std::io::BufWriter::new(f), "many").unwrap();
        let data = vec![1u8; 64];
        for i in 0..10_000 {
            let name = format!("model.layers.{}.block.{}.weight", i / 100, i % 100);
            w.add_dense(
                &name,
                &[16],
                DType::F32,
                &data,
                StoreOptions {
                    zstd_level: None,
                    digest: Some(DigestAlgorithm::Crc32c),
                },
            )
            .unwrap();
        }
        w.finish().unwrap();
    }
    let file = zt_format::ZtFile::open(&path).unwrap();
    let mut cbor = zt_format::manifest_cbor(file.manifest());
    if std::env::var_os("OBJECTS_FIRST").is_some() {
        let v: ciborium::Value = ciborium::de::from_reader(&cbor[..]).unwrap();
        let mut m = v.into_map().unwrap();
        m.sort_by_key(|(k, _)| k.as_text() != Some("objects"));
        let mut out = Vec::new();
        ciborium::ser::into_writer(&ciborium::Value::Map(m), &mut out).unwrap();
        cbor = out;
    }
    let size = std::fs::metadata(&path).unwrap().len();
    let limits = zt_format::Limits::default();
    let n: usize = std::env::args()
        .nth(1)
        .map(|s| s.parse().unwrap())
        .unwrap_or(300);
    let mut times = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let m = zt_format::container::decode_manifest(
            "many.zt",
            &cbor,
            size,
            &limits,
            zt_format::container::View::File,
        )
        .unwrap();
        times.push(t.elapsed().as_secs_f64());
        drop(m);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "{} bytes, median {:.3} ms, min {:.3} ms",
        cbor.len(),
        times[n / 2] * 1e3,
        times[0] * 1e3
    );
}
