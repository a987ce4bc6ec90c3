//! Format-core benchmarks against their peers, in one run, with medians and ratios.
//!
//! `cargo bench --bench format` (set `ZT_BENCH_QUICK=1` for fewer rounds,
//! `ZT_BENCH_MODEL=path.safetensors` to add `zt pack` against `cp`,
//! `ZT_BENCH_ONLY=1,4` to run only those sections; section 5 copies 1 GiB
//! into fresh buffers, as a client loading a model into memory does).
//!
//! 1. Open a file of 10,000 small tensors and touch every tensor, against
//!    the `safetensors` crate on the same tensors.
//! 2. Read one 1 GiB tensor: zero-copy, and with crc32c / sha256 verification,
//!    against a plain `read` of the same bytes.
//! 3. `zt pack` of a real model against `cp` of the same file.
//! 4. Decode and validate the manifest of the 10,000 tensors of 1 (what a
//!    client does with every manifest it receives), and the same with its
//!    `objects` before `version` (canonical CBOR's order), against the
//!    `safetensors` crate reading its JSON header of the same tensors.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};
use zt_format::{
    write_atomic, AlignedBuf, DType, DigestAlgorithm, ReadOptions, StoreOptions, Verify, Writer,
    ZtFile,
};

fn rounds() -> usize {
    if std::env::var_os("ZT_BENCH_QUICK").is_some() {
        3
    } else {
        11
    }
}

fn median(mut f: impl FnMut()) -> Duration {
    f(); // warm the page cache and allocator
    let mut times: Vec<Duration> = (0..rounds())
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn report(name: &str, ours: Duration, peer_name: &str, peer: Duration) {
    println!(
        "{name:<48} {:>10.3} ms   {peer_name:<22} {:>10.3} ms   ratio {:.3}x",
        ours.as_secs_f64() * 1e3,
        peer.as_secs_f64() * 1e3,
        ours.as_secs_f64() / peer.as_secs_f64()
    );
}

fn data_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/bench-data");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn many_small(dir: &Path) -> (PathBuf, PathBuf, Vec<String>) {
    let n = 10_000;
    let names: Vec<String> = (0..n)
        .map(|i| format!("model.layers.{}.block.{}.weight", i / 100, i % 100))
        .collect();
    let values: Vec<Vec<f32>> = (0..n)
        .map(|i| (0..16).map(|j| (i * 16 + j) as f32).collect())
        .collect();
    let zt = dir.join("small10k.zt");
    let st = dir.join("small10k.safetensors");
    write_atomic(&zt, |w| {
        let mut writer = Writer::new(w, "small10k.zt")?;
        let store = StoreOptions {
            zstd_level: None,
            digest: Some(DigestAlgorithm::Crc32c),
        };
        for (name, v) in names.iter().zip(&values) {
            writer.add_dense(name, &[4, 4], DType::F32, bytemuck::cast_slice(v), store)?;
        }
        writer.finish()?;
        Ok(())
    })
    .unwrap();
    let views: Vec<(String, TensorView<'_>)> = names
        .iter()
        .zip(&values)
        .map(|(n, v)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, vec![4, 4], bytemuck::cast_slice(v)).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &st).unwrap();
    (zt, st, names)
}

fn bench_many_small() {
    let (zt, st, names) = many_small(&data_dir());
    println!("\n# open + touch 10,000 small tensors (16 x f32 each)");
    let safetensors_time = median(|| {
        let bytes = std::fs::read(&st).unwrap();
        let t = SafeTensors::deserialize(&bytes).unwrap();
        let mut sum = 0f32;
        for name in &names {
            let v = t.tensor(name).unwrap();
            let s: &[f32] = bytemuck::try_cast_slice(v.data()).unwrap_or(&[0.0]);
            sum += s[0];
        }
        black_box(sum);
    });
    for (label, verify) in [
        ("zt, digests verified (crc32c)", Verify::Digests),
        ("zt, verification off", Verify::Skip),
    ] {
        let ours = median(|| {
            let f = ZtFile::open_with(
                &zt,
                ReadOptions {
                    verify,
                    ..ReadOptions::default()
                },
            )
            .unwrap();
            let mut sum = 0f32;
            for name in &names {
                let t = f.tensor(name).unwrap();
                sum += t.as_slice::<f32>().unwrap()[0];
            }
            black_box(sum);
        });
        report(label, ours, "safetensors crate", safetensors_time);
    }
}

