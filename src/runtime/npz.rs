//! `.npz` inputs (`numpy.savez`): a zip of `.npy` arrays, one per model input, named by it.

use crate::ir::{Tensor, TensorData};
use std::collections::HashMap;
use std::path::Path;

/// Reads every array of `path` as a tensor named by its entry (without `.npy`).
pub fn read_npz(path: &Path) -> Result<HashMap<String, Tensor>, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(|e| at(&e))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| at(&format!("not an .npz (zip) file: {e}")))?;
    let mut out = HashMap::new();
    for i in 0..zip.len() {
        let entry = zip.by_index(i).map_err(|e| at(&e))?;
        let name = entry.name().map_err(|e| at(&e))?.trim_end_matches(".npy").to_string();
        let npy = npyz::NpyFile::new(entry).map_err(|e| at(&format!("array '{name}': {e}")))?;
        if npy.order() == npyz::Order::Fortran {
            return Err(at(&format!("array '{name}': Fortran order (save a C-contiguous array)")));
        }
        let shape: Vec<usize> = npy.shape().iter().map(|&d| d as usize).collect();
        let descr = match npy.dtype() {
            npyz::DType::Plain(ts) => ts.to_string(),
            other => return Err(at(&format!("array '{name}': structured dtype {other:?}"))),
        };
        let bad = |e: std::io::Error| at(&format!("array '{name}': {e}"));
        let data = match descr.trim_start_matches(['<', '|', '=']) {
            "f4" => TensorData::F32(npy.into_vec().map_err(bad)?),
            "f2" => TensorData::F16(npy.into_vec().map_err(bad)?),
            "f8" => TensorData::F64(npy.into_vec().map_err(bad)?),
            "i8" => TensorData::I64(npy.into_vec().map_err(bad)?),
            "i4" => TensorData::I32(npy.into_vec().map_err(bad)?),
            "u1" => TensorData::U8(npy.into_vec().map_err(bad)?),
            "b1" => TensorData::Bool(npy.into_vec::<bool>().map_err(bad)?),
            other => return Err(at(&format!("array '{name}': dtype '{other}' is not one a model input takes"))),
        };
        out.insert(name.clone(), Tensor::new(shape, data).map_err(|e| at(&format!("array '{name}': {e}")))?);
    }
    Ok(out)
}
