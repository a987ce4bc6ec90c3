//! A pull decoder for CBOR over a byte slice, used for v1.x manifests.
//!
//! It borrows text instead of building a value tree, so a manifest with
//! 10,000 objects parses with a handful of allocations per object. It still
//! enforces every rule of the strict decoder: a depth limit, no duplicate map
//! keys (in every map, skipped ones included; a manifest's objects map
//! leaves its text keys to the caller's sort,
//! [`Reader::map_checked_by_caller`]), well-formed items, and no trailing
//! bytes (checked by the caller with [`Reader::is_at_end`]).

use std::borrow::Cow;

use crate::error::Rule;

/// The initial byte of an item, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Head {
    Uint(u64),
    Nint(u64),
    Bytes(Option<u64>),
    Text(Option<u64>),
    Array(Option<u64>),
    Map(Option<u64>),
    Tag(u64),
    /// Simple values and floats: the additional-information value.
    Simple(u8),
    Break,
}

impl Head {
    pub(crate) fn kind(self) -> &'static str {
        match self {
            Head::Uint(_) | Head::Nint(_) => "an integer",
            Head::Bytes(_) => "a byte string",
            Head::Text(_) => "a text string",
            Head::Array(_) => "an array",
            Head::Map(_) => "a map",
            Head::Tag(_) => "a tagged item",
            Head::Simple(_) => "a simple value or float",
            Head::Break => "a break",
        }
    }
}

const BREAK: u8 = 0xff;
/// Maps up to this size check for duplicate keys on the stack.
const SMALL_MAP: usize = 8;

fn syntax(detail: impl Into<String>) -> Rule {
    Rule::CborSyntax {
        detail: detail.into(),
    }
}

/// Equal keys, compared inline: schema keys are short, and most
/// candidates differ in length or first byte.
fn same_key(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x == y)
}

fn duplicate(key: &[u8], context: &str) -> Rule {
    Rule::DuplicateKey {
        key: String::from_utf8_lossy(key).into_owned(),
        context: context.to_owned(),
    }
}

/// A text map key, kept as bytes: keys the schema knows are matched before
/// any UTF-8 check, and every other key is checked with [`Key::text`].
#[derive(Debug, Clone)]
pub(crate) struct Key<'a>(Cow<'a, [u8]>);

impl Key<'_> {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    pub(crate) fn text(&self) -> Result<&str, Rule> {
        std::str::from_utf8(&self.0).map_err(|_| syntax("map key is not UTF-8"))
    }
}

