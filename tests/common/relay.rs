//! A user-space relay between a client and the daemon that throttles what
//! the daemon sends back (a bandwidth limit for tests that need a transfer
//! to take a while) and can delay every byte each way (a far link: this
//! kernel has no `netem`), over TCP (HTTP) or UDP (QUIC).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

/// A shared token bucket: `rate` bytes per second, all flows together.
#[derive(Debug)]
struct Throttle {
    rate: f64,
    start: Instant,
    sent: Mutex<f64>,
}

impl Throttle {
    /// Waits until `n` more bytes fit under the rate.
    async fn take(&self, n: usize) {
        let due = {
            let mut sent = self.sent.lock().unwrap();
            *sent += n as f64;
            *sent / self.rate
        };
        let ahead = due - self.start.elapsed().as_secs_f64();
        if ahead > 0.0 {
            tokio::time::sleep(Duration::from_secs_f64(ahead)).await;
        }
    }
}

/// A running relay on its own thread and runtime; it stops when dropped
/// (from sync or async code alike).
pub struct Relay {
    pub addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
    /// UDP: bytes sent back to each client address (each QUIC connection
    /// of a client has one).
    to_clients: Arc<Mutex<HashMap<SocketAddr, u64>>>,
}

impl Relay {
    /// Runs `serve` (given the bound front address's sender) on a new
    /// thread until the relay is dropped.
    fn run<F, Fut>(setup: F) -> Relay
    where
        F: FnOnce(std::sync::mpsc::Sender<SocketAddr>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()>,
    {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                tokio::select! {
                    () = setup(tx) => {}
                    _ = stopped => {}
                }
            });
        });
        let addr = rx.recv().expect("relay bound");
        Relay {
            addr,
            _stop: stop,
            to_clients: Arc::default(),
        }
    }

    /// UDP: bytes relayed back to each client address so far, largest first.
    pub fn bytes_to_clients(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.to_clients.lock().unwrap().values().copied().collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v
    }

    fn throttle(bytes_per_sec: u64) -> Arc<Throttle> {
        Arc::new(Throttle {
            rate: bytes_per_sec as f64,
            start: Instant::now(),
            sent: Mutex::new(0.0),
        })
    }

    /// TCP on 127.0.0.1, forwarding to `upstream`.
    pub fn tcp(upstream: SocketAddr, bytes_per_sec: u64) -> Relay {
        Relay::tcp_delayed(upstream, bytes_per_sec, Duration::ZERO)
    }

    /// UDP on 127.0.0.1, forwarding to `upstream`.
    pub fn udp(upstream: SocketAddr, bytes_per_sec: u64) -> Relay {
        Relay::udp_delayed(upstream, bytes_per_sec, Duration::ZERO)
    }

    /// [`Relay::tcp`], with every byte held for `delay` each way.
    pub fn tcp_delayed(upstream: SocketAddr, bytes_per_sec: u64, delay: Duration) -> Relay {
        let throttle = Relay::throttle(bytes_per_sec);
        Relay::run(move |bound| async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let _ = bound.send(listener.local_addr().unwrap());
            while let Ok((client, _)) = listener.accept().await {
                let throttle = Arc::clone(&throttle);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let up = tokio::spawn(pipe(cr, sw, None, delay));
                    pipe(sr, cw, Some(throttle), delay).await;
                    up.abort();
                });
            }
        })
    }

    /// [`Relay::udp`], with every datagram held for `delay` each way; one
    /// upstream socket per client address.
    pub fn udp_delayed(upstream: SocketAddr, bytes_per_sec: u64, delay: Duration) -> Relay {
        Relay::udp_flows(upstream, bytes_per_sec, delay, usize::MAX)
    }

    /// [`Relay::udp`] for its first client address alone: datagrams from
    /// any other (another connection of the same client) are dropped, so
    /// no other connection opens through it.
    pub fn udp_first_flow_only(upstream: SocketAddr, bytes_per_sec: u64) -> Relay {
        Relay::udp_flows(upstream, bytes_per_sec, Duration::ZERO, 1)
    }

    /// [`Relay::udp_delayed`], relaying for at most `most` client addresses.
    fn udp_flows(upstream: SocketAddr, bytes_per_sec: u64, delay: Duration, most: usize) -> Relay {
        let throttle = Relay::throttle(bytes_per_sec);
        let counts: Arc<Mutex<HashMap<SocketAddr, u64>>> = Arc::default();
        let counted = Arc::clone(&counts);
        let mut relay = Relay::run(move |bound| async move {
            let counts = counted;
            let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
            let _ = bound.send(front.local_addr().unwrap());
            // Datagrams to the client leave through one delayed queue.
            let to_client = delayed(delay, {
                let front = Arc::clone(&front);
                move |(d, to): (Vec<u8>, SocketAddr)| {
                    let front = Arc::clone(&front);
                    async move {
                        let _ = front.send_to(&d, to).await;
                    }
                }
            });
            let mut flows: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut buf = vec![0u8; 65536];
            while let Ok((n, from)) = front.recv_from(&mut buf).await {
                let back = match flows.get(&from) {
                    Some(s) => Arc::clone(s),
                    None if flows.len() >= most => continue,
                    None => {
                        let Ok(s) = UdpSocket::bind("127.0.0.1:0").await else {
                            continue;
                        };
                        if s.connect(upstream).await.is_err() {
                            continue;
                        }
                        let s = Arc::new(s);
                        flows.insert(from, Arc::clone(&s));
                        let (throttle, s2, out) =
                            (Arc::clone(&throttle), Arc::clone(&s), to_client.clone());
                        let counts = Arc::clone(&counts);
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 65536];
                            while let Ok(n) = s2.recv(&mut buf).await {
                                *counts.lock().unwrap().entry(from).or_default() += n as u64;
                                throttle.take(n).await;
                                if out
                                    .send((Instant::now(), (buf[..n].to_vec(), from)))
                                    .is_err()
                                {
                                    break;
                                }
                            }
                        });
                        s
                    }
                };
                let to_server = Arc::clone(&back);
                let d = buf[..n].to_vec();
                if delay.is_zero() {
                    let _ = to_server.send(&d).await;
                } else {
                    tokio::spawn(async move {
                        tokio::time::sleep(delay).await;
                        let _ = to_server.send(&d).await;
                    });
                }
            }
        });
        relay.to_clients = counts;
        relay
    }
}

