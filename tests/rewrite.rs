//! Issue 26, item 1: a file rewritten in place (same size, no rename) is
//! never served as a complete body of other bytes than its ETag names.
//! Before the headers, the request finds the file changed and is served
//! the new version under its new tag; mid-body and at the last piece, the
//! response is cut (HTTP/1.1: the connection; HTTP/2: the stream) after
//! bytes that are all the old version's. Whole-file GETs, Range GETs and
//! `?v=` alike, over HTTP/1.1 and HTTP/2; and a write through a shared
//! mapping, which changes no timestamp, caught by the hash of the bytes
//! sent (`?v=` and component URLs).
//!
//! The clients hold the server back deterministically: HTTP/1.1 over a
//! socket with a small receive buffer that the test stops reading,
//! HTTP/2 with a flow-control window the test does not release. What the
//! server can have read ahead (socket buffers, one chunk, hyper's send
//! buffer) stays well under the offsets rewritten.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::quic::metric;
use common::{curl, Server};

const MIB: usize = 1 << 20;
/// Each tensor's size: `a` first, `b` after it.
const TENSOR: usize = 24 * MIB;

/// The served safetensors file: `a` and `b`, `f32`, 24 MiB each.
struct Model {
    path: PathBuf,
    /// Where `b`'s bytes start in the file.
    b_at: usize,
    bytes: Vec<u8>,
}

fn model(dir: &Path) -> Model {
    use safetensors::tensor::{Dtype, TensorView};
    let n = TENSOR / 4;
    let a: Vec<u8> = (0..n as u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let b: Vec<u8> = (0..n as u32)
        .flat_map(|i| (-(i as f32)).to_le_bytes())
        .collect();
    let views = vec![
        ("a", TensorView::new(Dtype::F32, vec![n], &a).unwrap()),
        ("b", TensorView::new(Dtype::F32, vec![n], &b).unwrap()),
    ];
    let path = dir.join("m.safetensors");
    safetensors::serialize_to_file(views, None, &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let b_at = bytes.len() - TENSOR;
    Model { path, b_at, bytes }
}

impl Model {
    /// Overwrites `len` bytes at `at` in place (`pwrite`, no rename).
    fn scribble(&self, at: usize, len: usize) {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .unwrap();
        let new: Vec<u8> = self.bytes[at..at + len].iter().map(|x| !x).collect();
        f.write_all_at(&new, at as u64).unwrap();
    }

    /// Puts the original bytes back, in place.
    fn restore(&self) {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.path)
            .unwrap();
        f.write_all_at(&self.bytes, 0).unwrap();
    }
}

/// A daemon over `root` that learns of changes only from its requests.
fn daemon(root: &Path) -> Server {
    let cfg = common::config_file(
        root,
        "[catalog]\nwatch = false\nrescan_interval_secs = 3600\n",
    );
    Server::start(root, &["--config", &cfg])
}

fn header<'a>(head: &'a [(String, String)], name: &str) -> Option<&'a str> {
    head.iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn etag(s: &Server) -> String {
    let r = curl(&["-I"], &s.url("/m.safetensors"));
    assert_eq!(r.status, 200);
    header(&r.headers, "etag").unwrap().to_owned()
}

