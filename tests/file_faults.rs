//! Files changed under the daemon while `zt fetch` reads them, over both
//! transports, and a client whose disk fills up.
//!
//! Over QUIC one request pins the version it started on: a file replaced
//! by rename or deleted mid-transfer still arrives whole (the daemon keeps
//! the old version open). Over HTTP every range is its own request, pinned
//! to the first one's ETag: the fetch fails saying the file changed (or is
//! gone), and a rerun fetches the new version. A file truncated in place
//! fails the fetch on both, naming the file. Nothing that looks complete is
//! ever left, and the daemon keeps serving.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::fetch::{big_model, fault_mid_fetch, same_objects, zt};
use common::relay::Relay;
use common::{curl, Server};

#[derive(Clone, Copy, Debug)]
enum Transport {
    Http,
    Quic,
}

/// A daemon over `root`, a 40 MB/s relay in front of it (so a 120 MiB
/// fetch takes seconds and a fault lands mid-transfer), and `zt fetch`'s
/// URL and extra arguments for it.
fn behind_relay(root: &Path, t: Transport) -> (Server, Relay, String, Vec<String>) {
    let s = Server::start_quic(root, &[]);
    match t {
        Transport::Http => {
            let relay = Relay::tcp(s.addr.parse().unwrap(), 40_000_000);
            let url = format!("http://{}/v1/files/big.zt", relay.addr);
            (s, relay, url, vec!["--connections".into(), "2".into()])
        }
        Transport::Quic => {
            let (q, fp) = s.quic.clone().unwrap();
            let relay = Relay::udp(q.parse().unwrap(), 40_000_000);
            let url = format!("quic://{}/big.zt", relay.addr);
            (s, relay, url, vec!["--cert-fingerprint".into(), fp])
        }
    }
}

/// Runs a fetch of `big.zt` and applies `fault` to the served file once
/// a few components have arrived. Returns the original file's copy, the
/// output path, the report and the daemon.
fn fetch_with_fault(
    t: Transport,
    fault: impl FnOnce(&Path),
) -> (tempfile::TempDir, std::path::PathBuf, Output, Server) {
    let root = tempfile::tempdir().unwrap();
    let big = big_model(root.path());
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&big, dir.path().join("orig.zt")).unwrap();
    let out = dir.path().join("big.zt");
    let (s, _relay, url, args) = behind_relay(root.path(), t);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = fault_mid_fetch(&url, &out, &args, || fault(&big));
    // The daemon is still up and serving.
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
    std::mem::forget(root); // the daemon may still log about it; removed with /tmp
    (dir, out, r, s)
}

/// The fetch (of `t`: a transport or a URL) failed naming the file and
/// `why`, leaving no output.
fn assert_failed(t: impl std::fmt::Debug, out: &Path, r: &Output, why: &str) {
    let err = String::from_utf8_lossy(&r.stderr);
    eprintln!("{t:?} reported: {err}");
    assert!(!r.status.success(), "{t:?}: {err}");
    assert!(
        err.contains("big.zt"),
        "{t:?}: the error names the file: {err}"
    );
    assert!(err.contains(why), "{t:?}: the error says {why:?}: {err}");
    assert!(!out.exists(), "{t:?}: no output that looks complete");
}

fn assert_whole_old_version(dir: &Path, out: &Path, r: &Output) {
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(zt(&["verify", out.to_str().unwrap()]).status.success());
    same_objects(&dir.join("orig.zt"), out, None);
}

fn replace_by_rename(big: &Path) {
    let mut w = zt_format::Writer::new(Vec::new(), "other").unwrap();
    w.add_dense("x", &[8], zt_format::DType::U8, &[7; 8], Default::default())
        .unwrap();
    let tmp = big.with_file_name(".swap.tmp");
    std::fs::write(&tmp, w.finish().unwrap()).unwrap();
    std::fs::rename(&tmp, big).unwrap();
}

#[test]
fn a_file_replaced_by_rename_mid_fetch() {
    let (dir, out, r, _s) = fetch_with_fault(Transport::Quic, replace_by_rename);
    assert_whole_old_version(dir.path(), &out, &r);

    let (_dir, out, r, s) = fetch_with_fault(Transport::Http, replace_by_rename);
    assert_failed(
        Transport::Http,
        &out,
        &r,
        "changed on the server during the fetch",
    );
    // A rerun starts over on the new version (the journal names the old ETag).
    let r = zt(&[
        "fetch",
        &s.url("/v1/files/big.zt"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let fetched = zt_format::ZtFile::open(&out).unwrap();
    assert_eq!(
        fetched.manifest().objects.keys().collect::<Vec<_>>(),
        ["x"],
        "the new version"
    );
}

#[test]
fn a_file_deleted_mid_fetch() {
    let delete = |big: &Path| std::fs::remove_file(big).unwrap();
    let (dir, out, r, _s) = fetch_with_fault(Transport::Quic, delete);
    assert_whole_old_version(dir.path(), &out, &r);

    let (_dir, out, r, _s) = fetch_with_fault(Transport::Http, delete);
    assert_failed(Transport::Http, &out, &r, "404");
}

#[test]
fn a_file_truncated_mid_fetch_fails_the_fetch_and_leaves_nothing_complete() {
    for t in [Transport::Http, Transport::Quic] {
        let (_dir, out, r, s) = fetch_with_fault(t, |big| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(big)
                .unwrap()
                .set_len(1000)
                .unwrap();
        });
        assert_failed(t, &out, &r, "");
        assert_eq!(curl(&[], &s.url("/v1/files")).status, 200);
    }
}

/// A tmpfs of `mib` MiB mounted on a new directory, unmounted on drop.
/// None where this process may not mount (not root, or no mount namespace).
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_full_disk_fails_the_fetch_clearly_and_leaves_nothing_complete() {
    let Some(disk) = SmallDisk::mount(48) else {
        common::skip_unprivileged("cannot mount a tmpfs here (needs root)");
        return;
    };
    let root = tempfile::tempdir().unwrap();
    big_model(root.path());
    let s = Server::start_quic(root.path(), &[]);
    let (q, fp) = s.quic.clone().unwrap();
    let http = s.url("/v1/files/big.zt");
    let quic = format!("quic://{q}/big.zt");
    for (url, extra) in [
        (&http, vec![]),
        (&quic, vec!["--cert-fingerprint", fp.as_str()]),
    ] {
        let out = disk.dir.path().join("big.zt");
        let mut args = vec!["fetch", url.as_str(), "-o", out.to_str().unwrap()];
        args.extend(extra);
        let r = zt(&args);
        assert_failed(url, &out, &r, "No space left on device");
        // Clear the part file and journal for the next transport.
        for e in std::fs::read_dir(disk.dir.path()).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
    }
    assert_eq!(curl(&[], &s.url("/healthz")).status, 200);
}
