//! Files held in memory, for tests: a [`Root`] whose files a test puts,
//! replaces and removes, each version a [`ByteSource`] that knows when it
//! was replaced (as an object does). Reads answer at once and never
//! block, so the layers above can be tested without a disk or a store.

use std::collections::BTreeMap;
use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use super::error::{OpenError, StoreError};
use super::root::{read_capped, At, Opened, Root, Seen};
use super::source::{held, pieces_with, ByteSource, Gone};
use super::{Blob, Identity};

/// One version of a file.
#[derive(Debug, Clone)]
struct Version {
    bytes: Bytes,
    /// Counts up across the root: no two versions share one.
    number: u64,
}

type Files = Arc<Mutex<(BTreeMap<String, Version>, u64)>>;

/// A root of files in memory.
#[derive(Debug, Default)]
pub(crate) struct MemoryRoot {
    files: Files,
}

impl MemoryRoot {
    /// Puts `bytes` at `rel`: a new file, or a new version of one (readers
    /// of the old version see it changed).
    pub(crate) fn put(&self, rel: &str, bytes: impl Into<Bytes>) {
        if let Ok(mut files) = self.files.lock() {
            files.1 += 1;
            let number = files.1;
            files.0.insert(
                rel.to_owned(),
                Version {
                    bytes: bytes.into(),
                    number,
                },
            );
        }
    }

    /// Removes the file at `rel`.
    pub(crate) fn remove(&self, rel: &str) {
        if let Ok(mut files) = self.files.lock() {
            files.0.remove(rel);
        }
    }

    fn seen(rel: &str, v: &Version) -> Option<Seen> {
        Some(Seen {
            rel: rel.to_owned(),
            size: v.bytes.len() as u64,
            modified: modified(v),
            identity: identity(v),
            source: zt_format::source::by_name(rel.rsplit('/').next()?),
            at: At::Object(Some(v.number.to_string())),
        })
    }

    fn version(&self, rel: &str) -> Option<Version> {
        self.files.lock().ok()?.0.get(rel).cloned()
    }
}

/// The device number that marks a file in memory (no device has it; an
/// object's is `u64::MAX`).
const MEMORY: u64 = u64::MAX - 1;

/// A version's time: its number, in seconds since the epoch.
fn modified(v: &Version) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(v.number)
}

/// A version's identity: its number in place of the inode and its time.
fn identity(v: &Version) -> Identity {
    Identity {
        dev: MEMORY,
        ino: v.number,
        size: v.bytes.len() as u64,
        mtime_ns: i128::from(v.number) * 1_000_000_000,
        ctime_ns: 0,
        links: 1,
    }
}

impl Root for MemoryRoot {
    fn describe(&self) -> &str {
        "memory"
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Seen>, StoreError>> {
        let seen = self.files.lock().map_or_else(
            |_| Vec::new(),
            |f| f.0.iter().filter_map(|(k, v)| Self::seen(k, v)).collect(),
        );
        Box::pin(std::future::ready(Ok(seen)))
    }

    fn stat<'a>(&'a self, rel: &'a str) -> BoxFuture<'a, Result<Option<Seen>, StoreError>> {
        let seen = self.version(rel).and_then(|v| Self::seen(rel, &v));
        Box::pin(std::future::ready(Ok(seen)))
    }

    fn open<'a>(&'a self, seen: &'a Seen) -> BoxFuture<'a, Result<Opened, OpenError>> {
        let opened = match self.version(&seen.rel) {
            Some(v) if Some(v.number.to_string()) == at_version(&seen.at) => Ok(Opened {
                size: v.bytes.len() as u64,
                identity: identity(&v),
                blob: Blob::from_source(Arc::new(MemoryFile {
                    files: Arc::clone(&self.files),
                    rel: seen.rel.clone(),
                    version: v,
                })),
            }),
            _ => Err(OpenError::Replaced {
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
            let seen = self
                .stat(rel)
                .await
                .ok()
                .flatten()
                .ok_or_else(|| OpenError::NoMember {
                    rel: rel.to_owned(),
                    why: "no such file".to_owned(),
                })?;
            read_capped(rel, &self.open(&seen).await?, cap).await
        })
    }

    fn reads_in_background(&self, asked: bool) -> bool {
        asked
    }
}

fn at_version(at: &At) -> Option<String> {
    match at {
        At::Object(v) => v.clone(),
        At::Path(_) => None,
    }
}

/// One version of a file in memory.
#[derive(Debug)]
struct MemoryFile {
    files: Files,
    rel: String,
    version: Version,
}

impl MemoryFile {
    fn slice(&self, range: Range<u64>) -> io::Result<Bytes> {
        if self.changed() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: replaced", self.rel),
            ));
        }
        let len = self.version.bytes.len() as u64;
        if range.end > len || range.start > range.end {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let (start, end) = (range.start as usize, range.end as usize);
        Ok(self.version.bytes.slice(start..end))
    }
}

impl ByteSource for MemoryFile {
    fn changed(&self) -> bool {
        self.files.lock().map_or(true, |f| {
            f.0.get(&self.rel).map(|v| v.number) != Some(self.version.number)
        })
    }

    fn read_now(&self, range: &Range<u64>) -> Option<io::Result<Bytes>> {
        Some(self.slice(range.clone()))
    }

    fn read_async(
        self: Arc<Self>,
        len: usize,
        pos: u64,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> BoxFuture<'static, io::Result<Bytes>> {
        let got = self
            .slice(pos..pos.saturating_add(len as u64))
            .map(|b| held(b, permit));
        Box::pin(std::future::ready(got))
    }

    fn pieces(
        self: Arc<Self>,
        range: Range<u64>,
        piece: u64,
        _keep: bool,
    ) -> BoxStream<'static, io::Result<Bytes>> {
        pieces_with(range, piece, 1, move |r| std::future::ready(self.slice(r)))
    }

    fn confirm(self: Arc<Self>, _chunks: Vec<Range<u64>>) -> BoxFuture<'static, Result<(), Gone>> {
        let now = if self.changed() {
            Err(Gone::Changed(format!("{}: replaced", self.rel)))
        } else {
            Ok(())
        };
        Box::pin(std::future::ready(now))
    }

    fn read_ahead(&self) -> usize {
        1
    }
}
