//! Positioned reads of a local file into pooled buffers, never zeroed
//! twice.
//!
//! Chunks on their way to a client come from a small pool and go back to
//! it when the transport drops them (once sent over HTTP, once
//! acknowledged over QUIC): the allocator would otherwise hand freed
//! chunks back to the kernel, and each read would fault in (and zero)
//! fresh pages, or `memset` its buffer before the kernel overwrites it
//! (a fifth of the daemon's CPU under many small ranges). A pooled buffer
//! keeps what it has initialized: reused, it is read into as it is. A
//! fresh one read on the blocking pool ([`read_pooled`]) is read into its
//! spare capacity (rustix's `pread` into `spare_capacity`), never zeroed;
//! one read on the runtime ([`read_cached`]) is zeroed once, then reused.
//! [`read_cached`] reads from the page cache without blocking, or not at
//! all.

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
    // A fresh buffer is read into as it is; a reused one's bytes past
    // what it has initialized are zeroed first (few, or none).
    let read = match buf.is_empty() {
        true => fill_spare(file, &mut buf, len, pos),
        false => {
            if buf.len() < len {
                buf.resize(len, 0);
            }
            fill_init(file, buf.get_mut(..len).unwrap_or_default(), pos)
        }
    };
    shared(buf, len, read, permit)
}

/// Reads exactly `len` bytes of `file` at `pos` into a buffer of their
/// own, not pooled and never zeroed: for bytes kept long after the read
/// (ztp/1's kept chunks), whose allocation is then what they hold (a
/// pooled buffer may be half again as large).
pub(crate) fn read_unpooled(file: &File, len: usize, pos: u64) -> io::Result<Bytes> {
    let mut buf = Vec::with_capacity(len);
    fill_spare(file, &mut buf, len, pos)?;
    // A capacity over `len` may have been read into past it.
    buf.truncate(len);
    Ok(Bytes::from(buf))
}

/// The pooled `buf`'s first `len` bytes as [`Bytes`] once `read` went
/// well; `buf` back to the pool otherwise.
fn shared(
    buf: Vec<u8>,
    len: usize,
    read: io::Result<()>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
) -> io::Result<Bytes> {
    match read {
        Ok(()) => Ok(Bytes::from_owner(Pooled {
            buf,
            len,
            _held: permit,
        })),
        Err(e) => {
            give(buf);
            Err(e)
        }
    }
}

/// Free read buffers, oldest first, each with what it has initialized as
/// its length, and their capacity in all.
static FREE: Mutex<Free> = Mutex::new(Free {
    bufs: Vec::new(),
    bytes: 0,
});

struct Free {
    bufs: Vec<Vec<u8>>,
    bytes: usize,
}

/// Most bytes the free buffers hold (their capacity).
const KEEP_BYTES: usize = 16 << 20;

/// Smaller buffers are not worth keeping.
const KEEP_FROM: usize = 64 << 10;

/// Larger buffers are no chunk's.
const KEEP_UP_TO: usize = super::READ_CHUNK as usize;

impl Free {
    /// The smallest free buffer of `len..=most` bytes' capacity.
    fn take(&mut self, len: usize, most: usize) -> Option<Vec<u8>> {
        let (i, _) = self
            .bufs
            .iter()
            .enumerate()
            .filter(|(_, b)| (len..=most).contains(&b.capacity()))
            .min_by_key(|(_, b)| b.capacity())?;
        // In order: the others keep their age.
        let buf = self.bufs.remove(i);
        self.bytes -= buf.capacity();
        Some(buf)
    }

    /// Keeps `buf`, dropping the oldest buffers past [`KEEP_BYTES`], so
    /// sizes no longer asked for age out.
    fn give(&mut self, buf: Vec<u8>) {
        while self.bytes + buf.capacity() > KEEP_BYTES && !self.bufs.is_empty() {
            let old = self.bufs.remove(0);
            self.bytes -= old.capacity();
        }
        self.bytes += buf.capacity();
        self.bufs.push(buf);
    }
}

/// A buffer with room for `len` bytes: a free one no more than half
/// again as large (the smallest such), or a fresh one of exactly `len`
/// (a larger one would have a read into its spare capacity read past
/// `len`, work thrown away). Its length is what it has initialized.
fn take(len: usize) -> Vec<u8> {
    let most = len.saturating_add(len / 2);
    let reused = (len >= KEEP_FROM)
        .then(|| FREE.lock().ok()?.take(len, most))
        .flatten();
    reused.unwrap_or_else(|| Vec::with_capacity(len))
}

fn give(buf: Vec<u8>) {
    // A buffer larger than a chunk (a whole component read at once) is
    // not kept: the pool would hold it for good.
    if !(KEEP_FROM..=KEEP_UP_TO).contains(&buf.capacity()) {
        return;
    }
    if let Ok(mut free) = FREE.lock() {
        free.give(buf);
    }
}

