//! `zt fetch` over HTTP against Range servers that get Range wrong: a
//! small HTTP/1.1 server on 127.0.0.1 serves a real file whose components
//! carry no digest (so only the client's own checks stand between a wrong
//! byte and the output) and answers component requests wrongly. Every case
//! fails naming the URL and what came back, and leaves no output.

mod common;

use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How the server answers a Range request for a component, one starting
/// at a component's offset (the footer, head and manifest are always
/// answered right).
#[derive(Debug, Clone, Copy)]
enum Lie {
    /// Other bytes than asked for, with their true Content-Range.
    OtherBytes,
    /// The bytes asked for, labelled as other ones.
    WrongLabel,
    /// The right Content-Range, then a body that stops short.
    ShortBody,
    /// The right Content-Range, then a body (and `Content-Length`) 1 MiB
    /// longer.
    LongBody,
    /// `200 OK` with the whole file.
    WholeFile,
    /// A 206 without a Content-Range.
    NoContentRange,
    /// `503` with a 4 MiB body.
    HugeError,
    /// The footer asked for (`bytes=-16`) answered with the whole file,
    /// honestly labelled; components are answered right.
    WholeFileForFooter,
}

/// Bytes `a..b` of a file of `len` bytes that `Range: bytes=SPEC` asks for.
fn wanted(spec: &str, len: u64) -> (u64, u64) {
    let (a, b) = spec.split_once('-').unwrap();
    if a.is_empty() {
        let n: u64 = b.parse().unwrap();
        return (len - n.min(len), len);
    }
    let a: u64 = a.parse().unwrap();
    let b = if b.is_empty() {
        len - 1
    } else {
        b.parse().unwrap()
    };
    (a, b + 1)
}

async fn answer(mut sock: TcpStream, file: Arc<Vec<u8>>, lie: Lie, blobs: Arc<Vec<u64>>) {
    let len = file.len() as u64;
    let huge = vec![b'x'; 4 << 20];
    let mut buf = Vec::new();
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            let mut chunk = [0u8; 4096];
            match sock.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end + 4);
        let spec = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("range: bytes=")
                    .map(str::to_owned)
            })
            .unwrap();
        let (a, b) = wanted(&spec, len);
        let component = blobs.contains(&a);
        let (a, b) = match lie {
            Lie::WholeFileForFooter if spec.starts_with('-') => (0, len),
            _ => (a, b),
        };
        let (status, range, body): (&str, Option<(u64, u64)>, &[u8]) = match (component, lie) {
            (false, _) | (true, Lie::WholeFileForFooter) => (
                "206 Partial Content",
                Some((a, b)),
                &file[a as usize..b as usize],
            ),
            (true, Lie::OtherBytes) => {
                let (a, b) = (a - 64, b - 64);
                (
                    "206 Partial Content",
                    Some((a, b)),
                    &file[a as usize..b as usize],
                )
            }
            (true, Lie::WrongLabel) => (
                "206 Partial Content",
                Some((a - 64, b - 64)),
                &file[a as usize..b as usize],
            ),
            (true, Lie::ShortBody | Lie::LongBody) => (
                "206 Partial Content",
                Some((a, b)),
                &file[a as usize..b as usize],
            ),
            (true, Lie::WholeFile) => ("200 OK", None, &file[..]),
            (true, Lie::HugeError) => ("503 Service Unavailable", None, &huge[..]),
            (true, Lie::NoContentRange) => {
                ("206 Partial Content", None, &file[a as usize..b as usize])
            }
        };
        let long;
        let (body, sent) = match (component, lie) {
            (true, Lie::ShortBody) => (body, body.len() / 2),
            (true, Lie::LongBody) => {
                long = [body, &vec![7u8; 1 << 20]].concat();
                (&long[..], long.len())
            }
            _ => (body, body.len()),
        };
        let mut out = format!("HTTP/1.1 {status}\r\nETag: \"v1\"\r\nContent-Length: {sent}\r\n");
        if let Some((a, b)) = range {
            out.push_str(&format!("Content-Range: bytes {a}-{}/{len}\r\n", b - 1));
        }
        out.push_str("\r\n");
        if sock.write_all(out.as_bytes()).await.is_err()
            || sock.write_all(&body[..sent]).await.is_err()
        {
            return;
        }
    }
}

