//! TLS session resumption (issue 29, item 5): a client's later connection
//! to the daemon resumes the session of an earlier one made under the
//! same trust policy, over ztp/1 and HTTPS, and never one made under
//! another policy; the daemon counts what it resumed
//! (`ztserve_tls_resumed_total`), and resumes sessions for a client we
//! did not write (`openssl s_client -sess_out` / `-sess_in`, TLS 1.3 and
//! 1.2). A CA file replaced under a client is checked again, not resumed;
//! no 0-RTT is offered.

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use common::certs::{have_openssl, self_signed};
use common::quic::{get, metric};
use common::{curl, sample_root, Server};
use sha2::{Digest as _, Sha256};
use zt_client::trust::{client_config, Trust};
use zt_client::{Client, Options};

/// Sessions the daemon resumed over `transport` (`/metrics` read over
/// HTTPS by curl where the daemon serves it, a full handshake of its own).
fn resumed(s: &Server, transport: &str, https: bool) -> u64 {
    let name = format!("ztserve_tls_resumed_total{{transport=\"{transport}\"}}");
    if !https {
        return metric(s, &name);
    }
    let text = curl(&["-k"], &format!("https://{}/metrics", s.addr)).body;
    let text = String::from_utf8(text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no metric {name}"))
        .parse()
        .unwrap()
}

/// Connects to `url` under `trust` and reads its manifest.
fn connect(rt: &tokio::runtime::Runtime, url: &str, trust: Trust) {
    rt.block_on(async {
        // One connection each: the exact counts over ztp/1 rest on it.
        let options = Options {
            trust,
            connections: Some(1),
            ..Options::default()
        };
        let c = Client::connect(url, options).await.unwrap();
        c.manifest().await.unwrap();
    });
}

/// Later connections under one policy resume; one under another policy
/// makes a full handshake (it would skip that policy's own check). Over
/// ztp/1, where a client is one connection, so the counts are exact.
fn resumes_under_one_policy(s: &Server, url: &str, fingerprint: &str) {
    let resumed = || resumed(s, "quic", false);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pinned = || Trust::fingerprint(fingerprint).unwrap();
    connect(&rt, url, pinned());
    assert_eq!(resumed(), 0, "{url}: the first connection");
    connect(&rt, url, pinned());
    assert_eq!(resumed(), 1, "{url}: the second connection");
    connect(&rt, url, Trust::Insecure);
    assert_eq!(resumed(), 1, "{url}: another policy");
    connect(&rt, url, pinned());
    assert_eq!(resumed(), 2, "{url}: the first policy again");
}

#[test]
fn a_later_ztp_connection_resumes_an_earlier_ones_session() {
    let root = sample_root();
    let s = Server::start_quic(root.path(), &[]);
    let (addr, fingerprint) = s.quic.clone().unwrap();
    let url = format!("quic://{addr}/sample.zt");
    resumes_under_one_policy(&s, &url, &fingerprint);
    assert_eq!(resumed(&s, "https", false), 0);
}

#[test]
fn https_sessions_resume_for_our_client_and_for_openssl() {
    if !have_openssl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path(), "server");
    let root = sample_root();
    let s = Server::start_https(root.path(), &cert, &key);
    let der = Command::new("openssl")
        .args(["x509", "-outform", "DER", "-in"])
        .arg(&cert)
        .output()
        .unwrap()
        .stdout;
    let fingerprint: String = Sha256::digest(&der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let url = format!("https://{}/sample.zt", s.addr);
    // An HTTP client may open more than one connection (its later ones
    // resuming its first's session), so the counts are compared: a second
    // client resumes what the first left.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pinned = || Trust::fingerprint(&fingerprint).unwrap();
    connect(&rt, &url, pinned());
    let first = resumed(&s, "https", true);
    connect(&rt, &url, pinned());
    let second = resumed(&s, "https", true);
    assert!(second > first, "{url}: the second client resumed nothing");
    let before = second;

    // openssl resumes over TLS 1.3 (a ticket) and TLS 1.2 (a session ID),
    // each counted once.
    for (n, version) in [(1, "1.3"), (2, "1.2")] {
        let session = dir.path().join(format!("session-{version}.pem"));
        let first = s_client(&s.addr, version, "-sess_out", &session);
        assert!(first.contains(&format!("New, TLSv{version}")), "{first}");
        let second = s_client(&s.addr, version, "-sess_in", &session);
        assert!(
            second.contains(&format!("Reused, TLSv{version}")),
            "{second}"
        );
        assert_eq!(resumed(&s, "https", true), before + n, "TLS {version}");
    }
}

/// A CA file is a policy by its contents: replaced by one that no longer
/// trusts the server, the next connection checks the certificate again
/// and is refused (a session kept under the old contents would skip the
/// check); put back, its sessions resume again.
#[test]
fn a_replaced_ca_file_is_checked_again_not_resumed() {
    if !have_openssl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path(), "server");
    let (other, _) = self_signed(dir.path(), "other");
    let root = sample_root();
    let s = Server::start_quic_https(root.path(), &cert, &key);
    let url = format!("quic://{}/sample.zt", s.quic.as_ref().unwrap().0);
    let ca = dir.path().join("ca.pem");
    let rt = tokio::runtime::Runtime::new().unwrap();
    // ztp/1's count, read over HTTPS: the daemon serves HTTPS beside
    // ztp/1 with this certificate.
    let resumed = || resumed(&s, "quic", true);
    std::fs::copy(&cert, &ca).unwrap();
    connect(&rt, &url, Trust::Ca(ca.clone()));
    connect(&rt, &url, Trust::Ca(ca.clone()));
    assert_eq!(resumed(), 1, "the same CA file resumes");
    std::fs::copy(&other, &ca).unwrap();
    let refused = rt.block_on(async {
        let options = Options {
            trust: Trust::Ca(ca.clone()),
            connections: Some(1),
            ..Options::default()
        };
        Client::connect(&url, options)
            .await?
            .manifest()
            .await
            .map(drop)
    });
    assert!(
        matches!(&refused, Err(zt_client::Error::Tls(_))),
        "a CA file that no longer trusts the server: {refused:?}"
    );
    assert_eq!(resumed(), 1, "nothing resumed under the new contents");
    std::fs::copy(&cert, &ca).unwrap();
    connect(&rt, &url, Trust::Ca(ca.clone()));
    assert_eq!(resumed(), 2, "the first contents' sessions again");
}