#[test]
fn a_rewrite_before_the_headers_serves_the_new_version() {
    let root = tempfile::tempdir().unwrap();
    let m = model(root.path());
    let s = daemon(root.path());
    let old = etag(&s);
    let r = curl(&["-r", "0-1023"], &s.url("/m.safetensors"));
    assert_eq!(r.status, 206);
    m.scribble(m.b_at + 1000, 4096);
    let mut now = std::fs::read(&m.path).unwrap();
    for http2 in [false, true] {
        let proto: &[&str] = if http2 {
            &["--http2-prior-knowledge"]
        } else {
            &[]
        };
        let whole = curl(proto, &s.url("/m.safetensors"));
        assert_eq!(whole.status, 200);
        assert!(whole.body == now, "the whole file is the new version");
        let tag = header(&whole.headers, "etag").unwrap();
        assert_ne!(tag, old, "under a new tag");
        let at = m.b_at + 1000;
        let range = format!("{at}-{}", at + 4095);
        let part = curl(&[proto, &["-r", &range]].concat(), &s.url("/m.safetensors"));
        assert_eq!((part.status, &part.body[..]), (206, &now[at..at + 4096]));
        // The old version's pinned URL is gone, by name.
        let pinned = curl(
            proto,
            &s.url(&format!("/m.safetensors?v={}", old.trim_matches('"'))),
        );
        assert_eq!(pinned.status, 412);
        assert!(String::from_utf8_lossy(&pinned.body).contains("version_gone"));
        // A conditional request for the old version fails too.
        let cond = curl(
            &[proto, &["-H", &format!("If-Match: {old}")]].concat(),
            &s.url("/m.safetensors"),
        );
        assert_eq!(cond.status, 412);
    }
    assert!(metric(&s, "ztserve_file_changed_total{when=\"before_headers\"}") >= 1);
    // And back: the next request finds the restored bytes.
    m.restore();
    now.clone_from(&m.bytes);
    assert!(curl(&[], &s.url("/m.safetensors")).body == now);
}

/// Which URL of the file a transfer asks for.
#[derive(Debug, Clone, Copy)]
enum Ask {
    Whole,
    /// `Range: bytes=1MiB-` to 1 MiB before the end.
    Range,
    /// The whole file at `?v=ETAG`.
    Pinned,
}

/// A transfer held after its first bytes, then released.
trait Held {
    /// The status, `Content-Length`, and the bytes received so far.
    fn start(addr: &str, path: &str, range: Option<&str>) -> Self;
    fn head(&self) -> (u16, usize);
    /// Reads on until the body ends or is cut: every byte received.
    fn finish(self) -> Vec<u8>;
}

/// HTTP/1.1 over a socket with a 64 KiB receive buffer.
struct H1 {
    conn: TcpStream,
    status: u16,
    length: usize,
    body: Vec<u8>,
}

