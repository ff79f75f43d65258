//! Element types of tensors, with their ONNX `TensorProto.DataType` codes.

use std::fmt;

/// Element type of a tensor. Types the reference executor computes with get their own variant;
/// anything else an ONNX file may declare (strings, float8, complex, ...) is kept as
/// [`DType::Other`] so import never fails on it: nodes touching it stay with the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DType {
    F32,
    F16,
    BF16,
    F64,
    I64,
    I32,
    I16,
    I8,
    U8,
    U16,
    U32,
    U64,
    Bool,
    /// An ONNX element type Bolt does not compute with, by its ONNX code.
    Other(i32),
}

impl DType {
    pub fn from_onnx(code: i32) -> DType {
        match code {
            1 => DType::F32,
            2 => DType::U8,
            3 => DType::I8,
            4 => DType::U16,
            5 => DType::I16,
            6 => DType::I32,
            7 => DType::I64,
            9 => DType::Bool,
            10 => DType::F16,
            11 => DType::F64,
            12 => DType::U32,
            13 => DType::U64,
            16 => DType::BF16,
            other => DType::Other(other),
        }
    }

    pub fn onnx_code(self) -> i32 {
        match self {
            DType::F32 => 1,
            DType::U8 => 2,
            DType::I8 => 3,
            DType::U16 => 4,
            DType::I16 => 5,
            DType::I32 => 6,
            DType::I64 => 7,
            DType::Bool => 9,
            DType::F16 => 10,
            DType::F64 => 11,
            DType::U32 => 12,
            DType::U64 => 13,
            DType::BF16 => 16,
            DType::Other(c) => c,
        }
    }

    /// Size of one element in bytes (None for types Bolt does not lay out).
    pub fn size_bytes(self) -> Option<usize> {
        Some(match self {
            DType::F64 | DType::I64 | DType::U64 => 8,
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::Other(_) => return None,
        })
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
    }

    pub fn is_integer(self) -> bool {
        matches!(
            self,
            DType::I64 | DType::I32 | DType::I16 | DType::I8 | DType::U8 | DType::U16 | DType::U32 | DType::U64
        )
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::I32 => "i32",
            DType::I16 => "i16",
            DType::I8 => "i8",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::Other(c) => {
                // ONNX's names (TensorProto.DataType) for the types Bolt does not compute with.
                let name = match c {
                    8 => "string",
                    14 => "complex64",
                    15 => "complex128",
                    17 => "float8e4m3fn",
                    18 => "float8e4m3fnuz",
                    19 => "float8e5m2",
                    20 => "float8e5m2fnuz",
                    21 => "uint4",
                    22 => "int4",
                    23 => "float4e2m1",
                    _ => return write!(f, "onnx-type-{c}"),
                };
                name
            }
        };
        f.write_str(s)
    }
}
