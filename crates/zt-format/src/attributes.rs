//! Attribute maps (file and object level), their values kept as CBOR.
//! Most objects have none: an empty map is one word, with no allocation
//! (a manifest may hold a million objects), and reads as an empty map.

use std::collections::BTreeMap;
use std::ops::{Deref, DerefMut};

/// A CBOR value, as kept for attributes.
pub use ciborium::Value as CborValue;

/// The map itself.
type Map = BTreeMap<String, CborValue>;

/// An attribute map: read and changed as a `BTreeMap<String, CborValue>`
/// (through `Deref`), allocated on the first change.
#[derive(Debug, Clone, Default)]
pub struct Attributes(Option<Box<Map>>);

static EMPTY: Map = BTreeMap::new();

impl Attributes {
    pub fn new() -> Self {
        Attributes(None)
    }
}

impl Deref for Attributes {
    type Target = Map;
    fn deref(&self) -> &Map {
        self.0.as_deref().unwrap_or(&EMPTY)
    }
}

impl DerefMut for Attributes {
    fn deref_mut(&mut self) -> &mut Map {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for Attributes {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl From<Map> for Attributes {
    fn from(map: Map) -> Self {
        Attributes((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl FromIterator<(String, CborValue)> for Attributes {
    fn from_iter<I: IntoIterator<Item = (String, CborValue)>>(iter: I) -> Self {
        Attributes::from(iter.into_iter().collect::<Map>())
    }
}

impl IntoIterator for Attributes {
    type Item = (String, CborValue);
    type IntoIter = std::collections::btree_map::IntoIter<String, CborValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.map(|m| *m).unwrap_or_default().into_iter()
    }
}

impl<'a> IntoIterator for &'a Attributes {
    type Item = (&'a String, &'a CborValue);
    type IntoIter = std::collections::btree_map::Iter<'a, String, CborValue>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_map_is_one_word_and_reads_as_empty() {
        assert_eq!(std::mem::size_of::<Attributes>(), 8);
        let mut a = Attributes::new();
        assert!(a.is_empty());
        assert_eq!(a, Attributes::from(Map::new()));
        a.insert("k".into(), CborValue::Integer(1.into()));
        assert_eq!(a.len(), 1);
        assert_eq!(a.into_iter().count(), 1);
    }
}
