#![allow(unreachable_pub)]
//! The `zt` binary for tests and benchmarks that run it.
//!
//! `zt` belongs to the `zt-cli` package, so cargo does not hand this
//! package its path (`CARGO_BIN_EXE_*` covers a package's own binaries
//! only). It is built on first use with the cargo and profile that built
//! this executable (a no-op when it is fresh; cargo does not hold its lock
//! while tests run) and found beside it in `target/PROFILE/`. `$ZT_BIN`
//! names another binary instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

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
        let profile = match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") => "dev",
            Some(other) => other,
            None => "dev",
        };
        let status = Command::new(env!("CARGO"))
            .args([
                "build", "--quiet", "--locked", "-p", "zt-cli", "--bin", "zt",
            ])
            .args(["--profile", profile])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("running cargo to build zt");
        assert!(status.success(), "cargo build -p zt-cli failed");
        let zt = dir.join(format!("zt{}", std::env::consts::EXE_SUFFIX));
        assert!(zt.is_file(), "{} is missing after the build", zt.display());
        zt
    })
    .clone()
}
