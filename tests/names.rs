//! Files whose names need percent-encoding in a URL (issue 26, item 3):
//! spaces, `+`, `=`, `%`, `:`, non-ASCII and nested directories, fetched over
//! `quic://` and `http://` by `zt fetch` and by the client library, each
//! URL spelled as a user types it and fully percent-encoded. ztp/1's
//! `get.path` is the decoded name; a client that sent the URL's encoded
//! path got `not_found: no file "sub%20dir/m.zt"`.
//!
//! [`populate`] writes the files into a directory and [`check_names`]
//! checks a running daemon, whatever its root: a local directory here, an
//! object-store root uploaded from the same directory elsewhere.

mod common;

use std::path::Path;

use common::fetch::zt;
use common::Server;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use zt_client::trust::Trust;
use zt_client::{Client, Options};
use zt_format::ZtFile;

/// The served names (`/`-separated under the root): the sample model under
/// each `.zt` name, a small safetensors file under the last.
const NAMES: [&str; 8] = [
    "with space.zt",
    // A `:` (a timestamped run's folder) was refused by the HTTP routes.
    "run 2026-12-02T10:00:00/ckpt:step1.zt",
    "plus+sign.zt",
    "eq=sign.zt",
    "per%cent.zt",
    "café.zt",
    "sub dir/nested/ü é+=%.zt",
    "st dir/café+=% x.safetensors",
];

/// Writes every name of [`NAMES`] under `dir`.
fn populate(dir: &Path) {
    let sample = std::fs::read(common::repo().join("models/sample.zt")).unwrap();
    for name in NAMES {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if name.ends_with(".safetensors") {
            std::fs::write(&path, small_safetensors()).unwrap();
        } else {
            std::fs::write(&path, &sample).unwrap();
        }
    }
}

