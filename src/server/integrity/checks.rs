//! Each served component's digest, checked against the file once (the
//! first time the component is asked for, over HTTP or QUIC, or by the
//! background verifier, whichever comes first), and remembered for as
//! long as the file is unchanged. A component whose bytes do not match
//! its digest is never sent; it is refused naming the file, object,
//! component and rule. A component that cannot be read (the file was
//! truncated under the daemon, or the disk failed) is refused too, but not
//! remembered: the next request tries again.
//!
//! A check also keeps the component's CRC-32C (its digest itself when that
//! is one), computed in the same pass: responses that must prove again, as
//! they stream, that they carry exactly this version's bytes
//! ([`crate::server::serve::recheck`]) compare against it at memory speed
//! instead of hashing sha256 on every request.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::inflight::Inflight;

use zt_format::ragged::OffsetsCheck;
use zt_format::{
    Component, Decoder, Digest, DigestAlgorithm, DigestValue, Encoding, Format, Hasher, Manifest,
    Object, Rule,
};

use super::tee::Tee;
use crate::server::store::blob::{Blob, Stop, Visit};

/// Why a component is not sent. Each names the file, object and component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CheckFailure {
    /// The stored bytes do not match the digest (and the rule that failed).
    Corrupt(String),
    /// The bytes could not be read.
    Unreadable(String),
}

impl std::fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckFailure::Corrupt(why) | CheckFailure::Unreadable(why) => f.write_str(why),
        }
    }
}

/// The outcome of each component's check, filled in on first use.
///
/// Compact, as a manifest may hold a million components: per component a
/// cell (its verdict), its CRC-32C once known, and its names (each object's
/// name shared by its components, each role's by every object); cells are
/// in the manifest's order, by object, then role, so a component is found
/// by binary search. A component being read for its check holds a lock
/// only while it is read.
#[derive(Debug, Default)]
pub(crate) struct Checks {
    cells: Vec<OnceLock<Result<(), Box<str>>>>,
    /// Each passed component's CRC-32C, once known.
    kept: Vec<OnceLock<u32>>,
    /// Each cell's (object, role), in order.
    names: Vec<(Arc<str>, Arc<str>)>,
    /// Held while a component is read for its check, so that requests
    /// asking for it at once read it once (the others wait, then find the
    /// answer); only for the components being read.
    reading: Inflight,
    /// The components that are byte ranges of this file, by offset
    /// (start, end, cell): components never overlap, so the ones a span
    /// touches are found by binary search.
    by_offset: Vec<(u64, u64, u32)>,
    /// Digests just computed from this very file handle's bytes: hashing
    /// them again on first use would read the same bytes twice for
    /// nothing. Their other rules still run.
    fresh: bool,
}

impl Checks {
    /// One unfilled cell per component of `m`; `fresh` when its computed
    /// digests were just hashed from the file being served.
    pub(crate) fn new(m: &Manifest, fresh: bool) -> Checks {
        let mut roles: HashMap<&str, Arc<str>> = HashMap::new();
        let mut names = Vec::new();
        let mut by_offset = Vec::new();
        let mut last: Option<Arc<str>> = None;
        for (cell, (o, r, c)) in m.components().enumerate() {
            let object = match &last {
                Some(l) if **l == *o => Arc::clone(l),
                _ => Arc::<str>::from(o),
            };
            last = Some(Arc::clone(&object));
            let role = Arc::clone(roles.entry(r).or_insert_with(|| Arc::from(r)));
            names.push((object, role));
            if !c.synthesized && c.file.is_none() && c.length > 0 {
                let end = c.offset.saturating_add(c.length);
                let cell = u32::try_from(cell).unwrap_or(u32::MAX);
                by_offset.push((c.offset, end, cell));
            }
        }
        by_offset.sort_unstable();
        let count = names.len();
        Checks {
            cells: (0..count).map(|_| OnceLock::new()).collect(),
            kept: (0..count).map(|_| OnceLock::new()).collect(),
            names,
            reading: Inflight::default(),
            by_offset,
            fresh,
        }
    }

    fn cell(&self, object: &str, role: &str) -> Option<&OnceLock<Result<(), Box<str>>>> {
        self.cells.get(self.cell_index(object, role)?)
    }

    fn cell_index(&self, object: &str, role: &str) -> Option<usize> {
        self.names
            .binary_search_by(|(o, r)| (&**o, &**r).cmp(&(object, role)))
            .ok()
    }

    /// A cell's (object, role).
    fn named(&self, cell: u32) -> (&str, &str) {
        self.names
            .get(cell as usize)
            .map_or(("", ""), |(o, r)| (&**o, &**r))
    }

    /// The components whose stored bytes overlap `span`, by (object, role).
    pub(crate) fn overlapping(
        &self,
        span: &std::ops::Range<u64>,
    ) -> impl Iterator<Item = (&str, &str)> {
        self.overlapping_rows(span)
            .map(|(_, _, cell)| self.named(*cell))
    }

