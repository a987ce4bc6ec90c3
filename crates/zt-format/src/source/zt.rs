//! The `.zt` read plan: the header magic, the footer, then the manifest
//! (three reads; the rules are those of [`crate::container`]).

use std::ops::Range;

use crate::container::{self, ManifestLocation};
use crate::error::Result;
use crate::options::Limits;

use super::Loaded;

#[derive(Debug)]
pub(super) struct Plan {
    size: u64,
    head: Option<Vec<u8>>,
    location: Option<ManifestLocation>,
    raw: Option<Vec<u8>>,
}

impl Plan {
    pub(super) fn new(size: u64) -> Plan {
        Plan {
            size,
            head: None,
            location: None,
            raw: None,
        }
    }

    pub(super) fn next_read(&self) -> Option<Range<u64>> {
        match (&self.head, &self.location, &self.raw) {
            (None, _, _) => Some(0..self.size.min(8)),
            (Some(_), None, _) => Some(self.size.saturating_sub(16)..self.size),
            (Some(_), Some(loc), None) => Some(loc.offset..loc.offset.saturating_add(loc.length)),
            _ => None,
        }
    }

    pub(super) fn feed(
        &mut self,
        bytes: &[u8],
        label: &str,
        size: u64,
        limits: &Limits,
    ) -> Result<()> {
        match (&self.head, &self.location) {
            (None, _) => self.head = Some(bytes.to_vec()),
            (Some(head), None) => {
                self.location = Some(container::locate(label, size, head, bytes, limits)?);
            }
            _ => self.raw = Some(bytes.to_vec()),
        }
        Ok(())
    }

    pub(super) fn finish(self, label: &str, limits: &Limits) -> Result<Loaded> {
        let (Some(loc), Some(raw)) = (self.location, self.raw) else {
            return Err(super::incomplete(label));
        };
        let parsed = container::decode(label, &loc, &raw, limits)?;
        Ok(Loaded { parsed, raw })
    }
}
