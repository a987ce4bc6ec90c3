//! The catalog over files in memory (`store::memory`): what it serves, what
//! it refuses and why, and a file replaced under an entry, without a disk.

use std::sync::Arc;

use zt_format::{DType, Limits, StoreOptions, Writer};

use super::{Catalog, Entry};
use crate::server::config::{DigestChoice, DigestsConfig};
use crate::server::store::memory::MemoryRoot;

/// A one-object `.zt` file whose four f32 values are `v`.
fn zt_of(v: f32) -> (Vec<u8>, Vec<u8>) {
    let data: Vec<u8> = [v; 4].iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut w = Writer::new(Vec::new(), "m.zt").unwrap();
    w.add_dense("w", &[4], DType::F32, &data, StoreOptions::default())
        .unwrap();
    (w.finish().unwrap(), data)
}

/// A catalog of `root` with the default digests, and its state folder.
fn catalog_of(root: &Arc<MemoryRoot>) -> (Catalog, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let catalog = Catalog::new(
        Arc::clone(root) as _,
        Limits::default(),
        &DigestsConfig::default(),
        state.path(),
        &[],
        true,
    )
    .unwrap();
    (catalog, state)
}

#[tokio::test]
async fn files_in_memory_are_served_refused_and_seen_replaced() {
    let root = Arc::new(MemoryRoot::default());
    let (file, one) = zt_of(1.0);
    root.put("m.zt", file);
    root.put("bad.zt", b"not a zTensor file at all".to_vec());
    let (catalog, _state) = catalog_of(&root);
    catalog.rescan().await;
    let snap = catalog.snapshot();

    let Some(Entry::Served(m)) = snap.get("m.zt") else {
        panic!("m.zt not served: {:?}", snap.get("m.zt"));
    };
    let c = m.manifest.component("w", "data").unwrap();
    let len = usize::try_from(c.length).unwrap();
    let got = m.file.read_async(len, c.offset, None).await.unwrap();
    assert_eq!(&got[..], &one[..]);
    m.check("w", "data").await.unwrap();

    let Some(Entry::Unavailable(bad)) = snap.get("bad.zt") else {
        panic!("bad.zt not refused: {:?}", snap.get("bad.zt"));
    };
    assert!(bad.reason.contains("bad.zt"), "{}", bad.reason);

    // Replaced under the entry: its reads fail, and the catalog serves the
    // new version under a new ETag once it loads the path again.
    let (file, two) = zt_of(2.0);
    root.put("m.zt", file);
    assert!(m.changed());
    assert!(m.file.read_async(len, c.offset, None).await.is_err());
    catalog.refresh("m.zt").await;
    let Some(Entry::Served(now)) = catalog.snapshot().get("m.zt").cloned() else {
        panic!("m.zt not served again");
    };
    assert_ne!(now.etag, m.etag);
    let c = now.manifest.component("w", "data").unwrap();
    let got = now.file.read_async(len, c.offset, None).await.unwrap();
    assert_eq!(&got[..], &two[..]);

    root.remove("m.zt");
    catalog.rescan().await;
    assert!(catalog.snapshot().get("m.zt").is_none());
}

/// Issue 28: a ragged object's zstd-compressed offsets are decoded and
/// checked a piece at a time, and a decrease among them is still caught
/// by name. The file is written with good offsets, then their stored
/// bytes are swapped for the compression of bad ones of the same length
/// (no digest stands in the way).
#[tokio::test]
async fn compressed_ragged_offsets_are_checked_as_they_are_decoded() {
    let zstd = StoreOptions {
        zstd_level: Some(3),
        digest: None,
    };
    let rows: [&[u8]; 2] = [b"ab", b"cde"];
    let mut w = Writer::new(Vec::new(), "r.zt").unwrap();
    w.add_ragged("t", &rows, zstd).unwrap();
    let mut file = w.finish().unwrap();
    let le = |v: [u64; 3]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let good = zstd::encode_all(&le([0, 2, 5])[..], 3).unwrap();
    let bad = zstd::encode_all(&le([0, 5, 2])[..], 3).unwrap();
    assert_eq!(good.len(), bad.len());
    let at = file
        .windows(good.len())
        .position(|w| w == good)
        .expect("the stored offsets");
    file[at..at + bad.len()].copy_from_slice(&bad);

    let root = Arc::new(MemoryRoot::default());
    root.put("r.zt", file);
    let state = tempfile::tempdir().unwrap();
    let catalog = Catalog::new(
        Arc::clone(&root) as _,
        Limits::default(),
        &DigestsConfig {
            algorithm: DigestChoice::Off,
            ..DigestsConfig::default()
        },
        state.path(),
        &[],
        true,
    )
    .unwrap();
    catalog.rescan().await;
    let Some(Entry::Served(r)) = catalog.snapshot().get("r.zt").cloned() else {
        panic!("r.zt not served: {:?}", catalog.snapshot().get("r.zt"));
    };
    r.check("t", "values").await.unwrap();
    let e = r.check("t", "offsets").await.unwrap_err().to_string();
    assert!(e.contains("ragged-offsets"), "{e}");
    assert!(e.contains("decrease at row 2: 2 after 5"), "{e}");
    assert!(e.contains("\"t\"") && e.contains("offsets"), "{e}");
}

/// Requests that find a sharded checkpoint not yet linked to its shards
/// wait for one linking, made once on the blocking pool, and all get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_is_linked_once_for_requests_that_come_together() {
    use safetensors::tensor::TensorView;
    let root = Arc::new(MemoryRoot::default());
    let data = vec![7u8; 64];
    let mut weight_map = serde_json::Map::new();
    for n in 1..=2 {
        let shard = format!("model-0000{n}-of-00002.safetensors");
        let views: Vec<(String, TensorView<'_>)> = (0..4)
            .map(|i| {
                let name = format!("layers.{}.weight", (n - 1) * 4 + i);
                weight_map.insert(name.clone(), serde_json::json!(shard));
                let v = TensorView::new(safetensors::Dtype::U8, vec![64], &data).unwrap();
                (name, v)
            })
            .collect();
        root.put(&shard, safetensors::serialize(views, None).unwrap());
    }
    let index = serde_json::json!({ "weight_map": weight_map });
    root.put(
        "model.safetensors.index.json",
        serde_json::to_vec(&index).unwrap(),
    );
    let (catalog, _state) = catalog_of(&root);
    let catalog = Arc::new(catalog);
    catalog.rescan().await;
    let asks = (0..8).map(|_| {
        let c = Arc::clone(&catalog);
        tokio::spawn(async move {
            c.resolve("model.safetensors.index.json", super::Need::Everything)
                .await
        })
    });
    let got = futures_util::future::join_all(asks).await;
    let served: Vec<Arc<super::Served>> = got
        .into_iter()
        .map(|r| match r.unwrap() {
            Some(Entry::Served(s)) => s,
            other => panic!("not served: {other:?}"),
        })
        .collect();
    assert_eq!(served[0].manifest.objects.len(), 8);
    assert!(
        served.iter().all(|s| Arc::ptr_eq(s, &served[0])),
        "one linking, shared"
    );
}
