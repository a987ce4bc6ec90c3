//! The digests of slices already gathered (and of row ranges), kept so
//! that the same slice of the same version is hashed once:
//! tensor-parallel ranks restarted, or several replicas of a model each
//! loading the same rank's shard, ask for the same slices again, and the
//! digest pass reads every window of the slice (a column block: the whole
//! tensor) before the first byte is sent. Keyed by the file's version (its
//! path and identity: a new version is a new key), the object, and the
//! slice or rows with where its component lies in the file; at most
//! [`MAX_ENTRIES`] entries of at most [`MAX_KEY`] bytes of key each, the
//! least recently used evicted first. Requests that miss at once each
//! hash (no single flight: a miss costs what it did before the cache).

use std::collections::HashMap;
use std::sync::Mutex;

use prometheus::{IntCounterVec, IntGauge, Registry};
use zt_format::Digest;

use crate::server::families::{counter_vec, gauge, register};

/// Slice digests kept at most.
pub(crate) const MAX_ENTRIES: usize = 4096;

/// Bytes of ETag, object name and slice a key may hold; a longer one is
/// not kept (its slice is hashed every time).
pub(crate) const MAX_KEY: usize = 1024;

/// The kept digests, and their metrics.
#[derive(Debug)]
pub(crate) struct SliceDigests {
    kept: Mutex<Kept>,
    max: usize,
    /// `ztserve_slice_digests_total`, by result: computed or kept.
    results: IntCounterVec,
    /// `ztserve_slice_digest_cache_entries`.
    entries: IntGauge,
}

#[derive(Debug, Default)]
struct Kept {
    by_key: HashMap<String, (Digest, u64)>,
    clock: u64,
}

impl Default for SliceDigests {
    fn default() -> Self {
        SliceDigests::with_max(MAX_ENTRIES)
    }
}

impl SliceDigests {
    fn with_max(max: usize) -> SliceDigests {
        let results = counter_vec(
            "ztserve_slice_digests_total",
            "Digests of gathered slices and row ranges by where they came from: computed (the slice read and hashed before it was sent) or kept (the same slice of the same version hashed before).",
            &["result"],
        );
        for result in ["computed", "kept"] {
            results.with_label_values(&[result]);
        }
        SliceDigests {
            kept: Mutex::default(),
            max,
            results,
            entries: gauge(
                "ztserve_slice_digest_cache_entries",
                "Digests of gathered slices kept for later requests of the same slice.",
            ),
        }
    }

    /// The key of `spec` of `object` in the file's `version`, or `None`
    /// when it is too long to keep.
    pub(crate) fn key(version: &str, object: &str, spec: &str) -> Option<String> {
        let key = format!("{version}\n{object}\n{spec}");
        (key.len() <= MAX_KEY).then_some(key)
    }

    /// The digest kept for `key`, renewed as just used.
    pub(crate) fn get(&self, key: &str) -> Option<Digest> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.clock += 1;
        let now = kept.clock;
        let got = kept.by_key.get_mut(key).map(|(digest, used)| {
            *used = now;
            digest.clone()
        });
        if got.is_some() {
            self.results.with_label_values(&["kept"]).inc();
        }
        got
    }

    /// Counts a digest just computed, and keeps it for `key` (a key too
    /// long to keep is `None`).
    pub(crate) fn computed(&self, key: Option<String>, digest: Digest) {
        self.results.with_label_values(&["computed"]).inc();
        if let Some(key) = key {
            self.put(key, digest);
        }
    }

    /// Keeps `digest` for `key`; past the bound the least recently used
    /// entry goes.
    fn put(&self, key: String, digest: Digest) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.clock += 1;
        let now = kept.clock;
        if !kept.by_key.contains_key(&key) && kept.by_key.len() >= self.max {
            let oldest = kept
                .by_key
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                kept.by_key.remove(&k);
            }
        }
        kept.by_key.insert(key, (digest, now));
        self.entries.set(kept.by_key.len() as i64);
    }

    /// Registers the family in the daemon's registry.
    pub(crate) fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        register(registry, &[&self.results, &self.entries])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(n: u32) -> Digest {
        Digest::from_crc32c(n)
    }

    #[test]
    fn the_bound_holds_and_the_least_recently_used_goes_first() {
        let d = SliceDigests::with_max(3);
        for n in 0..3u32 {
            d.computed(
                SliceDigests::key("\"e\"", "w", &format!("0:{n}")),
                digest(n),
            );
        }
        // "0:0" used again: "0:1" is now the least recently used.
        assert_eq!(d.get("\"e\"\nw\n0:0"), Some(digest(0)));
        d.computed(SliceDigests::key("\"e\"", "w", "0:9"), digest(9));
        assert_eq!(d.entries.get(), 3);
        assert_eq!(d.get("\"e\"\nw\n0:1"), None);
        assert_eq!(d.get("\"e\"\nw\n0:0"), Some(digest(0)));
        assert_eq!(d.get("\"e\"\nw\n0:9"), Some(digest(9)));
        // Another version of the file is another key.
        assert_eq!(d.get("\"f\"\nw\n0:9"), None);
        assert_eq!(d.results.with_label_values(&["kept"]).get(), 3);
        assert_eq!(d.results.with_label_values(&["computed"]).get(), 4);
    }

    #[test]
    fn a_key_past_its_bound_is_not_kept_but_counted() {
        let long = "w".repeat(MAX_KEY);
        assert!(SliceDigests::key("\"e\"", &long, "0:1").is_none());
        assert!(SliceDigests::key("\"e\"", "w", "0:1").is_some());
        let d = SliceDigests::with_max(3);
        d.computed(SliceDigests::key("\"e\"", &long, "0:1"), digest(1));
        assert_eq!(d.entries.get(), 0);
        assert_eq!(d.results.with_label_values(&["computed"]).get(), 1);
    }
}
