//! What the catalog lists of each servable file, for `GET /v1/files` and
//! the web page alike: a served file, or one whose digests are being
//! computed (under its provisional ETag).

use std::time::SystemTime;

use super::{Entry, Snapshot};

/// One servable file as listed.
#[derive(Debug)]
pub(crate) struct FileRow<'a> {
    pub(crate) path: &'a str,
    pub(crate) source: &'static str,
    pub(crate) size: u64,
    /// The ETag it is served under now.
    pub(crate) etag: &'a str,
    pub(crate) version: &'a str,
    pub(crate) objects: usize,
    pub(crate) modified: SystemTime,
    /// `complete`, `pending` (being computed), or `none` (the file has
    /// components without digests and the daemon computes none).
    pub(crate) digests: &'static str,
}

impl Snapshot {
    /// Every servable file, by path (multi-file entries are not rows).
    pub(crate) fn listing(&self) -> impl Iterator<Item = FileRow<'_>> {
        self.entries.values().filter_map(|entry| match entry {
            Entry::Served(s) => {
                let complete = s.manifest.components().all(|(_, _, c)| c.digest.is_some());
                Some(FileRow {
                    path: &s.path,
                    source: s.manifest.source.name(),
                    size: s.size,
                    etag: &s.etag,
                    version: &s.manifest.version,
                    objects: s.manifest.objects.len(),
                    modified: s.modified,
                    digests: if complete { "complete" } else { "none" },
                })
            }
            Entry::Pending(p) => {
                let f = &p.found;
                Some(FileRow {
                    path: &f.path,
                    source: f.manifest.source.name(),
                    size: f.size,
                    etag: f.provisional_etag(),
                    version: &f.manifest.version,
                    objects: f.manifest.objects.len(),
                    modified: f.modified,
                    digests: "pending",
                })
            }
            Entry::Index(_) | Entry::Unavailable(_) => None,
        })
    }
}
