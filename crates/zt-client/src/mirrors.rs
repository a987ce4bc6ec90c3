//! One file from several servers that serve it (replicas behind different
//! addresses, mirrors): the fetch starts on the first, and when a server
//! fails it resumes from the next, keeping every component already
//! written and verified (the part file's journal, checked again on
//! resume). Servers serving the same bytes give the same ETag (ztserve's
//! ETags come from content), so the journal carries over; a server with
//! another version restarts the fetch, never mixing versions.

use std::path::Path;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::options::Options;
use crate::output::{fetch_to_path, Progress, Written};

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

/// [`fetch_to_path`] from the first of `urls` that completes: on a failure
/// that another server might not have ([`Error::is_server_specific`]) the
/// fetch goes on from the next URL, resuming from what is verified. Each
/// URL is tried once, in order; the last failure is returned if none
/// completes. `failed` hears of each failure that moved the fetch on.
pub async fn fetch_to_path_from(
    urls: &[String],
    options: &Options,
    select: &[String],
    out: &Path,
    progress: Progress<'_>,
    failed: &mut dyn FnMut(&str, &Error, &str),
) -> Result<Written> {
    let mut last = Error::Usage("no URL to fetch from".to_owned());
    for (i, url) in urls.iter().enumerate() {
        let attempt = async {
            let client = Client::connect(url, options.clone()).await?;
            let written = fetch_to_path(&client, select, out, &mut *progress).await;
            client.close().await;
            written
        }
        .await;
        match (attempt, urls.get(i + 1)) {
            (Ok(w), _) => return Ok(w),
            (Err(e), Some(next)) if e.is_server_specific() => {
                failed(url, &e, next);
                last = e;
            }
            (Err(e), _) => return Err(e),
        }
    }
    Err(last)
}
