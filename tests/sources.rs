//! safetensors files served as they are: listed with their source, their
//! tensors' digests computed by the daemon (and kept in its state
//! directory across restarts), fetched over both transports and verified,
//! and a hostile header refused by name while the rest is served.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::fetch::{fetch_ok, zt};
use common::quic::metric;
use common::{curl, Server};
use safetensors::tensor::{Dtype, TensorView};
use zt_format::{ReadOptions, ZtFile};

/// Tensors of several dtypes, each with its own bytes, layered by name.
fn tensors() -> BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let specs = [
        ("model.layers.0.w", Dtype::F32, vec![64, 64]),
        ("model.layers.1.w", Dtype::BF16, vec![32, 48]),
        ("model.layers.1.bias", Dtype::F16, vec![48]),
        ("embed.ids", Dtype::I64, vec![10]),
        ("mask", Dtype::BOOL, vec![7]),
        ("scale", Dtype::F8_E4M3, vec![5]),
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(i, (name, dtype, shape))| {
            let n: usize = shape.iter().product::<usize>() * dtype.bitsize() / 8;
            let bytes = (0..n)
                .map(|j| match dtype {
                    Dtype::BOOL => (j % 2) as u8,
                    _ => ((i * 131 + j * 7) % 251) as u8,
                })
                .collect();
            (name.to_owned(), (dtype, shape, bytes))
        })
        .collect()
}

