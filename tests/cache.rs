//! The client's component cache, end to end with `zt` against a real
//! daemon: a second fetch moves only the manifest, a new version only
//! what changed (a `.zt` with sha256 digests, and a safetensors file with
//! the daemon's), shared tensors are stored once, a corrupt entry is
//! discarded and fetched again, checksums are reused only for the same
//! URL and ETag, two processes share one copy, and the size bound holds.
//! Bytes on the wire are the daemon's own count
//! (`ztserve_bytes_sent_total`).

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::fetch::zt;
use common::quic::metric;
use common::Server;
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer, ZtFile};

/// One layer's bytes: small, so the suite stays quick.
const LAYER: u64 = 256 << 10;
/// What a fetch may move besides components (its manifest).
const SLACK: u64 = 64 << 10;
/// The shared-tensor test's tensors are 1 MiB, so that `zt fetch` stores
/// them with direct I/O.
const MIB: u64 = 1 << 20;

/// One `LAYER`-byte tensor `model.layers.{l}.w` per layer of `0..layers`; the
/// layers in `changed` hold other bytes (a new version of the model).
fn layer_bytes(l: u32, version: u32) -> Vec<u8> {
    bytes_of(LAYER, l, version)
}

/// `len` bytes that differ with `l` and `version`.
fn bytes_of(len: u64, l: u32, version: u32) -> Vec<u8> {
    (0..len as u32)
        .map(|i| {
            (i ^ l ^ (version << 24))
                .wrapping_mul(2654435761)
                .to_be_bytes()[0]
        })
        .collect()
}

fn write_zt(path: &Path, layers: u32, changed: &[u32], digest: DigestAlgorithm) {
    let mut w = Writer::new(Vec::new(), "layers").unwrap();
    for l in 0..layers {
        let v = u32::from(changed.contains(&l));
        w.add_dense(
            &format!("model.layers.{l}.w"),
            &[LAYER],
            DType::U8,
            &layer_bytes(l, v),
            StoreOptions {
                digest: Some(digest),
                ..StoreOptions::default()
            },
        )
        .unwrap();
    }
    std::fs::write(path, w.finish().unwrap()).unwrap();
}

