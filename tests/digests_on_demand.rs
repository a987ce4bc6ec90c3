//! A tensor of a file whose digests are not computed yet is hashed on its
//! own, first: a manifest `?select=`, a `zt fetch --select` over both
//! transports, and the file's raw bytes are served while the background
//! hasher is still far from done with the file, under the file's
//! provisional ETag, which stays valid once the file's own ETag exists.

mod common;

use std::path::Path;

use common::fetch::zt;
use common::quic::metric;
use common::{config_file, curl, Server};
use zt_format::{DigestAlgorithm, ReadOptions, ZtFile};

/// 64 MiB: at the 1 MiB/s the test sets, the background hasher needs a
/// minute for it.
const BIG: usize = 64 << 20;

/// A safetensors file with a big tensor that sorts (and is hashed) first,
/// and a small one; returns the small one's bytes.
fn write(path: &Path) -> Vec<u8> {
    common::cold_safetensors(path, BIG)
}

#[test]
fn one_tensor_of_a_cold_file_is_hashed_on_its_own() {
    let root = tempfile::tempdir().unwrap();
    let small = write(&root.path().join("m.safetensors"));
    let cfg = config_file(root.path(), "[digests]\nrate_mib_s = 1\n");
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let unsettled = |s: &Server| {
        assert_eq!(
            metric(s, "ztserve_digest_files_total"),
            0,
            "the whole file was hashed: the request waited for it"
        );
    };

    // The selected tensor's manifest, with its computed digest, before
    // the background hasher is through the big tensor.
    let r = curl(
        &[],
        &s.url("/v1/files/m.safetensors/manifest?select=b.small"),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let m: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let c = &m["objects"]["b.small"]["components"]["data"];
    assert_eq!(
        c["digest"],
        DigestAlgorithm::Sha256.digest(&small).to_string()
    );
    assert_eq!(c["digest_by"], "server");
    assert_eq!(m["objects"].as_object().unwrap().len(), 1);
    let provisional = r.header("x-zt-etag").unwrap().to_owned();
    assert!(provisional.starts_with("\"p-"), "{provisional}");
    unsettled(&s);
    assert!(metric(&s, "ztserve_digest_bytes_total") < BIG as u64);

    // The raw bytes need no computed digest: served at once, under the
    // same tag, and If-Range with it applies.
    let (off, len) = (c["offset"].as_u64().unwrap(), c["length"].as_u64().unwrap());
    let range = format!("{off}-{}", off + len - 1);
    let ranged = |tag: &str| {
        curl(
            &["-r", &range, "-H", &format!("If-Range: {tag}")],
            &s.url("/m.safetensors"),
        )
    };
    let r = ranged(&provisional);
    assert_eq!(
        (r.status, r.header("etag")),
        (206, Some(provisional.as_str()))
    );
    assert_eq!(r.body, small);

    // A component URL hashes that component alone, and names its digest.
    let r = curl(&[], &s.url("/v1/files/m.safetensors/objects/b.small/data"));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-zt-digest"), c["digest"].as_str());
    assert_eq!(r.body, small);
    unsettled(&s);

    // zt fetch --select over ztp/1 and HTTP: only that tensor is hashed,
    // and every byte is verified against its digest.
    let (q, fp) = s.quic.clone().unwrap();
    let out = tempfile::tempdir().unwrap();
    let urls = [
        (
            format!("quic://{q}/m.safetensors"),
            vec!["--cert-fingerprint", fp.as_str()],
        ),
        (s.url("/m.safetensors"), vec![]),
    ];
    for (i, (url, extra)) in urls.iter().enumerate() {
        let dest = out.path().join(format!("{i}.zt"));
        let mut args = vec![
            "fetch",
            url,
            "-o",
            dest.to_str().unwrap(),
            "--select",
            "b.small",
            "--require-digest",
        ];
        args.extend(extra);
        let o = zt(&args);
        assert!(
            o.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let f = ZtFile::open_with(&dest, ReadOptions::default()).unwrap();
        assert_eq!(f.stored("b.small", "data").unwrap(), &small[..], "{url}");
    }
    unsettled(&s);

    // The whole manifest waits for every digest (the hasher then goes at
    // full speed), and the file gets its content-derived ETag.
    let r = curl(&[], &s.url("/v1/files/m.safetensors/manifest"));
    assert_eq!(r.status, 200);
    let settled = r.header("x-zt-etag").unwrap().to_owned();
    assert!(settled.starts_with("\"safetensors-"), "{settled}");
    assert_eq!(metric(&s, "ztserve_digest_files_total"), 1);

    // The provisional tag still names this version of the file; any
    // other tag does not, and gets the whole file.
    let r = ranged(&provisional);
    assert_eq!((r.status, r.header("etag")), (206, Some(settled.as_str())));
    assert_eq!(r.body, small);
    // Over ztp/1, a `get` pinned to the provisional tag is answered under
    // it, with every digest now known: so the later shares of a fetch
    // spread over connections, asked for the version the first share
    // found while the digests were computed, agree with it once they
    // are in (before, they were answered under the content-derived tag,
    // refused as another version, and the fetch failed).
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (etag, delivered) = rt.block_on(async {
        let options = zt_client::Options {
            trust: zt_client::trust::Trust::fingerprint(&fp).unwrap(),
            connections: Some(2),
            require_digest: true,
            ..zt_client::Options::default()
        };
        let url = format!("quic://{q}/m.safetensors");
        let client = zt_client::Client::connect(&url, options).await.unwrap();
        let mut f = client.fetch(&[], Some(&provisional)).await.unwrap();
        let mut delivered = Vec::new();
        while let Some(d) = f.next().await {
            let d = d.unwrap();
            delivered.push((d.object.clone(), d.data.len()));
        }
        delivered.sort();
        (f.etag.clone(), delivered)
    });
    assert_eq!(etag, provisional);
    assert_eq!(
        delivered,
        [("a.big".into(), BIG), ("b.small".into(), small.len())]
    );
    let r = ranged("\"p-00000000000000000000000000000000\"");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.body.len() as u64,
        std::fs::metadata(root.path().join("m.safetensors"))
            .unwrap()
            .len()
    );
}
