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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

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
/// Compact, as a manifest may hold a million components: per component
/// one word (its verdict and, once known, its CRC-32C) and its place in
/// the offset order, and per object the number of its first component.
/// Names, offsets and lengths are read from the manifest the checks were
/// made for, which every method is given: cells are in its order, by
/// object, then role. A component being read for its check holds a lock
/// only while it is read.
#[derive(Debug, Default)]
pub(crate) struct Checks {
    /// Each component's [`State`], in the manifest's order.
    cells: Vec<AtomicU64>,
    /// The number of objects of the manifest the checks were made for: a
    /// manifest with another number is not theirs, and finds no cell.
    objects: usize,
    /// Each object's first cell, by its place in the manifest; empty when
    /// every object has exactly one component (its cell is its place).
    first: Vec<u32>,
    /// Why each failed component failed; a cell is marked failed only once
    /// its reason is here (at most one per cell).
    failures: Mutex<HashMap<u32, Box<str>>>,
    /// Held while a component is read for its check, so that requests
    /// asking for it at once read it once (the others wait, then find the
    /// answer); only for the components being read.
    reading: Inflight,
    /// The cells of the components that are byte ranges of this file, by
    /// offset: components never overlap, so the ones a span touches are
    /// found by binary search.
    by_offset: Vec<u32>,
    /// Digests just computed from this very file handle's bytes: hashing
    /// them again on first use would read the same bytes twice for
    /// nothing. Their other rules still run.
    fresh: bool,
}

/// A cell's word: the verdict in the low bits, then whether the CRC-32C
/// is known, and the CRC-32C in the high half.
struct State;

impl State {
    const VERDICT: u64 = 0b11;
    const PASSED: u64 = 0b01;
    const FAILED: u64 = 0b10;
    const KEPT: u64 = 0b100;

    fn crc(word: u64) -> Option<u32> {
        (word & State::KEPT != 0).then_some((word >> 32) as u32)
    }

    fn with_crc(crc: u32) -> u64 {
        State::KEPT | (u64::from(crc) << 32)
    }
}

/// A component's place: the manifest's objects by place, then each one's
/// components in role order.
struct Located<'m> {
    object: &'m str,
    role: &'m str,
    c: &'m Component,
}

impl Checks {
    /// One unfilled cell per component of `m`; `fresh` when its computed
    /// digests were just hashed from the file being served.
    pub(crate) fn new(m: &Manifest, fresh: bool) -> Checks {
        let mut first: Vec<u32> = Vec::with_capacity(m.objects.len());
        let mut spans: Vec<(u64, u32)> = Vec::new();
        let mut count = 0u32;
        for obj in m.objects.values() {
            first.push(count);
            for c in obj.components.values() {
                if !c.synthesized && c.file.is_none() && c.length > 0 {
                    spans.push((c.offset, count));
                }
                count = count.saturating_add(1);
            }
        }
        spans.sort_unstable();
        if m.objects.values().all(|o| o.components.len() == 1) {
            // One component each: the cell of an object is its place.
            first = Vec::new();
        } else {
            first.shrink_to_fit();
        }
        Checks {
            objects: m.objects.len(),
            cells: (0..count).map(|_| AtomicU64::new(0)).collect(),
            first,
            failures: Mutex::new(HashMap::new()),
            reading: Inflight::default(),
            by_offset: spans.into_iter().map(|(_, cell)| cell).collect(),
            fresh,
        }
    }

    /// The cell of `object`'s `role` in `m`.
    fn cell_index(&self, m: &Manifest, object: &str, role: &str) -> Option<usize> {
        if m.objects.len() != self.objects {
            return None;
        }
        let place = m.objects.index_of(object)?;
        let (_, obj) = m.objects.get_index(place)?;
        let nth = obj.components.keys().position(|r| r == role)?;
        let first = usize::try_from(self.first_of(place)?).ok()?;
        Some(first.saturating_add(nth))
    }

