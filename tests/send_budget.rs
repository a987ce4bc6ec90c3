//! The daemon's memory for ztp/1 sends. The daemon-wide send budget
//! (`quic.send_budget_bytes`): with the smallest budget (one 4 MiB read
//! chunk for every connection together), eight clients fetching a 24 MiB
//! model at once over ztp/1 all get every component, verified; the budget
//! never holds more than it allows, and is all given back once the
//! clients are done. The chunks kept in memory (`quic.piece_cache_bytes`):
//! within their bound, answering later fetches of the same version only.

mod common;

use std::time::Duration;

use common::quic::metric;
use common::{curl, eventually, layered_model, Server};
use zt_client::trust::Trust;
use zt_client::{Client, Options, Verification};

const MIB: u64 = 1 << 20;
const LAYERS: u32 = 24;

/// A daemon serving a model of `LAYERS` 1 MiB layers with the `[quic]`
/// setting `quic`: its root, the daemon, the model's ztp/1 URL and the
/// daemon's certificate fingerprint.
fn serving(quic: &str) -> (tempfile::TempDir, Server, String, String) {
    let root = tempfile::tempdir().unwrap();
    layered_model(&root.path().join("m.zt"), 0..LAYERS);
    let cfg = common::config_file(root.path(), &format!("[quic]\n{quic}\n"));
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let (q, fp) = s.quic.clone().unwrap();
    let url = format!("quic://{q}/m.zt");
    (root, s, url, fp)
}

