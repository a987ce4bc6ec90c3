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
    let bad = |detail: String| Err(Rule::RaggedOffsets { detail });
    let mut prev: Option<u64> = None;
    for (i, chunk) in offsets.chunks_exact(8).enumerate() {
        let mut le = [0u8; 8];
        le.copy_from_slice(chunk);
        let at = u64::from_le_bytes(le);
        match prev {
            None if at != 0 => return bad(format!("start at {at}, not 0")),
            Some(p) if at < p => return bad(format!("decrease at row {i}: {at} after {p}")),
            _ => {}
        }
        prev = Some(at);
    }
    match prev {
        Some(last) if last != count => bad(format!("end at {last}, but values holds {count}")),
        _ => Ok(()),
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
}
