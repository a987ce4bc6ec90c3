//! A prefix of an object store as a [`Root`]: its listing (paged; a store
//! that lists no ETags is asked each object's with HEAD), one object
//! asked for again with HEAD, each opened as one version of an object.

use std::path::Path;
use std::sync::Arc;

use super::object::StoredObject;
use super::object_root::{Listed, ObjectRoot, StoreError};
use super::root::{ignored_name, read_capped, At, Root, Seen, MAX_DEPTH};
use super::{Blob, Identity};

/// The root `s3://bucket/prefix` (or `gs://`, `az://`).
#[derive(Debug)]
pub(crate) struct BucketRoot(pub(crate) Arc<ObjectRoot>);

impl Root for BucketRoot {
    fn describe(&self) -> &str {
        self.0.url()
    }

    fn list(&self) -> Result<Vec<Seen>, StoreError> {
        Ok(self
            .0
            .list_blocking()?
            .into_iter()
            .filter_map(listed)
            .collect())
    }

    fn stat(&self, rel: &str) -> Result<Option<Seen>, StoreError> {
        match self.0.head_blocking(rel) {
            Ok(l) => Ok(listed(l)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn open(&self, seen: &Seen) -> Result<(Blob, u64, Identity), String> {
        let At::Object(etag) = &seen.at else {
            return Err(format!("{}: a local file under a store root", seen.rel));
        };
        let object = StoredObject {
            root: Arc::clone(&self.0),
            key: seen.rel.clone(),
            etag: etag.clone(),
        };
        Ok((Blob::object(object), seen.size, seen.identity))
    }

    fn read_small(&self, rel: &str, cap: u64) -> Result<Vec<u8>, String> {
        if rel
            .split('/')
            .any(|p| p.is_empty() || p == "." || p == "..")
        {
            return Err(format!("{rel}: not a key under the root [pack-member]"));
        }
        let listed = self
            .0
            .head_blocking(rel)
            .map_err(|e| format!("{rel}: {e} [pack-member]"))?;
        let object = StoredObject {
            root: Arc::clone(&self.0),
            key: rel.to_owned(),
            etag: listed.etag,
        };
        read_capped(rel, &Blob::object(object), listed.size, cap)
    }

    fn dir(&self) -> Option<&Path> {
        None
    }

    fn store(&self) -> Option<&Arc<ObjectRoot>> {
        Some(&self.0)
    }
}

/// A listed object, if it is one the catalog serves: named as a source
/// is, with no part of its key a dotfile, a file being written, `.` or
/// `..`, and no deeper than a directory walk goes.
fn listed(l: Listed) -> Option<Seen> {
    let mut parts = l.key.split('/');
    let hidden = parts.any(|p| p.is_empty() || p == "." || p == ".." || ignored_name(p));
    let depth = l.key.matches('/').count();
    let name = l.key.rsplit('/').next()?;
    if hidden || depth > MAX_DEPTH + 1 {
        return None;
    }
    let source = zt_format::source::by_name(name)?;
    Some(Seen {
        identity: Identity::of_object(&l),
        at: At::Object(l.etag),
        size: l.size,
        modified: l.modified,
        source,
        rel: l.key,
    })
}