#[test]
fn many_clients_share_a_small_send_budget() {
    // Nothing kept: every chunk is read under the budget.
    let (_root, s, url, fp) = serving("send_budget_bytes = 4194304\npiece_cache_bytes = 0");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (url, fp) = (url.clone(), fp.clone());
            rt.spawn(async move {
                let options = Options {
                    trust: Trust::fingerprint(&fp).unwrap(),
                    require_digest: true,
                    ..Options::default()
                };
                let client = Client::connect(&url, options).await.unwrap();
                let mut f = client.fetch(&[], None).await.unwrap();
                let mut n = 0;
                while let Some(d) = f.next().await {
                    let d = d.unwrap();
                    assert_eq!(d.data.len() as u64, MIB);
                    assert_eq!(d.verification, Verification::Verified);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut most = 0;
    let done = rt.block_on(async {
        let mut counts = Vec::new();
        for c in clients {
            while !c.is_finished() {
                most = most.max(metric(&s, "ztserve_quic_send_budget_held_bytes"));
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            counts.push(c.await.unwrap());
        }
        counts
    });
    assert_eq!(done, vec![LAYERS; 8], "every client got every component");
    assert!(most <= 4 * MIB, "the budget held {most} bytes, over 4 MiB");
    assert!(
        eventually(Duration::from_secs(10), || {
            metric(&s, "ztserve_quic_send_budget_held_bytes") == 0
        }),
        "the budget is all given back"
    );
}

/// A fetch of `select` from `url` (every digest required), checked: each
/// component verified; their bytes, by object.
fn fetch_all(
    rt: &tokio::runtime::Runtime,
    url: &str,
    fp: &str,
    select: &[String],
) -> std::collections::BTreeMap<String, Vec<u8>> {
    rt.block_on(async {
        let options = Options {
            trust: Trust::fingerprint(fp).unwrap(),
            require_digest: true,
            ..Options::default()
        };
        let client = Client::connect(url, options).await.unwrap();
        let mut f = client.fetch(select, None).await.unwrap();
        let mut got = std::collections::BTreeMap::new();
        while let Some(d) = f.next().await {
            let d = d.unwrap();
            assert_eq!(d.verification, Verification::Verified, "{}", d.object);
            got.insert(d.object.clone(), d.data.as_slice().to_vec());
        }
        got
    })
}

/// Issue 28's last goal: chunks sent over ztp/1 are kept in memory
/// (`quic.piece_cache_bytes`) so that a layer many clients ask for is not
/// read from its file again while it is kept. The bound holds while a
/// whole 24 MiB model goes out under an 8 MiB one; four layers asked for
/// again come from memory (the hits counted), byte-identical and
/// verified; at 0 nothing is kept.
#[test]
fn sent_chunks_are_kept_within_their_bound_and_answer_later_fetches() {
    let (_root, s, url, fp) = serving("piece_cache_bytes = 8388608");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let all = fetch_all(&rt, &url, &fp, &[]);
    assert_eq!(all.len() as u32, LAYERS);
    let held = metric(&s, "ztserve_quic_piece_cache_bytes");
    assert!(
        held > 0 && held <= 8 * MIB,
        "{held} bytes kept under an 8 MiB bound"
    );
    let hits = metric(&s, "ztserve_quic_piece_cache_hits_total");
    let select: Vec<String> = (0..4).map(|l| format!("model.layers.{l}.w")).collect();
    for _ in 0..3 {
        let again = fetch_all(&rt, &url, &fp, &select);
        assert_eq!(again.len(), 4);
        for (name, bytes) in &again {
            assert_eq!(Some(bytes), all.get(name), "{name}");
        }
    }
    let more = metric(&s, "ztserve_quic_piece_cache_hits_total") - hits;
    // The first of the three reads the four layers; the two after it
    // find them kept.
    assert!(more >= 8, "{more} chunks came from memory");
    assert!(metric(&s, "ztserve_quic_piece_cache_bytes") <= 8 * MIB);
    drop(s);

    // At 0, nothing is kept and nothing comes from memory.
    let (_root, s, url, fp) = serving("piece_cache_bytes = 0");
    for _ in 0..2 {
        assert_eq!(fetch_all(&rt, &url, &fp, &select).len(), 4);
    }
    assert_eq!(metric(&s, "ztserve_quic_piece_cache_hits_total"), 0);
    assert_eq!(metric(&s, "ztserve_quic_piece_cache_bytes"), 0);
}

/// A file rewritten in place, same size and layout, other bytes, its
/// modification time put back: the chunks kept from its old version
/// never answer for the new one (they are kept under the file's identity,
/// whose change time moved). Kept under its path alone, or its path,
/// size and modification time, the old bytes would go out under the new
/// digests, and the client would refuse them.
#[test]
fn kept_chunks_never_answer_for_a_file_rewritten_in_place() {
    let root = tempfile::tempdir().unwrap();
    let path = root.path().join("m.zt");
    layered_model(&path, 0..8);
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = format!("quic://{q}/m.zt");
    let tag = |s: &Server| {
        curl(&["-I"], &s.url("/v1/files/m.zt/manifest"))
            .header("etag")
            .map(str::to_owned)
    };
    let old = fetch_all(&rt, &url, &fp, &[]);
    fetch_all(&rt, &url, &fp, &[]);
    assert!(metric(&s, "ztserve_quic_piece_cache_hits_total") >= 8);
    let before = tag(&s);
    assert!(before.is_some(), "the manifest has an ETag");
    // The same names and sizes, every byte of every layer flipped.
    let mut w = zt_format::Writer::new(Vec::new(), "layers").unwrap();
    for (name, bytes) in &old {
        let flipped: Vec<u8> = bytes.iter().map(|b| !b).collect();
        let shape = [flipped.len() as u64];
        w.add_dense(
            name,
            &shape,
            zt_format::DType::U8,
            &flipped,
            Default::default(),
        )
        .unwrap();
    }
    let new_bytes = w.finish().unwrap();
    assert_eq!(
        new_bytes.len() as u64,
        std::fs::metadata(&path).unwrap().len()
    );
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &new_bytes, 0).unwrap();
    file.set_modified(modified).unwrap();
    drop(file);
    assert_eq!(
        std::fs::metadata(&path).unwrap().modified().unwrap(),
        modified
    );
    assert!(
        eventually(Duration::from_secs(20), || tag(&s)
            .is_some_and(|t| Some(&t) != before.as_ref())),
        "the rewrite was catalogued"
    );
    let new = fetch_all(&rt, &url, &fp, &[]);
    assert_eq!(new.len(), old.len());
    for (name, bytes) in &new {
        let flipped: Vec<u8> = old[name].iter().map(|b| !b).collect();
        assert!(bytes == &flipped, "{name}: the old version's bytes");
    }
}

/// Clients that stop acknowledging (here: ones that give a component
/// stream 64 KiB of room and read nothing) hold the whole 16 MiB budget,
/// two 1 MiB chunks each; a client fetching the model then does not wait
/// for the stall timeout (five minutes here): its first chunk that waits
/// closes them, as `stalled`, once they have acknowledged nothing for a
/// second, and it gets every component, verified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_stop_acknowledging_do_not_hold_the_budget_from_others() {
    use common::quic::{close_code_within, get, raw_connect};
    let (_root, s, url, fp) =
        serving("send_budget_bytes = 16777216\npiece_cache_bytes = 0\nstall_timeout_secs = 300");
    let (q, _) = s.quic.clone().unwrap();
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut t = quinn::TransportConfig::default();
        t.stream_receive_window(quinn::VarInt::from_u32(64 * 1024));
        let conn = raw_connect(&q, &fp, Some(t)).await;
        let (mut send, recv) = conn.open_bi().await.unwrap();
        send.write_all(&get(1, "m.zt")).await.unwrap();
        stalled.push((conn, send, recv));
    }
    assert!(
        eventually(Duration::from_secs(20), || {
            metric(&s, "ztserve_quic_send_budget_held_bytes") == 16 * MIB
        }),
        "the stalled clients hold the whole budget"
    );
    assert_eq!(metric(&s, "ztserve_quic_stalled_closed_total"), 0);
    let fetch = async {
        let options = Options {
            trust: Trust::fingerprint(&fp).unwrap(),
            require_digest: true,
            ..Options::default()
        };
        let client = Client::connect(&url, options).await.unwrap();
        let mut f = client.fetch(&[], None).await.unwrap();
        let mut n = 0;
        while let Some(d) = f.next().await {
            assert_eq!(d.unwrap().verification, Verification::Verified);
            n += 1;
        }
        n
    };
    let n = tokio::time::timeout(Duration::from_secs(60), fetch)
        .await
        .expect("the fetch waited for the stalled clients' budget");
    assert_eq!(n, LAYERS);
    assert!(metric(&s, "ztserve_quic_stalled_closed_total") >= 1);
    let (conn, _, _) = &stalled[0];
    assert_eq!(
        close_code_within(conn, Duration::from_secs(10)).await,
        Some(u64::from(ztp_proto::Code::Stalled.value())),
        "closed as stalled"
    );
}

/// Clients that close their connection while the daemon has sent them
/// bytes they have not acknowledged: the budget those bytes held is all
/// given back (quinn drops them with the connection; a charge that held
/// the connection would keep both alive for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_closed_with_bytes_in_flight_give_their_budget_back() {
    use common::quic::{get, raw_connect};
    let (_root, s, _url, fp) = serving("piece_cache_bytes = 0");
    let (q, _) = s.quic.clone().unwrap();
    let mut most = 0;
    for _ in 0..8 {
        let conn = raw_connect(&q, &fp, None).await;
        let (mut send, _recv) = conn.open_bi().await.unwrap();
        send.write_all(&get(1, "m.zt")).await.unwrap();
        // The first component stream's first bytes, then gone.
        let mut stream = conn.accept_uni().await.unwrap();
        let mut buf = [0u8; 4096];
        let _ = stream.read(&mut buf).await;
        most = most.max(metric(&s, "ztserve_quic_send_budget_held_bytes"));
        conn.close(0u32.into(), b"gone");
    }
    assert!(most > 0, "the clients held some of the budget");
    assert!(
        eventually(Duration::from_secs(20), || {
            metric(&s, "ztserve_quic_send_budget_held_bytes") == 0
        }),
        "the budget is all given back"
    );
}