/// A position-tracking decoder; a clone reads ahead without moving the
/// original.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    depth: usize,
    max_depth: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8], max_depth: usize) -> Self {
        Reader {
            buf,
            pos: 0,
            depth: 0,
            max_depth,
        }
    }

    /// A reader positioned at `pos` of `buf` (for items parsed out of order).
    pub(crate) fn at(buf: &'a [u8], pos: usize, max_depth: usize) -> Self {
        Reader {
            buf,
            pos,
            depth: 0,
            max_depth,
        }
    }

    /// A reader at `pos` of the same bytes, one level deeper than this
    /// one (for the entries of a map whose head this one has read, decoded
    /// apart); `None` past the depth limit.
    pub(crate) fn inside_at(&self, pos: usize) -> Option<Self> {
        let depth = self.depth.checked_add(1).filter(|&d| d <= self.max_depth)?;
        Some(Reader {
            buf: self.buf,
            pos,
            depth,
            max_depth: self.max_depth,
        })
    }

    /// All the bytes this reader reads.
    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.buf
    }

    /// Moves to `pos`, past items read elsewhere (by pieces decoded apart).
    pub(crate) fn move_to(&mut self, pos: usize) {
        self.pos = pos;
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn is_at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub(crate) fn depth(&self) -> usize {
        self.depth
    }

    /// The nesting still allowed below `depth`.
    pub(crate) fn max_depth_left(&self, depth: usize) -> usize {
        self.max_depth.saturating_sub(depth)
    }

    /// The bytes between two positions of this reader.
    pub(crate) fn span(&self, start: usize, end: usize) -> &'a [u8] {
        self.buf.get(start..end).unwrap_or_default()
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Rule> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                syntax(format!(
                    "item at byte {} runs past the end of the manifest",
                    self.pos
                ))
            })?;
        let s = self.buf.get(self.pos..end).unwrap_or_default();
        self.pos = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, Rule> {
        let b = self
            .buf
            .get(self.pos)
            .copied()
            .ok_or_else(|| syntax("unexpected end"))?;
        self.pos = self.pos.saturating_add(1);
        Ok(b)
    }

    fn argument(&mut self, info: u8) -> Result<Option<u64>, Rule> {
        let n = match info {
            0..=23 => return Ok(Some(u64::from(info))),
            24 => return self.byte().map(|b| Some(u64::from(b))),
            25 => 2,
            26 => 4,
            27 => 8,
            31 => return Ok(None),
            _ => {
                return Err(syntax(format!(
                    "reserved additional information {info} at byte {}",
                    self.pos
                )))
            }
        };
        let mut v = 0u64;
        for &b in self.take(n)? {
            v = v << 8 | u64::from(b);
        }
        Ok(Some(v))
    }

    /// How many entries the map that comes next announces (`None`: not a
    /// definite-length map, or more entries than the bytes left could hold,
    /// two bytes at least each); nothing is consumed. A size hint only:
    /// the map is read and checked as usual afterwards.
    pub(crate) fn peek_map_len(&self) -> Option<u64> {
        let left = self.buf.len().saturating_sub(self.pos) as u64;
        match Reader::at(self.buf, self.pos, self.max_depth).raw_head() {
            Ok(Head::Map(Some(len))) if len <= left / 2 => Some(len),
            _ => None,
        }
    }

    pub(crate) fn peek_is_break(&self) -> bool {
        self.buf.get(self.pos) == Some(&BREAK)
    }

    /// The head of the next item; a break here is malformed.
    pub(crate) fn head(&mut self) -> Result<Head, Rule> {
        let at = self.pos;
        match self.raw_head()? {
            Head::Break => Err(syntax(format!("unexpected break at byte {at}"))),
            h => Ok(h),
        }
    }

    /// The next head, breaks included (ends indefinite-length items).
    fn raw_head(&mut self) -> Result<Head, Rule> {
        let at = self.pos;
        let b = self.byte()?;
        let (major, info) = (b >> 5, b & 0x1f);
        let arg = self.argument(info)?;
        let definite = |a: Option<u64>| {
            a.ok_or_else(|| syntax(format!("indefinite length not allowed at byte {at}")))
        };
        Ok(match major {
            0 => Head::Uint(definite(arg)?),
            1 => Head::Nint(definite(arg)?),
            2 => Head::Bytes(arg),
            3 => Head::Text(arg),
            4 => Head::Array(arg),
            5 => Head::Map(arg),
            6 => Head::Tag(definite(arg)?),
            _ if b == BREAK => Head::Break,
            _ if info == 31 => return Err(syntax(format!("stray indefinite marker at byte {at}"))),
            _ => Head::Simple(info),
        })
    }

    fn enter(&mut self) -> Result<(), Rule> {
        self.depth = self.depth.saturating_add(1);
        if self.depth > self.max_depth {
            return Err(Rule::CborTooDeep {
                limit: self.max_depth,
            });
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    fn len(n: u64) -> Result<usize, Rule> {
        usize::try_from(n).map_err(|_| syntax("length does not fit in memory"))
    }

    /// The string payload after a text or bytes head (chunks joined if indefinite).
    fn string_body(&mut self, len: Option<u64>, major_text: bool) -> Result<Cow<'a, [u8]>, Rule> {
        match len {
            Some(n) => Ok(Cow::Borrowed(self.take(Self::len(n)?)?)),
            None => {
                let mut out = Vec::new();
                loop {
                    match self.raw_head()? {
                        Head::Break => break,
                        Head::Text(Some(n)) if major_text => {
                            out.extend_from_slice(self.take(Self::len(n)?)?)
                        }
                        Head::Bytes(Some(n)) if !major_text => {
                            out.extend_from_slice(self.take(Self::len(n)?)?)
                        }
                        _ => return Err(syntax("bad chunk in an indefinite-length string")),
                    }
                }
                Ok(Cow::Owned(out))
            }
        }
    }

    fn text_body(&mut self, len: Option<u64>) -> Result<Cow<'a, str>, Rule> {
        match self.string_body(len, true)? {
            Cow::Borrowed(b) => std::str::from_utf8(b)
                .map(Cow::Borrowed)
                .map_err(|_| syntax("text string is not UTF-8")),
            Cow::Owned(v) => String::from_utf8(v)
                .map(Cow::Owned)
                .map_err(|_| syntax("text string is not UTF-8")),
        }
    }

    /// Reads a text string, or fails naming `field`.
    pub(crate) fn text(&mut self, field: &str) -> Result<Cow<'a, str>, Rule> {
        match self.head()? {
            Head::Text(len) => self.text_body(len),
            _ => Err(Rule::FieldType {
                field: field.to_owned(),
                expected: "a text string",
            }),
        }
    }

    /// Reads an unsigned integer, or fails naming `field`.
    pub(crate) fn u64(&mut self, field: &str) -> Result<u64, Rule> {
        match self.head()? {
            Head::Uint(v) => Ok(v),
            _ => Err(Rule::FieldType {
                field: field.to_owned(),
                expected: "an unsigned integer",
            }),
        }
    }

    /// Whether the next item is null (consumed if so).
    pub(crate) fn null(&mut self) -> bool {
        if self.buf.get(self.pos) == Some(&0xf6) {
            self.pos = self.pos.saturating_add(1);
            true
        } else {
            false
        }
    }

    /// Reads an array of unsigned integers.
    pub(crate) fn u64_array(&mut self, field: &str) -> Result<Vec<u64>, Rule> {
        let wrong = || Rule::FieldType {
            field: field.to_owned(),
            expected: "an array of unsigned integers",
        };
        let Head::Array(len) = self.head()? else {
            return Err(wrong());
        };
        self.enter()?;
        let mut out = Vec::with_capacity(len.map_or(0, |n| n.min(64) as usize));
        let mut i = 0u64;
        loop {
            if len.is_some_and(|n| i >= n) || (len.is_none() && self.peek_is_break()) {
                break;
            }
            match self.head()? {
                Head::Uint(v) => out.push(v),
                _ => return Err(wrong()),
            }
            i = i.saturating_add(1);
        }
        if len.is_none() {
            self.raw_head()?;
        }
        self.leave();
        Ok(out)
    }

    /// Iterates a map. `f` gets each text key and must consume its value;
    /// non-text keys are skipped with their values. Duplicate keys are an
    /// error naming `context`. Fails naming `field` if the item is not a map.
    pub(crate) fn map<E: From<Rule>>(
        &mut self,
        field: &str,
        context: &str,
        mut f: impl FnMut(&mut Self, &Key<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        // Duplicate detection without a per-map allocation in the common
        // cases: the first keys are compared with each other, and the rest
        // need collecting only once they turn out not to be ascending.
        let mut small: [&'a [u8]; SMALL_MAP] = [&[]; SMALL_MAP];
        let mut seen = 0usize;
        let mut last: Option<&'a [u8]> = None;
        let mut sorted = true;
        let (start, count) = self.entries(field, context, |r, key| {
            match &key.0 {
                Cow::Borrowed(k) => {
                    if let Some(firsts) = small.get(..seen) {
                        if firsts.contains(k) {
                            return Err(duplicate(k, context).into());
                        }
                    }
                    if let Some(slot) = small.get_mut(seen) {
                        *slot = k;
                        seen = seen.saturating_add(1);
                    }
                    // The first key has nothing to follow (most maps
                    // here have one key: no comparison at all).
                    if let Some(before) = last {
                        sorted &= before < *k;
                    }
                    last = Some(k);
                }
                // An indefinite-length key: compared at the end.
                Cow::Owned(_) => sorted = false,
            }
            f(r, key)
        })?;
        if !sorted && count > seen as u64 {
            self.check_large_map_keys(start, context)?;
        }
        Ok(())
    }

    /// [`Reader::map`] without its check of text keys for duplicates: the
    /// caller must refuse them itself, or they are accepted. For a large
    /// map whose keys the caller sorts anyway (a manifest's objects, into
    /// [`crate::by_name::ByName::from_unique_vec`], which finds them): no
    /// second pass over the keys and no second sort. Other keys are still
    /// checked here.
    pub(crate) fn map_checked_by_caller<E: From<Rule>>(
        &mut self,
        field: &str,
        context: &str,
        f: impl FnMut(&mut Self, &Key<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        self.entries(field, context, f).map(drop)
    }

    /// Iterates a map whose keys the schema names in `known`: `f` gets the
    /// index in `known` of each known key (`None` for any other text key)
    /// and must consume its value. Known keys are checked for duplicates
    /// with a bit each; other keys, rare, by comparison.
    pub(crate) fn fields<E: From<Rule>>(
        &mut self,
        field: &str,
        context: &str,
        known: &[&[u8]],
        mut f: impl FnMut(&mut Self, Option<usize>, &Key<'a>) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut bits = 0u64;
        let mut others: Vec<Cow<'a, [u8]>> = Vec::new();
        self.entries(field, context, |r, key| {
            let index = known.iter().position(|k| same_key(k, key.bytes()));
            match index
                .and_then(|i| u32::try_from(i).ok())
                .filter(|&i| i < 64)
            {
                Some(i) => {
                    let bit = 1u64 << i;
                    if bits & bit != 0 {
                        return Err(duplicate(key.bytes(), context).into());
                    }
                    bits |= bit;
                }
                None => {
                    if others.iter().any(|k| k.as_ref() == key.bytes()) {
                        return Err(duplicate(key.bytes(), context).into());
                    }
                    others.push(key.0.clone());
                }
            }
            f(r, index, key)
        })
        .map(drop)
    }

    /// The loop under [`Reader::map`] and [`Reader::fields`]: calls `f`
    /// with each text key, skips other keys with their values
    /// (checking those for duplicates), and returns where the map started
    /// and how many entries it had.
    fn entries<E: From<Rule>>(
        &mut self,
        field: &str,
        context: &str,
        mut f: impl FnMut(&mut Self, &Key<'a>) -> Result<(), E>,
    ) -> Result<(usize, u64), E> {
        let map_start = self.pos;
        let len = match self.head()? {
            Head::Map(len) => len,
            _ => {
                return Err(Rule::FieldType {
                    field: field.to_owned(),
                    expected: "a map",
                }
                .into())
            }
        };
        self.enter()?;
        let mut other_keys: Vec<&'a [u8]> = Vec::new();
        let mut i = 0u64;
        loop {
            if len.is_some_and(|n| i >= n) || (len.is_none() && self.peek_is_break()) {
                break;
            }
            let key_start = self.pos;
            match self.head()? {
                Head::Text(l) => {
                    let key = Key(self.string_body(l, true)?);
                    f(self, &key)?;
                }
                _ => {
                    self.pos = key_start;
                    self.skip()?;
                    other_keys.push(self.span(key_start, self.pos));
                    self.skip()?;
                }
            }
            i = i.saturating_add(1);
        }
        if len.is_none() {
            self.raw_head()?;
        }
        self.leave();
        other_keys.sort_unstable();
        if other_keys.windows(2).any(|w| matches!(w, [a, b] if a == b)) {
            return Err(Rule::DuplicateKey {
                key: "(a non-text key)".to_owned(),
                context: context.to_owned(),
            }
            .into());
        }
        Ok((map_start, i))
    }

    /// Re-reads a large, unsorted map's keys and looks for a duplicate.
    fn check_large_map_keys(&self, map_start: usize, context: &str) -> Result<(), Rule> {
        let mut r = Reader::at(self.buf, map_start, self.max_depth);
        let mut keys: Vec<Cow<'a, [u8]>> = Vec::new();
        let Head::Map(len) = r.head()? else {
            return Ok(());
        };
        let mut i = 0u64;
        loop {
            if len.is_some_and(|n| i >= n) || (len.is_none() && r.peek_is_break()) {
                break;
            }
            let key_start = r.pos;
            match r.head()? {
                Head::Text(l) => keys.push(r.string_body(l, true)?),
                _ => {
                    r.pos = key_start;
                    r.skip()?;
                }
            }
            r.skip()?;
            i = i.saturating_add(1);
        }
        keys.sort_unstable();
        if let Some(w) = keys.windows(2).find(|w| matches!(w, [a, b] if a == b)) {
            return Err(Rule::DuplicateKey {
                key: w
                    .first()
                    .map(|k| String::from_utf8_lossy(k).into_owned())
                    .unwrap_or_default(),
                context: context.to_owned(),
            });
        }
        Ok(())
    }

    /// Skips one item, checking it as strictly as if it were read.
    pub(crate) fn skip(&mut self) -> Result<(), Rule> {
        let at = self.pos;
        match self.head()? {
            Head::Uint(_) | Head::Nint(_) => Ok(()),
            Head::Bytes(l) => self.string_body(l, false).map(drop),
            Head::Text(l) => self.text_body(l).map(drop),
            Head::Array(len) => {
                self.enter()?;
                let mut i = 0u64;
                loop {
                    if len.is_some_and(|n| i >= n) || (len.is_none() && self.peek_is_break()) {
                        break;
                    }
                    self.skip()?;
                    i = i.saturating_add(1);
                }
                if len.is_none() {
                    self.head()?;
                }
                self.leave();
                Ok(())
            }
            Head::Map(_) => {
                self.pos = at;
                self.map("map", "a nested map", |r, k| {
                    k.text()?;
                    r.skip()
                })
            }
            Head::Tag(_) => {
                self.enter()?;
                self.skip()?;
                self.leave();
                Ok(())
            }
            // A float's or simple value's bytes were consumed by `head`.
            Head::Simple(_) => Ok(()),
            Head::Break => Err(syntax(format!("unexpected break at byte {at}"))),
        }
    }
}

#[cfg(test)]
#[allow(clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn enc(v: &ciborium::Value) -> Vec<u8> {
        let mut out = Vec::new();
        ciborium::ser::into_writer(v, &mut out).unwrap();
        out
    }

    #[test]
    fn reads_maps_and_detects_duplicates() {
        use ciborium::Value as V;
        let m = V::Map(vec![
            (V::Text("b".into()), V::Integer(1.into())),
            (V::Text("a".into()), V::Array(vec![V::Float(1.5), V::Null])),
            (V::Integer(3.into()), V::Bool(true)),
        ]);
        let bytes = enc(&m);
        let mut r = Reader::new(&bytes, 8);
        let mut seen = Vec::new();
        r.map::<Rule>("root", "root", |r, k| {
            seen.push(k.text()?.to_owned());
            r.skip()
        })
        .unwrap();
        assert!(r.is_at_end());
        assert_eq!(seen, ["b", "a"]);

        let dup = V::Map(vec![
            (V::Text("b".into()), V::Null),
            (V::Text("a".into()), V::Null),
            (V::Text("b".into()), V::Null),
        ]);
        let bytes = enc(&dup);
        let err = Reader::new(&bytes, 8).skip().unwrap_err();
        assert!(matches!(err, Rule::DuplicateKey { .. }));
    }

    #[test]
    fn schema_maps_find_duplicates_known_unknown_and_indefinite() {
        use ciborium::Value as V;
        const KNOWN: &[&[u8]] = &[b"dtype", b"offset"];
        let read = |bytes: &[u8]| {
            let mut seen = Vec::new();
            Reader::new(bytes, 8)
                .fields::<Rule>("c", "component", KNOWN, |r, i, k| {
                    seen.push((i, k.text()?.to_owned()));
                    r.skip()
                })
                .map(|()| seen)
        };
        let map = |keys: &[&str]| {
            enc(&V::Map(
                keys.iter()
                    .map(|k| (V::Text((*k).into()), V::Null))
                    .collect(),
            ))
        };
        let seen = read(&map(&["offset", "x", "dtype"])).unwrap();
        assert_eq!(
            seen,
            [
                (Some(1), "offset".to_owned()),
                (None, "x".to_owned()),
                (Some(0), "dtype".to_owned())
            ]
        );
        for keys in [&["dtype", "x", "dtype"][..], &["x", "offset", "x"]] {
            let err = read(&map(keys)).unwrap_err();
            assert!(matches!(err, Rule::DuplicateKey { .. }), "{keys:?}");
        }
        // "dtype" again as an indefinite-length string: still a duplicate,
        // in a schema map and in a plain one.
        let mut bytes = vec![0xa2, 0x65];
        bytes.extend_from_slice(b"dtype");
        bytes.push(0xf6);
        bytes.extend_from_slice(&[0x7f, 0x62, b'd', b't', 0x63, b'y', b'p', b'e', 0xff, 0xf6]);
        let err = read(&bytes).unwrap_err();
        assert!(matches!(err, Rule::DuplicateKey { .. }));
        let err = Reader::new(&bytes, 8).skip().unwrap_err();
        assert!(matches!(err, Rule::DuplicateKey { .. }));
    }

    #[test]
    fn large_maps_find_duplicates_sorted_or_not() {
        use ciborium::Value as V;
        let map = |keys: &[String]| {
            enc(&V::Map(
                keys.iter().map(|k| (V::Text(k.clone()), V::Null)).collect(),
            ))
        };
        let sorted: Vec<String> = (0..40).map(|i| format!("k{i:03}")).collect();
        assert!(Reader::new(&map(&sorted), 8).skip().is_ok());
        let mut shuffled = sorted.clone();
        shuffled.reverse();
        assert!(Reader::new(&map(&shuffled), 8).skip().is_ok());
        for (a, b) in [(0, 39), (20, 39), (3, 5)] {
            let mut dup = shuffled.clone();
            dup[b] = dup[a].clone();
            let err = Reader::new(&map(&dup), 8).skip().unwrap_err();
            assert!(matches!(err, Rule::DuplicateKey { .. }), "{a} {b}");
        }
    }

    #[test]
    fn depth_and_truncation() {
        let mut deep = vec![0x81u8; 100];
        deep.push(0x00);
        assert!(matches!(
            Reader::new(&deep, 64).skip(),
            Err(Rule::CborTooDeep { .. })
        ));
        assert!(Reader::new(&deep, 200).skip().is_ok());
        assert!(matches!(
            Reader::new(&[0x7a, 0xff, 0xff, 0xff, 0xff], 8).skip(),
            Err(Rule::CborSyntax { .. })
        ));
        // Indefinite-length text made of chunks.
        let chunks = [0x7f, 0x61, b'a', 0x61, b'b', 0xff];
        assert_eq!(Reader::new(&chunks, 8).text("t").unwrap(), "ab");
    }
}
