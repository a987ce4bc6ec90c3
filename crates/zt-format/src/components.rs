//! The components of one object: a small map from role to component, kept
//! as a sorted vector. Objects have one to a few components, and a vector
//! costs one allocation where a B-tree node would cost a couple of kilobytes.

use std::borrow::Cow;
use std::ops::Index;

use crate::component::Component;

/// Components by role, iterated in role order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Components {
    entries: Vec<(Role, Component)>,
}

/// A role's name; the roles the formats name are static and cost no
/// allocation (most objects have one component, `data`).
pub(crate) type Role = Cow<'static, str>;

/// The static name for `name` when a format names it.
fn named(name: &str) -> Option<&'static str> {
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
    NAMED.iter().find(|r| **r == name).copied()
}

fn role(name: String) -> Role {
    named(&name).map_or(Cow::Owned(name), Cow::Borrowed)
}

/// A role read from a manifest: copied only if no format names it.
pub(crate) fn parsed_role(name: &str) -> Role {
    named(name).map_or_else(|| Cow::Owned(name.to_owned()), Cow::Borrowed)
}

impl Components {
    pub fn new() -> Self {
        Components::default()
    }

    fn find(&self, role: &str) -> Result<usize, usize> {
        self.entries.binary_search_by(|(r, _)| r.as_ref().cmp(role))
    }

    pub fn get(&self, role: &str) -> Option<&Component> {
        self.find(role)
            .ok()
            .and_then(|i| self.entries.get(i))
            .map(|(_, c)| c)
    }

    pub fn get_mut(&mut self, role: &str) -> Option<&mut Component> {
        match self.find(role) {
            Ok(i) => self.entries.get_mut(i).map(|(_, c)| c),
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
                .get_mut(i)
                .map(|e| std::mem::replace(&mut e.1, c)),
            Err(i) => {
                // Exactly: most objects have one component, and a vector's
                // first growth would make room for four (a manifest of a
                // million objects held 528 MB of empty slots).
                self.entries.reserve_exact(1);
                self.entries.insert(i, (role(name), c));
                None
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Component)> {
        self.entries.iter().map(|(r, c)| (r.as_ref(), c))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Component)> {
        self.entries.iter_mut().map(|(r, c)| (&**r, c))
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(r, _)| r.as_ref())
    }

    pub fn values(&self) -> impl Iterator<Item = &Component> {
        self.entries.iter().map(|(_, c)| c)
    }
}

impl FromIterator<(Role, Component)> for Components {
    fn from_iter<I: IntoIterator<Item = (Role, Component)>>(iter: I) -> Self {
        let mut entries: Vec<(Role, Component)> = iter.into_iter().collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        // Later duplicates win, as with a map.
        entries.dedup_by(|later, earlier| {
            if later.0 == earlier.0 {
                std::mem::swap(later, earlier);
                true
            } else {
                false
            }
        });
        Components { entries }
    }
}

impl FromIterator<(String, Component)> for Components {
    fn from_iter<I: IntoIterator<Item = (String, Component)>>(iter: I) -> Self {
        iter.into_iter().map(|(r, c)| (role(r), c)).collect()
    }
}

impl<'a> IntoIterator for &'a Components {
    type Item = (&'a str, &'a Component);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (Role, Component)>,
        fn(&'a (Role, Component)) -> (&'a str, &'a Component),
    >;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(r, c)| (r.as_ref(), c))
    }
}

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
