//! Docker for the container tests: whether an engine answers (or must),
//! the image built from the repository's Dockerfile on a base made here,
//! and cleanup however a test ends.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use super::{curl, repo};

/// The Debian base `scripts/docker-base.sh` makes.
pub const BASE: &str = "zt-test/debian:bookworm";

pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("running docker")
}

/// `docker ARGS`, which must succeed; its stdout, trimmed.
pub fn docker_ok(args: &[&str]) -> String {
    let out = docker(args);
    assert!(
        out.status.success(),
        "docker {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Whether the tests can use an engine. Where none answers they say
/// SKIPPED, unless `ZT_REQUIRE_DOCKER=1`: then they fail.
pub fn engine() -> bool {
    let required = std::env::var("ZT_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
    let answered = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !answered {
        assert!(
            !required,
            "ZT_REQUIRE_DOCKER=1 but the Docker engine does not answer"
        );
        eprintln!("SKIPPED: no Docker engine answers");
    }
    answered
}

/// The host's release builds of `ztserve` and `zt`, which the image runs.
fn release_binaries() -> (PathBuf, PathBuf) {
    let ztserve = std::env::var_os("ZT_TEST_RELEASE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/release/ztserve"));
    let zt = ztserve.with_file_name("zt");
    assert!(
        ztserve.is_file() && zt.is_file(),
        "{} and {} are needed: cargo build --release --bin ztserve --bin zt",
        ztserve.display(),
        zt.display()
    );
    (ztserve, zt)
}

/// Removes what a test made (containers, networks, image tags) however
/// it ends, and the build stage's image the classic builder leaves.
#[derive(Default)]
pub struct Cleanup {
    pub containers: Vec<String>,
    pub networks: Vec<String>,
    pub images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = docker(&["rm", "-f", c]);
        }
        for n in &self.networks {
            let _ = docker(&["network", "rm", n]);
        }
        for i in &self.images {
            let _ = docker(&["rmi", "-f", i]);
        }
        let _ = docker(&[
            "image",
            "prune",
            "-f",
            "--filter",
            "label=org.ztserve.stage=build",
        ]);
    }
}

/// Builds the repository's Dockerfile as shipped, tagged `tag`: the base
/// made by `scripts/docker-base.sh`, and the host's release binaries fed
/// to the build stage through `BUILD_IMAGE`. Both tags go on `cleanup`.
pub fn build_image(tag: &str, cleanup: &mut Cleanup) {
    let status = Command::new(repo().join("scripts/docker-base.sh"))
        .arg(BASE)
        .status()
        .unwrap();
    assert!(status.success(), "scripts/docker-base.sh failed");
    let prebuilt = format!("{tag}-bin");
    cleanup.images.extend([tag.to_owned(), prebuilt.clone()]);
    let (ztserve, zt) = release_binaries();
    let ctx = tempfile::tempdir().unwrap();
    std::fs::copy(&ztserve, ctx.path().join("ztserve")).unwrap();
    std::fs::copy(&zt, ctx.path().join("zt")).unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        format!("FROM {BASE}\nCOPY ztserve zt /out/\n"),
    )
    .unwrap();
    docker_ok(&[
        "build",
        "-q",
        "-t",
        &prebuilt,
        &ctx.path().to_string_lossy(),
    ]);
    let started = Instant::now();
    docker_ok(&[
        "build",
        "-q",
        "--build-arg",
        &format!("BUILD_IMAGE={prebuilt}"),
        "--build-arg",
        &format!("RUNTIME_IMAGE={BASE}"),
        "-t",
        tag,
        &repo().to_string_lossy(),
    ]);
    eprintln!("docker build: {:.1} s", started.elapsed().as_secs_f64());
}

/// The host port Docker published for the container's `port`.
pub fn published(container: &str, port: &str) -> String {
    let line = docker_ok(&["port", container, port]);
    let first = line.lines().next().unwrap_or_default();
    first.rsplit(':').next().unwrap_or_default().to_owned()
}

/// Waits until `http` answers `/readyz` with 200.
pub fn wait_ready(http: &str, container: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while curl(&[], &format!("{http}/readyz")).status != 200 {
        assert!(
            Instant::now() < deadline,
            "{container} not ready: {}",
            docker_ok(&["logs", container])
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The QUIC certificate fingerprint a container's log names.
pub fn fingerprint(container: &str) -> String {
    let out = docker(&["logs", container]);
    let logs =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    logs.split("\"fingerprint\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the log names the QUIC certificate's fingerprint")
        .to_owned()
}
