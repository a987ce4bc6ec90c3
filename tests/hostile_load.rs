//! Hostile clients against a release-like daemon, short and on loopback
//! (issue 28): what a request without a token may cost, selections built
//! to be slow or to fill the rendering cache. Each attack asserts the
//! counters that show the work was not done, or the bound it hit, and
//! that a good client is still served.

mod common;

use std::process::Command;

use common::fetch::zt;
use common::quic::metric;
use common::{config_file, curl, peak_rss_kib, Server};
use zt_format::{DType, DigestAlgorithm, StoreOptions, Writer};

/// 64 MiB: at the 1 MiB/s the test sets, the background hasher needs a
/// minute for it; a request that waited for the whole file would have it
/// hashed at full speed in well under a second.
const BIG: usize = 64 << 20;

/// `zt fetch quic://…/PATH -o DIR/m.zt EXTRA…` against `s`.
fn quic_fetch(
    s: &Server,
    path: &str,
    dir: &std::path::Path,
    extra: &[&str],
) -> std::process::Output {
    let (q, fp) = s.quic.clone().unwrap();
    let url = format!("quic://{q}/{path}");
    let dest = dir.join("m.zt");
    let mut args = vec![
        "fetch",
        &url,
        "-o",
        dest.to_str().unwrap(),
        "--cert-fingerprint",
        &fp,
    ];
    args.extend(extra);
    zt(&args)
}

/// Issue 28, item 6: no request without a valid token causes hashing,
/// reading or rendering, on either transport. Every route that would
/// hash the whole cold file (its manifest, a component, a summary, a
/// ztp/1 `get` of everything) is asked without a token and with a wrong
/// one: the file is still not hashed (the background hasher crawls at
/// 1 MiB/s), nothing was rendered, and the token's holder is served.
#[test]
fn a_request_without_a_valid_token_causes_no_work() {
    let root = tempfile::tempdir().unwrap();
    common::cold_safetensors(&root.path().join("m.safetensors"), BIG);
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "good-token\n").unwrap();
    let cfg = config_file(root.path(), "[digests]\nrate_mib_s = 1\n");
    let started = std::time::Instant::now();
    let s = Server::start_quic(
        root.path(),
        &["--config", &cfg, "--token-file", tokens.to_str().unwrap()],
    );
    let routes = [
        "/v1/files/m.safetensors/manifest",
        "/v1/files/m.safetensors/manifest?select=a.*",
        "/v1/files/m.safetensors/objects/a.big/data",
        "/v1/files/m.safetensors/objects/a.big/data?decode=1",
        "/v1/files/m.safetensors/summaries/a.big",
        "/v1/files/m.safetensors/objects?select=a.*",
        "/m.safetensors",
    ];
    for route in routes {
        for auth in [vec![], vec!["-H", "Authorization: Bearer wrong"]] {
            let r = curl(&auth, &s.url(route));
            assert_eq!(r.status, 401, "{route} {auth:?}");
        }
    }
    let out = tempfile::tempdir().unwrap();
    for select in [None, Some("a.*")] {
        let extra: Vec<&str> = select.map(|sel| vec!["--select", sel]).unwrap_or_default();
        let o = quic_fetch(&s, "m.safetensors", out.path(), &extra);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains("unauthorized"), "{err}");
    }
    // Time for work started by those requests to show.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(
        metric(&s, "ztserve_digest_files_total"),
        0,
        "a request without a token had the whole file hashed"
    );
    // At 1 MiB/s since the daemon started (slow on a loaded machine),
    // with a few MiB to spare: far from the 64 MiB of the whole file.
    let hashed = metric(&s, "ztserve_digest_bytes_total");
    let allowed = (started.elapsed().as_secs() + 4) << 20;
    assert!(
        hashed < allowed.min(BIG as u64 - (8 << 20)),
        "{hashed} bytes hashed in {:?}: more than the background rate allows",
        started.elapsed()
    );
    let text = String::from_utf8(curl(&[], &s.url("/metrics")).body).unwrap();
    let made: f64 = text
        .lines()
        .filter(|l| l.starts_with("ztserve_manifest_renderings_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(
        made, 0.0,
        "a manifest was rendered for a request without a token"
    );

    // The token's holder gets the small tensor, verified.
    let r = curl(
        &["-H", "Authorization: Bearer good-token"],
        &s.url("/v1/files/m.safetensors/objects/b.small/data"),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 4096);
}

