//! MATRIX-ATOM files served as a source: recognised by extension and
//! confirmed by magic (another `.bin` is passed over, not listed), atoms
//! read as row ranges over both transports, and a damaged payload or
//! header refused naming the file and the rule.

mod common;

use common::quic::metric;
use common::{curl, Server};
use zt_client::trust::Trust;
use zt_client::{Client, Options};
use zt_format::atoms::pack::{PackOptions, Packed, Packer};
use zt_format::atoms::svg_tensor::SvgHeader;
use zt_format::atoms::AtomDtype;
use zt_format::rows::Rows;

fn pack() -> Packed {
    let mut p = Packer::new(PackOptions {
        atom_size: 8,
        dtype: AtomDtype::U16,
        vocab_size: 1000,
        pad_id: 0,
        index: true,
        svg_tensor: false,
    })
    .unwrap();
    for doc in 0..3u32 {
        let ids: Vec<u32> = (0..(5 + doc * 9)).map(|i| (i * 37 + doc) % 1000).collect();
        p.push(&ids).unwrap();
    }
    p.finish()
}

fn json(s: &Server, path: &str) -> (u16, serde_json::Value) {
    let r = curl(&[], &s.url(path));
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or_default(),
    )
}

#[test]
fn atoms_are_rows_of_a_served_object() {
    let root = tempfile::tempdir().unwrap();
    let packed = pack();
    std::fs::write(root.path().join("corpus.bin"), &packed.bytes).unwrap();
    std::fs::write(root.path().join("weights.bin"), b"not an atom file at all").unwrap();
    // Its SVG-Tensor projection, 2x4 grids.
    let grid = SvgHeader::for_atoms(&packed.header, 2, 4).unwrap();
    let mut svgt = grid.encode().to_vec();
    let payload_len = packed.header.payload_len().unwrap() as usize;
    svgt.extend_from_slice(&packed.bytes[64..64 + payload_len]);
    std::fs::write(root.path().join("corpus.svgt"), &svgt).unwrap();
    // The payload changed after it was written: its CRC no longer holds.
    let mut bad = packed.bytes.clone();
    bad[64 + 3] ^= 0x01;
    std::fs::write(root.path().join("bad.atoms"), &bad).unwrap();
    // A header of another version.
    let mut v2 = packed.bytes.clone();
    v2[8] = 2;
    std::fs::write(root.path().join("v2.atoms"), &v2).unwrap();
    let s = Server::start_quic(root.path(), &[]);

    let (_, list) = json(&s, "/v1/files");
    let text = list.to_string();
    assert!(
        !text.contains("weights.bin"),
        "a .bin without the magic is not a served file: {text}"
    );
    let (status, m) = json(&s, "/v1/files/corpus.bin/manifest");
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["source"], "matrix-atom");
    let atoms = &m["objects"]["atoms"];
    let count = packed.header.atom_count;
    assert_eq!(atoms["shape"], serde_json::json!([count, 8]));
    assert_eq!(atoms["components"]["data"]["dtype"], "u16");
    assert_eq!(m["attributes"]["matrix_atom.vocab_size"], 1000);
    assert_eq!(
        m["objects"]["documents"]["shape"],
        serde_json::json!([3, 3])
    );

    let (status, g) = json(&s, "/v1/files/corpus.svgt/manifest");
    assert_eq!(status, 200, "{g}");
    assert_eq!(
        g["objects"]["grids"]["shape"],
        serde_json::json!([count, 2, 4])
    );
    assert_eq!(g["attributes"]["svg_tensor.rows"], 2);
    let r = curl(
        &[],
        &s.url("/v1/files/corpus.svgt/objects/grids/data?rows=1:2"),
    );
    assert_eq!(r.body, &packed.bytes[64 + 16..64 + 32], "a grid is an atom");

    // Atoms 1..4 by HTTP rows, then over ztp/1 through the client.
    let r = curl(
        &[],
        &s.url("/v1/files/corpus.bin/objects/atoms/data?rows=1:4"),
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &packed.bytes[64 + 16..64 + 64]);
    let (q, fp) = s.quic.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = rt
        .block_on(async {
            let options = Options {
                trust: Trust::fingerprint(&fp).unwrap(),
                require_digest: true,
                ..Options::default()
            };
            let client = Client::connect(&format!("quic://{q}/corpus.bin"), options).await?;
            let remote = client.manifest().await?;
            client
                .read_rows(&remote, "atoms", Rows { start: 2, end: 5 })
                .await
        })
        .unwrap();
    assert_eq!(d.data.as_slice(), &packed.bytes[64 + 32..64 + 80]);

    // zt fetch --atoms: a MATRIX-ATOM file of its own, over both transports.
    let dir = tempfile::tempdir().unwrap();
    let urls = [
        (
            format!("quic://{q}/corpus.bin"),
            vec!["--cert-fingerprint", fp.as_str()],
        ),
        (s.url("/corpus.bin"), vec![]),
    ];
    for (n, (url, extra)) in urls.iter().enumerate() {
        let out = dir.path().join(format!("cut{n}.bin"));
        let mut args = vec!["fetch", url, "--atoms", "1..4", "-o", out.to_str().unwrap()];
        args.extend(extra);
        let o = common::fetch::zt(&args);
        assert!(
            o.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let bytes = std::fs::read(&out).unwrap();
        let v = zt_ingest::verify::atom_file("cut", &bytes).unwrap();
        assert_eq!(v.header.atom_count, 3);
        assert_eq!(
            &bytes[64..64 + 48],
            &packed.bytes[64 + 16..64 + 64],
            "{url}"
        );
        let docs = v.documents.unwrap();
        assert_eq!(docs.iter().map(|d| d.atom_count).sum::<u64>(), 3);
        assert_eq!(docs[0].first_atom, 0);
    }

    // Refused by name, the daemon still serving.
    let (status, e) = json(&s, "/v1/files/bad.atoms/manifest");
    assert_eq!(status, 409, "{e}");
    let why = e["detail"].as_str().unwrap();
    assert!(
        why.contains("bad.atoms") && why.contains("atom-payload-crc"),
        "{why}"
    );
    assert_eq!(metric(&s, "ztserve_digest_failures_total"), 1);
    let (status, e) = json(&s, "/v1/files/v2.atoms/manifest");
    assert_eq!(status, 409, "{e}");
    assert!(
        e["detail"].as_str().unwrap().contains("atom-version"),
        "{e}"
    );
    assert_eq!(json(&s, "/v1/files/corpus.bin/manifest").0, 200);
}
