//! zstd decoding under a cap, the one place it is done: the output size
//! is known and checked before anything is allocated or decoded, and the
//! data must decode to exactly that size. [`decompress`] decodes a
//! component whole into an aligned buffer; [`Decoder`] piece by piece as
//! the stored bytes arrive, for readers that must not hold a whole decoded
//! component (the daemon's value summaries).

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
    let mut d = Decoder::new(expected, u64::MAX, 1 << 16)?;
    d.feed(stored, |_| Ok::<(), Rule>(()))?;
    d.finish(|_| Ok::<(), Rule>(()))
}

/// The content size a zstd frame header declares, used for legacy files
/// that did not record an uncompressed length.
pub(crate) fn frame_content_size(stored: &[u8]) -> Option<u64> {
    zstd::zstd_safe::get_frame_content_size(stored)
        .ok()
        .flatten()
}

/// A zstd component decoded piece by piece as its stored bytes arrive
/// (pushed with [`Decoder::feed`], in pieces of any size): memory is one
/// decoded piece, however large the component. The decoded size must be
/// exactly `expected`, which is refused before anything is decoded when it
/// passes `cap`; a frame that decodes to more stops as soon as it passes
/// (a decompression bomb costs one piece, and nothing past the claim is
/// handed out), and one that ends short is an error at
/// [`Decoder::finish`].
pub struct Decoder {
    inner: zstd::stream::raw::Decoder<'static>,
    /// The piece being filled, and how much of it is.
    piece: Vec<u8>,
    filled: usize,
    expected: u64,
    done: u64,
    /// Whether the last frame decoded so far is complete.
    frame_ended: bool,
}

impl std::fmt::Debug for Decoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decoder")
            .field("expected", &self.expected)
            .field("done", &self.done)
            .finish()
    }
}

impl Decoder {
    /// A decoder of a component that must decode to exactly `expected`
    /// bytes, at most `cap`, handing them out `piece` bytes at a time
    /// (the last piece shorter).
    pub fn new(expected: u64, cap: u64, piece: usize) -> Result<Self, Rule> {
        if expected > cap {
            return Err(Rule::DecompressOverCap {
                length: expected,
                cap,
            });
        }
        let mut inner = zstd::stream::raw::Decoder::new().map_err(corrupt)?;
        // Frames written with long windows (`--long`) decode as they do
        // whole: the output is capped by `expected` anyway.
        inner
            .set_parameter(zstd::stream::raw::DParameter::WindowLogMax(31))
            .map_err(corrupt)?;
        let piece = usize::try_from(expected)
            .map_or(piece, |e| piece.min(e))
            .max(1);
        Ok(Decoder {
            inner,
            piece: vec![0; piece],
            filled: 0,
            expected,
            done: 0,
            frame_ended: false,
        })
    }

    /// Decodes the next stored bytes, handing each piece filled to `f`, in
    /// order; stops at the first error, the data's or `f`'s.
    pub fn feed<E: From<Rule>>(
        &mut self,
        stored: &[u8],
        mut f: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut at = 0;
        loop {
            let (took, piece) = self.fill(stored.get(at..).unwrap_or_default())?;
            at = at.saturating_add(took);
            match piece {
                Some(piece) => f(piece)?,
                None => return Ok(()),
            }
        }
    }

    /// Decodes from `stored` until a piece is full or every byte of
    /// `stored` is taken, whichever comes first: how many bytes it took,
    /// and the piece when it is full. At most one piece is decoded per
    /// call, whatever the frame's ratio, so a caller that hands pieces on
    /// as they are taken (a response to a slow client) holds one at a
    /// time. Call again with the rest of `stored` (even none: the decoder
    /// may hold more output) until it returns no piece.
    pub fn fill(&mut self, stored: &[u8]) -> Result<(usize, Option<&[u8]>), Rule> {
        use zstd::stream::raw::{InBuffer, Operation as _, OutBuffer};
        let mut input = InBuffer::around(stored);
        loop {
            let (before, read) = (self.filled, input.pos());
            let mut output = OutBuffer::around_pos(&mut self.piece[..], before);
            let hint = self.inner.run(&mut input, &mut output).map_err(corrupt)?;
            self.filled = output.pos();
            // A call that moved nothing says nothing of the frame.
            if self.filled != before || input.pos() != read {
                self.frame_ended = hint == 0;
            }
            self.done = self
                .done
                .saturating_add(self.filled.saturating_sub(before) as u64);
            if self.done > self.expected {
                return Err(Rule::ZstdLength {
                    actual: self.done,
                    expected: self.expected,
                });
            }
            if self.filled == self.piece.len() {
                self.filled = 0;
                return Ok((input.pos(), Some(&self.piece)));
            } else if input.pos() == stored.len() {
                // Room left and nothing more to read: every byte this
                // input yields is out.
                return Ok((input.pos(), None));
            }
        }
    }