/// Issue 28, item 5: a pattern past the length cap, or more wildcard
/// patterns than the cap, is refused naming the rule, at once, over HTTP
/// (the manifest and the objects table) and ztp/1; a pattern at the cap
/// against the sample's names is answered, and `/healthz` all along.
#[test]
fn pathological_selections_are_refused_by_name() {
    let root = common::sample_root();
    let s = Server::start_quic(root.path(), &[]);
    // 15 KB, as in the attack, fits a ztp/1 request; over HTTP a pattern
    // just past the cap (a 15 KB one is past the header cap, a 431).
    let long = format!("{}b", "*a".repeat(7_500));
    let over = format!("{}b", "*a".repeat(600));
    for route in [
        "/v1/files/sample.zt/manifest",
        "/v1/files/sample.zt/objects",
    ] {
        let url = format!("{}?select={}", s.url(route), over.replace('*', "%2A"));
        let r = curl(&[], &url);
        let body = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status, 400, "{route}: {body}");
        assert!(body.contains("select-too-long"), "{route}: {body}");
    }
    let many: String = (0..65).map(|i| format!("select={i}.%2A&")).collect();
    let r = curl(
        &[],
        &format!("{}?{many}", s.url("/v1/files/sample.zt/manifest")),
    );
    let body = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status, 400, "{body}");
    assert!(body.contains("select-too-many"), "{body}");
    let out = tempfile::tempdir().unwrap();
    let o = quic_fetch(&s, "sample.zt", out.path(), &["--select", &long]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("select-too-long"),
        "{err}"
    );
    // At the cap: answered (it matches nothing, by name).
    let at_cap = format!("{}q", "*a".repeat(511));
    let url = format!(
        "{}?select={}",
        s.url("/v1/files/sample.zt/manifest"),
        at_cap.replace('*', "%2A")
    );
    let r = curl(&[], &url);
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
}

/// Issue 28, item 4: distinct selections that match nothing fill the
/// rendering cache only up to its bytes: each refusal kept is charged
/// what it holds, the gauge says so, and the cache stays within
/// `limits.render_cache_bytes` however many come.
#[test]
fn distinct_refused_selections_stay_within_the_rendering_cache() {
    let root = common::sample_root();
    let cap = 64 << 10;
    let cfg = config_file(
        root.path(),
        &format!("[limits]\nrender_cache_bytes = {cap}\n"),
    );
    let s = Server::start(root.path(), &["--config", &cfg]);
    let urls: Vec<String> = (0..600)
        .map(|i| {
            s.url(&format!(
                "/v1/files/sample.zt/manifest?select=nothing.{i}.{}",
                "x".repeat(100)
            ))
        })
        .collect();
    // One curl, one connection, every URL in turn.
    let mut args = vec![
        "-s".to_owned(),
        "-w".to_owned(),
        "%{http_code}\n".to_owned(),
    ];
    for u in &urls {
        args.extend(["-o".to_owned(), "/dev/null".to_owned(), u.clone()]);
    }
    let out = Command::new("curl").args(&args).output().unwrap();
    let codes = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        codes.lines().filter(|c| *c == "404").count(),
        urls.len(),
        "{codes}"
    );
    let held = metric(&s, "ztserve_manifest_render_cache_bytes");
    assert!(held <= cap, "{held} bytes held, over the cache's {cap}");
    assert!(
        held > cap / 2,
        "{held} bytes held: refusals are not charged what they hold"
    );
    // A good manifest is still rendered and served.
    assert_eq!(
        curl(&[], &s.url("/v1/files/sample.zt/manifest")).status,
        200
    );
}

