//! Storage dtypes (a closed set of 13) and logical types (an open set).

use std::fmt;

/// A storage dtype: the 13 fixed primitives of v1.2. It alone sets the byte
/// width of each stored element. Open to new dtypes (other sources'
/// types): match with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U64,
    U32,
    U16,
    U8,
    Bool,
}

impl DType {
    /// Every storage dtype, in the order the specification lists them.
    pub const ALL: [DType; 13] = [
        DType::F64,
        DType::F32,
        DType::F16,
        DType::BF16,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
        DType::Bool,
    ];

    /// The v1.2 spelling (`f32`, `bf16`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U64 => "u64",
            DType::U32 => "u32",
            DType::U16 => "u16",
            DType::U8 => "u8",
            DType::Bool => "bool",
        }
    }

    /// The v1.0 and v0.1 spelling (`float32`, `bfloat16`, `uint8`, ...).
    pub fn legacy_name(self) -> &'static str {
        match self {
            DType::F64 => "float64",
            DType::F32 => "float32",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::I64 => "int64",
            DType::I32 => "int32",
            DType::I16 => "int16",
            DType::I8 => "int8",
            DType::U64 => "uint64",
            DType::U32 => "uint32",
            DType::U16 => "uint16",
            DType::U8 => "uint8",
            DType::Bool => "bool",
        }
    }

    /// Parses a v1.2 spelling.
    pub fn from_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.name() == s)
    }

    /// Parses a v1.0/v0.1 spelling.
    pub fn from_legacy_name(s: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.legacy_name() == s)
    }

    /// Bytes per stored element.
    pub fn size(self) -> u64 {
        match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The hint given for an unknown dtype: long spellings are the v1.0 ones.
pub(crate) fn unknown_dtype_hint(value: &str) -> String {
    match DType::from_legacy_name(value) {
        Some(d) if d != DType::Bool => format!(
            " ({value:?} is the v1.0 spelling; v1.2 spells it {:?})",
            d.name()
        ),
        _ => String::from(" (v1.2 dtypes: f64 f32 f16 bf16 i64 i32 i16 i8 u64 u32 u16 u8 bool)"),
    }
}

/// A logical type: what the stored elements mean. Unknown types are kept
/// as written and read as their storage dtype.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LogicalType {
    F8E4M3Fn,
    F8E5M2,
    F8E4M3Fnuz,
    F8E5M2Fnuz,
    Complex64,
    Complex128,
    /// A type this reader does not know; its bytes are served as `dtype`.
    Other(String),
}

impl LogicalType {
    /// Parses a `type` string. Never fails: unknown types are [`LogicalType::Other`].
    pub fn parse(s: &str) -> LogicalType {
        match s {
            "f8_e4m3fn" => LogicalType::F8E4M3Fn,
            "f8_e5m2" => LogicalType::F8E5M2,
            "f8_e4m3fnuz" => LogicalType::F8E4M3Fnuz,
            "f8_e5m2fnuz" => LogicalType::F8E5M2Fnuz,
            "complex64" => LogicalType::Complex64,
            "complex128" => LogicalType::Complex128,
            other => LogicalType::Other(other.to_owned()),
        }
    }

    /// The spelling in the manifest.
    pub fn name(&self) -> &str {
        match self {
            LogicalType::F8E4M3Fn => "f8_e4m3fn",
            LogicalType::F8E5M2 => "f8_e5m2",
            LogicalType::F8E4M3Fnuz => "f8_e4m3fnuz",
            LogicalType::F8E5M2Fnuz => "f8_e5m2fnuz",
            LogicalType::Complex64 => "complex64",
            LogicalType::Complex128 => "complex128",
            LogicalType::Other(s) => s,
        }
    }

    /// The storage dtype a known type must use, `None` for unknown types.
    pub fn required_dtype(&self) -> Option<DType> {
        match self {
            LogicalType::F8E4M3Fn
            | LogicalType::F8E5M2
            | LogicalType::F8E4M3Fnuz
            | LogicalType::F8E5M2Fnuz => Some(DType::U8),
            LogicalType::Complex64 => Some(DType::F32),
            LogicalType::Complex128 => Some(DType::F64),
            LogicalType::Other(_) => None,
        }
    }

    /// Storage elements per logical element (2 for the complex types).
    pub fn ratio(&self) -> u64 {
        match self {
            LogicalType::Complex64 | LogicalType::Complex128 => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for LogicalType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_name(d.name()), Some(d));
            assert_eq!(DType::from_legacy_name(d.legacy_name()), Some(d));
        }
        assert_eq!(DType::from_name("float32"), None);
    }

    #[test]
    fn long_spelling_gets_a_hint() {
        assert!(unknown_dtype_hint("float32").contains("\"f32\""));
        assert!(unknown_dtype_hint("f128").contains("v1.2 dtypes"));
    }

    #[test]
    fn unknown_types_pass_through() {
        let t = LogicalType::parse("mx_fp4");
        assert_eq!(t.name(), "mx_fp4");
        assert_eq!(t.required_dtype(), None);
        assert_eq!(t.ratio(), 1);
        assert_eq!(LogicalType::parse("complex64").ratio(), 2);
    }
}
