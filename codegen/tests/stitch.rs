//! Stitched kernels: a unit of several region shapes (softmax with a broadcast mask, LayerNorm,
//! an element-wise GELU chain in f16, a per-row mean, a two-level reduction, trigonometric and
//! hyperbolic functions, ONNX's other activations, a softmax under a
//! mask of bools and token ids with int and bool outputs, an embedding lookup, an ArgMax,
//! int64 arithmetic) is compiled for
//! sm_80 and linked twice. An executable runs each kernel's phase functions on the host
//! (`host_run`: every thread's share of a row in turn, the device's column mapping and row cache
//! included, at the device's threads per row and at 1 and 5) on random data of odd widths,
//! compared with the spec's meaning in f64 (`StitchSpec::eval`); a library answers the ABI's
//! host-side calls. Needs the toolchain, no GPU; the device's group reductions stay unverified
//! here.

mod host_build;

use std::ffi::c_void;
use std::path::Path;

use bolt_codegen::abi::{BoltStitchArgs, BoltStitchProblem, CanImplementFn, Status};
use bolt_codegen::epilogue::Activation;
use bolt_codegen::stitch::{
    self, Access, BinaryFn, CompareFn, HostInput, Input, LogicFn, Output, Reduction, Scalar, Step, StitchSpec, Storage,
    UnaryFn,
};

/// The case whose first input is a transposed view.
const TRANSPOSED: usize = 10;

fn gelu_strided() -> StitchSpec {
    StitchSpec {
        inputs: vec![input(Storage::F32, Access::Strided), input(Storage::F32, Access::Strided)],
        steps: vec![
            Step::Input(0),
            Step::Input(1),
            Step::Binary(BinaryFn::Sub, 0, 1),
            Step::Unary(UnaryFn::Activation(Activation::GeluTanh), 2),
        ],
        outputs: vec![Output { step: 3, element: Storage::F32, per_row: false }],
    }
}

fn input(element: Storage, access: Access) -> Input {
    Input { element, access }
}