/// Issue 28, item 3: `?decode=1` is streamed. Four concurrent decodes of
/// a 64 MiB zstd component raise the daemon's peak RSS by far less than
/// one decoded component (before, each was decoded whole in memory: 256
/// MiB for four); every body is the component's bytes; `HEAD` answers
/// the decoded length and decodes nothing.
#[test]
fn decoding_is_streamed_and_head_decodes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let n: usize = 64 << 20;
    let data: Vec<u8> = (0..n).map(|i| (i / 4096 % 251) as u8).collect();
    let mut w = Writer::new(Vec::new(), "z.zt").unwrap();
    let zstd = StoreOptions {
        zstd_level: Some(1),
        digest: Some(DigestAlgorithm::Sha256),
    };
    w.add_dense("z", &[n as u64], DType::U8, &data, zstd)
        .unwrap();
    std::fs::write(root.path().join("z.zt"), w.finish().unwrap()).unwrap();
    let s = Server::start(root.path(), &[]);
    let url = s.url("/v1/files/z.zt/objects/z/data?decode=1");

    let jobs = metric(&s, "ztserve_cpu_jobs_total");
    let r = curl(&["-I"], &url);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some(n.to_string().as_str()));
    assert_eq!(r.header("x-zt-decoded"), Some("1"));
    assert_eq!(metric(&s, "ztserve_cpu_jobs_total"), jobs, "HEAD decoded");

    let before = peak_rss_kib(&s);
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || curl(&[], &url))
        })
        .collect();
    for r in readers {
        let r = r.join().unwrap();
        assert_eq!(r.status, 200);
        assert!(r.body == data, "a decoded body differs from the component");
    }
    let grown = peak_rss_kib(&s).saturating_sub(before);
    eprintln!("peak RSS grew by {grown} KiB for four 64 MiB decodes");
    assert!(grown < 48 << 10, "peak RSS grew by {grown} KiB");
    assert!(metric(&s, "ztserve_cpu_jobs_total") >= jobs + 4 * 64);
}

/// Issue 28, item 3: concurrent first requests for one summary share one
/// computation (before, each read and summed the tensor itself), and all
/// get the same answer.
#[test]
fn concurrent_summaries_share_one_computation() {
    let root = tempfile::tempdir().unwrap();
    let values: Vec<u8> = (0..(2048 * 2048u32))
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let mut w = Writer::new(Vec::new(), "t.zt").unwrap();
    w.add_dense(
        "t",
        &[2048, 2048],
        DType::F32,
        &values,
        StoreOptions::default(),
    )
    .unwrap();
    std::fs::write(root.path().join("t.zt"), w.finish().unwrap()).unwrap();
    let s = Server::start(root.path(), &[]);
    let url = s.url("/v1/files/t.zt/summaries/t");
    let askers: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || curl(&[], &url))
        })
        .collect();
    let bodies: Vec<Vec<u8>> = askers
        .into_iter()
        .map(|a| {
            let r = a.join().unwrap();
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            r.body
        })
        .collect();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    let made = metric(&s, "ztserve_summaries_total{result=\"miss\"}");
    let shared = metric(&s, "ztserve_summaries_total{result=\"hit\"}");
    assert_eq!((made, shared), (1, 7), "the summary was made {made} times");
    assert!(metric(&s, "ztserve_summary_cache_bytes") > 0);
    // Summed on the CPU pool, a turn per 4 MiB piece of each of the two
    // passes over the 16 MiB tensor (none on the async workers).
    let jobs = metric(&s, "ztserve_cpu_jobs_total");
    assert!(jobs >= 8, "{jobs} CPU jobs for the summary");
}

/// Issue 28, item 1: an HTTP/2 connection is held to
/// `limits.http2_max_streams` requests at once (hyper's default was 200:
/// 200 streams of a large file held about 830 MB): the server's first
/// SETTINGS frame says `SETTINGS_MAX_CONCURRENT_STREAMS` 16 (RFC 9113
/// section 6.5.2), read off the wire after the connection preface.
#[test]
fn http2_connections_are_held_to_the_stream_cap() {
    use std::io::{Read, Write};
    let root = common::sample_root();
    let s = Server::start(root.path(), &[]);
    let mut c = std::net::TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    // The preface, then an empty SETTINGS frame of our own.
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();
    let mut head = [0u8; 9];
    c.read_exact(&mut head).unwrap();
    let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
    assert_eq!(head[3], 0x4, "the server's first frame is SETTINGS");
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).unwrap();
    let max_streams = body
        .chunks_exact(6)
        .find(|e| u16::from_be_bytes([e[0], e[1]]) == 0x3)
        .map(|e| u32::from_be_bytes([e[2], e[3], e[4], e[5]]));
    assert_eq!(max_streams, Some(16));
}

