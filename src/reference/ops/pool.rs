//! N-D MaxPool, AveragePool and GlobalAveragePool over NCHW... tensors.
//!
//! Windows are described per spatial dim: for each output index, the input coordinates inside
//! the input and how many window positions fall inside the *padded* input. An N-D window is
//! the Cartesian product of its per-dim lists. Window positions beyond the end padding (which
//! ceil_mode creates) are never counted, as in onnxruntime.

use super::OpResult;
use crate::ir::{strides, ResolvedWindow, Tensor, TensorData, Window};
use crate::with_data;
use rayon::prelude::*;

/// Per spatial dim and output index: the input coordinates the window covers, and the number
/// of its positions inside the padded input (for count_include_pad).
struct DimWindows {
    coords: Vec<Vec<usize>>,
    padded: Vec<usize>,
}

fn dim_windows(input: usize, g: &ResolvedWindow, d: usize) -> DimWindows {
    let (mut coords, mut padded) = (Vec::new(), Vec::new());
    for o in 0..g.output[d] {
        let start = (o * g.strides[d]) as isize - g.pad_begin[d] as isize;
        let pos = (0..g.kernel[d]).map(|k| start + (k * g.dilations[d]) as isize);
        let limit = (input + g.pad_end[d]) as isize;
        padded.push(pos.clone().filter(|&p| p < limit).count());
        coords.push(pos.filter(|&p| p >= 0 && p < input as isize).map(|p| p as usize).collect());
    }
    DimWindows { coords, padded }
}

/// Validated geometry of a pooling op on `x`.
struct Pool {
    planes: usize,
    input: Vec<usize>,
    g: ResolvedWindow,
    dims: Vec<DimWindows>,
}

impl Pool {
    fn new(x: &Tensor, window: &Window, ceil_mode: bool) -> Result<Pool, String> {
        let kernel = window.kernel_shape.as_ref().ok_or("missing required attribute 'kernel_shape'")?;
        if x.rank() < 3 || x.rank() != kernel.len() + 2 {
            return Err(format!("input of shape {:?} does not match a {}-D kernel", x.shape, kernel.len()));
        }
        let input = x.shape[2..].to_vec();
        let g = window.resolve(&input, kernel, ceil_mode)?;
        let dims = (0..input.len()).map(|d| dim_windows(input[d], &g, d)).collect();
        Ok(Pool { planes: x.shape[0] * x.shape[1], input, g, dims })
    }

    fn out_shape(&self, x: &Tensor) -> Vec<usize> {
        let mut s = x.shape[..2].to_vec();
        s.extend(&self.g.output);
        s
    }

    fn out_positions(&self) -> usize {
        self.g.output.iter().product()
    }

    /// Calls `f(output position, window element offsets within a plane, padded count)` for every
    /// output position, in row-major order.
    fn for_each_window(&self, mut f: impl FnMut(usize, &[usize], usize)) {
        let nd = self.input.len();
        let in_strides = strides(&self.input);
        let mut o = vec![0usize; nd];
        let mut offsets = Vec::new();
        let mut next = Vec::new();
        for p in 0..self.out_positions() {
            offsets.clear();
            offsets.push(0);
            let mut padded = 1;
            for d in 0..nd {
                next.clear();
                for &base in &offsets {
                    next.extend(self.dims[d].coords[o[d]].iter().map(|&c| base + c * in_strides[d]));
                }
                std::mem::swap(&mut offsets, &mut next);
                padded *= self.dims[d].padded[o[d]];
            }
            f(p, &offsets, padded);
            for d in (0..nd).rev() {
                o[d] += 1;
                if o[d] < self.g.output[d] {
                    break;
                }
                o[d] = 0;
            }
        }
    }
}

