//! Recurrent layers (RNN, GRU, LSTM) with constant weights are planned as one GEMM for every
//! step's input projection (both directions at once) and a `RecurrentScan` over the
//! projections. The planned graph must equal the layer on the reference executor for every
//! cell, direction, layout and optional input; this checks the rewriting (the reference's
//! recurrence itself is checked against the ONNX conformance cases and, on the corpus's LSTM
//! and GRU models, against onnxruntime).

mod common;

use bolt::ir::builder::GraphBuilder;
use bolt::ir::{Cell, DType, Graph, Op, Recurrent, RnnDirection, Shape, Tensor};
use std::collections::HashMap;

struct Case {
    cell: Cell,
    direction: RnnDirection,
    batch_major: bool,
    /// sequence_lens, initial states, peepholes, bias, clip.
    extras: bool,
}

const SEQ: usize = 5;
const BATCH: usize = 3;
const INPUT: usize = 4;
const HIDDEN: usize = 6;

fn layer(c: &Case) -> (Graph, HashMap<String, Tensor>) {
    let dirs = c.direction.count();
    let rows = c.cell.gates() * HIDDEN;
    let lstm = matches!(c.cell, Cell::Lstm { .. });
    let mut b = GraphBuilder::new("recurrent");
    let xs = if c.batch_major { [BATCH, SEQ, INPUT] } else { [SEQ, BATCH, INPUT] };
    let x = b.input("x", DType::F32, Shape::from_static(&xs));
    let small = |shape: &[usize], seed: u64| {
        let t = common::random_tensor(shape, seed);
        Tensor::from_f32(shape.to_vec(), t.to_f32_vec().iter().map(|v| v * 0.5).collect())
    };
    let w = b.initializer("w", small(&[dirs, rows, INPUT], 1));
    let r = b.initializer("r", small(&[dirs, rows, HIDDEN], 2));
    let state = if c.batch_major { [BATCH, dirs, HIDDEN] } else { [dirs, BATCH, HIDDEN] };
    let mut inputs: Vec<String> = vec![x.clone(), w, r];
    let mut feeds = HashMap::from([(x, common::random_tensor(&xs, 3))]);
    if c.extras {
        inputs.push(b.initializer("b", small(&[dirs, 2 * rows], 4)));
        inputs.push(b.initializer("lens", Tensor::from_i64_as(DType::I32, vec![BATCH], &[5, 2, 4]).unwrap()));
        let h0 = b.input("h0", DType::F32, Shape::from_static(&state));
        feeds.insert(h0.clone(), common::random_tensor(&state, 5));
        inputs.push(h0);
        if lstm {
            let c0 = b.input("c0", DType::F32, Shape::from_static(&state));
            feeds.insert(c0.clone(), common::random_tensor(&state, 6));
            inputs.push(c0);
            inputs.push(b.initializer("p", small(&[dirs, 3 * HIDDEN], 7)));
        }
    }
    let activations = c.cell.default_activations().repeat(dirs);
    let op = Op::Recurrent(Recurrent {
        cell: c.cell,
        direction: c.direction,
        hidden_size: Some(HIDDEN),
        activations,
        clip: c.extras.then_some(1.5),
        batch_major: c.batch_major,
    });
    let refs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let outs = b.node_multi("layer", op, &refs, if lstm { 3 } else { 2 });
    for o in &outs {
        b.output(o);
    }
    (b.finish().unwrap(), feeds)
}

#[test]
fn recurrent_layers_plan_to_a_projection_gemm_and_a_scan_that_equal_them() {
    let cells = [
        Cell::Rnn,
        Cell::Gru { linear_before_reset: false },
        Cell::Gru { linear_before_reset: true },
        Cell::Lstm { input_forget: false },
        Cell::Lstm { input_forget: true },
    ];
    let mut n = 0;
    for cell in cells {
        for direction in [RnnDirection::Forward, RnnDirection::Reverse, RnnDirection::Bidirectional] {
            for (batch_major, extras) in [(false, false), (true, true), (false, true)] {
                let case = Case { cell, direction, batch_major, extras };
                let (g, feeds) = layer(&case);
                let plan = bolt::plan::plan(&g).unwrap();
                let ops: Vec<&str> = plan.graph.nodes.iter().map(|n| n.op.op_type()).collect();
                assert!(ops.contains(&"BoltRecurrentScan") && !ops.contains(&"LSTM"), "{ops:?}");
                assert_eq!(plan.partitioning.partitions.len(), 1, "one projection GEMM: {ops:?}");
                let want = bolt::reference::run(&g, &feeds).unwrap();
                let got = bolt::reference::run(&plan.graph, &feeds).unwrap();
                for o in &g.outputs {
                    for (a, b) in want[o].to_f32_vec().iter().zip(got[o].to_f32_vec()) {
                        assert!(
                            (a - b).abs() <= 1e-5,
                            "{cell:?} {direction:?} major {batch_major} extras {extras} {o}: {a} vs {b}"
                        );
                    }
                }
                n += 1;
            }
        }
    }
    assert_eq!(n, 45);
}
