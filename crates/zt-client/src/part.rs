//! The part file a fetch writes into.
//!
//! Large components go to disk with direct I/O where the filesystem
//! allows it: no copy into the page cache, no dirty pages for the final
//! sync to wait on, and none of the machine's cache evicted by a download
//! much larger than memory. A component whose place in the file is not on
//! a page boundary (a byte-identical copy of a safetensors file, whose
//! tensors are 8-byte aligned) has its whole pages copied through a small
//! page-aligned bounce buffer and written directly all the same: a copy in
//! memory costs far less than the page cache's writeback. Everything else
//! (small components, the partial pages at either end of a large one, the
//! manifest) goes through the page cache, flushed in the background as it
//! grows. Writes run on blocking threads, so a large write never stalls
//! the transport.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use tokio::task::{spawn_blocking, JoinHandle};
use zt_format::{AlignedBuf, Digest, DigestAlgorithm, PAGE_ALIGNMENT};

use crate::error::{Error, Result};
use crate::journal::Journal;
use crate::own::open_own;

/// A blocking write's result, a panicked or cancelled task counted as an
/// I/O error of its own.
fn joined<T>(r: std::result::Result<io::Result<T>, tokio::task::JoinError>) -> io::Result<T> {
    r.unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// Whether `a` and `b` are open on the same file.
fn same_file(a: &File, b: &File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (a.metadata(), b.metadata()) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Page-cache bytes written between two background flushes.
const WRITEBACK_EVERY: u64 = 256 << 20;

/// One component's write ([`PartWriter::write_all`]): its bytes, where
/// they go, the digest to compute of them, and its journal entry.
pub(super) struct Write {
    pub(super) data: AlignedBuf,
    pub(super) offset: u64,
    pub(super) hash: Option<DigestAlgorithm>,
    pub(super) done: Option<(String, String)>,
}

/// A part file open for writing, and the fetch's journal.
pub(super) struct PartWriter {
    file: Arc<File>,
    /// Held by every blocking write until it ends, so the journal's lock
    /// ([`crate::lock`]) outlasts a write that goes on after the fetch
    /// is stopped.
    journal: Arc<Journal>,
    /// The same file opened for direct I/O; `None` where the filesystem
    /// refuses it (tmpfs, some network filesystems) or it was not asked for.
    direct: Option<Arc<File>>,
    label: String,
    unflushed: u64,
    flushing: Option<JoinHandle<io::Result<()>>>,
    /// The page-aligned buffer unaligned components' pages are copied
    /// through on their way to direct I/O (made on first use).
    bounce: Option<AlignedBuf>,
}

/// The bounce buffer's size: what one direct write of an unaligned
/// component's pages takes at most.
const BOUNCE: usize = 8 << 20;

impl PartWriter {
    /// Opens (or creates) `path` without truncating it: a resumed fetch
    /// keeps the components its journal vouches for.
    pub(super) fn open(path: &Path, direct_io: bool, journal: Arc<Journal>) -> Result<Self> {
        let creating = |e| Error::io(format!("creating {}", path.display()), e);
        let file = open_own(
            path,
            OpenOptions::new().create(true).write(true).truncate(false),
            rustix::fs::OFlags::empty(),
        )
        .map_err(creating)?;
        let direct = if direct_io {
            open_own(
                path,
                OpenOptions::new().write(true),
                rustix::fs::OFlags::DIRECT,
            )
            .ok()
            // The file the other handle writes, not one put in its place.
            .filter(|d| same_file(d, &file))
            .map(Arc::new)
        } else {
            None
        };
        Ok(PartWriter {
            file: Arc::new(file),
            journal,
            direct,
            label: path.display().to_string(),
            unflushed: 0,
            flushing: None,
            bounce: None,
        })
    }

    /// Whether large components are going to disk directly.
    pub(super) fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Writes components, in order, on one blocking thread (a file of
    /// many small tensors is otherwise a thread's round trip each): each
    /// one's digest under its `hash`, computed before the write, then its
    /// bytes at its offset, then its journal line. Returns the buffers
    /// with their digests once every byte is in the file.
    pub(super) async fn write_all(
        &mut self,
        writes: Vec<Write>,
    ) -> Result<Vec<(AlignedBuf, Option<Digest>)>> {
        let (file, direct) = (Arc::clone(&self.file), self.direct.clone());
        let journal = Arc::clone(&self.journal);
        let mut bounce = self.bounce.take();
        let (out, cached, bounce, noted) = joined(
            spawn_blocking(move || {
                let to = Target {
                    file: &file,
                    direct: direct.as_deref(),
                };
                let mut all = Cached {
                    bytes: 0,
                    refused: false,
                };
                let mut out = Vec::with_capacity(writes.len());
                let mut noted = Ok(());
                for w in writes {
                    let digest = w.hash.map(|a| a.digest(w.data.as_slice()));
                    let cached = to.write(w.data.as_slice(), w.offset, &mut bounce)?;
                    all.bytes += cached.bytes;
                    all.refused |= cached.refused;
                    noted = w
                        .done
                        .as_ref()
                        .map_or(Ok(()), |(o, c)| journal.append(o, c));
                    if noted.is_err() {
                        break;
                    }
                    out.push((w.data, digest));
                }
                Ok((out, all, bounce, noted))
            })
            .await,
        )
        .map_err(|e| Error::io(format!("writing {}", self.label), e))?;
        noted?;
        self.bounce = bounce;
        if cached.refused {
            tracing::debug!(part = %self.label, "direct I/O refused; writing through the page cache");
            self.direct = None;
        }
        self.unflushed += cached.bytes;
        let idle = self.flushing.as_ref().is_none_or(|h| h.is_finished());
        if self.unflushed >= WRITEBACK_EVERY && idle {
            self.settle().await?;
            let (f, held) = (Arc::clone(&self.file), Arc::clone(&self.journal));
            self.flushing = Some(spawn_blocking(move || {
                let _held = held;
                f.sync_data()
            }));
            self.unflushed = 0;
        }
        Ok(out)
    }

    /// Waits for the background flush, reporting its failure.
    async fn settle(&mut self) -> Result<()> {
        if let Some(h) = self.flushing.take() {
            joined(h.await).map_err(|e| Error::io(format!("flushing {}", self.label), e))?;
        }
        Ok(())
    }

    /// Writes the leading magic and `tail` (manifest, size, footer) at
    /// `blob_end`, sizes the file to end there, and makes it durable.
    pub(super) async fn finish(mut self, tail: Vec<u8>, blob_end: u64) -> Result<()> {
        self.settle().await?;
        let (f, held) = (Arc::clone(&self.file), Arc::clone(&self.journal));
        let done = spawn_blocking(move || {
            let _held = held;
            f.write_all_at(zt_format::MAGIC, 0)
                .and_then(|()| f.set_len(blob_end + tail.len() as u64))
                .and_then(|()| f.write_all_at(&tail, blob_end))
                .and_then(|()| f.sync_all())
        })
        .await;
        joined(done).map_err(|e| Error::io(format!("finishing {}", self.label), e))
    }
}

impl PartWriter {
    /// Sizes a byte-identical copy to `size` and makes it durable (its
    /// every byte was written in place).
    pub(super) async fn finish_copy(mut self, size: u64) -> Result<()> {
        self.settle().await?;
        let (f, held) = (Arc::clone(&self.file), Arc::clone(&self.journal));
        let done = spawn_blocking(move || {
            let _held = held;
            f.set_len(size).and_then(|()| f.sync_all())
        })
        .await;
        joined(done).map_err(|e| Error::io(format!("finishing {}", self.label), e))
    }
}

/// Writes `data` as the whole of the new file `path` (blocking): with
/// `direct`, its whole pages with direct I/O where the filesystem allows
/// it and `data` is page-aligned in memory, the rest through the page
/// cache; else all of it through the page cache.
pub(crate) fn write_new(path: &Path, data: &[u8], direct: bool) -> io::Result<()> {
    let file = OpenOptions::new().create_new(true).write(true).open(path)?;
    let direct = (direct && data.len() >= zt_format::PAGE_ALIGNED_FROM)
        .then(|| {
            OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
                .open(path)
                .ok()
        })
        .flatten();
    let to = Target {
        file: &file,
        direct: direct.as_ref(),
    };
    to.write(data, 0, &mut None).map(|_| ())
}

/// What one write put through the page cache.
struct Cached {
    bytes: u64,
    /// The filesystem refused direct I/O after accepting the open.
    refused: bool,
}

/// Where one write goes: the file through the page cache, and the same
/// file opened for direct I/O where that is open.
struct Target<'a> {
    file: &'a File,
    direct: Option<&'a File>,
}

impl Target<'_> {
    /// Writes `data` at `offset`: its whole pages through `direct` when that
    /// is open (straight from `data` when both it and `offset` sit on a page
    /// boundary, through `bounce` when a large component's do not), the
    /// rest through `file`. A filesystem that refuses the direct write
    /// (`EINVAL`) gets all of it through `file`.
    fn write(
        &self,
        data: &[u8],
        offset: u64,
        bounce: &mut Option<AlignedBuf>,
    ) -> io::Result<Cached> {
        let page = PAGE_ALIGNMENT as u64;
        let Some(direct) = self.direct else {
            return self.cached(data, offset, false);
        };
        // The whole pages of the file the component covers.
        let end = offset + data.len() as u64;
        let first = offset.div_ceil(page) * page;
        let last = end / page * page;
        let skip = usize::try_from(first - offset).unwrap_or(usize::MAX);
        let pages = usize::try_from(last.saturating_sub(first)).unwrap_or(0);
        let in_place = skip == 0 && (data.as_ptr() as usize) % PAGE_ALIGNMENT == 0;
        let written = if pages == 0 {
            // Not one whole page: all of it through the page cache.
            return self.cached(data, offset, false);
        } else if in_place {
            direct.write_all_at(data.get(..pages).unwrap_or_default(), first)
        } else if pages >= zt_format::PAGE_ALIGNED_FROM {
            let whole = data.get(skip..skip + pages).unwrap_or_default();
            bounced(direct, whole, first, bounce)
        } else {
            return self.cached(data, offset, false);
        };
        match written {
            Ok(()) => {
                // The partial pages at either end.
                let head = data.get(..skip).unwrap_or_default();
                let tail = data.get(skip + pages..).unwrap_or_default();
                self.file.write_all_at(head, offset)?;
                self.file.write_all_at(tail, last.max(first))?;
                Ok(Cached {
                    bytes: (head.len() + tail.len()) as u64,
                    refused: false,
                })
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                self.cached(data, offset, true)
            }
            Err(e) => Err(e),
        }
    }

    /// All of `data` through the page cache.
    fn cached(&self, data: &[u8], offset: u64, refused: bool) -> io::Result<Cached> {
        self.file.write_all_at(data, offset)?;
        Ok(Cached {
            bytes: data.len() as u64,
            refused,
        })
    }
}

/// Writes `pages` (whole pages, not page-aligned in memory) at the
/// page-aligned `offset` through `direct`, [`BOUNCE`] bytes at a time
/// copied into `bounce`.
fn bounced(
    direct: &File,
    pages: &[u8],
    offset: u64,
    bounce: &mut Option<AlignedBuf>,
) -> io::Result<()> {
    let buf = match bounce {
        Some(b) => b,
        None => bounce.insert(AlignedBuf::zeroed(BOUNCE as u64).map_err(io::Error::other)?),
    };
    let mut at = offset;
    for piece in pages.chunks(BOUNCE) {
        let to = buf
            .as_mut_slice()
            .get_mut(..piece.len())
            .unwrap_or_default();
        to.copy_from_slice(piece);
        direct.write_all_at(to, at)?;
        at += piece.len() as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize) -> AlignedBuf {
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        AlignedBuf::copy_from(&data).unwrap()
    }

    /// Direct and cached writes land the same bytes, wherever the filesystem
    /// stands on direct I/O (the temporary directory, and `/dev/shm`, a
    /// tmpfs, which may refuse it).
    #[tokio::test]
    async fn direct_and_cached_writes_agree() {
        let mut dirs = vec![std::env::temp_dir()];
        if Path::new("/dev/shm").is_dir() {
            dirs.push("/dev/shm".into());
        }
        for dir in dirs {
            for direct_io in [true, false] {
                let path = dir.join(format!("part-{}-{direct_io}.bin", std::process::id()));
                let _ = std::fs::remove_file(&path);
                let journal = path.with_extension("journal");
                let (j, _) = Journal::open(&journal, "test").unwrap();
                let mut w = PartWriter::open(&path, direct_io, Arc::new(j)).unwrap();
                let big = pattern(zt_format::PAGE_ALIGNED_FROM + 100);
                let small = pattern(1000);
                // Larger than the bounce buffer: its pages go in pieces.
                let huge = pattern(BOUNCE * 2 + 4096 * 3 + 5);
                // Page-aligned, unaligned (a safetensors copy's 8-byte
                // offsets), small (one across a page boundary), out of order.
                let at = [
                    (8192u64, &big),
                    (64, &small),
                    (4096 * 600 + 64, &big),
                    (4096 * 2000 + 8, &huge),
                    (4096 * 400 - 10, &small),
                    (4096 * 900 + 24, &big),
                ];
                // Three in one blocking write, then one at a time.
                let writes: Vec<Write> = at
                    .iter()
                    .map(|(off, b)| Write {
                        data: (*b).clone(),
                        offset: *off,
                        hash: None,
                        done: None,
                    })
                    .collect();
                let mut writes = writes.into_iter();
                w.write_all(writes.by_ref().take(3).collect())
                    .await
                    .unwrap();
                for one in writes {
                    w.write_all(vec![one]).await.unwrap();
                }
                let end = at
                    .iter()
                    .map(|(off, b)| off + b.len() as u64)
                    .max()
                    .unwrap();
                w.finish(b"tail".to_vec(), end).await.unwrap();
                let got = std::fs::read(&path).unwrap();
                assert_eq!(&got[..8], zt_format::MAGIC);
                for (off, b) in at {
                    let off = off as usize;
                    assert_eq!(&got[off..off + b.len()], b.as_slice(), "{dir:?} at {off}");
                }
                assert_eq!(&got[end as usize..], b"tail");
                std::fs::remove_file(&path).unwrap();
                std::fs::remove_file(&journal).unwrap();
            }
        }
    }
}
