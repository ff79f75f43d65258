//! TensorProto -> [`Tensor`]: raw little-endian data, typed repeated fields, external files.

use super::proto::{tensor_proto::DataLocation, TensorProto};
use crate::ir::{DType, Tensor, TensorData};
use half::{bf16, f16};
use std::path::Path;

/// Decodes a tensor. `base_dir` resolves external data; `None` forbids it (inline protos).
pub fn decode_tensor(t: &TensorProto, base_dir: Option<&Path>) -> Result<Tensor, String> {
    let dims: Vec<usize> = t
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| format!("negative dimension {d}")))
        .collect::<Result<_, _>>()?;
    let count =
        dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or_else(|| format!("dims {dims:?} overflow"))?;
    let dtype = DType::from_onnx(t.data_type());
    let esize = dtype.size_bytes().ok_or_else(|| format!("element type {dtype} is not supported by Bolt"))?;

    let external;
    let raw: Option<&[u8]> = if t.data_location() == DataLocation::External {
        external = read_external(t, base_dir, count * esize)?;
        Some(&external)
    } else if t.raw_data.is_some() {
        t.raw_data.as_deref()
    } else {
        None
    };

    let data = match raw {
        Some(bytes) => {
            if bytes.len() != count * esize {
                return Err(format!("raw data has {} bytes, {dims:?} of {dtype} needs {}", bytes.len(), count * esize));
            }
            from_le_bytes(dtype, bytes)
        }
        None => from_typed_fields(t, dtype)?,
    };
    if data.len() != count {
        return Err(format!("has {} elements, dims {dims:?} need {count}", data.len()));
    }
    Ok(Tensor { shape: dims, data })
}

fn read_external(t: &TensorProto, base_dir: Option<&Path>, expected: usize) -> Result<Vec<u8>, String> {
    let base = base_dir.ok_or("external data is not allowed here")?;
    let (mut location, mut offset, mut length) = (None, 0u64, None);
    for kv in &t.external_data {
        match kv.key() {
            "location" => location = Some(kv.value().to_string()),
            "offset" => offset = kv.value().parse().map_err(|_| format!("bad external offset '{}'", kv.value()))?,
            "length" => {
                length = Some(kv.value().parse::<u64>().map_err(|_| format!("bad external length '{}'", kv.value()))?)
            }
            _ => {}
        }
    }
    let location = location.ok_or("external data without a location")?;
    let rel = Path::new(&location);
    // Same rule as onnxruntime: the data file must sit under the model's directory.
    if rel.is_absolute() || rel.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
        return Err(format!("external data location '{location}' must be a relative path inside the model directory"));
    }
    let path = base.join(rel);
    let len = length.unwrap_or(expected as u64);
    if len != expected as u64 {
        return Err(format!("external data length {len} does not match the {expected} bytes the dims need"));
    }
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(&path).map_err(|e| format!("cannot open external data {}: {e}", path.display()))?;
    f.seek(SeekFrom::Start(offset)).map_err(|e| format!("cannot seek external data {}: {e}", path.display()))?;
    let mut buf = vec![0u8; expected];
    f.read_exact(&mut buf).map_err(|e| {
        format!("external data {} is shorter than offset {offset} + {expected} bytes: {e}", path.display())
    })?;
    Ok(buf)
}

fn from_le_bytes(dtype: DType, b: &[u8]) -> TensorData {
    macro_rules! conv {
        ($t:ty, $n:expr) => {
            b.chunks_exact($n).map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size"))).collect()
        };
    }
    match dtype {
        DType::F32 => TensorData::F32(conv!(f32, 4)),
        DType::F64 => TensorData::F64(conv!(f64, 8)),
        DType::F16 => TensorData::F16(b.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
        DType::BF16 => TensorData::BF16(b.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect()),
        DType::I64 => TensorData::I64(conv!(i64, 8)),
        DType::I32 => TensorData::I32(conv!(i32, 4)),
        DType::I16 => TensorData::I16(conv!(i16, 2)),
        DType::U16 => TensorData::U16(conv!(u16, 2)),
        DType::U32 => TensorData::U32(conv!(u32, 4)),
        DType::U64 => TensorData::U64(conv!(u64, 8)),
        DType::I8 => TensorData::I8(b.iter().map(|&x| x as i8).collect()),
        DType::U8 => TensorData::U8(b.to_vec()),
        DType::Bool => TensorData::Bool(b.iter().map(|&x| x != 0).collect()),
        DType::Other(_) => unreachable!("size_bytes rejected unsupported types"),
    }
}

/// ONNX stores small types widened into int32_data (f16/bf16 as their bit patterns) and
/// uint32/uint64 in uint64_data.
fn from_typed_fields(t: &TensorProto, dtype: DType) -> Result<TensorData, String> {
    let i32s = &t.int32_data;
    Ok(match dtype {
        DType::F32 => TensorData::F32(t.float_data.clone()),
        DType::F64 => TensorData::F64(t.double_data.clone()),
        DType::I64 => TensorData::I64(t.int64_data.clone()),
        DType::I32 => TensorData::I32(i32s.clone()),
        DType::I16 => TensorData::I16(i32s.iter().map(|&x| x as i16).collect()),
        DType::I8 => TensorData::I8(i32s.iter().map(|&x| x as i8).collect()),
        DType::U8 => TensorData::U8(i32s.iter().map(|&x| x as u8).collect()),
        DType::U16 => TensorData::U16(i32s.iter().map(|&x| x as u16).collect()),
        DType::Bool => TensorData::Bool(i32s.iter().map(|&x| x != 0).collect()),
        DType::F16 => TensorData::F16(i32s.iter().map(|&x| f16::from_bits(x as u16)).collect()),
        DType::BF16 => TensorData::BF16(i32s.iter().map(|&x| bf16::from_bits(x as u16)).collect()),
        DType::U32 => TensorData::U32(t.uint64_data.iter().map(|&x| x as u32).collect()),
        DType::U64 => TensorData::U64(t.uint64_data.clone()),
        DType::Other(c) => return Err(format!("element type {c} is not supported by Bolt")),
    })
}

/// Encodes a tensor as a TensorProto with raw data (for writing test cases and reports).
pub fn encode_tensor(name: &str, t: &Tensor) -> TensorProto {
    let mut raw = Vec::with_capacity(t.size_bytes());
    crate::with_data!(&t.data, v => for x in v { push_le(&mut raw, *x) });
    TensorProto {
        dims: t.shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(t.dtype().onnx_code()),
        name: Some(name.to_string()),
        raw_data: Some(raw),
        ..Default::default()
    }
}

trait LeBytes {
    fn put(self, out: &mut Vec<u8>);
}
macro_rules! le_bytes {
    ($($t:ty),*) => {$( impl LeBytes for $t { fn put(self, out: &mut Vec<u8>) { out.extend_from_slice(&self.to_le_bytes()) } } )*};
}
le_bytes!(f32, f64, i64, i32, i16, i8, u8, u16, u32, u64, f16, bf16);
impl LeBytes for bool {
    fn put(self, out: &mut Vec<u8>) {
        out.push(self as u8)
    }
}
fn push_le<T: LeBytes>(out: &mut Vec<u8>, x: T) {
    x.put(out)
}
