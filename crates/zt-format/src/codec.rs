//! zstd decoding under a cap: the output size is known and checked before
//! anything is allocated, and the data must decode to exactly that size.

use std::io::Read;

use crate::aligned::AlignedBuf;
use crate::error::Rule;

/// Default decompression cap: the largest single component we will inflate.
pub const DEFAULT_DECOMPRESS_CAP: u64 = 16 << 30;

/// Decompresses one component into an aligned buffer of exactly `expected` bytes.
pub(crate) fn decompress(stored: &[u8], expected: u64, cap: u64) -> Result<AlignedBuf, Rule> {
    if expected > cap {
        return Err(Rule::DecompressOverCap {
            length: expected,
            cap,
        });
    }
    let mut out = AlignedBuf::zeroed(expected)?;
    let mut dec = zstd::bulk::Decompressor::new().map_err(corrupt)?;
    let written = dec
        .decompress_to_buffer(stored, out.as_mut_slice())
        .map_err(|e| {
            // A too-small destination means the data holds more than it says.
            if e.to_string().contains("too small") {
                Rule::ZstdLength {
                    actual: expected.saturating_add(1),
                    expected,
                }
            } else {
                corrupt(e)
            }
        })?;
    if written as u64 != expected {
        return Err(Rule::ZstdLength {
            actual: written as u64,
            expected,
        });
    }
    Ok(out)
}

/// Counts the decoded bytes of `stored` without keeping them, stopping once
/// they exceed `expected`. Verification uses it so that a 40 GiB claim costs
/// nothing but time bounded by the stored size times the zstd ratio limit.
pub(crate) fn check_length(stored: &[u8], expected: u64) -> Result<(), Rule> {
    let mut dec = zstd::stream::read::Decoder::with_buffer(stored).map_err(corrupt)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = dec.read(&mut buf).map_err(corrupt)?;
        if n == 0 {
            break;
        }
        total = total.saturating_add(n as u64);
        if total > expected {
            return Err(Rule::ZstdLength {
                actual: total,
                expected,
            });
        }
    }
    if total != expected {
        return Err(Rule::ZstdLength {
            actual: total,
            expected,
        });
    }
    Ok(())
}

/// The content size a zstd frame header declares, used for legacy files
/// that did not record an uncompressed length.
pub(crate) fn frame_content_size(stored: &[u8]) -> Option<u64> {
    zstd::zstd_safe::get_frame_content_size(stored)
        .ok()
        .flatten()
}

fn corrupt(e: std::io::Error) -> Rule {
    Rule::ZstdCorrupt {
        detail: e.to_string(),
    }
}

/// Compresses `data` at `level` as one zstd frame with its content size.
pub(crate) fn compress(data: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    let mut c = zstd::bulk::Compressor::new(level)?;
    c.include_contentsize(true)?;
    c.compress(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_caps() {
        let data = vec![7u8; 10_000];
        let z = compress(&data, 3).unwrap();
        assert_eq!(
            decompress(&z, 10_000, 1 << 20).unwrap().as_slice(),
            &data[..]
        );
        assert!(matches!(
            decompress(&z, 10_000, 100),
            Err(Rule::DecompressOverCap { .. })
        ));
        assert!(matches!(
            decompress(&z, 9_999, 1 << 20),
            Err(Rule::ZstdLength { .. })
        ));
        assert!(matches!(
            decompress(&z, 10_001, 1 << 20),
            Err(Rule::ZstdLength { .. })
        ));
        assert!(check_length(&z, 10_000).is_ok());
        assert!(check_length(&z, 40 << 30).is_err());
        assert_eq!(frame_content_size(&z), Some(10_000));
        assert!(matches!(
            decompress(b"garbage", 10, 100),
            Err(Rule::ZstdCorrupt { .. })
        ));
    }
}