    /// Ends the component: hands the last, shorter piece to `f`; an error
    /// if the frame was cut short or decoded to fewer bytes than claimed.
    pub fn finish<E: From<Rule>>(
        mut self,
        mut f: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if self.done != self.expected {
            return Err(Rule::ZstdLength {
                actual: self.done,
                expected: self.expected,
            }
            .into());
        }
        if !self.frame_ended && self.expected > 0 {
            return Err(Rule::ZstdCorrupt {
                detail: "the frame ends before its end mark".to_owned(),
            }
            .into());
        }
        match self.piece.get(..std::mem::take(&mut self.filled)) {
            Some(last) if !last.is_empty() => f(last),
            _ => Ok(()),
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

    /// One piece per call, however much the stored bytes decode to: 1 MiB
    /// of zeros from a few hundred stored bytes comes out 4 KiB a call.
    #[test]
    fn fill_decodes_one_piece_a_call() {
        let z = compress(&vec![0u8; 1 << 20], 3).unwrap();
        let mut d = Decoder::new(1 << 20, 1 << 20, 4096).unwrap();
        let (mut at, mut pieces) = (0, 0);
        while let (took, Some(piece)) = d.fill(z.get(at..).unwrap()).unwrap() {
            at += took;
            assert_eq!(piece, &[0u8; 4096][..]);
            pieces += 1;
        }
        assert_eq!(pieces, 256);
        assert!(z.len() < 4096, "{} stored bytes", z.len());
        d.finish(|_| Ok::<(), Rule>(())).unwrap();
    }

    /// Pieces of exactly the size asked for (the last shorter), the total
    /// exactly as claimed: more stops within a piece of the claim, less is
    /// an error at the end, over the cap is refused before decoding.
    #[test]
    fn a_decoder_hands_out_pieces_and_holds_the_claimed_length() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let z = compress(&data, 3).unwrap();
        // Stored bytes arrive in pieces of any size.
        let decode = |stored: &[u8], expected, cap, f: &mut dyn FnMut(&[u8])| {
            let mut d = Decoder::new(expected, cap, 4096)?;
            for part in stored.chunks(1000) {
                d.feed(part, |p| {
                    f(p);
                    Ok::<(), Rule>(())
                })?;
            }
            d.finish(|p| {
                f(p);
                Ok::<(), Rule>(())
            })
        };
        let mut got = Vec::new();
        let mut sizes = Vec::new();
        decode(&z, 100_000, 1 << 20, &mut |p| {
            sizes.push(p.len());
            got.extend_from_slice(p);
        })
        .unwrap();
        assert_eq!(got, data);
        let (last, whole) = sizes.split_last().unwrap();
        assert!(whole.iter().all(|n| *n == 4096));
        assert_eq!(*last, 100_000 % 4096);
        let each = |expected, cap| decode(&z, expected, cap, &mut |_| {});
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
        // Cut short: the frame's last bytes never arrive.
        let cut = z.get(..z.len() - 8).unwrap();
        assert!(decode(cut, 100_000, 1 << 20, &mut |_| {}).is_err());
        // A bomb: 64 MiB of zeros claimed as 1 KiB stops after a piece.
        let bomb = compress(&vec![0u8; 64 << 20], 19).unwrap();
        let mut seen = 0;
        let e = decode(&bomb, 1024, 1 << 20, &mut |p| seen += p.len());
        assert!(matches!(e, Err(Rule::ZstdLength { .. })));
        assert!(seen <= 1024, "nothing past the claim is handed out");
    }
}
