//! Tensor shapes with static and symbolic dimensions.

use std::fmt;

/// One dimension of a tensor type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Dim {
    Known(usize),
    /// A named dimension (`batch`, `seq`), equal wherever the same name appears.
    Sym(String),
    /// Not known until run time and not tied to a name.
    Unknown,
}

impl Dim {
    pub fn known(&self) -> Option<usize> {
        match self {
            Dim::Known(n) => Some(*n),
            _ => None,
        }
    }

    /// Whether two dims can describe the same run-time size.
    pub fn compatible(&self, other: &Dim) -> bool {
        match (self, other) {
            (Dim::Known(a), Dim::Known(b)) => a == b,
            _ => true,
        }
    }
}

impl From<usize> for Dim {
    fn from(n: usize) -> Dim {
        Dim::Known(n)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Known(n) => write!(f, "{n}"),
            Dim::Sym(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A shape of known rank.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Shape(pub Vec<Dim>);

impl Shape {
    pub fn from_static(dims: &[usize]) -> Shape {
        Shape(dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    /// All dims as numbers, when every dim is static.
    pub fn as_static(&self) -> Option<Vec<usize>> {
        self.0.iter().map(Dim::known).collect()
    }

    pub fn is_static(&self) -> bool {
        self.0.iter().all(|d| d.known().is_some())
    }

    /// Whether a run-time shape fits this declared shape (symbolic dims fit anything).
    pub fn admits(&self, concrete: &[usize]) -> bool {
        self.rank() == concrete.len() && self.0.iter().zip(concrete).all(|(d, &c)| d.compatible(&Dim::Known(c)))
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// Element type plus shape (rank may be unknown for tensors in host-only regions).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TensorType {
    pub dtype: super::DType,
    pub shape: Option<Shape>,
}

impl TensorType {
    pub fn new(dtype: super::DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape: Some(shape) }
    }
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.shape {
            Some(s) => write!(f, "{}{}", self.dtype, s),
            None => write!(f, "{}[*]", self.dtype),
        }
    }
}

/// Numpy-style multidirectional broadcast of two shapes. `None` when they cannot broadcast.
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Option<Shape> {
    let rank = a.rank().max(b.rank());
    let pad = |s: &Shape, i: usize| -> Dim {
        let off = rank - s.rank();
        if i < off {
            Dim::Known(1)
        } else {
            s.0[i - off].clone()
        }
    };
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let (x, y) = (pad(a, i), pad(b, i));
        out.push(match (&x, &y) {
            (Dim::Known(1), _) => y,
            (_, Dim::Known(1)) => x,
            (Dim::Known(p), Dim::Known(q)) if p != q => return None,
            (Dim::Known(_), _) => x,
            (_, Dim::Known(_)) => y,
            (Dim::Sym(p), Dim::Sym(q)) if p == q => x,
            _ => Dim::Unknown,
        });
    }
    Some(Shape(out))
}

/// Broadcast of concrete shapes.
pub fn broadcast_static(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let get = |s: &[usize], i: usize| if i < rank - s.len() { 1 } else { s[i - (rank - s.len())] };
    (0..rank)
        .map(|i| match (get(a, i), get(b, i)) {
            (1, y) => Some(y),
            (x, 1) => Some(x),
            (x, y) if x == y => Some(x),
            _ => None,
        })
        .collect()
}

/// For each output element of a broadcast, the flat index into an input of shape `shape`.
pub fn broadcast_index(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let rank = out.len();
    let off = rank - shape.len();
    let in_strides = super::tensor::strides(shape);
    // Stride 0 on broadcast dims.
    let bstr: Vec<usize> =
        (0..rank).map(|i| if i < off || shape[i - off] == 1 { 0 } else { in_strides[i - off] }).collect();
    let n: usize = out.iter().product();
    let mut idx = Vec::with_capacity(n);
    let mut counter = vec![0usize; rank];
    let mut flat = 0usize;
    for _ in 0..n {
        idx.push(flat);
        for d in (0..rank).rev() {
            counter[d] += 1;
            flat += bstr[d];
            if counter[d] < out[d] {
                break;
            }
            flat -= bstr[d] * counter[d];
            counter[d] = 0;
        }
    }
    idx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_keeps_symbols_and_rejects_mismatch() {
        let a = Shape(vec![Dim::Sym("b".into()), Dim::Known(1), Dim::Known(8)]);
        let b = Shape::from_static(&[4, 8]);
        assert_eq!(broadcast_shapes(&a, &b).unwrap(), Shape(vec![Dim::Sym("b".into()), 4.into(), 8.into()]));
        assert!(broadcast_shapes(&Shape::from_static(&[3]), &Shape::from_static(&[4])).is_none());
        assert_eq!(broadcast_static(&[2, 1, 3], &[5, 1]), Some(vec![2, 5, 3]));
        assert_eq!(broadcast_static(&[2], &[3]), None);
    }
}