    /// The first cell of the object at `place`.
    fn first_of(&self, place: usize) -> Option<u32> {
        match self.first.is_empty() {
            true => u32::try_from(place).ok(),
            false => self.first.get(place).copied(),
        }
    }

    /// The place of the object that cell `cell` is a component of.
    fn place_of(&self, cell: u32) -> Option<usize> {
        match self.first.is_empty() {
            true => usize::try_from(cell).ok(),
            false => self.first.partition_point(|f| *f <= cell).checked_sub(1),
        }
    }

    /// What cell `cell` of `m` is.
    fn locate<'m>(&self, m: &'m Manifest, cell: u32) -> Option<Located<'m>> {
        if m.objects.len() != self.objects {
            return None;
        }
        let place = self.place_of(cell)?;
        let (object, obj) = m.objects.get_index(place)?;
        let nth = cell.checked_sub(self.first_of(place)?)?;
        let (role, c) = obj.components.iter().nth(usize::try_from(nth).ok()?)?;
        Some(Located { object, role, c })
    }

    /// The stored span of cell `cell` (empty when it is not a component).
    fn span(&self, m: &Manifest, cell: u32) -> std::ops::Range<u64> {
        self.locate(m, cell)
            .map_or(0..0, |l| l.c.offset..l.c.offset.saturating_add(l.c.length))
    }

    fn word(&self, cell: usize) -> u64 {
        self.cells
            .get(cell)
            .map_or(0, |w| w.load(Ordering::Acquire))
    }

    /// The verdict of cell `cell`, once there is one.
    fn verdict(&self, cell: usize) -> Option<Result<(), Box<str>>> {
        match self.word(cell) & State::VERDICT {
            State::PASSED => Some(Ok(())),
            State::FAILED => {
                let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                let why = u32::try_from(cell).ok().and_then(|c| failures.get(&c));
                Some(Err(why.cloned().unwrap_or_default()))
            }
            _ => None,
        }
    }

    /// Records the first verdict of cell `cell`; returns the one recorded.
    fn decide(&self, cell: usize, verdict: Result<(), Box<str>>) -> Result<(), Box<str>> {
        let Some(word) = self.cells.get(cell) else {
            return verdict;
        };
        let mark = match verdict {
            Ok(()) => State::PASSED,
            Err(why) => {
                let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                if let Ok(c) = u32::try_from(cell) {
                    failures.entry(c).or_insert(why);
                }
                State::FAILED
            }
        };
        let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
            (w & State::VERDICT == 0).then_some(w | mark)
        });
        self.verdict(cell).unwrap_or(Ok(()))
    }

    /// The components whose stored bytes overlap `span`, by (object, role).
    pub(crate) fn overlapping<'m>(
        &'m self,
        m: &'m Manifest,
        span: &std::ops::Range<u64>,
    ) -> impl Iterator<Item = (&'m str, &'m str)> {
        self.overlapping_cells(m, span)
            .filter_map(move |cell| self.locate(m, cell))
            .map(|l| (l.object, l.role))
    }

    /// The components whose stored bytes lie wholly within `span`, with
    /// their spans, by offset.
    pub(crate) fn within<'m>(
        &'m self,
        m: &'m Manifest,
        span: &std::ops::Range<u64>,
    ) -> impl Iterator<Item = (std::ops::Range<u64>, &'m str, &'m str)> {
        let (start, stop) = (span.start, span.end);
        self.overlapping_cells(m, span).filter_map(move |cell| {
            let l = self.locate(m, cell)?;
            let at = l.c.offset..l.c.offset.saturating_add(l.c.length);
            (at.start >= start && at.end <= stop).then_some((at, l.object, l.role))
        })
    }

    fn overlapping_cells<'m>(
        &'m self,
        m: &'m Manifest,
        span: &std::ops::Range<u64>,
    ) -> impl Iterator<Item = u32> + 'm {
        let (start, stop) = (span.start, span.end);
        let first = self
            .by_offset
            .partition_point(|cell| self.span(m, *cell).end <= start);
        self.by_offset
            .get(first..)
            .unwrap_or_default()
            .iter()
            .copied()
            .take_while(move |cell| self.span(m, *cell).start < stop)
    }

    /// The CRC-32C of a passed component's bytes, when it is known.
    pub(crate) fn kept(&self, m: &Manifest, object: &str, role: &str) -> Option<Digest> {
        let crc = State::crc(self.word(self.cell_index(m, object, role)?))?;
        Some(Digest::from_crc32c(crc))
    }

    /// Keeps a passed component's CRC-32C, computed by a response that
    /// checked its bytes against the digest itself.
    pub(crate) fn keep(&self, m: &Manifest, object: &str, role: &str, crc: &Digest) {
        let DigestValue::Crc32c(value) = crc.value() else {
            return;
        };
        if let Some(word) = self
            .cell_index(m, object, role)
            .and_then(|i| self.cells.get(i))
        {
            let _ = word.fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                (w & State::KEPT == 0).then_some(w | State::with_crc(*value))
            });
        }
    }

    /// Whether the component was checked and passed.
    pub(crate) fn passed(&self, m: &Manifest, object: &str, role: &str) -> bool {
        self.cell_index(m, object, role)
            .is_some_and(|i| self.word(i) & State::VERDICT == State::PASSED)
    }

    /// Whether every component whose stored bytes overlap `span` was
    /// checked and passed.
    pub(crate) fn span_passed(&self, m: &Manifest, span: &std::ops::Range<u64>) -> bool {
        self.overlapping_cells(m, span)
            .all(|cell| self.word(cell as usize) & State::VERDICT == State::PASSED)
    }

    /// The cells of the components not checked yet, by offset.
    pub(crate) fn unchecked(&self) -> Vec<u32> {
        self.by_offset
            .iter()
            .copied()
            .filter(|cell| self.word(*cell as usize) & State::VERDICT == 0)
            .collect()
    }

    /// Cell `cell`'s object and role, and its stored length.
    pub(crate) fn named(&self, m: &Manifest, cell: u32) -> Option<(String, String, u64)> {
        let l = self.locate(m, cell)?;
        Some((l.object.to_owned(), l.role.to_owned(), l.c.length))
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
        let Some(index) = self.cell_index(m, object, role) else {
            return Ok(None);
        };
        let (Some(obj), true) = (m.objects.get(object), index < self.cells.len()) else {
            return Ok(None);
        };
        let Some(c) = obj.components.get(role) else {
            return Ok(None);
        };
        if c.synthesized {
            // Built from the header in memory, hashed there: no file
            // range to check it against.
            return Ok(None);
        }
        if let Some(done) = self.verdict(index) {
            return done.map(|()| None).map_err(corrupt);
        }
        let ragged = (obj.format == Format::Ragged && role == "offsets").then_some(obj);
        Ok(Some(Job {
            index,
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
        if let Some(done) = self.verdict(job.index) {
            return done.map_err(corrupt);
        }
        let checked = match job.trusted {
            true => Checked::Passed(None),
            false => hash(file, job.c).await,
        };
        if let Checked::Passed(Some(crc)) = &checked {
            self.keep(m, object, role, crc);
        }
        let checked = match (checked, job.ragged) {
            (Checked::Passed(_), Some(obj)) => ragged(file, obj, job.c).await,
            (checked, _) => checked,
        };
        let named = |e: String| format!("{path}: object {object:?}, component {role:?}: {e}");
        let verdict = match checked {
            Checked::Passed(_) => Ok(()),
            Checked::Broke(rule) => Err(named(format!("{}: {rule}", rule.name())).into()),
            // Not remembered: the next request tries again.
            Checked::Unreadable(why) => return Err(CheckFailure::Unreadable(named(why))),
        };
        self.decide(job.index, verdict).map_err(corrupt)
    }
}

fn corrupt(why: Box<str>) -> CheckFailure {
    CheckFailure::Corrupt(why.into())
}

/// A component to check, and where its answer goes.
struct Job<'a> {
    index: usize,
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
