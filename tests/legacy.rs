//! Legacy files (v1.0 and v0.1) read into the same model and convert to v1.2.

use ciborium::Value;
use zt_format::{ReadOptions, Writer, ZtFile, LEGACY_DTYPE_ATTRIBUTE};

fn t(s: &str) -> Value {
    Value::Text(s.into())
}
fn u(n: u64) -> Value {
    Value::Integer(n.into())
}
fn map(pairs: Vec<(&str, Value)>) -> Value {
    Value::Map(pairs.into_iter().map(|(k, v)| (t(k), v)).collect())
}
fn cbor(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(v, &mut out).unwrap();
    out
}

/// Lays out `blobs` at the given offsets after an 8-byte header.
fn body(magic: &[u8; 8], blobs: &[(u64, &[u8])]) -> Vec<u8> {
    let mut f = magic.to_vec();
    for (off, b) in blobs {
        f.resize(*off as usize, 0);
        f.extend_from_slice(b);
    }
    f
}

fn finish_legacy(mut f: Vec<u8>, manifest: &Value) -> Vec<u8> {
    let m = cbor(manifest);
    f.extend_from_slice(&m);
    f.extend_from_slice(&(m.len() as u64).to_le_bytes());
    f
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn v1_0_dense_zstd_misaligned_and_unknown_format() {
    let dense = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let z = zstd::bulk::compress(&dense, 3).unwrap();
    let crc = format!("crc32c:0x{:08X}", crc32c::crc32c(&z));
    let odd = f32_bytes(&[9.0, 8.0]);
    let f = body(b"ZTEN1000", &[(64, &z), (200, &odd), (256, &[1, 2, 3, 4])]);
    let comp = |off, len: usize, extra: Vec<(&str, Value)>| {
        let mut p = vec![("offset", u(off)), ("length", u(len as u64))];
        p.extend(extra);
        map(p)
    };
    let manifest = map(vec![
        ("version", t("1.0")),
        ("generator", t("zTensor-Rust v0.1.0")),
        (
            "tensors",
            map(vec![
                (
                    "z",
                    map(vec![
                        ("dtype", t("float32")),
                        ("shape", Value::Array(vec![u(2), u(2)])),
                        ("format", t("dense")),
                        (
                            "components",
                            map(vec![(
                                "data",
                                comp(
                                    64,
                                    z.len(),
                                    vec![("encoding", t("zstd")), ("digest", t(&crc))],
                                ),
                            )]),
                        ),
                    ]),
                ),
                (
                    "odd",
                    map(vec![
                        ("dtype", t("float32")),
                        ("shape", Value::Array(vec![u(2)])),
                        ("format", t("dense")),
                        ("components", map(vec![("data", comp(200, 8, vec![]))])),
                    ]),
                ),
                (
                    "q",
                    map(vec![
                        ("dtype", t("uint8")),
                        ("shape", Value::Array(vec![u(4)])),
                        ("format", t("quantized_4bit")),
                        ("components", map(vec![("data", comp(256, 4, vec![]))])),
                    ]),
                ),
            ]),
        ),
    ]);
    let bytes = finish_legacy(f, &manifest);
    let file = ZtFile::from_bytes("v10.zt", &bytes, ReadOptions::default()).unwrap();
    assert_eq!(file.manifest().origin, zt_format::Origin::V1_0);
    assert_eq!(
        file.tensor("z").unwrap().as_slice::<f32>().unwrap(),
        &[1.0, 2.0, 3.0, 4.0]
    );
    // Misaligned: a warning, and the data copied into an aligned buffer.
    assert!(file
        .warnings()
        .iter()
        .any(|w| w.message.contains("not a multiple of 64")));
    let odd_t = file.tensor("odd").unwrap();
    assert!(!odd_t.data.is_borrowed());
    assert_eq!(odd_t.as_slice::<f32>().unwrap(), &[9.0, 8.0]);
    // Unknown format: u8 components, the original dtype kept.
    let q = file.object("q").unwrap();
    assert_eq!(q.components["data"].dtype.name(), "u8");
    assert_eq!(q.attributes[LEGACY_DTYPE_ATTRIBUTE], t("uint8"));
    assert_eq!(
        file.manifest().attributes["generator"],
        t("zTensor-Rust v0.1.0")
    );
    assert_eq!(convert(&file), convert(&file));
}

/// Converts to v1.2 through `zt pack`'s path and checks every object survives.
fn convert(file: &ZtFile) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.zt");
    std::fs::write(&src, file.bytes()).unwrap();
    let out = dir.path().join("out.zt");
    let opts = zt_cli::pack::PackOptions {
        store: Default::default(),
        read: ReadOptions::default(),
        progress: false,
    };
    zt_cli::pack::run(&[src], &out, opts).unwrap();
    let converted = ZtFile::open(&out).unwrap();
    assert_eq!(converted.manifest().origin, zt_format::Origin::V1);
    assert!(converted.warnings().is_empty());
    for (name, obj) in &file.manifest().objects {
        let c = converted.object(name).unwrap();
        assert_eq!(c.shape, obj.shape);
        assert_eq!(c.format, obj.format);
        for role in obj.components.keys() {
            assert_eq!(
                &converted.read(name, role).unwrap()[..],
                &file.read(name, role).unwrap()[..],
                "{name}/{role}"
            );
        }
    }
    std::fs::read(&out).unwrap()
}

