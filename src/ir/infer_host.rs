//! Output types of host-only (opaque) default-domain nodes.
//!
//! Bolt never computes these, but anchors downstream of them need shapes: YOLO necks read
//! `Split`'s outputs, CRNN heads read `LSTM`'s, exported shape arithmetic runs through
//! `ConstantOfShape`, `Equal`, `Where`, `Range` and `Expand`. In the spirit of onnxruntime's
//! symbolic shape inference, this gives each such node's outputs their element type and as
//! much of their shape as the inputs determine, and folds small integer shape tensors
//! (`Where(Equal(shape, -1), 1, shape)`, torch's spelling of an Expand target) so the
//! computation stays visible. Anything it does not know (other domains, `If`, `Loop`, `Scan`,
//! unlisted ops) yields unknown outputs, which the model's declared value_info may fill.

use super::infer::{conv_shape, dims_operand as dims, matmul_shape, norm_axis, InputInfo};
use super::*;

/// What inference learns about a host node's outputs.
#[derive(Default)]
pub struct HostOutputs {
    /// Per output; `None` where nothing is known.
    pub types: Vec<Option<TensorType>>,
    /// Output 0 folded to a constant (small integer / bool tensors only).
    pub value: Option<Tensor>,
    /// Output 0's elements as dims (a shape tensor whose entries may be symbolic).
    pub dims: Option<Vec<Dim>>,
}

fn info<'a>(infos: &[Option<InputInfo<'a>>], i: usize) -> Option<InputInfo<'a>> {
    infos.get(i).copied().flatten()
}

fn ty<'a>(infos: &[Option<InputInfo<'a>>], i: usize) -> Option<&'a TensorType> {
    info(infos, i).and_then(|x| x.ty)
}

fn shape<'a>(infos: &[Option<InputInfo<'a>>], i: usize) -> Option<&'a Shape> {
    info(infos, i).and_then(|x| x.shape())
}

fn ints(infos: &[Option<InputInfo>], i: usize) -> Option<Vec<i64>> {
    info(infos, i).and_then(|x| x.value).and_then(Tensor::as_i64_vec)
}

fn with_shape(dtype: DType, shape: Option<Shape>) -> Option<TensorType> {
    Some(TensorType { dtype, shape })
}

/// Broadcast of every present input's shape (None when one is unknown or they clash).
fn broadcast_all(infos: &[Option<InputInfo>]) -> Option<Shape> {
    let mut acc: Option<Shape> = None;
    for i in infos.iter().flatten() {
        let s = i.shape()?;
        acc = Some(match acc {
            None => s.clone(),
            Some(a) => broadcast_shapes(&a, s)?,
        });
    }
    acc
}

/// Output shape of a reduction over `axes` (all axes when empty and not a no-op).
fn reduced(s: &Shape, axes: &[i64], keepdims: bool, noop_empty: bool) -> Option<Shape> {
    if axes.is_empty() && noop_empty {
        return Some(s.clone());
    }
    let r = s.rank();
    let mut hit = vec![axes.is_empty(); r];
    for &a in axes {
        hit[norm_axis(a, r, false).ok()?] = true;
    }
    Some(Shape(
        s.0.iter()
            .zip(&hit)
            .filter_map(|(d, &h)| match (h, keepdims) {
                (false, _) => Some(d.clone()),
                (true, true) => Some(Dim::Known(1)),
                (true, false) => None,
            })
            .collect(),
    ))
}