/// `openssl s_client` over TLS `version` ("1.3" or "1.2") asking for
/// `/readyz` with its session written to (`-sess_out`) or read from
/// (`-sess_in`) `session`: what it printed.
fn s_client(addr: &str, version: &str, flag: &str, session: &Path) -> String {
    let version = format!("-tls{}", version.replace('.', "_"));
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect", addr, &version, "-ign_eof", flag])
        .arg(session)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let request = "GET /readyz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("200 OK"), "{text}");
    text
}

/// The daemon resumes ztp/1 sessions but offers no 0-RTT: a client
/// willing to send early data cannot (early data may be replayed), and
/// its connection resumes after a full round trip.
#[test]
fn ztp_resumes_without_early_data() {
    let root = sample_root();
    let s = Server::start_quic(root.path(), &[]);
    let (addr, fp) = s.quic.clone().unwrap();
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        zt_client::trust::install_provider();
        let mut tls = client_config(&Trust::fingerprint(&fp).unwrap(), ztp_proto::ALPN).unwrap();
        tls.enable_early_data = true;
        let tls = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
        ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(tls)));
        let first = ep.connect(addr, "localhost").unwrap().await.unwrap();
        // A request answered: the session tickets, sent as the handshake
        // completes, are in (on loopback packets arrive in order; were
        // they not, nothing would resume and the count below would fail).
        let (mut send, mut recv) = first.open_bi().await.unwrap();
        send.write_all(&get(0, "sample.zt")).await.unwrap();
        let mut byte = [0u8; 1];
        recv.read_exact(&mut byte).await.unwrap();
        first.close(0u32.into(), b"");
        let second = ep.connect(addr, "localhost").unwrap();
        let second = match second.into_0rtt() {
            Ok(_) => panic!("the daemon accepted 0-RTT"),
            Err(connecting) => connecting.await.unwrap(),
        };
        second.close(0u32.into(), b"");
        ep.wait_idle().await;
    });
    assert_eq!(
        resumed(&s, "quic", false),
        1,
        "the second connection resumed"
    );
}
