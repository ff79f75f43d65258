//! The layout pass: conv kernels run NHWC, with one transpose where data enters a region of
//! consecutive conv kernels and one where it leaves; weights converted once.

mod common;

use bolt::ir::{ConvLayout, DType, Graph, Op};
use bolt::plan::layout::Direction;
use bolt::plan::{plan_with, Plan, PlanOptions};
use common::nets::{inputs, Net};

fn planned(g: &Graph) -> Plan {
    let plan = plan_with(g, &PlanOptions { pad: false, b2b: false, ..Default::default() }).unwrap();
    // Whatever the layout, the plan computes what the model does.
    let x = inputs(g);
    let (want, got) = (bolt::reference::run(g, &x).unwrap(), bolt::reference::run(&plan.graph, &x).unwrap());
    for o in &g.outputs {
        let c = bolt::cases::compare(o, &got[o], &want[o], bolt::cases::Tolerance { rtol: 1e-4, atol: 1e-5 });
        assert!(c.failure.is_none(), "{}", c.failure.unwrap());
    }
    plan
}

fn transposes(p: &Plan) -> usize {
    p.graph.nodes.iter().filter(|n| matches!(n.op, Op::Transpose { .. })).count()
}

fn max_pool_2x2() -> Op {
    Op::MaxPool {
        window: bolt::ir::Window {
            kernel_shape: Some(vec![2, 2]),
            strides: Some(vec![2, 2]),
            pads: None,
            dilations: None,
            auto_pad: bolt::ir::AutoPad::NotSet,
        },
        ceil_mode: false,
        storage_order: 0,
    }
}

/// A pool between convs runs channels-last inside the region (a pool kernel), so the region
/// is not split: one entry, one exit.
#[test]
fn a_pool_between_convs_runs_channels_last_inside_the_region() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 16, 16]);
    let y = n.conv(&x, 8, 16, 3, 1, 1);
    let y = n.relu(&y);
    let y = n.op("pool", max_pool_2x2(), &[&y]);
    let y = n.conv(&y, 16, 32, 1, 1, 0);
    let y = n.op("gap", Op::GlobalAveragePool, &[&y]);
    let g = n.finish(&[&y]);
    let p = planned(&g);
    let dirs: Vec<Direction> = p.layout.iter().map(|t| t.direction).collect();
    assert_eq!(dirs, [Direction::NchwToNhwc, Direction::NhwcToNchw]);
    let pools: Vec<_> = p.graph.nodes.iter().filter(|n| matches!(n.op, Op::ChannelsLast(_))).collect();
    assert_eq!(pools.len(), 2, "the max pool and the global average pool");
    for node in pools {
        let d = p.glue.iter().find(|d| d.node == node.name).unwrap();
        assert!(d.kernel.as_deref().is_some_and(|k| k.contains("_pool_nhwc_")), "{d:?}");
    }
}

/// conv -> relu -> conv -> relu -> mean over `axes` -> 1x1 conv.
/// x -> conv -> relu -> conv -> relu -> `middle` (giving `channels` channels) -> conv.
fn convs_around(middle: impl FnOnce(&mut Net, &str) -> String, channels: usize) -> Graph {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 16, 16]);
    let y = n.conv(&x, 8, 16, 3, 1, 1);
    let y = n.relu(&y);
    let y = n.conv(&y, 16, 16, 3, 1, 1);
    let y = n.relu(&y);
    let y = middle(&mut n, &y);
    let y = n.conv(&y, channels, 32, 1, 1, 0);
    n.finish(&[&y])
}

/// A keepdims mean over `axes`.
fn mean(axes: Vec<i64>) -> impl FnOnce(&mut Net, &str) -> String {
    move |n: &mut Net, y: &str| {
        let op = Op::Reduce {
            kind: bolt::ir::ReduceKind::Mean,
            axes: Some(axes),
            keepdims: true,
            noop_with_empty_axes: false,
        };
        n.op("mean", op, &[y])
    }
}