fn bench_manifest() {
    let (zt, st, _) = many_small(&data_dir());
    println!("\n# decode and validate the header of 10,000 tensors");
    let f = ZtFile::open(&zt).unwrap();
    let cbor = zt_format::manifest_cbor(f.manifest());
    let size = std::fs::metadata(&zt).unwrap().len();
    let header = std::fs::read(&st).unwrap();
    let peer = median(|| {
        black_box(SafeTensors::read_metadata(&header).unwrap());
    });
    let limits = zt_format::Limits::default();
    let ours = median(|| {
        let view = zt_format::container::View::File;
        let decoded = zt_format::container::decode_manifest("m.zt", &cbor, size, &limits, view);
        black_box(decoded.unwrap());
    });
    let what = format!("zt manifest, {} bytes of CBOR", cbor.len());
    report(&what, ours, "safetensors header", peer);
    // The same manifest with `objects` before `version`, as canonical CBOR
    // orders the keys (other writers than this crate's may).
    let canonical = objects_first(&cbor);
    let first = median(|| {
        let view = zt_format::container::View::File;
        let decoded =
            zt_format::container::decode_manifest("m.zt", &canonical, size, &limits, view);
        black_box(decoded.unwrap());
    });
    report(
        "the same, objects before version",
        first,
        "safetensors header",
        peer,
    );
}

/// `cbor` (a manifest) with its root map's `objects` entry first.
fn objects_first(cbor: &[u8]) -> Vec<u8> {
    let v: ciborium::Value = ciborium::de::from_reader(cbor).unwrap();
    let mut root = v.into_map().unwrap();
    root.sort_by_key(|(k, _)| k.as_text() != Some("objects"));
    let mut out = Vec::new();
    ciborium::ser::into_writer(&ciborium::Value::Map(root), &mut out).unwrap();
    out
}

fn one_gib(dir: &Path, alg: DigestAlgorithm) -> PathBuf {
    let path = dir.join(format!("one-gib-{}.zt", alg.name()));
    if !path.exists() {
        let data: Vec<u8> = (0..1u64 << 30)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        write_atomic(&path, |w| {
            let mut writer = Writer::new(w, "one-gib.zt")?;
            writer.add_dense(
                "x",
                &[1 << 30],
                DType::U8,
                &data,
                StoreOptions {
                    zstd_level: None,
                    digest: Some(alg),
                },
            )?;
            writer.finish()?;
            Ok(())
        })
        .unwrap();
    }
    path
}

fn sum_u64(b: &[u8]) -> u64 {
    bytemuck::cast_slice::<u8, u64>(&b[..b.len() / 8 * 8])
        .iter()
        .fold(0u64, |a, &x| a.wrapping_add(x))
}

fn bench_one_gib() {
    let dir = data_dir();
    println!("\n# one 1 GiB tensor (page cache warm)");
    let crc = one_gib(&dir, DigestAlgorithm::Crc32c);
    let sha = one_gib(&dir, DigestAlgorithm::Sha256);
    let plain = median(|| {
        black_box(std::fs::read(&crc).unwrap());
    });
    let plain_scan = median(|| {
        let b = std::fs::read(&crc).unwrap();
        black_box(sum_u64(&b));
    });
    // The best case for read(2): a buffer allocated and faulted in once, reused.
    let mut reused = vec![0u8; std::fs::metadata(&crc).unwrap().len() as usize];
    let plain_reused = median(|| {
        use std::io::Read;
        let mut f = std::fs::File::open(&crc).unwrap();
        f.read_exact(&mut reused).unwrap();
        black_box(reused[12345]);
    });
    let open_view = |path: &Path, verify: Verify, scan: bool| {
        median(|| {
            let f = ZtFile::open_with(
                path,
                ReadOptions {
                    verify,
                    ..ReadOptions::default()
                },
            )
            .unwrap();
            let t = f.tensor("x").unwrap();
            let s = t.as_slice::<u8>().unwrap();
            black_box(if scan { sum_u64(s) } else { s.len() as u64 });
        })
    };
    report(
        "zt zero-copy view, verification off",
        open_view(&crc, Verify::Skip, false),
        "plain read",
        plain,
    );
    report(
        "zt zero-copy view + scan, verification off",
        open_view(&crc, Verify::Skip, true),
        "plain read + scan",
        plain_scan,
    );
    let crc_view = open_view(&crc, Verify::Digests, false);
    let sha_view = open_view(&sha, Verify::Digests, false);
    report("zt view, crc32c verified", crc_view, "plain read", plain);
    report(
        "zt view, crc32c verified",
        crc_view,
        "read into reused buffer",
        plain_reused,
    );
    report("zt view, sha256 verified", sha_view, "plain read", plain);
    report(
        "zt view, sha256 verified",
        sha_view,
        "read into reused buffer",
        plain_reused,
    );
    report(
        "zt zero-copy view + scan",
        open_view(&crc, Verify::Skip, true),
        "read into reused buffer",
        plain_reused,
    );
}

