//! The daemon run the way its container runs it: an unprivileged user, the
//! models read-only, a working directory it cannot write, and only the
//! state directory writable. It must serve both transports, answer its own
//! health check, write nothing but its certificate, and exit 0 on SIGTERM.
//!
//! `scripts/test.sh` points `ZT_TEST_RELEASE_BIN` at the release build, so
//! this runs the binary the image ships; without it, the test build.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{curl, repo, Server};

const NOBODY: u32 = 65534;

fn binary() -> PathBuf {
    match std::env::var_os("ZT_TEST_RELEASE_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            eprintln!("ZT_TEST_RELEASE_BIN is unset: running the test build of ztserve");
            PathBuf::from(env!("CARGO_BIN_EXE_ztserve"))
        }
    }
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn serves_unprivileged_from_read_only_models_and_stops_cleanly_on_sigterm() {
    let base = tempfile::tempdir().unwrap();
    chmod(base.path(), 0o755);
    let models = base.path().join("models");
    std::fs::create_dir(&models).unwrap();
    std::fs::copy(repo().join("models/sample.zt"), models.join("sample.zt")).unwrap();
    chmod(&models.join("sample.zt"), 0o444);
    chmod(&models, 0o555);
    let cwd = base.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    chmod(&cwd, 0o555);
    let state = base.path().join("state");
    std::fs::create_dir(&state).unwrap();

    let mut cmd = if is_root() {
        // As root, drop to nobody the way the image's USER does.
        std::os::unix::fs::chown(&state, Some(NOBODY), Some(NOBODY)).unwrap();
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid",
            &NOBODY.to_string(),
            "--regid",
            &NOBODY.to_string(),
            "--clear-groups",
            "--",
        ])
        .arg(binary());
        c
    } else {
        Command::new(binary())
    };
    cmd.current_dir(&cwd)
        .arg("--root")
        .arg(&models)
        .arg("--state-dir")
        .arg(&state)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--log-level",
            "info",
            "--shutdown-timeout-secs",
            "5",
        ])
        .env_clear();
    let mut s = Server::from_command(cmd, None);
    assert!(
        s.quic.is_some(),
        "QUIC came up with a generated certificate"
    );

    // It serves: the health endpoints, the manifest and a component.
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
    assert_eq!(curl(&[], &s.url("/readyz")).status, 200);
    let m = curl(&[], &s.url("/v1/files/sample.zt/manifest"));
    assert_eq!(m.status, 200);
    let r = curl(
        &[],
        &s.url("/v1/files/sample.zt/objects/model.norm.weight/data"),
    );
    assert_eq!(r.status, 200);
    assert!(!r.body.is_empty());

    // Its own health check, as the image's HEALTHCHECK runs it.
    let hc = Command::new(binary())
        .arg("healthcheck")
        .arg(s.url("/healthz"))
        .output()
        .unwrap();
    assert!(
        hc.status.success(),
        "{}",
        String::from_utf8_lossy(&hc.stderr)
    );

    // It wrote only its certificate, and only into the state directory.
    let written: Vec<PathBuf> = files(&state);
    assert!(!written.is_empty());
    assert!(written.iter().all(|p| p
        .file_name()
        .unwrap()
        .to_string_lossy()
        .starts_with("quic-")));
    if is_root() {
        use std::os::unix::fs::MetadataExt;
        for p in &written {
            assert_eq!(std::fs::metadata(p).unwrap().uid(), NOBODY, "{p:?}");
        }
    }
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0);
    assert_eq!(files(&models), [models.join("sample.zt")]);

    s.terminate();
    assert_eq!(
        s.wait(Duration::from_secs(15)),
        Some(0),
        "clean exit on SIGTERM"
    );
    let hc = Command::new(binary())
        .arg("healthcheck")
        .arg(s.url("/healthz"))
        .output()
        .unwrap();
    assert_eq!(
        hc.status.code(),
        Some(1),
        "the health check fails once it is gone"
    );
}