/// Infers a host node's outputs. `n_out` is the node's output count.
pub fn infer_host(
    domain: &str,
    op_type: &str,
    attrs: &[(String, AttrValue)],
    infos: &[Option<InputInfo>],
    n_out: usize,
) -> HostOutputs {
    let mut out = HostOutputs::default();
    let x = ty(infos, 0);
    if domain == "ai.onnx.ml" {
        // The classic-ML transforms that keep their input's shape (scikit-learn pipelines
        // feeding a network), so the GEMMs after them still type.
        out.types = match op_type {
            "Scaler" | "Normalizer" => vec![x.map(|t| TensorType { dtype: DType::F32, shape: t.shape.clone() })],
            "Binarizer" | "Imputer" => vec![x.cloned()],
            _ => vec![],
        };
        return out;
    }
    if !(domain.is_empty() || domain == "ai.onnx") {
        return out;
    }
    let same = || x.cloned();
    let one = |t: Option<TensorType>| vec![t];
    out.types = match op_type {
        // Element-wise, same type and shape.
        "Abs"
        | "Neg"
        | "Sign"
        | "Floor"
        | "Ceil"
        | "Round"
        | "Exp"
        | "Log"
        | "Reciprocal"
        | "Sin"
        | "Cos"
        | "Tan"
        | "Asin"
        | "Acos"
        | "Atan"
        | "Sinh"
        | "Cosh"
        | "Asinh"
        | "Acosh"
        | "Atanh"
        | "Elu"
        | "Selu"
        | "Celu"
        | "Mish"
        | "Softsign"
        | "ThresholdedRelu"
        | "Shrink"
        | "Softmax"
        | "LogSoftmax"
        | "Hardmax"
        | "InstanceNormalization"
        | "LpNormalization"
        | "GroupNormalization"
        | "LRN"
        | "CumSum"
        | "Trilu"
        | "ScatterND"
        | "ScatterElements"
        | "ReverseSequence"
        | "MeanVarianceNormalization"
        | "BitwiseNot"
        | "Identity"
        | "Clip" => one(same()),
        "Dropout" => vec![same(), x.map(|t| TensorType { dtype: DType::Bool, shape: t.shape.clone() })],
        "Not" | "IsNaN" | "IsInf" => one(x.map(|t| TensorType { dtype: DType::Bool, shape: t.shape.clone() })),
        "CastLike" => one(ty(infos, 1).map(|t| TensorType { dtype: t.dtype, shape: x.and_then(|x| x.shape.clone()) })),
        // Broadcasting, type of the first input.
        "Max" | "Min" | "Sum" | "Mean" | "Mod" | "BitShift" | "PRelu" | "And" | "Or" | "Xor" | "BitwiseAnd"
        | "BitwiseOr" | "BitwiseXor" => one(x.and_then(|t| with_shape(t.dtype, broadcast_all(infos)))),
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" => {
            out.value = fold_compare(op_type, infos);
            one(Some(TensorType { dtype: DType::Bool, shape: broadcast_all(infos) }))
        }
        "Where" => {
            (out.value, out.dims) = fold_where(infos);
            one(ty(infos, 1).and_then(|t| with_shape(t.dtype, broadcast_all(infos))))
        }
        "Split" => split(attrs, infos, n_out),
        "Pad" => {
            let pads = ints(infos, 1).or_else(|| Attrs(attrs).ints("pads").map(<[i64]>::to_vec));
            let axes = ints(infos, 3);
            one(x.map(|t| {
                let shape = t.shape.as_ref().map(|s| {
                    let r = s.rank();
                    let mut d = s.0.clone();
                    match &pads {
                        Some(p) => {
                            let axes: Vec<i64> = axes.clone().unwrap_or_else(|| (0..r as i64).collect());
                            let k = axes.len();
                            for (j, &a) in axes.iter().enumerate() {
                                let Ok(a) = norm_axis(a, r, false) else { continue };
                                if let (Dim::Known(n), Some(&pre), Some(&post)) = (&d[a], p.get(j), p.get(j + k)) {
                                    let v = *n as i64 + pre + post;
                                    d[a] = if v >= 0 { Dim::Known(v as usize) } else { Dim::Unknown };
                                } else {
                                    d[a] = Dim::Unknown;
                                }
                            }
                        }
                        None => d.iter_mut().for_each(|x| *x = Dim::Unknown),
                    }
                    Shape(d)
                });
                TensorType { dtype: t.dtype, shape }
            }))
        }
        "ReduceSum" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1" | "ReduceL2" | "ReduceLogSum"
        | "ReduceLogSumExp" | "ReduceSumSquare" | "ReduceMean" => {
            let keep = Attrs(attrs).int("keepdims").unwrap_or(1) != 0;
            let noop = Attrs(attrs).int("noop_with_empty_axes").unwrap_or(0) != 0;
            // Axes as an attribute (older opsets) or as a constant input; a run-time axes
            // input leaves only the rank known (with keepdims).
            let axes = Attrs(attrs)
                .ints("axes")
                .map(<[i64]>::to_vec)
                .or_else(|| ints(infos, 1))
                .or_else(|| info(infos, 1).is_none().then(Vec::new));
            one(x.map(|t| TensorType {
                dtype: t.dtype,
                shape: t.shape.as_ref().and_then(|s| match &axes {
                    Some(a) => reduced(s, a, keep, noop),
                    None if keep => Some(Shape(vec![Dim::Unknown; s.rank()])),
                    None => None,
                }),
            }))
        }
        "ArgMax" | "ArgMin" => {
            let keep = Attrs(attrs).int("keepdims").unwrap_or(1) != 0;
            let axis = Attrs(attrs).int("axis").unwrap_or(0);
            one(Some(TensorType {
                dtype: DType::I64,
                shape: x.and_then(|t| t.shape.as_ref()).and_then(|s| reduced(s, &[axis], keep, false)),
            }))
        }
        "GlobalMaxPool" | "GlobalLpPool" => one(x.map(|t| TensorType {
            dtype: t.dtype,
            shape: t.shape.as_ref().filter(|s| s.rank() >= 2).map(|s| {
                let mut d = s.0[..2].to_vec();
                d.extend(std::iter::repeat_n(Dim::Known(1), s.rank() - 2));
                Shape(d)
            }),
        })),
        "ConstantOfShape" => {
            let (dtype, fill) = match Attrs(attrs).get("value") {
                Some(AttrValue::Tensor(t)) => (t.dtype(), Some(t.clone())),
                _ => (DType::F32, None),
            };
            let d = dims(infos, 0);
            if let (Some(d), Some(fill)) = (&d, &fill) {
                out.value = fold_fill(d, fill);
            }
            let shape = d.map(Shape).or_else(|| {
                shape(infos, 0).and_then(|s| s.0.first()).and_then(Dim::known).map(|r| Shape(vec![Dim::Unknown; r]))
            });
            one(Some(TensorType { dtype, shape }))
        }
        "Expand" => {
            let target = dims(infos, 1).map(Shape);
            one(x.map(|t| TensorType {
                dtype: t.dtype,
                shape: match (&t.shape, &target) {
                    (Some(s), Some(tg)) => broadcast_shapes(s, tg),
                    (Some(s), None) => shape(infos, 1)
                        .and_then(|p| p.0.first())
                        .and_then(Dim::known)
                        .map(|r| Shape(vec![Dim::Unknown; r.max(s.rank())])),
                    _ => None,
                },
            }))
        }
        "Range" => {
            let v: Option<Vec<f64>> = (0..3)
                .map(|i| {
                    info(infos, i).and_then(|x| x.value).map(|t| t.to_f64_vec()).filter(|v| v.len() == 1).map(|v| v[0])
                })
                .collect();
            let len = v.as_ref().and_then(|v| {
                let n = ((v[1] - v[0]) / v[2]).ceil();
                (n.is_finite()).then(|| n.max(0.0) as usize)
            });
            // `Range(0, n, 1)` of a symbolic size n (a sequence's positions) has n elements.
            let constant = |i: usize| info(infos, i).and_then(|x| x.value).map(|t| t.to_f64_vec());
            let symbolic = match (constant(0).as_deref(), constant(2).as_deref(), info(infos, 1).and_then(|x| x.dims)) {
                (Some([start]), Some([step]), Some([n])) if *start == 0.0 && *step == 1.0 => Some(n.clone()),
                _ => None,
            };
            let dim = len.map(Dim::Known).or(symbolic).unwrap_or(Dim::Unknown);
            one(x.map(|t| TensorType::new(t.dtype, Shape(vec![dim]))))
        }
        "Tile" => {
            let reps = ints(infos, 1);
            one(x.map(|t| TensorType {
                dtype: t.dtype,
                shape: t.shape.as_ref().map(|s| {
                    Shape(
                        s.0.iter()
                            .enumerate()
                            .map(|(i, d)| match (d, reps.as_ref().and_then(|r| r.get(i))) {
                                (Dim::Known(n), Some(&k)) if k >= 0 => Dim::Known(n * k as usize),
                                (d, Some(1)) => d.clone(),
                                _ => Dim::Unknown,
                            })
                            .collect(),
                    )
                }),
            }))
        }
        "TopK" => {
            // K: a constant, else a dim from shape arithmetic, else TopK-1's attribute.
            let k = match info(infos, 1) {
                Some(_) => dims(infos, 1).filter(|d| d.len() == 1).map(|d| d[0].clone()),
                None => Attrs(attrs).int("k").filter(|&k| k >= 0).map(|k| Dim::Known(k as usize)),
            };
            let axis = Attrs(attrs).int("axis").unwrap_or(-1);
            let s = x.and_then(|t| t.shape.as_ref()).and_then(|s| {
                let a = norm_axis(axis, s.rank(), false).ok()?;
                let mut d = s.0.clone();
                d[a] = k.clone().unwrap_or(Dim::Unknown);
                Some(Shape(d))
            });
            vec![x.and_then(|t| with_shape(t.dtype, s.clone())), with_shape(DType::I64, s)]
        }
        "GatherElements" => one(x.and_then(|t| with_shape(t.dtype, shape(infos, 1).cloned()))),
        "GatherND" => one(x.map(|t| TensorType { dtype: t.dtype, shape: gather_nd(attrs, infos) })),
        "EyeLike" => {
            let d = Attrs(attrs).int("dtype").map(|c| DType::from_onnx(c as i32));
            one(x.map(|t| TensorType { dtype: d.unwrap_or(t.dtype), shape: t.shape.clone() }))
        }
        "SpaceToDepth" => {
            let b = Attrs(attrs).int("blocksize").filter(|&b| b > 0).map(|b| b as usize);
            one(x.map(|t| TensorType {
                dtype: t.dtype,
                shape: t.shape.as_ref().filter(|s| s.rank() == 4).map(|s| {
                    let scaled = |d: &Dim, f: &dyn Fn(usize) -> usize| match (d, b) {
                        (Dim::Known(n), Some(_)) => Dim::Known(f(*n)),
                        _ => Dim::Unknown,
                    };
                    let b = b.unwrap_or(1);
                    Shape(vec![
                        s.0[0].clone(),
                        scaled(&s.0[1], &|c| c * b * b),
                        scaled(&s.0[2], &|h| h / b),
                        scaled(&s.0[3], &|w| w / b),
                    ])
                }),
            }))
        }
        "Einsum" => one(einsum(attrs, infos)),
        "DFT" => one(x.map(|t| TensorType { dtype: t.dtype, shape: dft(attrs, infos) })),
        "STFT" => one(x.map(|t| TensorType { dtype: t.dtype, shape: stft(attrs, infos) })),
        "OneHot" => {
            // The indices' shape with the depth (a constant, usually) inserted at `axis`.
            let depth = info(infos, 1).and_then(|d| d.value).filter(|d| d.len() == 1).map(|d| d.to_f64_vec()[0]);
            let depth = match depth {
                Some(d) if d >= 1.0 => Dim::Known(d as usize),
                _ => Dim::Unknown,
            };
            let shape = shape(infos, 0).and_then(|s| {
                let a = norm_axis(Attrs(attrs).int("axis").unwrap_or(-1), s.rank() + 1, false).ok()?;
                let mut d = s.0.clone();
                d.insert(a, depth);
                Some(Shape(d))
            });
            one(ty(infos, 2).map(|v| TensorType { dtype: v.dtype, shape }))
        }
        "NonZero" => one(with_shape(
            DType::I64,
            x.and_then(|t| t.shape.as_ref()).map(|s| Shape(vec![Dim::Known(s.rank()), Dim::Unknown])),
        )),
        "Size" => {
            // The element count of a static shape is known (torch's `x.numel()` checks).
            let n = x.and_then(|t| t.shape.as_ref()).and_then(Shape::as_static).map(|d| d.iter().product::<usize>());
            out.value = n.and_then(|n| Tensor::from_i64_as(DType::I64, vec![], &[n as i64]));
            one(Some(TensorType::new(DType::I64, Shape(vec![]))))
        }
        "LSTM" | "GRU" | "RNN" => recurrent(attrs, infos, op_type == "LSTM"),
        "RotaryEmbedding" => one(same()),
        // Y takes the type of the scale (its type parameter V).
        "RMSNormalization" => {
            one(x.map(|t| TensorType { dtype: ty(infos, 1).map_or(t.dtype, |s| s.dtype), shape: t.shape.clone() }))
        }
        "Attention" => attention(attrs, infos),
        "DynamicQuantizeLinear" => {
            let scalar = |d| Some(TensorType::new(d, Shape(vec![])));
            vec![
                x.map(|t| TensorType { dtype: DType::U8, shape: t.shape.clone() }),
                scalar(DType::F32),
                scalar(DType::U8),
            ]
        }
        "QuantizeLinear" => {
            let d = ty(infos, 2).map(|z| z.dtype).or_else(|| output_dtype(attrs)).unwrap_or(DType::U8);
            one(x.map(|t| TensorType { dtype: d, shape: t.shape.clone() }))
        }
        "DequantizeLinear" => {
            let d = output_dtype(attrs).or_else(|| ty(infos, 1).map(|s| s.dtype)).unwrap_or(DType::F32);
            one(x.map(|t| TensorType { dtype: d, shape: t.shape.clone() }))
        }
        "MatMulInteger" => one(Some(TensorType {
            dtype: DType::I32,
            shape: match (shape(infos, 0), shape(infos, 1)) {
                (Some(a), Some(b)) => matmul_shape(a, b).ok(),
                _ => None,
            },
        })),
        "ConvInteger" => one(Some(TensorType {
            dtype: DType::I32,
            shape: match (shape(infos, 0), shape(infos, 1), Window::from_attrs(attrs)) {
                (Some(a), Some(w), Ok(window)) => {
                    let group = Attrs(attrs).int("group").filter(|&g| g > 0).unwrap_or(1) as usize;
                    conv_shape(a, w, &window, group).ok()
                }
                _ => None,
            },
        })),
        _ => vec![],
    };
    out.types.resize(n_out, None);
    if out.dims.is_none() {
        out.dims = out
            .value
            .as_ref()
            .filter(|t| t.rank() <= 1)
            .and_then(Tensor::as_i64_vec)
            .map(|v| v.iter().map(|&n| if n >= 0 { Dim::Known(n as usize) } else { Dim::Unknown }).collect());
    }
    out
}