#[test]
fn consecutive_convs_share_one_region_and_a_host_op_splits_regions() {
    // A mean over the channels moves its axis last (a stitched row reduction): in NHWC that
    // is no move at all, so x -> [conv, conv, mean, conv] -> out is one NHWC stretch.
    let p = planned(&convs_around(mean(vec![1]), 1));
    let dirs: Vec<Direction> = p.layout.iter().map(|t| t.direction).collect();
    assert_eq!(dirs, [Direction::NchwToNhwc, Direction::NhwcToNchw], "{:?}", p.layout);
    assert_eq!(transposes(&p), 2);
    // A host op (an Expand, a broadcast copy Bolt leaves to the host) runs in NCHW:
    // x -> [conv, conv] -> expand -> [conv] -> out, an entry and an exit per region.
    let g = convs_around(
        |n: &mut Net, y: &str| {
            let shape = n.b.initializer("expand_shape", bolt::ir::Tensor::from_i64(vec![1], vec![1]));
            n.op("expand", Op::Expand, &[y, &shape])
        },
        16,
    );
    let p = planned(&g);
    let dirs: Vec<(usize, Direction)> = p.layout.iter().map(|t| (t.region, t.direction)).collect();
    assert_eq!(
        dirs,
        vec![
            (0, Direction::NchwToNhwc),
            (0, Direction::NhwcToNchw),
            (1, Direction::NchwToNhwc),
            (1, Direction::NhwcToNchw)
        ]
    );
    assert_eq!(transposes(&p), 4);
    // Every conv kernel is NHWC with an OHWI weight.
    for node in &p.graph.nodes {
        if let Op::Fused(k) = &node.op {
            assert_eq!(k.layout, ConvLayout::Nhwc);
            let name = node.input(1).unwrap();
            let (w, oihw) = (&p.graph.initializers[name], &g.initializers[name.trim_end_matches(".ohwi")]);
            assert_eq!(w.shape, [oihw.shape[0], oihw.shape[2], oihw.shape[3], oihw.shape[1]]);
        }
    }
}

#[test]
fn a_residual_block_stays_nhwc_and_its_input_is_transposed_once() {
    // x -> conv -> relu -> conv (+ x) -> relu: x feeds a conv and the residual add.
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[1, 16, 8, 8]);
    let y = n.conv(&x, 16, 16, 3, 1, 1);
    let y = n.relu(&y);
    let y = n.conv(&y, 16, 16, 3, 1, 1);
    let y = n.op("add", Op::Binary(bolt::ir::Binary::Add), &[&y, &x]);
    let y = n.relu(&y);
    let p = planned(&n.finish(&[&y]));
    assert_eq!(p.partitioning.partitions.len(), 2);
    assert_eq!(p.layout.len(), 2, "{:?}", p.layout);
    assert_eq!(transposes(&p), 2);
}

#[test]
fn a_conv_output_read_by_the_host_and_a_conv_is_written_once_in_nhwc() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[1, 8, 8, 8]);
    let y = n.conv(&x, 8, 8, 3, 1, 1);
    let z = n.conv(&y, 8, 8, 1, 1, 0);
    let p = planned(&n.finish(&[&y, &z]));
    // y is a graph output (exit transpose); the second conv still reads the NHWC y.
    assert_eq!(transposes(&p), 3, "entry x, exit y, exit z");
    let second = p.graph.nodes.iter().find(|n| n.name == p.partitioning.partitions[1].anchor).unwrap();
    assert!(second.input(0).unwrap().ends_with(".nhwc"));
}

#[test]
fn gemm_only_models_get_no_transforms() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[4, 16]);
    let y = n.linear(&x, 16, 16);
    let p = planned(&n.finish(&[&y]));
    assert!(p.layout.is_empty());
    assert_eq!(transposes(&p), 0);
}

#[test]
fn gemm_weights_are_stored_k_major_once() {
    // x[5, 70] @ W[70, 33]: the planner stores W^T ([33, 70]) and marks the kernel; the
    // transpose is exact (odd sizes cross the 32-wide blocks of the parallel transpose).
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[5, 70]);
    let y = n.linear(&x, 70, 33);
    let g = n.finish(&[&y]);
    let p = planned(&g);
    let node = p.graph.nodes.iter().find(|n| matches!(n.op, Op::Fused(_))).unwrap();
    let Op::Fused(k) = &node.op else { unreachable!() };
    assert!(k.weight_transposed);
    let (wt, w) = (
        &p.graph.initializers[node.input(1).unwrap()],
        &g.initializers[node.input(1).unwrap().trim_end_matches(".kmajor")],
    );
    assert_eq!(wt.shape, [33, 70]);
    let (a, b) = (w.to_f32_vec(), wt.to_f32_vec());
    for r in 0..70 {
        for c in 0..33 {
            assert_eq!(a[r * 33 + c], b[c * 70 + r]);
        }
    }
}

