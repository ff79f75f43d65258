//! Dense tensors: initializers (weights), constants and the reference executor's values.

use super::DType;
use half::{bf16, f16};

/// Row-major storage, one variant per element type Bolt computes with.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum TensorData {
    // Infinities (mask fills) survive JSON (plans carry small tensors in attributes).
    F32(#[serde(with = "bolt_codegen::json_float::vec_f32")] Vec<f32>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F64(#[serde(with = "bolt_codegen::json_float::vec_f64")] Vec<f64>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    I16(Vec<i16>),
    I8(Vec<i8>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
}

/// Applies `$body` to the vector inside any [`TensorData`] variant, binding it to `$v`.
#[macro_export]
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::ir::TensorData::F32($v) => $body,
            $crate::ir::TensorData::F16($v) => $body,
            $crate::ir::TensorData::BF16($v) => $body,
            $crate::ir::TensorData::F64($v) => $body,
            $crate::ir::TensorData::I64($v) => $body,
            $crate::ir::TensorData::I32($v) => $body,
            $crate::ir::TensorData::I16($v) => $body,
            $crate::ir::TensorData::I8($v) => $body,
            $crate::ir::TensorData::U8($v) => $body,
            $crate::ir::TensorData::U16($v) => $body,
            $crate::ir::TensorData::U32($v) => $body,
            $crate::ir::TensorData::U64($v) => $body,
            $crate::ir::TensorData::Bool($v) => $body,
        }
    };
}

/// Like [`with_data`] but rebuilds the same variant from the expression's result vector.
#[macro_export]
macro_rules! map_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::ir::TensorData::F32($v) => $crate::ir::TensorData::F32($body),
            $crate::ir::TensorData::F16($v) => $crate::ir::TensorData::F16($body),
            $crate::ir::TensorData::BF16($v) => $crate::ir::TensorData::BF16($body),
            $crate::ir::TensorData::F64($v) => $crate::ir::TensorData::F64($body),
            $crate::ir::TensorData::I64($v) => $crate::ir::TensorData::I64($body),
            $crate::ir::TensorData::I32($v) => $crate::ir::TensorData::I32($body),
            $crate::ir::TensorData::I16($v) => $crate::ir::TensorData::I16($body),
            $crate::ir::TensorData::I8($v) => $crate::ir::TensorData::I8($body),
            $crate::ir::TensorData::U8($v) => $crate::ir::TensorData::U8($body),
            $crate::ir::TensorData::U16($v) => $crate::ir::TensorData::U16($body),
            $crate::ir::TensorData::U32($v) => $crate::ir::TensorData::U32($body),
            $crate::ir::TensorData::U64($v) => $crate::ir::TensorData::U64($body),
            $crate::ir::TensorData::Bool($v) => $crate::ir::TensorData::Bool($body),
        }
    };
}

