//! A private network namespace whose loopback drops a share of packets
//! (the iptables `statistic` match; this kernel has no `netem`) or is
//! capped in rate (`tbf`), for tests and benchmarks of lossy links. Needs
//! root, `ip`, `iptables` and `tc`.

use std::ffi::OsStr;
use std::process::{Command, Stdio};

/// A named network namespace, deleted on drop.
pub struct Netns {
    pub name: String,
}

fn run(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Netns {
    /// A fresh namespace with its loopback up and iptables usable in it,
    /// or `None` where this process cannot make one (not root, no `ip` or
    /// `iptables`).
    pub fn create(tag: &str) -> Option<Netns> {
        let name = format!("zt-{tag}-{}", std::process::id());
        if !run(Command::new("ip").args(["netns", "add", &name])) {
            return None;
        }
        let ns = Netns { name };
        let ready = run(ns.command("ip").args(["link", "set", "lo", "up"]))
            && run(ns.command("iptables").args(["-L", "INPUT"]));
        ready.then_some(ns)
    }

    /// `ip netns exec NAME`: add a program and its arguments.
    pub fn exec(&self) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]);
        c
    }

    /// `program`, to be run inside the namespace.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = self.exec();
        c.arg(program);
        c
    }

    /// Drops `percent` % of the packets arriving on loopback, TCP and UDP
    /// alike, at random (replacing any earlier rule). Each packet crosses
    /// loopback's input once, so this is the loss rate per packet.
    pub fn set_loss(&self, percent: f64) {
        assert!(run(self.command("iptables").args(["-F", "INPUT"])));
        if percent > 0.0 {
            let p = format!("{:.4}", percent / 100.0);
            let ok = run(self.command("iptables").args([
                "-A",
                "INPUT",
                "-i",
                "lo",
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ]));
            assert!(ok, "adding the loss rule in {}", self.name);
        }
    }

    /// Caps loopback at `mbit` Mbit/s with a token bucket (`tbf`), or
    /// lifts the cap with `None`.
    pub fn set_rate(&self, mbit: Option<u32>) {
        let _ = run(self
            .command("tc")
            .args(["qdisc", "del", "dev", "lo", "root"]));
        if let Some(mbit) = mbit {
            let rate = format!("{mbit}mbit");
            let ok = run(self.command("tc").args([
                "qdisc", "add", "dev", "lo", "root", "tbf", "rate", &rate, "burst", "512kb",
                "latency", "200ms",
            ]));
            assert!(ok, "adding the rate limit in {}", self.name);
        }
    }

    /// Packets dropped by the loss rule so far.
    pub fn dropped(&self) -> u64 {
        let out = self
            .command("iptables")
            .args(["-L", "INPUT", "-v", "-n", "-x"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains("DROP"))
            .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
            .sum()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(Command::new("ip").args(["netns", "del", &self.name]));
    }
}
