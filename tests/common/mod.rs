//! Helpers for tests that run the real `ztserve` binary and talk to it with curl.
#![allow(dead_code, unreachable_pub)]

pub mod cdp;
pub mod certs;
pub mod compose;
pub mod docker;
pub mod fetch;
pub mod netns;
pub mod nginx;
pub mod packs;
pub mod quic;
pub mod relay;
pub mod s3;
mod zt_bin;

pub use zt_bin::zt_bin;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running daemon, killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: String,
    /// The QUIC address and certificate fingerprint, when QUIC is on.
    pub quic: Option<(String, String)>,
    pub logs: mpsc::Receiver<String>,
    /// The log lines read while waiting for the addresses.
    pub startup_logs: Vec<String>,
    _state: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts `ztserve --root ROOT --listen 127.0.0.1:0 --no-quic` plus
    /// `args`, and waits for the line that names the bound address.
    pub fn start(root: &Path, args: &[&str]) -> Server {
        Server::spawn(root, args, false)
    }

    /// Like [`Server::start`], serving HTTPS with `cert` and `key`.
    pub fn start_https(root: &Path, cert: &Path, key: &Path) -> Server {
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        Server::start(root, &["--tls-cert", cert, "--tls-key", key])
    }

    /// Like [`Server::start_https`], with ztp/1 on with the same
    /// certificate, and a temporary state directory.
    pub fn start_quic_https(root: &Path, cert: &Path, key: &Path) -> Server {
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        Server::start_quic(root, &["--tls-cert", cert, "--tls-key", key])
    }

    /// Like [`Server::start`], with QUIC on and a temporary state directory.
    pub fn start_quic(root: &Path, args: &[&str]) -> Server {
        Server::spawn(root, args, true)
    }

    /// Like [`Server::start_quic`], with `env` set for the daemon (the
    /// store's credentials, for an object-storage root).
    pub fn start_quic_env(root: &Path, args: &[&str], env: &[(String, String)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ztserve"));
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        Server::spawn_via(cmd, root, args, true)
    }

    /// Like [`Server::start_quic`], run through `wrapper` (for example
    /// `ip netns exec NAME`), which gets the binary and its arguments.
    pub fn start_quic_via(mut wrapper: Command, root: &Path, args: &[&str]) -> Server {
        wrapper.arg(env!("CARGO_BIN_EXE_ztserve"));
        Server::spawn_via(wrapper, root, args, true)
    }

    fn spawn(root: &Path, args: &[&str], quic: bool) -> Server {
        Server::spawn_via(
            Command::new(env!("CARGO_BIN_EXE_ztserve")),
            root,
            args,
            quic,
        )
    }

    fn spawn_via(mut cmd: Command, root: &Path, args: &[&str], quic: bool) -> Server {
        // A state directory of its own (certificate, digest store), unless
        // the test names one.
        let state = (!args.contains(&"--state-dir")).then(|| tempfile::tempdir().unwrap());
        if let Some(d) = &state {
            cmd.arg("--state-dir").arg(d.path());
        }
        if !quic {
            cmd.arg("--no-quic");
        }
        cmd.arg("--root")
            .arg(root)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--log-format",
                "json",
                "--log-level",
                "info",
            ])
            .args(args)
            .env_remove("RUST_LOG");
        // The daemon refuses unknown ZTSERVE_* variables: none may leak in
        // from the environment the tests run in.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("ZTSERVE_") {
                cmd.env_remove(k);
            }
        }
        Server::from_command(cmd, state)
    }

    /// Runs `cmd` (a ztserve with `--log-format json` and an info log
    /// level, possibly behind a wrapper such as `setpriv`) and waits for the
    /// lines that name its addresses.
    pub fn from_command(mut cmd: Command, state: Option<tempfile::TempDir>) -> Server {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ztserve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut quic_addr = None;
        let mut startup_logs = Vec::new();
        let addr = loop {
            let line = rx
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .expect("ztserve did not report its address");
            startup_logs.push(line.clone());
            let v: serde_json::Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(_) => continue,
            };
            let f = &v["fields"];
            if f["message"] == "listening (ztp/1)" {
                quic_addr = Some((
                    f["quic"].as_str().unwrap().to_owned(),
                    f["fingerprint"].as_str().unwrap().to_owned(),
                ));
            }
            if f["message"] == "listening" {
                break f["http"]
                    .as_str()
                    .or(f["https"].as_str())
                    .unwrap()
                    .to_owned();
            }
        };
        Server {
            child,
            addr,
            quic: quic_addr,
            logs: rx,
            startup_logs,
            _state: state,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }

    /// Waits for the process to exit and returns its code.
    pub fn wait(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What curl saw.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Runs curl with `args` and the URL; returns status, headers and body.
pub fn curl(args: &[&str], url: &str) -> Reply {
    let dir = tempfile::tempdir().unwrap();
    let h = dir.path().join("h");
    let b = dir.path().join("b");
    let out = Command::new("curl")
        .args(["-s", "-g", "--path-as-is", "-D"])
        .arg(&h)
        .arg("-o")
        .arg(&b)
        .args(["-w", "%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl must be installed");
    let status: u16 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    let raw = std::fs::read_to_string(&h).unwrap_or_default();
    // Keep only the last response's headers (after a 100 or redirects).
    let block = raw
        .trim_end()
        .rsplit("\r\n\r\n")
        .next()
        .unwrap_or("")
        .to_owned();
    let headers = block
        .lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: std::fs::read(&b).unwrap_or_default(),
    }
}

/// Polls `f` until it returns true or `limit` passes.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// Reports a test that cannot run here (it needs root, a network
/// namespace, a tmpfs) as SKIPPED, so it passes on a developer's machine;
/// with `ZT_REQUIRE_PRIVILEGED=1` (set by `.ci/run` when it runs as root)
/// it fails instead, so a run that should cover it cannot pass by skipping.
pub fn skip_unprivileged(why: &str) {
    if std::env::var_os("ZT_REQUIRE_PRIVILEGED").is_some_and(|v| v == "1") {
        panic!("ZT_REQUIRE_PRIVILEGED=1, but this test cannot run: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

/// A TCP port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A temporary root holding the sample model and one invalid file.
pub fn sample_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        repo().join("models/sample.zt"),
        dir.path().join("sample.zt"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::copy(
        repo().join("tests/reject/overlap.zt"),
        dir.path().join("sub/broken.zt"),
    )
    .unwrap();
    dir
}

/// Writes `dir/c.toml`: `root` (overridden by `--root`) and `body`; returns
/// its path, for `--config`.
pub fn config_file(dir: &Path, body: &str) -> String {
    let cfg = dir.join("c.toml");
    std::fs::write(&cfg, format!("root = \"/unused\"\n{body}")).unwrap();
    cfg.display().to_string()
}

/// Writes `path`: one 1 MiB component `model.layers.{l}.w` per layer, in
/// the order given, each with its own bytes.
pub fn layered_model(path: &Path, layers: impl IntoIterator<Item = u32>) {
    let mut w = zt_format::Writer::new(Vec::new(), "layers").unwrap();
    for l in layers {
        let data: Vec<u8> = (0..1u32 << 20)
            .map(|i| (i ^ l).wrapping_mul(2654435761).to_be_bytes()[0])
            .collect();
        w.add_dense(
            &format!("model.layers.{l}.w"),
            &[data.len() as u64],
            zt_format::DType::U8,
            &data,
            Default::default(),
        )
        .unwrap();
    }
    std::fs::write(path, w.finish().unwrap()).unwrap();
}

/// The metric families docs/http-api.md documents: name, type, and
/// whether only an object-storage root exports it (*store*).
pub fn documented_metrics() -> Vec<(String, String, bool)> {
    let doc = std::fs::read_to_string(repo().join("docs/http-api.md")).unwrap();
    let section = doc
        .split("\n## Metrics\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/http-api.md has a Metrics section");
    section
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let store = cells.get(4)?.starts_with("*store*");
            Some((name.to_owned(), (*cells.get(2)?).to_owned(), store))
        })
        .collect()
}

/// The metric families a `/metrics` text declares, by name, with their type.
pub fn exported_metrics(text: &str) -> std::collections::BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("# TYPE ")?.split(' ');
            Some((w.next()?.to_owned(), w.next()?.to_owned()))
        })
        .collect()
}

