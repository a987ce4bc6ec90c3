//! The components of one object: a small map from role to component, kept
//! as a sorted vector. Objects have one to a few components, and a vector
//! costs one allocation where a B-tree node would cost a couple of kilobytes.

use std::ops::Index;

use crate::component::Component;

/// Components by role, iterated in role order.
#[derive(Debug, Clone, Default)]
pub struct Components {
    entries: Entries,
}

/// Most objects have one component: it is kept inline, with no
/// allocation of its own (a manifest may hold a million objects).
#[derive(Debug, Clone)]
enum Entries {
    One([(Role, Component); 1]),
    Many(Vec<(Role, Component)>),
}

impl Default for Entries {
    fn default() -> Self {
        Entries::Many(Vec::new())
    }
}

impl Entries {
    fn from_vec(mut v: Vec<(Role, Component)>) -> Entries {
        match v.pop() {
            Some(only) if v.is_empty() => Entries::One([only]),
            Some(last) => {
                v.push(last);
                v.shrink_to_fit();
                Entries::Many(v)
            }
            None => Entries::Many(v),
        }
    }

    fn as_slice(&self) -> &[(Role, Component)] {
        match self {
            Entries::One(one) => one,
            Entries::Many(v) => v,
        }
    }

    fn as_mut_slice(&mut self) -> &mut [(Role, Component)] {
        match self {
            Entries::One(one) => one,
            Entries::Many(v) => v,
        }
    }
}

impl PartialEq for Components {
    fn eq(&self, other: &Self) -> bool {
        self.entries.as_slice() == other.entries.as_slice()
    }
}

/// A role's name: the roles the formats name are a number (most objects
/// have one component, `data`), any other is its own text. Ordered and
/// compared as its text; 16 bytes.
#[derive(Clone)]
pub(crate) enum Role {
    Named(u8),
    Owned(Box<str>),
}

impl Role {
    fn as_str(&self) -> &str {
        match self {
            Role::Named(i) => NAMED.get(usize::from(*i)).copied().unwrap_or(""),
            Role::Owned(s) => s,
        }
    }
}

impl std::ops::Deref for Role {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Role {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl PartialEq for Role {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Role {}

impl PartialOrd for Role {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Role {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

/// The roles the formats name.
const NAMED: &[&str] = &[
    "data",
    "indices",
    "indptr",
    "coords",
    "offsets",
    "values",
    "packed_weight",
    "scales",
];

/// The number of `name` when a format names it.
fn named(name: &str) -> Option<u8> {
    NAMED
        .iter()
        .position(|r| *r == name)
        .and_then(|i| u8::try_from(i).ok())
}

fn role(name: String) -> Role {
    named(&name).map_or_else(|| Role::Owned(name.into_boxed_str()), Role::Named)
}

/// A role read from a manifest: copied only if no format names it.
pub(crate) fn parsed_role(name: &str) -> Role {
    named(name).map_or_else(|| Role::Owned(name.into()), Role::Named)
}

impl Components {
    pub fn new() -> Self {
        Components::default()
    }

    /// The components of an object that has one.
    pub(crate) fn one(role: Role, c: Component) -> Self {
        Components {
            entries: Entries::One([(role, c)]),
        }
    }

    fn find(&self, role: &str) -> Result<usize, usize> {
        self.entries
            .as_slice()
            .binary_search_by(|(r, _)| r.as_str().cmp(role))
    }

    pub fn get(&self, role: &str) -> Option<&Component> {
        self.find(role)
            .ok()
            .and_then(|i| self.entries.as_slice().get(i))
            .map(|(_, c)| c)
    }

    pub fn get_mut(&mut self, role: &str) -> Option<&mut Component> {
        match self.find(role) {
            Ok(i) => self.entries.as_mut_slice().get_mut(i).map(|(_, c)| c),
            Err(_) => None,
        }
    }

