//! zstd decoding under a cap, the one place it is done: the output size
//! is known and checked before anything is allocated or decoded, and the
//! data must decode to exactly that size. [`decompress`] decodes a
//! component whole into an aligned buffer; [`Decoder`] piece by piece,
//! for readers that must not hold a whole decoded component (the daemon's
//! value summaries).

use std::io::Read;

use crate::aligned::AlignedBuf;
use crate::error::Rule;

/// Default decompression cap: the largest single component we will inflate.
pub const DEFAULT_DECOMPRESS_CAP: u64 = 16 << 30;

/// Decompresses one component into an aligned buffer of exactly
/// `expected` bytes, refused before allocating when that passes `cap`.
pub fn decompress(stored: &[u8], expected: u64, cap: u64) -> Result<AlignedBuf, Rule> {
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
    Decoder::new(stored, expected, u64::MAX)?.each_piece(1 << 16, |_| Ok::<(), Rule>(()))
}

/// The content size a zstd frame header declares, used for legacy files
/// that did not record an uncompressed length.
pub(crate) fn frame_content_size(stored: &[u8]) -> Option<u64> {
    zstd::zstd_safe::get_frame_content_size(stored)
        .ok()
        .flatten()
}

/// A zstd component decoded piece by piece: memory is one piece, however
/// large the component. The decoded size must be exactly `expected`, which
/// is refused before anything is decoded when it passes `cap`; a frame that
/// decodes to more stops as soon as it passes (a decompression bomb costs
/// one piece), and one that ends short is an error at its end.
pub struct Decoder<R: Read> {
    inner: zstd::stream::read::Decoder<'static, std::io::BufReader<R>>,
    expected: u64,
    done: u64,
}

impl<R: Read> std::fmt::Debug for Decoder<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("expected", &self.expected)
            .field("done", &self.done)
            .finish()
    }
}

impl<R: Read> Decoder<R> {
    /// A decoder of the stored bytes `stored` yields, which must decode to
    /// exactly `expected` bytes, at most `cap`.
    pub fn new(stored: R, expected: u64, cap: u64) -> Result<Self, Rule> {
        if expected > cap {
            return Err(Rule::DecompressOverCap {
                length: expected,
                cap,
            });
        }
        let mut inner = zstd::stream::read::Decoder::new(stored).map_err(corrupt)?;
        // Frames written with long windows (`--long`) decode as they do
        // whole: the output is capped by `expected` anyway.
        inner.window_log_max(31).map_err(corrupt)?;
        Ok(Decoder {
            inner,
            expected,
            done: 0,
        })
    }

    /// Fills `buf` with the next decoded bytes: `buf.len()` of them but
    /// for the last piece, and 0 once the component ended at exactly
    /// `expected` bytes.
    pub fn next_piece(&mut self, buf: &mut [u8]) -> Result<usize, Rule> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut filled = 0;
        while filled < buf.len() {
            let n = self
                .inner
                .read(buf.get_mut(filled..).unwrap_or_default())
                .map_err(corrupt)?;
            if n == 0 {
                break;
            }
            filled = filled.saturating_add(n);
            self.done = self.done.saturating_add(n as u64);
            if self.done > self.expected {
                return Err(Rule::ZstdLength {
                    actual: self.done,
                    expected: self.expected,
                });
            }
        }
        if filled == 0 && self.done != self.expected {
            return Err(Rule::ZstdLength {
                actual: self.done,
                expected: self.expected,
            });
        }
        Ok(filled)
    }

    /// Hands every decoded piece of `piece` bytes (the last one shorter)
    /// to `f`, in order; stops at the first error, the data's or `f`'s.
    pub fn each_piece<E: From<Rule>>(
        mut self,
        piece: usize,
        mut f: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut buf = vec![0u8; piece.max(1)];
        loop {
            let n = self.next_piece(&mut buf)?;
            if n == 0 {
                return Ok(());
            }
            f(buf.get(..n).unwrap_or_default())?;
        }
    }
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

    /// Pieces of exactly the size asked for (the last shorter), the total
    /// exactly as claimed: more stops within a piece of the claim, less is
    /// an error at the end, over the cap is refused before decoding.
    #[test]
    fn a_decoder_hands_out_pieces_and_holds_the_claimed_length() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let z = compress(&data, 3).unwrap();
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        Decoder::new(&z[..], 100_000, 1 << 20)
            .unwrap()
            .each_piece(4096, |p| {
                sizes.push(p.len());
                got.extend_from_slice(p);
                Ok::<(), Rule>(())
            })
            .unwrap();
        assert_eq!(got, data);
        let (last, whole) = sizes.split_last().unwrap();
        assert!(whole.iter().all(|n| *n == 4096));
        assert_eq!(*last, 100_000 % 4096);
        let each = |expected, cap| {
            Decoder::new(&z[..], expected, cap)
                .and_then(|d| d.each_piece(4096, |_| Ok::<(), Rule>(())))
        };
        assert!(matches!(
            each(99_999, 1 << 20),
            Err(Rule::ZstdLength { .. })
        ));
        assert!(matches!(
            each(100_001, 1 << 20),
            Err(Rule::ZstdLength { .. })
        ));
        assert!(matches!(
            each(100_000, 10),
            Err(Rule::DecompressOverCap { .. })
        ));
        // A bomb: 64 MiB of zeros claimed as 1 KiB stops after a piece.
        let bomb = compress(&vec![0u8; 64 << 20], 19).unwrap();
        let mut seen = 0;
        let e = Decoder::new(&bomb[..], 1024, 1 << 20)
            .unwrap()
            .each_piece(4096, |p| {
                seen += p.len();
                Ok::<(), Rule>(())
            });
        assert!(matches!(e, Err(Rule::ZstdLength { .. })));
        assert_eq!(seen, 0, "nothing past the claim is handed out");
    }
}