/// A 48 MiB tensor served from a daemon with a 4 MiB body budget, a 256
/// KiB window per connection and a send timeout of `send_timeout` s,
/// already hashed (its first check done), and the daemon's resident KiB
/// then.
fn big_file_server(send_timeout: u64) -> (tempfile::TempDir, Server, u64) {
    let root = tempfile::tempdir().unwrap();
    common::cold_safetensors(&root.path().join("m.safetensors"), 48 << 20);
    let limits = format!(
        "[limits]\nbody_memory_bytes = {}\nbody_window_bytes = {}\nsend_timeout_secs = {send_timeout}\n",
        4 << 20,
        256 << 10
    );
    let cfg = config_file(root.path(), &limits);
    let s = Server::start(root.path(), &["--config", &cfg]);
    let part = curl(
        &["-r", "0-0"],
        &s.url("/v1/files/m.safetensors/objects/a.big/data"),
    );
    assert_eq!(part.status, 206);
    let rss = common::rss_kib(&s);
    (root, s, rss)
}

/// `n` connections each asking for `/m.safetensors` with a 4 KiB receive
/// buffer and reading nothing.
fn slow_readers(s: &Server, n: usize) -> Vec<socket2::Socket> {
    use std::io::Write;
    (0..n)
        .map(|_| {
            let c =
                socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            c.set_recv_buffer_size(4096).unwrap();
            let addr: std::net::SocketAddr = s.addr.parse().unwrap();
            c.connect(&addr.into()).unwrap();
            (&c).write_all(b"GET /m.safetensors HTTP/1.1\r\nHost: t\r\n\r\n")
                .unwrap();
            c
        })
        .collect()
}

/// `ztserve_http_connections_closed_total` for `reason`, 0 before any.
fn closed(s: &Server, reason: &str) -> u64 {
    let text = String::from_utf8(curl(&[], &s.url("/metrics")).body).unwrap();
    let key = format!("ztserve_http_connections_closed_total{{reason=\"{reason}\"}}");
    text.lines()
        .find_map(|l| l.strip_prefix(&key))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Issue 28, item 1: 64 clients each asking for a 48 MiB file and reading
/// nothing (a 4 KiB receive buffer, so the kernel takes little) hold the
/// daemon's body budget and no more: its resident memory grows by far
/// less than one read chunk each (before, each held a 4 MiB chunk: 256
/// MiB). Meanwhile `/healthz` answers, and a good client's `zt fetch`,
/// finding the budget taken, gets its bytes, verified, by closing the
/// most stalled of them (the send timeout is a minute off); once the
/// slow clients leave, every byte is given back.
#[test]
fn slow_readers_hold_the_budget_and_give_way_to_a_good_client() {
    let (_root, s, before) = big_file_server(60);
    let slow = slow_readers(&s, 64);
    let full = common::eventually(std::time::Duration::from_secs(20), || {
        metric(&s, "ztserve_http_body_bytes_held") > (4 << 20) - (512 << 10)
    });
    assert!(full, "the slow readers never held the budget");
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);

    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("m.safetensors");
    common::fetch::fetch_ok(&s.url("/m.safetensors"), &dest, &[]);
    assert!(closed(&s, "budget") >= 1, "no stalled reader was closed");
    let grown = peak_rss_kib(&s).saturating_sub(before);
    eprintln!("peak RSS grew by {grown} KiB under 64 slow readers");
    assert!(grown < 32 << 10, "peak RSS grew by {grown} KiB");

    drop(slow);
    let freed = common::eventually(std::time::Duration::from_secs(30), || {
        metric(&s, "ztserve_http_body_bytes_held") == 0
    });
    assert!(freed, "the slow readers' bytes were not given back");
}

