//! A manifest's document (the JSON of [`crate::manifest_json`], or v1.2
//! CBOR) written a piece at a time: the caller asks for the next piece when
//! it has sent the last, so a server streams a document of any size while
//! holding one piece of it, and nothing that renders waits on a slow
//! reader. The pieces put together are exactly the document
//! [`crate::manifest_json::ManifestDoc`] or [`crate::write_manifest_cbor`]
//! writes whole.

use crate::encode::{cbor_head, cbor_object};
use crate::manifest_json::{json_head, json_object, json_tail};
use crate::Manifest;

/// Which document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocForm {
    /// `ztserve.manifest/1` JSON.
    Json,
    /// v1.2 CBOR.
    Cbor,
}

/// Where the writing is.
#[derive(Debug, Clone)]
enum Phase {
    Head,
    /// The objects, after the one named (none yet: `None`).
    Objects(Option<String>),
    Done,
}

/// A manifest's document, written a piece at a time ([`Chunked::next`]).
#[derive(Debug, Clone)]
pub struct Chunked {
    form: DocForm,
    phase: Phase,
}

impl Chunked {
    pub fn new(form: DocForm) -> Chunked {
        Chunked {
            form,
            phase: Phase::Head,
        }
    }

    /// The next piece of `m`'s document: whole objects until it holds at
    /// least `want` bytes, or the rest of the document; `None` once it is
    /// all written. `m` must be the same manifest at every call.
    pub fn next(&mut self, m: &Manifest, want: usize) -> std::io::Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        loop {
            if out.len() >= want.max(1) {
                return Ok(Some(out));
            }
            match &mut self.phase {
                Phase::Head => {
                    match self.form {
                        DocForm::Json => json_head(m, &mut out)?,
                        DocForm::Cbor => cbor_head(m, &mut out)?,
                    }
                    self.phase = Phase::Objects(None);
                }
                Phase::Objects(after) => match m.objects.next_after(after.as_deref()) {
                    Some((name, o)) => {
                        match self.form {
                            DocForm::Json => json_object(after.is_none(), name, o, &mut out)?,
                            DocForm::Cbor => cbor_object(name, o, &mut out)?,
                        }
                        *after = Some(name.to_owned());
                    }
                    None => {
                        if self.form == DocForm::Json {
                            json_tail(m, &mut out)?;
                        }
                        self.phase = Phase::Done;
                    }
                },
                Phase::Done => return Ok((!out.is_empty()).then_some(out)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest_json::ManifestDoc;

    fn manifest(objects: usize) -> Manifest {
        let mut w = crate::Writer::new(Vec::new(), "t.zt").unwrap();
        for i in 0..objects {
            let data: Vec<u8> = (0..64u8).map(|b| b.wrapping_add(i as u8)).collect();
            let name = format!("layers.{i}.w");
            w.add_dense(&name, &[4, 4], crate::DType::F32, &data, Default::default())
                .unwrap();
        }
        let bytes = w.finish().unwrap();
        crate::source::parse(crate::Source::Zt, "t.zt", &bytes, &crate::Limits::default())
            .unwrap()
            .parsed
            .manifest
    }

    fn all(form: DocForm, m: &Manifest, want: usize) -> (Vec<u8>, usize) {
        let mut c = Chunked::new(form);
        let (mut doc, mut pieces) = (Vec::new(), 0usize);
        while let Some(p) = c.next(m, want).unwrap() {
            assert!(!p.is_empty());
            doc.extend(p);
            pieces = pieces.saturating_add(1);
        }
        (doc, pieces)
    }

    #[test]
    fn pieces_put_together_are_the_whole_document() {
        for n in [0, 1, 3, 200] {
            let m = manifest(n);
            let json = serde_json::to_vec(&ManifestDoc(&m)).unwrap();
            let cbor = crate::manifest_cbor(&m);
            for want in [1, 100, 1 << 20] {
                assert_eq!(all(DocForm::Json, &m, want).0, json, "{n} objects, {want}");
                assert_eq!(all(DocForm::Cbor, &m, want).0, cbor, "{n} objects, {want}");
            }
            let (_, pieces) = all(DocForm::Json, &m, 1);
            assert_eq!(pieces, n.saturating_add(2), "a head, each object, a tail");
        }
    }
}
