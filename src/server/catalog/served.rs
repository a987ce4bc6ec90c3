//! What a catalog entry is made of: a served file, one that is not
//! served and why, the identity that tells versions apart, and a file
//! found by a scan before its digests are known.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use zt_format::container::Synthesized;
use zt_format::{Digest, Manifest, Origin, Source};

use crate::server::catalog::etag;
use crate::server::integrity::checks::{CheckFailure, Checks};
use crate::server::integrity::digests::Computed;
use crate::server::store::{Blob, Identity};

/// A served file.
#[derive(Debug)]
pub struct Served {
    /// Path under the root, with `/` separators.
    pub path: String,
    pub(crate) file: Blob,
    pub size: u64,
    pub modified: SystemTime,
    /// Strong ETag (quoted), from the content: the header bytes, the size
    /// and every component's digest (the file's own or computed), so the
    /// same on every replica serving the same bytes. While the file's
    /// digests are being computed, its provisional tag.
    pub etag: String,
    /// For a file whose digests the server computed: the provisional ETag
    /// it was served under before they were all known (see
    /// [`Found::provisional`]), still accepted as naming this version.
    pub(super) provisional: Option<String>,
    /// With every digest the file lacks filled in by the digest store.
    pub manifest: Manifest,
    /// The manifest's CBOR as the file stores it, kept only where it is
    /// served as it is ([`Served::stored_cbor`]); other headers are not
    /// kept once the ETag is made from them.
    pub(super) cbor: Option<Box<[u8]>>,
    /// Whether the digest store filled in any digest.
    pub computed: bool,
    /// The bytes of synthesized components (GGUF string arrays), by
    /// object and role; they are served from here, never read from the file.
    pub(super) synthesized: BTreeMap<(String, String), Bytes>,
    /// A multi-file entry's files (a sharded checkpoint's shards), by the
    /// name its components give in `file`: each served as an entry of its own.
    pub(super) shards: BTreeMap<String, Arc<Served>>,
    pub warnings: Vec<String>,
    /// Each component's digest check, done on first use.
    pub(super) checks: Checks,
    pub(super) identity: Identity,
}

impl Served {
    /// This version of the file's bytes as a key: its path and identity (a
    /// local file's device, inode, size, modification and change times; an
    /// object's key and ETag), which move whenever its bytes may have,
    /// an in-place rewrite that puts the modification time back included.
    pub(crate) fn version_key(&self) -> String {
        format!("{}\n{}", self.path, etag::hex(&self.identity.bytes()))
    }

    /// Whether an entity tag names this version of the file: its ETag, or
    /// the provisional one it had while its digests were computed.
    pub fn is_version(&self, tag: &str) -> bool {
        etag::strong_match(tag, &self.etag)
            || self
                .provisional
                .as_deref()
                .is_some_and(|p| etag::strong_match(tag, p))
    }

    /// The tag this version is answered under for a request pinned to
    /// `asked`: the provisional tag when that is the one it names (a
    /// request that found it while the digests were computed, such as a
    /// spread fetch's later shares, is answered under the version it
    /// asked for), else the file's ETag.
    pub fn answered_as(&self, asked: Option<&str>) -> &str {
        match (asked, self.provisional.as_deref()) {
            (Some(tag), Some(p))
                if !etag::strong_match(tag, &self.etag) && etag::strong_match(tag, p) =>
            {
                p
            }
            _ => &self.etag,
        }
    }

    /// The entry that holds a component living in another file (a shard
    /// of a sharded checkpoint); `None` for one of this file. The shard
    /// knows the object by the same name.
    pub fn owner(&self, object: &str, role: &str) -> Option<Arc<Served>> {
        let c = self.manifest.objects.get(object)?.components.get(role)?;
        self.shards.get(c.file.as_deref()?).cloned()
    }

    /// A synthesized component's bytes; `None` for one that is a range of
    /// the file.
    pub fn synthesized(&self, object: &str, role: &str) -> Option<Bytes> {
        self.synthesized
            .get(&(object.to_owned(), role.to_owned()))
            .cloned()
    }

