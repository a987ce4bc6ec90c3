//! `--ca FILE` and what a refused certificate says (issue 26, item 5),
//! over ztp/1 and HTTPS, with certificates made by the `openssl` CLI the
//! way its users make them: `openssl req -x509` marks a self-signed
//! certificate `CA:TRUE` under Debian's default configuration, which a
//! chain check alone refuses as a server's own ("CaUsedAsEndEntity"),
//! while curl `--cacert` and httpx accept it because it is in the file.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::certs::{have_openssl, openssl, self_signed};
use common::fetch::zt;
use common::{sample_root, Server};
use zt_client::trust::Trust;
use zt_client::{Client, Options};

/// A server certificate for `san` issued by the CA `ca` (`ca.pem`,
/// `ca.key` in `dir`): the certificate and its key.
fn issued(dir: &Path, name: &str, san: &str) -> (PathBuf, PathBuf) {
    let (cert, key, csr, ext) = (
        format!("{name}.pem"),
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.ext"),
    );
    std::fs::write(
        dir.join(&ext),
        format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "req",
            "-new",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=server",
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "1",
            "-extfile",
            &ext,
        ],
    );
    (dir.join(cert), dir.join(key))
}

/// The sample model's URL over each transport.
fn urls(s: &Server) -> [String; 2] {
    let quic = &s.quic.as_ref().expect("QUIC is on").0;
    [
        format!("quic://{quic}/sample.zt"),
        format!("https://{}/sample.zt", s.addr),
    ]
}

fn fetch(url: &str, ca: &Path, out: &Path) -> Output {
    zt(&[
        "fetch",
        url,
        "--ca",
        ca.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ])
}

/// A fetch that must fail because of the certificate: exit 4, and a
/// message that names `problem`, the certificate's fingerprint and every
/// remedy.
fn refused(url: &str, ca: &Path, out: &Path, problem: &str, fingerprint: &str) {
    let r = fetch(url, ca, out);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(4), "{url}: {err}");
    for want in [
        "is not trusted",
        problem,
        fingerprint,
        "--ca FILE",
        "--cert-fingerprint",
        "--insecure",
    ] {
        assert!(err.contains(want), "{url}: {want:?} missing from: {err}");
    }
    assert!(!out.exists(), "{url}: nothing is written");
}

/// The library's own error for the same refusal is [`zt_client::Error::Tls`].
fn library_refuses(url: &str, ca: &Path, problem: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let options = Options {
        trust: Trust::Ca(ca.to_owned()),
        ..Options::default()
    };
    let e = rt
        .block_on(async {
            let c = Client::connect(url, options).await?;
            c.manifest().await
        })
        .unwrap_err();
    assert!(
        matches!(&e, zt_client::Error::Tls(m) if m.contains(problem)),
        "{url}: {e:?}"
    );
    assert!(!e.is_transient(), "{url}: no retry trusts it");
}

#[test]
fn a_self_signed_certificate_in_the_ca_file_is_trusted() {
    if !have_openssl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let served = self_signed(dir.path(), "server");
    let (other, _) = self_signed(dir.path(), "other");
    let root = sample_root();
    let s = Server::start_quic_https(root.path(), &served.0, &served.1);
    let fingerprint = s.quic.clone().unwrap().1;
    // What the issue reports: Debian's openssl marks it a CA.
    let text = Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(&served.0)
        .output()
        .unwrap();
    let is_ca = String::from_utf8_lossy(&text.stdout).contains("CA:TRUE");
    eprintln!("the certificate is CA:TRUE: {is_ca}");
    for (i, url) in urls(&s).iter().enumerate() {
        let out = dir.path().join(format!("ok{i}.zt"));
        let r = fetch(url, &served.0, &out);
        assert!(
            r.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        common::fetch::same_objects(&root.path().join("sample.zt"), &out, None);
        // Another self-signed certificate's file trusts nothing of this server.
        let problem = if is_ca {
            "CA used as end entity"
        } else {
            "unknown issuer"
        };
        let out = dir.path().join(format!("refused{i}.zt"));
        refused(url, &other, &out, problem, &fingerprint);
        library_refuses(url, &other, problem);
    }
}

#[test]
fn a_chain_to_a_ca_in_the_file_is_checked_as_usual() {
    if !have_openssl() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, _) = self_signed(dir.path(), "ca");
    let root = sample_root();
    // Issued for the address the client connects to: trusted through the CA.
    let good = issued(dir.path(), "good", "IP:127.0.0.1");
    let s = Server::start_quic_https(root.path(), &good.0, &good.1);
    for (i, url) in urls(&s).iter().enumerate() {
        let out = dir.path().join(format!("chain{i}.zt"));
        let r = fetch(url, &ca, &out);
        assert!(
            r.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
    }
    drop(s);
    // Issued for another name: refused as a name mismatch.
    let elsewhere = issued(dir.path(), "elsewhere", "DNS:elsewhere.example");
    let s = Server::start_quic_https(root.path(), &elsewhere.0, &elsewhere.1);
    let fingerprint = s.quic.clone().unwrap().1;
    for (i, url) in urls(&s).iter().enumerate() {
        let out = dir.path().join(format!("name{i}.zt"));
        refused(url, &ca, &out, "name mismatch", &fingerprint);
        let r = fetch(url, &ca, &out);
        assert!(String::from_utf8_lossy(&r.stderr).contains("--resolve"));
    }
}

/// A pinned fingerprint that is not the server's says so, with the one
/// the server presented.
#[test]
fn a_wrong_fingerprint_names_both() {
    let root = sample_root();
    let s = Server::start_quic(root.path(), &[]);
    let (quic, fingerprint) = s.quic.clone().unwrap();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("x.zt");
    let wrong = "ab".repeat(32);
    let r = zt(&[
        "fetch",
        &format!("quic://{quic}/sample.zt"),
        "--cert-fingerprint",
        &wrong,
        "-o",
        target.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(4), "{err}");
    assert!(
        err.contains(&format!("not the pinned {wrong}")) && err.contains(&fingerprint),
        "{err}"
    );
}
