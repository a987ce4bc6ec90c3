//! Finding where CBOR items end by their heads and lengths alone, without
//! decoding them: how a large map is cut into pieces that are then decoded
//! apart (`objects_parallel`). The scan checks nothing the decoder checks
//! (text, duplicate keys, depth); it only has to agree with the decoder on
//! where well-formed items end, and it gives up (`None`) on anything else,
//! for the decoder to report.

/// The position just past the `count` items that start at `pos` of `buf`;
/// `None` when the bytes end first, or on an indefinite length, a reserved
/// head or a break (the map is then decoded serially: slower, and the
/// same).
pub(crate) fn past_items(buf: &[u8], mut pos: usize, count: u64) -> Option<usize> {
    // Items still to pass over; an array or map adds its entries.
    let mut pending = count;
    while pending > 0 {
        pending = pending.checked_sub(1)?;
        let b = *buf.get(pos)?;
        pos = pos.checked_add(1)?;
        let (major, info) = (b >> 5, b & 0x1f);
        let arg = match info {
            0..=23 => u64::from(info),
            24..=27 => {
                let n = 1usize << (info.checked_sub(24)?);
                let bytes = buf.get(pos..pos.checked_add(n)?)?;
                pos = pos.checked_add(n)?;
                bytes.iter().fold(0u64, |v, &b| v << 8 | u64::from(b))
            }
            _ => return None,
        };
        // Each item takes a byte at least: a count past what is left is
        // malformed, whatever it claims.
        let left = buf.len().saturating_sub(pos) as u64;
        match major {
            0 | 1 | 7 => {}
            2 | 3 => {
                pos = pos.checked_add(usize::try_from(arg).ok().filter(|&n| n as u64 <= left)?)?
            }
            4 if arg <= left => pending = pending.checked_add(arg)?,
            5 if arg <= left / 2 => pending = pending.checked_add(arg.checked_mul(2)?)?,
            6 => pending = pending.checked_add(1)?,
            _ => return None,
        }
    }
    Some(pos)
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;
    use ciborium::Value as V;

    fn enc(v: &V) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::ser::into_writer(v, &mut out).unwrap();
        out
    }

    /// Every kind of definite item ends where the encoder ended it, alone
    /// and followed by others.
    #[test]
    fn ends_where_the_encoder_ended() {
        let items = [
            V::Integer(0.into()),
            V::Integer(24.into()),
            V::Integer(70_000.into()),
            V::Integer((-1_000_000_000_000i64).into()),
            V::Integer(u64::MAX.into()),
            V::Float(1.5),
            V::Float(1e300),
            V::Bool(true),
            V::Null,
            V::Text("x".repeat(300)),
            V::Bytes(vec![7; 70_000]),
            V::Tag(2, Box::new(V::Bytes(vec![1, 2]))),
            V::Array(vec![V::Null, V::Array(vec![V::Integer(1.into())])]),
            V::Map(vec![(
                V::Text("k".into()),
                V::Map(vec![(V::Integer(3.into()), V::Text("v".into()))]),
            )]),
        ];
        let mut all = Vec::new();
        for item in &items {
            let one = enc(item);
            assert_eq!(past_items(&one, 0, 1), Some(one.len()), "{item:?}");
            // Cut short: the scan gives up rather than guess.
            assert_eq!(past_items(&one[..one.len() - 1], 0, 1), None, "{item:?}");
            all.extend_from_slice(&one);
        }
        assert_eq!(past_items(&all, 0, items.len() as u64), Some(all.len()));
        assert_eq!(past_items(&all, 0, items.len() as u64 + 1), None);
    }

    /// Indefinite lengths, breaks, reserved heads and counts past the end
    /// are left to the decoder.
    #[test]
    fn gives_up_on_what_it_does_not_read() {
        for bad in [
            &[0x9f, 0x01, 0xff][..],
            &[0xbf, 0xff],
            &[0x7f, 0xff],
            &[0xff],
            &[0x1c],
            &[0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            &[0xbb, 0x80, 0, 0, 0, 0, 0, 0, 0],
            &[0x5b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        ] {
            assert_eq!(past_items(bad, 0, 1), None, "{bad:02x?}");
        }
    }
}
