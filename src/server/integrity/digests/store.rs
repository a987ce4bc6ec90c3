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

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use zt_format::{Digest, DigestAlgorithm};

use crate::server::store::Identity;

/// Digests by object, then component.
pub(crate) type Computed = BTreeMap<String, BTreeMap<String, String>>;

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    path: String,
    identity: Identity,
    algorithm: String,
    digests: Computed,
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
        let digests_parse = r.digests.values().flat_map(|m| m.values()).all(|d| {
            Digest::parse(d)
                .ok()
                .and_then(|d| d.algorithm())
                .is_some_and(|a| a == algorithm)
        });
        (current && r.algorithm == algorithm.name() && digests_parse).then_some(r.digests)
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
        let record = Record {
            path: path.to_owned(),
            identity: *identity,
            algorithm: algorithm.name().to_owned(),
            digests: digests.clone(),
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
