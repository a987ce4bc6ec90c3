//! Bearer tokens and HTTPS, end to end with curl.

mod common;

use std::time::Duration;

use common::{curl, eventually, sample_root, Server};

#[test]
fn bearer_tokens_guard_everything_but_health() {
    let root = sample_root();
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# team tokens\nfirst-token\n").unwrap();
    let s = Server::start(root.path(), &["--token-file", tokens.to_str().unwrap()]);
    let url = s.url("/v1/files/sample.zt");
    let r = curl(&["-r", "0-7"], &url);
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), Some("Bearer"));
    assert!(!r.body.starts_with(b"ZTEN"), "nothing but the 401");
    assert_eq!(
        curl(&["-H", "Authorization: Bearer wrong"], &url).status,
        401
    );
    let ok = curl(
        &["-r", "0-7", "-H", "Authorization: Bearer first-token"],
        &url,
    );
    assert_eq!((ok.status, &ok.body[..]), (206, &b"ZTEN1000"[..]));
    for open in ["/healthz", "/readyz", "/metrics"] {
        assert_eq!(curl(&[], &s.url(open)).status, 200, "{open}");
    }
    assert_eq!(curl(&[], &s.url("/v1/files")).status, 401);
    // Rotation: the file is re-read when it changes.
    std::fs::write(&tokens, "second-token\n").unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        curl(&["-H", "Authorization: Bearer second-token"], &url).status == 200
    }));
    assert_eq!(
        curl(&["-H", "Authorization: Bearer first-token"], &url).status,
        401
    );
    drop(s);

    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "root = \"/unused\"\n[auth]\ntoken_file = {:?}\nprotect_metrics = true\n",
            tokens
        ),
    )
    .unwrap();
    let s = Server::start(root.path(), &["--config", cfg.to_str().unwrap()]);
    assert_eq!(curl(&[], &s.url("/metrics")).status, 401);
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
}

fn self_signed(dir: &std::path::Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let cert = rcgen::generate_simple_self_signed(vec![
        "localhost".into(),
        "127.0.0.1".into(),
        name.into(),
    ])
    .unwrap();
    let c = dir.join(format!("{name}.crt"));
    let k = dir.join(format!("{name}.key"));
    std::fs::write(&c, cert.cert.pem()).unwrap();
    std::fs::write(&k, cert.signing_key.serialize_pem()).unwrap();
    (c, k)
}

#[test]
fn https_with_certificate_reload() {
    let root = sample_root();
    let dir = tempfile::tempdir().unwrap();
    let (c1, k1) = self_signed(dir.path(), "one");
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    std::fs::copy(&c1, &cert).unwrap();
    std::fs::copy(&k1, &key).unwrap();
    let s = Server::start_https(root.path(), &cert, &key);
    let url = format!("https://{}/v1/files/sample.zt", s.addr);
    let r = curl(&["--cacert", c1.to_str().unwrap(), "-r", "0-7"], &url);
    assert_eq!((r.status, &r.body[..]), (206, &b"ZTEN1000"[..]));
    // Plain HTTP on the TLS port does not get tensor bytes.
    let plain = curl(
        &["-r", "0-7"],
        &format!("http://{}/v1/files/sample.zt", s.addr),
    );
    assert_ne!(plain.body, b"ZTEN1000");
    // A new certificate is picked up without a restart.
    let (c2, k2) = self_signed(dir.path(), "two");
    std::fs::copy(&k2, &key).unwrap();
    std::fs::copy(&c2, &cert).unwrap();
    assert!(eventually(Duration::from_secs(10), || {
        curl(&["--cacert", c2.to_str().unwrap()], &url).status == 200
    }));
    assert_ne!(curl(&["--cacert", c1.to_str().unwrap()], &url).status, 200);
}

