//! MatMul and Gemm on `matrixmultiply`. f32, f16 and bf16 compute in f32 (`sgemm`) and round
//! once to the input type; f64 computes in f64 (`dgemm`). Conv reuses [`gemm_into`].

use super::{float_out, OpResult};
use crate::ir::broadcast_index;
use crate::ir::{broadcast_static, DType, Tensor, TensorData};
use rayon::prelude::*;

/// Element types with a `matrixmultiply` kernel: the types reference GEMMs compute in.
pub(crate) trait GemmScalar: Copy + Send + Sync + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn from_f32(v: f32) -> Self;
    /// The tensor's values in this type.
    fn values(t: &Tensor) -> Vec<Self>;
    /// A tensor of float type `dtype` from values computed in this type (rounded once).
    fn tensor(dtype: DType, shape: Vec<usize>, v: Vec<Self>) -> Tensor;
    /// # Safety
    /// The strided matrices must lie inside the memory the pointers refer to.
    #[allow(clippy::too_many_arguments)]
    unsafe fn raw_gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: Self,
        a: *const Self,
        rsa: isize,
        csa: isize,
        b: *const Self,
        rsb: isize,
        csb: isize,
        beta: Self,
        c: *mut Self,
        rsc: isize,
        csc: isize,
    );
}

impl GemmScalar for f32 {
    const ZERO: f32 = 0.0;
    const ONE: f32 = 1.0;
    fn from_f32(v: f32) -> f32 {
        v
    }
    fn values(t: &Tensor) -> Vec<f32> {
        t.to_f32_vec()
    }
    fn tensor(dtype: DType, shape: Vec<usize>, v: Vec<f32>) -> Tensor {
        float_out(dtype, shape, v)
    }
    unsafe fn raw_gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f32,
        a: *const f32,
        rsa: isize,
        csa: isize,
        b: *const f32,
        rsb: isize,
        csb: isize,
        beta: f32,
        c: *mut f32,
        rsc: isize,
        csc: isize,
    ) {
        matrixmultiply::sgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
    }
}

impl GemmScalar for f64 {
    const ZERO: f64 = 0.0;
    const ONE: f64 = 1.0;
    fn from_f32(v: f32) -> f64 {
        v as f64
    }
    fn values(t: &Tensor) -> Vec<f64> {
        t.to_f64_vec()
    }
    fn tensor(_dtype: DType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
        Tensor { shape, data: TensorData::F64(v) }
    }
    unsafe fn raw_gemm(
        m: usize,
        k: usize,
        n: usize,
        alpha: f64,
        a: *const f64,
        rsa: isize,
        csa: isize,
        b: *const f64,
        rsb: isize,
        csb: isize,
        beta: f64,
        c: *mut f64,
        rsc: isize,
        csc: isize,
    ) {
        matrixmultiply::dgemm(m, k, n, alpha, a, rsa, csa, b, rsb, csb, beta, c, rsc, csc)
    }
}

/// A strided matrix inside a slice: element (i, j) is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct Mat<'a, T> {
    pub data: &'a [T],
    pub rs: usize,
    pub cs: usize,
}

impl<'a, T> Mat<'a, T> {
    /// A row-major matrix with `cols` columns, optionally read transposed.
    pub fn row_major(data: &'a [T], cols: usize, transposed: bool) -> Self {
        if transposed {
            Mat { data, rs: 1, cs: cols }
        } else {
            Mat { data, rs: cols, cs: 1 }
        }
    }