/// Attention's outputs: Y ([B, H_q, S_q, D_v], or [B, S_q, H_q·D_v] for 3-D inputs),
/// present_key and present_value ([B, H_kv, past + S_kv, D]) and qk_matmul_output
/// ([B, H_q, S_q, past + S_kv]).
fn attention(attrs: &[(String, AttrValue)], infos: &[Option<InputInfo>]) -> Vec<Option<TensorType>> {
    let a = Attrs(attrs);
    let heads = |k: &str| a.int(k).filter(|&h| h > 0).map_or(Dim::Unknown, |h| Dim::Known(h as usize));
    let (q_heads, kv_heads) = (heads("q_num_heads"), heads("kv_num_heads"));
    // An operand as [B, H, S, D], splitting a 3-D one's hidden size over `h` heads.
    let split = |i: usize, h: &Dim| -> Option<Vec<Dim>> {
        let s = shape(infos, i)?;
        match &s.0[..] {
            [_, _, _, _] => Some(s.0.clone()),
            [b, seq, hidden] => {
                let d = match (hidden, h) {
                    (Dim::Known(n), Dim::Known(h)) if n % h == 0 => Dim::Known(n / h),
                    _ => Dim::Unknown,
                };
                Some(vec![b.clone(), h.clone(), seq.clone(), d])
            }
            _ => None,
        }
    };
    let (q, k, v) = (split(0, &q_heads), split(1, &kv_heads), split(2, &kv_heads));
    let past = shape(infos, 4).filter(|s| s.rank() == 4).map(|s| s.0[2].clone());
    let total = |seq: &Dim| match (past.as_ref(), seq) {
        (None, s) => s.clone(),
        (Some(Dim::Known(p)), Dim::Known(s)) => Dim::Known(p + s),
        _ => Dim::Unknown,
    };
    let three_d = shape(infos, 0).is_some_and(|s| s.rank() == 3);
    let dtype = |i: usize| ty(infos, i).map(|t| t.dtype);
    let y = match (&q, &v, dtype(0)) {
        (Some(q), Some(v), Some(t)) if three_d => {
            let hidden = match (&q[1], &v[3]) {
                (Dim::Known(h), Dim::Known(d)) => Dim::Known(h * d),
                _ => Dim::Unknown,
            };
            with_shape(t, Some(Shape(vec![q[0].clone(), q[2].clone(), hidden])))
        }
        (Some(q), Some(v), Some(t)) => {
            with_shape(t, Some(Shape(vec![q[0].clone(), q[1].clone(), q[2].clone(), v[3].clone()])))
        }
        _ => None,
    };
    let present = |x: &Option<Vec<Dim>>, i: usize| {
        let x = x.as_ref()?;
        with_shape(dtype(i)?, Some(Shape(vec![x[0].clone(), x[1].clone(), total(&x[2]), x[3].clone()])))
    };
    let qk = match (&q, &k, dtype(0)) {
        (Some(q), Some(k), Some(t)) => {
            with_shape(t, Some(Shape(vec![q[0].clone(), q[1].clone(), q[2].clone(), total(&k[2])])))
        }
        _ => None,
    };
    vec![y, present(&k, 1), present(&v, 2), qk]
}

