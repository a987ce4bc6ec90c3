//! Section 1c: the CPU a whole-file fetch costs, client and daemon
//! together. On a machine whose cores both ends share (loopback), a
//! transfer's time is bounded below by its CPU divided by the cores, so
//! a transport that needs twice the CPU per byte cannot be as fast as
//! one that needs half, whatever it overlaps; these rows say how much
//! each way costs in the same run as the times above.

use std::path::Path;

use anyhow::{Context, Result};

use crate::{median, peers, Bench};

/// Clock ticks a second in `/proc/PID/stat` (`USER_HZ`, which Linux
/// fixes at 100 for user space whatever the kernel's own tick).
const TICKS: f64 = 100.0;

/// CPU seconds from `/proc/PID/stat`: the process's own (user + system)
/// and its waited-for children's.
fn cpu(pid: &str) -> Result<(f64, f64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The fields after the command name, which may hold spaces: the
    // process state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let after = text.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let field = |n: usize| -> Result<f64> {
        fields
            .get(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .with_context(|| format!("/proc/{pid}/stat: no field {n}"))
    };
    Ok((
        (field(14)? + field(15)?) / TICKS,
        (field(16)? + field(17)?) / TICKS,
    ))
}

/// One fetch's wall time, its client's CPU and the daemon's, in seconds.
struct Cost {
    wall: f64,
    client: f64,
    daemon: f64,
}

impl Bench {
    /// Section 1c: wall time and CPU of the default `zt fetch` over HTTP
    /// and over ztp/1, and of curl from the same daemon, by turns.
    pub(crate) fn cpu_per_fetch(&self, daemon: u32) -> Result<()> {
        let file = "layers-crc32c.zt";
        let daemon = daemon.to_string();
        let out: &Path = &self.out;
        // (what, URL, whether curl fetches it rather than `zt fetch`)
        let variants = [
            (
                "curl <- ztserve (raw file, nothing checked)",
                self.zhttp(file),
                true,
            ),
            (
                "zt fetch http <- ztserve, crc32c checked",
                self.zhttp(file),
                false,
            ),
            (
                "zt fetch quic <- ztserve, crc32c checked",
                self.zquic(file),
                false,
            ),
        ];
        let mut costs: Vec<Vec<Cost>> = variants.iter().map(|_| Vec::new()).collect();
        for _ in 0..self.n {
            for ((_, url, curl), row) in variants.iter().zip(costs.iter_mut()) {
                // Both clear the last round's output (and sync) untimed.
                let mut cmd = match curl {
                    true => {
                        peers::remove_output(out);
                        peers::curl(url, out)
                    }
                    false => peers::zt_fetch(url, out),
                };
                let (_, children0) = cpu("self")?;
                let (daemon0, _) = cpu(&daemon)?;
                let wall = peers::timed(&mut cmd)?;
                let (_, children1) = cpu("self")?;
                let (daemon1, _) = cpu(&daemon)?;
                row.push(Cost {
                    wall,
                    client: children1 - children0,
                    daemon: daemon1 - daemon0,
                });
            }
        }
        println!(
            "# 1c. CPU per fetch of the {:.2} GB model to disk, client + daemon \
             (medians; cores = CPU / wall; the machine has {})",
            self.size as f64 / 1e9,
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let total = |c: &Cost| c.client + c.daemon;
        let http_total = median(costs[1].iter().map(total).collect());
        for ((what, ..), row) in variants.iter().zip(&costs) {
            let m = |f: &dyn Fn(&Cost) -> f64| median(row.iter().map(f).collect());
            let all = m(&total);
            println!(
                "{what:<46} {:>6.3} s wall  client {:>5.2} + daemon {:>5.2} = {:>5.2} CPU s \
                 ({:>4.2} cores)  {:>5.3}x zt fetch http's CPU",
                m(&|c| c.wall),
                m(&|c| c.client),
                m(&|c| c.daemon),
                all,
                m(&|c| total(c) / c.wall),
                all / http_total
            );
        }
        Ok(())
    }
}