/// (spec, iteration space, input shapes) cases.
fn cases() -> Vec<(StitchSpec, Vec<usize>, Vec<Vec<usize>>)> {
    use Step::*;
    let softmax = StitchSpec {
        inputs: vec![input(Storage::F32, Access::Dense), input(Storage::F32, Access::Strided)],
        steps: vec![
            Input(0),
            Const(0.125.into()),
            Binary(BinaryFn::Mul, 0, 1),
            Input(1),
            Binary(BinaryFn::Add, 2, 3),
            Reduce(Reduction::Max, 4),
            Binary(BinaryFn::Sub, 4, 5),
            Unary(UnaryFn::Exp, 6),
            Reduce(Reduction::Sum, 7),
            Binary(BinaryFn::Div, 7, 8),
        ],
        outputs: vec![Output { step: 9, element: Storage::F32, per_row: false }],
    };
    let layer_norm = StitchSpec {
        inputs: vec![
            input(Storage::F16, Access::Dense),
            input(Storage::F16, Access::Strided),
            input(Storage::F16, Access::Strided),
        ],
        steps: vec![
            Input(0),
            Reduce(Reduction::Mean, 0),
            Binary(BinaryFn::Sub, 0, 1),
            Binary(BinaryFn::Mul, 2, 2),
            Reduce(Reduction::Mean, 3),
            Const(1e-5.into()),
            Binary(BinaryFn::Add, 4, 5),
            Unary(UnaryFn::Sqrt, 6),
            Binary(BinaryFn::Div, 2, 7),
            Input(1),
            Binary(BinaryFn::Mul, 8, 9),
            Input(2),
            Binary(BinaryFn::Add, 10, 11),
        ],
        outputs: vec![
            Output { step: 12, element: Storage::F16, per_row: false },
            Output { step: 1, element: Storage::F32, per_row: true },
        ],
    };
    let gelu = StitchSpec {
        inputs: vec![input(Storage::F16, Access::Dense), input(Storage::BF16, Access::Strided)],
        steps: vec![
            Input(0),
            Input(1),
            Binary(BinaryFn::Add, 0, 1),
            Unary(UnaryFn::Activation(Activation::GeluErf), 2),
            Unary(UnaryFn::Activation(Activation::HardSigmoid { alpha: 0.2.into(), beta: 0.5.into() }), 2),
            Binary(BinaryFn::Pow, 4, 3),
            Unary(UnaryFn::Erf, 2),
        ],
        outputs: vec![
            Output { step: 3, element: Storage::F16, per_row: false },
            Output { step: 5, element: Storage::F32, per_row: false },
            Output { step: 6, element: Storage::BF16, per_row: false },
        ],
    };
    let mean = StitchSpec {
        inputs: vec![input(Storage::F32, Access::Strided)],
        steps: vec![Input(0), Unary(UnaryFn::Activation(Activation::Tanh), 0), Reduce(Reduction::Mean, 1)],
        outputs: vec![Output { step: 2, element: Storage::F32, per_row: true }],
    };
    // Abs, Neg, Max, Min, Reciprocal, a row maximum of their mix, a -inf constant, PRelu.
    let min_max = StitchSpec {
        inputs: vec![input(Storage::F32, Access::Dense), input(Storage::F32, Access::Strided)],
        steps: vec![
            Input(0),
            Input(1),
            Unary(UnaryFn::Abs, 0),
            Unary(UnaryFn::Neg, 1),
            Binary(BinaryFn::Max, 2, 3),
            Binary(BinaryFn::Min, 0, 1),
            Const(3.0.into()),
            Binary(BinaryFn::Add, 2, 6),
            Unary(UnaryFn::Reciprocal, 7),
            Binary(BinaryFn::Mul, 4, 8),
            Reduce(Reduction::Max, 9),
            Binary(BinaryFn::Sub, 9, 10),
            Const(f32::NEG_INFINITY.into()),
            Binary(BinaryFn::Max, 5, 12),
            // PRelu with the strided input as its slope.
            Binary(BinaryFn::PRelu, 0, 1),
        ],
        outputs: vec![
            Output { step: 11, element: Storage::F32, per_row: false },
            Output { step: 13, element: Storage::F32, per_row: false },
            Output { step: 14, element: Storage::F32, per_row: false },
        ],
    };
    // LogSoftmax as the planner lowers it: (x - max) - log(sum(exp(x - max))).
    let log_softmax = StitchSpec {
        inputs: vec![input(Storage::F16, Access::Dense)],
        steps: vec![
            Input(0),
            Reduce(Reduction::Max, 0),
            Binary(BinaryFn::Sub, 0, 1),
            Unary(UnaryFn::Exp, 2),
            Reduce(Reduction::Sum, 3),
            Unary(UnaryFn::Log, 4),
            Binary(BinaryFn::Sub, 2, 5),
        ],
        outputs: vec![Output { step: 6, element: Storage::F16, per_row: false }],
    };
    // A softmax under a mask made of a bool padding mask and token ids (Not, Cast, Compare,
    // Xor, Select), with an int output (scores truncated to i32) and a bool one.
    let masked = StitchSpec {
        inputs: vec![
            input(Storage::F32, Access::Dense),
            input(Storage::Bool, Access::Strided),
            input(Storage::I64, Access::Strided),
        ],
        steps: vec![
            Input(0),
            Input(1),
            Not(1),
            Input(2),
            Cast(Storage::F32, 3),
            Const(0.0.into()),
            Compare(CompareFn::Gt, 4, 5),
            Logic(LogicFn::Xor, 2, 6),
            Const((-1e4).into()),
            Select(7, 0, 8),
            Reduce(Reduction::Max, 9),
            Binary(BinaryFn::Sub, 9, 10),
            Unary(UnaryFn::Exp, 11),
            Reduce(Reduction::Sum, 12),
            Binary(BinaryFn::Div, 12, 13),
            Cast(Storage::I32, 0),
            Compare(CompareFn::Eq, 3, 15),
            Logic(LogicFn::Or, 16, 1),
            Cast(Storage::F16, 3),
        ],
        outputs: vec![
            Output { step: 14, element: Storage::F16, per_row: false },
            Output { step: 15, element: Storage::I32, per_row: false },
            Output { step: 17, element: Storage::Bool, per_row: false },
            Output { step: 18, element: Storage::BF16, per_row: false },
        ],
    };
    // A transformer's embeddings: rows of an f16 table by token ids (negative ones count from
    // the end), plus position embeddings, then a LayerNorm.
    let embeddings = StitchSpec {
        inputs: vec![
            input(Storage::F16, Access::Table),
            input(Storage::I64, Access::Row),
            input(Storage::F32, Access::Strided),
        ],
        steps: vec![
            Input(1),
            Gather(0, 0),
            Input(2),
            Binary(BinaryFn::Add, 1, 2),
            Reduce(Reduction::Mean, 3),
            Binary(BinaryFn::Sub, 3, 4),
            Binary(BinaryFn::Mul, 5, 5),
            Reduce(Reduction::Mean, 6),
            Const(1e-5.into()),
            Binary(BinaryFn::Add, 7, 8),
            Unary(UnaryFn::Sqrt, 9),
            Binary(BinaryFn::Div, 5, 10),
        ],
        outputs: vec![
            Output { step: 11, element: Storage::F16, per_row: false },
            Output { step: 1, element: Storage::F32, per_row: false },
        ],
    };
    // Ceil, Floor and Round (halves to even: floor(4x) + 0.5 is an exact half).
    let rounding = StitchSpec {
        inputs: vec![input(Storage::F32, Access::Dense)],
        steps: vec![
            Input(0),
            Const(4.0.into()),
            Binary(BinaryFn::Mul, 0, 1),
            Unary(UnaryFn::Ceil, 2),
            Unary(UnaryFn::Floor, 2),
            Const(0.5.into()),
            Binary(BinaryFn::Add, 4, 5),
            Unary(UnaryFn::Round, 6),
        ],
        outputs: vec![
            Output { step: 3, element: Storage::F32, per_row: false },
            Output { step: 4, element: Storage::F32, per_row: false },
            Output { step: 7, element: Storage::F32, per_row: false },
        ],
    };
    // Trigonometric and hyperbolic functions and their inverses, each inside its domain
    // (0.45 x for asin, acos and atanh; |x| + 1 for acosh).
    let trig = StitchSpec {
        inputs: vec![input(Storage::F32, Access::Dense)],
        steps: vec![
            Input(0),
            Const(0.45.into()),
            Binary(BinaryFn::Mul, 0, 1),
            Unary(UnaryFn::Sin, 0),
            Unary(UnaryFn::Cos, 0),
            Binary(BinaryFn::Add, 3, 4),
            Unary(UnaryFn::Tan, 2),
            Unary(UnaryFn::Asin, 2),
            Unary(UnaryFn::Acos, 2),
            Unary(UnaryFn::Atan, 0),
            Unary(UnaryFn::Atanh, 2),
            Binary(BinaryFn::Add, 6, 7),
            Binary(BinaryFn::Add, 8, 9),
            Binary(BinaryFn::Add, 11, 12),
            Binary(BinaryFn::Add, 13, 10),
            Unary(UnaryFn::Sinh, 0),
            Unary(UnaryFn::Cosh, 0),
            Unary(UnaryFn::Asinh, 0),
            Unary(UnaryFn::Abs, 0),
            Const(1.0.into()),
            Binary(BinaryFn::Add, 18, 19),
            Unary(UnaryFn::Acosh, 20),
            Binary(BinaryFn::Add, 15, 16),
            Binary(BinaryFn::Sub, 17, 21),
        ],
        outputs: vec![
            Output { step: 5, element: Storage::F32, per_row: false },
            Output { step: 14, element: Storage::F32, per_row: false },
            Output { step: 22, element: Storage::F32, per_row: false },
            Output { step: 23, element: Storage::F32, per_row: false },
        ],
    };
    // Sign and the parameterised activations ONNX has beyond the epilogues' (Elu, Selu, Celu,
    // ThresholdedRelu, Softsign, Mish, Shrink), with parameters away from their defaults.
    let activations = StitchSpec {
        inputs: vec![input(Storage::F32, Access::Dense)],
        steps: vec![
            Input(0),
            Unary(UnaryFn::Sign, 0),
            Unary(UnaryFn::Elu { alpha: 0.7.into() }, 0),
            Unary(UnaryFn::Selu { alpha: 1.5.into(), gamma: 1.2.into() }, 0),
            Unary(UnaryFn::Celu { alpha: 1.3.into() }, 0),
            Unary(UnaryFn::ThresholdedRelu { alpha: 0.4.into() }, 0),
            Unary(UnaryFn::Softsign, 0),
            Unary(UnaryFn::Mish, 0),
            Unary(UnaryFn::Shrink { bias: 0.25.into(), lambd: 0.5.into() }, 0),
            Binary(BinaryFn::Add, 2, 3),
            Binary(BinaryFn::Add, 4, 5),
            Binary(BinaryFn::Add, 10, 6),
            Binary(BinaryFn::Add, 7, 8),
        ],
        outputs: vec![
            Output { step: 1, element: Storage::F32, per_row: false },
            Output { step: 9, element: Storage::F32, per_row: false },
            Output { step: 11, element: Storage::F32, per_row: false },
            Output { step: 12, element: Storage::F16, per_row: false },
        ],
    };
    // A scalar less a constant (the clamp after a whole-tensor maximum): a space of scalars
    // launches as one element.
    let scalar = StitchSpec {
        inputs: vec![input(Storage::F32, Access::Strided)],
        steps: vec![Input(0), Const(80.0.into()), Binary(BinaryFn::Sub, 0, 1)],
        outputs: vec![Output { step: 2, element: Storage::F32, per_row: false }],
    };
    // ArgMax as the planner writes it (first index; a NaN would win): the row's max, the hits
    // (equal to it, or NaN), the least hit column as -max(-(hit ? column : width)), cast to
    // int64 per row. f16 data, so equal values (ties) occur. (The harness fills the column
    // numbers with random values too: the kernel is checked against the spec's meaning.)
    let argmax = |width: f32| StitchSpec {
        inputs: vec![input(Storage::F16, Access::Dense), input(Storage::F32, Access::Strided)],
        steps: vec![
            Input(0),
            Reduce(Reduction::Max, 0),
            Compare(CompareFn::Eq, 0, 1),
            Compare(CompareFn::Eq, 0, 0),
            Not(3),
            Logic(LogicFn::Or, 2, 4),
            Input(1),
            Const(width.into()),
            Select(5, 6, 7),
            Const((-1.0).into()),
            Binary(BinaryFn::Mul, 8, 9),
            Reduce(Reduction::Max, 10),
            Binary(BinaryFn::Mul, 11, 9),
            Cast(Storage::I64, 12),
        ],
        outputs: vec![Output { step: 13, element: Storage::I64, per_row: true }],
    };
    // Lengths and indices arithmetic in int64: wrapping, division truncating toward zero and
    // by zero 0 (the ids hold zeros), compared and cast to floats.
    let lengths = StitchSpec {
        inputs: vec![input(Storage::I64, Access::Dense), input(Storage::I64, Access::Strided)],
        steps: vec![
            Input(0),
            Input(1),
            Binary(BinaryFn::Sub, 0, 1),
            Binary(BinaryFn::Div, 2, 1),
            Binary(BinaryFn::Mul, 3, 0),
            Binary(BinaryFn::Max, 4, 1),
            Binary(BinaryFn::Min, 5, 0),
            Unary(UnaryFn::Neg, 6),
            Unary(UnaryFn::Abs, 7),
            Binary(BinaryFn::Add, 8, 3),
            Compare(CompareFn::Lt, 9, 0),
            Cast(Storage::F32, 9),
        ],
        outputs: vec![
            Output { step: 9, element: Storage::I64, per_row: false },
            Output { step: 10, element: Storage::Bool, per_row: false },
            Output { step: 11, element: Storage::F32, per_row: false },
        ],
    };
    let (softmax_f32, gelu_f16, masked_ids, embeddings_64, layer_norm_300) =
        (softmax.clone(), gelu.clone(), masked.clone(), embeddings.clone(), layer_norm.clone());
    vec![
        (trig, vec![3, 37], vec![vec![3, 37]]),
        (activations, vec![5, 41], vec![vec![5, 41]]),
        (embeddings, vec![2, 3, 37], vec![vec![7, 37], vec![2, 3, 1], vec![3, 37]]),
        (masked, vec![2, 3, 37], vec![vec![2, 3, 37], vec![2, 1, 37], vec![2, 1, 37]]),
        (min_max.clone(), vec![3, 37], vec![vec![3, 37], vec![37]]),
        (softmax.clone(), vec![2, 3, 7, 33], vec![vec![2, 3, 7, 33], vec![2, 1, 1, 33]]),
        (softmax, vec![5, 4099], vec![vec![5, 4099], vec![4099]]),
        (layer_norm.clone(), vec![3, 17], vec![vec![3, 17], vec![17], vec![17]]),
        (layer_norm, vec![2, 1000], vec![vec![2, 1000], vec![1000], vec![1000]]),
        (gelu, vec![4, 5, 3], vec![vec![4, 5, 3], vec![5, 1]]),
        // TRANSPOSED: input 0 read through permuted strides (see the test).
        (gelu_strided(), vec![4, 5, 3], vec![vec![4, 5, 3], vec![5, 1]]),
        // An input broadcast along the outer dim; rows of one element.
        (mean.clone(), vec![3, 4, 5], vec![vec![4, 5]]),
        (mean.clone(), vec![6, 1], vec![vec![6, 1]]),
        // A reduction over every element (AStitch's global scheme): one row, one group.
        (mean, vec![1, 20011], vec![vec![1, 20011]]),
        (min_max, vec![1, 9001], vec![vec![1, 9001], vec![9001]]),
        (log_softmax, vec![3, 37], vec![vec![3, 37]]),
        (rounding, vec![3, 37], vec![vec![3, 37]]),
        (scalar, vec![1], vec![vec![]]),
        // Widths of whole chunks (see VECTORS): f32 with a broadcast mask, f16 beside f32 and
        // bf16 outputs (chunks of 4) with an input broadcast along the row (read element by
        // element), 8-byte token ids (chunks of 2), an embedding lookup.
        (softmax_f32, vec![2, 3, 4, 64], vec![vec![2, 3, 4, 64], vec![2, 1, 1, 64]]),
        (gelu_f16, vec![4, 6, 16], vec![vec![4, 6, 16], vec![6, 1]]),
        (masked_ids, vec![2, 3, 64], vec![vec![2, 3, 64], vec![2, 1, 64], vec![2, 1, 64]]),
        (embeddings_64, vec![2, 3, 64], vec![vec![7, 64], vec![2, 3, 1], vec![3, 64]]),
        // ArgMax over rows of 37 (one thread's share) and of 4099 (a group's, past the cache).
        (argmax(37.0), vec![3, 37], vec![vec![3, 37], vec![37]]),
        (argmax(4099.0), vec![2, 4099], vec![vec![2, 4099], vec![4099]]),
        (lengths, vec![3, 37], vec![vec![3, 37], vec![37]]),
        // Rows of 300 take 64 threads each, two rows per block of 128: each group's reductions
        // through shared memory read back only its own warps' partials; the third block's
        // second row is past the end and still reaches every barrier.
        (layer_norm_300, vec![5, 300], vec![vec![5, 300], vec![300], vec![300]]),
    ]
}