/// MaxPool: outputs Y and Indices, the flat NCHW... index of each maximum (with the spatial
/// part column-major when `storage_order` is 1). Padding never wins; the first maximum does.
pub fn max_pool(x: &Tensor, window: &Window, ceil_mode: bool, storage_order: i64) -> OpResult {
    if !(x.dtype().is_float() || x.dtype().is_integer()) {
        return Err(format!("input must be numeric, is {}", x.dtype()));
    }
    if storage_order != 0 && storage_order != 1 {
        return Err(format!("storage_order must be 0 or 1, is {storage_order}"));
    }
    let pool = Pool::new(x, window, ceil_mode)?;
    let in_size: usize = pool.input.iter().product();
    let out_n = pool.out_positions();
    // Argmax offsets within each plane; None for a window entirely in the padding.
    let mut arg: Vec<Option<usize>> = vec![None; pool.planes * out_n];
    if !arg.is_empty() {
        with_data!(&x.data, v => arg.par_chunks_mut(out_n).enumerate().for_each(|(plane, a)| {
            let xs = &v[plane * in_size..][..in_size];
            pool.for_each_window(|p, offs, _| {
                let mut best: Option<usize> = None;
                for &i in offs {
                    if best.is_none_or(|b| xs[i].partial_cmp(&xs[b]) == Some(std::cmp::Ordering::Greater)) {
                        best = Some(i);
                    }
                }
                a[p] = best;
            });
        }));
    }
    let out_shape = pool.out_shape(x);
    let flat: Vec<usize> =
        arg.iter().enumerate().map(|(j, a)| a.map_or(0, |i| (j / out_n.max(1)) * in_size + i)).collect();
    let y = if arg.iter().all(Option::is_some) {
        Tensor { shape: out_shape.clone(), data: x.data.gather(&flat) }
    } else {
        // Empty windows output the lowest value, as onnxruntime does.
        let xs = x.to_f64_vec();
        let v: Vec<f64> =
            arg.iter().zip(&flat).map(|(a, &i)| if a.is_some() { xs[i] } else { f64::NEG_INFINITY }).collect();
        Tensor::from_f64_as(x.dtype(), out_shape.clone(), &v).ok_or("unsupported element type")?
    };
    // Column-major strides over the spatial dims for storage_order 1.
    let col_strides: Vec<usize> = (0..pool.input.len()).map(|d| pool.input[..d].iter().product()).collect();
    let row_strides = strides(&pool.input);
    let indices: Vec<i64> = arg
        .iter()
        .zip(&flat)
        .map(|(a, &f)| match a {
            None => -1,
            Some(_) if storage_order == 0 => f as i64,
            &Some(i) => {
                let mut s = 0;
                for d in 0..pool.input.len() {
                    s += (i / row_strides[d]) % pool.input[d] * col_strides[d];
                }
                (f - i + s) as i64
            }
        })
        .collect();
    Ok(vec![y, Tensor::from_i64(out_shape, indices)])
}

pub fn average_pool(x: &Tensor, window: &Window, ceil_mode: bool, count_include_pad: bool) -> OpResult {
    if !x.dtype().is_float() {
        return Err(format!("input must be a float tensor, is {}", x.dtype()));
    }
    let pool = Pool::new(x, window, ceil_mode)?;
    let in_size: usize = pool.input.iter().product();
    let out_n = pool.out_positions();
    let xs = x.to_f64_vec();
    let mut out = vec![0.0f64; pool.planes * out_n];
    if !out.is_empty() {
        out.par_chunks_mut(out_n).enumerate().for_each(|(plane, y)| {
            let xp = &xs[plane * in_size..][..in_size];
            pool.for_each_window(|p, offs, padded| {
                let sum: f64 = offs.iter().map(|&i| xp[i]).sum();
                y[p] = sum / if count_include_pad { padded } else { offs.len() } as f64;
            });
        });
    }
    Ok(vec![Tensor::from_f64_as(x.dtype(), pool.out_shape(x), &out).expect("float dtype")])
}

