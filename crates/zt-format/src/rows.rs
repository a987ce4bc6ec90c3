//! Row ranges: the half-open rows `[start, end)` along dimension 0 of a
//! raw dense object, and where their bytes lie. One definition for the
//! server's HTTP form (`?rows=START:END`), ztp/1's `rows` key, and every
//! client, so they agree on the bounds and on what cannot be sliced.

use std::fmt;

use crate::component::{Component, Encoding};
use crate::manifest::{Format, Object};

/// Rows `start..end` of an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub start: u64,
    pub end: u64,
}

/// Why rows cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowsError {
    /// Not `START:END` with two unsigned integers.
    Malformed(String),
    /// Empty, backwards, or past the object's first dimension.
    OutOfBounds { rows: Rows, count: u64 },
    /// Not a raw dense object with at least one dimension (its bytes are
    /// not rows of equal length): the reason.
    NotRawDense(String),
}

impl RowsError {
    /// The rule's name, as errors name it.
    pub fn rule(&self) -> &'static str {
        match self {
            RowsError::Malformed(_) => "rows-malformed",
            RowsError::OutOfBounds { .. } => "rows-out-of-bounds",
            RowsError::NotRawDense(_) => "rows-not-raw-dense",
        }
    }
}

impl fmt::Display for RowsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowsError::Malformed(text) => write!(
                f,
                "rows {text:?} is not START:END (two unsigned integers, START < END) [rows-malformed]"
            ),
            RowsError::OutOfBounds { rows, count } => write!(
                f,
                "rows {}:{} are outside 0:{count} or empty [rows-out-of-bounds]",
                rows.start, rows.end
            ),
            RowsError::NotRawDense(why) => write!(f, "{why} [rows-not-raw-dense]"),
        }
    }
}

impl std::error::Error for RowsError {}

impl Rows {
    /// Parses `START:END`.
    pub fn parse(text: &str) -> Result<Rows, RowsError> {
        let bad = || RowsError::Malformed(text.to_owned());
        let (a, b) = text.split_once(':').ok_or_else(bad)?;
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
        if !digits(a) || !digits(b) {
            return Err(bad());
        }
        Ok(Rows {
            start: a.parse().map_err(|_| bad())?,
            end: b.parse().map_err(|_| bad())?,
        })
    }

    /// Where these rows of `obj`'s `data` lie, relative to the start of
    /// the component: (offset, length).
    pub fn span(self, obj: &Object) -> Result<(u64, u64), RowsError> {
        let c =
            raw_dense_data(obj, "has no rows of equal length").map_err(RowsError::NotRawDense)?;
        let Some(&count) = obj.shape.first() else {
            return Err(RowsError::NotRawDense("a scalar has no rows".to_owned()));
        };
        if self.start >= self.end || self.end > count {
            return Err(RowsError::OutOfBounds { rows: self, count });
        }
        // The manifest's rules make the length shape x dtype: every row
        // is the same size.
        let span = c.length.checked_div(count).and_then(|row| {
            let n = self.end.checked_sub(self.start)?;
            Some((self.start.checked_mul(row)?, n.checked_mul(row)?))
        });
        span.ok_or(RowsError::OutOfBounds { rows: self, count })
    }
}

/// `obj`'s `data` component, if the object is dense and its data stored
/// raw in the file (what the server can cut rows and slices of); else why
/// not, a format other than dense said to be one that `what`.
pub(crate) fn raw_dense_data<'a>(obj: &'a Object, what: &str) -> Result<&'a Component, String> {
    if obj.format != Format::Dense {
        return Err(format!("a {} object {what}", obj.format.name()));
    }
    let c = obj
        .components
        .get("data")
        .ok_or_else(|| "the object has no data component".to_owned())?;
    if c.synthesized {
        // No range of the file holds its bytes: cutting the file at its
        // offset would send other bytes.
        return Err("its data is built by the reader from the header (placement \"synthesized\"), not stored in the file; it is cut from the whole".to_owned());
    }
    if c.encoding != Encoding::Raw || c.is_transformed() {
        return Err(format!(
            "its data is stored {}; only raw data can be sliced on the server",
            if c.is_transformed() {
                "in a legacy layout"
            } else {
                c.encoding.name()
            }
        ));
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::Component;
    use crate::Components;
    use crate::DType;

    fn dense(shape: Vec<u64>, encoding: Encoding) -> Object {
        let n: u64 = shape.iter().product();
        let mut c = Component::of_file(DType::F32, 64, n.saturating_mul(4));
        c.encoding = encoding;
        let mut components = Components::new();
        components.insert("data".to_owned(), c);
        Object {
            shape,
            format: Format::Dense,
            attributes: Default::default(),
            components,
        }
    }

    #[test]
    fn rows_parse_and_lie_where_the_shape_says() {
        let o = dense(vec![10, 3], Encoding::Raw);
        let r = Rows::parse("2:5").unwrap();
        assert_eq!(r.span(&o), Ok((2 * 12, 3 * 12)));
        assert_eq!(Rows::parse("0:10").unwrap().span(&o), Ok((0, 120)));
        for bad in ["", "3", "a:b", "-1:2", "1:2:3", " 1:2"] {
            assert_eq!(
                Rows::parse(bad).unwrap_err().rule(),
                "rows-malformed",
                "{bad:?}"
            );
        }
        for (a, b) in [(3, 3), (5, 2), (0, 11)] {
            let e = Rows { start: a, end: b }.span(&o).unwrap_err();
            assert_eq!(e.rule(), "rows-out-of-bounds");
        }
        let z = dense(vec![10, 3], Encoding::Zstd);
        let e = r.span(&z).unwrap_err();
        assert_eq!(e.rule(), "rows-not-raw-dense");
        assert!(e.to_string().contains("zstd"), "{e}");
        assert_eq!(
            r.span(&dense(vec![], Encoding::Raw)).unwrap_err().rule(),
            "rows-not-raw-dense"
        );
        // Built by the reader: no range of the file to cut, for rows or slices.
        let mut built = dense(vec![10, 3], Encoding::Raw);
        if let Some(c) = built.components.get_mut("data") {
            c.synthesized = true;
        }
        assert_eq!(r.span(&built).unwrap_err().rule(), "rows-not-raw-dense");
        let slice = crate::slice::Slice::parse("0:2").unwrap();
        assert_eq!(
            slice.gather(&built, 10).unwrap_err().rule(),
            "slice-not-raw-dense"
        );
    }
}
