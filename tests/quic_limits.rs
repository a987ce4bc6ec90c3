//! Hostile ztp/1 clients against the server's bounds, with a bare quinn
//! client: requests counted from their `get` however long they take to
//! answer, a `cancel` honoured before its request's manifest went out, and
//! clients that hold a connection without reading its control stream or
//! without allowing a component stream, closed as `stalled`.

mod common;

use std::time::Duration;

use common::quic::{close_code_within, get, metric, raw_connect};
use common::{eventually, Server};
use quinn::{RecvStream, VarInt};
use safetensors::tensor::TensorView;
use ztp_proto::{frame, Cancel, Code, Deframer, Message};

const INDEX: &str = "m/model.safetensors.index.json";

/// `root/m/`: a checkpoint of two safetensors shards (8 tensors of
/// 1 MiB) and its index: a path whose requests are answered beside the
/// control loop (the daemon links the shards for each).
fn sharded(root: &std::path::Path) -> usize {
    let dir = root.join("m");
    std::fs::create_dir(&dir).unwrap();
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let mut weight_map = serde_json::Map::new();
    for n in 1..=2 {
        let shard = format!("model-0000{n}-of-00002.safetensors");
        let views: Vec<(String, TensorView<'_>)> = (0..4)
            .map(|i| {
                let name = format!("model.layers.{}.weight", (n - 1) * 4 + i);
                weight_map.insert(name.clone(), serde_json::json!(shard));
                let v = TensorView::new(safetensors::Dtype::U8, vec![1 << 20], &data).unwrap();
                (name, v)
            })
            .collect();
        safetensors::serialize_to_file(views, None, &dir.join(&shard)).unwrap();
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(
        dir.join("model.safetensors.index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    8
}

fn start(root: &std::path::Path, quic: &str) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::config_file(dir.path(), &format!("[quic]\n{quic}"));
    (Server::start_quic(root, &["--config", &cfg]), dir)
}

/// A small window per stream (a request's streams cannot finish unread)
/// in a wide one for the connection (the control stream always has room).
fn narrow() -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.stream_receive_window(VarInt::from_u32(64 * 1024))
        .receive_window(VarInt::from_u32(64 << 20))
        .keep_alive_interval(Some(Duration::from_millis(500)));
    t
}

/// The next control message (the stream must stay open).
async fn next(recv: &mut RecvStream, d: &mut Deframer) -> Message {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if let Some(m) = d.next_message().unwrap() {
            return m;
        }
        let n = recv
            .read(&mut buf)
            .await
            .unwrap()
            .expect("control stream open");
        d.push(&buf[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_count_against_the_limit_from_their_get() {
    let root = tempfile::tempdir().unwrap();
    sharded(root.path());
    let (s, _cfg) = start(root.path(), "max_requests = 4\n");
    let (addr, fp) = s.quic.clone().unwrap();
    let conn = raw_connect(&addr, &fp, Some(narrow())).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    // Forty at once, each answered beside the control loop: only four
    // may be in flight, the rest are refused at once.
    let burst: Vec<u8> = (1..=40).flat_map(|id| get(id, INDEX)).collect();
    send.write_all(&burst).await.unwrap();
    let mut d = Deframer::new(1 << 30);
    let (mut manifests, mut refused) = (0, 0);
    while manifests + refused < 40 {
        match tokio::time::timeout(Duration::from_secs(20), next(&mut recv, &mut d))
            .await
            .expect("every get answered")
        {
            Message::Manifest(_) => manifests += 1,
            Message::Error(e) if e.code == Code::TooManyRequests => refused += 1,
            Message::Error(e) => panic!("unexpected {e:?}"),
            _ => {}
        }
    }
    assert_eq!((manifests, refused), (4, 36));
    conn.close(VarInt::from_u32(0), b"");
    assert!(eventually(Duration::from_secs(15), || {
        metric(&s, "ztserve_quic_connections") == 0 && metric(&s, "ztserve_quic_streams") == 0
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_before_the_manifest_is_honoured() {
    let root = tempfile::tempdir().unwrap();
    let components = sharded(root.path());
    let (s, _cfg) = start(root.path(), "");
    let (addr, fp) = s.quic.clone().unwrap();
    let conn = raw_connect(&addr, &fp, None).await;
    // Whatever streams open are read, so that a request the cancel
    // missed still ends (with every component sent).
    let reader = {
        let conn = conn.clone();
        tokio::spawn(async move {
            while let Ok(mut s) = conn.accept_uni().await {
                tokio::spawn(async move { s.read_to_end(usize::MAX).await });
            }
        })
    };
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    let mut both = get(1, INDEX);
    let cancel = Message::Cancel(Cancel {
        id: 1,
        object: None,
        component: None,
    });
    both.extend(frame(&cancel).unwrap());
    send.write_all(&both).await.unwrap();
    let mut d = Deframer::new(1 << 30);
    let done = loop {
        match tokio::time::timeout(Duration::from_secs(20), next(&mut recv, &mut d))
            .await
            .expect("the request answered")
        {
            Message::Done(done) => break done,
            Message::Error(e) => panic!("unexpected {e:?}"),
            _ => {}
        }
    };
    assert_eq!(
        (done.sent, done.cancelled),
        (0, components as u64),
        "cancelled before any stream opened"
    );
    reader.abort();
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_reads_nothing_of_its_control_stream_is_closed_as_stalled() {
    let root = tempfile::tempdir().unwrap();
    sharded(root.path());
    let (s, _cfg) = start(root.path(), "stall_timeout_secs = 2\n");
    let (addr, fp) = s.quic.clone().unwrap();
    let mut t = narrow();
    t.stream_receive_window(VarInt::from_u32(4096));
    let conn = raw_connect(&addr, &fp, Some(t)).await;
    let (mut send, recv) = conn.open_bi().await.unwrap();
    // Thousands of answers (each an error for a missing file) to a client
    // that never reads them; its keep-alives keep the connection from
    // going idle.
    let gets: Vec<u8> = (1..=4000)
        .flat_map(|id| get(id, &format!("nope-{id}.zt")))
        .collect();
    let writer = tokio::spawn(async move {
        let _ = send.write_all(&gets).await;
        send
    });
    assert_eq!(
        close_code_within(&conn, Duration::from_secs(30)).await,
        Some(u64::from(Code::Stalled.value())),
        "closed as stalled"
    );
    drop((recv, writer));
    assert!(eventually(Duration::from_secs(15), || {
        metric(&s, "ztserve_quic_connections") == 0
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_allows_no_component_stream_is_closed_as_stalled() {
    let root = tempfile::tempdir().unwrap();
    sharded(root.path());
    let (s, _cfg) = start(root.path(), "stall_timeout_secs = 2\n");
    let (addr, fp) = s.quic.clone().unwrap();
    let mut t = narrow();
    t.max_concurrent_uni_streams(VarInt::from_u32(0));
    let conn = raw_connect(&addr, &fp, Some(t)).await;
    let (mut send, mut recv) = conn.open_bi().await.unwrap();
    // Two requests, each waiting for a stream the other has not opened.
    let mut two = get(1, INDEX);
    two.extend(get(2, INDEX));
    send.write_all(&two).await.unwrap();
    let mut d = Deframer::new(1 << 30);
    for _ in 0..2 {
        assert!(matches!(
            next(&mut recv, &mut d).await,
            Message::Manifest(_)
        ));
    }
    assert_eq!(
        close_code_within(&conn, Duration::from_secs(30)).await,
        Some(u64::from(Code::Stalled.value())),
        "closed as stalled"
    );
    assert!(eventually(Duration::from_secs(15), || {
        metric(&s, "ztserve_quic_connections") == 0 && metric(&s, "ztserve_quic_streams") == 0
    }));
}
