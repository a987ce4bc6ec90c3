//! What a request is served: the entry as listed, or, for a file whose
//! digests are being computed, a provisional entry with just the digests
//! the request needs (hashed first, at full speed), so that asking for
//! one tensor of a cold file never waits for the whole file.

use std::collections::BTreeSet;
use std::sync::Arc;

use zt_format::select::Selection;
use zt_format::Manifest;

use super::pending::Pending;
use super::served::Unavailable;
use super::{Catalog, Entry};

/// What a request needs of a file's digests.
#[derive(Debug, Clone, Copy)]
pub enum Need<'a> {
    /// Every digest: a whole manifest, or a whole fetch.
    Everything,
    /// None: the file's raw bytes (its own digests are still checked).
    Bytes,
    /// Those of the objects these `select` globs name.
    Select(&'a [String]),
    /// Those of one object.
    Object(&'a str),
}

impl Catalog {
    /// The entry at `path` as a request that needs `need` is served: a
    /// file waiting for digests is hashed as far as `need` says (all of
    /// it waits for the hasher, which then goes at full speed), and an
    /// index is linked to its shards. An entry still pending after its
    /// wait (the hasher task is gone) is returned as it is.
    pub async fn resolve(&self, path: &str, need: Need<'_>) -> Option<Entry> {
        let entry = self.snapshot().get(path).cloned()?;
        if let Entry::Index(ix) = &entry {
            return Some(self.link(ix).await);
        }
        let Entry::Pending(p) = entry else {
            return Some(entry);
        };
        let wanted = |names: BTreeSet<String>| Some((names.clone(), Some(names)));
        let plan = match need {
            Need::Everything => None,
            Need::Bytes => return Some(bytes_view(&p)),
            Need::Object(name) => wanted(BTreeSet::from([name.to_owned()])),
            // A selection that is malformed or matches nothing is given
            // every object; the request then fails on it by name.
            // Matching a large manifest is CPU work: off the runtime.
            Need::Select(globs) => {
                let (of, globs) = (Arc::clone(&p), globs.to_vec());
                let names =
                    tokio::task::spawn_blocking(move || selected(&of.found.manifest, &globs));
                match names.await.ok().flatten() {
                    Some(names) => wanted(names),
                    None => Some((BTreeSet::new(), None)),
                }
            }
        };
        if let Some((hash, keep)) = plan {
            return Some(provisional(&p, hash, keep).await);
        }
        p.wait().await;
        match self.snapshot().get(path).cloned() {
            Some(Entry::Pending(now)) if Arc::ptr_eq(&now, &p) => p.settled().cloned(),
            other => other,
        }
    }

    /// Whether `path` waits for digests or is an index to link to its
    /// shards: [`Catalog::resolve`] may take a while for it.
    pub fn is_pending(&self, path: &str) -> bool {
        matches!(
            self.snapshot().get(path),
            Some(Entry::Pending(_) | Entry::Index(_))
        )
    }
}

fn selected(m: &Manifest, globs: &[String]) -> Option<BTreeSet<String>> {
    let sel = Selection::new(globs).ok()?;
    let kept = sel.filter(m).ok()?;
    Some(kept.objects.into_keys().collect())
}

/// The pending file served for a request that needs the digests of the
/// objects in `hash`: those hashed first (at full speed, where nobody
/// has yet), then the objects in `keep` (all when `None`) listed with
/// every digest known by then.
async fn provisional(
    p: &Arc<Pending>,
    hash: BTreeSet<String>,
    keep: Option<BTreeSet<String>>,
) -> Entry {
    let job = Arc::clone(p);
    // A task of its own: a request that goes away does not drop the
    // hashing half-done (those waiting on its components get them).
    let built = tokio::spawn(async move {
        // Every digest known by then: those just hashed among them.
        job.hash_now(&hash).await?;
        let computed = job.known();
        let path = job.found.path.clone();
        tokio::task::spawn_blocking(move || job.found.provisional(keep.as_ref(), &computed))
            .await
            .map_err(|e| format!("{path}: building its entry: {e}"))?
    })
    .await;
    match built {
        Ok(Ok(s)) => Entry::Served(Arc::new(s)),
        Ok(Err(reason)) => unavailable(p, reason),
        Err(e) => unavailable(p, format!("{}: hashing failed: {e}", p.found.path)),
    }
}

/// The pending file's raw bytes, with every object listed as the file
/// has it (its own digests, to check the bytes against): the same for
/// every such request, so built once.
fn bytes_view(p: &Arc<Pending>) -> Entry {
    if let Some(s) = p.bytes_view.get() {
        return Entry::Served(Arc::clone(s));
    }
    match p.found.provisional(None, &Default::default()) {
        Ok(s) => Entry::Served(Arc::clone(p.bytes_view.get_or_init(|| Arc::new(s)))),
        Err(reason) => unavailable(p, reason),
    }
}

fn unavailable(p: &Pending, reason: String) -> Entry {
    let f = &p.found;
    Entry::Unavailable(Arc::new(Unavailable {
        path: f.path.clone(),
        size: f.size,
        modified: f.modified,
        reason,
        identity: f.identity,
    }))
}