/// Mean (or, with `max`, maximum) over all spatial dims, kept as size-1 dims.
pub fn global_pool(x: &Tensor, max: bool) -> OpResult {
    if !x.dtype().is_float() {
        return Err(format!("input must be a float tensor, is {}", x.dtype()));
    }
    if x.rank() < 2 {
        return Err(format!("input must have rank >= 2, has shape {:?}", x.shape));
    }
    let planes = x.shape[0] * x.shape[1];
    let size: usize = x.shape[2..].iter().product();
    let mut shape = x.shape.clone();
    shape[2..].iter_mut().for_each(|d| *d = 1);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / size as f64;
    // As MaxPool: the first value is the start, a later one wins only when greater (a NaN
    // first stays).
    let maximum = |v: &[f64]| v.iter().copied().reduce(|best, e| if e > best { e } else { best }).unwrap_or(f64::NAN);
    let out: Vec<f64> = match &x.data {
        _ if max => x.to_f64_vec().par_chunks(size.max(1)).map(maximum).collect(),
        // Common case without the f64 copy of the whole tensor.
        TensorData::F32(v) if size > 0 => {
            v.par_chunks(size).map(|c| c.iter().map(|&e| e as f64).sum::<f64>() / size as f64).collect()
        }
        _ if size == 0 => vec![f64::NAN; planes],
        _ => x.to_f64_vec().par_chunks(size).map(mean).collect(),
    };
    Ok(vec![Tensor::from_f64_as(x.dtype(), shape, &out).expect("float dtype")])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::AutoPad;

    fn win(k: &[usize], s: &[usize], p: &[usize], d: &[usize]) -> Window {
        let opt = |v: &[usize]| (!v.is_empty()).then(|| v.to_vec());
        Window {
            kernel_shape: Some(k.to_vec()),
            strides: opt(s),
            pads: opt(p),
            dilations: opt(d),
            auto_pad: AutoPad::NotSet,
        }
    }

    fn x44() -> Tensor {
        // 0..16 in a 4x4 plane, with a twist so maxima are not always bottom-right.
        let v = vec![1., 2., 3., 4., 5., 16., 7., 8., 9., 10., 11., 12., 13., 14., 15., 6.];
        Tensor::from_f32(vec![1, 1, 4, 4], v)
    }

    #[test]
    fn max_pool_basic_and_indices() {
        let r = max_pool(&x44(), &win(&[2, 2], &[2, 2], &[], &[]), false, 0).unwrap();
        assert_eq!(r[0].shape, vec![1, 1, 2, 2]);
        assert_eq!(r[0].to_f32_vec(), vec![16., 8., 14., 15.]);
        assert_eq!(r[1].as_i64_vec().unwrap(), vec![5, 7, 13, 14]);
        // Column-major: (h, w) -> h + w * H.
        let r = max_pool(&x44(), &win(&[2, 2], &[2, 2], &[], &[]), false, 1).unwrap();
        assert_eq!(r[1].as_i64_vec().unwrap(), vec![5, 13, 7, 11]);
    }

    #[test]
    fn max_pool_padding_never_wins() {
        let x = Tensor::from_f32(vec![1, 1, 1, 3], vec![-5., -6., -7.]);
        let r = max_pool(&x, &win(&[1, 2], &[1, 1], &[0, 1, 0, 1], &[]), false, 0).unwrap();
        assert_eq!(r[0].to_f32_vec(), vec![-5., -5., -6., -7.]);
        assert_eq!(r[1].as_i64_vec().unwrap(), vec![0, 0, 1, 2]);
    }

    #[test]
    fn max_pool_u8_and_ceil() {
        let x = Tensor { shape: vec![1, 1, 5], data: TensorData::U8(vec![1, 9, 3, 4, 200]) };
        let r = max_pool(&x, &win(&[2], &[2], &[], &[]), true, 0).unwrap();
        assert_eq!(r[0].data, TensorData::U8(vec![9, 4, 200]));
    }

    #[test]
    fn average_pool_pads() {
        let x = Tensor::from_f32(vec![1, 1, 2, 2], vec![1., 2., 3., 4.]);
        let w = win(&[2, 2], &[1, 1], &[1, 1, 0, 0], &[]);
        let r = average_pool(&x, &w, false, false).unwrap();
        assert_eq!(r[0].to_f32_vec(), vec![1., 1.5, 2., 2.5]);
        let r = average_pool(&x, &w, false, true).unwrap();
        assert_eq!(r[0].to_f32_vec(), vec![0.25, 0.75, 1., 2.5]);
    }

    #[test]
    fn average_pool_ceil_never_counts_beyond_padding() {
        // Input 3, kernel 2, stride 2, ceil: the last window covers [2, 4): only 2 is inside
        // and nothing is padding, so both modes divide by 1.
        let x = Tensor::from_f32(vec![1, 1, 3], vec![1., 2., 4.]);
        for cip in [false, true] {
            let r = average_pool(&x, &win(&[2], &[2], &[], &[]), true, cip).unwrap();
            assert_eq!(r[0].to_f32_vec(), vec![1.5, 4.]);
        }
        // With end padding 1 the last window [2, 4) has one padded position inside the limit.
        let r = average_pool(&x, &win(&[2], &[2], &[0, 1], &[]), true, true).unwrap();
        assert_eq!(r[0].to_f32_vec(), vec![1.5, 2.]);
    }

    #[test]
    fn global_average() {
        let r = global_pool(&x44(), false).unwrap();
        assert_eq!(r[0].shape, vec![1, 1, 1, 1]);
        assert_eq!(r[0].to_f32_vec(), vec![8.5]);
        assert!(global_pool(&Tensor::from_f32(vec![2], vec![1., 2.]), false).is_err());
    }

    #[test]
    fn errors() {
        let x = x44();
        assert!(max_pool(&x, &win(&[2], &[], &[], &[]), false, 0).is_err());
        assert!(max_pool(&x, &win(&[5, 5], &[], &[], &[]), false, 0).is_err());
        let mut w = win(&[2, 2], &[], &[], &[]);
        w.kernel_shape = None;
        assert!(average_pool(&x, &w, false, false).is_err());
    }
}
