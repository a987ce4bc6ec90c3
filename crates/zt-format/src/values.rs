//! Elements read as numbers: the numeric reading of every dtype and
//! logical type that has one, as `f64`, the fp8 families decoded by their
//! specifications (OCP FP8 and the `fnuz` variants). One place for what
//! the daemon's value summaries, and any client that wants numbers
//! rather than bytes, need to know of element layouts.

use half::{bf16, f16};

use crate::dtype::{DType, LogicalType};

/// How a component's elements read as numbers.
#[derive(Clone, Copy)]
pub struct Values {
    size: usize,
    decode: fn(&[u8]) -> f64,
}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Values").field("size", &self.size).finish()
    }
}

/// Why a component's elements have no numeric reading: its logical type
/// has none (complex numbers, a type this crate does not know).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("values of type {0:?} have no numeric reading")]
pub struct NoValues(pub String);

impl Values {
    /// The reading of elements stored as `dtype`, of logical type `logical`
    /// when the component has one (it decides).
    pub fn of(dtype: DType, logical: Option<&LogicalType>) -> Result<Values, NoValues> {
        let v = |size, decode| Ok(Values { size, decode });
        if let Some(t) = logical {
            return match t {
                LogicalType::F8E4M3Fn => v(1, |b| f8(b, F8::E4M3Fn)),
                LogicalType::F8E5M2 => v(1, |b| f8(b, F8::E5M2)),
                LogicalType::F8E4M3Fnuz => v(1, |b| f8(b, F8::E4M3Fnuz)),
                LogicalType::F8E5M2Fnuz => v(1, |b| f8(b, F8::E5M2Fnuz)),
                other => Err(NoValues(other.name().to_owned())),
            };
        }
        match dtype {
            DType::F64 => v(8, |b| f64::from_le_bytes(arr(b))),
            DType::F32 => v(4, |b| f64::from(f32::from_le_bytes(arr(b)))),
            DType::F16 => v(2, |b| f16::from_le_bytes(arr(b)).to_f64()),
            DType::BF16 => v(2, |b| bf16::from_le_bytes(arr(b)).to_f64()),
            DType::I64 => v(8, |b| i64::from_le_bytes(arr(b)) as f64),
            DType::I32 => v(4, |b| f64::from(i32::from_le_bytes(arr(b)))),
            DType::I16 => v(2, |b| f64::from(i16::from_le_bytes(arr(b)))),
            DType::I8 => v(1, |b| f64::from(i8::from_le_bytes(arr(b)))),
            DType::U64 => v(8, |b| u64::from_le_bytes(arr(b)) as f64),
            DType::U32 => v(4, |b| f64::from(u32::from_le_bytes(arr(b)))),
            DType::U16 => v(2, |b| f64::from(u16::from_le_bytes(arr(b)))),
            DType::U8 | DType::Bool => v(1, |b| f64::from(b.first().copied().unwrap_or(0))),
        }
    }

    /// Bytes per element.
    pub fn size(&self) -> usize {
        self.size
    }

    /// One element's value (`element` holds [`Values::size`] bytes;
    /// missing bytes read as zero).
    pub fn decode(&self, element: &[u8]) -> f64 {
        (self.decode)(element)
    }

    /// Every whole element of `bytes`, in order.
    pub fn each(&self, bytes: &[u8], mut f: impl FnMut(f64)) {
        for e in bytes.chunks_exact(self.size) {
            f((self.decode)(e));
        }
    }
}

/// The first `N` bytes of `b` as an array (zeros past its end).
fn arr<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    for (d, s) in a.iter_mut().zip(b) {
        *d = *s;
    }
    a
}

/// The fp8 formats: E4M3 and E5M2 of the OCP 8-bit float specification
/// (`e4m3fn`: no infinities, all-ones is NaN; `e5m2`: IEEE-like, with
/// infinities and NaNs at the top exponent), and the `fnuz` variants (no
/// infinities, no negative zero: 0x80 is the one NaN, and the bias one
/// more).
#[derive(Clone, Copy)]
enum F8 {
    E4M3Fn,
    E5M2,
    E4M3Fnuz,
    E5M2Fnuz,
}

