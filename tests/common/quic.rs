//! Speaking ztp/1 out of turn: a bare quinn connection with the protocol's
//! ALPN, how it was closed, and the daemon's QUIC metrics.

use std::sync::Arc;
use std::time::Duration;

use zt_client::trust::{client_config, Trust};

use super::{curl, Server};

/// A bare QUIC connection to `addr` pinned to `fp`, with `transport`
/// settings (quinn's defaults when `None`).
pub async fn raw_connect(
    addr: &str,
    fp: &str,
    transport: Option<quinn::TransportConfig>,
) -> quinn::Connection {
    zt_client::trust::install_provider();
    let tls = client_config(&Trust::fingerprint(fp).unwrap(), ztp_proto::ALPN).unwrap();
    let mut config = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap(),
    ));
    if let Some(t) = transport {
        config.transport_config(Arc::new(t));
    }
    let mut ep = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    ep.set_default_client_config(config);
    ep.connect(addr.parse().unwrap(), "localhost")
        .unwrap()
        .await
        .unwrap()
}

/// A framed `get` of all of `path` as request `id`.
pub fn get(id: u64, path: &str) -> Vec<u8> {
    let get = ztp_proto::Get {
        id,
        path: path.into(),
        ..ztp_proto::Get::default()
    };
    ztp_proto::frame(&ztp_proto::Message::Get(get)).unwrap()
}

/// The application close code, if the peer closes within `limit`.
pub async fn close_code_within(conn: &quinn::Connection, limit: Duration) -> Option<u64> {
    match tokio::time::timeout(limit, conn.closed()).await {
        Ok(quinn::ConnectionError::ApplicationClosed(c)) => Some(c.error_code.into_inner()),
        _ => None,
    }
}

/// A metric's value from the daemon's `/metrics`.
pub fn metric(s: &Server, name: &str) -> u64 {
    let text = String::from_utf8(curl(&[], &s.url("/metrics")).body).unwrap();
    text.lines()
        .find(|l| l.split(' ').next() == Some(name))
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or_else(|| panic!("no metric {name}"))
        .parse()
        .unwrap()
}
