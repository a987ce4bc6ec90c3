//! A fixed delay on every packet crossing the namespace's loopback, so the
//! lossy rows can run at a real round-trip time. This kernel has no
//! `netem`: the iptables `NFQUEUE` target hands each packet to this
//! process (its metadata only), which lets it through `delay` after it was
//! queued, in order. Both directions cross loopback once each, so the
//! round trip is twice the delay; TCP and QUIC see the same path, with no
//! relay ending their connections halfway.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// The queue number the namespace's rule sends packets to.
pub(crate) const QUEUE: u16 = 0;

/// Packets the kernel may hold for this process at once: a 50 ms round
/// trip at a few hundred MB/s of 1,500-byte packets.
const QUEUE_LEN: u32 = 1 << 16;

/// Holding packets until it is dropped.
pub(crate) struct Delay {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Delay {
    /// Binds [`QUEUE`] and starts letting its packets through `delay` late.
    pub(crate) fn start(delay: Duration) -> Result<Delay> {
        let mut q = nfq::Queue::open().context("opening the netfilter queue socket")?;
        q.bind(QUEUE).context("binding the netfilter queue")?;
        q.set_copy_range(QUEUE, 0)?;
        q.set_queue_max_len(QUEUE, QUEUE_LEN)?;
        q.set_nonblocking(true);
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || hold(q, delay, &stopping));
        Ok(Delay {
            stop,
            thread: Some(thread),
        })
    }
}

/// Queues what arrives and gives each packet its verdict once it is due.
fn hold(mut q: nfq::Queue, delay: Duration, stop: &AtomicBool) -> Result<()> {
    let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
    while !stop.load(Ordering::Relaxed) {
        loop {
            match q.recv() {
                Ok(m) => held.push_back((Instant::now() + delay, m)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => return Err(e).context("reading the netfilter queue"),
            }
        }
        let now = Instant::now();
        while held.front().is_some_and(|(due, _)| *due <= now) {
            if let Some((_, mut m)) = held.pop_front() {
                m.set_verdict(nfq::Verdict::Accept);
                q.verdict(m)?;
            }
        }
        let next = held.front().map_or(Duration::from_millis(1), |(due, _)| {
            due.saturating_duration_since(now)
        });
        std::thread::sleep(next.min(Duration::from_micros(200)));
    }
    // Let everything still held through.
    for (_, mut m) in held {
        m.set_verdict(nfq::Verdict::Accept);
        q.verdict(m)?;
    }
    Ok(())
}

impl Drop for Delay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            match t.join() {
                Ok(Err(e)) => eprintln!("the delay failed: {e:#}"),
                Err(_) => eprintln!("the delay panicked"),
                Ok(Ok(())) => {}
            }
        }
    }
}
