//! Which share of a spread fetch carries which component (the feature
//! `shares`, PROTOCOL.md section 4): in the request's order, each
//! component goes to the share with the fewest bytes so far, the lowest
//! index on a tie. Every share then moves through the order at the same
//! pace in bytes, so connections of equal speed stay at the same layer
//! (dealing components out by count let the share that drew a large
//! embedding fall a layer or more behind the others).

/// The share (`0..count`) of each component, given their lengths in the
/// request's order; `count` of 0 counts as 1, more than
/// [`crate::MAX_SHARES`] as that many. A heap keeps the least-loaded share
/// at hand: a million components cost a million heap steps, not a
/// million scans of the shares.
pub fn assign(lengths: impl IntoIterator<Item = u64>, count: u64) -> Vec<u64> {
    use std::cmp::Reverse;
    let count = count.clamp(1, crate::MAX_SHARES);
    // (bytes so far, index), least first: ties go to the lowest index.
    let mut least: std::collections::BinaryHeap<Reverse<(u64, u64)>> =
        (0..count).map(|i| Reverse((0, i))).collect();
    lengths
        .into_iter()
        .map(|len| match least.pop() {
            Some(Reverse((bytes, index))) => {
                least.push(Reverse((bytes.saturating_add(len), index)));
                index
            }
            None => 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_components_are_dealt_in_turn() {
        assert_eq!(assign([5; 7], 3), [0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(assign([5; 3], 1), [0, 0, 0]);
        assert_eq!(assign([5; 3], 0), [0, 0, 0]);
    }

    #[test]
    fn a_large_component_is_balanced_by_the_next_ones() {
        // The 100-byte embedding goes to share 0; share 1 takes what
        // follows until it has caught up.
        assert_eq!(
            assign([100, 10, 10, 10, 90, 10, 10], 2),
            [0, 1, 1, 1, 1, 0, 0]
        );
        // Empty components go where the least is, the lowest index first.
        assert_eq!(assign([0, 0, 4, 4], 2), [0, 0, 0, 1]);
    }

    #[test]
    fn every_share_stays_within_one_component_of_the_others() {
        let lengths: Vec<u64> = (0..200u64).map(|i| (i * 7919) % 1000 + 1).collect();
        for count in 1..=8u64 {
            let shares = assign(lengths.iter().copied(), count);
            let mut load = vec![0u64; count as usize];
            for (len, s) in lengths.iter().zip(&shares) {
                load[*s as usize] += len;
            }
            let (most, least) = (load.iter().max().unwrap(), load.iter().min().unwrap());
            assert!(most - least <= 1000, "{count}: {load:?}");
        }
    }
}