fn v01_tensor(
    name: &str,
    dtype: &str,
    shape: &[u64],
    off: u64,
    size: usize,
    extra: Vec<(&str, Value)>,
) -> Value {
    let mut p = vec![
        ("name", t(name)),
        ("offset", u(off)),
        ("size", u(size as u64)),
        ("dtype", t(dtype)),
        ("shape", Value::Array(shape.iter().map(|&d| u(d)).collect())),
        ("encoding", t("raw")),
    ];
    p.extend(extra);
    map(p)
}

#[test]
fn v0_1_big_endian_and_both_sparse_spellings() {
    // Big-endian dense data; the checksum covers the stored (big-endian) bytes.
    let be: Vec<u8> = [1.5f32, -2.0]
        .iter()
        .flat_map(|x| x.to_be_bytes())
        .collect();
    let be_crc = format!("crc32c:0x{:08X}", crc32c::crc32c(&be));
    // The 0.1.0 writer's CSR: indptr | indices | values in one blob. 2x3 matrix, nnz 2.
    let mut csr = Vec::new();
    for v in [0u64, 1, 2] {
        csr.extend_from_slice(&v.to_le_bytes());
    }
    for v in [2u64, 0] {
        csr.extend_from_slice(&v.to_le_bytes());
    }
    csr.extend_from_slice(&f32_bytes(&[7.0, 8.0]));
    // COO records: (row, col, value) interleaved. 2 non-zeros.
    let mut coo = Vec::new();
    for (r, c, v) in [(0u64, 1u64, 5.0f32), (1, 2, 6.0)] {
        coo.extend_from_slice(&r.to_le_bytes());
        coo.extend_from_slice(&c.to_le_bytes());
        coo.extend_from_slice(&v.to_le_bytes());
    }
    // Seed spelling: values in the tensor's blob, indices and indptr given separately.
    let vals = f32_bytes(&[3.0]);
    let idx = 1u64.to_le_bytes();
    let ptr: Vec<u8> = [0u64, 1].iter().flat_map(|x| x.to_le_bytes()).collect();
    let f = body(
        b"ZTEN0001",
        &[
            (64, &be),
            (128, &csr),
            (256, &coo),
            (384, &vals),
            (448, &idx),
            (512, &ptr),
        ],
    );
    let manifest = Value::Array(vec![
        v01_tensor(
            "be",
            "float32",
            &[2],
            64,
            be.len(),
            vec![("data_endianness", t("big")), ("checksum", t(&be_crc))],
        ),
        v01_tensor(
            "csr",
            "float32",
            &[2, 3],
            128,
            csr.len(),
            vec![("layout", t("sparsecsr"))],
        ),
        v01_tensor(
            "coo",
            "float32",
            &[2, 3],
            256,
            coo.len(),
            vec![("layout", t("sparsecoo"))],
        ),
        v01_tensor(
            "seed",
            "float32",
            &[1, 2],
            384,
            4,
            vec![
                ("layout", t("sparse")),
                ("sparse_format", t("csr")),
                ("indices", map(vec![("offset", u(448)), ("size", u(8))])),
                ("indptr_offset", u(512)),
                ("indptr_size", u(16)),
            ],
        ),
    ]);
    let bytes = finish_legacy(f, &manifest);
    let file = ZtFile::from_bytes("v01.zt", &bytes, ReadOptions::default()).unwrap();
    assert_eq!(file.manifest().origin, zt_format::Origin::V0_1);
    assert_eq!(
        file.tensor("be").unwrap().as_slice::<f32>().unwrap(),
        &[1.5, -2.0]
    );
    let u64s = |o: &str, c: &str| {
        file.component_tensor(o, c)
            .unwrap()
            .as_slice::<u64>()
            .unwrap()
            .to_vec()
    };
    let f32s = |o: &str, c: &str| {
        file.component_tensor(o, c)
            .unwrap()
            .as_slice::<f32>()
            .unwrap()
            .to_vec()
    };
    assert_eq!(u64s("csr", "indptr"), [0, 1, 2]);
    assert_eq!(u64s("csr", "indices"), [2, 0]);
    assert_eq!(f32s("csr", "values"), [7.0, 8.0]);
    assert_eq!(u64s("coo", "coords"), [0, 1, 1, 2]);
    assert_eq!(f32s("coo", "values"), [5.0, 6.0]);
    assert_eq!(f32s("seed", "values"), [3.0]);
    assert_eq!(u64s("seed", "indices"), [1]);
    assert_eq!(u64s("seed", "indptr"), [0, 1]);
    convert(&file);

    // A corrupted big-endian blob fails its original checksum before any swap.
    let mut bad = bytes.clone();
    bad[64] ^= 1;
    let file = ZtFile::from_bytes("v01.zt", &bad, ReadOptions::default()).unwrap();
    assert_eq!(
        file.tensor("be").unwrap_err().rule().unwrap().name(),
        "digest-mismatch"
    );
}

#[test]
fn empty_files_of_every_version() {
    let v12 = Writer::new(Vec::new(), "e.zt").unwrap().finish().unwrap();
    assert_eq!(v12.len(), 48);
    let f = ZtFile::from_bytes("e.zt", &v12, ReadOptions::default()).unwrap();
    assert_eq!(f.parsed().location.offset, 8);
    let v01 = finish_legacy(b"ZTEN0001".to_vec(), &Value::Array(vec![]));
    assert_eq!(v01.len(), 17);
    assert!(ZtFile::from_bytes("e01.zt", &v01, ReadOptions::default()).is_ok());
}