    fn covers(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

/// `c = alpha * a * b + beta * c` where `a` is m x k, `b` is k x n and `c` is a contiguous
/// row-major m x n block. `beta == 0` ignores c's old contents.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into<T: GemmScalar>(
    m: usize,
    k: usize,
    n: usize,
    alpha: T,
    a: Mat<T>,
    b: Mat<T>,
    beta: T,
    c: &mut [T],
) {
    // Internal invariant, not input validation: callers check shapes before getting here.
    assert!(a.covers(m, k) && b.covers(k, n) && c.len() >= m * n, "gemm operands out of bounds");
    if m == 0 || n == 0 {
        return;
    }
    // SAFETY: the asserts above keep every strided access inside the slices.
    unsafe {
        T::raw_gemm(
            m,
            k,
            n,
            alpha,
            a.data.as_ptr(),
            a.rs as isize,
            a.cs as isize,
            b.data.as_ptr(),
            b.rs as isize,
            b.cs as isize,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        )
    }
}

fn check_float(t: &Tensor, what: &str) -> Result<(), String> {
    match t.dtype() {
        d if d.is_float() => Ok(()),
        d if d.is_integer() => Err(format!("{what} is {d}: integer matrix products are not supported")),
        d => Err(format!("{what} must be a float tensor, is {d}")),
    }
}

/// Numpy matmul: 1-D operands are promoted (and the promoted dim dropped from the result),
/// leading dims broadcast as batch dims.
pub fn matmul(a: &Tensor, b: &Tensor) -> OpResult {
    check_float(a, "input 0")?;
    if a.dtype() != b.dtype() {
        return Err(format!("input types differ: {} vs {}", a.dtype(), b.dtype()));
    }
    Ok(vec![if a.dtype() == DType::F64 { matmul_typed::<f64>(a, b)? } else { matmul_typed::<f32>(a, b)? }])
}

fn matmul_typed<T: GemmScalar>(a: &Tensor, b: &Tensor) -> Result<Tensor, String> {
    if a.rank() == 0 || b.rank() == 0 {
        return Err(format!("inputs must have rank >= 1, have shapes {:?} and {:?}", a.shape, b.shape));
    }
    let sa = if a.rank() == 1 { vec![1, a.shape[0]] } else { a.shape.clone() };
    let sb = if b.rank() == 1 { vec![b.shape[0], 1] } else { b.shape.clone() };
    let (ra, rb) = (sa.len(), sb.len());
    let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
    if sb[rb - 2] != k {
        return Err(format!("inner dimensions differ: {:?} x {:?}", a.shape, b.shape));
    }
    let (batch_a, batch_b) = (&sa[..ra - 2], &sb[..rb - 2]);
    let batch = broadcast_static(batch_a, batch_b)
        .ok_or_else(|| format!("batch dimensions of {:?} and {:?} do not broadcast", a.shape, b.shape))?;
    let mut out_shape = batch.clone();
    if a.rank() > 1 {
        out_shape.push(m);
    }
    if b.rank() > 1 {
        out_shape.push(n);
    }
    // Which matrix of a and of b each output matrix reads.
    let (ia, ib) = (broadcast_index(batch_a, &batch), broadcast_index(batch_b, &batch));
    let (av, bv) = (T::values(a), T::values(b));
    let mut out = vec![T::ZERO; ia.len() * m * n];
    if m * n > 0 {
        let one = |(c, (&i, &j)): (&mut [T], (&usize, &usize))| {
            let am = Mat::row_major(&av[i * m * k..(i + 1) * m * k], k, false);
            let bm = Mat::row_major(&bv[j * k * n..(j + 1) * k * n], n, false);
            gemm_into(m, k, n, T::ONE, am, bm, T::ZERO, c);
        };
        // Small matrices in big batches (attention heads): parallelise over the batch;
        // large ones are threaded inside matrixmultiply.
        if ia.len() > 1 && m * n * k < (1 << 18) {
            out.par_chunks_mut(m * n).zip(ia.par_iter().zip(ib.par_iter())).for_each(one);
        } else {
            out.chunks_mut(m * n).zip(ia.iter().zip(ib.iter())).for_each(one);
        }
    }
    Ok(T::tensor(a.dtype(), out_shape, out))
}

/// Y = alpha * A' * B' + beta * C with A', B' optionally transposed 2-D matrices and C
/// unidirectionally broadcast to [M, N].
pub fn gemm(
    a: &Tensor,
    b: &Tensor,
    c: Option<&Tensor>,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
) -> OpResult {
    check_float(a, "A")?;
    for (t, what) in [(Some(b), "B"), (c, "C")] {
        if let Some(t) = t {
            if t.dtype() != a.dtype() {
                return Err(format!("{what} is {} but A is {}", t.dtype(), a.dtype()));
            }
        }
    }
    let args = (a, b, c, alpha, beta, trans_a, trans_b);
    Ok(vec![if a.dtype() == DType::F64 { gemm_typed::<f64>(args)? } else { gemm_typed::<f32>(args)? }])
}

type GemmArgs<'a> = (&'a Tensor, &'a Tensor, Option<&'a Tensor>, f32, f32, bool, bool);

