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
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::docker::{
    build_image, docker, docker_ok, engine, fingerprint, published, wait_ready, Cleanup,
};
use common::{curl, repo, zt_bin};

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn the_image_builds_and_serves_both_transports_read_only_as_non_root() {
    if !engine() {
        return;
    }
    let tag = format!("zt-test/ztserve:{}", std::process::id());
    let container = format!("zt-test-{}", std::process::id());
    let mut cleanup = Cleanup::default();
    cleanup.containers.push(container.clone());
    build_image(&tag, &mut cleanup);

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
    wait_ready(&http, &container);

    // Its user, and its root filesystem.
    assert_eq!(docker_ok(&["exec", &container, "id", "-u"]), "10001");
    let write = docker(&["exec", &container, "sh", "-c", "echo x > /written"]);
    assert!(!write.status.success(), "the root filesystem took a write");

    // From outside: a range, then whole fetches over both transports.
    let r = curl(&["-r", "0-7"], &format!("{http}/v1/files/sample.zt"));
    assert_eq!(r.status, 206);
    assert_eq!(r.body, b"ZTEN1000");
    let fingerprint = fingerprint(&container);
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

/// The compose files in `deploy/` are valid for Compose v1 (the only one
/// installable here): `docker-compose config` parses and checks them.
#[test]
fn the_compose_files_validate() {
    if Command::new("docker-compose")
        .arg("version")
        .output()
        .is_err()
    {
        let required = std::env::var("ZT_REQUIRE_DOCKER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "ZT_REQUIRE_DOCKER=1 but docker-compose is missing"
        );
        eprintln!("SKIPPED: no docker-compose");
        return;
    }
    for file in ["deploy/docker-compose.yml", "deploy/docker-compose.s3.yml"] {
        let out = Command::new("docker-compose")
            .args(["-f", file, "config", "-q"])
            .env("AWS_ACCESS_KEY_ID", "key")
            .env("AWS_SECRET_ACCESS_KEY", "secret")
            .current_dir(repo())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
