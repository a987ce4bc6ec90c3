//! The processes a run compares: ztserve and timed command-line clients
//! (curl, `zt fetch`); nginx comes from `tests/common/nginx.rs`.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// A child process killed when dropped.
pub(crate) struct Proc(Child);

impl Proc {
    /// Takes `child`, to be killed when dropped.
    #[allow(dead_code)]
    pub(crate) fn new(child: Child) -> Proc {
        Proc(child)
    }

    /// The process id (the load bench reads its peak RSS, the fetch
    /// bench its CPU).
    #[allow(dead_code)]
    pub(crate) fn id(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A TCP port nothing listens on now (UDP on the same number is free too
/// on a quiet machine).
pub(crate) fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for(port: u16, what: &str) -> Result<()> {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if start.elapsed() > Duration::from_secs(20) {
            bail!("{what} did not listen on 127.0.0.1:{port}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// Waits until the daemon on `port` has no background hashing left (at
/// startup it checks every file's digests and computes those of files
/// without their own, at `[digests] rate_mib_s`), so that no measured
/// round shares the CPU with it: its `/metrics` gauges of files to hash
/// and components to check read 0, and the count of components checked
/// stays the same, twice, more than the verifier's idle pause (500 ms)
/// apart (the gauges are refreshed once per verifier pass).
#[allow(dead_code)]
pub(crate) fn wait_quiet(port: u16) -> Result<()> {
    let url = format!("http://127.0.0.1:{port}/metrics");
    let start = Instant::now();
    let mut last: Option<f64> = None;
    loop {
        let reading = quiet_reading(&url)?;
        match (reading, last) {
            (Ok(checked), Some(before)) if checked == before => return Ok(()),
            (Ok(checked), _) => last = Some(checked),
            (Err(busy), _) => {
                last = None;
                if start.elapsed() > Duration::from_secs(300) {
                    bail!("ztserve on {port} still hashing after 300 s: {busy}");
                }
            }
        }
        std::thread::sleep(Duration::from_millis(600));
    }
}

/// One reading of `url` (a daemon's `/metrics`): the count of components
/// checked when nothing is left to hash or check, else what is left.
fn quiet_reading(url: &str) -> Result<std::result::Result<f64, String>> {
    let out = Command::new("curl")
        .args(["-sf", "-m", "10", url])
        .output()
        .context("running curl (needed on PATH)")?;
    anyhow::ensure!(out.status.success(), "{url}: no answer ({})", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let gauge = |name: &str| -> Result<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .with_context(|| format!("{url}: no {name}"))
    };
    let pending = gauge("ztserve_digest_pending")?;
    let unverified = gauge("ztserve_digest_unverified")?;
    let checked = gauge("ztserve_digest_verified_total")?;
    Ok(match pending == 0.0 && unverified == 0.0 {
        true => Ok(checked),
        false => Err(format!(
            "{pending} files to hash, {unverified} components to check"
        )),
    })
}

/// ztserve on `port` (TCP and UDP), serving `root`.
pub(crate) fn ztserve(root: &Path, port: u16, state: &Path) -> Result<Proc> {
    ztserve_env(root, port, state, &[])
}

/// [`ztserve`] with extra `ZTSERVE_*` settings.
pub(crate) fn ztserve_env(
    root: &Path,
    port: u16,
    state: &Path,
    env: &[(&str, &str)],
) -> Result<Proc> {
    // `$ZT_DAEMON_BIN` runs another build (an A/B comparison in one run).
    let bin =
        std::env::var_os("ZT_DAEMON_BIN").unwrap_or_else(|| env!("CARGO_BIN_EXE_ztserve").into());
    let child = Command::new(bin)
        .envs(env.iter().copied())
        .arg("--root")
        .arg(root)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--state-dir")
        .arg(state)
        .args(["--log-level", "warn"])
        .stdout(Stdio::null())
        .spawn()
        .context("starting ztserve")?;
    let p = Proc(child);
    wait_for(port, "ztserve")?;
    Ok(p)
}

/// Runs `cmd` to completion and returns its wall time in seconds.
pub(crate) fn timed(cmd: &mut Command) -> Result<f64> {
    let start = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    let secs = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(secs)
}

/// Runs `cmd` like [`timed`], and also returns its peak resident set in
/// KiB (`VmHWM`, read every 5 ms while it runs: growth in its last 5 ms
/// may be missed).
pub(crate) fn timed_rss(cmd: &mut Command) -> Result<(f64, u64)> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {cmd:?}"))?;
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak = 0u64;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if let Ok(text) = std::fs::read_to_string(&status_path) {
            let hwm = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok());
            peak = peak.max(hwm.unwrap_or(0));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let secs = start.elapsed().as_secs_f64();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        bail!("{cmd:?} failed: {}", err.trim());
    }
    Ok((secs, peak))
}

/// `curl -o out url`.
pub(crate) fn curl(url: &str, out: &Path) -> Command {
    let mut c = Command::new("curl");
    c.args(["-sSf", "-o"]).arg(out).arg(url);
    c
}

/// `zt fetch url -o out --insecure`, with no leftovers from an earlier run
/// and the component cache off (`ZTSERVE_CACHE=off`, which cargo sets for
/// `cargo bench` in this repository, but not for the bench's binary run
/// by hand): every round fetches from the daemon, not from an earlier
/// round's cached components (`benches/fetch_cache.sh` times the cache).
pub(crate) fn zt_fetch(url: &str, out: &Path) -> Command {
    remove_output(out);
    let mut c = Command::new(crate::zt_bin::zt_bin());
    c.env("ZTSERVE_CACHE", "off");
    c.args(["fetch", url, "--insecure", "-o"]).arg(out);
    c
}

/// Removes `out` and its `.part` and journal, then flushes the file
/// system (untimed), so no run pays for the previous run's writeback.
pub(crate) fn remove_output(out: &Path) {
    let part = PathBuf::from(format!("{}.part", out.display()));
    let journal = PathBuf::from(format!("{}.part.journal", out.display()));
    for p in [out.to_path_buf(), part, journal] {
        let _ = std::fs::remove_file(p);
    }
    let _ = Command::new("sync").status();
}
