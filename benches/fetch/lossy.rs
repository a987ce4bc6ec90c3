//! Section 5: whole-file fetches over lossy links. The bench runs itself
//! again inside a network namespace whose loopback drops a share of
//! packets (the iptables `statistic` match), first at loopback's own
//! round trip (0, 1 and 5 % loss), then at 50 ms (1 and 5 %, loopback's MTU
//! set to 1,500, every packet held 25 ms by `delay.rs`); that inner run
//! starts its own nginx and ztserve there and times curl against `zt
//! fetch` over both transports at the same loss (ztp/1 from the daemon's
//! default congestion control, `auto`, and from daemons with Cubic and
//! BBR forced), and the client library's time to the first layer against
//! layer 0's share of the bytes.

use std::time::Duration;

use anyhow::{bail, Result};
use zt_client::Via;

use super::delay::{Delay, QUEUE};
use super::netns::Netns;
use super::{load, peers, rounds, row, Bench};

/// The file the loopback rows fetch (smaller than the main model: a lossy
/// fetch is slow).
pub(crate) const FILE: &str = "lossy-crc32c.zt";

/// The file the 50 ms rows fetch: at 5 % loss a 50 ms round trip moves a
/// few hundred KB/s per connection.
pub(crate) const RTT_FILE: &str = "rtt-crc32c.zt";

/// One kind of link: the round trip added, loopback's MTU, the loss rates
/// and the file fetched.
struct Link {
    rtt_ms: u64,
    mtu: u32,
    losses: &'static [f64],
    file: &'static str,
}

const LINKS: [Link; 2] = [
    Link {
        rtt_ms: 0,
        mtu: 65_536,
        losses: &[0.0, 1.0, 5.0],
        file: FILE,
    },
    Link {
        rtt_ms: 50,
        mtu: 1_500,
        losses: &[1.0, 5.0],
        file: RTT_FILE,
    },
];

/// Runs the inner bench once per link and loss rate inside a fresh
/// namespace.
pub(crate) fn outer(n: usize) -> Result<()> {
    println!(
        "# 5. over a lossy loopback (network namespace, iptables statistic; a 50 ms round trip \
         through NFQUEUE); ratio = speed against curl from nginx at the same loss"
    );
    let Some(ns) = Netns::create("bench") else {
        println!("# skipped: needs root, ip and iptables");
        return Ok(());
    };
    for link in &LINKS {
        ns.set_mtu(link.mtu);
        ns.set_queue((link.rtt_ms > 0).then_some(QUEUE));
        for &loss in link.losses {
            ns.set_loss(loss);
            let status = ns
                .command(std::env::current_exe()?)
                .arg(n.to_string())
                .env("ZT_BENCH_LOSS", loss.to_string())
                .env("ZT_BENCH_RTT_MS", link.rtt_ms.to_string())
                .env("ZT_BENCH_LOSS_FILE", link.file)
                .status()?;
            if !status.success() {
                bail!("the run at {loss}% loss, {} ms failed", link.rtt_ms);
            }
            println!("#   packets dropped so far: {}", ns.dropped());
        }
    }
    Ok(())
}

impl Bench {
    /// The rows at one loss rate and round trip (run inside the namespace;
    /// `ZT_BENCH_RTT_MS` and `ZT_BENCH_LOSS_FILE` say which).
    pub(crate) fn lossy(&self, loss: &str) -> Result<()> {
        let rtt_ms: u64 = std::env::var("ZT_BENCH_RTT_MS").map_or(Ok(0), |v| v.parse())?;
        let file = std::env::var("ZT_BENCH_LOSS_FILE").unwrap_or_else(|_| FILE.to_owned());
        let file = file.as_str();
        let _delay = match rtt_ms {
            0 => None,
            ms => Some(Delay::start(Duration::from_millis(ms / 2))?),
        };
        let link = format!("{loss}% loss, {rtt_ms} ms");
        let (n, out) = (self.n, &self.out);
        let size = std::fs::metadata(self.data.join("root").join(file))?.len();
        let peer = self.nhttp(file);
        let curl = rounds(n, || {
            peers::remove_output(out);
            peers::timed(&mut peers::curl(&peer, out))
        })?;
        row(
            &format!("{link}: curl <- nginx"),
            curl,
            size,
            curl,
            "curl+nginx",
        );
        // The daemon's default congestion control (`auto`: BBR for a
        // round trip of 10 ms or more, Cubic below) against each
        // controller forced, on daemons of their own.
        let forced = |controller: &str| -> Result<(peers::Proc, String)> {
            let port = peers::free_port()?;
            let daemon = peers::ztserve_env(
                &self.data.join("root"),
                port,
                &self.data.join(format!("state-{controller}")),
                &[("ZTSERVE_QUIC_CONGESTION", controller)],
            )?;
            peers::wait_quiet(port)?;
            Ok((daemon, format!("quic://127.0.0.1:{port}/{file}")))
        };
        let (_cubic, cubic) = forced("cubic")?;
        let (_bbr, bbr) = forced("bbr")?;
        // ztp/1 by connections per fetch (the default is 2).
        let quic = self.zquic(file);
        let variants: [(&str, &str, &[&str]); 6] = [
            ("http", &self.zhttp(file), &[]),
            ("quic", &quic, &[]),
            ("quic --connections 1", &quic, &["--connections", "1"]),
            ("quic --connections 4", &quic, &["--connections", "4"]),
            ("quic (cubic)", &cubic, &[]),
            ("quic (bbr)", &bbr, &[]),
        ];
        for (via, url, args) in variants {
            let t = rounds(n, || peers::timed(peers::zt_fetch(url, out).args(args)))?;
            row(
                &format!("{link}: zt fetch {via} <- ztserve"),
                t,
                size,
                curl,
                "curl+nginx",
            );
        }
        peers::remove_output(out);
        // The library's time to layer 0 (delivered and verified), against
        // layer 0's share of the bytes; medians of the rounds.
        let firsts: [(&str, Via, &str); 4] = [
            ("http", Via::Http, &self.zhttp(file)),
            ("quic", Via::Quic, &quic),
            ("quic (cubic)", Via::Quic, &cubic),
            ("quic (bbr)", Via::Quic, &bbr),
        ];
        for (via, how, url) in firsts {
            let (mut share, mut first) = (Vec::new(), Vec::new());
            let (mut of_bytes, mut through) = (0.0, 0.0);
            for _ in 0..n {
                let l = self.rt.block_on(load(url, how, false, None))?;
                share.push(l.first_layer / l.total);
                first.push(l.first_layer);
                of_bytes = l.layer0_bytes as f64 / l.bytes as f64;
                through = l.through0_bytes as f64 / l.bytes as f64;
            }
            let (share, first) = (super::median(share), super::median(first));
            // Layer 0 comes after what precedes it in the send order (the
            // embedding): delivered in order at an even rate, it completes
            // at `through` of the time, whatever its own share.
            println!(
                "{:<52} first layer at {first:.3} s, {share:.3} of the time; layer 0 is {of_bytes:.3} of the bytes ({:.2}x its share); \
                 with what precedes it {through:.3} ({:.2}x that share)",
                format!("{link}: library load {via}"),
                share / of_bytes,
                share / through
            );
        }
        Ok(())
    }
}