/// The daemon's peak resident memory so far (`VmHWM`), in KiB.
pub fn peak_rss_kib(s: &Server) -> u64 {
    status_kib(s, "VmHWM:")
}

/// The daemon's resident memory now (`VmRSS`), in KiB.
pub fn rss_kib(s: &Server) -> u64 {
    status_kib(s, "VmRSS:")
}

/// The daemon's anonymous resident memory now (`RssAnon`: what it
/// allocated, not the pages of its binary it has run), in KiB.
pub fn anon_rss_kib(s: &Server) -> u64 {
    status_kib(s, "RssAnon:")
}

fn status_kib(s: &Server, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// A safetensors file of a `big`-byte tensor that sorts (and is hashed)
/// first, `a.big`, and a 4 KiB one, `b.small`, whose digests the daemon
/// computes; returns the small one's bytes.
pub fn cold_safetensors(path: &Path, big: usize) -> Vec<u8> {
    use safetensors::tensor::{Dtype, TensorView};
    let large: Vec<u8> = (0..big).map(|i| (i % 253) as u8).collect();
    let small: Vec<u8> = (0..4096).map(|i| (i * 7 % 251) as u8).collect();
    let views = vec![
        (
            "a.big",
            TensorView::new(Dtype::U8, vec![big], &large).unwrap(),
        ),
        (
            "b.small",
            TensorView::new(Dtype::U8, vec![4096], &small).unwrap(),
        ),
    ];
    let meta: Option<std::collections::HashMap<String, String>> = None;
    safetensors::serialize_to_file(views, meta, path).unwrap();
    small
}
