//! One file from several servers that serve it (replicas behind different
//! addresses, mirrors, or every address a name resolves to): the fetch
//! starts on the first, and when a server fails it resumes from the next, keeping every component already
//! written and verified (the part file's journal, checked again on
//! resume). Servers serving the same bytes give the same ETag (ztserve's
//! ETags come from content), so the journal carries over; a server with
//! another version restarts the fetch, never mixing versions.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::output::{Progress, Written};
use crate::sharded::fetch_to_path;

impl Error {
    /// Whether another server might succeed where this one failed: wider
    /// than [`Error::is_transient`] (a server that refuses, breaks the
    /// protocol or sends corrupt bytes may be the only one doing so), but
    /// not a usage error, a policy refusal (unverifiable bytes) or a local
    /// I/O error, which any server would meet again.
    pub fn is_server_specific(&self) -> bool {
        !matches!(
            self,
            Error::Usage(_) | Error::Unverifiable { .. } | Error::Io { .. }
        )
    }
}

/// The servers to try for `url`: each address its host has (listed in
/// [`Options::resolve`], or resolved), pinned, when there are several;
/// the URL as it is otherwise (an IP address, a name with one address, or
/// one that does not resolve now: connecting reports why).
async fn servers(url: &str, options: &Options) -> Vec<Server> {
    let whole = vec![Server {
        url: url.to_owned(),
        addr: None,
    }];
    if options.connect_to.is_some() {
        return whole;
    }
    let Ok((_, host, port, _)) = crate::client::split_url(url) else {
        return whole;
    };
    if host.parse::<std::net::IpAddr>().is_ok() {
        return whole;
    }
    let addrs: Vec<SocketAddr> = match options.listed(&host, port) {
        Some(listed) => listed.to_vec(),
        None => match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(found) => {
                let mut v: Vec<SocketAddr> = Vec::new();
                for a in found {
                    if !v.contains(&a) {
                        v.push(a);
                    }
                }
                v
            }
            Err(_) => return whole,
        },
    };
    if addrs.len() < 2 {
        return whole;
    }
    addrs
        .into_iter()
        .map(|a| Server {
            url: url.to_owned(),
            addr: Some(a),
        })
        .collect()
}

/// One server to try: a URL, pinned to one of its host's addresses or not.
struct Server {
    url: String,
    addr: Option<SocketAddr>,
}

impl Server {
    fn label(&self) -> String {
        match self.addr {
            Some(a) => format!("{} (at {a})", self.url),
            None => self.url.clone(),
        }
    }
}

/// [`fetch_to_path`] from the first of `urls` that completes: on a failure
/// that another server might not have ([`Error::is_server_specific`]) the
/// fetch goes on from the next server, resuming from what is verified. A
/// URL whose host has several addresses is one server per address. Each
/// server is tried in order. One too busy for a request (a passing
/// refusal) hands the fetch on at once while another is left to try; the
/// last is waited on for [`Options::busy_wait`], and when every server
/// has failed, the first that was busy is asked again for what is left of
/// `busy_wait` since its refusal. The last failure is returned if none
/// completes. `failed` hears of each failure that moved the fetch on: the
/// server that failed (its URL, and its address when pinned), the error,
/// and the server next.
pub async fn fetch_to_path_from(
    urls: &[String],
    options: &Options,
    select: &[String],
    out: &Path,
    progress: Progress<'_>,
    failed: &mut dyn FnMut(&str, &Error, &str),
) -> Result<Written> {
    let mut all = Vec::new();
    for url in urls {
        all.extend(servers(url, options).await);
    }
    let mut last = Error::Usage("no URL to fetch from".to_owned());
    // The first server refused as busy, and when.
    let mut busy: Option<(&Server, Instant)> = None;
    for (i, server) in all.iter().enumerate() {
        let next = all.get(i + 1);
        let patience = match next {
            Some(_) => Duration::ZERO,
            None => options.busy_wait,
        };
        let attempt = from_server(server, options, patience, select, out, &mut *progress).await;
        match attempt {
            Ok(w) => return Ok(w),
            Err(e) if e.is_server_specific() => {
                if let Some(next) = next {
                    if e.retry_after().is_some() && busy.is_none() {
                        busy = Some((server, Instant::now()));
                    }
                    failed(&server.label(), &e, &next.label());
                }
                last = e;
            }
            Err(e) => return Err(e),
        }
    }
    if let (Some((server, since)), Some(after)) = (busy, all.last()) {
        let left = options.busy_wait.saturating_sub(since.elapsed());
        if !left.is_zero() {
            failed(&after.label(), &last, &server.label());
            return from_server(server, options, left, select, out, progress).await;
        }
    }
    Err(last)
}

/// The fetch from `server`, waiting out its passing refusals for `patience`.
async fn from_server(
    server: &Server,
    options: &Options,
    patience: Duration,
    select: &[String],
    out: &Path,
    progress: Progress<'_>,
) -> Result<Written> {
    let pinned = Options {
        connect_to: server.addr.or(options.connect_to),
        busy_wait: patience,
        ..options.clone()
    };
    let client = Client::connect(&server.url, pinned).await?;
    let written = fetch_to_path(&client, select, out, progress).await;
    client.close().await;
    written
}