impl Held for H1 {
    fn start(addr: &str, path: &str, range: Option<&str>) -> H1 {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.set_recv_buffer_size(64 << 10).unwrap();
        let sa: std::net::SocketAddr = addr.parse().unwrap();
        sock.connect(&sa.into()).unwrap();
        let mut conn: TcpStream = sock.into();
        conn.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let range = range
            .map(|r| format!("Range: bytes={r}\r\n"))
            .unwrap_or_default();
        write!(
            conn,
            "GET {path} HTTP/1.1\r\nHost: x\r\n{range}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        let end = loop {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "the connection closed before the headers");
            raw.extend_from_slice(&buf[..n]);
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
        let status = head[9..12].parse().unwrap();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let mut body = raw[end + 4..].to_vec();
        while body.len() < MIB {
            let n = conn.read(&mut buf).unwrap();
            assert!(n > 0, "the body ended early");
            body.extend_from_slice(&buf[..n]);
        }
        H1 {
            conn,
            status,
            length,
            body,
        }
    }

    fn head(&self) -> (u16, usize) {
        (self.status, self.length)
    }

    fn finish(mut self) -> Vec<u8> {
        let _ = self.conn.read_to_end(&mut self.body);
        self.body
    }
}

/// HTTP/2 (prior knowledge) with a 1 MiB window, released only by
/// [`Held::finish`].
struct H2 {
    rt: tokio::runtime::Runtime,
    status: u16,
    length: usize,
    body: Vec<u8>,
    stream: h2::RecvStream,
}

impl Held for H2 {
    fn start(addr: &str, path: &str, range: Option<&str>) -> H2 {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (status, length, body, stream) = rt.block_on(async {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (client, conn) = h2::client::Builder::new()
                .initial_window_size(MIB as u32)
                .initial_connection_window_size(MIB as u32)
                .handshake::<_, bytes::Bytes>(tcp)
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut client = client.ready().await.unwrap();
            let mut req = axum::http::Request::get(format!("http://{addr}{path}"));
            if let Some(r) = range {
                req = req.header("range", format!("bytes={r}"));
            }
            let (resp, _) = client.send_request(req.body(()).unwrap(), true).unwrap();
            let resp = resp.await.unwrap();
            let status = resp.status().as_u16();
            let length = resp.headers()["content-length"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap();
            let mut stream = resp.into_body();
            let mut body = Vec::new();
            // The window is not released: the server stops at 1 MiB.
            while body.len() < MIB {
                let d = stream.data().await.unwrap().unwrap();
                body.extend_from_slice(&d);
            }
            (status, length, body, stream)
        });
        H2 {
            rt,
            status,
            length,
            body,
            stream,
        }
    }

    fn head(&self) -> (u16, usize) {
        (self.status, self.length)
    }

    fn finish(self) -> Vec<u8> {
        let H2 {
            rt,
            mut body,
            mut stream,
            ..
        } = self;
        rt.block_on(async {
            let _ = stream.flow_control().release_capacity(body.len());
            while let Some(Ok(d)) = stream.data().await {
                let _ = stream.flow_control().release_capacity(d.len());
                body.extend_from_slice(&d);
            }
        });
        body
    }
}

/// Starts `ask`, lets the server fill what it can, rewrites 64 KiB at
/// `at`, and reads on: the body must be cut, every byte of it the old
/// version's.
fn cut_transfer<C: Held>(s: &Server, m: &Model, ask: Ask, at: usize) {
    let tag = etag(s);
    let (path, range, base) = match ask {
        Ask::Whole => ("/m.safetensors".to_owned(), None, 0),
        Ask::Range => (
            "/m.safetensors".to_owned(),
            Some(format!("{MIB}-{}", m.bytes.len() - MIB - 1)),
            MIB,
        ),
        Ask::Pinned => (
            format!("/m.safetensors?v={}", tag.trim_matches('"')),
            None,
            0,
        ),
    };
    let before = metric(s, "ztserve_file_changed_total{when=\"mid_response\"}");
    let held = C::start(&s.addr, &path, range.as_deref());
    let (status, length) = held.head();
    assert_eq!(status, if range.is_some() { 206 } else { 200 }, "{ask:?}");
    // Let the server fill every buffer it can.
    std::thread::sleep(Duration::from_millis(300));
    m.scribble(at, 64 << 10);
    let body = held.finish();
    assert!(
        body.len() < length,
        "{ask:?}, rewrite at {at}: the body is cut ({} of {length} bytes)",
        body.len()
    );
    assert!(body.len() >= MIB);
    assert!(
        body[..] == m.bytes[base..base + body.len()],
        "{ask:?}: every byte received is the old version's"
    );
    assert_eq!(
        metric(s, "ztserve_file_changed_total{when=\"mid_response\"}"),
        before + 1,
        "counted"
    );
    m.restore();
}

fn every_case<C: Held>() {
    let root = tempfile::tempdir().unwrap();
    let m = model(root.path());
    let s = daemon(root.path());
    let end = m.bytes.len();
    for ask in [Ask::Whole, Ask::Range, Ask::Pinned] {
        // Mid-body: early in `b`; at the last piece: its last bytes.
        let last = match ask {
            Ask::Range => end - MIB - (64 << 10),
            _ => end - (64 << 10),
        };
        for at in [m.b_at + MIB, last] {
            cut_transfer::<C>(&s, &m, ask, at);
        }
    }
    // The daemon is fine, and serves the restored file whole.
    assert!(curl(&[], &s.url("/m.safetensors")).body == m.bytes);
}

#[test]
fn a_rewrite_mid_body_cuts_http1_responses() {
    every_case::<H1>();
}

#[test]
fn a_rewrite_mid_body_cuts_http2_streams() {
    every_case::<H2>();
}

/// Writes through a shared mapping of the file, from a Python process:
/// the first write dirties the page (and may change the file's times),
/// later writes to the same page change no timestamp at all.
struct Mapped(std::process::Child);

impl Mapped {
    fn open(path: &Path, at: usize) -> Mapped {
        let script = format!(
            "import mmap, sys\n\
             f = open({path:?}, 'r+b')\n\
             m = mmap.mmap(f.fileno(), 0)\n\
             for line in sys.stdin:\n\
             \x20   m[{at}] = (m[{at}] + 1) % 256\n\
             \x20   print('ok', flush=True)\n",
            path = path.display().to_string()
        );
        let child = std::process::Command::new("python3")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        Mapped(child)
    }