/// Issue 28, item 7: memory a burst of slow readers made the daemon hold
/// goes back to the system once they are gone. 200 clients ask for a
/// 48 MiB file and read nothing, holding much of the default 128 MiB body
/// budget; once they disconnect and the budget is empty, the daemon's RSS comes
/// back within 32 MiB of what it was before them (glibc's malloc kept it:
/// the daemon's allocator is jemalloc, which gives it back).
#[test]
fn memory_a_burst_held_goes_back_to_the_system() {
    let root = tempfile::tempdir().unwrap();
    common::cold_safetensors(&root.path().join("m.safetensors"), 48 << 20);
    let s = Server::start(root.path(), &[]);
    let part = curl(&["-r", "0-0"], &s.url("/m.safetensors"));
    assert_eq!(part.status, 206);
    // The background hasher's pieces are freed too.
    let hashed = common::eventually(std::time::Duration::from_secs(60), || {
        metric(&s, "ztserve_digest_files_total") == 1
    });
    assert!(hashed, "the file was not hashed");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let before = common::rss_kib(&s);
    let slow = slow_readers(&s, 200);
    // Those that stall a second while others wait for the budget are
    // closed: it fills and empties by turns.
    let full = common::eventually(std::time::Duration::from_secs(30), || {
        metric(&s, "ztserve_http_body_bytes_held") > 48 << 20
    });
    assert!(full, "the slow readers never held 48 MiB of the budget");
    let held = common::rss_kib(&s);
    drop(slow);
    let empty = common::eventually(std::time::Duration::from_secs(30), || {
        metric(&s, "ztserve_http_body_bytes_held") == 0
    });
    assert!(empty, "the slow readers' bytes were not given back");
    // Within 20 s: the blocking pool's idle threads (10 s) hand back what
    // their caches hold when they end.
    let back = common::eventually(std::time::Duration::from_secs(20), || {
        common::rss_kib(&s) < before + (32 << 10)
    });
    let after = common::rss_kib(&s);
    eprintln!("RSS {before} KiB before, {held} KiB with the budget full, {after} KiB after");
    assert!(
        back,
        "RSS {after} KiB 20 s after the burst, more than 32 MiB over {before} KiB before it"
    );
}

/// Issue 28, item 1: 4 HTTP/2 connections (prior knowledge) each with 16
/// streams of a 48 MiB file and a shut flow-control window hold one
/// window each: the daemon's resident memory grows by far less than a
/// read chunk per stream (before, each stream held 4 MiB: 256 MiB), and
/// each connection is closed once it has held its bytes for the send
/// timeout.
#[test]
fn stalled_http2_streams_hold_one_window_and_are_closed() {
    let (_root, s, before) = big_file_server(3);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ended = rt.block_on(async {
        let mut conns = Vec::new();
        let mut streams = Vec::new();
        for _ in 0..4 {
            let tcp = tokio::net::TcpStream::connect(&s.addr).await.unwrap();
            let (client, conn) = h2::client::Builder::new()
                .initial_window_size(0)
                .handshake::<_, bytes::Bytes>(tcp)
                .await
                .unwrap();
            conns.push(tokio::spawn(conn));
            let mut client = client.ready().await.unwrap();
            for _ in 0..16 {
                let req = axum::http::Request::get(format!("http://{}/m.safetensors", s.addr))
                    .body(())
                    .unwrap();
                let (resp, _) = client.send_request(req, true).unwrap();
                streams.push(resp);
                client = client.ready().await.unwrap();
            }
        }
        let limit = std::time::Duration::from_secs(30);
        let mut ended = 0;
        for c in conns {
            if tokio::time::timeout(limit, c).await.is_ok() {
                ended += 1;
            }
        }
        drop(streams);
        ended
    });
    assert_eq!(ended, 4, "a stalled HTTP/2 connection was not closed");
    assert!(closed(&s, "send_timeout") >= 4);
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
    let grown = peak_rss_kib(&s).saturating_sub(before);
    eprintln!("peak RSS grew by {grown} KiB under 64 stalled HTTP/2 streams");
    assert!(grown < 32 << 10, "peak RSS grew by {grown} KiB");
}