/// A pooled buffer owned by [`Bytes`], of which the first `len` bytes
/// were read; dropping it returns the buffer (and then the budget it
/// held, if any).
struct Pooled {
    buf: Vec<u8>,
    len: usize,
    /// Released after the buffer goes back to the pool.
    _held: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
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
/// [`CACHED_READ_MAX`]; what `preadv2` reads into must be initialized, so
/// a buffer that is not yet is zeroed (once: it is pooled).
pub(crate) fn read_cached(file: &File, len: usize, pos: u64) -> Option<io::Result<Bytes>> {
    use rustix::io::{Errno, ReadWriteFlags};
    let mut buf = take(len);
    if buf.len() < len {
        buf.resize(len, 0);
    }
    let mut done = 0;
    let read = loop {
        if done >= len {
            break Ok(());
        }
        let rest = buf.get_mut(done..len).unwrap_or_default();
        let at = pos.saturating_add(done as u64);
        let read = rustix::io::preadv2(
            file,
            &mut [io::IoSliceMut::new(rest)],
            at,
            ReadWriteFlags::NOWAIT,
        );
        match read {
            Ok(0) => break Err(short(at, len - done)),
            Ok(n) => done += n,
            Err(Errno::AGAIN | Errno::NOSYS | Errno::OPNOTSUPP | Errno::INVAL) => {
                give(buf);
                return None;
            }
            Err(e) => break Err(e.into()),
        }
    };
    Some(shared(buf, len, read, None))
}

fn short(at: u64, missing: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the file ended at {at}, {missing} bytes short"),
    )
}

/// Reads exactly `buf.len()` bytes at `pos` into `buf`.
fn fill_init(file: &File, buf: &mut [u8], pos: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let at = pos.saturating_add(done as u64);
        let rest = buf.get_mut(done..).unwrap_or_default();
        match rustix::io::pread(file, &mut *rest, at)? {
            0 => return Err(short(at, rest.len())),
            n => done += n,
        }
    }
    Ok(())
}

/// Reads exactly `len` bytes at `pos` into the empty `buf`'s spare
/// capacity, never zeroing it.
fn fill_spare(file: &File, buf: &mut Vec<u8>, len: usize, pos: u64) -> io::Result<()> {
    buf.reserve(len);
    while buf.len() < len {
        let at = pos.saturating_add(buf.len() as u64);
        let n = rustix::io::pread(file, rustix::buffer::spare_capacity(&mut *buf), at)?;
        if n == 0 {
            return Err(short(at, len - buf.len()));
        }
    }
    // A buffer may have more capacity than asked; what was read past
    // `len` belongs to the next chunk, but is initialized all the same.
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
        // Unpooled reads too: exactly the bytes asked for, not what the
        // buffer's capacity let the kernel read past them.
        for (len, pos) in [(1000, 500), (65_537, 3), (0, 0), (500, 99_500)] {
            let got = read_unpooled(&f, len, pos).unwrap();
            assert_eq!(&got[..], &data[pos as usize..pos as usize + len]);
        }
        let e = read_unpooled(&f, 1000, 99_500).unwrap_err();
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
        // A read of less than two thirds of a kept buffer gets its own.
        let small = read_pooled(&f, 190_000, 0, None).unwrap();
        assert_ne!(small.as_ptr(), at);
        // No other unit test reads through the pool, so the buffer just
        // handed back is the one that fits.
        let second = read_pooled(&f, 300_000, 400_000, None).unwrap();
        assert_eq!(&second[..], &data[400_000..700_000]);
        assert_eq!(second.as_ptr(), at, "the dropped chunk's buffer was reused");
        assert!(read_pooled(&f, 1000, 999_500, None).is_err());
    }

    /// A kept buffer is read into again as it is, by either kind of read,
    /// whatever it held, and only up to the length asked for.
    #[test]
    fn reused_buffers_hold_exactly_the_bytes_read() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 239) as u8).collect();
        f.write_all(&data).unwrap();
        let (a, b) = (1_500_000, 1_400_000);
        drop(read_pooled(&f, a, 11, None).unwrap());
        // Reuses the buffer of `a` bytes: a shorter read sees none of
        // what it held past its own length.
        let got = read_pooled(&f, b, 300_000, None).unwrap();
        assert_eq!(&got[..], &data[300_000..300_000 + b]);
        drop(got);
        if let Some(got) = read_cached(&f, b - 1, 3) {
            assert_eq!(&got.unwrap()[..], &data[3..3 + b - 1]);
        }
        // A read past the end hands its buffer back and says so.
        let e = read_pooled(&f, b, 1_999_000, None).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let got = read_pooled(&f, a, 0, None).unwrap();
        assert_eq!(&got[..], &data[..a]);
    }

    /// The pool holds at most `KEEP_BYTES` however many buffers come
    /// back, dropping the oldest first.
    #[test]
    fn the_pool_is_bounded_in_bytes_and_drops_the_oldest() {
        let mut free = Free {
            bufs: Vec::new(),
            bytes: 0,
        };
        let mb = 1 << 20;
        for i in 0..100 {
            let mut b = Vec::with_capacity(mb + i);
            b.push(i as u8);
            free.give(b);
            let held: usize = free.bufs.iter().map(Vec::capacity).sum();
            assert_eq!(held, free.bytes);
            assert!(free.bytes <= KEEP_BYTES, "{} bytes kept", free.bytes);
        }
        // The newest are kept; the first ones aged out.
        assert!(free.take(mb, mb + 10).is_none());
        let newest = free.take(mb + 99, mb + 99).unwrap();
        assert_eq!(newest[0], 99);
    }

    /// A buffer larger than a chunk (a whole component read at once) is
    /// not kept by the pool, which would hold it for good.
    #[test]
    fn the_pool_keeps_no_buffer_larger_than_a_chunk() {
        let mut f = tempfile::tempfile().unwrap();
        let len = (super::super::READ_CHUNK as usize) + 4096;
        f.write_all(&vec![7u8; len]).unwrap();
        drop(read_pooled(&f, len, 0, None).unwrap());
        let kept = FREE
            .lock()
            .unwrap()
            .bufs
            .iter()
            .any(|b| b.capacity() >= len);
        assert!(!kept, "a buffer past a chunk stayed in the pool");
    }
}