    fn write(&mut self) {
        writeln!(self.0.stdin.as_mut().unwrap()).unwrap();
        let mut ok = [0u8; 3];
        self.0.stdout.as_mut().unwrap().read_exact(&mut ok).unwrap();
        assert_eq!(&ok, b"ok\n");
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_write_through_a_mapping_is_caught_by_the_hash_of_what_is_sent() {
    // On tmpfs a write through a mapping changes no timestamp at all (on a
    // disk file system the first write after a writeback does).
    let shm = std::path::Path::new("/dev/shm");
    let root = match shm.is_dir() {
        true => tempfile::tempdir_in(shm).unwrap(),
        false => tempfile::tempdir().unwrap(),
    };
    let m = model(root.path());
    let s = daemon(root.path());
    let at = m.b_at + TENSOR - 100;
    let mut mapped = Mapped::open(&m.path, at);
    // The first write dirties the page; a request then catalogues the
    // file as it is now, and its digests are computed (a `?v=` URL is
    // kept for good, and hashed as it is sent, only once they are).
    mapped.write();
    etag(&s);
    let hashed = common::eventually(Duration::from_secs(30), || {
        let list = curl(&[], &s.url("/v1/files")).body;
        let list: serde_json::Value = serde_json::from_slice(&list).unwrap();
        list["files"][0]["digests"] == "complete"
    });
    assert!(hashed, "the file's digests were computed");
    let tag = etag(&s);
    let before = metric(&s, "ztserve_file_changed_total{when=\"mid_response\"}");
    for path in [
        "/v1/files/m.safetensors/objects/b/data".to_owned(),
        format!("/m.safetensors?v={}", tag.trim_matches('"')),
    ] {
        let now = std::fs::read(&m.path).unwrap();
        let held = H1::start(&s.addr, &path, None);
        std::thread::sleep(Duration::from_millis(300));
        mapped.write();
        let body = held.finish();
        let base = if path.contains("objects") { m.b_at } else { 0 };
        assert!(
            body.len() < now.len() - base,
            "{path}: cut ({} bytes)",
            body.len()
        );
        assert!(
            body[..] == now[base..base + body.len()],
            "{path}: the bytes received are the version served"
        );
    }
    assert_eq!(
        metric(&s, "ztserve_file_changed_total{when=\"mid_response\"}"),
        before + 2
    );
    let logged = std::iter::from_fn(|| s.logs.recv_timeout(Duration::from_millis(200)).ok())
        .filter(|l| l.contains("no longer match the version being sent"))
        .count();
    assert!(
        logged >= 2,
        "both cut by the hash of the bytes sent, not by a timestamp"
    );
}

#[test]
fn curl_sees_a_cut_transfer_as_an_error() {
    let root = tempfile::tempdir().unwrap();
    let m = model(root.path());
    let s = daemon(root.path());
    for (proto, codes) in [
        ("--http1.1", &[18, 56][..]),
        ("--http2-prior-knowledge", &[16, 18, 56, 92][..]),
    ] {
        let out = root.path().join("out");
        let mut child = std::process::Command::new("curl")
            .args(["-s", "--limit-rate", "10M", proto, "-o"])
            .arg(&out)
            .arg(s.url("/m.safetensors"))
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        m.scribble(m.bytes.len() - (64 << 10), 64 << 10);
        let code = child.wait().unwrap().code().unwrap();
        assert!(codes.contains(&code), "{proto}: curl exits {code}");
        let got = std::fs::read(&out).unwrap();
        assert!(got.len() < m.bytes.len() && got[..] == m.bytes[..got.len()]);
        m.restore();
    }
}

/// A daemon with QUIC on that learns of changes only from its requests.
fn daemon_quic(root: &Path) -> Server {
    let cfg = common::config_file(
        root,
        "[catalog]\nwatch = false\nrescan_interval_secs = 3600\n",
    );
    Server::start_quic(root, &["--config", &cfg])
}

/// Over ztp/1 too, a request finds the file rewritten since it was
/// catalogued, has it catalogued again and fetches the new version.
#[test]
fn ztp1_gets_the_new_version_of_a_rewritten_file() {
    let root = tempfile::tempdir().unwrap();
    let m = model(root.path());
    let s = daemon_quic(root.path());
    let (q, fp) = s.quic.clone().unwrap();
    let out = tempfile::tempdir().unwrap();
    let url = format!("quic://{q}/m.safetensors");
    let first = out.path().join("first.safetensors");
    common::fetch::fetch_ok(&url, &first, &["--cert-fingerprint", &fp]);
    assert!(std::fs::read(&first).unwrap() == m.bytes);
    m.scribble(m.b_at + MIB, 4096);
    let again = out.path().join("again.safetensors");
    common::fetch::fetch_ok(&url, &again, &["--cert-fingerprint", &fp]);
    assert!(
        std::fs::read(&again).unwrap() == std::fs::read(&m.path).unwrap(),
        "the new version, whole"
    );
    assert_eq!(
        metric(&s, "ztserve_file_changed_total{when=\"before_headers\"}"),
        1
    );
}

/// A shard of a sharded checkpoint rewritten in place: a request for one
/// of its tensors through the index finds it and is answered from the
/// shard's new version.
#[test]
fn a_rewritten_shard_is_catalogued_again() {
    use safetensors::tensor::{Dtype, TensorView};
    let root = tempfile::tempdir().unwrap();
    let values = |k: f32| -> Vec<u8> {
        (0..4096u32)
            .flat_map(|i| (i as f32 * k).to_le_bytes())
            .collect()
    };
    let (a, b) = (values(1.0), values(-1.0));
    for (shard, name, bytes) in [("s1.safetensors", "a", &a), ("s2.safetensors", "b", &b)] {
        let view = TensorView::new(Dtype::F32, vec![4096], bytes).unwrap();
        safetensors::serialize_to_file([(name, view)], None, &root.path().join(shard)).unwrap();
    }
    let index =
        serde_json::json!({ "weight_map": { "a": "s1.safetensors", "b": "s2.safetensors" } });
    std::fs::write(
        root.path().join("m.safetensors.index.json"),
        index.to_string(),
    )
    .unwrap();
    let s = daemon(root.path());
    let url = s.url("/v1/files/m.safetensors.index.json/objects/b/data");
    let r = curl(&[], &url);
    assert!(r.status == 200 && r.body == b, "{}", r.status);
    // Rewrite `b` in place, in its shard.
    let shard = root.path().join("s2.safetensors");
    let len = std::fs::metadata(&shard).unwrap().len() as usize;
    let new: Vec<u8> = b.iter().map(|x| !x).collect();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    f.write_all_at(&new, (len - new.len()) as u64).unwrap();
    let r = curl(&[], &url);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.body == new, "the shard's new bytes");
    assert_eq!(
        metric(&s, "ztserve_file_changed_total{when=\"before_headers\"}"),
        1
    );
}

/// Requests that find the same change at once have the file loaded again
/// once, not once each.
#[test]
fn concurrent_requests_reload_a_changed_file_once() {
    let root = tempfile::tempdir().unwrap();
    let m = model(root.path());
    let s = daemon(root.path());
    etag(&s);
    m.scribble(m.b_at, 4096);
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let url = s.url("/m.safetensors");
            std::thread::spawn(move || curl(&["-r", "0-1023"], &url).status)
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), 206);
    }
    let reloads = std::iter::from_fn(|| s.logs.recv_timeout(Duration::from_millis(300)).ok())
        .filter(|l| l.contains("catalogued again: it changed under its entry"))
        .count();
    assert_eq!(reloads, 1, "one load for eight requests");
}
