//! Positioned reads of a local file, without zeroing the buffer first:
//! the kernel writes straight into the vector's spare capacity (rustix's
//! `pread` into `spare_capacity`), which grows the vector by what was
//! read. A buffer the size of a read chunk would otherwise be `memset`
//! before every read.
//!
//! Chunks on their way to a client ([`read_pooled`]) come from a small
//! pool and go back to it when the transport drops them (once sent over
//! HTTP, once acknowledged over QUIC): the allocator would otherwise hand
//! freed chunks back to the kernel and fault in (and zero) fresh pages
//! for the next. [`read_cached`] reads from the page cache without
//! blocking, or not at all.

use std::fs::File;
use std::io;
use std::sync::Mutex;

use bytes::Bytes;

/// Reads exactly `len` bytes of `file` at `pos` into a pooled buffer,
/// shared as [`Bytes`] (`UnexpectedEof` if the file ends first: it was
/// truncated under the daemon), the
/// buffer holding `permit` until the last [`Bytes`] of it is dropped (for
/// ztp/1: once the client acknowledged the bytes and quinn let go of
/// them), so a budget counts memory, not calls.
pub(crate) fn read_pooled(
    file: &File,
    len: usize,
    pos: u64,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
) -> io::Result<Bytes> {
    let mut buf = take(len);
    match fill(file, &mut buf, len, pos) {
        Ok(()) => Ok(Bytes::from_owner(Pooled { buf, _held: permit })),
        Err(e) => {
            give(buf);
            Err(e)
        }
    }
}

/// Free read buffers, emptied.
static FREE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

/// Most buffers kept (64 MiB at [`super::READ_CHUNK`]).
const KEEP: usize = 16;

/// Smaller buffers are not worth keeping.
const KEEP_FROM: usize = 64 << 10;

/// Larger buffers are no chunk's.
const KEEP_UP_TO: usize = super::READ_CHUNK as usize;

/// An empty buffer with room for exactly `len` bytes (a larger one would
/// have `pread` read past `len`, work thrown away).
fn take(len: usize) -> Vec<u8> {
    let reused = FREE.lock().ok().and_then(|mut free| {
        let i = free.iter().position(|b| b.capacity() == len)?;
        Some(free.swap_remove(i))
    });
    reused.unwrap_or_else(|| Vec::with_capacity(len))
}

fn give(mut buf: Vec<u8>) {
    // A buffer larger than a chunk (a whole component read at once) is
    // not kept: the pool would hold it for good.
    if !(KEEP_FROM..=KEEP_UP_TO).contains(&buf.capacity()) {
        return;
    }
    buf.clear();
    if let Ok(mut free) = FREE.lock() {
        // The oldest goes first, so sizes no longer asked for age out.
        if free.len() >= KEEP {
            free.remove(0);
        }
        free.push(buf);
    }
}

/// A pooled buffer owned by [`Bytes`]; dropping it returns the buffer
/// (and then the budget it held, if any).
struct Pooled {
    buf: Vec<u8>,
    /// Released after the buffer goes back to the pool.
    _held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        give(std::mem::take(&mut self.buf));
    }
}

/// The largest read tried on the async runtime itself ([`read_cached`]).
pub(crate) const CACHED_READ_MAX: u64 = 1 << 20;

/// Reads exactly `len` bytes at `pos` if every one of them is in the page
/// cache (`preadv2` with `RWF_NOWAIT`), without blocking, so the caller
/// can stay on the async runtime; `None` when some are not (or the kernel
/// cannot say): read them on the blocking pool instead. For reads up to
/// [`CACHED_READ_MAX`], where zeroing the buffer costs less than the hop.
pub(crate) fn read_cached(file: &File, len: usize, pos: u64) -> Option<io::Result<Bytes>> {
    use rustix::io::{Errno, ReadWriteFlags};
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let rest = buf.get_mut(done..).unwrap_or_default();
        let at = pos.saturating_add(done as u64);
        let read = rustix::io::preadv2(
            file,
            &mut [io::IoSliceMut::new(rest)],
            at,
            ReadWriteFlags::NOWAIT,
        );
        match read {
            Ok(0) => {
                return Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the file ended at {at}, {} bytes short", len - done),
                )))
            }
            Ok(n) => done += n,
            Err(Errno::AGAIN | Errno::NOSYS | Errno::OPNOTSUPP | Errno::INVAL) => return None,
            Err(e) => return Some(Err(e.into())),
        }
    }
    Some(Ok(Bytes::from(buf)))
}

/// Reads exactly `len` bytes at `pos` into the empty `buf`.
fn fill(file: &File, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
    buf.reserve(len);
    while buf.len() < len {
        let at = pos.saturating_add(buf.len() as u64);
        let n = rustix::io::pread(file, rustix::buffer::spare_capacity(&mut *buf), at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the file ended at {at}, {} bytes short", len - buf.len()),
            ));
        }
    }
    // A fresh buffer may have more capacity than asked; what was read
    // past `len` belongs to the next chunk.
    buf.truncate(len);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn cached_reads_read_exactly_or_step_aside() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
        f.write_all(&data).unwrap();
        // Just written: in the page cache. A kernel without RWF_NOWAIT
        // for this file system says so with None, which is also correct.
        if let Some(got) = read_cached(&f, 1000, 500) {
            assert_eq!(&got.unwrap()[..], &data[500..1500]);
            let e = read_cached(&f, 1000, 99_500).unwrap().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        }
    }

    #[test]
    fn reads_exactly_and_reports_short_files() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        assert_eq!(
            &read_pooled(&f, 1000, 500, None).unwrap()[..],
            &data[500..1500]
        );
        assert!(read_pooled(&f, 0, 0, None).unwrap().is_empty());
        let e = read_pooled(&f, 1000, 99_500, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn shared_reads_reuse_their_buffers() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 241) as u8).collect();
        f.write_all(&data).unwrap();
        let first = read_pooled(&f, 300_000, 7, None).unwrap();
        assert_eq!(&first[..], &data[7..300_007]);
        let at = first.as_ptr();
        drop(first);
        // A smaller read gets its own buffer: the kept one would read more.
        let small = read_pooled(&f, 200_000, 0, None).unwrap();
        assert_ne!(small.as_ptr(), at);
        // No other unit test reads through the pool, so the buffer just
        // handed back is the one that fits.
        let second = read_pooled(&f, 300_000, 400_000, None).unwrap();
        assert_eq!(&second[..], &data[400_000..700_000]);
        assert_eq!(second.as_ptr(), at, "the dropped chunk's buffer was reused");
        assert!(read_pooled(&f, 1000, 999_500, None).is_err());
    }

    /// A buffer larger than a chunk (a whole component read at once) is
    /// not kept by the pool, which would hold it for good.
    #[test]
    fn the_pool_keeps_no_buffer_larger_than_a_chunk() {
        let mut f = tempfile::tempfile().unwrap();
        let len = (super::super::READ_CHUNK as usize) + 4096;
        f.write_all(&vec![7u8; len]).unwrap();
        drop(read_pooled(&f, len, 0, None).unwrap());
        let kept = FREE.lock().unwrap().iter().any(|b| b.capacity() >= len);
        assert!(!kept, "a buffer past a chunk stayed in the pool");
    }
}
