//! `ztserve healthcheck [URL]`: the container health check. A slim image
//! has no curl, so the daemon's own binary asks `/healthz` and exits 0 only
//! on a 200.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::server::config::Config;
use zt_client::trust::{client_config, Trust};

/// `/healthz` on the configured listen port, asked on loopback when the
/// daemon listens on every address; HTTPS when TLS is configured.
pub fn default_url(config: &Config) -> String {
    let ip = match config.listen.ip() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    let scheme = if config.tls.cert.is_some() {
        "https"
    } else {
        "http"
    };
    let host = match ip {
        IpAddr::V6(a) => format!("[{a}]"),
        IpAddr::V4(a) => a.to_string(),
    };
    format!("{scheme}://{host}:{}/healthz", config.listen.port())
}

/// Asks `url` once; Ok only for a 200 within `timeout`. The certificate
/// is not checked: the probe asks whether this daemon answers, not who it
/// is.
pub async fn probe(url: &str, timeout: Duration) -> Result<()> {
    zt_client::trust::install_provider();
    let client = reqwest::Client::builder()
        .use_preconfigured_tls(client_config(&Trust::Insecure, b"http/1.1")?)
        .timeout(timeout)
        .build()
        .context("building the HTTP client")?;
    let resp = client
        .get(url)
        .send()
        .await
        .with_context(|| format!("GET {url}"))?;
    let status = resp.status();
    if status != reqwest::StatusCode::OK {
        let body = resp.text().await.unwrap_or_default();
        bail!("GET {url}: HTTP {status}: {}", body.trim());
    }
    Ok(())
}
