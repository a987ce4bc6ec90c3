//! Values by name in one vector sorted by name, with no node or
//! allocation of its own per value beyond its name: a manifest's objects
//! ([`crate::Objects`]). A manifest may hold a million objects; a B-tree
//! kept each in a node with room to spare, and an object's place in the
//! order had no number.
//!
//! Lookups are binary searches. [`ByName::insert`] keeps the order by
//! shifting what follows, so a table of many values is built at once
//! ([`FromIterator`]), which sorts once.

use std::ops::Index;

/// Values by name, iterated in name order; each has a place
/// ([`ByName::index_of`], [`ByName::get_index`]) that stays the same
/// while the table is not changed.
#[derive(Debug, Clone, PartialEq)]
pub struct ByName<V> {
    entries: Vec<(Box<str>, V)>,
}

impl<V> Default for ByName<V> {
    fn default() -> Self {
        ByName {
            entries: Vec::new(),
        }
    }
}

impl<V> ByName<V> {
    pub fn new() -> Self {
        ByName::default()
    }

    /// The table of `entries`, kept in their vector (a 10,000-object
    /// manifest is not moved into a second one) and sorted once, for
    /// names that must be unique: a name given twice is the error (the
    /// first such in name order).
    pub(crate) fn from_unique_vec(mut entries: Vec<(Box<str>, V)>) -> Result<Self, Box<str>> {
        if !entries.is_sorted_by(|a, b| a.0 < b.0) {
            // The places are sorted, not the entries: an object is over
            // 200 bytes, and a sort moves each entry many times, where the
            // permutation below puts one entry in its final place with each
            // swap (fewer swaps than entries).
            let name = |i: usize| entries.get(i).map(|e| &*e.0);
            let mut order: Vec<usize> = (0..entries.len()).collect();
            order.sort_unstable_by(|&a, &b| name(a).cmp(&name(b)));
            if let Some(w) = order
                .windows(2)
                .find(|w| matches!(w, [a, b] if name(*a) == name(*b)))
            {
                let first = w.first().and_then(|&i| name(i));
                return Err(first.unwrap_or_default().into());
            }
            permute(&mut entries, order);
        }
        entries.shrink_to_fit();
        Ok(ByName { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(n, _)| (**n).cmp(name))
    }

    /// The place of `name` in the order, if there is such an object.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.find(name).ok()
    }

    /// The object at place `index` in the order, with its name.
    pub fn get_index(&self, index: usize) -> Option<(&str, &V)> {
        self.entries.get(index).map(|(n, o)| (&**n, o))
    }

    /// The first object after `name` in the order (the first of all for
    /// `None`), whether or not `name` is one.
    pub fn next_after(&self, name: Option<&str>) -> Option<(&str, &V)> {
        let at = match name.map(|n| self.find(n)) {
            None => 0,
            Some(Ok(i)) => i.saturating_add(1),
            Some(Err(i)) => i,
        };
        self.get_index(at)
    }

    pub fn get(&self, name: &str) -> Option<&V> {
        self.get_key_value(name).map(|(_, o)| o)
    }

    pub fn get_key_value(&self, name: &str) -> Option<(&str, &V)> {
        self.get_index(self.index_of(name)?)
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut V> {
        let i = self.index_of(name)?;
        self.entries.get_mut(i).map(|(_, o)| o)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// Inserts or replaces; returns the replaced object. Appending in
    /// name order is cheap; anything else shifts the objects after it.
    pub fn insert(&mut self, name: impl Into<Box<str>>, value: V) -> Option<V> {
        let name = name.into();
        match self.find(&name) {
            Ok(i) => self
                .entries
                .get_mut(i)
                .map(|e| std::mem::replace(&mut e.1, value)),
            Err(i) => {
                self.entries.insert(i, (name, value));
                None
            }
        }
    }

    /// Gives back the room left by inserting one at a time.
    pub fn shrink_to_fit(&mut self) {
        self.entries.shrink_to_fit();
    }

    /// Keeps only the values `keep` says yes to.
    pub fn retain(&mut self, mut keep: impl FnMut(&str, &mut V) -> bool) {
        self.entries.retain_mut(|(n, o)| keep(n, o));
        self.entries.shrink_to_fit();
    }

    pub fn iter(&self) -> Iter<'_, V> {
        Iter(self.entries.iter())
    }

    pub fn iter_mut(&mut self) -> impl DoubleEndedIterator<Item = (&str, &mut V)> {
        self.entries.iter_mut().map(|(n, o)| (&**n, o))
    }

    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.entries.iter().map(|(n, _)| &**n)
    }

    pub fn values(&self) -> impl DoubleEndedIterator<Item = &V> + ExactSizeIterator {
        self.entries.iter().map(|(_, o)| o)
    }

    pub fn values_mut(&mut self) -> impl DoubleEndedIterator<Item = &mut V> {
        self.entries.iter_mut().map(|(_, o)| o)
    }

    pub fn into_keys(self) -> impl DoubleEndedIterator<Item = String> {
        self.entries.into_iter().map(|(n, _)| n.into_string())
    }
}

/// Sorts `entries` by key, once; of two entries with one key, the later
/// is kept, as a map keeps the value inserted last.
pub(crate) fn sort_keys<K: Ord, V>(entries: &mut Vec<(K, V)>) {
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries.dedup_by(|later, earlier| {
        if later.0 == earlier.0 {
            std::mem::swap(later, earlier);
            true
        } else {
            false
        }
    });
}

