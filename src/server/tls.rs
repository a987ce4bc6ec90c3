//! HTTPS with rustls (the ring provider, chosen explicitly). The
//! certificate and key are re-read when either file changes, so a renewed
//! certificate takes effect without a restart.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use axum_server::tls_rustls::RustlsConfig;
use tokio::task::JoinHandle;

/// Installs ring as the process's rustls provider. With more than one
/// provider compiled in, building a TLS config otherwise panics.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Loads the certificate chain and key.
pub async fn load(cert: &Path, key: &Path) -> Result<RustlsConfig> {
    install_provider();
    RustlsConfig::from_pem_file(cert, key)
        .await
        .with_context(|| {
            format!(
                "loading TLS certificate {} and key {}",
                cert.display(),
                key.display()
            )
        })
}

fn stamp(p: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Polls both files and reloads the configuration when they change.
pub fn spawn_reloader(config: RustlsConfig, cert: PathBuf, key: PathBuf) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = (stamp(&cert), stamp(&key));
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = (stamp(&cert), stamp(&key));
            if now == last {
                continue;
            }
            match config.reload_from_pem_file(&cert, &key).await {
                Ok(()) => {
                    tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                    last = now;
                }
                // A pair mid-rotation may not match yet; try again next round.
                Err(e) => {
                    tracing::warn!(error = %e, "cannot reload the TLS certificate; keeping the current one")
                }
            }
        }
    })
}
