//! The served entry a request is answered from: the catalog's entry
//! resolved as far as the request needs (`Catalog::resolve`), checked
//! against the version it names, and catalogued again, once, when the
//! request finds its file changed under it.

use std::sync::Arc;

use super::Refusal;
use crate::server::catalog::{Entry, Need, Served};
use crate::server::State;

/// The served entry at `path`, as a request that needs `need` gets it.
pub(crate) async fn served(
    state: &State,
    path: &str,
    need: Need<'_>,
) -> Result<Arc<Served>, Refusal> {
    of(path, state.catalog.resolve(path, need).await)
}

/// What `entry`, found at `path`, serves: the entry, or why not.
pub(crate) fn of(path: &str, entry: Option<Entry>) -> Result<Arc<Served>, Refusal> {
    match entry {
        Some(Entry::Served(s)) => Ok(s),
        Some(Entry::Pending(_) | Entry::Index(_)) => Err(Refusal::Hashing(format!(
            "{path}: its digests are still being computed"
        ))),
        Some(Entry::Unavailable(u)) => Err(Refusal::Unavailable(u.reason.clone())),
        None => Err(Refusal::NotFound(format!("no file {path:?}"))),
    }
}

/// `served` if it is the version `tag` names (a ztp/1 `if_match`).
pub(crate) fn matching(served: Arc<Served>, tag: Option<&str>) -> Result<Arc<Served>, Refusal> {
    match tag {
        Some(want) if !served.is_version(want) => Err(Refusal::PreconditionFailed(format!(
            "{} has ETag {}, not {want}",
            served.path, served.etag
        ))),
        _ => Ok(served),
    }
}

/// Whether `?v=` (`v`) pins the response to these exact bytes for good:
/// `true` when every component has a digest the daemon checks what it
/// sends against, `false` when some have none it can check (digests still
/// being computed, or off: then it is no more than a revalidated answer);
/// refused when `v` names another version.
pub(crate) fn pinned(served: &Served, v: &str) -> Result<bool, Refusal> {
    if !served.is_version(&format!("\"{}\"", v.trim_matches('"'))) {
        return Err(Refusal::VersionGone(format!(
            "{}: version {v:?} is not served; the file's ETag is now {}",
            served.path, served.etag
        )));
    }
    Ok(served
        .manifest
        .components()
        .all(|(_, _, c)| c.digest.as_ref().is_some_and(|d| d.algorithm().is_some())))
}

/// A request that found its file (`stale`: the one it asked for, or a
/// shard of it) changed under its entry has it catalogued again, once:
/// `again` says it already did, and the file is then still changing
/// (being written in place, or replaced again), refused for now.
pub(crate) async fn catalogue_again(
    state: &Arc<State>,
    stale: &str,
    why: &str,
    again: &mut bool,
) -> Result<(), Refusal> {
    if std::mem::replace(again, true) {
        return Err(Refusal::Changing(format!(
            "{why}; the file is changing (being written in place); retry"
        )));
    }
    tracing::info!(file = %stale, reason = %why, "the file changed under its catalog entry; catalogued again");
    state.metrics.count_changed_refresh();
    state.refresh(stale).await;
    Ok(())
}

/// The served entry at `path` as it is now: one whose file (or a shard of
/// it) changed under it, rewritten in place, is catalogued again first;
/// the file changed again meanwhile is [`Refusal::Changing`].
pub(crate) async fn current(
    state: &Arc<State>,
    path: &str,
    need: Need<'_>,
    resolved: Option<Entry>,
) -> Result<Arc<Served>, Refusal> {
    let entry = match resolved {
        Some(e) => Some(e),
        None => state.catalog.resolve(path, need).await,
    };
    let mut again = false;
    let mut served = of(path, entry)?;
    while let Some(stale) = served.stale().map(str::to_owned) {
        catalogue_again(state, &stale, &format!("{stale}: changed"), &mut again).await?;
        served = self::served(state, path, need).await?;
    }
    Ok(served)
}
