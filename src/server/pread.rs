//! Positioned reads of served bytes into fresh buffers, without zeroing
//! them first: the kernel writes straight into the vector's spare
//! capacity (rustix's `pread` into `spare_capacity`), which grows the
//! vector by what was read. A buffer the size of a read chunk would
//! otherwise be `memset` before every read.

use std::fs::File;
use std::io;

/// Reads exactly `len` bytes of `file` at `pos`; `UnexpectedEof` if the
/// file ends first (it was truncated under the daemon).
pub fn read_exact_at(file: &File, len: usize, pos: u64) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(len);
    while buf.len() < len {
        let at = pos.saturating_add(buf.len() as u64);
        let n = rustix::io::pread(file, rustix::buffer::spare_capacity(&mut buf), at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the file ended at {at}, {} bytes short", len - buf.len()),
            ));
        }
    }
    // The allocator may have given more capacity than asked; what was read
    // past `len` belongs to the next chunk.
    buf.truncate(len);
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_exactly_and_reports_short_files() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        assert_eq!(read_exact_at(&f, 1000, 500).unwrap(), &data[500..1500]);
        assert_eq!(read_exact_at(&f, 0, 0).unwrap(), Vec::<u8>::new());
        let e = read_exact_at(&f, 1000, 99_500).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