fn write_safetensors(path: &Path) -> BTreeMap<String, (Dtype, Vec<usize>, Vec<u8>)> {
    let t = tensors();
    let views: Vec<(String, TensorView<'_>)> = t
        .iter()
        .map(|(n, (d, s, b))| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta = Some(std::collections::HashMap::from([(
        "format".to_owned(),
        "pt".to_owned(),
    )]));
    safetensors::serialize_to_file(views, meta, path).unwrap();
    // The crate writes through a private (0600) temporary; a file people
    // serve is readable (nginx's workers run as another user).
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    t
}

fn json(url: &str) -> serde_json::Value {
    let r = curl(&[], url);
    assert_eq!(r.status, 200, "{url}: {}", String::from_utf8_lossy(&r.body));
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn safetensors_are_served_with_computed_digests_over_both_transports() {
    let root = tempfile::tempdir().unwrap();
    let original = root.path().join("model.safetensors");
    let t = write_safetensors(&original);
    let file = std::fs::read(&original).unwrap();
    // A header whose tensor runs past the end of the file.
    let header = br#"{"evil":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let mut bad = (header.len() as u64).to_le_bytes().to_vec();
    bad.extend_from_slice(header);
    bad.extend_from_slice(&[0u8; 8]);
    std::fs::write(root.path().join("broken.safetensors"), &bad).unwrap();

    let s = Server::start_quic(root.path(), &[]);
    // The manifest waits for the digests; each is the sha256 of the bytes.
    let m = json(&s.url("/v1/files/model.safetensors/manifest"));
    assert_eq!(m["source"], "safetensors");
    assert_eq!(m["attributes"]["format"], "pt");
    assert_eq!(m["objects"].as_object().unwrap().len(), t.len());
    for (name, (_, shape, bytes)) in &t {
        let o = &m["objects"][name];
        assert_eq!(o["format"], "dense", "{name}");
        let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        assert_eq!(o["shape"], serde_json::json!(shape), "{name}");
        let c = &o["components"]["data"];
        assert_eq!(c["digest_by"], "server", "{name}");
        let want = zt_format::DigestAlgorithm::Sha256.digest(bytes);
        assert_eq!(c["digest"], want.to_string(), "{name}");
        // The offsets are the file's: curl -r gets the tensor's bytes.
        let (off, len) = (c["offset"].as_u64().unwrap(), c["length"].as_u64().unwrap());
        let got = &file[off as usize..(off + len) as usize];
        assert_eq!(got, &bytes[..], "{name}");
        let r = curl(
            &["-r", &format!("{off}-{}", off + len - 1)],
            &s.url("/model.safetensors"),
        );
        assert_eq!(r.status, 206);
        assert_eq!(r.body, *bytes, "{name} by Range");
    }
    assert_eq!(
        m["objects"]["scale"]["components"]["data"]["type"],
        "f8_e4m3fn"
    );

    // The broken file is listed as unavailable, naming the file, the
    // tensor and the rule.
    let list = json(&s.url("/v1/files"));
    let files = list["files"].as_array().unwrap();
    assert!(files
        .iter()
        .any(|f| f["path"] == "model.safetensors" && f["source"] == "safetensors"));
    let why = list["unavailable"][0]["reason"].as_str().unwrap();
    assert!(
        why.contains("broken.safetensors") && why.contains("\"evil\"") && why.contains("outside"),
        "{why}"
    );

    // Fetched over ztp/1 and both HTTP URL forms, every byte verified
    // against the computed digests; the output is a .zt file.
    let (q, fp) = s.quic.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let urls = [
        (
            format!("quic://{q}/model.safetensors"),
            vec!["--cert-fingerprint", fp.as_str()],
        ),
        (s.url("/v1/files/model.safetensors"), vec![]),
        (s.url("/model.safetensors"), vec![]),
    ];
    for (i, (url, extra)) in urls.iter().enumerate() {
        let out = dir.path().join(format!("out{i}.zt"));
        let mut args = vec!["--require-digest"];
        args.extend(extra);
        fetch_ok(url, &out, &args);
        let f = ZtFile::open_with(&out, ReadOptions::default()).unwrap();
        assert_eq!(f.manifest().source, zt_format::Source::Zt);
        for (name, (_, _, bytes)) in &t {
            assert_eq!(f.stored(name, "data").unwrap(), &bytes[..], "{url}: {name}");
        }
    }
    drop(s);
}

#[test]
fn computed_digests_survive_a_restart_and_a_changed_file_is_hashed_anew() {
    let root = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let path = root.path().join("m.safetensors");
    write_safetensors(&path);
    let state_arg = state.path().to_str().unwrap();
    let etag = |s: &Server| {
        let r = curl(&["-I"], &s.url("/v1/files/m.safetensors/manifest"));
        assert_eq!(r.status, 200);
        r.header("x-zt-etag").unwrap().to_owned()
    };

    let s = Server::start(root.path(), &["--state-dir", state_arg]);
    let first = etag(&s);
    assert_eq!(metric(&s, "ztserve_digest_files_total"), 1);
    drop(s);

    // Same file, new daemon: the digests come from the store.
    let s = Server::start(root.path(), &["--state-dir", state_arg]);
    assert_eq!(
        etag(&s),
        first,
        "the ETag is the content's, not the process's"
    );
    assert_eq!(metric(&s, "ztserve_digest_store_hits_total"), 1);
    assert_eq!(metric(&s, "ztserve_digest_files_total"), 0);
    drop(s);

    // One byte of one tensor changed in place, same size: hashed anew,
    // and a different ETag.
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let s = Server::start(root.path(), &["--state-dir", state_arg]);
    assert_ne!(etag(&s), first);
    assert_eq!(metric(&s, "ztserve_digest_files_total"), 1);
}

/// A plain Range server knows nothing of sources: the HTTP client reads a
/// safetensors or GGUF header itself through the source's read plan, and
/// builds a GGUF string array's rows from the header it read. Nothing
/// carries a digest there, so the output holds the bytes unverified, as
/// `--require-digest` says.
#[test]
fn the_client_reads_safetensors_and_gguf_headers_from_nginx_itself() {
    let root = tempfile::tempdir().unwrap();
    let t = write_safetensors(&root.path().join("m.safetensors"));
    let gguf = zt_format::fuzz::gguf_sample();
    std::fs::write(root.path().join("m.gguf"), &gguf).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nginx = common::nginx::Nginx::start(root.path(), common::free_port(), dir.path()).unwrap();
    let url = |f: &str| format!("http://127.0.0.1:{}/{f}", nginx.port);

    let out = dir.path().join("st.zt");
    let r = zt(&["fetch", &url("m.safetensors"), "-o", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let f = ZtFile::open(&out).unwrap();
    for (name, (_, _, bytes)) in &t {
        assert_eq!(f.stored(name, "data").unwrap(), &bytes[..], "{name}");
    }
    let r = zt(&[
        "fetch",
        &url("m.safetensors"),
        "-o",
        out.to_str().unwrap(),
        "--require-digest",
    ]);
    assert_eq!(
        r.status.code(),
        Some(3),
        "undigested bytes are not verified bytes"
    );

    let out = dir.path().join("gguf.zt");
    let r = zt(&["fetch", &url("m.gguf"), "-o", out.to_str().unwrap()]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let got = ZtFile::open(&out).unwrap();
    let want = ZtFile::from_bytes("m.gguf", &gguf, ReadOptions::default()).unwrap();
    assert_eq!(
        got.manifest().objects.keys().collect::<Vec<_>>(),
        want.manifest().objects.keys().collect::<Vec<_>>()
    );
    for (o, r, _) in want.manifest().components() {
        assert_eq!(
            got.stored(o, r).unwrap(),
            want.stored(o, r).unwrap(),
            "{o}/{r}"
        );
    }
    let tokens = got.stored("@tokenizer.ggml.tokens", "values").unwrap();
    assert!(tokens.starts_with("tok0▁tok1▁".as_bytes()));
}

/// A GGUF file pads every tensor to its alignment, so a file of many
/// small tensors has as many gaps between components, which a copy reads
/// as byte ranges: thousands of them did not fit in one ztp/1 request
/// (the server closed the connection: message_too_large), and over HTTP
/// took a request each, one after another.
#[test]
fn byte_identical_copies_of_files_with_thousands_of_gaps() {
    let root = tempfile::tempdir().unwrap();
    // Gaps 3 bytes apart (read together), and 4,100 bytes apart (read as
    // ranges: more than one ztp/1 request holds).
    let files = [
        (
            "tiny.gguf",
            zt_format::fuzz::gguf_of_small_tensors(8_000, 3),
        ),
        (
            "apart.gguf",
            zt_format::fuzz::gguf_of_small_tensors(2_100, 4_100),
        ),
    ];
    for (name, bytes) in &files {
        std::fs::write(root.path().join(name), bytes).unwrap();
    }
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (name, original) in &files {
        let urls = [
            (s.url(&format!("/{name}")), vec![]),
            (
                format!("quic://{q}/{name}"),
                vec!["--cert-fingerprint", fp.as_str()],
            ),
        ];
        for (i, (url, extra)) in urls.iter().enumerate() {
            let out = dir.path().join(format!("{i}.{name}"));
            fetch_ok(url, &out, extra);
            assert!(
                std::fs::read(&out).unwrap() == *original,
                "{url}: not byte-identical"
            );
        }
    }
}

/// `-o NAME.safetensors` of a safetensors file (`.gguf` of a GGUF file)
/// writes the served file byte for byte, over ztp/1 (the bytes between
/// components as a `get` with `ranges`) and over HTTP, from the daemon and
/// from nginx; a selection, or another source's name, is refused before
/// anything is written.
#[test]
fn byte_identical_copies_named_after_their_source() {
    let root = tempfile::tempdir().unwrap();
    write_safetensors(&root.path().join("m.safetensors"));
    std::fs::write(root.path().join("m.gguf"), zt_format::fuzz::gguf_sample()).unwrap();
    let s = Server::start_quic(root.path(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let nport = common::free_port();
    let nginx = common::nginx::Nginx::start(root.path(), nport, dir.path()).unwrap();
    for name in ["m.safetensors", "m.gguf"] {
        let original = std::fs::read(root.path().join(name)).unwrap();
        let (q, fp) = s.quic.clone().unwrap();
        let urls = [
            (s.url(&format!("/{name}")), vec![]),
            (format!("http://127.0.0.1:{nport}/{name}"), vec![]),
            (
                format!("quic://{q}/{name}"),
                vec!["--cert-fingerprint", fp.as_str()],
            ),
        ];
        for (i, (url, extra)) in urls.iter().enumerate() {
            let out = dir.path().join(format!("{i}.{name}"));
            fetch_ok(url, &out, extra);
            assert!(
                std::fs::read(&out).unwrap() == original,
                "{url}: not byte-identical"
            );
        }
        let out = dir.path().join(format!("sel.{name}"));
        let r = zt(&[
            "fetch",
            urls[0].0.as_str(),
            "-o",
            out.to_str().unwrap(),
            "--select",
            "*",
        ]);
        assert_eq!(
            r.status.code(),
            Some(2),
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert!(!out.exists() && !dir.path().join(format!("sel.{name}.part")).exists());
    }
    let r = zt(&[
        "fetch",
        &s.url("/m.gguf"),
        "-o",
        dir.path().join("x.safetensors").to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&r.stderr);
    assert!(
        msg.contains("names a safetensors file") && msg.contains("is a gguf file"),
        "{msg}"
    );
    drop(nginx);
}

/// With `digests.algorithm = "blake3"` the daemon vouches for every tensor
/// with the BLAKE3 of its bytes, named in the manifest; fetches over both
/// transports verify against it (`--require-digest`), a byte-identical
/// copy is byte-identical, and a `.zt` output carries the crc32c of the
/// verified bytes instead (the format names sha256 and crc32c), which the
/// format crate then checks on every read.
#[test]
fn blake3_digests_are_verified_and_written_into_zt_files_as_crc32c() {
    let root = tempfile::tempdir().unwrap();
    let original = root.path().join("model.safetensors");
    let t = write_safetensors(&original);
    // One tensor over several of the client's hashing strides (256 KiB),
    // not a multiple of one, in a file of its own.
    let big: Vec<u8> = (0..(3 << 18) + 17)
        .map(|i: usize| (i % 253) as u8)
        .collect();
    let view = TensorView::new(Dtype::U8, vec![big.len()], &big).unwrap();
    safetensors::serialize_to_file([("big", view)], None, &root.path().join("big.safetensors"))
        .unwrap();
    let env = [("ZTSERVE_DIGESTS_ALGORITHM".to_owned(), "blake3".to_owned())];
    let s = Server::start_quic_env(root.path(), &[], &env);
    let m = json(&s.url("/v1/files/model.safetensors/manifest"));
    for (name, (_, _, bytes)) in &t {
        let c = &m["objects"][name]["components"]["data"];
        assert_eq!(c["digest_by"], "server", "{name}");
        let want = zt_format::DigestAlgorithm::Blake3.digest(bytes);
        assert_eq!(c["digest"], want.to_string(), "{name}");
        // The component's ETag is its blake3, as a sha256 one's is.
        let url = s.url(&format!("/v1/files/model.safetensors/objects/{name}/data"));
        let r = curl(&["-I"], &url);
        let hex = &want.to_string()["blake3:".len()..];
        assert_eq!(r.header("etag"), Some(format!("\"blake3-{hex}\"").as_str()));
    }
    let (q, fp) = s.quic.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("big.zt");
    let url = format!("quic://{q}/big.safetensors");
    fetch_ok(&url, &out, &["--require-digest", "--cert-fingerprint", &fp]);
    let f = ZtFile::open_with(&out, ReadOptions::default()).unwrap();
    assert_eq!(f.stored("big", "data").unwrap(), &big[..]);
    let urls = [
        (
            format!("quic://{q}/model.safetensors"),
            vec!["--cert-fingerprint", fp.as_str()],
        ),
        (s.url("/model.safetensors"), vec![]),
    ];
    let file = std::fs::read(&original).unwrap();
    for (i, (url, extra)) in urls.iter().enumerate() {
        let mut args = vec!["--require-digest"];
        args.extend(extra);
        let out = dir.path().join(format!("out{i}.zt"));
        fetch_ok(url, &out, &args);
        let f = ZtFile::open_with(&out, ReadOptions::default()).unwrap();
        for (name, (_, _, bytes)) in &t {
            let c = f.manifest().component(name, "data").unwrap();
            let crc = zt_format::DigestAlgorithm::Crc32c.digest(bytes);
            assert_eq!(c.digest.as_ref(), Some(&crc), "{url}: {name}");
            assert!(!c.digest_computed, "{url}: {name}");
            assert_eq!(f.stored(name, "data").unwrap(), &bytes[..], "{url}: {name}");
        }
        let copy = dir.path().join(format!("copy{i}.safetensors"));
        fetch_ok(url, &copy, &args);
        assert!(
            std::fs::read(&copy).unwrap() == file,
            "{url}: not byte-identical"
        );
    }
    drop(s);
}

/// A sharded checkpoint (two safetensors shards and their index) is one
/// model at the index's path, each shard still a file of its own: its
/// manifest names the shard of every component and each shard's ETag; the
/// index is served raw; fetches over both transports take each tensor
/// from its shard, whole or by selection. A bad index is refused by name.
#[test]
fn a_sharded_checkpoint_is_one_model() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    let all = tensors();
    let (first, second): (Vec<_>, Vec<_>) = all.iter().enumerate().partition(|(i, _)| i % 2 == 0);
    let mut weight_map = serde_json::Map::new();
    for (n, part) in [(1, first), (2, second)] {
        let shard = format!("model-0000{n}-of-00002.safetensors");
        let views: Vec<(String, TensorView<'_>)> = part
            .iter()
            .map(|(_, (name, (d, s, b)))| {
                weight_map.insert((*name).clone(), serde_json::json!(shard));
                ((*name).clone(), TensorView::new(*d, s.clone(), b).unwrap())
            })
            .collect();
        let path = dir.join(&shard);
        safetensors::serialize_to_file(views, None, &path).unwrap();
    }
    let index = serde_json::json!({ "metadata": { "total_size": 1 }, "weight_map": weight_map });
    let index_bytes = serde_json::to_vec_pretty(&index).unwrap();
    std::fs::write(dir.join("model.safetensors.index.json"), &index_bytes).unwrap();
    std::fs::write(
        dir.join("bad.safetensors.index.json"),
        br#"{"weight_map":{"x":"../../etc/passwd"}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("lost.safetensors.index.json"),
        br#"{"weight_map":{"x":"gone.safetensors"}}"#,
    )
    .unwrap();

    let s = Server::start_quic(root.path(), &[]);
    let m = json(&s.url("/v1/files/m/model.safetensors.index.json/manifest"));
    assert_eq!(m["source"], "safetensors-index");
    let list = json(&s.url("/v1/files"));
    let etag_of = |p: &str| {
        list["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"] == p)
            .unwrap()["etag"]
            .clone()
    };
    for n in [1, 2] {
        let shard = format!("model-0000{n}-of-00002.safetensors");
        assert_eq!(
            m["files"][&shard]["etag"],
            etag_of(&format!("m/{shard}")),
            "{shard}"
        );
    }
    assert_eq!(m["objects"].as_object().unwrap().len(), all.len());
    for (name, shard) in &weight_map {
        assert_eq!(
            m["objects"][name]["components"]["data"]["file"], *shard,
            "{name}"
        );
    }
    // The index itself, raw.
    let r = curl(&[], &s.url("/m/model.safetensors.index.json"));
    assert_eq!((r.status, r.body), (200, index_bytes));
    // Refused by name.
    let why = list["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["path"] == "m/bad.safetensors.index.json")
        .unwrap()["reason"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        why.contains("index-shard-path") || why.contains("not a plain relative path"),
        "{why}"
    );
    let r = curl(
        &[],
        &s.url("/v1/files/m/lost.safetensors.index.json/manifest"),
    );
    assert_eq!(r.status, 409);
    assert!(String::from_utf8_lossy(&r.body).contains("gone.safetensors"));

    // -o DIR/: the index and its shards, each byte-identical; the index
    // is written last. Over HTTP and over ztp/1.
    let copy = tempfile::tempdir().unwrap();
    let (q, fp) = s.quic.clone().unwrap();
    let quic = format!("quic://{q}/m/model.safetensors.index.json");
    let sources = [
        (
            s.url("/m/model.safetensors.index.json"),
            vec!["--require-digest"],
        ),
        (quic.clone(), vec!["--cert-fingerprint", fp.as_str()]),
    ];
    for (i, (url, extra)) in sources.iter().enumerate() {
        let into = format!("{}/ckpt{i}/", copy.path().display());
        // The trailing `/` asks for a directory.
        fetch_ok(url, Path::new(&into), extra);
        for name in [
            "model.safetensors.index.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ] {
            let got = std::fs::read(copy.path().join(format!("ckpt{i}")).join(name)).unwrap();
            assert!(
                got == std::fs::read(dir.join(name)).unwrap(),
                "{url}: {name} differs"
            );
        }
    }

    let out_dir = tempfile::tempdir().unwrap();
    let urls = [
        (
            format!("quic://{q}/m/model.safetensors.index.json"),
            vec!["--cert-fingerprint", fp.as_str()],
        ),
        (s.url("/m/model.safetensors.index.json"), vec![]),
    ];
    for (i, (url, extra)) in urls.iter().enumerate() {
        for select in [None, Some("model.layers.1.*")] {
            let out = out_dir.path().join(format!("{i}-{}.zt", select.is_some()));
            let mut args = vec!["--require-digest"];
            args.extend(extra);
            if let Some(sel) = select {
                args.extend(["--select", sel]);
            }
            fetch_ok(url, &out, &args);
            let f = ZtFile::open(&out).unwrap();
            let want: Vec<&String> = all
                .keys()
                .filter(|n| select.is_none() || n.starts_with("model.layers.1."))
                .collect();
            assert_eq!(
                f.manifest().objects.keys().collect::<Vec<_>>(),
                want,
                "{url}"
            );
            for name in want {
                assert_eq!(
                    f.stored(name, "data").unwrap(),
                    &all[name].2[..],
                    "{url}: {name}"
                );
            }
        }
    }
}

/// Writes a checkpoint of two shards and their index into `dir`, each
/// shard's one tensor filled with `fill`; each file replaced by a rename.
fn two_shards(dir: &Path, fill: u8) {
    let mut weight_map = serde_json::Map::new();
    for n in [1, 2] {
        let shard = format!("model-0000{n}-of-00002.safetensors");
        let name = format!("t{n}");
        weight_map.insert(name.clone(), serde_json::json!(shard));
        let bytes = vec![fill; 4096 * n];
        let view = TensorView::new(Dtype::U8, vec![4096 * n], &bytes).unwrap();
        let tmp = dir.join(format!(".{shard}.tmp"));
        safetensors::serialize_to_file(vec![(name, view)], None, &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(&shard)).unwrap();
    }
    let index =
        serde_json::json!({ "metadata": { "total_size": 12288 }, "weight_map": weight_map });
    let tmp = dir.join(".index.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&index).unwrap()).unwrap();
    std::fs::rename(&tmp, dir.join("model.safetensors.index.json")).unwrap();
}

/// A daemon serving a two-shard checkpoint (filled with 1s) in `m/`:
/// the root, that folder, the daemon, and the index's URL.
fn two_shards_served() -> (tempfile::TempDir, std::path::PathBuf, Server, String) {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("m");
    std::fs::create_dir(&dir).unwrap();
    two_shards(&dir, 1);
    let s = Server::start(root.path(), &[]);
    let url = s.url("/m/model.safetensors.index.json");
    (root, dir, s, url)
}

/// A fetch into a directory that holds an earlier version of the
/// checkpoint, failing after its first shard (the second cannot be
/// written), leaves the directory's index and shards as they were: one
/// version, never a new shard beside the old index. Run again once it
/// can, it leaves the new version whole.
#[test]
fn a_failed_update_of_a_directory_leaves_its_checkpoint_whole() {
    let (_root, dir, s, url) = two_shards_served();
    let copy = tempfile::tempdir().unwrap();
    let into = copy.path().join("ckpt");
    let names = [
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ];
    // Each file's name and the BLAKE3 of its bytes (short to print).
    let read_all = |d: &Path| -> Vec<(&str, String)> {
        names
            .iter()
            .map(|n| {
                let bytes = std::fs::read(d.join(n)).unwrap_or_default();
                (*n, blake3::hash(&bytes).to_hex()[..16].to_owned())
            })
            .collect()
    };
    fetch_ok(&url, Path::new(&format!("{}/", into.display())), &[]);
    let v1 = read_all(&dir);
    assert_eq!(read_all(&into), v1);

    // Version 2 served; the second shard's partial file cannot be made
    // (a folder in its place, where this build and the one before write it).
    let files =
        || json(&s.url("/v1/files/m/model.safetensors.index.json/manifest"))["files"].clone();
    let before = files();
    two_shards(&dir, 2);
    let v2 = read_all(&dir);
    // Until the daemon has seen the new shards, it serves the old ones
    // (from the files it holds open, under their ETags).
    let since = std::time::Instant::now();
    while files() == before {
        assert!(
            since.elapsed().as_secs() < 60,
            "the daemon never saw version 2"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let blocked = [
        into.join("model-00002-of-00002.safetensors.part"),
        into.join(
            ".zt-fetching/model.safetensors.index.json/model-00002-of-00002.safetensors.part",
        ),
    ];
    for b in &blocked {
        std::fs::create_dir_all(b).unwrap();
    }
    let into_dir = format!("{}/", into.display());
    let r = zt(&["fetch", &url, "-o", &into_dir]);
    assert!(!r.status.success(), "the fetch succeeded");
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        stderr.contains("model-00002-of-00002.safetensors"),
        "{stderr}"
    );
    assert_eq!(
        read_all(&into),
        v1,
        "the directory no longer holds one version: {stderr}"
    );

    for b in &blocked {
        std::fs::remove_dir(b).unwrap();
    }
    fetch_ok(&url, Path::new(&into_dir), &[]);
    assert_eq!(read_all(&into), v2);
    assert!(
        !into.join(".zt-fetching").exists(),
        "the staging folder stays"
    );

    // A staging folder another fetch holds (locked: here, by this test;
    // a fetch stopped while it installs still holds it until the install
    // ends) refuses this one at once, naming it; the directory stays.
    let staging = into.join(".zt-fetching/model.safetensors.index.json");
    {
        use std::os::unix::fs::DirBuilderExt as _;
        let mut mkdir = std::fs::DirBuilder::new();
        mkdir.mode(0o700).recursive(true).create(&staging).unwrap();
    }
    let held = std::fs::File::open(&staging).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    let r = zt(&["fetch", &url, "-o", &into_dir]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "fetched beside another fetch");
    assert!(
        stderr.contains("another fetch into this folder"),
        "{stderr}"
    );
    assert!(stderr.contains(".zt-fetching"), "{stderr}");
    assert_eq!(read_all(&into), v2);
    drop(held);
    fetch_ok(&url, Path::new(&into_dir), &[]);
    assert!(!into.join(".zt-fetching").exists());

    // A staging folder that is a link (or another user's) is refused:
    // shards are never staged, or moved, through it.
    let elsewhere = copy.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let theirs = elsewhere.join("model-00001-of-00002.safetensors");
    std::fs::write(&theirs, b"not the fetch's").unwrap();
    std::os::unix::fs::symlink(&elsewhere, into.join(".zt-fetching")).unwrap();
    let r = zt(&["fetch", &url, "-o", &into_dir]);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(!r.status.success(), "staged through a link");
    assert!(
        stderr.contains("not a folder of this user's alone"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&theirs).unwrap(), b"not the fetch's");
    assert_eq!(read_all(&into), v2);
}

/// A shard that changes after the index was read is refused by name, as
/// a version other than the index's, and leaves nothing in the directory:
/// no index, and no shard of either version beside one. The first
/// shard's progress changes the second on disk (and waits until the
/// daemon serves it), between the index's read and the second shard's.
#[test]
fn a_shard_changed_after_its_index_was_read_is_refused() {
    let (_root, dir, s, url) = two_shards_served();
    let second = "model-00002-of-00002.safetensors";
    let second_url = s.url(&format!("/m/{second}"));
    let etag = || curl(&["-I"], &second_url).header("etag").map(str::to_owned);
    let old = etag().expect("no ETag");
    let copy = tempfile::tempdir().unwrap();
    let into = copy.path().join("ckpt");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut changed = false;
    let mut progress = |object: &str, _: u64, _: u64| {
        if object != "t1" || changed {
            return;
        }
        changed = true;
        let bytes = vec![9u8; 8192];
        let view = TensorView::new(Dtype::U8, vec![8192], &bytes).unwrap();
        let tmp = dir.join(".changed.tmp");
        safetensors::serialize_to_file(vec![("t2".to_owned(), view)], None, &tmp).unwrap();
        std::fs::rename(&tmp, dir.join(second)).unwrap();
        let since = std::time::Instant::now();
        while etag().as_deref() == Some(old.as_str()) {
            assert!(since.elapsed().as_secs() < 60, "the daemon never saw it");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let got = rt.block_on(async {
        let client = zt_client::Client::connect(&url, zt_client::Options::default())
            .await
            .unwrap();
        zt_client::sharded::copy_sharded(&client, &into, &mut progress).await
    });
    assert!(changed, "the first shard reported no progress");
    let e = got.expect_err("a shard of another version was kept");
    let text = e.to_string();
    assert!(matches!(e, zt_client::Error::Changed { .. }), "{text}");
    assert!(text.contains(second) && text.contains(&old), "{text}");
    let mut left: Vec<String> = std::fs::read_dir(&into)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [".zt-fetching"], "beside the staging folder");
}