fn bench_pack() {
    let Some(model) = std::env::var_os("ZT_BENCH_MODEL") else {
        println!("\n# zt pack vs cp: skipped (set ZT_BENCH_MODEL=model.safetensors)");
        return;
    };
    let zt = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/zt");
    let out = data_dir().join("packed.zt");
    let copy = data_dir().join("copied.safetensors");
    println!("\n# pack a real model ({})", Path::new(&model).display());
    let cp = median(|| {
        assert!(Command::new("cp")
            .arg(&model)
            .arg(&copy)
            .status()
            .unwrap()
            .success());
    });
    for digest in ["none", "crc32c", "sha256"] {
        let t = median(|| {
            let s = Command::new(&zt)
                .arg("pack")
                .arg(&model)
                .arg("-o")
                .arg(&out)
                .args(["--digest", digest])
                .status();
            assert!(s.unwrap().success());
        });
        report(&format!("zt pack --digest {digest}"), t, "cp", cp);
    }
}

/// A model loaded into memory: 1 GiB copied into 64 fresh buffers of 16
/// MiB (a bf16 layer's tensor), kept until the end, as a client keeping
/// every tensor does. Ours are [`AlignedBuf`]s (a mapping of their own on
/// huge pages where the kernel has them); the peer is the same copy into
/// heap vectors (the allocator's own mapping of each, 4 KiB pages). Each
/// round's buffers are freed before the next: 128 MiB of ours are kept
/// as spares and reused by the next round, the allocator keeps what it
/// keeps of the peer's.
fn bench_fresh_buffers() {
    const PIECE: usize = 16 << 20;
    const PIECES: usize = 64;
    println!("\n# copy 1 GiB into 64 fresh 16 MiB buffers, kept until the end");
    let src: Vec<u8> = (0..PIECE).map(|i| (i * 31 % 251) as u8).collect();
    let heap = median(|| {
        let kept: Vec<Vec<u8>> = (0..PIECES)
            .map(|_| {
                let mut v = Vec::with_capacity(PIECE);
                v.extend_from_slice(&src);
                v
            })
            .collect();
        black_box(kept.len());
    });
    let ours = median(|| {
        let kept: Vec<AlignedBuf> = (0..PIECES)
            .map(|_| AlignedBuf::copy_from(&src).unwrap())
            .collect();
        black_box(kept.len());
    });
    report(
        "AlignedBuf::copy_from",
        ours,
        "Vec::extend_from_slice",
        heap,
    );
}

fn main() {
    // `cargo test --benches` runs this with --bench absent; do nothing then.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // `ZT_BENCH_ONLY=1,4` runs only those sections.
    let only = std::env::var("ZT_BENCH_ONLY").unwrap_or_default();
    let run = |n: &str| only.is_empty() || only.split(',').any(|s| s.trim() == n);
    let sections: [(&str, fn()); 5] = [
        ("1", bench_many_small),
        ("2", bench_one_gib),
        ("3", bench_pack),
        ("4", bench_manifest),
        ("5", bench_fresh_buffers),
    ];
    for (n, bench) in sections {
        if run(n) {
            bench();
        }
    }
}