/// QuantizeLinear's and DequantizeLinear's `output_dtype` attribute (0: not given).
fn output_dtype(attrs: &[(String, AttrValue)]) -> Option<DType> {
    Attrs(attrs).int("output_dtype").filter(|&c| c != 0).map(|c| DType::from_onnx(c as i32))
}

/// GatherND's output: the index tuples' leading shape, then the data's dims after the batch
/// axes and the `k` the tuples index (k: the indices' last dim, which must be known).
fn gather_nd(attrs: &[(String, AttrValue)], infos: &[Option<InputInfo>]) -> Option<Shape> {
    let (data, idx) = (shape(infos, 0)?, shape(infos, 1)?);
    let b = usize::try_from(Attrs(attrs).int("batch_dims").unwrap_or(0)).ok()?;
    let k = idx.0.last()?.known()?;
    let rest = data.0.get(b + k..)?;
    Some(Shape([&idx.0[..idx.rank() - 1], rest].concat()))
}

/// Einsum's output: rank and dims from the equation, each label's dim merged over the
/// operands that hold it (numpy broadcasting: a 1 yields to the other size).
fn einsum(attrs: &[(String, AttrValue)], infos: &[Option<InputInfo>]) -> Option<TensorType> {
    let dtype = ty(infos, 0)?.dtype;
    let Some(AttrValue::String(eq)) = Attrs(attrs).get("equation") else { return None };
    let shapes: Vec<Option<&Shape>> = (0..infos.len()).map(|i| shape(infos, i)).collect();
    let ranks: Vec<Option<usize>> = shapes.iter().map(|s| s.map(Shape::rank)).collect();
    let spec = super::einsum::parse(&String::from_utf8_lossy(eq), &ranks).ok()?;
    let Some(output) = &spec.output else { return Some(TensorType { dtype, shape: None }) };
    let mut label_dims: Vec<Option<Dim>> = vec![None; spec.labels];
    for (labels, s) in spec.operands.iter().zip(&shapes) {
        let (Some(labels), Some(s)) = (labels, s) else { continue };
        for (&l, d) in labels.iter().zip(&s.0) {
            label_dims[l] = Some(match &label_dims[l] {
                None => d.clone(),
                Some(prev) => broadcast_shapes(&Shape(vec![prev.clone()]), &Shape(vec![d.clone()]))
                    .map_or(Dim::Unknown, |s| s.0[0].clone()),
            });
        }
    }
    let dims = output.iter().map(|&l| label_dims[l].clone().unwrap_or(Dim::Unknown)).collect();
    Some(TensorType::new(dtype, Shape(dims)))
}

