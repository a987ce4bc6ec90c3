//! Decoding a large manifest's objects on several threads at once.
//!
//! The objects map is cut into pieces of whole entries by their heads and
//! lengths alone ([`past_items`]), and each piece is decoded by the same
//! code as the serial path (`parse_v1::object`, which the caller passes)
//! on its own scoped thread, the first on the caller's. The pieces are joined in the map's order, so
//! the caller goes on as if it had read them one after another (the sort
//! that finds a name given twice included). Anything not as a well-formed
//! manifest's (a fault, a key that is not text, an indefinite length, a
//! piece not ending where the next begins) gives the map back to the
//! serial decoder, which then reports what it finds exactly as it always
//! does: this path only ever changes how fast a good manifest is read.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::cbor_reader::{Head, Reader};
use crate::cbor_scan::past_items;
use crate::error::Rule;
use crate::manifest::Object;

/// Objects a piece is given at least (the last may have a few less):
/// fewer decode in less time than a thread takes to start.
pub(crate) const MIN_PER_THREAD: usize = 1024;

/// Objects by name, in the map's order.
pub(crate) type Entries = Vec<(Box<str>, Object)>;

/// The objects map at `r` decoded on up to `threads` threads of at least
/// `min_per_thread` objects each, with `r` moved past it; `None`, with `r`
/// where it was, when it is not worth it (fewer objects, one thread),
/// `room` refuses its announced size, or anything in it is left to the
/// serial decoder (above). `object` reads one object's map.
pub(crate) fn objects<F>(
    r: &mut Reader<'_>,
    threads: usize,
    min_per_thread: usize,
    room: &dyn Fn(usize) -> Result<(), Rule>,
    object: F,
) -> Option<Entries>
where
    F: Fn(&mut Reader<'_>) -> Option<Object> + Sync,
{
    let object = &object;
    let mut head = r.clone();
    let Ok(Head::Map(Some(n))) = head.head() else {
        return None;
    };
    let n = usize::try_from(n).ok()?;
    let threads = threads_for(n, threads, min_per_thread);
    if threads < 2 || room(n).is_err() {
        return None;
    }
    let per = n.div_ceil(threads);
    let buf = r.bytes();
    // Set on the first failure: the other pieces stop, their work wasted
    // (the serial decoder reads the map again).
    let failed = AtomicBool::new(false);
    let failed = &failed;
    let (entries, end) = std::thread::scope(|s| {
        // Each piece after the first starts on a thread as soon as the
        // scan has passed the pieces before it (`per` entries, a key and
        // its value each, at a time); the last is never scanned: its
        // decoder finds where the map ends.
        let mut pos = head.position();
        let first = (head.inside_at(pos)?, per);
        let mut spawned = Vec::with_capacity(threads);
        let mut left = n.saturating_sub(per);
        while left > 0 {
            let scanned = spawned.last().map_or(per, |&(_, _, count)| count);
            pos = past_items(buf, pos, (scanned as u64).checked_mul(2)?)?;
            let count = per.min(left);
            let r = head.inside_at(pos)?;
            let on_thread = r.clone();
            // A thread that cannot be started leaves its piece to this one.
            let t = std::thread::Builder::new()
                .name("zt-manifest".to_owned())
                .spawn_scoped(s, move || {
                    let mut out = Entries::with_capacity(count);
                    piece(on_thread, count, &mut out, failed, object).map(|end| (out, end))
                })
                .map_err(|_| r);
            spawned.push((pos, t, count));
            left = left.saturating_sub(count);
        }
        // The first piece goes straight where all of them end, and each
        // must end where the next begins.
        let mut all = Entries::with_capacity(n);
        let mut end = piece(first.0, first.1, &mut all, failed, object);
        for (start, t, count) in spawned {
            end = match (end, t) {
                (Some(end), _) if end != start => None,
                (None, _) => None,
                (Some(_), Ok(handle)) => handle.join().ok().flatten().map(|(mut out, end)| {
                    all.append(&mut out);
                    end
                }),
                (Some(_), Err(r)) => piece(r, count, &mut all, failed, object),
            };
            if end.is_none() {
                failed.store(true, Ordering::Relaxed);
            }
        }
        Some((all, end?))
    })?;
    r.move_to(end);
    Some(entries)
}

/// How many threads a map of `n` objects may be decoded on when `threads`
/// are asked: at most one per `min_per_thread` objects, and never more
/// than [`crate::MAX_DECODE_THREADS`], however many are asked. (Pieces of
/// `n.div_ceil(threads)` objects may need fewer.)
fn threads_for(n: usize, threads: usize, min_per_thread: usize) -> usize {
    let most = n.checked_div(min_per_thread.max(1)).unwrap_or(0);
    threads.min(most).min(crate::MAX_DECODE_THREADS)
}

/// `count` entries from `r` onto `out`; where they end. Stops early once
/// `failed` is set, and sets it on a failure of its own.
fn piece<F>(
    mut r: Reader<'_>,
    count: usize,
    out: &mut Entries,
    failed: &AtomicBool,
    object: &F,
) -> Option<usize>
where
    F: Fn(&mut Reader<'_>) -> Option<Object>,
{
    let mut one = || {
        let name = r.text("object name").ok()?;
        let obj = object(&mut r)?;
        out.push((name.into(), obj));
        Some(())
    };
    for _ in 0..count {
        if failed.load(Ordering::Relaxed) || one().is_none() {
            failed.store(true, Ordering::Relaxed);
            return None;
        }
    }
    Some(r.position())
}

#[cfg(test)]
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
mod tests {
    use super::*;
    use crate::parse_v1::check_against_serial;
    use crate::{DType, DigestAlgorithm, StoreOptions, Writer};

    /// A `.zt` file's bare manifest of `n` objects, some with several
    /// components, attributes, and names out of order.
    fn manifest_bytes(n: usize) -> Vec<u8> {
        let mut w = Writer::new(Vec::new(), "t.zt").unwrap();
        for i in 0..n {
            let name = format!("o.{}.{}", n - i, i % 7);
            let store = StoreOptions {
                zstd_level: (i % 5 == 0).then_some(3),
                digest: Some(match i % 3 {
                    0 => DigestAlgorithm::Crc32c,
                    _ => DigestAlgorithm::Sha256,
                }),
            };
            let data: Vec<u8> = (0..16).map(|j| (i + j) as u8).collect();
            w.add_dense(&name, &[4, 4], DType::U8, &data, store)
                .unwrap();
        }
        let file = w.finish().unwrap();
        let f = crate::ZtFile::from_bytes("t.zt", &file, crate::ReadOptions::default()).unwrap();
        crate::manifest_cbor(f.manifest())
    }

    fn read(r: &mut Reader<'_>) -> Option<Object> {
        crate::parse_v1::object(r).ok()
    }

    /// Good manifests read the same in pieces as serially, whatever the
    /// pieces, and the pieces are used (the reader ends past the map).
    #[test]
    fn good_manifests_read_the_same_in_pieces() {
        for n in [0, 1, 2, 3, 10, 101] {
            let bytes = manifest_bytes(n);
            check_against_serial(&bytes);
        }
        let bytes = manifest_bytes(50);
        let at = bytes.windows(8).position(|w| w == b"gobjects").unwrap() + 8;
        let mut r = Reader::at(&bytes, at, 16);
        let room = |_| Ok(());
        let entries = objects(&mut r, 4, 5, &room, read).expect("decoded in pieces");
        assert_eq!(entries.len(), 50);
        assert!(r.is_at_end(), "the reader is past the objects map");
        // Too few objects for the pieces asked, or one thread: the serial path.
        let mut r = Reader::at(&bytes, at, 16);
        assert!(objects(&mut r, 4, 26, &room, read).is_none());
        assert!(objects(&mut r, 1, 1, &room, read).is_none());
        assert_eq!(r.position(), at, "a reader given back is where it was");
        // A map past the memory cap goes to the serial path, which refuses it.
        let refuse = |_| Err(Rule::CborTooDeep { limit: 0 });
        assert!(objects(&mut r, 4, 5, &refuse, read).is_none());
    }

    /// However many threads are asked, a decode starts at most
    /// MAX_DECODE_THREADS, and one per `min_per_thread` objects; a map
    /// asked for more reads the same as serially.
    #[test]
    fn threads_are_capped() {
        use crate::MAX_DECODE_THREADS as CAP;
        assert_eq!(threads_for(100, 1000, 1), CAP);
        assert_eq!(threads_for(100, CAP + 1, 1), CAP);
        assert_eq!(threads_for(100, CAP, 1), CAP);
        assert_eq!(threads_for(100, 3, 1), 3);
        assert_eq!(threads_for(100, 1000, 30), 3);
        // End to end: the threads that decoded an object, counted.
        let n = 16 * CAP + 3;
        let bytes = manifest_bytes(n);
        let at = bytes.windows(8).position(|w| w == b"gobjects").unwrap() + 8;
        let seen = std::sync::Mutex::new(std::collections::HashSet::new());
        let counted = |r: &mut Reader<'_>| {
            seen.lock().unwrap().insert(std::thread::current().id());
            read(r)
        };
        let mut r = Reader::at(&bytes, at, 16);
        let room = |_| Ok(());
        let entries = objects(&mut r, 1000, 1, &room, counted).expect("decoded in pieces");
        assert!(r.is_at_end());
        assert_eq!(seen.lock().unwrap().len(), CAP, "threads used");
        // The same entries as one reader's, one after another.
        let mut one = Reader::at(&bytes, at, 16);
        assert_eq!(one.head(), Ok(Head::Map(Some(n as u64))));
        let mut one = one.inside_at(one.position()).unwrap();
        let serial: Entries = (0..n)
            .map(|_| (one.text("name").unwrap().into(), read(&mut one).unwrap()))
            .collect();
        assert!(entries == serial, "the pieces read as one reader does");
    }

    /// Faults anywhere in the map read the same in pieces as serially:
    /// the serial decoder reports them.
    #[test]
    fn faults_read_the_same_in_pieces() {
        let good = manifest_bytes(40);
        let replace_nth = |from: &[u8], to: &[u8], nth: usize| {
            let at = good
                .windows(from.len())
                .enumerate()
                .filter(|(_, w)| *w == from)
                .nth(nth)
                .unwrap()
                .0;
            let mut b = good.clone();
            b.splice(at..at + from.len(), to.iter().copied());
            b
        };
        let cases = [
            // A name given twice (the second of two names made equal).
            replace_nth(b"o.40.0", b"o.39.1", 0),
            // A field the schema types otherwise, late in the map.
            replace_nth(b"eshape\x82", b"eshape\xa0", 33),
            // A digest that is not one.
            replace_nth(b"crc32c:0x", b"crc32c:0q", 5),
            // A component's dtype not UTF-8.
            replace_nth(b"bu8", b"b\xff\xfe", 20),
            // An object's name that is not text: an integer key with an
            // integer value, which the serial decoder skips (and reads the
            // rest).
            replace_nth(b"gobjects\xb8\x28", b"gobjects\xb8\x29\x06\x06", 0),
            // An indefinite-length objects map.
            {
                let mut b = replace_nth(b"gobjects\xb8\x28", b"gobjects\xbf", 0);
                b.push(0xff);
                b
            },
        ];
        for (i, bytes) in cases.iter().enumerate() {
            assert_ne!(bytes, &good, "case {i}");
            check_against_serial(bytes);
        }
        // Cut anywhere: the same error.
        for cut in (0..good.len()).step_by(97) {
            check_against_serial(&good[..cut]);
        }
    }
}