/// (case, the tensors `host_run` moves in whole vectors: input bits, then output bits from bit
/// 8): the run-time layout decides, tensor by tensor.
const VECTORS: [(usize, u32); 6] = [
    // Odd widths: element by element.
    (5, 0),
    // LayerNorm at width 1000 (chunks of 8 f16): x, gamma and beta ([1000], broadcast over
    // rows) and the output; the per-row mean is written by column 0.
    (8, 0x107),
    (18, 0x103),
    // The bf16 input broadcast along the row ([6, 1]) is read element by element.
    (19, 0x701),
    (20, 0xf07),
    // The table is read by row and the token ids once per row: the position embeddings only.
    (21, 0x304),
];

/// Deterministic values in [-2, 2).
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
        })
        .collect()
}

/// Values as input type `e` holds them (integers: rounded, scaled to collide often; bools:
/// the positive ones), and their little-endian bytes.
fn encode(e: Storage, v: &[f64]) -> (Host, Vec<u8>) {
    let ints = |f: &dyn Fn(f64) -> i64| v.iter().map(|&x| f(x)).collect::<Vec<i64>>();
    match e {
        Storage::F32 => (
            Host::F(v.iter().map(|&x| x as f32 as f64).collect()),
            v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
        ),
        Storage::F16 => {
            let h: Vec<half::f16> = v.iter().map(|&x| half::f16::from_f64(x)).collect();
            (Host::F(h.iter().map(|x| x.to_f64()).collect()), h.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
        Storage::BF16 => {
            let h: Vec<half::bf16> = v.iter().map(|&x| half::bf16::from_f64(x)).collect();
            (Host::F(h.iter().map(|x| x.to_f64()).collect()), h.iter().flat_map(|x| x.to_le_bytes()).collect())
        }
        Storage::I32 => {
            let i = ints(&|x| (x * 2.0).round() as i64);
            let b = i.iter().flat_map(|&x| (x as i32).to_le_bytes()).collect();
            (Host::I(i), b)
        }
        Storage::I64 => {
            let i = ints(&|x| (x * 2.0).round() as i64);
            let b = i.iter().flat_map(|&x| x.to_le_bytes()).collect();
            (Host::I(i), b)
        }
        Storage::Bool => {
            let i = ints(&|x| i64::from(x > 0.0));
            let b = i.iter().map(|&x| x as u8).collect();
            (Host::I(i), b)
        }
    }
}

enum Host {
    F(Vec<f64>),
    I(Vec<i64>),
}

impl Host {
    fn input(&self) -> HostInput<'_> {
        match self {
            Host::F(v) => HostInput::Float(v),
            Host::I(v) => HostInput::Int(v),
        }
    }
}

fn decode(e: Storage, b: &[u8]) -> Vec<Scalar> {
    match e {
        Storage::F32 => {
            b.chunks_exact(4).map(|c| Scalar::F(f32::from_le_bytes(c.try_into().unwrap()) as f64)).collect()
        }
        Storage::F16 => {
            b.chunks_exact(2).map(|c| Scalar::F(half::f16::from_le_bytes(c.try_into().unwrap()).to_f64())).collect()
        }
        Storage::BF16 => {
            b.chunks_exact(2).map(|c| Scalar::F(half::bf16::from_le_bytes(c.try_into().unwrap()).to_f64())).collect()
        }
        Storage::I32 => {
            b.chunks_exact(4).map(|c| Scalar::I(i32::from_le_bytes(c.try_into().unwrap()) as i64)).collect()
        }
        Storage::I64 => b.chunks_exact(8).map(|c| Scalar::I(i64::from_le_bytes(c.try_into().unwrap()))).collect(),
        // A C++ bool is one byte, 0 or 1.
        Storage::Bool => b.iter().map(|&x| Scalar::I(i64::from(x))).collect(),
    }
}

fn output_is_float(e: Storage) -> bool {
    matches!(e, Storage::F32 | Storage::F16 | Storage::BF16)
}

fn c_problem(p: &BoltStitchProblem) -> String {
    let list = |v: &[i64]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(", ");
    let strides: Vec<String> = p.strides.iter().map(|s| format!("{{{}}}", list(s))).collect();
    format!(
        "{{{}, {}, {}, {{{}}}, {{{}}}, {{{}}}}}",
        p.rows,
        p.width,
        p.rank,
        list(&p.shape),
        strides.join(", "),
        list(&p.table_rows)
    )
}

/// How `host_run` runs each case: (threads per row, vector accesses where the layout allows).
/// The device's own mapping (0); one thread (its share of a row past the row cache's 32
/// elements recomputes its values in every phase); an odd count; the device's mapping with
/// every access element by element.
const GROUPS: [(i32, bool); 4] = [(0, true), (1, true), (5, true), (0, false)];

/// The way after [`GROUPS`]: the operator's own launch (grid, block, shared memory) emulated,
/// a thread per CUDA thread, the group reductions' shuffles and barriers included.
const EMULATED: usize = GROUPS.len();

/// A host `main` running case `c` once per way `g` of [`GROUPS`] and by the emulated launch
/// (read inputs `in_<c>_<i>.bin`, write `out_<c>_<o>_<g>.bin`), printing each case's vector mask.
fn test_main(dir: &Path, cases: &[(String, StitchSpec, BoltStitchProblem, Vec<usize>)]) -> String {
    let mut m = String::from(
        "\n#include <algorithm>\n#include <cstdio>\n#include <vector>\n#include \"bolt_host_launch.h\"\nstatic std::vector<char> slurp(char const *path) {\n  std::vector<char> b;\n  FILE *f = std::fopen(path, \"rb\");\n  if (!f) return b;\n  int ch;\n  while ((ch = std::fgetc(f)) != EOF) b.push_back(char(ch));\n  std::fclose(f);\n  return b;\n}\nint main() {\n",
    );
    for (c, (symbol, spec, p, sizes)) in cases.iter().enumerate() {
        m += &format!("  {{\n    BoltStitchProblem p = {};\n    BoltStitchArgs args = {{}};\n", c_problem(p));
        for i in 0..spec.inputs.len() {
            m += &format!(
                "    std::vector<char> in{i} = slurp(\"{}\");\n    args.inputs[{i}] = in{i}.data();\n",
                dir.join(format!("in_{c}_{i}.bin")).display()
            );
        }
        for (o, out) in spec.outputs.iter().enumerate() {
            let bytes = sizes[o] * out.element.size_bytes();
            m += &format!("    std::vector<char> out{o}({bytes});\n    args.outputs[{o}] = out{o}.data();\n");
        }
        m += &format!(
            "    std::printf(\"mask {c} %u\\n\", {symbol}::vector_mask(p, {symbol}::Kernel::make_arguments(p, args).pointers));\n"
        );
        let save = |g: usize| {
            (0..spec.outputs.len())
                .map(|o| {
                    format!(
                        "    {{\n      FILE *f = std::fopen(\"{}\", \"wb\");\n      std::fwrite(out{o}.data(), 1, out{o}.size(), f);\n      std::fclose(f);\n    }}\n",
                        dir.join(format!("out_{c}_{o}_{g}.bin")).display()
                    )
                })
                .collect::<String>()
        };
        for (g, (group, vectors)) in GROUPS.iter().enumerate() {
            m += &format!("    {symbol}::host_run(p, args, {group}, {vectors});\n");
            m += &save(g);
        }
        m += &format!(
            "    {{\n      {symbol}::Operator op;\n      if (op.initialize({symbol}::Kernel::make_arguments(p, args), nullptr, nullptr) != cutlass::Status::kSuccess) return 1;\n"
        );
        for o in 0..spec.outputs.len() {
            // Whatever the launch leaves unwritten fails the comparison: NaN floats (0xff
            // bytes), integers no case computes (0xa5 bytes; bools of 165).
            let poison = if output_is_float(spec.outputs[o].element) { "0xff" } else { "0xa5" };
            m += &format!("      std::fill(out{o}.begin(), out{o}.end(), char({poison}));\n");
        }
        m += "      bolt_host::run(op);\n    }\n";
        m += &save(EMULATED);
        m += "  }\n";
    }
    m + "  return 0;\n}\n"
}

#[test]
fn stitched_kernels_compute_their_specs_and_answer_the_abi() {
    let dir = host_build::scratch("stitch");

    // Inputs on disk, expected outputs from the spec's meaning.
    let mut runs = Vec::new();
    let mut expected = Vec::new();
    for (c, (spec, space, shapes)) in cases().into_iter().enumerate() {
        let shape_refs: Vec<&[usize]> = shapes.iter().map(|s| s.as_slice()).collect();
        let mut p = spec.problem(&space, &shape_refs).unwrap_or_else(|e| panic!("case {c}: {e}"));
        if c == TRANSPOSED {
            // Input 0 stored as [4, 3, 5] and read as its [0, 2, 1] transpose.
            let stored = bolt_codegen::abi::contiguous_strides(&[space[0], space[2], space[1]]);
            let view: Vec<i64> = [0, 2, 1].iter().map(|&d| stored[d]).collect();
            p = spec
                .problem_of_views(
                    &space,
                    &[(&shapes[0], &view), (&shapes[1], &bolt_codegen::abi::contiguous_strides(&shapes[1]))],
                )
                .unwrap();
        }
        let mut host_inputs = Vec::new();
        for (i, (x, s)) in spec.inputs.iter().zip(&shapes).enumerate() {
            let (rounded, bytes) = encode(x.element, &values(s.iter().product(), (c * 10 + i) as u64));
            std::fs::write(dir.join(format!("in_{c}_{i}.bin")), bytes).unwrap();
            host_inputs.push(rounded);
        }
        let refs: Vec<HostInput> = host_inputs.iter().map(Host::input).collect();
        let want = spec.eval(&p, &refs);
        let sizes = want.iter().map(Vec::len).collect();
        runs.push((stitch::symbol_for(&spec), spec.clone(), p, sizes));
        expected.push(want);
    }
    let mut unique: Vec<(&StitchSpec, &str)> = Vec::new();
    for (symbol, spec, ..) in &runs {
        if !unique.iter().any(|(_, s)| *s == symbol) {
            unique.push((spec, symbol));
        }
    }
    let unit = stitch::render_unit(&unique).unwrap() + &test_main(&dir, &runs);
    let built = host_build::build_race_checked(&dir, "stitch", &unit);

    // The generated kernels' per-thread code and their launches, run on the host.
    let printed = host_build::run(&built);
    for (c, want) in VECTORS {
        let line = format!("mask {c} {want}");
        assert!(printed.lines().any(|l| l == line), "case {c}: want {want:#x} in\n{printed}");
    }
    let ways: Vec<String> = GROUPS
        .iter()
        .map(|(group, vectors)| format!("host_run, threads per row {group} (0: the device's), vectors {vectors}"))
        .chain(["the emulated launch".to_string()])
        .collect();
    for (c, ((symbol, spec, ..), want)) in runs.iter().zip(&expected).enumerate() {
        for ((o, (output, want)), (g, way)) in
            spec.outputs.iter().zip(want).enumerate().flat_map(|x| ways.iter().enumerate().map(move |g| (x, g)))
        {
            let got = decode(output.element, &std::fs::read(dir.join(format!("out_{c}_{o}_{g}.bin"))).unwrap());
            assert_eq!(got.len(), want.len(), "case {c} output {o}");
            // f32 arithmetic, then one rounding to the output type; integers and bools exact.
            let tol = match output.element {
                Storage::F32 => 2e-5,
                Storage::F16 => 2e-3,
                Storage::BF16 => 1e-2,
                Storage::I32 | Storage::I64 | Storage::Bool => 0.0,
            };
            for (k, (x, w)) in got.iter().zip(want).enumerate() {
                let ok = match (x, w) {
                    (Scalar::I(x), Scalar::I(w)) => x == w,
                    (Scalar::F(x), Scalar::F(w)) => x == w || (x - w).abs() <= tol * (1.0 + w.abs()),
                    _ => false,
                };
                assert!(ok, "{symbol} case {c} output {o}[{k}], {way}: {x:?} vs {w:?}");
            }
        }
    }

    // The ABI's host side.
    let lib = unsafe { libloading::Library::new(&built.library) }.unwrap();
    for (symbol, spec, p, _) in &runs {
        let f = |suffix: &str| format!("{symbol}{suffix}");
        let can_implement = *unsafe { lib.get::<CanImplementFn>(f("_can_implement").as_bytes()) }.unwrap();
        let status = |p: &BoltStitchProblem| unsafe { can_implement(p as *const _ as *const c_void) }.status();
        assert_eq!(status(p), Status::Ok, "{symbol}");
        assert_eq!(status(&BoltStitchProblem { rows: p.rows + 1, ..*p }), Status::UnsupportedProblem, "{symbol}: rows");
        assert_eq!(status(&BoltStitchProblem { rank: 7, ..*p }), Status::UnsupportedProblem, "{symbol}: rank");
        let mut setup = host_build::RawSetup::<BoltStitchArgs>::new(&lib, symbol);
        let mut init = |args: &BoltStitchArgs| setup.initialize(p as *const _ as *const c_void, args);
        assert_eq!(init(&BoltStitchArgs::default()), Status::NullArgument, "{symbol}");
        let mut fake = BoltStitchArgs::default();
        for i in 0..spec.inputs.len() {
            fake.inputs[i] = 0x1000 as *const c_void;
        }
        for o in 0..spec.outputs.len() {
            fake.outputs[o] = 0x1000 as *mut c_void;
        }
        // Set-up needs no device (nothing is launched: the pointers are fake).
        assert_eq!(init(&fake), Status::Ok, "{symbol}");
        fake.inputs[0] = 0x1001 as *const c_void;
        assert_eq!(init(&fake), Status::MisalignedOperand, "{symbol}");
    }
}