#[test]
fn a_model_that_keeps_activations_nhwc_around_its_convs_needs_no_transpose() {
    // TensorFlow exports (and TVM's NHWC convs handed over as ONNX) wrap NCHW Convs in
    // NHWC<->NCHW transposes; the region's own boundary transposes cancel against them.
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 12, 12, 8]);
    let y = n.op("to_nchw", Op::Transpose { perm: Some(vec![0, 3, 1, 2]) }, &[&x]);
    let y = n.conv(&y, 8, 16, 3, 1, 1);
    let y = n.relu(&y);
    let y = n.conv(&y, 16, 16, 1, 1, 0);
    let y = n.op("to_nhwc", Op::Transpose { perm: Some(vec![0, 2, 3, 1]) }, &[&y]);
    let g = n.finish(&[&y]);
    let p = planned(&g);
    assert_eq!(transposes(&p), 0, "{:?}", p.graph.nodes.iter().map(|n| n.op.op_type()).collect::<Vec<_>>());
    assert!(p.layout.is_empty(), "{:?}", p.layout);
    assert_eq!(p.graph.outputs, g.outputs);
}

/// Transposes in a row compose into one (canonical pass), which then meets the conv region's
/// NCHW -> NHWC entry: [0, 2, 3, 1] twice is [0, 3, 1, 2], which that entry undoes, so the
/// conv reads `x` as it is stored and only the region's exit is left. The planned graph equals
/// the model on the reference executor (a check of the rewriting).
#[test]
fn transposes_compose_and_cancel_with_the_region_entry() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 12, 12]);
    let y = n.op("t1", Op::Transpose { perm: Some(vec![0, 2, 3, 1]) }, &[&x]);
    let y = n.op("t2", Op::Transpose { perm: Some(vec![0, 2, 3, 1]) }, &[&y]);
    let y = n.conv(&y, 12, 16, 3, 1, 1);
    let g = n.finish(&[&y]);
    let p = planned(&g);
    assert_eq!(transposes(&p), 1, "{:?}", p.graph.nodes.iter().map(|n| n.op.op_type()).collect::<Vec<_>>());
    let feeds = common::nets::inputs(&g);
    let (want, got) = (bolt::reference::run(&g, &feeds).unwrap(), bolt::reference::run(&p.graph, &feeds).unwrap());
    let o = &g.outputs[0];
    let c = bolt::cases::compare(o, &got[o], &want[o], bolt::cases::Tolerance { rtol: 1e-5, atol: 1e-5 });
    assert!(c.failure.is_none(), "{}", c.failure.unwrap());
}

