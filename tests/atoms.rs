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

/// `path`'s URL over ztp/1 and over HTTP, each with the `zt fetch`
/// arguments it needs.
fn both_transports(s: &Server, path: &str) -> [(String, Vec<String>); 2] {
    let (q, fp) = s.quic.clone().unwrap();
    [
        (
            format!("quic://{q}/{path}"),
            vec!["--cert-fingerprint".to_owned(), fp],
        ),
        (s.url(&format!("/{path}")), Vec::new()),
    ]
}

/// `zt fetch URL ARGS EXTRA`, which must succeed.
fn zt_fetch_ok(url: &str, args: &[&str], extra: &[String]) {
    let mut all = vec!["fetch", url];
    all.extend(args);
    all.extend(extra.iter().map(String::as_str));
    let o = common::fetch::zt(&all);
    assert!(
        o.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `zt fetch URL --atoms RANGE -o OUT` (with `extra` arguments), which
/// must succeed: the file written, verified whole.
fn fetch_atoms(
    url: &str,
    extra: &[String],
    range: &str,
    out: &std::path::Path,
) -> (Vec<u8>, zt_ingest::verify::Verified) {
    zt_fetch_ok(url, &["--atoms", range, "-o", out.to_str().unwrap()], extra);
    let bytes = std::fs::read(out).unwrap();
    let v = zt_ingest::verify::atom_file("cut", &bytes).unwrap();
    (bytes, v)
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
    let urls = both_transports(&s, "corpus.bin");
    for (n, (url, extra)) in urls.iter().enumerate() {
        let out = dir.path().join(format!("cut{n}.bin"));
        let (bytes, v) = fetch_atoms(url, extra, "1..4", &out);
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

/// A symbol map of 300 ids: specials, a few words, and byte fallback
/// from id 40.
fn symbol_map() -> String {
    common::packs::symbol_map(&[
        "<pad>",
        "<unk>",
        "hello",
        " world",
        "the",
        " atoms",
        "\"quoted\"",
    ])
}

/// `zt ingest pack` of two documents into `out`, with a 2x2 projection.
fn ingest_pack(work: &std::path::Path, out: &std::path::Path) {
    std::fs::write(work.join("map.json"), symbol_map()).unwrap();
    std::fs::write(work.join("a.txt"), "hello world, the atoms\n").unwrap();
    std::fs::write(work.join("b.json"), r#"{"k": ["the", "hello world"]}"#).unwrap();
    let (a, b) = (work.join("a.txt"), work.join("b.json"));
    common::packs::ingest_pack(&[&a, &b], &work.join("map.json"), Some("2x2"), out);
}

/// An ingest pack is served as one entry at its `ingest_manifest.json`:
/// the atom file's and the projection's objects (their bytes those
/// files'), the symbol map as `symbols` (row = id) and `symbol_map` (its
/// JSON); atoms read from the pack over both transports; a pack whose map
/// is not the one its manifest hashed, whose atom file is missing, or
/// whose manifest miscounts the atoms, or whose map is a FIFO, is refused
/// naming the file and the rule (the FIFO without blocking on it).
#[test]
fn an_ingest_pack_is_one_entry() {
    let (root, work) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pack = root.path().join("corpus");
    ingest_pack(work.path(), &pack);
    let atom_file = std::fs::read(pack.join("matrix_atoms.bin")).unwrap();
    // A second pack, its map edited after packing.
    let edited = root.path().join("edited");
    ingest_pack(work.path(), &edited);
    let map = std::fs::read_to_string(edited.join("pi_symbol_map.json")).unwrap();
    std::fs::write(
        edited.join("pi_symbol_map.json"),
        map.replace("hello", "HELLO"),
    )
    .unwrap();
    // A third, its atom file gone.
    let gone = root.path().join("gone");
    ingest_pack(work.path(), &gone);
    std::fs::remove_file(gone.join("matrix_atoms.bin")).unwrap();
    // Issue 26, item 7: a fifth, its map a symlink out of the root.
    let linked = root.path().join("linked");
    ingest_pack(work.path(), &linked);
    let outside = work.path().join("elsewhere-map.json");
    std::fs::rename(linked.join("pi_symbol_map.json"), &outside).unwrap();
    std::os::unix::fs::symlink(&outside, linked.join("pi_symbol_map.json")).unwrap();
    // A sixth, its map a FIFO: opening it would block for good.
    let piped = root.path().join("piped");
    ingest_pack(work.path(), &piped);
    std::fs::remove_file(piped.join("pi_symbol_map.json")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(piped.join("pi_symbol_map.json"))
        .status()
        .unwrap();
    assert!(made.success());
    let edited_sha = {
        use sha2::Digest as _;
        let map = std::fs::read(edited.join("pi_symbol_map.json")).unwrap();
        sha2::Sha256::digest(&map)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    // A fourth, its manifest counting one atom more than the atom file holds.
    let miscount = root.path().join("miscount");
    ingest_pack(work.path(), &miscount);
    let path = miscount.join("ingest_manifest.json");
    let mut im: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    im["atoms"] = (im["atoms"].as_u64().unwrap() + 1).into();
    std::fs::write(&path, im.to_string()).unwrap();
    let s = Server::start_quic(root.path(), &[]);

    let (_, list) = json(&s, "/v1/files");
    let entry = list["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "corpus/ingest_manifest.json")
        .unwrap_or_else(|| panic!("the pack is listed: {list}"));
    assert_eq!(entry["source"], "matrix-atom-pack");
    assert_eq!(
        entry["files"],
        serde_json::json!(["matrix_atoms.bin", "atoms.svgt"])
    );
    let unavailable = list["unavailable"].to_string();
    assert!(
        unavailable.contains("edited/pi_symbol_map.json") && unavailable.contains("pack-hash"),
        "{unavailable}"
    );
    // Reasons name paths under the root only, and no hash of a file the
    // pack merely names.
    assert!(!unavailable.contains(&edited_sha), "{unavailable}");
    assert!(
        unavailable.contains("linked/pi_symbol_map.json: lies outside the root"),
        "{unavailable}"
    );
    assert!(
        unavailable.contains("piped/pi_symbol_map.json: opening file: not a regular file"),
        "{unavailable}"
    );
    let tmp = work.path().display().to_string();
    assert!(!unavailable.contains(&tmp), "{unavailable}");

    let base = "/v1/files/corpus/ingest_manifest.json";
    let (status, m) = json(&s, &format!("{base}/manifest"));
    assert_eq!(status, 200, "{m}");
    assert_eq!(m["source"], "matrix-atom-pack");
    for (object, file) in [
        ("atoms", "matrix_atoms.bin"),
        ("documents", "matrix_atoms.bin"),
        ("grids", "atoms.svgt"),
    ] {
        assert_eq!(
            m["objects"][object]["components"]["data"]["file"], file,
            "{object}"
        );
    }
    assert_eq!(m["attributes"]["matrix_atom.vocab_size"], 300);
    assert_eq!(m["attributes"]["svg_tensor.rows"], 2);
    assert_eq!(m["attributes"]["ingest.documents"], 2);
    assert_eq!(
        m["attributes"]["ingest.inputs"],
        serde_json::json!(["a.txt", "b.json"])
    );
    assert_eq!(m["objects"]["symbols"]["shape"], serde_json::json!([300]));
    assert_eq!(m["objects"]["symbols"]["format"], "ragged");

    // The symbols, row = id, and the map as stored.
    let part = |object: &str, role: &str| {
        let r = curl(&[], &s.url(&format!("{base}/objects/{object}/{role}")));
        assert_eq!(r.status, 200, "{object}/{role}");
        r.body
    };
    let offsets: Vec<usize> = part("symbols", "offsets")
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()) as usize)
        .collect();
    let values = part("symbols", "values");
    let text = |id: usize| std::str::from_utf8(&values[offsets[id]..offsets[id + 1]]).unwrap();
    assert_eq!(offsets.len(), 301);
    assert_eq!(
        (text(2), text(3), text(6), text(299)),
        ("hello", " world", "\"quoted\"", "")
    );
    assert_eq!(
        part("symbol_map", "data"),
        std::fs::read(pack.join("pi_symbol_map.json")).unwrap()
    );
    // Built in memory, no range of a file holds it: the server cuts no
    // rows or slice of it (cut at its offset, it would send the bytes of
    // the pack's manifest under a digest of its own).
    for (query, rule) in [
        ("slice=0:16", "slice-not-raw-dense"),
        ("rows=0:16", "rows-not-raw-dense"),
    ] {
        let r = curl(
            &[],
            &s.url(&format!("{base}/objects/symbol_map/data?{query}")),
        );
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 409, "{query}: {body}");
        assert!(
            body.contains(rule) && body.contains("symbol_map"),
            "{query}: {body}"
        );
    }

    // Atoms 1..3 through the pack: by HTTP rows, then zt fetch --atoms over both transports.
    let r = curl(&[], &s.url(&format!("{base}/objects/atoms/data?rows=1:3")));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, &atom_file[64 + 8..64 + 24]);
    let urls = both_transports(&s, "corpus/ingest_manifest.json");
    for (n, (url, extra)) in urls.iter().enumerate() {
        let out = work.path().join(format!("cut{n}.bin"));
        let (bytes, v) = fetch_atoms(url, extra, "1..3", &out);
        assert_eq!(v.header.atom_count, 2);
        assert_eq!(&bytes[64..64 + 16], &atom_file[64 + 8..64 + 24], "{url}");
        // The whole pack as one .zt file: every object, digests checked.
        let whole = work.path().join(format!("pack{n}.zt"));
        zt_fetch_ok(url, &["-o", whole.to_str().unwrap()], extra);
        let f = zt_format::ZtFile::open(&whole).unwrap();
        assert_eq!(
            &f.read("symbol_map", "data").unwrap()[..],
            &part("symbol_map", "data")[..]
        );
        let payload = 64
            + m["objects"]["atoms"]["components"]["data"]["length"]
                .as_u64()
                .unwrap() as usize;
        assert_eq!(
            &f.read("atoms", "data").unwrap()[..],
            &atom_file[64..payload]
        );
    }

    // Refused by name; the daemon still serving.
    let (status, e) = json(&s, "/v1/files/gone/ingest_manifest.json/manifest");
    assert_eq!(status, 409, "{e}");
    let why = e["detail"].as_str().unwrap_or_default();
    assert!(
        why.contains("matrix_atoms.bin") && why.contains("pack-member"),
        "{e}"
    );
    let (status, e) = json(&s, "/v1/files/miscount/ingest_manifest.json/manifest");
    assert_eq!(status, 409, "{e}");
    let why = e["detail"].as_str().unwrap_or_default();
    assert!(
        why.contains("miscount/matrix_atoms.bin") && why.contains("pack-counts"),
        "{e}"
    );
    assert_eq!(json(&s, &format!("{base}/manifest")).0, 200);
}