/// A positive scalar integer input's value, when constant.
fn positive(infos: &[Option<InputInfo>], i: usize) -> Option<usize> {
    ints(infos, i).filter(|v| v.len() == 1).and_then(|v| usize::try_from(v[0]).ok()).filter(|&n| n > 0)
}

/// DFT's output (opset 20's inputs: dft_length 1, axis 2): the signal axis becomes the
/// transform's length (n / 2 + 1 bins one-sided), the last axis 2 (1 for a one-sided inverse).
fn dft(attrs: &[(String, AttrValue)], infos: &[Option<InputInfo>]) -> Option<Shape> {
    let s = shape(infos, 0)?;
    let r = s.rank();
    let axis = match info(infos, 2) {
        Some(_) => ints(infos, 2).filter(|v| v.len() == 1)?[0],
        None => -2,
    };
    let a = usize::try_from(if axis < 0 { axis + r as i64 } else { axis }).ok().filter(|&a| a + 1 < r)?;
    let (inverse, onesided) =
        (Attrs(attrs).int("inverse").unwrap_or(0) != 0, Attrs(attrs).int("onesided").unwrap_or(0) != 0);
    let n = match info(infos, 1) {
        Some(_) => positive(infos, 1).map(Dim::Known).unwrap_or(Dim::Unknown),
        None if inverse && onesided => {
            s.0[a].known().filter(|&m| m > 0).map_or(Dim::Unknown, |m| Dim::Known(2 * (m - 1)))
        }
        None => s.0[a].clone(),
    };
    let mut d = s.0.clone();
    d[a] = match (&n, inverse, onesided) {
        (Dim::Known(n), false, true) => Dim::Known(n / 2 + 1),
        (_, false, true) => Dim::Unknown,
        _ => n,
    };
    d[r - 1] = Dim::Known(if inverse && onesided { 1 } else { 2 });
    Some(Shape(d))
}

