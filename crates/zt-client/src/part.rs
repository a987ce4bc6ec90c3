//! The part file a fetch writes into.
//!
//! Large components go to disk with direct I/O where the filesystem
//! allows it: no copy into the page cache, no dirty pages for the final
//! sync to wait on, and none of the machine's cache evicted by a download
//! much larger than memory. Everything else (small components, the last
//! partial page of a large one, the manifest) goes through the page
//! cache, flushed in the background as it grows. Writes run on blocking
//! threads, so a large write never stalls the transport.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use tokio::task::{spawn_blocking, JoinHandle};
use zt_format::{AlignedBuf, PAGE_ALIGNMENT};

use crate::error::{Error, Result};

/// A blocking write's result, a panicked or cancelled task counted as an
/// I/O error of its own.
fn joined<T>(r: std::result::Result<io::Result<T>, tokio::task::JoinError>) -> io::Result<T> {
    r.unwrap_or_else(|e| Err(io::Error::other(e)))
}

/// Page-cache bytes written between two background flushes.
const WRITEBACK_EVERY: u64 = 256 << 20;

/// A part file open for writing.
pub(super) struct PartWriter {
    file: Arc<File>,
    /// The same file opened for direct I/O; `None` where the filesystem
    /// refuses it (tmpfs, some network filesystems) or it was not asked for.
    direct: Option<Arc<File>>,
    label: String,
    unflushed: u64,
    flushing: Option<JoinHandle<io::Result<()>>>,
}

impl PartWriter {
    /// Opens (or creates) `path` without truncating it: a resumed fetch
    /// keeps the components its journal vouches for.
    pub(super) fn open(path: &Path, direct_io: bool) -> Result<Self> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let direct = if direct_io {
            OpenOptions::new()
                .write(true)
                .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
                .open(path)
                .ok()
                .map(Arc::new)
        } else {
            None
        };
        Ok(PartWriter {
            file: Arc::new(file),
            direct,
            label: path.display().to_string(),
            unflushed: 0,
            flushing: None,
        })
    }

    /// Whether large components are going to disk directly.
    pub(super) fn is_direct(&self) -> bool {
        self.direct.is_some()
    }

    /// Writes `data` at `offset`; returns the buffer once its bytes are in
    /// the file.
    pub(super) async fn write(&mut self, data: AlignedBuf, offset: u64) -> Result<AlignedBuf> {
        let (file, direct) = (Arc::clone(&self.file), self.direct.clone());
        let (data, cached) = joined(
            spawn_blocking(move || {
                write_at(&file, direct.as_deref(), data.as_slice(), offset).map(|w| (data, w))
            })
            .await,
        )
        .map_err(|e| Error::io(format!("writing {}", self.label), e))?;
        if cached.refused {
            tracing::debug!(part = %self.label, "direct I/O refused; writing through the page cache");
            self.direct = None;
        }
        self.unflushed += cached.bytes;
        let idle = self.flushing.as_ref().is_none_or(|h| h.is_finished());
        if self.unflushed >= WRITEBACK_EVERY && idle {
            self.settle().await?;
            let f = Arc::clone(&self.file);
            self.flushing = Some(spawn_blocking(move || f.sync_data()));
            self.unflushed = 0;
        }
        Ok(data)
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
        let f = Arc::clone(&self.file);
        let done = spawn_blocking(move || {
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
        let f = Arc::clone(&self.file);
        let done = spawn_blocking(move || f.set_len(size).and_then(|()| f.sync_all())).await;
        joined(done).map_err(|e| Error::io(format!("finishing {}", self.label), e))
    }
}

/// What one write put through the page cache.
struct Cached {
    bytes: u64,
    /// The filesystem refused direct I/O after accepting the open.
    refused: bool,
}

/// Writes `data` at `offset`: its whole pages through `direct` when that
/// is open and both the buffer and the offset sit on a page boundary, the
/// rest through `file`. A filesystem that refuses the direct write
/// (`EINVAL`) gets all of it through `file`.
fn write_at(file: &File, direct: Option<&File>, data: &[u8], offset: u64) -> io::Result<Cached> {
    let page = PAGE_ALIGNMENT;
    let aligned = offset % page as u64 == 0 && (data.as_ptr() as usize) % page == 0;
    let whole = match direct {
        Some(_) if aligned => data.len() - data.len() % page,
        _ => 0,
    };
    let (pages, rest) = data.split_at(whole);
    if let (Some(d), false) = (direct, pages.is_empty()) {
        match d.write_all_at(pages, offset) {
            Ok(()) => {
                file.write_all_at(rest, offset + whole as u64)?;
                return Ok(Cached {
                    bytes: rest.len() as u64,
                    refused: false,
                });
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                file.write_all_at(data, offset)?;
                return Ok(Cached {
                    bytes: data.len() as u64,
                    refused: true,
                });
            }
            Err(e) => return Err(e),
        }
    }
    file.write_all_at(data, offset)?;
    Ok(Cached {
        bytes: data.len() as u64,
        refused: false,
    })
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
                let mut w = PartWriter::open(&path, direct_io).unwrap();
                let big = pattern(zt_format::PAGE_ALIGNED_FROM + 100);
                let small = pattern(1000);
                // Page-aligned, unaligned, and small, out of order.
                let at = [(8192u64, &big), (64, &small), (4096 * 600 + 64, &big)];
                for (off, b) in at {
                    w.write((*b).clone(), off).await.unwrap();
                }
                let end = 4096 * 600 + 64 + big.len() as u64;
                w.finish(b"tail".to_vec(), end).await.unwrap();
                let got = std::fs::read(&path).unwrap();
                assert_eq!(&got[..8], zt_format::MAGIC);
                for (off, b) in at {
                    let off = off as usize;
                    assert_eq!(&got[off..off + b.len()], b.as_slice(), "{dir:?} at {off}");
                }
                assert_eq!(&got[end as usize..], b"tail");
                std::fs::remove_file(&path).unwrap();
            }
        }
    }
}