#[test]
fn check_config_and_default_config() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ztserve"))
        .arg("--print-default-config")
        .output()
        .unwrap();
    let shipped = std::fs::read_to_string(common::repo().join("config/ztserve.toml")).unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), shipped);
    let check = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ztserve"))
            .args(args)
            .env_remove("RUST_LOG")
            .output()
            .unwrap()
    };
    let ok = check(&[
        "--check-config",
        common::repo().join("config/ztserve.toml").to_str().unwrap(),
    ]);
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "root = \"/m\"\n[limits]\nmax_rangez = 1\n").unwrap();
    let out = check(&["--check-config", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_rangez"));
    // An invalid configuration is refused at startup, naming the key.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ztserve"))
        .args(["--root", "/tmp", "--listen", "127.0.0.1:0"])
        .env("ZTSERVE_LIMITS_MAX_RANGES", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("limits.max_ranges"));
}

#[test]
fn dual_stack_listening() {
    let root = sample_root();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_ztserve"))
        .args([
            "--root",
            root.path().to_str().unwrap(),
            "--listen",
            "[::]:0",
            "--log-format",
            "json",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut port = None;
    for line in stderr.lines().map_while(Result::ok) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
            if let Some(a) = v["fields"]["http"].as_str() {
                port = a.rsplit(':').next().map(str::to_owned);
                break;
            }
        }
    }
    let port = port.unwrap();
    assert_eq!(
        curl(&[], &format!("http://127.0.0.1:{port}/healthz")).status,
        200
    );
    assert_eq!(
        curl(&[], &format!("http://[::1]:{port}/healthz")).status,
        200
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A request for data past the connection cap waits for a slot; a probe
/// does not (issue 28: `limits.ops_connections`). The connection holding
/// the slot has sent nothing: once it has been silent for a second, the
/// waiting request closes it and takes its slot.
#[test]
fn connections_beyond_the_cap_wait_for_a_slot() {
    use std::io::Read;
    let root = sample_root();
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(&cfg, "root = \"/unused\"\n[limits]\nmax_connections = 1\n").unwrap();
    let s = Server::start(root.path(), &["--config", cfg.to_str().unwrap()]);
    let mut hog = std::net::TcpStream::connect(&s.addr).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let data = s.url("/v1/files/sample.zt/manifest");
    let waiting = curl(&["--max-time", "0.3"], &data);
    assert_eq!(
        waiting.status, 0,
        "a second connection's request must wait while the only slot is taken"
    );
    assert_eq!(curl(&["--max-time", "1"], &s.url("/healthz")).status, 200);
    assert_eq!(curl(&["--max-time", "10"], &data).status, 200);
    hog.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(
        hog.read(&mut [0u8; 16]).unwrap(),
        0,
        "the silent hog is closed"
    );
    let metrics = String::from_utf8(curl(&[], &s.url("/metrics")).body).unwrap();
    assert!(
        metrics.contains("ztserve_http_connections_closed_total{reason=\"slots\"} 1"),
        "{metrics}"
    );
}

/// A root of more files than the open-file limit leaves room for: the
/// daemon stays up, serves files up to the limit less its reserve, lists
/// the rest as unavailable naming the limit, and keeps descriptors for
/// connections and its own files. It exited before (its certificate could
/// not be written: "Too many open files"), the initial scan having taken
/// every descriptor.
#[test]
fn a_root_of_more_files_than_descriptors_is_served_within_the_limit() {
    let root = tempfile::tempdir().unwrap();
    let tiny = br#"{"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}"#;
    let mut file = (tiny.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(tiny);
    file.extend_from_slice(&1f32.to_le_bytes());
    for i in 0..1_100 {
        std::fs::write(root.path().join(format!("m{i:04}.safetensors")), &file).unwrap();
    }
    let mut limited = std::process::Command::new("prlimit");
    limited.arg("--nofile=1024:1024");
    let s = Server::start_quic_via(limited, root.path(), &[]);
    assert!(s.quic.is_some(), "ztp/1 is up: its certificate was written");
    let listing = curl(&[], &s.url("/v1/files"));
    assert_eq!(listing.status, 200);
    let v: serde_json::Value = serde_json::from_slice(&listing.body).unwrap();
    let (served, unavailable) = (
        v["files"].as_array().unwrap(),
        v["unavailable"].as_array().unwrap(),
    );
    // 1,024 less a reserve of 256.
    assert_eq!(served.len(), 768, "{v}");
    assert_eq!(unavailable.len(), 1_100 - 768);
    let reason = unavailable[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("RLIMIT_NOFILE") && reason.contains("[open-file-limit]"),
        "{reason}"
    );
    // Connections are still accepted, and a served file is read.
    let name = served[0]["path"].as_str().unwrap();
    for _ in 0..20 {
        assert_eq!(curl(&[], &s.url(&format!("/{name}"))).status, 200);
    }
}
