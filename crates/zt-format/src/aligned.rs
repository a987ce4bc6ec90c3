//! A heap buffer whose start is 64-byte aligned, built without `unsafe`:
//! it is a vector of 64-byte blocks viewed as bytes through `bytemuck`.

use std::fmt;

use bytemuck::{Pod, Zeroable};

use crate::error::Rule;

/// The alignment of every component blob, and of every buffer we hand out.
pub const ALIGNMENT: u64 = 64;

#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// An owned byte buffer that starts on a 64-byte boundary.
#[derive(Clone, Default)]
pub struct AlignedBuf {
    blocks: Vec<Block>,
    len: usize,
}

impl AlignedBuf {
    /// A zero-filled buffer of `len` bytes. Fails instead of aborting when
    /// the memory cannot be had.
    pub fn zeroed(len: u64) -> Result<Self, Rule> {
        let too_big = || Rule::DecompressOverCap {
            length: len,
            cap: usize::MAX as u64,
        };
        let len = usize::try_from(len).map_err(|_| too_big())?;
        let n = len.div_ceil(64);
        // Zeroed by the allocator: fresh pages come zero from the kernel,
        // so a large buffer costs no extra pass over its bytes.
        let blocks = bytemuck::allocation::try_zeroed_vec::<Block>(n).map_err(|()| too_big())?;
        Ok(AlignedBuf { blocks, len })
    }

    /// Copies `data` into a new aligned buffer.
    pub fn copy_from(data: &[u8]) -> Result<Self, Rule> {
        let mut b = AlignedBuf::zeroed(data.len() as u64)?;
        b.as_mut_slice().copy_from_slice(data);
        Ok(b)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice(&self) -> &[u8] {
        let all: &[u8] = bytemuck::cast_slice(&self.blocks);
        all.get(..self.len).unwrap_or_default()
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len;
        let all: &mut [u8] = bytemuck::cast_slice_mut(&mut self.blocks);
        all.get_mut(..len).unwrap_or_default()
    }

    /// Shortens the buffer; bytes past `len` are kept zeroed for reuse.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len {
            if let Some(tail) = self.as_mut_slice().get_mut(len..) {
                tail.fill(0);
            }
            self.len = len;
        }
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .finish()
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_sized() {
        for len in [0u64, 1, 63, 64, 65, 1000] {
            let b = AlignedBuf::zeroed(len).unwrap();
            assert_eq!(b.len() as u64, len);
            assert_eq!(b.as_slice().as_ptr() as usize % 64, 0);
        }
        let b = AlignedBuf::copy_from(b"hello").unwrap();
        assert_eq!(b.as_slice(), b"hello");
    }
}
