//! HTTPS with rustls (the daemon's provider,
//! [`crate::server::quic::cert::provider`], chosen explicitly). The
//! certificate and key are re-read when either file changes, so a renewed
//! certificate takes effect without a restart: each new connection takes
//! the configuration current when it is accepted.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use tokio::task::JoinHandle;

use crate::server::quic;
use crate::server::tls_sessions::Resumptions;

/// The HTTPS configuration in force, replaced when the files change.
pub(crate) type TlsConfig = Arc<RwLock<Arc<rustls::ServerConfig>>>;

/// A configuration for `cert` and `key`, with a store of its own for the
/// sessions clients may resume (a reloaded certificate starts afresh).
fn build(cert: &Path, key: &Path, sessions: &Resumptions) -> Result<Arc<rustls::ServerConfig>> {
    zt_client::trust::install_provider();
    let id = quic::cert::load(cert, key)?;
    let mut config = rustls::ServerConfig::builder_with_provider(quic::cert::provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_single_cert(id.chain, id.key)
        .with_context(|| {
            format!(
                "loading TLS certificate {} and key {}",
                cert.display(),
                key.display()
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    config.session_storage = sessions.store("https");
    Ok(Arc::new(config))
}

/// Loads the certificate chain and key.
pub(crate) fn load(cert: &Path, key: &Path, sessions: &Resumptions) -> Result<TlsConfig> {
    Ok(Arc::new(RwLock::new(build(cert, key, sessions)?)))
}

/// The configuration for a connection accepted now.
pub(crate) fn current(config: &TlsConfig) -> Arc<rustls::ServerConfig> {
    match config.read() {
        Ok(c) => Arc::clone(&c),
        Err(poisoned) => Arc::clone(&poisoned.into_inner()),
    }
}

fn stamp(p: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(p).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Polls both files and reloads the configuration when they change.
pub(crate) fn spawn_reloader(
    config: TlsConfig,
    cert: PathBuf,
    key: PathBuf,
    sessions: Resumptions,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut last = (stamp(&cert), stamp(&key));
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            let now = (stamp(&cert), stamp(&key));
            if now == last {
                continue;
            }
            match build(&cert, &key, &sessions) {
                Ok(new) => {
                    if let Ok(mut c) = config.write() {
                        *c = new;
                    }
                    tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                    last = now;
                }
                // A pair mid-rotation may not match yet; try again next round.
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "cannot reload the TLS certificate; keeping the current one")
                }
            }
        }
    })
}
