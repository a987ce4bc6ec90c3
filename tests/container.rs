//! The container image, built and run for real: `docker build` of the
//! repository's Dockerfile with the classic builder, its runtime stage as
//! shipped on a Debian base made here (`scripts/docker-base.sh`), fed the
//! host's release binaries through the build-image argument; then run with
//! a read-only root filesystem as its non-root user, TCP and UDP published,
//! and fetched from outside the container over HTTP and ztp/1, then
//! stopped with SIGTERM.
//!
//! Without a Docker engine this says SKIPPED, unless `ZT_REQUIRE_DOCKER=1`
//! (set by `scripts/test.sh` where `docker` exists and it runs as root):
//! then an engine that does not answer fails the test.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{curl, repo, zt_bin};

const BASE: &str = "zt-test/debian:bookworm";

fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("running docker")
}

/// `docker ARGS`, which must succeed; its stdout, trimmed.
fn docker_ok(args: &[&str]) -> String {
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

/// Whether the tests can use an engine; panics where they must and cannot.
fn engine() -> bool {
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

/// Removes the container (and the images this test tagged) however the
/// test ends.
struct Cleanup {
    container: String,
    images: Vec<String>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.container]);
        for i in &self.images {
            let _ = docker(&["rmi", "-f", i]);
        }
        // The build stage's image, which the classic builder leaves behind.
        let _ = docker(&[
            "image",
            "prune",
            "-f",
            "--filter",
            "label=org.ztserve.stage=build",
        ]);
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The host port Docker published for the container's `port`.
fn published(container: &str, port: &str) -> String {
    let line = docker_ok(&["port", container, port]);
    let first = line.lines().next().unwrap_or_default();
    first.rsplit(':').next().unwrap_or_default().to_owned()
}

#[test]
fn the_image_builds_and_serves_both_transports_read_only_as_non_root() {
    if !engine() {
        return;
    }
    let status = Command::new(repo().join("scripts/docker-base.sh"))
        .arg(BASE)
        .status()
        .unwrap();
    assert!(status.success(), "scripts/docker-base.sh failed");
    let tag = format!("zt-test/ztserve:{}", std::process::id());
    let prebuilt = format!("zt-test/prebuilt:{}", std::process::id());
    let container = format!("zt-test-{}", std::process::id());
    let _cleanup = Cleanup {
        container: container.clone(),
        images: vec![tag.clone(), prebuilt.clone()],
    };

    // The build stage's image: the base with the host's binaries in /out.
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
    // The repository's Dockerfile, as shipped, with the base images named.
    let started = Instant::now();
    docker_ok(&[
        "build",
        "-q",
        "--build-arg",
        &format!("BUILD_IMAGE={prebuilt}"),
        "--build-arg",
        &format!("RUNTIME_IMAGE={BASE}"),
        "-t",
        &tag,
        &repo().to_string_lossy(),
    ]);
    eprintln!("docker build: {:.1} s", started.elapsed().as_secs_f64());

    let models = tempfile::tempdir().unwrap();
    chmod(models.path(), 0o755);
    let sample = repo().join("models/sample.zt");
    std::fs::copy(&sample, models.path().join("sample.zt")).unwrap();
    chmod(&models.path().join("sample.zt"), 0o444);
    docker_ok(&[
        "run",
        "-d",
        "--name",
        &container,
        "--read-only",
        "-v",
        &format!("{}:/models:ro", models.path().display()),
        "-p",
        "127.0.0.1::7070/tcp",
        "-p",
        "127.0.0.1::7070/udp",
        &tag,
    ]);
    let http = format!("http://127.0.0.1:{}", published(&container, "7070/tcp"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while curl(&[], &format!("{http}/readyz")).status != 200 {
        assert!(
            Instant::now() < deadline,
            "not ready: {}",
            docker_ok(&["logs", &container])
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Its user, and its root filesystem.
    assert_eq!(docker_ok(&["exec", &container, "id", "-u"]), "10001");
    let write = docker(&["exec", &container, "sh", "-c", "echo x > /written"]);
    assert!(!write.status.success(), "the root filesystem took a write");

    // From outside: a range, then whole fetches over both transports.
    let r = curl(&["-r", "0-7"], &format!("{http}/v1/files/sample.zt"));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"ZTEN1000");
    let logs = String::from_utf8_lossy(&docker(&["logs", &container]).stderr).into_owned()
        + &docker_ok(&["logs", &container]);
    let fingerprint = logs
        .split("\"fingerprint\":\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("the log names the QUIC certificate's fingerprint")
        .to_owned();
    let quic = format!("quic://127.0.0.1:{}", published(&container, "7070/udp"));
    let out = tempfile::tempdir().unwrap();
    for (url, extra) in [
        (format!("{http}/v1/files/sample.zt"), vec![]),
        (
            format!("{quic}/sample.zt"),
            vec!["--cert-fingerprint", fingerprint.as_str()],
        ),
    ] {
        let path = out.path().join("got.zt");
        let _ = std::fs::remove_file(&path);
        let got = Command::new(zt_bin())
            .args(["fetch", &url, "-o"])
            .arg(&path)
            .args(&extra)
            .output()
            .unwrap();
        assert!(
            got.status.success(),
            "zt fetch {url}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
        assert!(
            std::fs::read(&path).unwrap() == std::fs::read(&sample).unwrap(),
            "{url}: the fetched file differs from the served one"
        );
    }

    // SIGTERM: a clean stop, well within Docker's 10 s.
    let started = Instant::now();
    docker_ok(&["stop", &container]);
    let took = started.elapsed();
    assert_eq!(
        docker_ok(&["inspect", "-f", "{{.State.ExitCode}}", &container]),
        "0"
    );
    assert!(took < Duration::from_secs(8), "docker stop took {took:?}");
}