/// A YOLOX-style detector block: Focus (four strided Slices + Concat), conv + SiLU written as
/// Sigmoid * Mul, a CSP split (Slice on channels) and re-Concat, SPP (MaxPool + Concat), a
/// nearest Resize and a Concat with an earlier feature map. Element-wise ops, Concat, Slice
/// and Resize run on the NHWC tensors, and the MaxPool as a channels-last pool, so transforms
/// remain only where data enters (the Focus concat) and at the graph output.
#[test]
fn layout_regions_extend_through_concat_slice_resize_and_elementwise_ops() {
    use bolt::ir::{AutoPad, Binary, CoordTransform, NearestMode, ResizeAttrs, ResizeMode, Tensor, Unary, Window};
    let mut n = Net::new(DType::F32);
    let i64s = |n: &mut Net, name: &str, v: &[i64]| n.b.initializer(name, Tensor::from_i64(vec![v.len()], v.to_vec()));
    let count = std::cell::Cell::new(0);
    let slice = |n: &mut Net, x: &str, starts: &[i64], ends: &[i64], axes: &[i64], steps: &[i64]| {
        let k = count.replace(count.get() + 1);
        let (s, e) = (i64s(n, &format!("s{k}"), starts), i64s(n, &format!("e{k}"), ends));
        let (a, st) = (i64s(n, &format!("a{k}"), axes), i64s(n, &format!("st{k}"), steps));
        n.op("slice", Op::Slice, &[x, &s, &e, &a, &st])
    };
    let silu = |n: &mut Net, x: &str| {
        let s = n.op("sigmoid", Op::Unary(Unary::Sigmoid), &[x]);
        n.op("mul", Op::Binary(Binary::Mul), &[x, &s])
    };
    let x = n.input("x", &[1, 3, 32, 32]);
    // Focus: space-to-depth by strided slices on H and W.
    let parts: Vec<String> = [(0, 0), (1, 0), (0, 1), (1, 1)]
        .iter()
        .map(|&(h, w)| slice(&mut n, &x, &[h, w], &[32, 32], &[2, 3], &[2, 2]))
        .collect();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    let y = n.op("focus", Op::Concat { axis: 1 }, &refs);
    let y = n.conv(&y, 12, 16, 3, 1, 1);
    let y = silu(&mut n, &y);
    // CSP: split the channels, convolve one half, concatenate back (negative axis).
    let a = slice(&mut n, &y, &[0], &[8], &[1], &[1]);
    let b = slice(&mut n, &y, &[8], &[16], &[-3], &[1]);
    let a = n.conv(&a, 8, 8, 3, 1, 1);
    let a = silu(&mut n, &a);
    let y = n.op("csp", Op::Concat { axis: -3 }, &[&a, &b]);
    let c3 = n.conv(&y, 16, 16, 1, 1, 0);
    let c3 = silu(&mut n, &c3);
    // Down, SPP, up.
    let d = n.conv(&c3, 16, 16, 3, 2, 1);
    let d = silu(&mut n, &d);
    let window = Window {
        kernel_shape: Some(vec![5, 5]),
        strides: Some(vec![1, 1]),
        pads: Some(vec![2; 4]),
        dilations: None,
        auto_pad: AutoPad::NotSet,
    };
    let p = n.op("spp", Op::MaxPool { window, ceil_mode: false, storage_order: 0 }, &[&d]);
    let d = n.op("spp_cat", Op::Concat { axis: 1 }, &[&d, &p]);
    let d = n.conv(&d, 32, 16, 1, 1, 0);
    let d = silu(&mut n, &d);
    let scales = n.b.initializer("scales", Tensor::from_f32(vec![4], vec![1.0, 1.0, 2.0, 2.0]));
    let attrs = ResizeAttrs {
        mode: ResizeMode::Nearest,
        coord: CoordTransform::Asymmetric,
        nearest: NearestMode::Floor,
        ..Default::default()
    };
    let up = n.op("up", Op::Resize(attrs), &[&d, "", &scales]);
    let y = n.op("fpn", Op::Concat { axis: 1 }, &[&up, &c3]);
    // Head: scale, bias, sigmoid on the host side of the last conv.
    let y = n.conv(&y, 32, 8, 1, 1, 0);
    let half = n.b.initializer("half", Tensor::scalar_f32(0.5));
    let y = n.op("head", Op::Binary(Binary::Mul), &[&y, &half]);
    let y = n.op("sig", Op::Unary(Unary::Sigmoid), &[&y]);
    let g = n.finish(&[&y]);
    let p = planned(&g);
    let dirs: Vec<Direction> = p.layout.iter().map(|t| t.direction).collect();
    println!("{} transforms: {:?}", p.layout.len(), p.layout);
    assert_eq!(dirs, [Direction::NchwToNhwc, Direction::NhwcToNchw], "{:#?}", p.layout);
    assert_eq!(transposes(&p), 2);
    assert!(p.graph.nodes.iter().any(|n| matches!(&n.op, Op::ChannelsLast(op) if matches!(**op, Op::MaxPool { .. }))));
}

