//! Real S3 servers for the object-storage tests, behind one interface:
//! `s3s-fs` (objects as files in a temporary directory; `scripts/test.sh`
//! builds it into `target/tools`) and moto's S3 server (Python, installed
//! into `.venv` from `tests/interop/requirements.txt`). A test runs
//! against every one there is ([`servers`]), so that no behaviour is
//! tuned to one server. Where they differ, [`Kind`] says how.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;
use ztserve::server::config::StorageConfig;

pub const KEY: &str = "zt-test-key";
pub const SECRET: &str = "zt-test-secret-0123456789";

/// Which S3 server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `s3s-fs`: lists no ETags (the daemon asks each object's with HEAD),
    /// ignores `If-Match` on GET (the daemon compares the ETag answered),
    /// checks signatures, keeps its objects across a restart.
    S3sFs,
    /// moto: lists ETags, answers `If-Match` with 412, accepts any
    /// signature, keeps its objects in memory only (a restart loses them).
    Moto,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::S3sFs, Kind::Moto];

    pub fn name(self) -> &'static str {
        match self {
            Kind::S3sFs => "s3s-fs",
            Kind::Moto => "moto",
        }
    }

    /// The program: `$ZT_S3S_FS` or `target/tools/bin/s3s-fs`;
    /// `$ZT_MOTO_SERVER` or `.venv/bin/moto_server`.
    fn program(self) -> PathBuf {
        let (var, default) = match self {
            Kind::S3sFs => ("ZT_S3S_FS", "target/tools/bin/s3s-fs"),
            Kind::Moto => ("ZT_MOTO_SERVER", ".venv/bin/moto_server"),
        };
        std::env::var_os(var)
            .map(PathBuf::from)
            .unwrap_or_else(|| super::repo().join(default))
    }

    /// Whether a request signed with the wrong secret is refused.
    pub fn checks_signatures(self) -> bool {
        self == Kind::S3sFs
    }

    /// Whether objects outlive [`S3::stop`] and [`S3::resume`].
    pub fn persists(self) -> bool {
        self == Kind::S3sFs
    }
}

/// The program of `kind`, if installed; a missing one is SKIPPED
/// (`None`), unless `ZT_REQUIRE_S3=1`.
pub fn find(kind: Kind) -> Option<PathBuf> {
    let path = kind.program();
    if path.is_file() {
        return Some(path);
    }
    let required = std::env::var("ZT_REQUIRE_S3").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "ZT_REQUIRE_S3=1 but {} is missing",
        path.display()
    );
    eprintln!("SKIPPED with {}: no {}", kind.name(), path.display());
    None
}

/// Every S3 server installed here, with its program.
pub fn servers() -> Vec<(Kind, PathBuf)> {
    Kind::ALL
        .into_iter()
        .filter_map(|k| Some((k, find(k)?)))
        .collect()
}

/// The `s3s-fs` binary, for the tests that need a store that keeps its
/// objects across a restart (or the cluster's image).
pub fn s3s_fs() -> Option<PathBuf> {
    find(Kind::S3sFs)
}

/// A running S3 server with one bucket; killed on drop.
pub struct S3 {
    pub kind: Kind,
    bin: PathBuf,
    bucket: String,
    child: Option<Child>,
    pub endpoint: String,
    pub port: u16,
    /// `s3s-fs`'s objects (unused by moto).
    pub data: tempfile::TempDir,
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.stop();
    }
}

impl S3 {
    /// A server of `kind` with one empty bucket.
    pub fn start(kind: Kind, bin: &Path, bucket: &str) -> S3 {
        let data = tempfile::tempdir().unwrap();
        let port = super::free_port();
        let mut s3 = S3 {
            kind,
            bin: bin.to_owned(),
            bucket: bucket.to_owned(),
            child: None,
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
            data,
        };
        s3.resume();
        s3
    }

    /// Kills the server (`s3s-fs`'s data stays; moto's is gone).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on its port (moto: empty, with its bucket).
    pub fn resume(&mut self) {
        let port = self.port.to_string();
        let mut cmd = Command::new(&self.bin);
        match self.kind {
            Kind::S3sFs => {
                let _ = std::fs::create_dir(self.data.path().join(&self.bucket));
                cmd.args(["--host", "127.0.0.1", "--port", &port])
                    .args(["--access-key", KEY, "--secret-key", SECRET])
                    .arg(self.data.path());
            }
            Kind::Moto => {
                cmd.args(["-H", "127.0.0.1", "-p", &port])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
            }
        }
        self.child = Some(cmd.spawn().unwrap());
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{} did not start",
                self.kind.name()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.kind == Kind::Moto {
            // moto takes any signature, so a plain PUT makes the bucket.
            let r = super::curl(
                &["-X", "PUT"],
                &format!("{}/{}", self.endpoint, self.bucket),
            );
            assert_eq!(r.status, 200, "moto: creating bucket {}", self.bucket);
        }
    }

    pub fn config(&self) -> StorageConfig {
        StorageConfig {
            endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".to_owned()),
            allow_http: Some(true),
            max_retries: 2,
            retry_timeout_secs: 5,
            ..StorageConfig::default()
        }
    }

    /// A client of the store's own, for uploading through the S3 API (name
    /// keys with `KeyPath::parse`: `KeyPath::from` percent-encodes them).
    pub fn uploader(&self, bucket: &str) -> impl ObjectStore {
        uploader_at(&self.endpoint, bucket)
    }
}

/// A client of the S3 server at `endpoint` (with the tests' credentials),
/// for uploading through the S3 API.
pub fn uploader_at(endpoint: &str, bucket: &str) -> impl ObjectStore {
    zt_client::trust::install_provider();
    AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_endpoint(endpoint)
        .with_region("us-east-1")
        .with_allow_http(true)
        .with_access_key_id(KEY)
        .with_secret_access_key(SECRET)
        .build()
        .unwrap()
}

pub fn credentials() -> Vec<(String, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID".to_owned(), KEY.to_owned()),
        ("AWS_SECRET_ACCESS_KEY".to_owned(), SECRET.to_owned()),
    ]
}
