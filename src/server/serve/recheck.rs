//! Proving again, as a response streams, that it carries exactly the
//! version of each component its tag names, for the responses a cache may
//! keep for good (`?v=ETAG`) and those that carry a component whole.
//!
//! A component's digest is checked against the file once (`integrity/checks.rs`);
//! after that a local file can still be rewritten in place under a
//! transfer. Every chunk read is followed by an identity check (size,
//! inode, change time: `Served::changed`), which any write through the
//! file system trips; this module adds, for the components a response
//! carries whole, a hash of the bytes actually sent, compared before the
//! chunk holding a component's last byte goes out. It compares with the
//! CRC-32C kept from the component's check (hashed at memory speed), and
//! with the digest itself when none is kept yet (a digest the daemon
//! computed from this very file handle), keeping the CRC-32C then. A
//! component without a digest this build knows has nothing to compare
//! with and relies on the identity check alone.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::Arc;

use zt_format::{Digest, DigestAlgorithm, Hasher};

use crate::server::catalog::Served;

/// The whole components of one span of a response, in order.
#[derive(Debug)]
pub(crate) struct Recheck {
    served: Arc<Served>,
    /// The file offset of the next byte fed.
    pos: u64,
    items: VecDeque<Item>,
}

#[derive(Debug)]
struct Item {
    span: Range<u64>,
    object: String,
    role: String,
    progress: Progress,
}

#[derive(Debug)]
enum Progress {
    /// Decided when its first byte arrives: its check has passed by then.
    NotStarted,
    Hashing(Hashing),
    /// No digest this build knows: nothing to compare with.
    Unchecked,
}

#[derive(Debug)]
struct Hashing {
    /// What the bytes must hash to, with the hasher that says.
    expect: Digest,
    hasher: Hasher,
    /// The CRC-32C to keep, when `expect` is the digest and not one.
    crc: Option<Hasher>,
}

impl Recheck {
    /// The check of the bytes of `span` of `served`, sent in order from
    /// its start; `None` when no component lies wholly within it.
    pub(crate) fn new(served: &Arc<Served>, span: &Range<u64>) -> Option<Recheck> {
        let items: VecDeque<Item> = served
            .components_within(span)
            .into_iter()
            .filter(|(at, _, _)| !at.is_empty())
            .map(|(span, object, role)| Item {
                span,
                object,
                role,
                progress: Progress::NotStarted,
            })
            .collect();
        (!items.is_empty()).then(|| Recheck {
            served: Arc::clone(served),
            pos: span.start,
            items,
        })
    }

    /// Whether feeding `len` more bytes hashes anything with sha256 (worth
    /// a blocking thread) rather than CRC-32C alone.
    pub(crate) fn is_heavy(&self, len: usize) -> bool {
        let end = self.pos.saturating_add(len as u64);
        self.items
            .iter()
            .take_while(|i| i.span.start < end)
            .any(|i| match &i.progress {
                Progress::Hashing(h) => h.crc.is_some(),
                Progress::NotStarted => self.served.kept_crc(&i.object, &i.role).is_none(),
                Progress::Unchecked => false,
            })
    }

    /// Feeds the next `bytes` of the span. `Err` names the file, object,
    /// component and rule when a component ends with bytes other than its
    /// version's: the chunk must not be sent.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        let (start, end) = (self.pos, self.pos.saturating_add(bytes.len() as u64));
        self.pos = end;
        while let Some(item) = self.items.front_mut() {
            if item.span.start >= end {
                break;
            }
            let from = item.span.start.max(start) - start;
            let to = item.span.end.min(end) - start;
            let piece = bytes
                .get(usize::try_from(from).unwrap_or(0)..usize::try_from(to).unwrap_or(0))
                .unwrap_or_default();
            if let Progress::NotStarted = item.progress {
                item.progress = expectation(&self.served, &item.object, &item.role)
                    .map_or(Progress::Unchecked, Progress::Hashing);
            }
            if let Progress::Hashing(h) = &mut item.progress {
                h.hasher.update(piece);
                if let Some(crc) = &mut h.crc {
                    crc.update(piece);
                }
            }
            if item.span.end > end {
                break;
            }
            let Some(done) = self.items.pop_front() else {
                break;
            };
            done.finish(&self.served)?;
        }
        Ok(())
    }
}

/// What a component's bytes must hash to: the kept CRC-32C, else its
/// digest (keeping the CRC-32C on the way); `None` without a digest this
/// build knows.
fn expectation(served: &Served, object: &str, role: &str) -> Option<Hashing> {
    let crc = || Hasher::new(DigestAlgorithm::Crc32c);
    if let Some(kept) = served.kept_crc(object, role) {
        return Some(Hashing {
            expect: kept,
            hasher: crc(),
            crc: None,
        });
    }
    let expect = served
        .manifest
        .objects
        .get(object)?
        .components
        .get(role)?
        .digest
        .clone()?;
    let algorithm = expect.algorithm()?;
    Some(Hashing {
        hasher: Hasher::new(algorithm),
        crc: (algorithm != DigestAlgorithm::Crc32c).then(crc),
        expect,
    })
}

impl Item {
    fn finish(self, served: &Served) -> Result<(), String> {
        let Progress::Hashing(h) = self.progress else {
            return Ok(());
        };
        if h.expect.compare(&h.hasher.finish()).is_err() {
            return Err(format!(
                "{}: object {:?}, component {:?}: changed-under-transfer: the bytes read from the file no longer match the version being sent",
                served.path, self.object, self.role
            ));
        }
        if let Some(crc) = h.crc {
            served.keep_crc(&self.object, &self.role, crc.finish());
        }
        Ok(())
    }
}
