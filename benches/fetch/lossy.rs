//! Section 5: whole-file fetches over a lossy loopback. The bench runs
//! itself again inside a network namespace whose loopback drops 0, 1 and
//! 5 % of packets (the iptables `statistic` match); that inner run starts
//! its own nginx and ztserve there and times curl against `zt fetch` over
//! both transports, at the same loss.

use anyhow::{bail, Result};

use super::netns::Netns;
use super::{peers, rounds, row, Bench};

/// The file the lossy rows fetch (smaller than the main model: a lossy
/// fetch is slow).
pub(crate) const FILE: &str = "lossy-crc32c.zt";

/// Loss rates measured, in percent.
const LOSSES: [f64; 3] = [0.0, 1.0, 5.0];

/// Runs the inner bench once per loss rate inside a fresh namespace.
pub(crate) fn outer(n: usize) -> Result<()> {
    println!(
        "# 5. {FILE} over a lossy loopback (network namespace, iptables statistic); \
         ratio = speed against curl from nginx at the same loss"
    );
    let Some(ns) = Netns::create("bench") else {
        println!("# skipped: needs root, ip and iptables");
        return Ok(());
    };
    for loss in LOSSES {
        ns.set_loss(loss);
        let status = ns
            .command(std::env::current_exe()?)
            .arg(n.to_string())
            .env("ZT_BENCH_LOSS", loss.to_string())
            .status()?;
        if !status.success() {
            bail!("the run at {loss}% loss failed");
        }
        println!("#   packets dropped so far: {}", ns.dropped());
    }
    Ok(())
}

impl Bench {
    /// The rows at one loss rate (run inside the namespace).
    pub(crate) fn lossy(&self, loss: &str) -> Result<()> {
        let (n, out) = (self.n, &self.out);
        let size = std::fs::metadata(self.data.join("root").join(FILE))?.len();
        let peer = self.nhttp(FILE);
        let curl = rounds(n, || {
            peers::remove_output(out);
            peers::timed(&mut peers::curl(&peer, out))
        })?;
        row(
            &format!("{loss}% loss: curl <- nginx"),
            curl,
            size,
            curl,
            "curl+nginx",
        );
        // A second daemon sending with BBR instead of quinn's default Cubic.
        let bbr_port = peers::free_port()?;
        let _bbr = peers::ztserve_env(
            &self.data.join("root"),
            bbr_port,
            &self.data.join("state-bbr"),
            &[("ZTSERVE_QUIC_CONGESTION", "bbr")],
        )?;
        let bbr = format!("quic://127.0.0.1:{bbr_port}/{FILE}");
        // ztp/1 by connections per fetch (the default is 2).
        let quic = self.zquic(FILE);
        let variants: [(&str, &str, &[&str]); 5] = [
            ("http", &self.zhttp(FILE), &[]),
            ("quic", &quic, &[]),
            ("quic --connections 1", &quic, &["--connections", "1"]),
            ("quic --connections 4", &quic, &["--connections", "4"]),
            ("quic (bbr)", &bbr, &[]),
        ];
        for (via, url, args) in variants {
            let t = rounds(n, || peers::timed(peers::zt_fetch(url, out).args(args)))?;
            row(
                &format!("{loss}% loss: zt fetch {via} <- ztserve"),
                t,
                size,
                curl,
                "curl+nginx",
            );
        }
        peers::remove_output(out);
        Ok(())
    }
}