    /// Checks one component's bytes against its digest, once
    /// ([`Checks::check`]: no thread waits on an object's GETs); a
    /// component of another file is checked by that file's entry (a shard
    /// of a sharded checkpoint). A check still to do runs as a task of
    /// its own: a request that goes away (its client hung up) does not drop
    /// it half-done, and the requests waiting on it get its answer instead
    /// of starting over.
    pub(crate) async fn check(
        self: &Arc<Self>,
        object: &str,
        role: &str,
    ) -> Result<(), CheckFailure> {
        let entry = self.owner(object, role).unwrap_or_else(|| Arc::clone(self));
        if entry.checks.passed(&entry.manifest, object, role) {
            return Ok(());
        }
        let (o, r) = (object.to_owned(), role.to_owned());
        tokio::spawn(async move {
            entry
                .checks
                .check(&entry.file, &entry.path, &entry.manifest, &o, &r)
                .await
        })
        .await
        .unwrap_or_else(|e| {
            Err(CheckFailure::Unreadable(format!(
                "{}: object {object:?}, component {role:?}: the check failed: {e}",
                self.path
            )))
        })
    }

    /// Checks every component whose stored bytes overlap one of `spans`,
    /// ([`Served::check`]).
    pub(crate) async fn check_spans(
        self: &Arc<Self>,
        spans: &[std::ops::Range<u64>],
    ) -> Result<(), CheckFailure> {
        for span in spans {
            let parts: Vec<(String, String)> = self
                .checks
                .overlapping(&self.manifest, span)
                .map(|(o, r)| (o.to_owned(), r.to_owned()))
                .collect();
            for (o, r) in parts {
                self.check(&o, &r).await?;
            }
        }
        Ok(())
    }

    /// Whether the bytes behind this entry may no longer be the version it
    /// names: a local file whose identity as `fstat` gives it now (size,
    /// change and modification times) is not the one catalogued, which any
    /// write, truncation or in-place rewrite changes, but a rename over it
    /// or its deletion does not ([`Identity::same_bytes`]); an object whose
    /// version a read found replaced or gone in the store (its reads are
    /// pinned to its listed ETag, and fail then).
    pub(crate) fn changed(&self) -> bool {
        self.file.changed()
    }

    /// The path of the file behind this entry that [`Served::changed`]:
    /// this one, or one of its shards; `None` when none did.
    pub(crate) fn stale(&self) -> Option<&str> {
        if self.changed() {
            return Some(&self.path);
        }
        self.shards
            .values()
            .find(|s| s.changed())
            .map(|s| s.path.as_str())
    }

    /// The components whose stored bytes lie wholly within `span`.
    pub(crate) fn components_within(
        &self,
        span: &std::ops::Range<u64>,
    ) -> Vec<(std::ops::Range<u64>, String, String)> {
        self.checks
            .within(&self.manifest, span)
            .map(|(at, o, r)| (at, o.to_owned(), r.to_owned()))
            .collect()
    }

    /// A passed component's CRC-32C, kept from its check (see `checks.rs`).
    pub(crate) fn kept_crc(&self, object: &str, role: &str) -> Option<Digest> {
        self.checks.kept(&self.manifest, object, role)
    }

    /// Keeps a passed component's CRC-32C, computed by a response that
    /// checked its bytes against the digest itself.
    pub(crate) fn keep_crc(&self, object: &str, role: &str, crc: Digest) {
        self.checks.keep(&self.manifest, object, role, &crc);
    }

    /// Whether every component overlapping `span` was checked and passed
    /// (no check would block).
    pub(crate) fn is_checked_span(&self, span: &std::ops::Range<u64>) -> bool {
        self.checks.span_passed(&self.manifest, span)
    }

    /// The components of this file not checked yet, by number (for the
    /// background verifier: [`Served::unchecked_component`] names each).
    pub(crate) fn unchecked(&self) -> Vec<u32> {
        self.checks.unchecked()
    }