/// An 8-bit float.
fn f8(b: &[u8], kind: F8) -> f64 {
    // Mantissa bits (E4M3: 3, E5M2: 2) as masks, and the exponent bias.
    let (man_mask, exp_mask, bias): (u8, u8, i32) = match kind {
        F8::E4M3Fn => (0x07, 0x0f, 7),
        F8::E5M2 => (0x03, 0x1f, 15),
        F8::E4M3Fnuz => (0x07, 0x0f, 8),
        F8::E5M2Fnuz => (0x03, 0x1f, 16),
    };
    let man_bits = man_mask.count_ones();
    let v = b.first().copied().unwrap_or(0);
    let sign = if v & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from(v.checked_shr(man_bits).unwrap_or(0) & exp_mask);
    let m = v & man_mask;
    let top = i32::from(exp_mask);
    match kind {
        F8::E4M3Fnuz | F8::E5M2Fnuz if v == 0x80 => return f64::NAN,
        F8::E4M3Fn if e == top && m == man_mask => return f64::NAN,
        F8::E5M2 if e == top => {
            return if m == 0 {
                sign * f64::INFINITY
            } else {
                f64::NAN
            }
        }
        _ => {}
    }
    let fraction = f64::from(m) / (f64::from(man_mask) + 1.0);
    if e == 0 {
        sign * fraction * 2f64.powi(1i32.saturating_sub(bias))
    } else {
        sign * (1.0 + fraction) * 2f64.powi(e.saturating_sub(bias))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp8(t: LogicalType, v: u8) -> f64 {
        Values::of(DType::U8, Some(&t)).unwrap().decode(&[v])
    }

    #[test]
    fn fp8_values_decode_as_their_specifications_say() {
        let e4m3 = |v| fp8(LogicalType::F8E4M3Fn, v);
        assert_eq!(e4m3(0x38), 1.0);
        assert_eq!(e4m3(0x7e), 448.0);
        assert_eq!(e4m3(0xb8), -1.0);
        assert_eq!(e4m3(0x01), 2f64.powi(-9));
        assert!(e4m3(0x7f).is_nan());
        let e5m2 = |v| fp8(LogicalType::F8E5M2, v);
        assert_eq!(e5m2(0x3c), 1.0);
        assert_eq!(e5m2(0x7b), 57344.0);
        assert_eq!(e5m2(0x7c), f64::INFINITY);
        assert_eq!(e5m2(0xfc), f64::NEG_INFINITY);
        assert!(e5m2(0x7d).is_nan());
        let e4m3uz = |v| fp8(LogicalType::F8E4M3Fnuz, v);
        assert_eq!(e4m3uz(0x40), 1.0);
        assert!(e4m3uz(0x80).is_nan());
        assert_eq!(e4m3uz(0x7f), 240.0);
        let e5m2uz = |v| fp8(LogicalType::F8E5M2Fnuz, v);
        assert_eq!(e5m2uz(0x40), 1.0);
        assert!(e5m2uz(0x80).is_nan());
    }

    #[test]
    fn stored_dtypes_read_little_endian() {
        let read = |d: DType, b: &[u8]| Values::of(d, None).unwrap().decode(b);
        assert_eq!(read(DType::F32, &1.5f32.to_le_bytes()), 1.5);
        assert_eq!(read(DType::BF16, &bf16::from_f32(-2.0).to_le_bytes()), -2.0);
        assert_eq!(read(DType::F16, &f16::from_f32(0.5).to_le_bytes()), 0.5);
        assert_eq!(read(DType::I16, &(-7i16).to_le_bytes()), -7.0);
        assert_eq!(read(DType::Bool, &[1]), 1.0);
        let mut seen = Vec::new();
        Values::of(DType::U16, None)
            .unwrap()
            .each(&[1, 0, 2, 0, 9], |x| seen.push(x));
        assert_eq!(seen, [1.0, 2.0], "whole elements only");
        assert_eq!(
            Values::of(DType::F32, Some(&LogicalType::Complex64)).unwrap_err(),
            NoValues("complex64".to_owned())
        );
    }
}