/// A ConvTranspose whose 2x2 windows tile its output (stride 2, no padding: a decoder's
/// upsampling) runs as a 1x1 conv kernel and a channels-last DepthToSpace inside the NHWC
/// region; with padding (its windows cropped at the border) it is a conv kernel over the
/// input with zeros spread between its elements (see tests/plan.rs).
#[test]
fn a_tiling_conv_transpose_is_a_conv_and_a_depth_to_space_inside_the_region() {
    use bolt::ir::{AutoPad, Window};
    let transpose_conv = |n: &mut Net, x: &str, pads: usize, bias: bool| {
        let w = n.random("wt", &[16, 8, 2, 2], 0.3);
        let b = n.random("bt", &[8], 0.1);
        let op = Op::ConvTranspose {
            window: Window {
                kernel_shape: Some(vec![2, 2]),
                strides: Some(vec![2, 2]),
                pads: Some(vec![pads; 4]),
                dilations: None,
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
            output_padding: None,
            output_shape: None,
        };
        let inputs: Vec<&str> = if bias { vec![x, &w, &b] } else { vec![x, &w] };
        n.op("deconv", op, &inputs)
    };
    for (pads, bias) in [(0, true), (0, false), (1, true)] {
        let mut n = Net::new(DType::F32);
        let x = n.input("x", &[2, 8, 5, 6]);
        let y = n.conv(&x, 8, 16, 3, 1, 1);
        let y = n.relu(&y);
        let y = transpose_conv(&mut n, &y, pads, bias);
        let y = n.relu(&y);
        let y = n.conv(&y, 8, 4, 1, 1, 0);
        let g = n.finish(&[&y]);
        let p = planned(&g);
        let has = |f: &dyn Fn(&Op) -> bool| p.graph.nodes.iter().any(|n| f(&n.op));
        let d2s =
            has(&|op| matches!(op, Op::ChannelsLast(i) if matches!(**i, Op::DepthToSpace { crd: true, blocksize: 2 })));
        let deconv = has(&|op| matches!(op, Op::ConvTranspose { .. }));
        if pads == 0 {
            assert!(
                d2s && !deconv,
                "bias {bias}: {:?}",
                p.graph.nodes.iter().map(|n| n.op.op_type()).collect::<Vec<_>>()
            );
            assert_eq!(p.partitioning.partitions.len(), 3);
            assert_eq!(p.layout.len(), 2, "one NHWC region: {:?}", p.layout);
        } else {
            assert!(!deconv && !d2s);
            assert_eq!(p.partitioning.partitions.len(), 3);
        }
    }
}

/// 1-D convs (audio encoders, vocoders, TCNs) run as 2-D conv kernels over an H axis of one:
/// the layout pass carries their NWC activations through the views that add and drop that
/// axis and through the element-wise ops between them, so a stack of 1-D conv blocks is one
/// NHWC region, and a model that transposes the conv output to [N, L, C] itself (Whisper,
/// wav2vec 2.0) needs no exit transform at all. `planned` checks the rewriting only;
/// tests/python/test_fuzz_graphs.py::test_planner_rewrites_match_ort[layout_views] runs these
/// forms (and Conv-TasNet's block below) against onnxruntime.
#[test]
fn one_d_conv_blocks_share_one_region_through_their_squeezes() {
    use bolt::ir::{Binary, Unary};
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 64]);
    let h = n.conv1d(&x, 8, 16, 7, 1, 3);
    // HiFi-GAN's residual blocks: x + conv(lrelu(conv(lrelu(x)))), at two dilations.
    let mut h = h;
    for d in [1, 3] {
        let a = n.op("lrelu", Op::Unary(Unary::LeakyRelu { alpha: 0.1 }), &[&h]);
        let a = n.conv1d(&a, 16, 16, 3, d, d);
        let a = n.op("lrelu", Op::Unary(Unary::LeakyRelu { alpha: 0.1 }), &[&a]);
        let a = n.conv1d(&a, 16, 16, 3, 1, 1);
        h = n.op("res", Op::Binary(Binary::Add), &[&h, &a]);
    }
    let y = n.op("gelu_in", Op::Unary(Unary::Tanh), &[&h]);
    let y = n.op("to_nlc", Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[&y]);
    let g = n.finish(&[&y]);
    let p = planned(&g);
    let dirs: Vec<Direction> = p.layout.iter().map(|t| t.direction).collect();
    assert_eq!(dirs, [Direction::NchwToNhwc], "{:#?}", p.layout);
    assert_eq!(transposes(&p), 1, "{:#?}", p.graph.nodes);
}