    pub fn contains_key(&self, role: &str) -> bool {
        self.find(role).is_ok()
    }

    /// Inserts or replaces; returns the replaced component.
    pub fn insert(&mut self, name: String, c: Component) -> Option<Component> {
        match self.find(&name) {
            Ok(i) => self
                .entries
                .as_mut_slice()
                .get_mut(i)
                .map(|e| std::mem::replace(&mut e.1, c)),
            Err(i) => {
                let mut list = match std::mem::take(&mut self.entries) {
                    Entries::One([only]) => vec![only],
                    Entries::Many(v) => v,
                };
                list.insert(i, (role(name), c));
                self.entries = Entries::from_vec(list);
                None
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.as_slice().len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.as_slice().is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Component)> {
        self.entries.as_slice().iter().map(|(r, c)| (r.as_str(), c))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Component)> {
        self.entries
            .as_mut_slice()
            .iter_mut()
            .map(|(r, c)| (r.as_str(), c))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.as_slice().iter().map(|(r, _)| r.as_str())
    }

    pub fn values(&self) -> impl Iterator<Item = &Component> {
        self.entries.as_slice().iter().map(|(_, c)| c)
    }
}

impl FromIterator<(Role, Component)> for Components {
    fn from_iter<I: IntoIterator<Item = (Role, Component)>>(iter: I) -> Self {
        let mut entries: Vec<(Role, Component)> = iter.into_iter().collect();
        crate::by_name::sort_keys(&mut entries);
        Components {
            entries: Entries::from_vec(entries),
        }
    }
}

impl FromIterator<(String, Component)> for Components {
    fn from_iter<I: IntoIterator<Item = (String, Component)>>(iter: I) -> Self {
        iter.into_iter().map(|(r, c)| (role(r), c)).collect()
    }
}

impl<'a> IntoIterator for &'a Components {
    type Item = (&'a str, &'a Component);
    type IntoIter = Iter<'a>;
    fn into_iter(self) -> Iter<'a> {
        Iter(self.entries.as_slice().iter())
    }
}

/// The components of an object with their roles, in role order.
#[derive(Debug, Clone)]
pub struct Iter<'a>(std::slice::Iter<'a, (Role, Component)>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a Component);
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(r, c)| (r.as_str(), c))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl Index<&str> for Components {
    type Output = Component;
    /// Panics when the role is absent, like indexing a map.
    fn index(&self, role: &str) -> &Component {
        match self.get(role) {
            Some(c) => c,
            None => panic!("no component {role:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::size_of;

    /// What a manifest of a million objects costs follows from these: an
    /// object with its one component inline, its digest in 40 bytes, a
    /// role in 16, attributes in 8 (the catalog keeps a manifest in under
    /// 4x its encoded size: `tests/hostile_load.rs`).
    #[test]
    fn an_object_and_its_component_stay_small() {
        assert_eq!(size_of::<Option<crate::Digest>>(), 40);
        assert_eq!(size_of::<super::Role>(), 16);
        assert!(size_of::<crate::Component>() <= 128);
        assert!(size_of::<super::Components>() <= 144);
        assert!(size_of::<crate::Object>() <= 200);
    }

    #[test]
    fn a_second_component_moves_both_out_of_line_in_role_order() {
        let c = |at| crate::Component::of_file(crate::DType::U8, at, 1);
        let mut all = super::Components::new();
        all.insert("values".into(), c(0));
        assert_eq!(all.len(), 1);
        all.insert("offsets".into(), c(8));
        all.insert("mine".into(), c(16));
        assert_eq!(
            all.keys().collect::<Vec<_>>(),
            ["mine", "offsets", "values"]
        );
        assert_eq!(all.get("values").map(|v| v.offset), Some(0));
        let replaced = all.insert("values".into(), c(24));
        assert_eq!(replaced.map(|v| v.offset), Some(0));
        assert_eq!(all.len(), 3);
    }
}