/// A `zt fetch` killed mid-file (no close, no more acknowledgements):
/// the next fetch is served, and once the dead connection is closed its
/// budget and the connection are given back. Streams of the dead
/// connection that waited for room in its window waited for ever (the
/// unit test `a_charge_waiting_for_the_window_ends_when_its_connection_closes`
/// in `quic/budget.rs`): by hand, every later ztp/1 fetch from the
/// daemon then waited too. Whether a kill leaves streams waiting depends
/// on timing, so this test passed on that build as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_gone_mid_fetch_gives_its_budget_back_once_closed() {
    // 64 layers of one read chunk (4 MiB): 256 MiB, four times the budget.
    let root = tempfile::tempdir().unwrap();
    let mut w = zt_format::Writer::new(Vec::new(), "big.zt").unwrap();
    for i in 0..64u8 {
        let data = vec![i; 4 << 20];
        let name = format!("model.layers.{i}.weight");
        let sha = zt_format::StoreOptions {
            digest: Some(zt_format::DigestAlgorithm::Sha256),
            ..zt_format::StoreOptions::default()
        };
        w.add_dense(&name, &[4 << 20], zt_format::DType::U8, &data, sha)
            .unwrap();
    }
    std::fs::write(root.path().join("big.zt"), w.finish().unwrap()).unwrap();
    // The dead connection is closed within seconds at the latest.
    let cfg = common::config_file(root.path(), "[quic]\nidle_timeout_secs = 3\n");
    let s = Server::start_quic(root.path(), &["--config", &cfg]);
    let (q, fp) = s.quic.clone().unwrap();
    let url = format!("quic://{q}/big.zt");
    // `zt fetch`, killed once it has written a component.
    let out = root.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let mut killed = std::process::Command::new(common::zt_bin())
        .args([
            "fetch",
            &url,
            "--cert-fingerprint",
            &fp,
            "--connections",
            "1",
        ])
        .args(["--no-cache", "-o"])
        .arg(out.join("big.zt"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let journal = out.join("big.zt.part.journal");
    let started = std::time::Instant::now();
    while std::fs::read_to_string(&journal).map_or(0, |j| j.lines().count()) < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the fetch began"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    // The next `zt fetch` of the file, over connections of its own.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let next = tokio::process::Command::new(common::zt_bin())
        .args(["fetch", &url, "--cert-fingerprint", &fp, "--no-cache", "-o"])
        .arg(out.join("next.zt"))
        .output();
    let r = tokio::time::timeout(Duration::from_secs(60), next)
        .await
        .expect("the next client was served")
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert!(
        eventually(Duration::from_secs(20), || {
            metric(&s, "ztserve_quic_send_budget_held_bytes") == 0
                && metric(&s, "ztserve_quic_connections") == 0
        }),
        "the budget and the connections are given back (held {} bytes, {} connections)",
        metric(&s, "ztserve_quic_send_budget_held_bytes"),
        metric(&s, "ztserve_quic_connections")
    );
}
