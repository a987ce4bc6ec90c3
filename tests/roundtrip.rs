//! Property tests: whatever our writer writes, our reader reads back
//! identically, values and metadata included; and the output is deterministic.

use proptest::prelude::*;
use zt_format::{
    Attributes, CborValue, ComponentData, DType, DigestAlgorithm, Format, ReadOptions,
    StoreOptions, Writer, ZtFile,
};

#[derive(Debug, Clone)]
struct Spec {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
    store: StoreOptions,
}

fn dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn store() -> impl Strategy<Value = StoreOptions> {
    (
        prop::option::of(1i32..5),
        prop::sample::select(vec![
            None,
            Some(DigestAlgorithm::Sha256),
            Some(DigestAlgorithm::Crc32c),
        ]),
    )
        .prop_map(|(zstd_level, digest)| StoreOptions { zstd_level, digest })
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        "[a-z]{1,6}(\\.[0-9]{1,2})?(\\.[a-z/]{1,5})?",
        dtype(),
        prop::collection::vec(0u64..6, 0..4),
        store(),
    )
        .prop_flat_map(|(name, dtype, shape, store)| {
            let n = shape.iter().product::<u64>() * dtype.size();
            let data = if dtype == DType::Bool {
                prop::collection::vec(0u8..2, n as usize).boxed()
            } else {
                prop::collection::vec(any::<u8>(), n as usize).boxed()
            };
            data.prop_map(move |data| Spec {
                name: name.clone(),
                dtype,
                shape: shape.clone(),
                data,
                store,
            })
        })
}

fn write(specs: &[Spec], attrs: &Attributes) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), "prop.zt").unwrap();
    for (k, v) in attrs {
        w.set_attribute(k, v.clone());
    }
    for s in specs {
        w.add_dense(&s.name, &s.shape, s.dtype, &s.data, s.store)
            .unwrap();
    }
    w.finish().unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn dense_objects_round_trip(
        specs in prop::collection::btree_map("[a-z]{1,4}", spec(), 0..6),
        attr in "[ -~]{0,20}",
    ) {
        let specs: Vec<Spec> = specs.into_iter().map(|(k, mut s)| { s.name = format!("{k}.{}", s.name); s }).collect();
        let mut attrs = Attributes::new();
        attrs.insert("note".into(), CborValue::Text(attr));
        let bytes = write(&specs, &attrs);
        prop_assert_eq!(&bytes, &write(&specs, &attrs), "writer is not deterministic");
        let f = ZtFile::from_bytes("prop.zt", &bytes, ReadOptions::default()).unwrap();
        prop_assert_eq!(&f.manifest().attributes, &attrs);
        prop_assert_eq!(f.manifest().objects.len(), specs.len());
        for s in &specs {
            let obj = f.object(&s.name).unwrap();
            prop_assert_eq!(&obj.shape, &s.shape);
            let c = &obj.components["data"];
            prop_assert_eq!(c.offset % 64, 0);
            prop_assert_eq!(c.digest.as_ref().and_then(|d| d.algorithm()), s.store.digest);
            let t = f.tensor(&s.name).unwrap();
            prop_assert_eq!(&t.data[..], &s.data[..]);
            prop_assert_eq!(t.data.as_ptr() as usize % 64, 0);
            if s.dtype == DType::Bool {
                prop_assert!(t.as_bools().is_ok());
            }
        }
        prop_assert!(f.verify().iter().all(|r| !matches!(r.status, zt_format::ComponentStatus::Failed(_))));
    }

    #[test]
    fn sparse_and_quantized_round_trip(nnz in 0usize..20, rows in 1u64..5, level in prop::option::of(1i32..4)) {
        let values: Vec<f32> = (0..nnz).map(|i| i as f32 * 0.5).collect();
        let indices: Vec<u64> = (0..nnz as u64).collect();
        let indptr: Vec<u64> = (0..=rows).map(|r| r.min(nnz as u64)).collect();
        let store = StoreOptions { zstd_level: level, digest: Some(DigestAlgorithm::Sha256) };
        let mut w = Writer::new(Vec::new(), "sparse.zt").unwrap();
        let comps = [
            ComponentData { role: "values", dtype: DType::F32, logical_type: None, data: bytemuck::cast_slice(&values) },
            ComponentData { role: "indices", dtype: DType::U64, logical_type: None, data: bytemuck::cast_slice(&indices) },
            ComponentData { role: "indptr", dtype: DType::U64, logical_type: None, data: bytemuck::cast_slice(&indptr) },
        ];
        w.add_object("csr", &[rows, 64], &Format::SparseCsr, Attributes::new(), &comps, store).unwrap();
        let mut qa = Attributes::new();
        qa.insert("bits".into(), CborValue::Integer(4.into()));
        let q = [
            ComponentData { role: "packed_weight", dtype: DType::I32, logical_type: None, data: bytemuck::cast_slice(&[1i32, 2, 3, 4]) },
            ComponentData { role: "scales", dtype: DType::F16, logical_type: None, data: &[0, 60, 0, 60] },
        ];
        w.add_object("q", &[4, 8], &Format::QuantizedGroup, qa.clone(), &q, store).unwrap();
        let bytes = w.finish().unwrap();
        let f = ZtFile::from_bytes("sparse.zt", &bytes, ReadOptions::default()).unwrap();
        prop_assert_eq!(&f.read("csr", "values").unwrap()[..], bytemuck::cast_slice::<f32, u8>(&values));
        prop_assert_eq!(&f.read("csr", "indptr").unwrap()[..], bytemuck::cast_slice::<u64, u8>(&indptr));
        prop_assert_eq!(&f.object("q").unwrap().attributes, &qa);
        let pw = f.component_tensor("q", "packed_weight").unwrap();
        prop_assert_eq!(pw.as_slice::<i32>().unwrap(), &[1, 2, 3, 4]);
    }
}

