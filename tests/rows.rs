//! Row ranges, end to end: `?rows=` on the component route (206 of the
//! component, `Content-Digest` of exactly the bytes sent, every error
//! rule), ztp/1's `rows`, and the client's `read_rows` over both
//! transports and from nginx (which has no row digests: the whole
//! component is verified, then cut).

mod common;

use std::collections::HashMap;
use std::path::Path;

use base64::Engine as _;
use common::fetch::zt;
use common::quic::metric;
use common::{curl, Server};
use safetensors::tensor::{Dtype, TensorView};
use zt_client::trust::Trust;
use zt_client::{Client, Options, Status};
use zt_format::rows::Rows;
use zt_format::DigestAlgorithm;

/// `w`: f32 [10, 6] (24-byte rows, so rows start off 64-byte boundaries);
/// `b`: f32 [6]. Returns w's bytes.
fn write(path: &Path) -> Vec<u8> {
    let w: Vec<u8> = (0..240u32).map(|i| (i * 7 % 251) as u8).collect();
    let b: Vec<u8> = vec![1; 24];
    let views = vec![
        ("w", TensorView::new(Dtype::F32, vec![10, 6], &w).unwrap()),
        ("b", TensorView::new(Dtype::F32, vec![6], &b).unwrap()),
    ];
    safetensors::serialize_to_file(views, None::<HashMap<String, String>>, path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644)).unwrap();
    w
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn rows_over_http_carry_a_digest_of_exactly_their_bytes() {
    let root = tempfile::tempdir().unwrap();
    let w = write(&root.path().join("m.safetensors"));
    // The same tensors as a .zt file, one of them zstd-compressed.
    let packed = root.path().join("z.zt");
    let o = zt(&[
        "pack",
        root.path().join("m.safetensors").to_str().unwrap(),
        "-o",
        packed.to_str().unwrap(),
        "--compress",
        "zstd:3",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = Server::start(root.path(), &[]);

    let r = curl(
        &[],
        &s.url("/v1/files/m.safetensors/objects/w/data?rows=2:5"),
    );
    assert_eq!(r.status, 206, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.body, &w[48..120]);
    assert_eq!(r.header("content-range"), Some("bytes 48-119/240"));
    assert_eq!(r.header("x-zt-rows"), Some("2:5/10"));
    let sha = DigestAlgorithm::Sha256.digest(&r.body);
    let b64 = base64::engine::general_purpose::STANDARD.encode(sha.sha256().unwrap());
    assert_eq!(
        r.header("content-digest"),
        Some(format!("sha-256=:{b64}:").as_str())
    );
    // The component's own digest stays the representation's.
    let whole = DigestAlgorithm::Sha256.digest(&w);
    let b64 = base64::engine::general_purpose::STANDARD.encode(whole.sha256().unwrap());
    assert_eq!(
        r.header("repr-digest"),
        Some(format!("sha-256=:{b64}:").as_str())
    );
    assert_eq!(metric(&s, "ztserve_digest_rows_total"), 1);
    assert_eq!(metric(&s, "ztserve_digest_rows_bytes_total"), 72);
    // The same rows of the same version again: their digest is kept, not
    // hashed again.
    let again = curl(
        &[],
        &s.url("/v1/files/m.safetensors/objects/w/data?rows=2:5"),
    );
    assert_eq!(again.body, r.body);
    assert_eq!(again.header("content-digest"), r.header("content-digest"));
    assert_eq!(metric(&s, "ztserve_digest_rows_total"), 1);
    assert_eq!(
        metric(&s, "ztserve_slice_digests_total{result=\"kept\"}"),
        1
    );

    // Each rule, named, and the daemon still serving.
    let err = |path: &str, status: u16, code: &str| {
        let r = curl(&[], &s.url(path));
        assert_eq!(
            r.status,
            status,
            "{path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(body["error"], code, "{path}");
        body["detail"].as_str().unwrap().to_owned()
    };
    let why = err(
        "/v1/files/m.safetensors/objects/w/data?rows=5:2",
        416,
        "rows_out_of_bounds",
    );
    assert!(why.contains("\"w\"") && why.contains("0:10"), "{why}");
    err(
        "/v1/files/m.safetensors/objects/w/data?rows=0:11",
        416,
        "rows_out_of_bounds",
    );
    err(
        "/v1/files/m.safetensors/objects/w/data?rows=3:3",
        416,
        "rows_out_of_bounds",
    );
    err(
        "/v1/files/m.safetensors/objects/w/data?rows=a:b",
        400,
        "rows_malformed",
    );
    let why = err(
        "/v1/files/z.zt/objects/w/data?rows=0:2",
        409,
        "rows_not_raw_dense",
    );
    assert!(why.contains("zstd"), "{why}");
    let r = curl(
        &[],
        &s.url("/v1/files/m.safetensors/objects/b/data?rows=0:6"),
    );
    assert_eq!(r.status, 206);
}

#[test]
fn the_client_reads_rows_over_both_transports_and_from_nginx() {
    let root = tempfile::tempdir().unwrap();
    let w = write(&root.path().join("m.safetensors"));
    // A .zt file with every digest: its rows' offsets are not 64-aligned.
    let packed = root.path().join("m.zt");
    let o = zt(&[
        "pack",
        root.path().join("m.safetensors").to_str().unwrap(),
        "-o",
        packed.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&packed, std::fs::Permissions::from_mode(0o644)).unwrap();
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nginx = common::nginx::Nginx::start(root.path(), common::free_port(), dir.path()).unwrap();

    let rt = rt();
    let read = |url: String, rows: Rows| {
        rt.block_on(async {
            let options = Options {
                trust: Trust::fingerprint(&fp).unwrap(),
                require_digest: true,
                ..Options::default()
            };
            let client = Client::connect(&url, options).await?;
            let remote = client.manifest().await?;
            client.read_rows(&remote, "w", rows).await
        })
    };
    let rows = Rows { start: 3, end: 7 };
    for name in ["m.safetensors", "m.zt"] {
        let urls = [
            format!("quic://{q}/{name}"),
            s.url(&format!("/{name}")),
            s.url(&format!("/v1/files/{name}")),
        ];
        for url in urls {
            let d = read(url.clone(), rows).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(d.data.as_slice(), &w[72..168], "{url}");
            assert_eq!(d.data.as_slice().as_ptr() as usize % 64, 0);
            assert!(d.digest.is_some(), "{url}: rows come with their own digest");
        }
    }
    // nginx: the whole component, checked against the file's digest, then cut.
    let d = read(format!("http://127.0.0.1:{}/m.zt", nginx.port), rows).unwrap();
    assert_eq!(d.data.as_slice(), &w[72..168]);

    // Out of bounds: refused by the client before asking, by the rule.
    let e = read(format!("quic://{q}/m.zt"), Rows { start: 9, end: 11 }).unwrap_err();
    assert!(e.to_string().contains("rows-out-of-bounds"), "{e}");
    // A server asked directly names the rule too (ztp/1 no_match).
    let e = rt
        .block_on(async {
            let options = Options {
                trust: Trust::fingerprint(&fp).unwrap(),
                ..Options::default()
            };
            let client = Client::connect(&format!("quic://{q}/m.zt"), options).await?;
            let mut remote = client.manifest().await?;
            // A stale manifest that claims more rows than the file has.
            remote.manifest.objects.get_mut("w").unwrap().shape[0] = 20;
            let c = remote
                .manifest
                .objects
                .get_mut("w")
                .unwrap()
                .components
                .get_mut("data")
                .unwrap();
            c.length = 480;
            client
                .read_rows(&remote, "w", Rows { start: 12, end: 14 })
                .await
        })
        .unwrap_err();
    match &e {
        zt_client::Error::Server {
            status: Status::Ztp(code),
            message,
            ..
        } => {
            assert_eq!(*code, ztp_proto::Code::NoMatch);
            assert!(message.contains("rows-out-of-bounds"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// Rows and slices are hashed within turns of the CPU pool, like every
/// other CPU-heavy job: with one turn and no queue (`limits.cpu_jobs =
/// 1`, `cpu_queue = 0`), a burst of first requests for distinct row
/// ranges (`?rows=`) or slices (`?slice=`) of a 32 MiB tensor is answered
/// part `503 busy` (naming the file, object, what was hashed and
/// `limits.cpu_queue`, with `Retry-After`), part with exactly the bytes
/// under their digest; before, every one hashed at once on the blocking
/// pool.
#[test]
fn rows_and_slices_are_hashed_within_the_cpu_pools_turns() {
    let root = tempfile::tempdir().unwrap();
    let (rows, cols) = (4096usize, 2048usize);
    let (w, cfg) = one_turn_for(root.path(), rows, cols);
    for (query, rule) in [("rows", "hashing rows 0:"), ("slice", "hashing slice ")] {
        let s = Server::start(root.path(), &["--config", &cfg]);
        let url = |r: String| format!("/v1/files/big.safetensors/objects/w/data?{query}={r}");
        // The component checked first, so that the burst only hashes.
        let r = curl(&["-I"], &s.url(&url("0:1".into())));
        assert!(r.status / 100 == 2, "{}", String::from_utf8_lossy(&r.body));
        let targets: Vec<String> = (1..=12).map(|k| url(format!("0:{}", rows - k))).collect();
        let (mut busy, mut hashed) = (0, 0);
        for (k, (head, body)) in (1..).zip(burst(&s.addr, &targets)) {
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| {
                        l.split_once(": ")
                            .filter(|(h, _)| h.eq_ignore_ascii_case(name))
                    })
                    .map(|(_, v)| v.to_owned())
            };
            let wanted = &w[..(rows - k) * cols * 4];
            match head.split(' ').nth(1).unwrap_or_default() {
                "200" | "206" => {
                    assert!(body == wanted, "{query} 0:{}: other bytes", rows - k);
                    let sha = DigestAlgorithm::Sha256.digest(wanted);
                    let b64 =
                        base64::engine::general_purpose::STANDARD.encode(sha.sha256().unwrap());
                    assert_eq!(header("content-digest"), Some(format!("sha-256=:{b64}:")));
                    hashed += 1;
                }
                "503" => {
                    assert_eq!(header("retry-after").as_deref(), Some("1"), "{head}");
                    let body = String::from_utf8_lossy(&body);
                    let named = "big.safetensors: object \\\"w\\\": ";
                    for part in ["\"busy\"", named, rule, "limits.cpu_queue"] {
                        assert!(body.contains(part), "{part} not in {body}");
                    }
                    busy += 1;
                }
                other => panic!("{query} 0:{}: status {other}: {head}", rows - k),
            }
        }
        eprintln!("{query}: {hashed} hashed, {busy} refused busy");
        assert!(
            hashed >= 1 && busy >= 1,
            "{query}: {hashed} hashed, {busy} busy"
        );
        assert!(metric(&s, "ztserve_cpu_jobs_refused_total") >= busy);
    }
}

/// The client waits out busy refusals: with one CPU turn and no queue, a
/// burst of 8 clients (the ranks of a job starting together) reading
/// distinct first rows of an 8 MiB tensor all get their bytes, over HTTP
/// and over ztp/1, where the daemon refused some of them `busy` (its
/// `ztserve_cpu_jobs_refused_total` counts them); with `busy_wait` zero
/// the refusal reaches the caller as before, passing and with the
/// server's wait (HTTP `Retry-After`, ztp/1 `retry_after_ms`).
#[test]
fn clients_wait_out_busy_refusals_of_their_rows() {
    let root = tempfile::tempdir().unwrap();
    let (rows, cols) = (1024usize, 2048usize);
    let (w, cfg) = one_turn_for(root.path(), rows, cols);
    let rt = rt();
    const RANKS: u64 = 8;
    for patient in [true, false] {
        let s = Server::start_quic(root.path(), &["--config", &cfg]);
        let (q, fp) = s.quic.clone().unwrap();
        // The component checked first, so that the bursts only hash rows.
        let r = curl(
            &["-I"],
            &s.url("/v1/files/big.safetensors/objects/w/data?rows=0:1"),
        );
        assert!(r.status / 100 == 2, "{}", String::from_utf8_lossy(&r.body));
        // Rows from 0 over HTTP, from 1 over ztp/1: digests the daemon
        // keeps from the first burst do not answer the second.
        let urls = [
            s.url("/v1/files/big.safetensors"),
            format!("quic://{q}/big.safetensors"),
        ];
        for (from, url) in (0u64..).zip(urls) {
            let options = Options {
                trust: Trust::fingerprint(&fp).unwrap(),
                require_digest: true,
                // Patient enough for a slow machine: the test is about the
                // waiting, not its default bound.
                busy_wait: if patient {
                    std::time::Duration::from_secs(120)
                } else {
                    std::time::Duration::ZERO
                },
                ..Options::default()
            };
            let before = metric(&s, "ztserve_cpu_jobs_refused_total");
            let started = std::time::Instant::now();
            let results = rt.block_on(async {
                // Connected and given their manifests one after another:
                // only the rows come in a burst.
                let mut ready = Vec::new();
                for k in 1..=RANKS {
                    let client = Client::connect(&url, options.clone()).await.unwrap();
                    let remote = client.manifest().await.unwrap();
                    ready.push((k, client, remote));
                }
                let go = std::sync::Arc::new(tokio::sync::Barrier::new(RANKS as usize));
                let ranks: Vec<_> = ready
                    .into_iter()
                    .map(|(k, client, remote)| {
                        let go = go.clone();
                        tokio::spawn(async move {
                            go.wait().await;
                            let asked = Rows {
                                start: from,
                                end: rows as u64 - k,
                            };
                            (k, client.read_rows(&remote, "w", asked).await)
                        })
                    })
                    .collect();
                let mut out = Vec::new();
                for r in ranks {
                    out.push(r.await.unwrap());
                }
                out
            });
            let refused = metric(&s, "ztserve_cpu_jobs_refused_total") - before;
            let mut failed = 0;
            for (k, got) in results {
                match got {
                    Ok(d) => {
                        let row = cols * 4;
                        let wanted = &w[from as usize * row..(rows - k as usize) * row];
                        assert!(d.data.as_slice() == wanted, "{url} rank {k}: other bytes");
                        assert!(d.digest.is_some(), "{url} rank {k}: no digest");
                    }
                    Err(e) => {
                        assert!(!patient, "{url} rank {k}: {e}");
                        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(1)));
                        assert!(e.is_transient(), "{e}");
                        assert!(e.to_string().contains("limits.cpu_queue"), "{e}");
                        failed += 1;
                    }
                }
            }
            eprintln!(
                "{url}: patient {patient}: {refused} refusals, {failed} failed, {:?}",
                started.elapsed()
            );
            assert!(refused >= 1, "{url}: the burst was never refused");
            if !patient {
                assert_eq!(failed, refused, "{url}: each refusal reaches its caller");
            }
        }
    }
}

/// `big.safetensors` in `root`, its one tensor `w` f32 [rows, cols], and a
/// config of one CPU turn and no queue (`limits.cpu_jobs = 1`,
/// `cpu_queue = 0`): w's bytes and the config's path.
fn one_turn_for(root: &Path, rows: usize, cols: usize) -> (Vec<u8>, String) {
    let w: Vec<u8> = (0..rows * cols * 4).map(|i| (i % 251) as u8).collect();
    let views = vec![(
        "w",
        TensorView::new(Dtype::F32, vec![rows, cols], &w).unwrap(),
    )];
    let path = root.join("big.safetensors");
    safetensors::serialize_to_file(views, None::<HashMap<String, String>>, &path).unwrap();
    let cfg = common::config_file(root, "[limits]\ncpu_jobs = 1\ncpu_queue = 0\n");
    (w, cfg)
}

/// GETs every one of `targets` at once, each on its own connection;
/// their heads and bodies, in order.
fn burst(addr: &str, targets: &[String]) -> Vec<(String, Vec<u8>)> {
    use std::io::{Read, Write};
    let go = std::sync::Arc::new(std::sync::Barrier::new(targets.len()));
    let askers: Vec<_> = targets
        .iter()
        .map(|target| {
            let go = std::sync::Arc::clone(&go);
            let mut c = std::net::TcpStream::connect(addr).unwrap();
            let ask = format!("GET {target} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
            std::thread::spawn(move || {
                go.wait();
                c.write_all(ask.as_bytes()).unwrap();
                let mut reply = Vec::new();
                c.read_to_end(&mut reply).unwrap();
                reply
            })
        })
        .collect();
    askers
        .into_iter()
        .map(|a| {
            let reply = a.join().unwrap();
            let end = reply.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
            let head = String::from_utf8_lossy(&reply[..end]).into_owned();
            (head, reply[end + 4..].to_vec())
        })
        .collect()
}