impl<N: Into<Box<str>>, V> FromIterator<(N, V)> for ByName<V> {
    /// Sorts once; of two values with one name, the later wins, as with
    /// a map.
    fn from_iter<I: IntoIterator<Item = (N, V)>>(iter: I) -> Self {
        let iter = iter.into_iter();
        let mut entries: Vec<(Box<str>, V)> = Vec::with_capacity(iter.size_hint().0);
        entries.extend(iter.map(|(n, o)| (n.into(), o)));
        // A manifest's names usually come sorted and unique: checked, not sorted.
        if !entries.is_sorted_by(|a, b| a.0 < b.0) {
            sort_keys(&mut entries);
        }
        entries.shrink_to_fit();
        ByName { entries }
    }
}

impl<V> IntoIterator for ByName<V> {
    type Item = (String, V);
    type IntoIter =
        std::iter::Map<std::vec::IntoIter<(Box<str>, V)>, fn((Box<str>, V)) -> (String, V)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter().map(|(n, o)| (n.into_string(), o))
    }
}

impl<'a, V> IntoIterator for &'a ByName<V> {
    type Item = (&'a str, &'a V);
    type IntoIter = Iter<'a, V>;
    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

impl<V> Index<&str> for ByName<V> {
    type Output = V;
    /// Panics when there is no such name, like indexing a map.
    fn index(&self, name: &str) -> &V {
        match self.get(name) {
            Some(v) => v,
            None => panic!("no entry {name:?}"),
        }
    }
}

/// The values with their names, in name order.
#[derive(Debug, Clone)]
pub struct Iter<'a, V>(std::slice::Iter<'a, (Box<str>, V)>);

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a str, &'a V);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(n, o)| (&**n, o))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<V> DoubleEndedIterator for Iter<'_, V> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.0.next_back().map(|(n, o)| (&**n, o))
    }
}

impl<V> ExactSizeIterator for Iter<'_, V> {}

/// Puts `items` in `order`, which names for each place the item that goes
/// there (a permutation of the places), by following each cycle of it:
/// each swap puts one item in its final place. A place done is marked by
/// `order[p] = p`, which is what `order` is left holding.
fn permute<T>(items: &mut [T], mut order: Vec<usize>) {
    debug_assert_eq!(items.len(), order.len());
    for start in 0..order.len() {
        let mut at = start;
        while let Some(from) = order.get_mut(at).map(|o| std::mem::replace(o, at)) {
            // Two guards for an `order` that is not a permutation, which
            // the one caller never passes: `from == at` ends a walk that
            // would go round for ever, and `items.get` an index out of
            // range, which `swap` would panic on.
            if from == start || from == at || items.get(from).is_none() {
                break;
            }
            items.swap(at, from);
            at = from;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Components, Format, Object, Objects};

    fn object(rows: u64) -> Object {
        Object {
            shape: vec![rows],
            format: Format::Dense,
            attributes: Default::default(),
            components: Components::new(),
        }
    }

    #[test]
    fn built_at_once_is_sorted_and_the_later_of_two_names_wins() {
        let objects: Objects = [("b", object(1)), ("a", object(2)), ("b", object(3))]
            .into_iter()
            .collect();
        let names: Vec<&str> = objects.keys().collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(
            objects.get("b").and_then(|o| o.shape.first().copied()),
            Some(3)
        );
        assert_eq!(objects.index_of("b"), Some(1));
        assert_eq!(objects.get_index(0).map(|(n, _)| n), Some("a"));
        assert_eq!(objects.get("c"), None);
    }

    /// Unique names in any order come out sorted with their own values,
    /// whatever cycles the order has; a name given twice is refused by
    /// name.
    #[test]
    fn unique_entries_are_sorted_with_their_values() {
        let orders: [&[usize]; 6] = [
            &[],
            &[0],
            &[1, 0],
            &[2, 0, 1],
            &[3, 2, 1, 0],
            &[5, 3, 4, 0, 2, 1, 7, 6],
        ];
        let mut scrambled: Vec<usize> = (0..1000).collect();
        // A fixed shuffle: multiplying by a unit modulo 1000.
        scrambled.iter_mut().for_each(|i| *i = (*i * 337) % 1000);
        for order in orders.into_iter().chain([&scrambled[..]]) {
            let entries: Vec<(Box<str>, Object)> = order
                .iter()
                .map(|&i| (format!("n{i:04}").into(), object(i as u64)))
                .collect();
            let table = super::ByName::from_unique_vec(entries).unwrap();
            let got: Vec<(String, u64)> = table
                .iter()
                .map(|(n, o)| (n.to_owned(), o.shape.iter().sum()))
                .collect();
            let want: Vec<(String, u64)> = (0..order.len())
                .map(|i| (format!("n{i:04}"), i as u64))
                .collect();
            assert_eq!(got, want, "order {order:?}");
        }
        // The first name given twice in name order, not in the input's.
        let twice: Vec<(Box<str>, Object)> = ["c", "c", "a", "b", "b"]
            .iter()
            .map(|n| ((*n).into(), object(0)))
            .collect();
        assert_eq!(&*super::ByName::from_unique_vec(twice).unwrap_err(), "b");
    }

    #[test]
    fn inserting_keeps_the_order_and_replaces() {
        let mut objects = Objects::new();
        for (n, rows) in [("m", 1), ("z", 2), ("a", 3), ("m", 4)] {
            objects.insert(n, object(rows));
        }
        let all: Vec<(&str, u64)> = objects
            .iter()
            .map(|(n, o)| (n, o.shape.iter().sum()))
            .collect();
        assert_eq!(all, [("a", 3), ("m", 4), ("z", 2)]);
        objects.retain(|n, _| n != "m");
        assert_eq!(objects.keys().collect::<Vec<_>>(), ["a", "z"]);
    }
}