/// Two small f32 tensors, as the `safetensors` crate writes them.
fn small_safetensors() -> Vec<u8> {
    use safetensors::tensor::{Dtype, TensorView};
    let a: Vec<u8> = (0..64u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let b: Vec<u8> = (0..32u32)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let views = [
        (
            "a.weight",
            TensorView::new(Dtype::F32, vec![8, 8], &a).unwrap(),
        ),
        ("b.bias", TensorView::new(Dtype::F32, vec![32], &b).unwrap()),
    ];
    safetensors::serialize(views, None).unwrap()
}

/// Everything but the unreserved characters of RFC 3986.
const STRICT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The two spellings of `name` in a URL path: as a user types it (only
/// `%` escaped; the URL parser escapes spaces and non-ASCII itself), and
/// every reserved character percent-encoded, segment by segment (`+` as
/// `%2B`, `=` as `%3D`).
fn spellings(name: &str) -> [String; 2] {
    let strict: Vec<String> = name
        .split('/')
        .map(|seg| utf8_percent_encode(seg, STRICT).to_string())
        .collect();
    [name.replace('%', "%25"), strict.join("/")]
}

/// Every URL of `name` on `s`: both spellings over `quic://` and over
/// `http://` (the plain path and the API's `/v1/files/`), with the `zt`
/// flags that trust the server.
fn urls(s: &Server, name: &str) -> Vec<(String, Vec<String>)> {
    let (quic, fp) = s.quic.clone().expect("QUIC is on");
    let mut out = Vec::new();
    for path in spellings(name) {
        let pin = vec!["--cert-fingerprint".to_owned(), fp.clone()];
        out.push((format!("quic://{quic}/{path}"), pin));
        out.push((s.url(&format!("/{path}")), Vec::new()));
        out.push((s.url(&format!("/v1/files/{path}")), Vec::new()));
    }
    out
}

/// Checks every name of [`NAMES`] on `s` against the files under `local`
/// (what [`populate`] wrote): `zt fetch` of each URL writes the same
/// objects (a byte-identical copy of the safetensors file), and the
/// client library's manifest and components match the file's.
fn check_names(s: &Server, local: &Path) {
    let out = tempfile::tempdir().unwrap();
    let fp = s.quic.clone().unwrap().1;
    let rt = tokio::runtime::Runtime::new().unwrap();
    for name in NAMES {
        let original = local.join(name);
        let copy = name.ends_with(".safetensors");
        for (i, (url, extra)) in urls(s, name).iter().enumerate() {
            let target = out
                .path()
                .join(format!("{i}.{}", if copy { "safetensors" } else { "zt" }));
            let mut args = vec!["fetch", url.as_str(), "-o", target.to_str().unwrap()];
            args.extend(extra.iter().map(String::as_str));
            let r = zt(&args);
            assert!(
                r.status.success(),
                "zt fetch {url}: {}",
                String::from_utf8_lossy(&r.stderr)
            );
            if copy {
                assert_eq!(
                    std::fs::read(&target).unwrap(),
                    std::fs::read(&original).unwrap(),
                    "{url}"
                );
            } else {
                common::fetch::same_objects(&original, &target, None);
                let n = ZtFile::open(&target).unwrap().manifest().objects.len();
                assert_eq!(n, ZtFile::open(&original).unwrap().manifest().objects.len());
            }
            rt.block_on(library_fetch(url, &fp, &original));
        }
    }
}

/// The client library on `url`: its manifest names the file's objects,
/// and every component it delivers holds the file's bytes.
async fn library_fetch(url: &str, fp: &str, original: &Path) {
    let options = Options {
        trust: Trust::fingerprint(fp).unwrap(),
        ..Options::default()
    };
    let client = Client::connect(url, options)
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let remote = client
        .manifest()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    let bytes = std::fs::read(original).unwrap();
    let mut fetch = client.fetch(&[], Some(&remote.etag)).await.unwrap();
    let mut seen = 0;
    while let Some(c) = fetch.next().await {
        let c = c.unwrap_or_else(|e| panic!("{url}: {e}"));
        let comp = &remote.manifest.objects[&c.object].components[c.component.as_str()];
        let (a, b) = (comp.offset as usize, (comp.offset + comp.length) as usize);
        assert_eq!(c.data.as_slice(), &bytes[a..b], "{url}: {}", c.object);
        seen += 1;
    }
    assert_eq!(seen, remote.manifest.components().count(), "{url}");
    client.close().await;
}

#[test]
fn names_that_need_percent_encoding_from_a_local_root() {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    let s = Server::start_quic(root.path(), &[]);
    check_names(&s, root.path());
}

/// The same names as keys of an object-storage root, on each S3 server
/// (the keys uploaded as they are, never escaped).
#[test]
fn names_that_need_percent_encoding_from_an_object_store_root() {
    use common::s3::{credentials, servers, S3};
    use object_store::{path::Path as KeyPath, ObjectStoreExt, PutPayload};
    let local = tempfile::tempdir().unwrap();
    populate(local.path());
    for (kind, bin) in servers() {
        let s3 = S3::start(kind, &bin, "models");
        let up = s3.uploader("models");
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            for name in NAMES {
                let bytes = std::fs::read(local.path().join(name)).unwrap();
                let key = KeyPath::parse(format!("prod/{name}")).unwrap();
                up.put(&key, PutPayload::from(bytes)).await.unwrap();
            }
        });
        let cfg = common::config_file(
            local.path(),
            &format!(
                "[storage]\nendpoint = \"{}\"\nregion = \"us-east-1\"\nallow_http = true\n",
                s3.endpoint
            ),
        );
        let s = Server::start_quic_env(
            Path::new("s3://models/prod"),
            &["--config", &cfg],
            &credentials(),
        );
        eprintln!("with {}", kind.name());
        check_names(&s, local.path());
    }
}

/// `zt fetch URL` without `-o` names the file after the decoded name,
/// as the server has it.
#[test]
fn the_default_output_is_the_decoded_name() {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    let s = Server::start_quic(root.path(), &[]);
    let (quic, fp) = s.quic.clone().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let r = std::process::Command::new(common::zt_bin())
        .args(["fetch", &format!("quic://{quic}/caf%C3%A9.zt")])
        .args(["--cert-fingerprint", &fp])
        .current_dir(cwd.path())
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(cwd.path().join("café.zt").is_file());
}

/// A path that decodes to no UTF-8 name, or to a NUL, is refused by the
/// client before it asks, naming why (a usage error, exit 2).
#[test]
fn paths_that_decode_to_no_name_are_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    populate(root.path());
    let s = Server::start_quic(root.path(), &[]);
    let (quic, fp) = s.quic.clone().unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("x.zt");
    for (path, why) in [("caf%E9.zt", "not UTF-8"), ("a%00b.zt", "NUL")] {
        let url = format!("quic://{quic}/{path}");
        let r = zt(&[
            "fetch",
            &url,
            "-o",
            target.to_str().unwrap(),
            "--cert-fingerprint",
            &fp,
        ]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{url}: {err}");
        assert!(err.contains(why) && err.contains(path), "{url}: {err}");
        let rt = tokio::runtime::Runtime::new().unwrap();
        let options = Options {
            trust: Trust::fingerprint(&fp).unwrap(),
            ..Options::default()
        };
        let e = rt.block_on(Client::connect(&url, options)).unwrap_err();
        assert!(
            matches!(&e, zt_client::Error::Usage(m) if m.contains(why)),
            "{e}"
        );
    }
}
