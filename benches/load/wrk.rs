//! 256 HTTP connections through `wrk` with a Lua request mix
//! (`mix.lua`), and what its report says.

use std::process::Command;

use anyhow::{bail, Context, Result};

/// What one wrk run reported.
pub(crate) struct Report {
    pub requests: u64,
    pub per_sec: f64,
    pub bytes_per_sec: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Socket errors plus non-2xx responses.
    pub errors: u64,
}

/// Where the mix's requests go.
pub(crate) struct Target<'a> {
    pub base: String,
    pub file_path: String,
    /// ztserve's manifest path; None: a tail range of the raw file (nginx).
    pub manifest_path: Option<String>,
    pub tail: u64,
    pub size: u64,
    pub name: &'a str,
}

/// Runs wrk for `secs` seconds with `connections` connections.
pub(crate) fn run(t: &Target<'_>, connections: usize, secs: u64) -> Result<Report> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/load/mix.lua");
    let mut cmd = Command::new("wrk");
    cmd.args(["-t2", &format!("-c{connections}"), &format!("-d{secs}s")])
        .args(["--latency", "--timeout", "10s", "-s", script])
        .arg(&t.base)
        .env("ZT_FILE", &t.file_path)
        .env("ZT_TAIL", t.tail.to_string())
        .env("ZT_SIZE", t.size.to_string());
    match &t.manifest_path {
        Some(m) => cmd.env("ZT_MANIFEST", m),
        None => cmd.env_remove("ZT_MANIFEST"),
    };
    let out = cmd.output().context("running wrk (apt install wrk)")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "wrk against {} failed: {text}{}",
            t.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse(&text).with_context(|| format!("reading wrk's report:\n{text}"))
}

/// Milliseconds in a wrk duration such as `812.00us`, `1.23ms`, `2.01s`.
fn millis(s: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = s.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1e3)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|v| v * scale)
}

/// Bytes in a wrk size such as `80.12MB`.
fn bytes(s: &str) -> Option<f64> {
    let units = [
        ("GB", 1u64 << 30),
        ("MB", 1 << 20),
        ("KB", 1 << 10),
        ("B", 1),
    ];
    units.iter().find_map(|(u, scale)| {
        s.strip_suffix(u)
            .and_then(|n| n.parse::<f64>().ok())
            .map(|v| v * *scale as f64)
    })
}

fn parse(text: &str) -> Option<Report> {
    let mut r = Report {
        requests: 0,
        per_sec: 0.0,
        bytes_per_sec: 0.0,
        p50_ms: f64::NAN,
        p99_ms: f64::NAN,
        errors: 0,
    };
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => r.p50_ms = millis(v)?,
            ["99%", v] => r.p99_ms = millis(v)?,
            [n, "requests", "in", ..] => r.requests = n.parse().ok()?,
            ["Requests/sec:", v] => r.per_sec = v.parse().ok()?,
            ["Transfer/sec:", v] => r.bytes_per_sec = bytes(v)?,
            ["Non-2xx", "or", "3xx", "responses:", n] => r.errors += n.parse::<u64>().ok()?,
            ["Socket", "errors:", rest @ ..] => {
                r.errors += rest
                    .iter()
                    .filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok())
                    .sum::<u64>();
            }
            _ => {}
        }
    }
    (r.requests > 0).then_some(r)
}