/// STFT's output [batch, frames, bins, 2]: frames from the signal length, frame_step and the
/// frame length (input 3, else the window's length). The signal is [batch, length, 1 or 2],
/// or [batch, length] (real, as onnxruntime accepts).
fn stft(attrs: &[(String, AttrValue)], infos: &[Option<InputInfo>]) -> Option<Shape> {
    let s = shape(infos, 0).filter(|s| matches!(s.rank(), 2 | 3))?;
    let frame = match info(infos, 3) {
        Some(_) => positive(infos, 3),
        None => match shape(infos, 2) {
            Some(w) => w.0.first().and_then(Dim::known),
            None => s.0[1].known(),
        },
    };
    let frames = match (s.0[1].known(), positive(infos, 1), frame) {
        (Some(len), Some(step), Some(f)) if f <= len => Dim::Known((len - f) / step + 1),
        _ => Dim::Unknown,
    };
    let onesided = Attrs(attrs).int("onesided").unwrap_or(1) != 0;
    let bins = frame.map_or(Dim::Unknown, |f| Dim::Known(if onesided { f / 2 + 1 } else { f }));
    Some(Shape(vec![s.0[0].clone(), frames, bins, Dim::Known(2)]))
}

fn split(attrs: &[(String, AttrValue)], infos: &[Option<InputInfo>], n_out: usize) -> Vec<Option<TensorType>> {
    let Some(t) = ty(infos, 0) else { return vec![] };
    let axis = Attrs(attrs).int("axis").unwrap_or(0);
    let sizes = ints(infos, 1).or_else(|| Attrs(attrs).ints("split").map(<[i64]>::to_vec));
    (0..n_out)
        .map(|k| {
            let shape = t.shape.as_ref().and_then(|s| {
                let a = norm_axis(axis, s.rank(), false).ok()?;
                let mut d = s.0.clone();
                d[a] = match (&sizes, &s.0[a]) {
                    (Some(z), _) => z.get(k).filter(|&&v| v >= 0).map_or(Dim::Unknown, |&v| Dim::Known(v as usize)),
                    // Equal parts (opset 18's num_outputs rounds the last one down).
                    (None, Dim::Known(n)) if n % n_out == 0 => Dim::Known(n / n_out),
                    (None, Dim::Known(n)) => {
                        let part = n.div_ceil(n_out);
                        Dim::Known(if k + 1 < n_out { part } else { n - part * (n_out - 1) })
                    }
                    _ => Dim::Unknown,
                };
                Some(Shape(d))
            });
            Some(TensorType { dtype: t.dtype, shape })
        })
        .collect()
}

