//! `deploy/docker-compose.s3.yml` run with Compose v1: three replicas of
//! the image and their S3 store (`s3s-fs`), filled through the S3 API, for
//! `tests/cluster.rs` and `benches/replicas.rs`. Everything it makes is
//! removed when the [`Cluster`] is dropped.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use object_store::path::Path as KeyPath;
use object_store::{ObjectStoreExt, PutPayload};

use super::docker::{build_image, docker_ok, Cleanup, BASE};
use super::s3::{uploader_at, KEY, SECRET};
use super::{curl, free_port, repo, Server};

pub const REPLICAS: [&str; 3] = ["r0", "r1", "r2"];
const FILE: &str = "deploy/docker-compose.s3.yml";

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The running cluster: its compose project, what its file is given, and
/// the replicas' host ports.
pub struct Cluster {
    // Dropped first: the containers, networks and images, then the
    // directories they mounted.
    _cleanup: Cleanup,
    pub project: String,
    env: Vec<(String, String)>,
    pub ports: Vec<u16>,
    _data: tempfile::TempDir,
    _cert: tempfile::TempDir,
}

impl Cluster {
    /// Builds the image, starts the store, uploads `files` (key under the
    /// bucket `models`, local path) through the S3 API, starts the three
    /// replicas and waits until each is ready.
    pub fn start(s3s_fs: &Path, files: &[(&str, &Path)]) -> Cluster {
        let pid = std::process::id();
        let tag = format!("zt-test/ztserve:cluster-{pid}");
        let mut cleanup = Cleanup::default();
        build_image(&tag, &mut cleanup);
        let data = tempfile::tempdir().unwrap();
        std::fs::create_dir(data.path().join("models")).unwrap();
        let cert = shared_certificate();
        let ports: Vec<u16> = (0..REPLICAS.len()).map(|_| free_port()).collect();
        let store_port = free_port();
        let mut env: Vec<(String, String)> = vec![
            ("ZTSERVE_IMAGE".into(), tag),
            ("STORE_IMAGE".into(), BASE.into()),
            ("S3S_FS".into(), s3s_fs.display().to_string()),
            ("STORE_DATA".into(), data.path().display().to_string()),
            ("STORE_PORT".into(), store_port.to_string()),
            ("ZT_CERT_DIR".into(), cert.path().display().to_string()),
            ("AWS_ACCESS_KEY_ID".into(), KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET.into()),
        ];
        for (i, p) in ports.iter().enumerate() {
            env.push((format!("R{i}_PORT"), p.to_string()));
        }
        let project = format!("zttest{pid}");
        for s in ["store", "r0", "r1", "r2"] {
            cleanup.containers.push(format!("{project}_{s}_1"));
        }
        for n in ["front", "store"] {
            cleanup.networks.push(format!("{project}_{n}"));
        }
        let cluster = Cluster {
            project,
            env,
            ports,
            _data: data,
            _cert: cert,
            _cleanup: cleanup,
        };
        // The store first, filled through the S3 API; then the replicas.
        cluster.compose(&["up", "-d", "--no-build", "store"]);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let up = uploader_at(&format!("http://127.0.0.1:{store_port}"), "models");
        let uploaded = super::eventually(Duration::from_secs(20), || {
            rt.block_on(async {
                for (key, file) in files {
                    let bytes = std::fs::read(file).unwrap();
                    up.put(&KeyPath::from(*key), PutPayload::from(bytes))
                        .await?;
                }
                Ok::<_, object_store::Error>(())
            })
            .is_ok()
        });
        assert!(uploaded, "uploading to the store failed");
        cluster.compose(&["up", "-d", "--no-build"]);
        for i in 0..REPLICAS.len() {
            cluster.wait_ready(i);
        }
        cluster
    }

    /// `docker-compose ARGS` on this project, which must succeed.
    pub fn compose(&self, args: &[&str]) -> String {
        let out = Command::new("docker-compose")
            .args(["-p", &self.project, "-f", FILE])
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "docker-compose {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The container of `service` (`store`, `r0`...).
    pub fn container(&self, service: &str) -> String {
        format!("{}_{service}_1", self.project)
    }

    pub fn https(&self, i: usize) -> String {
        format!("https://127.0.0.1:{}", self.ports[i])
    }

    pub fn quic(&self, i: usize) -> String {
        format!("quic://127.0.0.1:{}", self.ports[i])
    }

    /// The host's own address on the clients' network (`front`). The
    /// published ports answer there too, forwarded by the kernel (Docker's
    /// DNAT rules), as they are for clients on other machines; Docker's
    /// userland proxy carries only connections to 127.0.0.1.
    pub fn host_address(&self) -> String {
        let network = format!("{}_front", self.project);
        docker_ok(&[
            "network",
            "inspect",
            "-f",
            "{{(index .IPAM.Config 0).Gateway}}",
            &network,
        ])
    }

    /// Replica `i`'s URL through the host address (no userland proxy):
    /// `scheme://ADDRESS:PORT`.
    pub fn forwarded(&self, scheme: &str, i: usize) -> String {
        format!("{scheme}://{}:{}", self.host_address(), self.ports[i])
    }

    /// `/readyz` of replica `i`: its status and body.
    pub fn readyz(&self, i: usize) -> (u16, String) {
        let r = curl(&["-k"], &format!("{}/readyz", self.https(i)));
        (r.status, String::from_utf8_lossy(&r.body).into_owned())
    }

    pub fn wait_ready(&self, i: usize) {
        let ready = super::eventually(Duration::from_secs(40), || self.readyz(i).0 == 200);
        assert!(
            ready,
            "{} not ready: {:?}\n{}",
            REPLICAS[i],
            self.readyz(i),
            docker_ok(&["logs", "--tail", "20", &self.container(REPLICAS[i])])
        );
    }
}

/// Whether docker-compose can be run; where it cannot, SKIPPED unless
/// `ZT_REQUIRE_DOCKER=1`.
pub fn installed() -> bool {
    let there = Command::new("docker-compose")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !there {
        let required = std::env::var("ZT_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "ZT_REQUIRE_DOCKER=1 but docker-compose is missing"
        );
        eprintln!("SKIPPED: no docker-compose");
    }
    there
}

/// A certificate and key for the replicas to share (made by a local
/// daemon as its QUIC certificate), readable by the image's user.
fn shared_certificate() -> tempfile::TempDir {
    let state = tempfile::tempdir().unwrap();
    drop(Server::start_quic(
        &repo().join("models"),
        &["--state-dir", state.path().to_str().unwrap()],
    ));
    let dir = tempfile::tempdir().unwrap();
    chmod(dir.path(), 0o755);
    for (from, to) in [("quic-cert.pem", "cert.pem"), ("quic-key.pem", "key.pem")] {
        std::fs::copy(state.path().join(from), dir.path().join(to)).unwrap();
        chmod(&dir.path().join(to), 0o644);
    }
    dir
}