    /// The components whose stored bytes lie wholly within `span`, with
    /// their spans, by offset.
    pub(crate) fn within(
        &self,
        span: &std::ops::Range<u64>,
    ) -> impl Iterator<Item = (std::ops::Range<u64>, &str, &str)> {
        let (start, stop) = (span.start, span.end);
        self.overlapping_rows(span)
            .filter(move |(at, end, _)| *at >= start && *end <= stop)
            .map(|(at, end, cell)| {
                let (o, r) = self.named(*cell);
                (*at..*end, o, r)
            })
    }

    fn overlapping_rows(
        &self,
        span: &std::ops::Range<u64>,
    ) -> impl Iterator<Item = &(u64, u64, u32)> {
        let (start, stop) = (span.start, span.end);
        let first = self.by_offset.partition_point(|(_, end, _)| *end <= start);
        self.by_offset
            .get(first..)
            .unwrap_or_default()
            .iter()
            .take_while(move |(at, _, _)| *at < stop)
    }

    /// The CRC-32C of a passed component's bytes, when it is known.
    pub(crate) fn kept(&self, object: &str, role: &str) -> Option<Digest> {
        let crc = self.kept.get(self.cell_index(object, role)?)?.get()?;
        Some(Digest::from_crc32c(*crc))
    }

    /// Keeps a passed component's CRC-32C, computed by a response that
    /// checked its bytes against the digest itself.
    pub(crate) fn keep(&self, object: &str, role: &str, crc: &Digest) {
        let DigestValue::Crc32c(value) = crc.value() else {
            return;
        };
        if let Some(cell) = self.cell_index(object, role).and_then(|i| self.kept.get(i)) {
            let _ = cell.set(*value);
        }
    }

    /// Whether the component was checked and passed.
    pub(crate) fn passed(&self, object: &str, role: &str) -> bool {
        self.cell(object, role)
            .and_then(|c| c.get())
            .is_some_and(Result::is_ok)
    }

    /// The components not checked yet, with their stored lengths.
    pub(crate) fn unchecked(&self) -> Vec<(String, String, u64)> {
        self.by_offset
            .iter()
            .filter(|(_, _, cell)| {
                self.cells
                    .get(*cell as usize)
                    .is_some_and(|c| c.get().is_none())
            })
            .map(|(start, end, cell)| {
                let (o, r) = self.named(*cell);
                (o.to_owned(), r.to_owned(), end - start)
            })
            .collect()
    }

    /// What checking `object`'s `role` takes: `None` when nothing is left
    /// to do (checked and passed, no digest cell, built in memory); a
    /// component that failed its check before is refused again.
    fn job<'a>(
        &'a self,
        m: &'a Manifest,
        object: &str,
        role: &str,
    ) -> Result<Option<Job<'a>>, CheckFailure> {
        let (Some(index), Some(c)) = (
            self.cell_index(object, role),
            m.objects.get(object).and_then(|o| o.components.get(role)),
        ) else {
            return Ok(None);
        };
        let Some(cell) = self.cells.get(index) else {
            return Ok(None);
        };
        if c.synthesized {
            // Built from the header in memory, hashed there: no file
            // range to check it against.
            return Ok(None);
        }
        if let Some(done) = cell.get() {
            return done.clone().map(|()| None).map_err(corrupt);
        }
        let ragged = m
            .objects
            .get(object)
            .filter(|o| o.format == Format::Ragged && role == "offsets");
        Ok(Some(Job {
            index,
            cell,
            c,
            ragged,
            // Digests just computed from this very file handle's bytes.
            trusted: self.fresh && c.digest_computed,
        }))
    }

    /// Checks the component once; later calls return the first answer
    /// (calls at once wait for the first). Its pieces are read on the
    /// runtime (a local file's on the blocking pool, an object's GETs
    /// awaited) and hashed on the blocking pool, so no thread waits on the
    /// network. Components without a digest, or with an algorithm this
    /// build does not know, pass: there is nothing to check them against,
    /// and clients decide what to accept.
    pub(crate) async fn check(
        &self,
        file: &Blob,
        path: &str,
        m: &Manifest,
        object: &str,
        role: &str,
    ) -> Result<(), CheckFailure> {
        let Some(job) = self.job(m, object, role)? else {
            return Ok(());
        };
        let _reading = self.reading.lock(job.index).await;
        if let Some(done) = job.cell.get() {
            return done.clone().map_err(corrupt);
        }
        let checked = match job.trusted {
            true => Checked::Passed(None),
            false => hash(file, job.c).await,
        };
        if let Checked::Passed(Some(crc)) = &checked {
            self.keep(object, role, crc);
        }
        let checked = match (checked, job.ragged) {
            (Checked::Passed(_), Some(obj)) => ragged(file, obj, job.c).await,
            (checked, _) => checked,
        };
        settle(&job, path, object, role, checked)
    }
}

