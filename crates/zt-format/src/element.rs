//! Typed views of decoded component bytes.

use std::ops::Deref;

use bytemuck::Pod;
use half::{bf16, f16};

use crate::aligned::AlignedBuf;
use crate::dtype::{DType, LogicalType};
use crate::error::Rule;

/// A Rust type that a storage dtype can be viewed as without copying.
pub trait Element: Pod {
    /// The storage dtype of this element type.
    const DTYPE: DType;
    /// The name used in error messages.
    const NAME: &'static str;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {
        $(impl Element for $t {
            const DTYPE: DType = DType::$d;
            const NAME: &'static str = stringify!($t);
        })*
    };
}

element!(f64 => F64, f32 => F32, f16 => F16, bf16 => BF16, i64 => I64, i32 => I32,
         i16 => I16, i8 => I8, u64 => U64, u32 => U32, u16 => U16, u8 => U8);

/// Decoded component bytes: borrowed from the mapping when they could be
/// used in place, owned otherwise. Either way they start 64-byte aligned.
#[derive(Debug)]
pub enum Data<'a> {
    Borrowed(&'a [u8]),
    Owned(AlignedBuf),
}

impl Deref for Data<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Borrowed(b) => b,
            Data::Owned(b) => b.as_slice(),
        }
    }
}

impl Data<'_> {
    /// Whether these bytes are the file's own (zero-copy).
    pub fn is_borrowed(&self) -> bool {
        matches!(self, Data::Borrowed(_))
    }

    /// Copies into an owned aligned buffer.
    pub fn into_owned(self) -> Result<AlignedBuf, Rule> {
        match self {
            Data::Borrowed(b) => AlignedBuf::copy_from(b),
            Data::Owned(b) => Ok(b),
        }
    }
}

/// A decoded component with its dtype and shape.
#[derive(Debug)]
pub struct Tensor<'a> {
    pub data: Data<'a>,
    pub dtype: DType,
    pub logical_type: Option<LogicalType>,
    /// Borrowed from the manifest for a dense object's `data`.
    pub shape: std::borrow::Cow<'a, [u64]>,
}

impl Tensor<'_> {
    /// Views the bytes as `T`. `u8` views any one-byte dtype (`bool`, fp8 types).
    pub fn as_slice<T: Element>(&self) -> Result<&[T], Rule> {
        let matches = T::DTYPE == self.dtype || (T::DTYPE == DType::U8 && self.dtype.size() == 1);
        if !matches {
            return Err(Rule::ViewType {
                requested: T::NAME,
                dtype: self.dtype.name().to_owned(),
                reason: "the dtypes differ",
            });
        }
        bytemuck::try_cast_slice(&self.data).map_err(|_| Rule::ViewType {
            requested: T::NAME,
            dtype: self.dtype.name().to_owned(),
            reason: "the bytes are not aligned or not whole elements",
        })
    }

    /// Views `bool` data as `bool`, after checking every byte is 0 or 1.
    pub fn as_bools(&self) -> Result<&[bool], Rule> {
        if self.dtype != DType::Bool {
            return Err(Rule::ViewType {
                requested: "bool",
                dtype: self.dtype.name().to_owned(),
                reason: "the dtypes differ",
            });
        }
        if let Some(i) = self.data.iter().position(|&b| b > 1) {
            return Err(Rule::BoolValue {
                value: self.data.get(i).copied().unwrap_or_default(),
                index: i as u64,
            });
        }
        bytemuck::checked::try_cast_slice(&self.data).map_err(|_| Rule::ViewType {
            requested: "bool",
            dtype: "bool".to_owned(),
            reason: "a byte is not 0 or 1",
        })
    }
}