/// LSTM / GRU / RNN outputs: Y [seq, dirs, batch, hidden] (layout 0) or [batch, seq, dirs,
/// hidden] (layout 1), Y_h and Y_c [dirs, batch, hidden] or [batch, dirs, hidden].
fn recurrent(attrs: &[(String, AttrValue)], infos: &[Option<InputInfo>], lstm: bool) -> Vec<Option<TensorType>> {
    let Some(t) = ty(infos, 0) else { return vec![] };
    let dirs = match Attrs(attrs).get("direction") {
        Some(AttrValue::String(s)) if s == b"bidirectional" => 2,
        _ => 1,
    };
    let hidden = Attrs(attrs).int("hidden_size").filter(|&h| h > 0).map_or(Dim::Unknown, |h| Dim::Known(h as usize));
    let batch_major = Attrs(attrs).int("layout").unwrap_or(0) != 0;
    recurrent_types(t, dirs, hidden, batch_major, lstm)
}

/// The outputs of a recurrent layer over input `x`: Y, Y_h and (LSTM) Y_c, in either layout.
pub(crate) fn recurrent_types(
    x: &TensorType,
    dirs: usize,
    hidden: Dim,
    batch_major: bool,
    lstm: bool,
) -> Vec<Option<TensorType>> {
    let s = x.shape.as_ref().filter(|s| s.rank() == 3);
    let (seq, batch) = match (s, batch_major) {
        (Some(s), false) => (s.0[0].clone(), s.0[1].clone()),
        (Some(s), true) => (s.0[1].clone(), s.0[0].clone()),
        _ => (Dim::Unknown, Dim::Unknown),
    };
    let d = Dim::Known(dirs);
    let (y, state) = if !batch_major {
        (vec![seq, d.clone(), batch.clone(), hidden.clone()], vec![d, batch, hidden])
    } else {
        (vec![batch.clone(), seq, d.clone(), hidden.clone()], vec![batch, d, hidden])
    };
    let mut v = vec![with_shape(x.dtype, Some(Shape(y))), with_shape(x.dtype, Some(Shape(state.clone())))];
    if lstm {
        v.push(with_shape(x.dtype, Some(Shape(state))));
    }
    v
}

/// A single-output host op computed from concrete inputs where inference folds it (small
/// integer shape arithmetic: ConstantOfShape, Range, Size, ...), so that the reference
/// executor runs a model's shape computations by the rules the planner folds them with.
pub fn fold_host(
    domain: &str,
    op_type: &str,
    attrs: &[(String, AttrValue)],
    inputs: &[Option<&Tensor>],
) -> Option<Tensor> {
    let types: Vec<Option<TensorType>> =
        inputs.iter().map(|t| t.map(|t| TensorType::new(t.dtype(), Shape::from_static(&t.shape)))).collect();
    let infos: Vec<Option<InputInfo>> = inputs
        .iter()
        .zip(&types)
        .map(|(t, ty)| t.map(|t| InputInfo { ty: ty.as_ref(), value: Some(t), dims: None, negative: None }))
        .collect();
    infer_host(domain, op_type, attrs, &infos, 1).value
}

