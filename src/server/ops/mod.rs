//! Operations: what keeps the daemon running and observable, apart from
//! serving. Accepting connections under a cap with idle and header
//! timeouts (`accept`, `idle`, `tls`), bearer tokens (`auth`), keeping the
//! catalog current (`watch`), checking every served component against its
//! digest ahead of requests (`verifier`), Prometheus metrics (`metrics`),
//! and the container health check (`healthcheck`).
//!
//! May use: `config`, `catalog` (`watch` rescans it, `verifier` walks
//! it), `integrity` (the checks `verifier` runs), `store` (`watch`
//! checks the object store), `families` (the registry's own metrics),
//! `tls_sessions` (the session store `tls` gives HTTPS), `quic` (`tls`
//! loads the certificate its listener shares, and takes its provider),
//! and `http` and `serve` (`accept` answers a request past every slot
//! `503 busy`).

pub(crate) mod accept;
pub(crate) mod auth;
pub mod healthcheck;
pub(crate) mod idle;
pub(crate) mod metrics;
pub(crate) mod tls;
pub(crate) mod verifier;
pub(crate) mod watch;
