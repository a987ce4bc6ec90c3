#![allow(unreachable_pub)]
//! The `zt` binary for tests and benchmarks that run it.
//!
//! `zt` belongs to the `zt-cli` package, so cargo does not hand this
//! package its path (`CARGO_BIN_EXE_*` covers a package's own binaries
//! only). It lies beside this executable in `target/PROFILE/`, where
//! `cargo test` of the workspace builds it before any test runs (zt-cli's
//! own integration tests make cargo build its binary). Only when it is
//! missing, or older than the sources it is built from (a developer
//! testing one package after editing the client), is it built here, with
//! the cargo and profile that built this executable; cargo does not hold
//! its lock while tests run. `$ZT_BIN` names another binary instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

/// The crates `zt` is built from.
const SOURCES: [&str; 4] = [
    "crates/zt-cli/src",
    "crates/zt-client/src",
    "crates/zt-format/src",
    "proto/src",
];

/// The newest modification time of any file under `dir`.
fn newest(dir: &Path) -> Option<SystemTime> {
    let mut best = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let t = match e.file_type() {
            Ok(t) if t.is_dir() => newest(&e.path()),
            Ok(_) => e.metadata().and_then(|m| m.modified()).ok(),
            Err(_) => None,
        };
        best = best.max(t);
    }
    best
}

/// The path of a fresh `zt` binary of this executable's profile.
pub fn zt_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(p) = std::env::var_os("ZT_BIN") {
            return PathBuf::from(p);
        }
        let exe = std::env::current_exe().expect("the running executable's path");
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("tests and benchmarks run from target/PROFILE/deps");
        let zt = dir.join(format!("zt{}", std::env::consts::EXE_SUFFIX));
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let built = std::fs::metadata(&zt).and_then(|m| m.modified()).ok();
        let edited = SOURCES.iter().filter_map(|s| newest(&root.join(s))).max();
        if built.is_some() && built >= edited {
            return zt;
        }
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(other) => other,
        };
        let status = Command::new(env!("CARGO"))
            .args([
                "build", "--quiet", "--locked", "-p", "zt-cli", "--bin", "zt",
            ])
            .args(["--profile", profile])
            .current_dir(root)
            .status()
            .expect("running cargo to build zt");
        assert!(status.success(), "cargo build -p zt-cli failed");
        assert!(zt.is_file(), "{} is missing after the build", zt.display());
        zt
    })
    .clone()
}
