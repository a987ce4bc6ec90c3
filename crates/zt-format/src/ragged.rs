//! The rules of ragged (blob) objects: `shape` is `[rows]`, `offsets` holds
//! `rows + 1` little-endian `u64` positions into `values`, starting at 0,
//! never decreasing, the last equal to the number of values. The first two
//! are checked with the manifest; the positions when `offsets` is read
//! ([`check_offsets`]).

use crate::error::Rule;
use crate::manifest::Object;

/// The structural rules, from the manifest alone.
pub(crate) fn check_object(obj: &Object) -> Result<(), (&'static str, Rule)> {
    let [rows] = obj.shape[..] else {
        return Err((
            "offsets",
            Rule::RaggedShape {
                shape: obj.shape.clone(),
            },
        ));
    };
    let expected = rows.checked_add(1).and_then(|n| n.checked_mul(8));
    if let (Some(c), Some(expected)) = (obj.components.get("offsets"), expected) {
        if let Some(actual) = c.decoded_length().filter(|&n| n != expected) {
            return Err(("offsets", Rule::RaggedOffsetsLength { actual, expected }));
        }
    }
    Ok(())
}

/// The positions in `offsets` (decoded bytes), for `values` of `count`
/// elements; the server checks a ragged object's offsets with this before
/// it sends them, as readers do when they read them.
pub fn check_offsets(offsets: &[u8], count: u64) -> Result<(), Rule> {
    let mut check = OffsetsCheck::new(count);
    check.feed(offsets)?;
    check.finish()
}

/// [`check_offsets`] a piece at a time, for offsets read (or decoded) as
/// they arrive: the pieces may split a position anywhere, and nothing but
/// the last position and a split one's bytes is kept.
#[derive(Debug, Clone)]
pub struct OffsetsCheck {
    count: u64,
    prev: Option<u64>,
    row: u64,
    /// The first bytes of a position split between pieces.
    split: [u8; 8],
    held: usize,
}

impl OffsetsCheck {
    /// A check of offsets into `values` of `count` elements.
    pub fn new(count: u64) -> OffsetsCheck {
        OffsetsCheck {
            count,
            prev: None,
            row: 0,
            split: [0; 8],
            held: 0,
        }
    }

    /// The next bytes of the offsets, in order.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Rule> {
        while !bytes.is_empty() {
            let room = self.split.get_mut(self.held..).unwrap_or_default();
            let take = room.len().min(bytes.len());
            let (now, rest) = bytes.split_at(take);
            room.get_mut(..take)
                .unwrap_or_default()
                .copy_from_slice(now);
            bytes = rest;
            self.held = self.held.saturating_add(take);
            if self.held == self.split.len() {
                self.held = 0;
                self.position(u64::from_le_bytes(self.split))?;
            }
        }
        Ok(())
    }

    fn position(&mut self, at: u64) -> Result<(), Rule> {
        let bad = |detail: String| Err(Rule::RaggedOffsets { detail });
        match self.prev {
            None if at != 0 => return bad(format!("start at {at}, not 0")),
            Some(p) if at < p => {
                return bad(format!("decrease at row {}: {at} after {p}", self.row))
            }
            _ => {}
        }
        self.prev = Some(at);
        self.row = self.row.saturating_add(1);
        Ok(())
    }

    /// The rule the offsets break as a whole (the last position against
    /// the values' count), once every byte is fed.
    pub fn finish(self) -> Result<(), Rule> {
        match self.prev {
            Some(last) if last != self.count => Err(Rule::RaggedOffsets {
                detail: format!("end at {last}, but values holds {}", self.count),
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn le(v: &[u64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn a_list_of_strings_round_trips_and_bad_offsets_are_refused_by_the_writer() {
        use crate::{ComponentData, DType, Format, ReadOptions, StoreOptions, Writer, ZtFile};
        let rows: [&[u8]; 3] = [b"ab", b"", b"cde"];
        let mut w = Writer::new(Vec::new(), "r.zt").unwrap();
        w.add_ragged("tokens", &rows, StoreOptions::default())
            .unwrap();
        let bad = le(&[0, 4, 2]);
        let comps = [
            ComponentData {
                role: "offsets",
                dtype: DType::U64,
                logical_type: None,
                data: &bad,
            },
            ComponentData {
                role: "values",
                dtype: DType::U8,
                logical_type: None,
                data: b"ab",
            },
        ];
        let e = w
            .add_object(
                "bad",
                &[2],
                &Format::Ragged,
                Default::default(),
                &comps,
                StoreOptions::default(),
            )
            .unwrap_err();
        assert_eq!(e.rule().unwrap().name(), "ragged-offsets");
        let bytes = w.finish().unwrap();
        let f = ZtFile::from_bytes("r.zt", &bytes, ReadOptions::default()).unwrap();
        assert_eq!(
            &f.read("tokens", "offsets").unwrap()[..],
            &le(&[0, 2, 2, 5])[..]
        );
        assert_eq!(&f.read("tokens", "values").unwrap()[..], b"abcde");
        assert!(f
            .verify()
            .iter()
            .all(|r| matches!(r.status, crate::ComponentStatus::Verified(_))));
    }

    #[test]
    fn positions_start_at_zero_never_decrease_and_end_at_the_count() {
        assert!(check_offsets(&le(&[0, 2, 2, 5]), 5).is_ok());
        assert!(check_offsets(&le(&[1, 2, 5]), 5).is_err());
        assert!(check_offsets(&le(&[0, 3, 2, 5]), 5).is_err());
        assert!(check_offsets(&le(&[0, 2, 4]), 5).is_err());
    }

    /// The check fed in pieces split anywhere agrees with the check of
    /// the whole.
    #[test]
    fn offsets_checked_in_pieces_agree_with_the_whole() {
        let cases: [(&[u64], u64); 5] = [
            (&[0, 2, 2, 5], 5),
            (&[1, 2, 5], 5),
            (&[0, 3, 2, 5], 5),
            (&[0, 2, 4], 5),
            (&[0, 7, 9, 9, 12, 30], 30),
        ];
        for (offsets, count) in cases {
            let bytes = le(offsets);
            let whole = check_offsets(&bytes, count).map_err(|e| e.to_string());
            for step in 1..=bytes.len() {
                let mut check = OffsetsCheck::new(count);
                let fed = bytes.chunks(step).try_for_each(|p| check.feed(p));
                let pieces = fed.and_then(|()| check.finish()).map_err(|e| e.to_string());
                assert_eq!(pieces, whole, "{offsets:?} in pieces of {step}");
            }
        }
    }
}