    /// An unchecked component's object, role and stored length.
    pub(crate) fn unchecked_component(&self, cell: u32) -> Option<(String, String, u64)> {
        self.checks.named(&self.manifest, cell)
    }

    /// The version of the file this entry serves.
    pub(crate) fn identity(&self) -> Identity {
        self.identity
    }

    /// The manifest's CBOR as the file stores it, when nothing was added
    /// to it (a v1.2 `.zt` file whose components all carry digests).
    pub fn stored_cbor(&self) -> Option<&[u8]> {
        self.cbor.as_deref()
    }
}

/// Whether a manifest is served as the file stores it: a v1.2 `.zt`
/// file's, when nothing was added to it (all its components carry digests).
fn stored_as_is(m: &Manifest, computed: bool) -> bool {
    m.source == Source::Zt && m.origin == Origin::V1 && !computed
}

/// A file that exists but is not served.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub path: String,
    pub size: u64,
    pub modified: SystemTime,
    pub reason: String,
    pub(super) identity: Identity,
}

/// A file whose header was read and validated: what a served entry is
/// made of once its digests are known.
#[derive(Debug)]
pub(crate) struct Found {
    pub(crate) path: String,
    pub(crate) file: Blob,
    pub(super) size: u64,
    pub(super) modified: SystemTime,
    pub(super) identity: Identity,
    pub(crate) manifest: Manifest,
    pub(super) raw: Vec<u8>,
    pub(super) warnings: Vec<String>,
    pub(crate) synthesized: Synthesized,
    /// [`Found::provisional_etag`], made once (a hash of the header).
    pub(super) tag: std::sync::OnceLock<String>,
}

impl Found {
    /// Whether a component lacks a digest.
    pub(super) fn lacks_digests(&self) -> bool {
        self.manifest
            .components()
            .any(|(_, _, c)| c.digest.is_none())
    }

    /// The served entry, with `computed` digests filled in; `fresh` when
    /// they were just computed from this file handle's bytes (rather than
    /// read from the store, which the first request for a component then
    /// checks against the file).
    pub(super) fn serve(self, computed: Option<&Computed>, fresh: bool) -> Result<Served, String> {
        let Found {
            path,
            file,
            size,
            modified,
            identity,
            mut manifest,
            raw,
            warnings,
            synthesized,
            tag: _,
        } = self;
        let filled = match computed {
            Some(computed) => fill(&path, &mut manifest, computed, true)?,
            None => false,
        };
        let tag = manifest.source.name();
        let provisional = filled.then(|| provisional_tag(&manifest, &raw, &identity));
        let etag = if manifest.components().any(|(_, _, c)| c.digest.is_none()) {
            // Digests are off: nothing speaks for the tensors' bytes but
            // the file's modification time.
            let mtime = identity.mtime_ns.to_le_bytes();
            etag::derived(tag, &[&raw, &size.to_le_bytes(), &mtime])
        } else if filled && identity.is_shared() {
            // The store's version names the bytes for every replica alike,
            // whether or not it has computed the digests yet.
            provisional_tag(&manifest, &raw, &identity)
        } else if filled {
            // Each component's names and digest, hashed as they are listed
            // (the same bytes as ever: the tags stay the same).
            use std::borrow::Cow;
            let size = size.to_le_bytes();
            let head = [Cow::Borrowed(&raw[..]), Cow::Borrowed(&size[..])];
            let each = manifest.components().map(|(o, r, c)| {
                let d = c.digest.as_ref().map(Digest::to_string).unwrap_or_default();
                Cow::Owned(
                    [
                        o.as_bytes(),
                        b"\0",
                        r.as_bytes(),
                        b"\0",
                        d.as_bytes(),
                        b"\0",
                    ]
                    .concat(),
                )
            });
            etag::derived_from(tag, head.into_iter().chain(each))
        } else {
            // Unchanged for `.zt` files with digests: the manifest names
            // every component's digest.
            etag::derived(tag, &[&raw, &size.to_le_bytes()])
        };
        tracing::debug!(
            file = path,
            objects = manifest.objects.len(),
            "serving file"
        );
        let checks = Checks::new(&manifest, fresh);
        let cbor = stored_as_is(&manifest, filled).then(|| raw.into_boxed_slice());
        Ok(Served {
            path,
            file,
            size,
            modified,
            etag,
            provisional,
            checks,
            manifest,
            cbor,
            computed: filled,
            warnings,
            identity,
            synthesized: synthesized
                .into_iter()
                .map(|(k, v)| (k, Bytes::from(v)))
                .collect(),
            shards: BTreeMap::new(),
        })
    }
}

