//! A real S3 server for the object-storage tests: `s3s-fs` over a
//! temporary directory (`scripts/test.sh` builds it into `target/tools`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3Builder;
use object_store::ObjectStore;
use ztserve::server::config::StorageConfig;

pub const KEY: &str = "zt-test-key";
pub const SECRET: &str = "zt-test-secret-0123456789";

/// The `s3s-fs` binary: `$ZT_S3S_FS` or `target/tools/bin/s3s-fs`; `None`
/// (the test says SKIPPED) where it is missing, unless `ZT_REQUIRE_S3=1`.
pub fn s3s_fs() -> Option<PathBuf> {
    let path = std::env::var_os("ZT_S3S_FS")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo().join("target/tools/bin/s3s-fs"));
    if path.is_file() {
        return Some(path);
    }
    let required = std::env::var("ZT_REQUIRE_S3").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "ZT_REQUIRE_S3=1 but {} is missing",
        path.display()
    );
    eprintln!("SKIPPED: no s3s-fs at {}", path.display());
    None
}

/// A running S3 server over a temporary directory; killed on drop.
pub struct S3 {
    bin: PathBuf,
    child: Option<Child>,
    pub endpoint: String,
    pub port: u16,
    pub data: tempfile::TempDir,
}

impl Drop for S3 {
    fn drop(&mut self) {
        self.stop();
    }
}

impl S3 {
    /// A server with one empty bucket.
    pub fn start(bin: &Path, bucket: &str) -> S3 {
        let data = tempfile::tempdir().unwrap();
        std::fs::create_dir(data.path().join(bucket)).unwrap();
        let port = super::free_port();
        let mut s3 = S3 {
            bin: bin.to_owned(),
            child: None,
            endpoint: format!("http://127.0.0.1:{port}"),
            port,
            data,
        };
        s3.resume();
        s3
    }

    /// Kills the server (the data stays).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on its port over its data.
    pub fn resume(&mut self) {
        let child = Command::new(&self.bin)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", KEY, "--secret-key", SECRET])
            .arg(self.data.path())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "s3s-fs did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn config(&self) -> StorageConfig {
        StorageConfig {
            endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".to_owned()),
            allow_http: true,
            max_retries: 2,
            retry_timeout_secs: 5,
            ..StorageConfig::default()
        }
    }

    /// A client of the store's own, for uploading through the S3 API.
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
