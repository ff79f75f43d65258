//! ONNX Einsum on the host, in f64 (rounded once to the operands' type): any equation ONNX
//! allows, explicit or implicit, with repeated labels (diagonals), ellipses and numpy's
//! broadcasting of size-1 dims. Operands contract left to right, each pair as one batched
//! GEMM, so attention-style equations cost what a MatMul does.

use super::layout::strided_index;
use super::matmul::matmul;
use super::OpResult;
use crate::ir::einsum::{parse, EinsumSpec};
use crate::ir::{strides, Tensor, TensorData};

/// An operand in f64 with the label of each dim.
struct Operand {
    v: Vec<f64>,
    shape: Vec<usize>,
    labels: Vec<usize>,
}

impl Operand {
    /// The operand read along `shape` with per-dim element `steps` (0 broadcasts, sums of
    /// strides walk diagonals), labelled `labels`.
    fn walk(&self, shape: Vec<usize>, steps: &[usize], labels: Vec<usize>) -> Operand {
        let steps: Vec<i64> = steps.iter().map(|&s| s as i64).collect();
        let v = strided_index(&shape, &steps, 0).into_iter().map(|i| self.v[i]).collect();
        Operand { v, shape, labels }
    }

    fn size(&self, label: usize) -> usize {
        self.labels.iter().position(|&l| l == label).map_or(1, |d| self.shape[d])
    }

    /// Dims reordered to the label order `to` (a permutation of the operand's labels).
    fn permuted(&self, to: &[usize]) -> Operand {
        let st = strides(&self.shape);
        let dims: Vec<usize> =
            to.iter().map(|l| self.labels.iter().position(|x| x == l).expect("a label of the operand")).collect();
        self.walk(
            dims.iter().map(|&d| self.shape[d]).collect(),
            &dims.iter().map(|&d| st[d]).collect::<Vec<_>>(),
            to.to_vec(),
        )
    }

    /// One dim per label: a label repeated within the operand reads its diagonal.
    fn diagonal(&self, spec: &EinsumSpec) -> Result<Operand, String> {
        let st = strides(&self.shape);
        let (mut labels, mut shape, mut steps) = (Vec::new(), Vec::new(), Vec::<usize>::new());
        for (d, &l) in self.labels.iter().enumerate() {
            match labels.iter().position(|&x| x == l) {
                Some(k) if shape[k] != self.shape[d] => {
                    return Err(format!(
                        "label {} is repeated in one input over dims of sizes {} and {}",
                        spec.name(l),
                        shape[k],
                        self.shape[d]
                    ));
                }
                Some(k) => steps[k] += st[d],
                None => {
                    labels.push(l);
                    shape.push(self.shape[d]);
                    steps.push(st[d]);
                }
            }
        }
        Ok(self.walk(shape, &steps, labels))
    }

    /// The operand summed over the labels `drop` picks.
    fn summed(&self, drop: impl Fn(usize) -> bool) -> Operand {
        let (gone, kept): (Vec<usize>, Vec<usize>) = self.labels.iter().partition(|&&l| drop(l));
        if gone.is_empty() {
            return Operand { v: self.v.clone(), shape: self.shape.clone(), labels: self.labels.clone() };
        }
        let p = self.permuted(&[kept.clone(), gone.clone()].concat());
        let n: usize = gone.iter().map(|&l| self.size(l)).product();
        let shape: Vec<usize> = kept.iter().map(|&l| self.size(l)).collect();
        let v =
            if n == 0 { vec![0.0; shape.iter().product()] } else { p.v.chunks(n).map(|c| c.iter().sum()).collect() };
        Operand { v, shape, labels: kept }
    }

    /// Size-1 dims stretched to the label's size (numpy broadcasting).
    fn broadcast(&self, sizes: &[usize]) -> Operand {
        if self.labels.iter().zip(&self.shape).all(|(&l, &d)| d == sizes[l]) {
            return Operand { v: self.v.clone(), shape: self.shape.clone(), labels: self.labels.clone() };
        }
        let st = strides(&self.shape);
        let steps: Vec<usize> = self.shape.iter().zip(&st).map(|(&d, &s)| if d == 1 { 0 } else { s }).collect();
        self.walk(self.labels.iter().map(|&l| sizes[l]).collect(), &steps, self.labels.clone())
    }
}