impl TensorData {
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::F32(_) => DType::F32,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::F64(_) => DType::F64,
            TensorData::I64(_) => DType::I64,
            TensorData::I32(_) => DType::I32,
            TensorData::I16(_) => DType::I16,
            TensorData::I8(_) => DType::I8,
            TensorData::U8(_) => DType::U8,
            TensorData::U16(_) => DType::U16,
            TensorData::U32(_) => DType::U32,
            TensorData::U64(_) => DType::U64,
            TensorData::Bool(_) => DType::Bool,
        }
    }

    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Zero-filled storage of `len` elements, or `None` for types Bolt does not compute with.
    pub fn zeros(dtype: DType, len: usize) -> Option<TensorData> {
        Some(match dtype {
            DType::F32 => TensorData::F32(vec![0.0; len]),
            DType::F16 => TensorData::F16(vec![f16::ZERO; len]),
            DType::BF16 => TensorData::BF16(vec![bf16::ZERO; len]),
            DType::F64 => TensorData::F64(vec![0.0; len]),
            DType::I64 => TensorData::I64(vec![0; len]),
            DType::I32 => TensorData::I32(vec![0; len]),
            DType::I16 => TensorData::I16(vec![0; len]),
            DType::I8 => TensorData::I8(vec![0; len]),
            DType::U8 => TensorData::U8(vec![0; len]),
            DType::U16 => TensorData::U16(vec![0; len]),
            DType::U32 => TensorData::U32(vec![0; len]),
            DType::U64 => TensorData::U64(vec![0; len]),
            DType::Bool => TensorData::Bool(vec![false; len]),
            DType::Other(_) => return None,
        })
    }

    /// `self`'s elements followed by `other`'s; `None` when their types differ.
    pub fn chained(&self, other: &TensorData) -> Option<TensorData> {
        macro_rules! chain {
            ($($v:ident),*) => {
                match (self, other) {
                    $((TensorData::$v(a), TensorData::$v(b)) => Some(TensorData::$v([a.as_slice(), b].concat())),)*
                    _ => None,
                }
            };
        }
        chain!(F32, F16, BF16, F64, I64, I32, I16, I8, U8, U16, U32, U64, Bool)
    }

    /// Elements gathered by index: `out[i] = self[idx[i]]`. The workhorse of layout ops.
    pub fn gather(&self, idx: &[usize]) -> TensorData {
        map_data!(self, v => idx.iter().map(|&i| v[i]).collect())
    }
}

/// Element types convertible to and from f64 for the reference executor's arithmetic.
/// f64 holds every value of every supported type except i64/u64 beyond 2^53, which integer
/// kernels handle natively.
pub trait Element: Copy + Send + Sync + 'static {
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

macro_rules! element_num {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline] fn to_f64(self) -> f64 { self as f64 }
            // `as` saturates on overflow and maps NaN to 0, the conversion Cast specifies for
            // out-of-range floats is undefined, so saturation is a safe choice.
            #[inline] fn from_f64(v: f64) -> Self { v as $t }
        }
    )*};
}
element_num!(f32, f64, i64, i32, i16, i8, u8, u16, u32, u64);

impl Element for f16 {
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}

impl Element for bf16 {
    #[inline]
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

impl Element for bool {
    #[inline]
    fn to_f64(self) -> f64 {
        if self {
            1.0
        } else {
            0.0
        }
    }
    #[inline]
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
}

/// A dense row-major tensor with a concrete shape.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl Tensor {
    /// Builds a tensor, checking that the element count matches the shape.
    pub fn new(shape: Vec<usize>, data: TensorData) -> Result<Tensor, String> {
        let n: usize = shape.iter().product();
        if n != data.len() {
            return Err(format!("shape {:?} needs {} elements, data has {}", shape, n, data.len()));
        }
        Ok(Tensor { shape, data })
    }

    pub fn from_f32(shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        assert_eq!(shape.iter().product::<usize>(), v.len(), "tensor shape/data mismatch");
        Tensor { shape, data: TensorData::F32(v) }
    }

    pub fn from_i64(shape: Vec<usize>, v: Vec<i64>) -> Tensor {
        assert_eq!(shape.iter().product::<usize>(), v.len(), "tensor shape/data mismatch");
        Tensor { shape, data: TensorData::I64(v) }
    }