#[test]
fn writer_rejects_what_the_reader_would() {
    let mut w = Writer::new(Vec::new(), "bad.zt").unwrap();
    let err = w
        .add_dense("x", &[3], DType::F32, &[0; 8], StoreOptions::default())
        .unwrap_err();
    assert_eq!(err.rule().unwrap().name(), "length-mismatch");
    let err = w
        .add_object(
            "s",
            &[2, 2],
            &Format::SparseCoo,
            Attributes::new(),
            &[],
            StoreOptions::default(),
        )
        .unwrap_err();
    assert_eq!(err.rule().unwrap().name(), "missing-component");
}

#[test]
fn bool_views_check_every_byte() {
    let mut w = Writer::new(Vec::new(), "b.zt").unwrap();
    w.add_dense("b", &[3], DType::Bool, &[0, 1, 2], StoreOptions::default())
        .unwrap();
    let bytes = w.finish().unwrap();
    let f = ZtFile::from_bytes("b.zt", &bytes, ReadOptions::default()).unwrap();
    let t = f.tensor("b").unwrap();
    assert_eq!(t.as_slice::<u8>().unwrap(), &[0, 1, 2]);
    assert_eq!(t.as_bools().unwrap_err().name(), "bool-value");
}

#[test]
fn zero_copy_views_are_verified_unless_skipped() {
    let mut w = Writer::new(Vec::new(), "v.zt").unwrap();
    w.add_dense(
        "x",
        &[16],
        DType::F32,
        &[1; 64],
        StoreOptions {
            zstd_level: None,
            digest: Some(DigestAlgorithm::Sha256),
        },
    )
    .unwrap();
    let mut bytes = w.finish().unwrap();
    bytes[64] ^= 0xff; // corrupt the blob
    let f = ZtFile::from_bytes("v.zt", &bytes, ReadOptions::default()).unwrap();
    let err = f.tensor("x").unwrap_err();
    assert_eq!(err.rule().unwrap().name(), "digest-mismatch");
    assert!(
        err.to_string().contains("object \"x\", component \"data\""),
        "{err}"
    );
    let skip = ReadOptions {
        verify: zt_format::Verify::Skip,
        ..ReadOptions::default()
    };
    let f = ZtFile::from_bytes("v.zt", &bytes, skip).unwrap();
    assert!(f.tensor("x").unwrap().data.is_borrowed());
}

#[test]
fn huge_uncompressed_length_is_refused_before_allocating() {
    let data = vec![0u8; 4096];
    let mut w = Writer::new(Vec::new(), "z.zt").unwrap();
    w.add_dense(
        "x",
        &[4096],
        DType::U8,
        &data,
        StoreOptions {
            zstd_level: Some(3),
            digest: None,
        },
    )
    .unwrap();
    let bytes = w.finish().unwrap();
    let mut opts = ReadOptions::default();
    opts.limits.decompress_cap = 1024;
    let f = ZtFile::from_bytes("z.zt", &bytes, opts).unwrap();
    assert_eq!(
        f.tensor("x").unwrap_err().rule().unwrap().name(),
        "decompress-over-cap"
    );
}
