//! The daemon serving an object-storage root (`--root s3://bucket/prefix`)
//! from real S3 servers (`s3s-fs` and moto's, each in turn), against the
//! same files served from a local directory: the same listing, manifests
//! and content-derived ETags, byte ranges and whole fetches over HTTP and
//! ztp/1 verified; a safetensors file's ETag the same on two replicas
//! before and after its digests are computed, listed with its size and
//! ETag while they are; keys with non-ASCII and reserved characters
//! served; an invalid object named with its rule; an object replaced
//! under the daemon found before the headers and served in its new
//! version; a stopped store reported by `/readyz` and the catalog kept
//! until it answers again, then listed anew (s3s-fs: moto forgets its
//! objects when stopped).
//!
//! SKIPPED without the servers, unless `ZT_REQUIRE_S3=1`.

mod common;

use std::path::Path;
use std::time::Duration;

use common::quic::metric;
use common::s3::{credentials, s3s_fs, servers, Kind, S3};
use common::{curl, Server};
use object_store::path::Path as KeyPath;
use object_store::{ObjectStoreExt, PutPayload};

fn json(url: &str) -> serde_json::Value {
    let r = curl(&[], url);
    assert_eq!(r.status, 200, "{url}: {}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

/// The files of the test root, by path under it.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    common::layered_model(&dir.join("layers.zt"), 0..4);
    let t: [(&str, Vec<u8>, Vec<usize>); 2] = [
        ("a.weight", vec![0x3fu8; 4096], vec![32, 32]),
        (
            "b.bias",
            (0..=255u8).cycle().take(1 << 20).collect(),
            vec![1 << 19],
        ),
    ];
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = t
        .iter()
        .map(|(n, b, s)| {
            let dtype = if n.ends_with("bias") {
                safetensors::Dtype::F16
            } else {
                safetensors::Dtype::F32
            };
            let view = safetensors::tensor::TensorView::new(dtype, s.clone(), b).unwrap();
            ((*n).to_owned(), view)
        })
        .collect();
    let st = safetensors::serialize(views, None).unwrap();
    vec![
        (
            "sample.zt".to_owned(),
            std::fs::read(common::repo().join("models/sample.zt")).unwrap(),
        ),
        (
            "nested/layers.zt".to_owned(),
            std::fs::read(dir.join("layers.zt")).unwrap(),
        ),
        ("weights.safetensors".to_owned(), st),
        (
            "broken.zt".to_owned(),
            std::fs::read(common::repo().join("tests/reject/overlap.zt")).unwrap(),
        ),
        (".hidden.zt".to_owned(), b"not listed".to_vec()),
        ("model.gguf".to_owned(), zt_format::fuzz::gguf_sample()),
    ]
    .into_iter()
    .chain(ingest_pack(dir))
    .chain(NAMES.iter().map(|n| {
        let sample = std::fs::read(common::repo().join("models/sample.zt")).unwrap();
        (format!("names/{n}"), sample)
    }))
    .collect()
}

/// Issue 26, item 2: keys a listing gives with characters that URLs and
/// S3 treat specially, served under their names as they are.
const NAMES: [&str; 5] = [
    "café.zt",
    "sp ace+plus=eq.zt",
    "pct%41%zz.zt",
    "odd#[]{}^|~<>\".zt",
    "ünï/日本.zt",
];

/// A catalog path as a URL path: each segment percent-encoded.
fn url_path(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            percent_encoding::utf8_percent_encode(seg, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The files of an ingest pack (`zt ingest pack`), under `corpus/`.
fn ingest_pack(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let map = common::packs::symbol_map(&["<pad>", "<unk>", "hello", " world"]);
    std::fs::write(dir.join("map.json"), map).unwrap();
    std::fs::write(dir.join("a.txt"), "hello world, hello\n").unwrap();
    let (a, map, out) = (dir.join("a.txt"), dir.join("map.json"), dir.join("corpus"));
    common::packs::ingest_pack(&[&a], &map, None, &out);
    std::fs::read_dir(&out)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (format!("corpus/{name}"), std::fs::read(e.path()).unwrap())
        })
        .collect()
}

fn daemon_config(dir: &Path, s3: &S3) -> String {
    common::config_file(
        dir,
        &format!(
            "[catalog]\nrescan_interval_secs = 3600\n[storage]\nendpoint = \"{}\"\nregion = \"us-east-1\"\nallow_http = true\nmax_retries = 1\nretry_timeout_secs = 3\ncheck_interval_secs = 1\n",
            s3.endpoint
        ),
    )
}

fn etag(s: &Server, path: &str) -> String {
    let r = curl(&["-I"], &s.url(&format!("/v1/files/{path}")));
    assert_eq!(r.status, 200, "{path}");
    r.header("etag").unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_root_serves_what_a_local_root_serves() {
    for (kind, bin) in servers() {
        eprintln!("with {}", kind.name());
        serves_as_a_local_root(kind, &bin).await;
    }
}

/// Uploads the test files under `prod/` (keys as they are, never
/// escaped), and writes them under `local`.
async fn upload(up: &impl object_store::ObjectStore, files: &[(String, Vec<u8>)], local: &Path) {
    for (path, bytes) in files {
        let key = KeyPath::parse(format!("prod/{path}")).unwrap();
        up.put(&key, PutPayload::from(bytes.clone())).await.unwrap();
        let to = local.join(path);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::write(to, bytes).unwrap();
    }
    up.put(
        &KeyPath::from("other/outside.zt"),
        PutPayload::from(files[0].1.clone()),
    )
    .await
    .unwrap();
}

fn paths(v: &serde_json::Value, key: &str) -> Vec<String> {
    let mut p: Vec<String> = v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_owned())
        .collect();
    p.sort();
    p
}

/// What the daemon serves from the store, against a local root.
async fn serves_as_a_local_root(kind: Kind, bin: &Path) {
    let s3 = S3::start(kind, bin, "models");
    let up = s3.uploader("models");
    let local = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let files = files(scratch.path());
    upload(&up, &files, local.path()).await;

    let cfg = daemon_config(scratch.path(), &s3);
    let root = Path::new("s3://models/prod");
    let env = credentials();
    let a = Server::start_quic_env(root, &["--config", &cfg], &env);
    let b = Server::start_quic_env(root, &["--config", &cfg], &env);
    let l = Server::start_quic(local.path(), &[]);

    // The same files, the same invalid one with its rule, nothing outside
    // the prefix, no dotfile.
    let listing = json(&a.url("/v1/files"));
    let mut served = vec![
        "corpus/ingest_manifest.json".to_owned(),
        "corpus/matrix_atoms.bin".to_owned(),
        "model.gguf".to_owned(),
        "nested/layers.zt".to_owned(),
        "sample.zt".to_owned(),
        "weights.safetensors".to_owned(),
    ];
    served.extend(NAMES.iter().map(|n| format!("names/{n}")));
    served.sort();
    assert_eq!(
        paths(&listing, "files"),
        served,
        "{}: {listing}",
        kind.name()
    );
    assert_eq!(paths(&listing, "unavailable"), ["broken.zt"], "{listing}");
    // The safetensors file's digests are computed on request, not in the
    // background, on an object-storage root: it is listed all the same,
    // with its size and the ETag it is served under (issue 26, item 2).
    let row = |v: &serde_json::Value, path: &str| -> serde_json::Value {
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == path)
            .unwrap()
            .clone()
    };
    let st = row(&listing, "weights.safetensors");
    assert_eq!(st["digests"], "pending", "{st}");
    assert_eq!(st["size"], files[2].1.len(), "{st}");
    assert_eq!(row(&listing, "sample.zt")["digests"], "complete");
    assert!(
        paths(&listing, "hashing").contains(&"weights.safetensors".to_owned()),
        "the alias"
    );
    // Keys as listed, served under their names, byte for byte.
    for (path, bytes) in files.iter().filter(|(p, _)| p.starts_with("names/")) {
        let r = curl(&[], &a.url(&format!("/v1/files/{}", url_path(path))));
        assert_eq!(r.status, 200, "{}: {path}", kind.name());
        assert!(r.body == *bytes, "{path}");
        let r = curl(&["-r", "8-15"], &a.url(&format!("/{}", url_path(path))));
        assert_eq!((r.status, &r.body[..]), (206, &bytes[8..16]), "{path}");
    }
    let reason = listing["unavailable"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("broken.zt") && reason.contains("overlap"),
        "{reason}"
    );

    // `.zt` files with digests: content-derived ETags and manifests, the
    // same as from the local root. The safetensors file's digests are
    // computed: its ETag is the store version's, the same on both
    // replicas before and after a whole-manifest request hashes it.
    for path in ["sample.zt", "nested/layers.zt"] {
        assert_eq!(etag(&a, path), etag(&l, path), "{path}");
        let m = format!("/v1/files/{path}/manifest");
        assert_eq!(curl(&[], &a.url(&m)).body, curl(&[], &l.url(&m)).body);
    }
    // A GGUF file and an ingest pack (its members and its symbol map read
    // from the store) are served as from the local root.
    for path in ["model.gguf", "corpus/ingest_manifest.json"] {
        let m = format!("/v1/files/{path}/manifest");
        let (ma, ml) = (json(&a.url(&m)), json(&l.url(&m)));
        assert_eq!(ma["objects"], ml["objects"], "{path}");
        assert!(!ma["objects"].as_object().unwrap().is_empty(), "{path}");
    }
    let st_tag = etag(&a, "weights.safetensors");
    assert!(st_tag.starts_with("\"o-"), "{st_tag}");
    assert_eq!(
        st["etag"], st_tag,
        "listed under the tag it is served under"
    );
    assert_eq!(st_tag, etag(&b, "weights.safetensors"));
    let ma = json(&a.url("/v1/files/weights.safetensors/manifest"));
    let ml = json(&l.url("/v1/files/weights.safetensors/manifest"));
    assert_eq!(ma["objects"], ml["objects"], "computed digests differ");
    assert_eq!(st_tag, etag(&a, "weights.safetensors"));
    assert_eq!(st_tag, etag(&b, "weights.safetensors"));
    let st = row(&json(&a.url("/v1/files")), "weights.safetensors");
    assert_eq!(
        (st["digests"].as_str(), &st["etag"]),
        (Some("complete"), &serde_json::json!(st_tag))
    );

    // A component's byte range, as curl -r asks for it.
    let c = &ml["objects"]["b.bias"]["components"]["data"];
    let (off, len) = (c["offset"].as_u64().unwrap(), c["length"].as_u64().unwrap());
    let range = format!("{off}-{}", off + len - 1);
    let got = curl(&["-r", &range], &a.url("/weights.safetensors"));
    assert_eq!(got.status, 206);
    let original = &files[2].1;
    assert!(got.body == original[off as usize..(off + len) as usize]);

    // Whole fetches, verified, over both transports.
    let out = tempfile::tempdir().unwrap();
    let (q, fp) = a.quic.clone().unwrap();
    for (i, path) in ["nested/layers.zt", "weights.safetensors"]
        .iter()
        .enumerate()
    {
        for (j, (url, extra)) in [
            (a.url(&format!("/{path}")), vec![]),
            (
                format!("quic://{q}/{path}"),
                vec!["--cert-fingerprint", fp.as_str()],
            ),
        ]
        .iter()
        .enumerate()
        {
            let to = out
                .path()
                .join(format!("{i}-{j}-{}", path.replace('/', "_")));
            common::fetch::fetch_ok(url, &to, extra);
            // A safetensors copy is the file byte for byte; a `.zt` output
            // is written anew, with the same objects.
            let want = local.path().join(path);
            if path.ends_with(".zt") {
                common::fetch::same_objects(&to, &want, None);
            } else {
                let same = std::fs::read(&to).unwrap() == std::fs::read(&want).unwrap();
                assert!(same, "{url}: not byte-identical");
            }
        }
    }
    // An object's chunks sent over ztp/1 are kept by the store's piece
    // cache, not a second time by ztp/1's own (`quic.piece_cache_bytes`).
    assert_eq!(metric(&a, "ztserve_quic_piece_cache_bytes"), 0);
    let gets = metric(&a, "ztserve_store_requests_total{op=\"get\"}");
    assert!(gets >= 8, "{gets} GETs");
    // What a digest check read was sent without reading it again.
    assert!(metric(&a, "ztserve_store_cache_hits_total") > 0);
    // A range read again comes from the piece cache, not the store.
    let again = curl(&["-r", &range], &a.url("/weights.safetensors"));
    assert!(again.body == got.body);
    assert_eq!(
        metric(&a, "ztserve_store_requests_total{op=\"get\"}"),
        gets,
        "the cached range was read from the store again"
    );
    let metrics = String::from_utf8(curl(&[], &a.url("/metrics")).body).unwrap();
    assert!(
        metrics.contains("ztserve_store_get_seconds_bucket{le=\"+Inf\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("ztserve_store_bytes_total"), "{metrics}");
    // Issue 26, item 7: the store's families are documented, and a store
    // root exports every documented family.
    let exported = common::exported_metrics(&metrics);
    for (name, kind, _) in common::documented_metrics() {
        assert_eq!(exported.get(&name), Some(&kind), "{name} ({kind})");
    }
    assert_eq!(exported.len(), common::documented_metrics().len());

    // Replaced in the store under the daemon (issue 26, item 2): a Range
    // GET finds it before the headers, the object is listed again at once,
    // and the answer is the new version's, under its new ETag; `?v=` of
    // the old one is gone.
    let old_tag = etag(&a, "sample.zt");
    common::layered_model(&scratch.path().join("v2.zt"), 0..2);
    let other = std::fs::read(scratch.path().join("v2.zt")).unwrap();
    up.put(
        &KeyPath::from("prod/sample.zt"),
        PutPayload::from(other.clone()),
    )
    .await
    .unwrap();
    let r = curl(&["-r", "1000-1999"], &a.url("/sample.zt"));
    assert_eq!(
        r.status,
        206,
        "{}: {}",
        kind.name(),
        String::from_utf8_lossy(&r.body)
    );
    assert_ne!(r.header("etag"), Some(old_tag.as_str()));
    assert!(r.body == other[1000..2000], "the new version's bytes");
    let listed = row(&json(&a.url("/v1/files")), "sample.zt");
    assert_eq!(listed["etag"].as_str(), r.header("etag"), "{listed}");
    let pinned = curl(
        &[],
        &a.url(&format!("/sample.zt?v={}", old_tag.trim_matches('"'))),
    );
    assert_eq!(pinned.status, 412);
    let logged = common::eventually(Duration::from_secs(5), || {
        a.logs
            .try_iter()
            .any(|l| l.contains("changed on the server") && l.contains("sample.zt"))
    });
    assert!(logged, "no log line names the change");
    // And a component of a replaced object, by its URL: the first piece the
    // piece cache does not hold is read before the headers, and the answer
    // comes from the new version. (A response the cache holds whole is
    // the listed version's bytes under its tag, until the object is
    // listed again.)
    let was = row(&json(&a.url("/v1/files")), "sample.zt")["etag"].clone();
    let v3_path = scratch.path().join("v3.zt");
    common::layered_model(&v3_path, 0..3);
    up.put(
        &KeyPath::from("prod/sample.zt"),
        PutPayload::from(std::fs::read(&v3_path).unwrap()),
    )
    .await
    .unwrap();
    let refreshed = metric(&a, "ztserve_file_changed_total{when=\"before_headers\"}");
    let r = curl(
        &[],
        &a.url("/v1/files/sample.zt/objects/model.layers.1.w/data"),
    );
    assert_eq!(
        r.status,
        200,
        "{}: {}",
        kind.name(),
        String::from_utf8_lossy(&r.body)
    );
    let v3 = zt_format::ZtFile::open(&v3_path).unwrap();
    let c = &v3.manifest().objects["model.layers.1.w"].components["data"];
    let bytes = std::fs::read(&v3_path).unwrap();
    assert!(r.body == bytes[c.offset as usize..(c.offset + c.length) as usize]);
    assert_ne!(row(&json(&a.url("/v1/files")), "sample.zt")["etag"], was);
    assert_eq!(
        metric(&a, "ztserve_file_changed_total{when=\"before_headers\"}"),
        refreshed + 1
    );
}

/// The store stops: not ready, naming it; the catalog is kept. Back: ready,
/// and listed again at once (a version replaced meanwhile served). With
/// s3s-fs only: moto keeps its objects in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_store_is_reported_and_listed_again() {
    let Some(bin) = s3s_fs() else { return };
    let mut s3 = S3::start(Kind::S3sFs, &bin, "models");
    let up = s3.uploader("models");
    let (local, scratch) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let files = files(scratch.path());
    upload(&up, &files, local.path()).await;
    let cfg = daemon_config(scratch.path(), &s3);
    let a = Server::start_quic_env(
        Path::new("s3://models/prod"),
        &["--config", &cfg],
        &credentials(),
    );
    let served = paths(&json(&a.url("/v1/files")), "files");
    let old_tag = etag(&a, "sample.zt");
    // Replaced with no request reading it: only a listing finds it.
    common::layered_model(&scratch.path().join("v2.zt"), 0..2);
    let other = std::fs::read(scratch.path().join("v2.zt")).unwrap();
    up.put(&KeyPath::from("prod/sample.zt"), PutPayload::from(other))
        .await
        .unwrap();
    s3.stop();
    let down = common::eventually(Duration::from_secs(15), || {
        let r = curl(&[], &a.url("/readyz"));
        r.status == 503 && String::from_utf8_lossy(&r.body).contains("s3://models/prod")
    });
    assert!(down, "/readyz did not report the store");
    assert_eq!(paths(&json(&a.url("/v1/files")), "files"), served);
    s3.resume();
    let up_again = common::eventually(Duration::from_secs(20), || {
        curl(&[], &a.url("/readyz")).status == 200
    });
    assert!(up_again, "/readyz did not recover");
    let relisted = common::eventually(Duration::from_secs(10), || etag(&a, "sample.zt") != old_tag);
    assert!(relisted, "the changed object was not listed again");
}

/// Issue 30: a bucket's `ORG/NAME/` prefixes are Hub repositories, as a
/// directory's are: every object under one a file of it (not only model
/// files), the same commit and ETags on two replicas (an object's
/// identity is its key and store ETag), bytes and ranges as stored, and
/// an object replaced in the store found by the next read: a new commit,
/// the new bytes, never the old ones under the new commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buckets_prefixes_are_hub_repositories() {
    for (kind, bin) in servers() {
        eprintln!("with {}", kind.name());
        let s3 = S3::start(kind, &bin, "models");
        let up = s3.uploader("models");
        let scratch = tempfile::tempdir().unwrap();
        common::layered_model(&scratch.path().join("model.zt"), 0..2);
        let model = std::fs::read(scratch.path().join("model.zt")).unwrap();
        let objects: [(&str, Vec<u8>); 3] = [
            (
                "prod/org/m/config.json",
                br#"{"model_type":"bert"}"#.to_vec(),
            ),
            ("prod/org/m/tokenizer.json", b"{}".to_vec()),
            ("prod/org/m/model.zt", model.clone()),
        ];
        for (key, bytes) in &objects {
            up.put(&KeyPath::from(*key), PutPayload::from(bytes.clone()))
                .await
                .unwrap();
        }
        let cfg = daemon_config(scratch.path(), &s3);
        let root = Path::new("s3://models/prod");
        let a = Server::start_quic_env(root, &["--config", &cfg], &credentials());
        let b = Server::start_quic_env(root, &["--config", &cfg], &credentials());

        let info = json(&a.url("/api/models/org/m"));
        let files: Vec<&str> = info["siblings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["rfilename"].as_str().unwrap())
            .collect();
        assert_eq!(
            files,
            ["config.json", "model.zt", "tokenizer.json"],
            "{}",
            kind.name()
        );
        let sha = info["sha"].as_str().unwrap().to_owned();
        assert_eq!(
            json(&b.url("/api/models/org/m"))["sha"],
            sha,
            "replicas differ"
        );
        let url = |s: &Server, path: &str| s.url(&format!("/org/m/resolve/main/{path}"));
        let get = |s: &Server, path: &str| curl(&["-L"], &url(s, path));
        let (ra, rb) = (get(&a, "model.zt"), get(&b, "model.zt"));
        assert!(ra.body == model && rb.body == model, "{}", kind.name());
        assert_eq!(ra.header("etag"), rb.header("etag"));
        assert_eq!(ra.header("x-repo-commit"), Some(sha.as_str()));
        let part = curl(&["-L", "-r", "64-127"], &url(&a, "model.zt"));
        assert_eq!((part.status, &part.body[..]), (206, &model[64..128]));
        assert_eq!(get(&a, "config.json").body, objects[0].1);

        // Replaced in the store: the next read finds it (one that no read
        // has cached yet; a cached version is served until a listing). That
        // read was of the commit `main` led to, which no longer holds: it
        // fails by name, never with the new bytes; `main` then leads to
        // the new commit.
        up.put(
            &KeyPath::from("prod/org/m/tokenizer.json"),
            PutPayload::from(br#"{"version":2}"#.to_vec()),
        )
        .await
        .unwrap();
        let first = get(&a, "tokenizer.json");
        assert_eq!(first.status, 404, "{}", kind.name());
        assert_eq!(first.header("x-error-code"), Some("RevisionNotFound"));
        let r = get(&a, "tokenizer.json");
        assert_eq!(
            (r.status, &r.body[..]),
            (200, &br#"{"version":2}"#[..]),
            "{}",
            kind.name()
        );
        let now = r.header("x-repo-commit").unwrap();
        assert_ne!(now, sha);
        assert_eq!(json(&a.url("/api/models/org/m"))["sha"], now);
    }
}