/// A safetensors file at `path` whose header (77 MB) holds `n` tensors of
/// one byte.
fn tiny_tensors(path: &std::path::Path, n: usize) {
    let mut header = String::with_capacity(n * 80);
    header.push('{');
    for i in 0..n {
        if i > 0 {
            header.push(',');
        }
        header.push_str(&format!(
            r#""model.t{i:07}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{}]}}"#,
            i + 1
        ));
    }
    header.push('}');
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.resize(file.len() + n, 7);
    std::fs::write(path, file).unwrap();
}

/// Issue 28, item 7: the catalog holds a manifest in at most 4x its
/// encoded size. A safetensors file whose header names 200,000 tiny
/// tensors (15 MB, under the default `limits.manifest_memory`) is
/// catalogued and its sha256 digests computed; once they are, and the
/// allocator has given back what hashing used, the daemon's anonymous RSS
/// (its allocations, not its code) is at most 4x the header above what it
/// was before the file came (3.7x; 7.6x
/// when the objects were a B-tree and the checks kept their own names).
#[test]
fn a_catalogued_manifest_is_held_in_at_most_four_times_its_size() {
    const N: usize = 200_000;
    let (root, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let staged = outside.path().join("many.safetensors");
    tiny_tensors(&staged, N);
    let header = std::fs::metadata(&staged).unwrap().len() - 8 - N as u64;
    let s = Server::start(root.path(), &[]);
    assert_eq!(curl(&[], &s.url("/v1/files")).status, 200);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let before = common::anon_rss_kib(&s);
    std::fs::rename(&staged, root.path().join("many.safetensors")).unwrap();
    let t = std::time::Instant::now();
    loop {
        let listing = String::from_utf8_lossy(&curl(&[], &s.url("/v1/files")).body).into_owned();
        if listing.contains("\"digests\":\"complete\"") {
            break;
        }
        assert!(
            !listing.contains("\"unavailable\":[{"),
            "the file was refused: {listing}"
        );
        assert!(
            t.elapsed() < std::time::Duration::from_secs(300),
            "digests not computed in 300 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    // What hashing used goes back to the system within a few seconds.
    let hashed = t.elapsed();
    let held = || common::anon_rss_kib(&s).saturating_sub(before) * 1024;
    let fits = common::eventually(std::time::Duration::from_secs(15), || held() <= 4 * header);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let held = held();
    eprintln!(
        "{N} objects, header {header} bytes: held {held} bytes ({:.2}x); hashed in {:.1} s",
        held as f64 / header as f64,
        hashed.as_secs_f64()
    );
    assert!(
        fits,
        "the catalog holds {held} bytes for a {header}-byte header, over 4x"
    );
}

/// Issue 28, item 7: a safetensors file whose 77 MB header holds a million
/// tiny tensors is refused by name when it is catalogued
/// (`manifest-over-memory`, `limits.manifest_memory` at its default), its
/// objects counted as they are read, so the rest are never built: the
/// daemon's peak RSS stays far under what the whole manifest would take
/// (the issue measured 3.0 GB, and an abort under a 2.5 GB address-space
/// limit), and the file beside it is served.
#[test]
fn a_header_of_a_million_tensors_is_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    tiny_tensors(&root.path().join("million.safetensors"), 1_000_000);
    let small = common::cold_safetensors(&root.path().join("good.safetensors"), 1 << 20);
    let s = Server::start(root.path(), &[]);
    let list = curl(&[], &s.url("/v1/files"));
    let list: serde_json::Value = serde_json::from_slice(&list.body).unwrap();
    let refused = list["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "million.safetensors")
        .unwrap_or_else(|| panic!("not refused: {list}"));
    let reason = refused["reason"].as_str().unwrap();
    assert!(reason.contains("manifest-over-memory"), "{reason}");
    assert!(reason.contains("million.safetensors"), "{reason}");
    let r = curl(
        &[],
        &s.url("/v1/files/good.safetensors/objects/b.small/data"),
    );
    assert_eq!((r.status, r.body), (200, small));
    let peak = peak_rss_kib(&s);
    eprintln!("peak RSS {peak} KiB with a million-tensor header refused");
    assert!(peak < 512 << 10, "peak RSS {peak} KiB");
}
