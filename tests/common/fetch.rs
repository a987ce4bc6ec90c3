//! Helpers for tests that run `zt fetch` against the daemon.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use zt_format::ZtFile;

/// Runs `zt ARGS` to completion.
pub fn zt(args: &[&str]) -> Output {
    Command::new(super::zt_bin()).args(args).output().unwrap()
}

/// `zt fetch URL -o OUT EXTRA...`, which must succeed.
pub fn fetch_ok(url: &str, out: &Path, extra: &[&str]) {
    let mut args = vec!["fetch", url, "-o", out.to_str().unwrap()];
    args.extend(extra);
    let r = zt(&args);
    assert!(
        r.status.success(),
        "{url}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
}

/// Asserts that every object in `b` is in `a` with the same component
/// bytes, and (with `only`) that `b` holds only names with that prefix.
pub fn same_objects(a: &Path, b: &Path, only: Option<&str>) {
    let (fa, fb) = (ZtFile::open(a).unwrap(), ZtFile::open(b).unwrap());
    for (name, obj) in &fb.manifest().objects {
        assert!(
            only.is_none_or(|p| name.starts_with(p)),
            "{name} was not selected"
        );
        for role in obj.components.keys() {
            assert_eq!(
                &fa.read(name, role).unwrap()[..],
                &fb.read(name, role).unwrap()[..],
                "{name}/{role}"
            );
        }
    }
}

/// 120 components of 1 MiB in `dir/big.zt`.
pub fn big_model(dir: &Path) -> std::path::PathBuf {
    let big = dir.join("big.zt");
    super::layered_model(&big, 0..120);
    big
}

/// Waits for `child` at most `limit`, killing it (and failing) past that.
pub fn wait_bounded(mut child: std::process::Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("zt fetch still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Starts `zt fetch URL -o OUT ARGS`, waits until the journal lists a few
/// components, runs `fault`, and returns what the fetch reported.
pub fn fault_mid_fetch(url: &str, out: &Path, args: &[&str], fault: impl FnOnce()) -> Output {
    let journal = out.with_file_name("big.zt.part.journal");
    let child = Command::new(super::zt_bin())
        .args(["fetch", url, "-o", out.to_str().unwrap()])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&journal)
        .map(|j| j.lines().count())
        .unwrap_or(0)
        < 5
    {
        assert!(Instant::now() < deadline, "fetch made no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    fault();
    wait_bounded(child, Duration::from_secs(60))
}