fn corrupt(why: Box<str>) -> CheckFailure {
    CheckFailure::Corrupt(why.into())
}

/// A component to check, and where its answer goes.
struct Job<'a> {
    index: usize,
    cell: &'a OnceLock<Result<(), Box<str>>>,
    c: &'a Component,
    /// The object, when the component is a ragged object's offsets.
    ragged: Option<&'a Object>,
    /// Its digest was computed from this very file handle's bytes: hashing
    /// it again would read the same bytes twice for nothing.
    trusted: bool,
}

/// What checking a component found.
enum Checked {
    /// Its bytes match their digest (and a ragged object's offsets its
    /// values), or it has no digest to check; their CRC-32C when they
    /// were hashed.
    Passed(Option<Digest>),
    /// The rule its bytes break.
    Broke(Rule),
    /// They could not be read.
    Unreadable(String),
}

/// The answer of a check: remembered when it is a verdict, not when the
/// bytes could not be read (the next request tries again).
fn settle(
    job: &Job<'_>,
    path: &str,
    object: &str,
    role: &str,
    checked: Checked,
) -> Result<(), CheckFailure> {
    let named = |e: String| format!("{path}: object {object:?}, component {role:?}: {e}");
    let verdict = match checked {
        Checked::Passed(_) => Ok(()),
        Checked::Broke(rule) => Err(named(format!("{}: {rule}", rule.name())).into()),
        Checked::Unreadable(why) => return Err(CheckFailure::Unreadable(named(why))),
    };
    job.cell.get_or_init(|| verdict).clone().map_err(corrupt)
}

/// A ragged object's offsets checked against its values as they are
/// read (and decoded, a piece at a time: never whole), on the blocking
/// pool.
async fn ragged(file: &Blob, obj: &Object, c: &Component) -> Checked {
    let count = obj
        .components
        .get("values")
        .and_then(|v| v.decoded_length()?.checked_div(v.dtype.size()))
        .unwrap_or(0);
    // The manifest's lengths passed `limits.decompress_cap` when the file
    // was catalogued.
    let decoder = match (c.encoding, c.uncompressed_length) {
        (Encoding::Zstd, Some(n)) => match Decoder::new(n, u64::MAX, DECODED_PIECE) {
            Ok(d) => Some(d),
            Err(rule) => return Checked::Broke(rule),
        },
        _ => None,
    };
    let offsets = Offsets {
        decoder,
        check: OffsetsCheck::new(count),
    };
    let range = c.offset..c.offset.saturating_add(c.length);
    let mut done = match file.visit(range, false, offsets).await {
        Ok(done) => done,
        Err(Stop::Read(e)) => return Checked::Unreadable(e.to_string()),
        Err(Stop::By(rule)) => return Checked::Broke(rule),
    };
    let ended = match done.decoder.take() {
        Some(d) => d.finish(|p| done.check.feed(p)),
        None => Ok(()),
    };
    match ended.and_then(|()| done.check.finish()) {
        Ok(()) => Checked::Passed(None),
        Err(rule) => Checked::Broke(rule),
    }
}

/// The decoded bytes a ragged object's offsets are checked in.
const DECODED_PIECE: usize = 1 << 20;

/// A ragged object's offsets, fed to their check as they are read.
struct Offsets {
    decoder: Option<Decoder>,
    check: OffsetsCheck,
}

impl Visit for Offsets {
    type Error = Rule;

    fn piece(&mut self, bytes: &[u8]) -> Result<(), Rule> {
        let check = &mut self.check;
        match &mut self.decoder {
            Some(d) => d.feed(bytes, |p| check.feed(p)),
            None => check.feed(bytes),
        }
    }
}

/// The component's bytes against its digest, and their CRC-32C (hashed in
/// the same pass, unless the digest is one).
async fn hash(file: &Blob, c: &Component) -> Checked {
    let Some(digest) = &c.digest else {
        return Checked::Passed(None);
    };
    let Some(algorithm) = digest.algorithm() else {
        return Checked::Passed(None);
    };
    let both = Tee {
        digest: Hasher::new(algorithm),
        crc: (algorithm != DigestAlgorithm::Crc32c).then(|| Hasher::new(DigestAlgorithm::Crc32c)),
    };
    // Kept for the send that follows: an object is then read once.
    let range = c.offset..c.offset.saturating_add(c.length);
    let Tee { digest: h, crc } = match file.visit(range, true, both).await {
        Ok(both) => both,
        Err(Stop::Read(e)) => return Checked::Unreadable(e.to_string()),
        Err(Stop::By(never)) => match never {},
    };
    let got = h.finish();
    match digest.compare(&got) {
        Ok(()) => Checked::Passed(Some(crc.map_or(got, Hasher::finish))),
        Err(rule) => Checked::Broke(rule),
    }
}