fn write_safetensors(path: &Path, layers: u32, changed: &[u32]) {
    use safetensors::tensor::{Dtype, TensorView};
    let data: Vec<(String, Vec<u8>)> = (0..layers)
        .map(|l| {
            let v = u32::from(changed.contains(&l));
            (format!("model.layers.{l}.w"), layer_bytes(l, v))
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = data
        .iter()
        .map(|(n, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::U8, vec![b.len()], b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None::<HashMap<String, String>>, path).unwrap();
}

/// A daemon with QUIC on, and how `zt` reaches `file` over each transport.
struct Served {
    server: Server,
}

impl Served {
    fn new(root: &Path) -> Served {
        Served {
            server: Server::start_quic(root, &[]),
        }
    }

    fn urls(&self, file: &str) -> Vec<(String, Vec<String>)> {
        let (q, fp) = self.server.quic.clone().unwrap();
        vec![
            (
                format!("quic://{q}/{file}"),
                vec!["--cert-fingerprint".into(), fp],
            ),
            (self.server.url(&format!("/{file}")), vec![]),
        ]
    }

    fn sent(&self) -> u64 {
        metric(&self.server, "ztserve_bytes_sent_total")
    }

    /// `zt fetch` of `url` into `out` with the cache in `cache`; the bytes
    /// the daemon sent for it.
    fn fetch(&self, (url, extra): &(String, Vec<String>), out: &Path, cache: &Path) -> u64 {
        let before = self.sent();
        fetch_cached(url, extra, out, cache);
        self.sent() - before
    }
}

fn fetch_cached(url: &str, extra: &[String], out: &Path, cache: &Path) {
    let mut args = vec![
        "fetch",
        url,
        "-o",
        out.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ];
    args.extend(extra.iter().map(String::as_str));
    let r = zt(&args);
    assert!(
        r.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
}

/// `m.zt` of `layers` layers (sha256) served, and a work folder with the
/// path of a cache in it.
fn served_model(layers: u32) -> (tempfile::TempDir, Served, tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    write_zt(
        &root.path().join("m.zt"),
        layers,
        &[],
        DigestAlgorithm::Sha256,
    );
    let s = Served::new(root.path());
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    (root, s, work, cache)
}

/// The cache's entries and their bytes.
fn entries(cache: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for algorithm in ["sha256", "crc32c"] {
        let Ok(fans) = std::fs::read_dir(cache.join(algorithm)) else {
            continue;
        };
        for fan in fans.flatten() {
            for f in std::fs::read_dir(fan.path()).unwrap().flatten() {
                out.push((f.path(), f.metadata().unwrap().len()));
            }
        }
    }
    out
}

/// Every object of `a` is in `b` with the same bytes, and no others.
fn same_file(a: &Path, b: &Path) {
    let (fa, fb) = (ZtFile::open(a).unwrap(), ZtFile::open(b).unwrap());
    assert_eq!(
        fa.manifest().objects.keys().collect::<Vec<_>>(),
        fb.manifest().objects.keys().collect::<Vec<_>>()
    );
    for name in fa.manifest().objects.keys() {
        assert_eq!(
            fa.read(name, "data").unwrap()[..],
            fb.read(name, "data").unwrap()[..],
            "{name}"
        );
    }
}

#[test]
fn a_second_fetch_moves_only_the_manifest_and_a_new_version_only_what_changed() {
    let root = tempfile::tempdir().unwrap();
    write_zt(&root.path().join("v1.zt"), 32, &[], DigestAlgorithm::Sha256);
    write_zt(
        &root.path().join("v2.zt"),
        32,
        &[5, 20],
        DigestAlgorithm::Sha256,
    );
    let s = Served::new(root.path());
    for (i, url) in s.urls("v1.zt").into_iter().enumerate() {
        let work = tempfile::tempdir().unwrap();
        let (cache, out) = (work.path().join("cache"), work.path().join("out.zt"));
        let first = s.fetch(&url, &out, &cache);
        assert!(
            first >= 32 * LAYER,
            "{}: the first fetch moved {first} bytes",
            url.0
        );
        same_file(&root.path().join("v1.zt"), &out);
        assert_eq!(entries(&cache).len(), 32);

        std::fs::remove_file(&out).unwrap();
        let again = s.fetch(&url, &out, &cache);
        assert!(
            again < SLACK,
            "{}: the second fetch moved {again} bytes",
            url.0
        );
        same_file(&root.path().join("v1.zt"), &out);

        let v2 = &s.urls("v2.zt")[i];
        let out2 = work.path().join("v2.zt");
        let moved = s.fetch(v2, &out2, &cache);
        assert!(
            (2 * LAYER..2 * LAYER + SLACK).contains(&moved),
            "{}: two changed layers moved {moved} bytes",
            v2.0
        );
        same_file(&root.path().join("v2.zt"), &out2);
        assert_eq!(entries(&cache).len(), 34);
    }
}

#[test]
fn a_safetensors_files_server_digests_name_its_tensors_in_the_cache() {
    let root = tempfile::tempdir().unwrap();
    write_safetensors(&root.path().join("v1.safetensors"), 32, &[]);
    write_safetensors(&root.path().join("v2.safetensors"), 32, &[3, 30]);
    let s = Served::new(root.path());
    for (i, url) in s.urls("v1.safetensors").into_iter().enumerate() {
        let work = tempfile::tempdir().unwrap();
        let cache = work.path().join("cache");
        // A byte-identical copy, then the same again, then version 2.
        let copy = work.path().join("v1.safetensors");
        let first = s.fetch(&url, &copy, &cache);
        assert!(first >= 32 * LAYER, "{}: {first}", url.0);
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            std::fs::read(root.path().join("v1.safetensors")).unwrap()
        );
        std::fs::remove_file(&copy).unwrap();
        let again = s.fetch(&url, &copy, &cache);
        assert!(
            again < SLACK,
            "{}: the second copy moved {again} bytes",
            url.0
        );
        assert_eq!(
            std::fs::read(&copy).unwrap(),
            std::fs::read(root.path().join("v1.safetensors")).unwrap()
        );
        let v2 = &s.urls("v2.safetensors")[i];
        let copy2 = work.path().join("v2.safetensors");
        let moved = s.fetch(v2, &copy2, &cache);
        assert!(
            (2 * LAYER..2 * LAYER + SLACK).contains(&moved),
            "{}: two changed tensors moved {moved} bytes",
            v2.0
        );
        assert_eq!(
            std::fs::read(&copy2).unwrap(),
            std::fs::read(root.path().join("v2.safetensors")).unwrap()
        );
    }
}

#[test]
fn two_files_sharing_a_tensor_store_it_once() {
    let root = tempfile::tempdir().unwrap();
    for (file, own) in [("a.zt", 1u32), ("b.zt", 2)] {
        let mut w = Writer::new(Vec::new(), "shared").unwrap();
        let sha = StoreOptions {
            digest: Some(DigestAlgorithm::Sha256),
            ..StoreOptions::default()
        };
        w.add_dense("embed", &[MIB], DType::U8, &bytes_of(MIB, 0, 0), sha)
            .unwrap();
        w.add_dense("head", &[MIB], DType::U8, &bytes_of(MIB, own, 7), sha)
            .unwrap();
        std::fs::write(root.path().join(file), w.finish().unwrap()).unwrap();
    }
    let s = Served::new(root.path());
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let a = s.fetch(&s.urls("a.zt")[1], &work.path().join("a.zt"), &cache);
    assert!(a >= 2 * MIB, "{a}");
    let b = s.fetch(&s.urls("b.zt")[1], &work.path().join("b.zt"), &cache);
    assert!(
        (MIB..MIB + MIB / 4).contains(&b),
        "b.zt moved {b} bytes: its embedding came again"
    );
    assert_eq!(
        entries(&cache).len(),
        3,
        "the shared embedding is one entry"
    );
    same_file(&root.path().join("b.zt"), &work.path().join("b.zt"));
}

#[test]
fn a_corrupt_entry_is_discarded_and_fetched_again() {
    let root = tempfile::tempdir().unwrap();
    write_zt(&root.path().join("m.zt"), 8, &[], DigestAlgorithm::Sha256);
    let s = Served::new(root.path());
    for url in s.urls("m.zt") {
        let work = tempfile::tempdir().unwrap();
        let cache = work.path().join("cache");
        let out = work.path().join("m.zt");
        s.fetch(&url, &out, &cache);
        // One byte of one entry flipped on disk.
        let (victim, _) = entries(&cache).remove(3);
        let mut bytes = std::fs::read(&victim).unwrap();
        bytes[1000] ^= 0xff;
        std::fs::write(&victim, &bytes).unwrap();
        std::fs::remove_file(&out).unwrap();
        let moved = s.fetch(&url, &out, &cache);
        assert!(
            (LAYER..LAYER + SLACK).contains(&moved),
            "{}: moved {moved}",
            url.0
        );
        same_file(&root.path().join("m.zt"), &out);
        // The entry was stored again, whole.
        let v = zt(&["cache", "verify", "--cache-dir", cache.to_str().unwrap()]);
        let text = String::from_utf8_lossy(&v.stdout);
        assert!(v.status.success(), "{text}");
        assert!(text.contains("8 entries"), "{text}");
    }
}

#[test]
fn a_checksum_is_reused_only_for_the_same_url_and_etag() {
    let root = tempfile::tempdir().unwrap();
    write_zt(&root.path().join("c.zt"), 4, &[], DigestAlgorithm::Crc32c);
    std::fs::copy(root.path().join("c.zt"), root.path().join("d.zt")).unwrap();
    let s = Served::new(root.path());
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let out = work.path().join("out.zt");
    let c = &s.urls("c.zt")[1];
    assert!(s.fetch(c, &out, &cache) >= 4 * LAYER);
    std::fs::remove_file(&out).unwrap();
    assert!(
        s.fetch(c, &out, &cache) < SLACK,
        "the same URL and ETag reuse it"
    );
    // The same bytes under another name: a crc32c says they arrived
    // intact, not which bytes they are, so they come again.
    let d = s.fetch(&s.urls("d.zt")[1], &work.path().join("d.zt"), &cache);
    assert!(d >= 4 * LAYER, "d.zt moved {d} bytes");
    assert_eq!(entries(&cache).len(), 8);
}

#[test]
fn two_processes_fetching_at_once_both_succeed_with_one_copy() {
    let (root, s, work, cache) = served_model(32);
    let url = s.server.url("/m.zt");
    let children: Vec<_> = (0..2)
        .map(|i| {
            std::process::Command::new(common::zt_bin())
                .args(["fetch", &url, "-o"])
                .arg(work.path().join(format!("out{i}.zt")))
                .arg("--cache-dir")
                .arg(&cache)
                .output()
        })
        .collect();
    for c in children {
        let c = c.unwrap();
        assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
    }
    for i in 0..2 {
        same_file(
            &root.path().join("m.zt"),
            &work.path().join(format!("out{i}.zt")),
        );
    }
    assert_eq!(entries(&cache).len(), 32, "one copy of each component");
    assert_eq!(std::fs::read_dir(cache.join("tmp")).unwrap().count(), 0);
}

#[test]
fn the_size_bound_holds_and_zt_cache_lists_and_prunes() {
    let (root, s, work, cache) = served_model(32);
    let out = work.path().join("m.zt");
    let (url, _) = &s.urls("m.zt")[1];
    let r = zt(&[
        "fetch",
        url,
        "-o",
        out.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
        "--cache-max",
        "2560K",
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    same_file(&root.path().join("m.zt"), &out);
    let held: u64 = entries(&cache).iter().map(|(_, n)| n).sum();
    assert!(
        held <= 10 * LAYER,
        "the cache holds {held} bytes over its 2,560 KiB bound"
    );
    assert!(held >= 5 * LAYER, "the cache holds only {held} bytes");

    let dir = cache.to_str().unwrap();
    let list = zt(&["cache", "list", "--cache-dir", dir]);
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success());
    assert!(
        text.contains(&format!("{} entries, {held} bytes", entries(&cache).len())),
        "{text}"
    );
    assert!(text.contains("sha256:"), "{text}");
    let prune = zt(&["cache", "prune", "--to", "768K", "--cache-dir", dir]);
    assert!(
        prune.status.success(),
        "{}",
        String::from_utf8_lossy(&prune.stderr)
    );
    let left: u64 = entries(&cache).iter().map(|(_, n)| n).sum();
    assert!(left <= 3 * LAYER, "{left}");
    // A corrupt entry: `zt cache verify` names it, removes it, exits 1.
    let (victim, _) = entries(&cache).remove(0);
    std::fs::write(&victim, b"not the bytes").unwrap();
    let v = zt(&["cache", "verify", "--cache-dir", dir]);
    let text = String::from_utf8_lossy(&v.stdout);
    assert_eq!(v.status.code(), Some(1), "{text}");
    assert!(
        text.contains("removed") && text.contains("digest"),
        "{text}"
    );
    assert!(!victim.exists());
    // --no-cache neither reads nor writes it.
    std::fs::remove_file(&out).unwrap();
    let before = s.sent();
    let r = zt(&["fetch", url, "-o", out.to_str().unwrap(), "--no-cache"]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(s.sent() - before >= 32 * LAYER);
}

#[test]
fn the_library_bounded_below_one_object_still_finishes_and_never_guesses_a_selection() {
    let (_root, s, work, cache) = served_model(8);
    let url = s.server.url("/m.zt");
    // Half the layers cached: the rest come over the network, alongside.
    let half = work.path().join("half.zt");
    let select: Vec<String> = (0..4)
        .flat_map(|l| ["--select".to_owned(), format!("model.layers.{l}.w")])
        .collect();
    fetch_cached(&url, &select, &half, &cache);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let got = rt.block_on(async {
        let options = zt_client::Options {
            cache: Some(zt_client::cache::Cache::open(&cache, 1 << 30).unwrap()),
            require_digest: true,
            ..zt_client::Options::default()
        };
        let client = zt_client::Client::connect(&url, options).await.unwrap();
        // A manifest read for one object first: a fetch of everything must
        // not take it for the whole file.
        let one = client
            .manifest_of(&["model.layers.0.w".to_owned()])
            .await
            .unwrap();
        // At most 64 KiB held for a consumer that takes its time, with
        // objects of 256 KiB each.
        let mut f = client
            .fetch_bounded(&[], Some(&one.etag), 64 << 10)
            .await
            .unwrap();
        let mut names = Vec::new();
        loop {
            let next = tokio::time::timeout(std::time::Duration::from_secs(30), f.next()).await;
            match next.expect("the fetch stalled") {
                Some(d) => {
                    let d = d.unwrap();
                    assert_eq!(d.verification, zt_client::Verification::Verified);
                    names.push((d.object, d.data.len()));
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                None => break,
            }
        }
        names
    });
    assert_eq!(got.len(), 8, "{got:?}");
    assert!(got.iter().all(|(_, n)| *n == LAYER as usize));
}
