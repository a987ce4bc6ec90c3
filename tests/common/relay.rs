//! A user-space relay between a client and the daemon that throttles what
//! the daemon sends back: a bandwidth limit for tests that need a transfer
//! to take a while, over TCP (HTTP) or UDP (QUIC).

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
        Relay { addr, _stop: stop }
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
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let up = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                        let _ = sw.shutdown().await;
                    });
                    let mut buf = vec![0u8; 16 * 1024];
                    while let Ok(n) = sr.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        throttle.take(n).await;
                        if cw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                    }
                    let _ = cw.shutdown().await;
                    up.abort();
                });
            }
        })
    }

    /// UDP on 127.0.0.1, forwarding to `upstream`, one upstream socket per
    /// client address.
    pub fn udp(upstream: SocketAddr, bytes_per_sec: u64) -> Relay {
        let throttle = Relay::throttle(bytes_per_sec);
        Relay::run(move |bound| async move {
            let front = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
            let _ = bound.send(front.local_addr().unwrap());
            let mut flows: HashMap<SocketAddr, Arc<UdpSocket>> = HashMap::new();
            let mut buf = vec![0u8; 65536];
            while let Ok((n, from)) = front.recv_from(&mut buf).await {
                let back = match flows.get(&from) {
                    Some(s) => Arc::clone(s),
                    None => {
                        let Ok(s) = UdpSocket::bind("127.0.0.1:0").await else {
                            continue;
                        };
                        if s.connect(upstream).await.is_err() {
                            continue;
                        }
                        let s = Arc::new(s);
                        flows.insert(from, Arc::clone(&s));
                        let (front, throttle, s2) =
                            (Arc::clone(&front), Arc::clone(&throttle), Arc::clone(&s));
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 65536];
                            while let Ok(n) = s2.recv(&mut buf).await {
                                throttle.take(n).await;
                                let _ = front.send_to(&buf[..n], from).await;
                            }
                        });
                        s
                    }
                };
                let _ = back.send(&buf[..n]).await;
            }
        })
    }
}