/// `a` times `b`, summed over their shared labels outside `keep`: one batched GEMM over
/// [shared kept labels] x [a's own] x [summed] and [shared kept] x [summed] x [b's own].
fn contract(a: &Operand, b: &Operand, keep: &[usize]) -> Result<Operand, String> {
    let (a, b) = (
        a.summed(|l| !b.labels.contains(&l) && !keep.contains(&l)),
        b.summed(|l| !a.labels.contains(&l) && !keep.contains(&l)),
    );
    let shared = |l: &&usize| b.labels.contains(l);
    let batch: Vec<usize> = a.labels.iter().filter(shared).filter(|l| keep.contains(l)).copied().collect();
    let summed: Vec<usize> = a.labels.iter().filter(shared).filter(|l| !keep.contains(l)).copied().collect();
    let left: Vec<usize> = a.labels.iter().filter(|l| !b.labels.contains(l)).copied().collect();
    let right: Vec<usize> = b.labels.iter().filter(|l| !a.labels.contains(l)).copied().collect();
    let n = |o: &Operand, ls: &[usize]| ls.iter().map(|&l| o.size(l)).product::<usize>();
    let (nb, nl, nk, nr) = (n(&a, &batch), n(&a, &left), n(&a, &summed), n(&b, &right));
    let labels = [batch.clone(), left.clone(), right.clone()].concat();
    let shape: Vec<usize> = labels.iter().map(|&l| if a.labels.contains(&l) { a.size(l) } else { b.size(l) }).collect();
    if nb * nl * nr == 0 || nk == 0 {
        return Ok(Operand { v: vec![0.0; nb * nl * nr], shape, labels });
    }
    let pa = a.permuted(&[batch.clone(), left, summed.clone()].concat());
    let pb = b.permuted(&[batch, summed, right].concat());
    let ta = Tensor { shape: vec![nb, nl, nk], data: TensorData::F64(pa.v) };
    let tb = Tensor { shape: vec![nb, nk, nr], data: TensorData::F64(pb.v) };
    let v = match matmul(&ta, &tb)?.remove(0).data {
        TensorData::F64(v) => v,
        _ => unreachable!("f64 operands multiply in f64"),
    };
    Ok(Operand { v, shape, labels })
}

/// Evaluates `equation` on the inputs (all of one numeric type).
pub fn einsum(equation: &str, inputs: &[Option<&Tensor>]) -> OpResult {
    let xs: Vec<&Tensor> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| t.ok_or_else(|| format!("input {i} is missing")))
        .collect::<Result<_, _>>()?;
    let dtype = xs.first().ok_or("Einsum needs at least one input")?.dtype();
    if let Some(t) = xs.iter().find(|t| t.dtype() != dtype) {
        return Err(format!("inputs are {dtype} and {}: Einsum takes one type", t.dtype()));
    }
    if !(dtype.is_float() || dtype.is_integer()) {
        return Err(format!("Einsum is not defined on {dtype}"));
    }
    let spec = parse(equation, &xs.iter().map(|t| Some(t.rank())).collect::<Vec<_>>())?;
    let output = spec.output.clone().expect("ranks are known");
    // Each label's size: equal wherever it appears, or 1 (broadcast).
    let mut sizes = vec![1usize; spec.labels];
    for (t, labels) in xs.iter().zip(&spec.operands) {
        for (&l, &d) in labels.as_ref().expect("ranks are known").iter().zip(&t.shape) {
            match sizes[l] {
                _ if d == 1 => {}
                1 => sizes[l] = d,
                s if s != d => {
                    return Err(format!("label {} is {s} in one input and {d} in another", spec.name(l)));
                }
                _ => {}
            }
        }
    }
    let mut ops = Vec::with_capacity(xs.len());
    for (k, (t, labels)) in xs.iter().zip(&spec.operands).enumerate() {
        let raw =
            Operand { v: t.to_f64_vec(), shape: t.shape.clone(), labels: labels.clone().expect("ranks are known") };
        let elsewhere = |l: usize| {
            output.contains(&l)
                || spec.operands.iter().enumerate().any(|(j, o)| j != k && o.as_ref().is_some_and(|o| o.contains(&l)))
        };
        ops.push(raw.diagonal(&spec)?.summed(|l| !elsewhere(l)).broadcast(&sizes));
    }
    let mut acc = ops.remove(0);
    for i in 0..ops.len() {
        let later: Vec<usize> =
            ops[i + 1..].iter().flat_map(|o| o.labels.iter().copied()).chain(output.iter().copied()).collect();
        acc = contract(&acc, &ops[i], &later)?;
    }
    let acc = acc.summed(|l| !output.contains(&l)).permuted(&output);
    let out = Tensor::from_f64_as(dtype, acc.shape, &acc.v).ok_or_else(|| format!("cannot compute {dtype}"))?;
    Ok(vec![out])
}
