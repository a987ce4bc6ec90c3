//! Computed digests on disk: one JSON record per served file under
//! `state_dir/digests/`, named by a hash of the file's path, holding the
//! file's identity (device, inode, size, modification and change times),
//! the algorithm and each component's digest. A record whose identity or
//! algorithm differs from the file's is stale and ignored, so a changed
//! file is hashed anew. It is a cache: a missing, unreadable or corrupt
//! record only costs hashing the file again, and replicas never depend on
//! each other's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zt_format::{Digest, DigestAlgorithm};

use crate::server::store::Identity;

/// Computed digests, by object, then component, in that order: one
/// entry per component, the names shared with the manifest's order of
/// things to hash, the digest as its value (a million components hold
/// about 90 MB, not nested maps of strings). On disk, the JSON map of
/// object to component to digest text it always was.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Computed {
    entries: Vec<(Arc<str>, Arc<str>, Digest)>,
}

impl Computed {
    pub(crate) fn new() -> Computed {
        Computed::default()
    }

    fn find(&self, object: &str, role: &str) -> Result<usize, usize> {
        self.entries
            .binary_search_by(|(o, r, _)| (&**o, &**r).cmp(&(object, role)))
    }

    /// Sets a component's digest (cheaply when they come in order).
    pub(crate) fn insert(&mut self, object: &Arc<str>, role: &Arc<str>, digest: Digest) {
        let last = self.entries.last().map(|(o, r, _)| (&**o, &**r));
        if last.is_none_or(|l| l < (&**object, &**role)) {
            self.entries
                .push((Arc::clone(object), Arc::clone(role), digest));
            return;
        }
        match self.find(object, role) {
            Ok(i) => {
                if let Some(e) = self.entries.get_mut(i) {
                    e.2 = digest;
                }
            }
            Err(i) => self
                .entries
                .insert(i, (Arc::clone(object), Arc::clone(role), digest)),
        }
    }

    /// A component's digest.
    pub(crate) fn get(&self, object: &str, role: &str) -> Option<&Digest> {
        let i = self.find(object, role).ok()?;
        self.entries.get(i).map(|(_, _, d)| d)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether every digest is of `algorithm`.
    fn all_of(&self, algorithm: DigestAlgorithm) -> bool {
        self.entries
            .iter()
            .all(|(_, _, d)| d.algorithm() == Some(algorithm))
    }
}

impl Serialize for Computed {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        let mut rest = self.entries.as_slice();
        while let Some((object, _, _)) = rest.first() {
            let n = rest.iter().take_while(|(o, _, _)| o == object).count();
            let (one, others) = rest.split_at(n);
            map.serialize_entry(&**object, &Roles(one))?;
            rest = others;
        }
        map.end()
    }
}

/// One object's entries, serialized as a map of component to digest.
struct Roles<'a>(&'a [(Arc<str>, Arc<str>, Digest)]);

impl Serialize for Roles<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(_, r, d)| (&**r, d.to_string())))
    }
}

impl<'de> Deserialize<'de> for Computed {
    /// One object's map at a time, each digest parsed as it comes: a
    /// record of a million components is never held as nested maps.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Computed, D::Error> {
        struct Objects;
        impl<'de> serde::de::Visitor<'de> for Objects {
            type Value = Computed;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a map of object to component to digest")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Computed, A::Error> {
                use serde::de::Error as _;
                let mut out = Computed::new();
                let mut roles: BTreeMap<String, Arc<str>> = BTreeMap::new();
                while let Some(object) = map.next_key::<String>()? {
                    let object: Arc<str> = Arc::from(object);
                    let digests = map.next_value::<BTreeMap<String, String>>()?;
                    for (role, text) in digests {
                        let digest = Digest::parse(&text).map_err(A::Error::custom)?;
                        let role = roles
                            .entry(role)
                            .or_insert_with_key(|r| Arc::from(r.as_str()));
                        out.insert(&object, role, digest);
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(Objects)
    }
}

#[derive(Debug, Deserialize)]
struct Record {
    path: String,
    identity: Identity,
    algorithm: String,
    digests: Computed,
}

/// A record as written, borrowing what it holds.
#[derive(Serialize)]
struct RecordOut<'a> {
    path: &'a str,
    identity: &'a Identity,
    algorithm: &'static str,
    digests: &'a Computed,
}

/// The records of one state directory.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
}

impl Store {
    pub(crate) fn new(state_dir: &Path) -> Store {
        Store {
            dir: state_dir.join("digests"),
        }
    }

    fn record_path(&self, path: &str) -> PathBuf {
        let h = Sha256::digest(path.as_bytes());
        self.dir.join(format!("{}.json", hex_prefix(&h)))
    }

    /// The digests recorded for `path` while it had `identity`, if any.
    pub(crate) fn load(
        &self,
        path: &str,
        identity: &Identity,
        algorithm: DigestAlgorithm,
    ) -> Option<Computed> {
        let bytes = std::fs::read(self.record_path(path)).ok()?;
        let r: Record = serde_json::from_slice(&bytes).ok()?;
        let current = r.path == path && r.identity == *identity;
        let same = r.algorithm == algorithm.name() && r.digests.all_of(algorithm);
        (current && same).then_some(r.digests)
    }

    /// Records `digests`; a failure is logged and otherwise ignored (the
    /// store is a cache).
    pub(crate) fn save(
        &self,
        path: &str,
        identity: &Identity,
        algorithm: DigestAlgorithm,
        digests: &Computed,
    ) {
        let record = RecordOut {
            path,
            identity,
            algorithm: algorithm.name(),
            digests,
        };
        let target = self.record_path(path);
        let tmp = zt_format::temp_path(&target);
        // Written beside the record and renamed over it: a crash leaves the
        // old record or the new one, never half of one.
        let result = serde_json::to_vec(&record)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                std::fs::create_dir_all(&self.dir)?;
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, &target)
            });
        if let Err(e) = result {
            tracing::warn!(file = path, dir = %self.dir.display(), error = %e, "cannot record computed digests; they will be computed again after a restart");
        }
    }
}

fn hex_prefix(h: &[u8]) -> String {
    h.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On disk a record's digests are the JSON map of object to component
    /// to digest text they always were; read back, they are the same.
    #[test]
    fn computed_digests_keep_their_json_form() {
        let sha = |b: &[u8]| DigestAlgorithm::Sha256.digest(b);
        let (a, b, data, offsets) = (
            Arc::<str>::from("a"),
            Arc::<str>::from("b"),
            Arc::<str>::from("data"),
            Arc::<str>::from("offsets"),
        );
        let mut c = Computed::new();
        c.insert(&b, &data, sha(b"2"));
        // Out of order, and one replaced.
        c.insert(&a, &offsets, sha(b"0"));
        c.insert(&a, &data, sha(b"x"));
        c.insert(&a, &data, sha(b"1"));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get("a", "data"), Some(&sha(b"1")));
        let json = serde_json::to_value(&c).unwrap();
        let want = serde_json::json!({
            "a": {"data": sha(b"1").to_string(), "offsets": sha(b"0").to_string()},
            "b": {"data": sha(b"2").to_string()},
        });
        assert_eq!(json, want);
        let back: Computed = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
        let bad = serde_json::json!({"a": {"data": "sha256:zz"}});
        assert!(serde_json::from_value::<Computed>(bad).is_err());
    }
}