/// Serves `path` with `lie` on 127.0.0.1; returns the URL.
async fn serve(path: &Path, lie: Lie) -> String {
    let file = Arc::new(std::fs::read(path).unwrap());
    let f = zt_format::ZtFile::open(path).unwrap();
    let blobs: Vec<u64> = f
        .manifest()
        .objects
        .values()
        .flat_map(|o| o.components.values())
        .map(|c| c.offset)
        .collect();
    let blobs = Arc::new(blobs);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/m.zt", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(answer(sock, Arc::clone(&file), lie, Arc::clone(&blobs)));
        }
    });
    url
}

/// Two 1 MiB layers without digests.
fn undigested(path: &Path) {
    let mut w = zt_format::Writer::new(Vec::new(), "x").unwrap();
    for l in 0..2u8 {
        let data: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i as u8) ^ l.wrapping_mul(37))
            .collect();
        let store = zt_format::StoreOptions {
            digest: None,
            ..Default::default()
        };
        let name = format!("model.layers.{l}.w");
        w.add_dense(
            &name,
            &[data.len() as u64],
            zt_format::DType::U8,
            &data,
            store,
        )
        .unwrap();
    }
    std::fs::write(path, w.finish().unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_range_answers_fail_the_fetch_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.zt");
    undigested(&model);
    let cases = [
        (Lie::OtherBytes, "the server sent bytes"),
        (Lie::WrongLabel, "the server sent bytes"),
        (Lie::ShortBody, "the body ended after"),
        (Lie::LongBody, "got more bytes"),
        (
            Lie::WholeFile,
            "the file changed on the server during the fetch",
        ),
        (Lie::NoContentRange, "a 206 without a valid Content-Range"),
        (Lie::HugeError, "HTTP 503 Service Unavailable: xxxx"),
        (Lie::HugeError, "xxx [cut at 300 characters]"),
        (
            Lie::WholeFileForFooter,
            "asked for bytes=-16, the server sent bytes 0-",
        ),
    ];
    for (lie, says) in cases {
        let url = serve(&model, lie).await;
        let out = dir.path().join("out.zt");
        let o = out.clone();
        let u = url.clone();
        let r = tokio::task::spawn_blocking(move || {
            common::fetch::zt(&["fetch", &u, "-o", o.to_str().unwrap()])
        })
        .await
        .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        eprintln!("{lie:?}: {}", err.get(..300.min(err.len())).unwrap_or(&err));
        assert!(!r.status.success(), "{lie:?}: {err}");
        assert!(err.contains(&url) && err.contains(says), "{lie:?}: {err}");
        assert!(!out.exists(), "{lie:?}: no output");
        assert!(err.len() < 1024, "{lie:?}: a short message");
        let _ = std::fs::remove_file(dir.path().join("out.zt.part"));
        let _ = std::fs::remove_file(dir.path().join("out.zt.part.journal"));
    }
    // The same server answering right: the fetch works (so the cases above
    // failed for their lie, not for the harness).
    let url = serve_right(&model).await;
    let out = dir.path().join("out.zt");
    let o = out.clone();
    let r = tokio::task::spawn_blocking(move || {
        common::fetch::zt(&["fetch", &url, "-o", o.to_str().unwrap()])
    })
    .await
    .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    common::fetch::same_objects(&model, &out, None);
}

/// [`serve`] without a lie: no range is taken for a component's.
async fn serve_right(path: &Path) -> String {
    let file = Arc::new(std::fs::read(path).unwrap());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/m.zt", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            tokio::spawn(answer(
                sock,
                Arc::clone(&file),
                Lie::OtherBytes,
                Arc::default(),
            ));
        }
    });
    url
}