    pub fn scalar_f32(v: f32) -> Tensor {
        Tensor { shape: vec![], data: TensorData::F32(vec![v]) }
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn len(&self) -> usize {
        self.data.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// All elements as f64 (for arithmetic in the reference executor and for comparisons).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        with_data!(&self.data, v => v.iter().map(|x| x.to_f64()).collect())
    }

    /// All elements as f32.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        match &self.data {
            TensorData::F32(v) => v.clone(),
            _ => self.to_f64_vec().into_iter().map(|x| x as f32).collect(),
        }
    }

    /// Integer contents (for shape-like inputs: Reshape shapes, Slice starts, axes).
    /// `None` when the tensor is not integer-typed.
    pub fn as_i64_vec(&self) -> Option<Vec<i64>> {
        match &self.data {
            TensorData::I64(v) => Some(v.clone()),
            TensorData::I32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            TensorData::I16(v) => Some(v.iter().map(|&x| x as i64).collect()),
            TensorData::I8(v) => Some(v.iter().map(|&x| x as i64).collect()),
            TensorData::U8(v) => Some(v.iter().map(|&x| x as i64).collect()),
            TensorData::U16(v) => Some(v.iter().map(|&x| x as i64).collect()),
            TensorData::U32(v) => Some(v.iter().map(|&x| x as i64).collect()),
            TensorData::U64(v) => Some(v.iter().map(|&x| x as i64).collect()),
            _ => None,
        }
    }

    /// Builds an integer (or bool) tensor of `dtype` from i64 values, wrapping like C casts.
    pub fn from_i64_as(dtype: DType, shape: Vec<usize>, v: &[i64]) -> Option<Tensor> {
        let data = match dtype {
            DType::I64 => TensorData::I64(v.to_vec()),
            DType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
            DType::I16 => TensorData::I16(v.iter().map(|&x| x as i16).collect()),
            DType::I8 => TensorData::I8(v.iter().map(|&x| x as i8).collect()),
            DType::U8 => TensorData::U8(v.iter().map(|&x| x as u8).collect()),
            DType::U16 => TensorData::U16(v.iter().map(|&x| x as u16).collect()),
            DType::U32 => TensorData::U32(v.iter().map(|&x| x as u32).collect()),
            DType::U64 => TensorData::U64(v.iter().map(|&x| x as u64).collect()),
            DType::Bool => TensorData::Bool(v.iter().map(|&x| x != 0).collect()),
            _ => return Tensor::from_f64_as(dtype, shape, &v.iter().map(|&x| x as f64).collect::<Vec<_>>()),
        };
        Some(Tensor { shape, data })
    }

    /// Builds a tensor of `dtype` from f64 values (rounding/saturating as the type requires).
    pub fn from_f64_as(dtype: DType, shape: Vec<usize>, v: &[f64]) -> Option<Tensor> {
        let data = match dtype {
            DType::F32 => TensorData::F32(v.iter().map(|&x| x as f32).collect()),
            DType::F16 => TensorData::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
            DType::BF16 => TensorData::BF16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
            DType::F64 => TensorData::F64(v.to_vec()),
            DType::I64 => TensorData::I64(v.iter().map(|&x| x as i64).collect()),
            DType::I32 => TensorData::I32(v.iter().map(|&x| x as i32).collect()),
            DType::I16 => TensorData::I16(v.iter().map(|&x| x as i16).collect()),
            DType::I8 => TensorData::I8(v.iter().map(|&x| x as i8).collect()),
            DType::U8 => TensorData::U8(v.iter().map(|&x| x as u8).collect()),
            DType::U16 => TensorData::U16(v.iter().map(|&x| x as u16).collect()),
            DType::U32 => TensorData::U32(v.iter().map(|&x| x as u32).collect()),
            DType::U64 => TensorData::U64(v.iter().map(|&x| x as u64).collect()),
            DType::Bool => TensorData::Bool(v.iter().map(|&x| x != 0.0).collect()),
            DType::Other(_) => return None,
        };
        Some(Tensor { shape, data })
    }

    /// Same data, new shape (caller checks element counts).
    pub fn reshaped(&self, shape: Vec<usize>) -> Tensor {
        debug_assert_eq!(shape.iter().product::<usize>(), self.len());
        Tensor { shape, data: self.data.clone() }
    }

    /// Size in bytes of the payload (for reports and budgets).
    pub fn size_bytes(&self) -> usize {
        self.len() * self.dtype().size_bytes().unwrap_or(0)
    }
}

/// Row-major strides of a shape, in elements.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}