fn gemm_typed<T: GemmScalar>((a, b, c, alpha, beta, trans_a, trans_b): GemmArgs) -> Result<Tensor, String> {
    if a.rank() != 2 || b.rank() != 2 {
        return Err(format!("A and B must be 2-D, have shapes {:?} and {:?}", a.shape, b.shape));
    }
    let (m, k) = if trans_a { (a.shape[1], a.shape[0]) } else { (a.shape[0], a.shape[1]) };
    let (kb, n) = if trans_b { (b.shape[1], b.shape[0]) } else { (b.shape[0], b.shape[1]) };
    if k != kb {
        return Err(format!("inner dimensions differ: A {:?} gives K={k}, B {:?} gives K={kb}", a.shape, b.shape));
    }
    let mut out = vec![T::ZERO; m * n];
    let mut beta_t = T::ZERO;
    if let Some(c) = c {
        let fits = c.rank() <= 2 && c.shape.iter().rev().zip([n, m]).all(|(&d, o)| d == 1 || d == o);
        if !fits {
            return Err(format!("C of shape {:?} does not broadcast to [{m}, {n}]", c.shape));
        }
        if beta != 0.0 {
            let cv = T::values(c);
            for (o, i) in out.iter_mut().zip(broadcast_index(&c.shape, &[m, n])) {
                *o = cv[i];
            }
            beta_t = T::from_f32(beta);
        }
    }
    let (av, bv) = (T::values(a), T::values(b));
    let am = Mat::row_major(&av, a.shape[1], trans_a);
    let bm = Mat::row_major(&bv, b.shape[1], trans_b);
    gemm_into(m, k, n, T::from_f32(alpha), am, bm, beta_t, &mut out);
    Ok(T::tensor(a.dtype(), vec![m, n], out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    fn t(shape: &[usize], v: &[f32]) -> Tensor {
        Tensor::from_f32(shape.to_vec(), v.to_vec())
    }

    #[test]
    fn matmul_2d() {
        let y = &matmul(&t(&[2, 3], &[1., 2., 3., 4., 5., 6.]), &t(&[3, 2], &[1., 0., 0., 1., 1., 1.])).unwrap()[0];
        assert_eq!(y.shape, vec![2, 2]);
        assert_eq!(y.to_f32_vec(), vec![4., 5., 10., 11.]);
    }

    #[test]
    fn matmul_1d_promotion() {
        let a = t(&[3], &[1., 2., 3.]);
        let y = &matmul(&a, &a).unwrap()[0];
        assert_eq!((y.shape.clone(), y.to_f32_vec()), (vec![], vec![14.]));
        // [2,3,2] x [2] -> [2,3]
        let b = t(&[2, 3, 2], &[1., 2., 3., 4., 5., 6., 7., 8., 9., 10., 11., 12.]);
        let y = &matmul(&b, &t(&[2], &[1., -1.])).unwrap()[0];
        assert_eq!((y.shape.clone(), y.to_f32_vec()), (vec![2, 3], vec![-1.; 6]));
        // [3] x [2,3,2] -> [2,2]
        let y = &matmul(&a, &b).unwrap()[0];
        assert_eq!((y.shape.clone(), y.to_f32_vec()), (vec![2, 2], vec![22., 28., 58., 64.]));
    }

    #[test]
    fn matmul_broadcast_batch() {
        // [2,1,1,2] x [3,2,1] -> [2,3,1,1]
        let a = t(&[2, 1, 1, 2], &[1., 2., 3., 4.]);
        let b = t(&[3, 2, 1], &[1., 0., 0., 1., 1., 1.]);
        let y = &matmul(&a, &b).unwrap()[0];
        assert_eq!(y.shape, vec![2, 3, 1, 1]);
        assert_eq!(y.to_f32_vec(), vec![1., 2., 3., 3., 4., 7.]);
    }

    #[test]
    fn matmul_errors_and_empty() {
        assert!(matmul(&t(&[2, 3], &[0.; 6]), &t(&[2, 3], &[0.; 6])).is_err());
        assert!(matmul(&t(&[], &[1.]), &t(&[1], &[1.])).is_err());
        assert!(matmul(&Tensor::from_i64(vec![1, 1], vec![1]), &Tensor::from_i64(vec![1, 1], vec![1])).is_err());
        let y = &matmul(&t(&[2, 0], &[]), &t(&[0, 3], &[])).unwrap()[0];
        assert_eq!((y.shape.clone(), y.to_f32_vec()), (vec![2, 3], vec![0.; 6]));
    }

    #[test]
    fn matmul_f16_and_f64() {
        let h = |v: &[f32]| Tensor {
            shape: vec![1, v.len()],
            data: TensorData::F16(v.iter().map(|&x| f16::from_f32(x)).collect()),
        };
        let y = &matmul(&h(&[1., 2.]), &Tensor { shape: vec![2, 1], ..h(&[3., 4.]) }).unwrap()[0];
        assert_eq!((y.dtype(), y.to_f32_vec()), (DType::F16, vec![11.]));
        let d = Tensor { shape: vec![1, 1], data: TensorData::F64(vec![1.0 + 1e-12]) };
        let y = &matmul(&d, &d).unwrap()[0];
        assert_eq!(y.to_f64_vec(), vec![(1.0 + 1e-12) * (1.0 + 1e-12)]);
    }

    #[test]
    fn gemm_transposes_and_bias() {
        let a = t(&[3, 2], &[1., 4., 2., 5., 3., 6.]); // A^T = [[1,2,3],[4,5,6]]
        let b = t(&[2, 3], &[1., 0., 1., 0., 1., 1.]); // B^T = [[1,0],[0,1],[1,1]]
        let c = t(&[2], &[10., 20.]);
        let y = &gemm(&a, &b, Some(&c), 2.0, 0.5, true, true).unwrap()[0];
        // A^T B^T = [[4,5],[10,11]]
        assert_eq!(y.to_f32_vec(), vec![13., 20., 25., 32.]);
        let y = &gemm(&a, &b, Some(&t(&[2, 1], &[1., 2.])), 1.0, 1.0, true, true).unwrap()[0];
        assert_eq!(y.to_f32_vec(), vec![5., 6., 12., 13.]);
        let y = &gemm(&a, &b, None, 1.0, 1.0, true, true).unwrap()[0];
        assert_eq!(y.to_f32_vec(), vec![4., 5., 10., 11.]);
        assert!(gemm(&a, &b, Some(&t(&[3], &[0.; 3])), 1.0, 1.0, true, true).is_err());
        assert!(gemm(&a, &b, None, 1.0, 1.0, false, true).is_err());
    }
}