/// Known element values of a small 1-D (or scalar) integer operand: constants, or dims where
/// known. A symbolic dim is unknown but never negative, which decides `Equal(shape, -1)`; an
/// unknown one may be anything (a `-1` placeholder among computed dims is one, unless
/// inference kept its value).
#[derive(Clone, Copy, PartialEq)]
enum Elem {
    Value(i64),
    NonNegative,
    Unknown,
}

fn elems(infos: &[Option<InputInfo>], i: usize) -> Option<Vec<Elem>> {
    let x = info(infos, i)?;
    if let Some(v) = x.value.filter(|t| t.rank() <= 1 && t.len() <= 64).and_then(Tensor::as_i64_vec) {
        return Some(v.into_iter().map(Elem::Value).collect());
    }
    let negative = |k: usize| x.negative.and_then(|n| n.get(k).copied().flatten());
    x.dims.map(|d| {
        d.iter()
            .enumerate()
            .map(|(k, d)| match d {
                Dim::Known(n) => Elem::Value(*n as i64),
                Dim::Sym(_) => Elem::NonNegative,
                Dim::Unknown => negative(k).map_or(Elem::Unknown, Elem::Value),
            })
            .collect()
    })
}

fn pair<A: Clone, B: Clone>(a: &[A], b: &[B]) -> Option<Vec<(A, B)>> {
    match (a.len(), b.len()) {
        (x, y) if x == y => Some(a.iter().cloned().zip(b.iter().cloned()).collect()),
        (1, _) => Some(b.iter().map(|y| (a[0].clone(), y.clone())).collect()),
        (_, 1) => Some(a.iter().map(|x| (x.clone(), b[0].clone())).collect()),
        _ => None,
    }
}

fn fold_compare(op_type: &str, infos: &[Option<InputInfo>]) -> Option<Tensor> {
    let (a, b) = (elems(infos, 0)?, elems(infos, 1)?);
    let rank = shape(infos, 0)?.rank().max(shape(infos, 1)?.rank());
    let v: Vec<bool> = pair(&a, &b)?
        .into_iter()
        .map(|p| match (op_type, p) {
            (_, (Elem::Value(x), Elem::Value(y))) => Some(match op_type {
                "Equal" => x == y,
                "Less" => x < y,
                "Greater" => x > y,
                "LessOrEqual" => x <= y,
                _ => x >= y,
            }),
            ("Equal", (Elem::NonNegative, Elem::Value(y)) | (Elem::Value(y), Elem::NonNegative)) if y < 0 => {
                Some(false)
            }
            _ => None,
        })
        .collect::<Option<_>>()?;
    let shape = if rank == 0 { vec![] } else { vec![v.len()] };
    Tensor::new(shape, TensorData::Bool(v)).ok()
}

fn fold_where(infos: &[Option<InputInfo>]) -> (Option<Tensor>, Option<Vec<Dim>>) {
    let Some(cond) = info(infos, 0).and_then(|x| x.value).filter(|t| t.rank() <= 1) else { return (None, None) };
    let TensorData::Bool(c) = &cond.data else { return (None, None) };
    let (Some(x), Some(y)) = (dims(infos, 1), dims(infos, 2)) else { return (None, None) };
    let Some(xy) = pair(&x, &y) else { return (None, None) };
    let Some(all) = pair(c, &xy) else { return (None, None) };
    let d: Vec<Dim> = all.into_iter().map(|(c, (x, y))| if c { x } else { y }).collect();
    let value = d
        .iter()
        .map(|d| d.known().map(|n| n as i64))
        .collect::<Option<Vec<i64>>>()
        .filter(|_| ty(infos, 1).is_some_and(|t| t.dtype == DType::I64))
        .map(|v| Tensor::from_i64(vec![v.len()], v));
    (value, Some(d))
}

fn fold_fill(d: &[Dim], fill: &Tensor) -> Option<Tensor> {
    let shape: Vec<usize> = d.iter().map(Dim::known).collect::<Option<_>>()?;
    let n: usize = shape.iter().product();
    if n > 64 || fill.len() != 1 {
        return None;
    }
    let v = fill.as_i64_vec()?;
    Tensor::from_i64_as(fill.dtype(), shape, &vec![v[0]; n])
}