impl Found {
    /// The ETag the file is served under while its digests are computed
    /// (see [`Found::provisional`]); an object's, its ETag for good.
    pub(crate) fn provisional_etag(&self) -> &str {
        self.tag
            .get_or_init(|| provisional_tag(&self.manifest, &self.raw, &self.identity))
    }

    /// The file served before all its digests are known, for a request
    /// that needs only `objects` (every object when `None`; the raw bytes
    /// need no computed digest): the digests in `computed` filled in, the
    /// others left out, under the provisional ETag. That tag is made from
    /// the header and the file's identity, so it changes with every change
    /// to the file, but it is this daemon's own: another replica, or this
    /// one once the digests are in, gives the file its content-derived
    /// ETag, and keeps accepting the provisional one while the file is
    /// unchanged ([`Served::is_version`]).
    pub(crate) fn provisional(
        &self,
        objects: Option<&BTreeSet<String>>,
        computed: &Computed,
    ) -> Result<Served, String> {
        let wanted = |o: &str| objects.is_none_or(|set| set.contains(o));
        let mut manifest = self.manifest.clone();
        manifest.objects.retain(|o, _| wanted(o));
        fill(&self.path, &mut manifest, computed, false)?;
        let file = self.file.clone();
        let etag = self.provisional_etag().to_owned();
        Ok(Served {
            path: self.path.clone(),
            file,
            size: self.size,
            modified: self.modified,
            provisional: Some(etag.clone()),
            etag,
            // Computed digests were hashed from this file handle's bytes.
            checks: Checks::new(&manifest, true),
            manifest,
            cbor: None,
            computed: true,
            warnings: self.warnings.clone(),
            identity: self.identity,
            synthesized: self
                .synthesized
                .iter()
                .filter(|((o, _), _)| wanted(o))
                .map(|(k, v)| (k.clone(), Bytes::from(v.clone())))
                .collect(),
            shards: BTreeMap::new(),
        })
    }
}

/// Fills in the digests `computed` has for components that lack one;
/// `strict`: every such component must have one. Whether any was filled.
fn fill(path: &str, m: &mut Manifest, computed: &Computed, strict: bool) -> Result<bool, String> {
    let mut filled = false;
    for (o, obj) in m.objects.iter_mut() {
        for (r, c) in obj.components.iter_mut() {
            if c.digest.is_some() {
                continue;
            }
            let Some(digest) = computed.get(o, r) else {
                if strict {
                    return Err(format!(
                        "{path}: no computed digest for object {o:?}, component {r:?}"
                    ));
                }
                continue;
            };
            c.digest = Some(digest.clone());
            c.digest_computed = true;
            filled = true;
        }
    }
    Ok(filled)
}

/// The provisional ETag of a file whose digests are being computed: from
/// its source, header and identity. An object's is its ETag for good
/// (`o-`), before and after its digests are computed: its identity is the
/// store's version, the same on every replica.
fn provisional_tag(m: &Manifest, raw: &[u8], identity: &Identity) -> String {
    let source = m.source.name().as_bytes();
    let kind = if identity.is_shared() { "o" } else { "p" };
    etag::derived(kind, &[source, b"\0", raw, &identity.bytes()])
}