/// Views that only drop or insert axes of one carry the NHWC layout too: a classifier's
/// global pool flattened for its Gemm needs no exit transform (NHWC [N, 1, 1, C] is [N, C]),
/// and a CRNN's conv features squeezed and transposed to [W, N, C] for its recurrent layers
/// take one transpose (the exit composed with the model's own).
#[test]
fn unit_axis_views_carry_the_layout_to_gemms_and_sequence_models() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 6, 6]);
    let y = n.conv(&x, 8, 16, 3, 1, 1);
    let y = n.relu(&y);
    let y = n.op("gap", Op::GlobalAveragePool, &[&y]);
    let y = n.op("flatten", Op::Flatten { axis: 1 }, &[&y]);
    let y = n.linear(&y, 16, 10);
    let p = planned(&n.finish(&[&y]));
    let dirs: Vec<Direction> = p.layout.iter().map(|t| t.direction).collect();
    assert_eq!(dirs, [Direction::NchwToNhwc], "{:#?}", p.layout);
    assert_eq!(transposes(&p), 1);

    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 4, 12]);
    let y = n.conv(&x, 8, 16, 3, 1, 1);
    let axis = n.b.initializer("h", bolt::ir::Tensor::from_i64(vec![1], vec![2]));
    let y = n.op("hpool", max_pool_2x2(), &[&y]);
    let y = n.conv(&y, 16, 16, 3, 1, 1);
    let y = n.op("hpool", max_pool_2x2(), &[&y]);
    let y = n.op("squeeze", Op::Squeeze, &[&y, &axis]);
    let y = n.op("to_wnc", Op::Transpose { perm: Some(vec![2, 0, 1]) }, &[&y]);
    let y = n.linear(&y, 16, 10);
    let p = planned(&n.finish(&[&y]));
    let dirs: Vec<Direction> = p.layout.iter().map(|t| t.direction).collect();
    assert_eq!(dirs, [Direction::NchwToNhwc], "{:#?}", p.layout);
    // The entry, and the model's transpose (now from [N, W, C], a stitched copy).
    let copies = p.graph.nodes.iter().filter(|n| matches!(n.op, Op::Transpose { .. } | Op::Stitched(_)));
    assert_eq!(copies.count(), 2, "{:#?}", p.graph.nodes);
}

/// Conv-TasNet's blocks: 1-D convs with a global layer norm over [C, T] between them (its
/// mean and variance one value per sample) and a per-channel scale applied as [N, T, C]
/// between the model's own transposes. The means read the channels-last tensor merged into
/// one row (the same elements in another order), the per-sample statistics broadcast in any
/// layout, and the model's transposes move with the exit until they cancel: one region, one
/// entry, one exit at the output.
#[test]
fn global_norms_and_the_models_transposes_between_1d_convs_stay_channels_last() {
    use bolt::ir::{Binary, ReduceKind, Tensor, Unary};
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 30]);
    let mut h = n.conv1d(&x, 8, 16, 3, 1, 1);
    let mean = |n: &mut Net, t: &str| {
        let op =
            Op::Reduce { kind: ReduceKind::Mean, axes: Some(vec![1, 2]), keepdims: true, noop_with_empty_axes: false };
        n.op("mean", op, &[t])
    };
    let gamma = n.random("gamma", &[16], 1.0);
    let beta = n.random("beta", &[16], 0.5);
    let eps = n.b.initializer("eps", Tensor::scalar_f32(1e-5));
    for _ in 0..2 {
        let slope = n.random("slope", &[16, 1], 0.3);
        let a = n.op("prelu", Op::Binary(Binary::PRelu), &[&h, &slope]);
        let m = mean(&mut n, &a);
        let c = n.op("center", Op::Binary(Binary::Sub), &[&a, &m]);
        let sq = n.op("square", Op::Binary(Binary::Mul), &[&c, &c]);
        let var = mean(&mut n, &sq);
        let var = n.op("eps", Op::Binary(Binary::Add), &[&var, &eps]);
        let sd = n.op("sqrt", Op::Unary(Unary::Sqrt), &[&var]);
        let y = n.op("norm", Op::Binary(Binary::Div), &[&c, &sd]);
        let y = n.op("to_ntc", Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[&y]);
        let y = n.op("scale", Op::Binary(Binary::Mul), &[&gamma, &y]);
        let y = n.op("shift", Op::Binary(Binary::Add), &[&y, &beta]);
        let y = n.op("to_nct", Op::Transpose { perm: Some(vec![0, 2, 1]) }, &[&y]);
        h = n.conv1d(&y, 16, 16, 3, 2, 2);
    }
    let p = planned(&n.finish(&[&h]));
    let dirs: Vec<Direction> = p.layout.iter().map(|t| t.direction).collect();
    assert_eq!(dirs, [Direction::NchwToNhwc, Direction::NhwcToNchw], "{:#?}", p.layout);
    // The entry; the exit at the output is stitched into the last element-wise kernel.
    assert_eq!(transposes(&p), 1, "{:#?}", p.graph.nodes);
}
