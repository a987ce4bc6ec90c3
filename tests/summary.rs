//! `GET /v1/files/{path}/summaries/{object}` against a real daemon: the
//! moments, non-finite counts, histogram and 2-D grid of f32, bf16, f16
//! and u8 tensors (stored raw and zstd-compressed) match what the test
//! computes from the values it wrote; the answer is the same the second
//! time (kept per file version) and carries an ETag; objects it cannot
//! summarise (ragged, GGUF blocks) are refused by name, and a missing one
//! is a 404.

mod common;

use common::{curl, Server};
use half::{bf16, f16};
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

fn store(zstd: bool) -> StoreOptions {
    StoreOptions {
        zstd_level: zstd.then_some(3),
        digest: Some(DigestAlgorithm::Crc32c),
    }
}

fn summary(s: &Server, path: &str, object: &str) -> (u16, serde_json::Value) {
    let r = curl(&[], &s.url(&format!("/v1/files/{path}/summaries/{object}")));
    (r.status, serde_json::from_slice(&r.body).unwrap())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn dense_tensors_are_summarised_and_the_rest_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    // 100 x 300 f32: i * 0.5 - 7000, with two NaNs and one -inf.
    let (rows, cols) = (100u64, 300u64);
    let mut values: Vec<f32> = (0..rows * cols).map(|i| i as f32 * 0.5 - 7000.0).collect();
    values[17] = f32::NAN;
    values[18] = f32::NAN;
    values[29_999] = f32::NEG_INFINITY;
    let f32_bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let halves: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) / 8.0).collect();
    let bf: Vec<u8> = halves
        .iter()
        .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
        .collect();
    let hf: Vec<u8> = halves
        .iter()
        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
        .collect();
    let bytes: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let mut w = Writer::new(Vec::new(), "t").unwrap();
    w.add_dense("grid", &[rows, cols], DType::F32, &f32_bytes, store(false))
        .unwrap();
    w.add_dense("grid_z", &[rows, cols], DType::F32, &f32_bytes, store(true))
        .unwrap();
    w.add_dense("b", &[1000], DType::BF16, &bf, store(false))
        .unwrap();
    w.add_dense("h", &[1000], DType::F16, &hf, store(true))
        .unwrap();
    w.add_dense("u", &[4096], DType::U8, &bytes, store(false))
        .unwrap();
    w.add_ragged("names", &[b"a", b"bc"], store(false)).unwrap();
    std::fs::write(root.path().join("t.zt"), w.finish().unwrap()).unwrap();
    std::fs::write(root.path().join("m.gguf"), zt_format::fuzz::gguf_sample()).unwrap();
    let s = Server::start(root.path(), &[]);

    let finite: Vec<f64> = values
        .iter()
        .map(|v| f64::from(*v))
        .filter(|v| v.is_finite())
        .collect();
    let n = finite.len() as f64;
    let mean = finite.iter().sum::<f64>() / n;
    let std = (finite.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt();
    for name in ["grid", "grid_z"] {
        let (status, j) = summary(&s, "t.zt", name);
        assert_eq!(status, 200, "{j}");
        assert_eq!(j["count"], rows * cols);
        assert_eq!(j["nan"], 2);
        assert_eq!(j["neg_inf"], 1);
        assert_eq!(j["pos_inf"], 0);
        assert_eq!(j["finite"], finite.len());
        assert_eq!(j["min"], -7000.0);
        assert_eq!(j["max"], 7999.0);
        assert!(close(j["mean"].as_f64().unwrap(), mean), "{j}");
        assert!(close(j["std"].as_f64().unwrap(), std), "{j}");
        let counts: Vec<u64> = j["histogram"]["counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_u64().unwrap())
            .collect();
        assert_eq!(counts.len(), 64);
        assert_eq!(counts.iter().sum::<u64>(), finite.len() as u64);
        // Evenly spread values: every bin within one of the others.
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(hi - lo <= 2, "{counts:?}");
        // The grid: 64 x 64 cells over 100 x 300, each its block's mean.
        let g = &j["grid"];
        assert_eq!(
            (g["rows"].as_u64(), g["cols"].as_u64()),
            (Some(64), Some(64))
        );
        let cells = g["values"].as_array().unwrap();
        assert_eq!(cells.len(), 64 * 64);
        let want = |gr: u64, gc: u64| -> f64 {
            let mut v = Vec::new();
            for r in 0..rows {
                for c in 0..cols {
                    let x = f64::from(values[(r * cols + c) as usize]);
                    if r * 64 / rows == gr && c * 64 / cols == gc && x.is_finite() {
                        v.push(x);
                    }
                }
            }
            v.iter().sum::<f64>() / v.len() as f64
        };
        for (gr, gc) in [(0, 0), (0, 5), (31, 40), (63, 63)] {
            let got = cells[(gr * 64 + gc) as usize].as_f64().unwrap();
            assert!(close(got, want(gr, gc)), "cell {gr},{gc}: {got}");
        }
    }
    // Half floats decode to what the half crate makes of them.
    let decoded: [(&str, &str, Vec<f64>); 2] = [
        (
            "b",
            "bf16",
            halves.iter().map(|v| bf16::from_f32(*v).to_f64()).collect(),
        ),
        (
            "h",
            "f16",
            halves.iter().map(|v| f16::from_f32(*v).to_f64()).collect(),
        ),
    ];
    for (name, dtype, want) in decoded {
        let (status, j) = summary(&s, "t.zt", name);
        assert_eq!(status, 200, "{j}");
        assert_eq!(j["dtype"], dtype);
        let (min, max) = want
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
        assert_eq!(j["min"].as_f64(), Some(min), "{j}");
        assert_eq!(j["max"].as_f64(), Some(max), "{j}");
        let mean = want.iter().sum::<f64>() / want.len() as f64;
        assert!(close(j["mean"].as_f64().unwrap(), mean), "{j}");
        assert!(j["grid"].is_null());
    }
    let (_, j) = summary(&s, "t.zt", "u");
    assert_eq!(
        (j["min"].as_f64(), j["max"].as_f64()),
        (Some(0.0), Some(255.0))
    );
    assert!(close(j["mean"].as_f64().unwrap(), 127.5));

    // Kept per version: the same body and ETag again.
    let url = s.url("/v1/files/t.zt/summaries/grid");
    let (a, b) = (curl(&[], &url), curl(&[], &url));
    assert_eq!(a.body, b.body);
    assert!(a.header("etag").is_some());
    assert_eq!(a.header("etag"), b.header("etag"));

    // Refused by name, and missing.
    let (status, j) = summary(&s, "t.zt", "names");
    assert_eq!(status, 422, "{j}");
    let why = j["detail"].as_str().unwrap_or_default().to_owned() + &j.to_string();
    assert!(
        why.contains("t.zt") && why.contains("names") && why.contains("summary-format"),
        "{j}"
    );
    let m: serde_json::Value =
        serde_json::from_slice(&curl(&[], &s.url("/v1/files/m.gguf/manifest")).body).unwrap();
    let block = m["objects"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(_, o)| o["format"] == "gguf_block")
        .map(|(n, _)| n.clone())
        .expect("the GGUF sample has a block-quantized tensor");
    let (status, j) = summary(&s, "m.gguf", &block);
    assert_eq!(status, 422, "{j}");
    assert!(j.to_string().contains("gguf_block"), "{j}");
    let (status, _) = summary(&s, "t.zt", "nothing");
    assert_eq!(status, 404);
}

/// `GET /v1/files/{path}/objects?select=`: the table the web page shows,
/// filtered on the server; no match is an empty table.
#[test]
fn the_objects_table_is_filtered_on_the_server() {
    let root = tempfile::tempdir().unwrap();
    common::layered_model(&root.path().join("l.zt"), 0..3);
    let s = Server::start(root.path(), &[]);
    let table = |q: &str| -> serde_json::Value {
        let r = curl(&[], &s.url(&format!("/v1/files/l.zt/objects{q}")));
        assert_eq!(r.status, 200, "{q}");
        serde_json::from_slice(&r.body).unwrap()
    };
    let all = table("");
    assert_eq!(all["total"]["objects"], 3);
    assert_eq!(all["total"]["bytes"], 3u64 << 20);
    let row = &all["objects"][0];
    assert_eq!(row["name"], "model.layers.0.w");
    assert_eq!(row["layer"], 0);
    assert_eq!(row["dtype"], "u8");
    assert_eq!(row["format"], "dense");
    assert_eq!(row["encoding"], "raw");
    assert!(
        row["digest"].as_str().is_some_and(|d| !d.is_empty()),
        "{row}"
    );
    assert_eq!(all["layers"].as_array().unwrap().len(), 3);
    assert_eq!(all["layers"][0]["layer"], 0);
    let one = table("?select=model.layers.1.*");
    assert_eq!(one["total"]["objects"], 1);
    assert_eq!(one["objects"][0]["name"], "model.layers.1.w");
    let none = table("?select=nothing.*");
    assert_eq!(none["objects"], serde_json::json!([]));
    assert_eq!(none["total"]["objects"], 0);
}
