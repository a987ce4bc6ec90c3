//! nginx serving a directory as plain files (sendfile on): the peer for
//! the HTTP benchmarks and the plain Range server the client must work
//! against. Shared by `tests/` and `benches/fetch`.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx in the foreground, stopped when dropped.
#[derive(Debug)]
pub struct Nginx {
    child: Child,
    pub port: u16,
}

/// Stops nginx the way it is meant to be stopped: SIGTERM to the master,
/// which stops its workers before it exits. SIGKILL would leave the
/// workers running, holding the test's sockets, after the test ends; it
/// is used only on a master that does not exit within 5 s.
impl Drop for Nginx {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Nginx {
    /// Serves `root` at `/` on 127.0.0.1:`port`, keeping its config, pid
    /// and logs under `dir`.
    pub fn start(root: &Path, port: u16, dir: &Path) -> std::io::Result<Nginx> {
        let tmp = dir.join("nginx-tmp");
        std::fs::create_dir_all(&tmp)?;
        let conf = dir.join("nginx.conf");
        let (d, r, t) = (dir.display(), root.display(), tmp.display());
        // `daemon off`: nginx stays our child, so killing it is enough and
        // no forked daemon keeps our pipes open.
        std::fs::write(
            &conf,
            format!(
                "daemon off;\nworker_processes 2;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{ access_log off; sendfile on; tcp_nopush on;\n\
                   client_body_temp_path {t}; proxy_temp_path {t}; fastcgi_temp_path {t};\n\
                   uwsgi_temp_path {t}; scgi_temp_path {t};\n\
                   server {{ listen 127.0.0.1:{port}; location / {{ root {r}; }} }} }}\n"
            ),
        )?;
        let child = Command::new("nginx")
            .arg("-e")
            .arg(dir.join("nginx-error.log"))
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("starting nginx ({e}); scripts/test.sh installs nginx-light"),
                )
            })?;
        let mut n = Nginx { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = n.child.try_wait()? {
                let log = std::fs::read_to_string(dir.join("nginx-error.log")).unwrap_or_default();
                return Err(std::io::Error::other(format!(
                    "nginx exited with {status}: {log}"
                )));
            }
            if Instant::now() > deadline {
                return Err(std::io::Error::other("nginx did not start listening"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(n)
    }
}
