//! Certificates made by the `openssl` CLI the way its users make them,
//! for the tests of HTTPS and of what a client trusts.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether the `openssl` CLI is here; the tests say SKIPPED without it.
pub fn have_openssl() -> bool {
    let ok = Command::new("openssl")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: the openssl command is not installed (apt-get install openssl)");
    }
    ok
}

pub fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "openssl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `openssl req -x509 -newkey rsa:2048 -nodes -keyout NAME.key -out
/// NAME.pem -days 1 -subj /CN=localhost -addext subjectAltName=IP:127.0.0.1`
/// (with `basicConstraints=critical,CA:TRUE` said outright, as Debian's
/// default configuration adds it, so the test does not rest on the
/// machine's openssl.cnf): the certificate and its key.
pub fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
        ],
    );
    (dir.join(cert), dir.join(key))
}
