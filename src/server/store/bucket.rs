//! A prefix of an object store as a [`Root`]: its listing (paged; a store
//! that lists no ETags is asked each object's with HEAD), one object
//! asked for again with HEAD, each opened as one version of an object.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::error::OpenError;
use super::object::StoredObject;
use super::object_root::{Listed, ObjectRoot, StoreError};
use super::root::{ignored_name, read_capped, At, Opened, Root, Seen, MAX_DEPTH};
use super::{Blob, Identity};

/// The root `s3://bucket/prefix` (or `gs://`, `az://`).
#[derive(Debug)]
pub(crate) struct BucketRoot(pub(crate) Arc<ObjectRoot>);

impl Root for BucketRoot {
    fn describe(&self) -> &str {
        self.0.url()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Seen>, StoreError>> {
        Box::pin(async move {
            Ok(self
                .0
                .list()
                .await?
                .into_iter()
                .filter_map(listed)
                .collect())
        })
    }

    fn stat<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Option<Seen>, StoreError>> {
        Box::pin(async move {
            match self.0.head(rel).await {
                Ok(l) => Ok(listed(l)),
                Err(StoreError::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    fn open<'a>(&'a self, seen: &'a Seen) -> BoxFuture<'a, Result<Opened, OpenError>> {
        let opened = match &seen.at {
            At::Object(etag) => Ok(self.version(&seen.rel, etag.clone(), seen.size, seen.identity)),
            At::Path(_) => Err(OpenError::OtherRoot {
                rel: seen.rel.clone(),
            }),
        };
        Box::pin(std::future::ready(opened))
    }

    fn read_small<'a>(
        &'a self,
        rel: &'a str,
        cap: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, OpenError>> {
        Box::pin(async move {
            if rel
                .split('/')
                .any(|p| p.is_empty() || p == "." || p == "..")
            {
                return Err(OpenError::NoMember {
                    rel: rel.to_owned(),
                    why: "not a key under the root".to_owned(),
                });
            }
            let l = self
                .0
                .head(rel)
                .await
                .map_err(|e| OpenError::member(rel, &e))?;
            let identity = Identity::of_object(&l);
            read_capped(rel, &self.version(rel, l.etag, l.size, identity), cap).await
        })
    }

    fn reads_in_background(&self, asked: bool) -> bool {
        asked
    }

    fn replaced(&self) -> BoxFuture<'_, BTreeSet<String>> {
        Box::pin(self.0.changed())
    }

    fn is_checked(&self) -> bool {
        true
    }

    fn check(&self, within: Duration) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            // A store cut off may not refuse, only stay silent.
            match tokio::time::timeout(within, self.0.check()).await {
                Ok(answer) => answer,
                Err(_) => Err(StoreError::Unreachable {
                    url: self.0.url().to_owned(),
                    detail: format!("no answer to a listing within {within:?}"),
                }),
            }
        })
    }

    fn register_metrics(&self, registry: &prometheus::Registry) -> prometheus::Result<()> {
        self.0.register_metrics(registry)
    }
}

impl BucketRoot {
    /// One version of the object `key`, as listed.
    fn version(&self, key: &str, etag: Option<String>, size: u64, identity: Identity) -> Opened {
        let object = StoredObject {
            root: Arc::clone(&self.0),
            key: key.to_owned(),
            etag,
        };
        Opened {
            blob: Blob::object(object),
            size,
            identity,
        }
    }
}

/// A listed object, if it is one a listing gives: no part of its key a dotfile, a file being written, `.` or
/// `..`, and no deeper than a directory walk goes.
fn listed(l: Listed) -> Option<Seen> {
    let mut parts = l.key.split('/');
    let hidden = parts.any(|p| p.is_empty() || p == "." || p == ".." || ignored_name(p));
    let depth = l.key.matches('/').count();
    let name = l.key.rsplit('/').next()?;
    if hidden || depth > MAX_DEPTH + 1 {
        return None;
    }
    let source = zt_format::source::by_name(name);
    Some(Seen {
        identity: Identity::of_object(&l),
        at: At::Object(l.etag),
        size: l.size,
        modified: l.modified,
        source,
        rel: l.key,
    })
}
