//! A private network namespace whose loopback drops a share of packets
//! (the iptables `statistic` match; this kernel has no `netem`) or cuts
//! connections after a number of bytes (`connbytes`), for tests and
//! benchmarks of lossy and dying links. Needs root, `ip` and `iptables`.

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
    /// alike, at random (replacing any earlier rule; 0 lifts it). Each
    /// packet crosses loopback's input once, so this is the loss rate per
    /// packet.
    pub fn set_loss(&self, percent: f64) {
        let p = format!("{:.4}", percent / 100.0);
        let rule = ["-m", "statistic", "--mode", "random", "--probability", &p];
        self.drop_only(if percent > 0.0 { &rule[..] } else { &[] });
    }

    /// Sends every packet leaving through loopback to netfilter queue
    /// `queue`, where a process in the namespace may hold it (a delay:
    /// this kernel has no `netem`); while none listens, packets pass
    /// (`--queue-bypass`). `None` lifts the rule.
    pub fn set_queue(&self, queue: Option<u16>) {
        assert!(run(self.command("iptables").args(["-F", "OUTPUT"])));
        if let Some(q) = queue {
            let ok = run(self.command("iptables").args([
                "-A",
                "OUTPUT",
                "-o",
                "lo",
                "-j",
                "NFQUEUE",
                "--queue-num",
                &q.to_string(),
                "--queue-bypass",
            ]));
            assert!(ok, "queueing loopback's packets in {}", self.name);
        }
    }

    /// Sets loopback's MTU (65,536 by default; 1,500 for an Ethernet-like
    /// path).
    pub fn set_mtu(&self, mtu: u32) {
        let ok = run(self
            .command("ip")
            .args(["link", "set", "lo", "mtu", &mtu.to_string()]));
        assert!(ok, "setting loopback's MTU in {}", self.name);
    }

    /// Cuts every connection once `bytes` have crossed it, both directions
    /// counted (replacing any earlier rule): later packets of a TCP
    /// connection or a UDP flow are dropped, as if the link died at that
    /// byte. Connections opened afterwards get the same allowance.
    pub fn cut_after(&self, bytes: u64) {
        let from = format!("{bytes}:");
        self.drop_only(&[
            "-m",
            "connbytes",
            "--connbytes",
            &from,
            "--connbytes-dir",
            "both",
            "--connbytes-mode",
            "bytes",
        ]);
    }

    /// Replaces loopback's input rules with one dropping the packets that
    /// `matcher` (iptables match arguments) selects; none for an empty one.
    fn drop_only(&self, matcher: &[&str]) {
        assert!(run(self.command("iptables").args(["-F", "INPUT"])));
        if matcher.is_empty() {
            return;
        }
        let ok = run(self
            .command("iptables")
            .args(["-A", "INPUT", "-i", "lo"])
            .args(matcher)
            .args(["-j", "DROP"]));
        assert!(ok, "adding {matcher:?} in {}", self.name);
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