/// A queue whose items are handed to `deliver`, in order, `delay` after
/// the instant each was queued with.
fn delayed<T, F, Fut>(
    delay: Duration,
    deliver: F,
) -> tokio::sync::mpsc::UnboundedSender<(Instant, T)>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, T)>();
    tokio::spawn(async move {
        while let Some((at, item)) = rx.recv().await {
            tokio::time::sleep_until((at + delay).into()).await;
            deliver(item).await;
        }
    });
    tx
}

/// Copies `from` to `to`, throttled by `throttle` if given, each chunk
/// held for `delay`; shuts `to` down at the end. Without a delay a slow
/// reader holds the writer back (backpressure reaches the sender); with
/// one, chunks in flight queue like bytes on a long wire.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    throttle: Option<Arc<Throttle>>,
    delay: Duration,
) {
    let mut buf = vec![0u8; 16 * 1024];
    if delay.is_zero() {
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Some(t) = &throttle {
                t.take(n).await;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
        return;
    }
    let to = Arc::new(tokio::sync::Mutex::new(to));
    let out = delayed(delay, {
        let to = Arc::clone(&to);
        move |chunk: Option<Vec<u8>>| {
            let to = Arc::clone(&to);
            async move {
                let mut w = to.lock().await;
                let _ = match chunk {
                    Some(c) => w.write_all(&c).await,
                    None => w.shutdown().await,
                };
            }
        }
    });
    while let Ok(n) = from.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Some(t) = &throttle {
            t.take(n).await;
        }
        if out.send((Instant::now(), Some(buf[..n].to_vec()))).is_err() {
            return;
        }
    }
    let _ = out.send((Instant::now(), None));
}
