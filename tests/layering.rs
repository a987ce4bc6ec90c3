//! The workspace's layering, checked on the real dependency graph
//! (`cargo tree -e normal`): a loader never compiles the server, the `zt`
//! tool never compiles the server, and the format and protocol crates stay
//! free of sockets and runtimes.

use std::collections::BTreeSet;
use std::process::Command;

/// Every crate in `package`'s normal (non-dev, non-build) dependency
/// tree, as `name vVERSION`.
fn tree(package: &str) -> BTreeSet<String> {
    let out = Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .args(["-p", package, "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("running cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split(" (").next().unwrap_or(l).to_owned())
        .collect()
}

fn assert_free_of(package: &str, banned: &[&str]) {
    let deps = tree(package);
    assert!(
        deps.iter().any(|d| d.starts_with(&format!("{package} v"))),
        "cargo tree listed {deps:?}"
    );
    // `name` bans every version, `name v0.7` one line of versions.
    let found: Vec<&String> = deps
        .iter()
        .filter(|d| {
            banned
                .iter()
                .any(|b| d.starts_with(&format!("{b} ")) || d.starts_with(&format!("{b}.")))
        })
        .collect();
    assert!(
        found.is_empty(),
        "{package} depends on {found:?}; `cargo tree -p {package} -e normal -i CRATE` shows the path"
    );
}

/// The server's crates. reqwest (the client's HTTP transport) brings
/// tower-http 0.6 for its redirect policy and tokio-rustls for its TLS;
/// the server's tower-http is 0.7, and that one must stay out.
const SERVER: &[&str] = &[
    "ztserve",
    "axum",
    "tower-http v0.7",
    "notify",
    "rcgen",
    "tracing-subscriber",
    "toml",
    "rlimit",
];
const COMMAND_LINE: &[&str] = &["clap", "indicatif", "zt-cli"];

#[test]
fn the_client_compiles_no_server_or_command_line_crate() {
    let banned: Vec<&str> = SERVER.iter().chain(COMMAND_LINE).copied().collect();
    assert_free_of("zt-client", &banned);
}

#[test]
fn the_zt_tool_compiles_no_server_crate() {
    assert_free_of("zt-cli", SERVER);
}

#[test]
fn the_format_and_protocol_crates_have_no_runtime_or_sockets() {
    let io = [
        "tokio",
        "quinn",
        "reqwest",
        "socket2",
        "rustls",
        "ztserve",
        "zt-client",
    ];
    assert_free_of("zt-format", &io);
    assert_free_of("ztp-proto", &io);
    // Ingest is offline work on files: no runtime, no network, no server.
    let mut ingest: Vec<&str> = io.to_vec();
    ingest.extend(COMMAND_LINE);
    assert_free_of("zt-ingest", &ingest);
}
