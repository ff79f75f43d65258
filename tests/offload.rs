//! What a host hands to Bolt (`plan::offload`): connected device work as one fused node each,
//! host ops splitting groups, and groups that would feed themselves split into partitions.

mod common;

use bolt::ir::{Binary, DType, Graph, Op};
use bolt::plan::offload::{offload, subgraph, Group};
use common::nets::{inputs, Net};

/// `x` resized by 1 with cubic interpolation: an op Bolt leaves to the host (the reference
/// computes it; resize kernels are nearest or linear).
fn host_copy(n: &mut Net, x: &str) -> String {
    let scales = n.b.initializer(&format!("{x}.scales"), bolt::ir::Tensor::from_f32(vec![4], vec![1.0; 4]));
    let attrs = bolt::ir::ResizeAttrs { mode: bolt::ir::ResizeMode::Cubic, ..Default::default() };
    n.op("cubic", Op::Resize(attrs), &[x, "", &scales])
}

fn any_partition(_: &bolt::partition::Partition) -> Result<(), String> {
    Ok(())
}

/// Every group's subgraph, planned on its own as the host's fused node will be and run on the
/// reference executor, gives the model's values at its outputs (inputs and constants carried
/// over; a check of the grouping and the rewriting, not of any kernel).
fn groups_compute_the_model(g: &Graph, groups: &[Group]) {
    let x = inputs(g);
    // Every value of the model, not just its outputs.
    let mut all = g.clone();
    all.outputs = g.nodes.iter().flat_map(|n| n.outputs.iter().filter(|o| !o.is_empty()).cloned()).collect();
    let mut want = bolt::reference::run(&all, &x).unwrap();
    want.extend(x);
    for group in groups {
        let sub = subgraph(g, &group.nodes);
        let planned = bolt::plan::plan(&sub).unwrap().graph;
        let feeds = sub.inputs.iter().map(|i| (i.clone(), want[i].clone())).collect();
        let got = bolt::reference::run(&planned, &feeds).unwrap();
        assert!(!sub.outputs.is_empty());
        for o in &sub.outputs {
            let c = bolt::cases::compare(o, &got[o], &want[o], bolt::cases::Tolerance { rtol: 1e-4, atol: 1e-5 });
            assert!(c.failure.is_none(), "{}", c.failure.unwrap());
        }
    }
}

#[test]
fn a_cnn_with_pools_and_a_flatten_is_one_group() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 3, 16, 16]);
    let y = n.conv(&x, 3, 8, 3, 1, 1);
    let y = n.relu(&y);
    let y = n.conv(&y, 8, 16, 3, 2, 1);
    let y = n.relu(&y);
    let y = n.op("gap", Op::GlobalAveragePool, &[&y]);
    let y = n.op("flatten", Op::Flatten { axis: 1 }, &[&y]);
    let y = n.linear(&y, 16, 10);
    let g = n.finish(&[&y]);
    let o = offload(&g, &any_partition);
    assert_eq!(o.groups.len(), 1, "{:?}", o.notes);
    assert_eq!(o.groups[0].nodes.len(), g.nodes.len(), "every node: {:?}", o.groups[0].nodes);
    assert_eq!(o.groups[0].anchors.len(), 3);
    groups_compute_the_model(&g, &o.groups);
}

#[test]
fn a_host_op_splits_the_groups_and_an_unclaimable_partition_stays_with_the_host() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 8, 8, 8]);
    let y = n.conv(&x, 8, 8, 3, 1, 1);
    let y = n.relu(&y);
    let y = host_copy(&mut n, &y);
    let y = n.conv(&y, 8, 8, 1, 1, 0);
    let y = n.relu(&y);
    let g = n.finish(&[&y]);
    let o = offload(&g, &any_partition);
    assert_eq!(o.groups.len(), 2, "{:?}", o.groups);
    assert!(o.groups.iter().all(|gr| !gr.nodes.iter().any(|n| n.starts_with("cubic"))));
    groups_compute_the_model(&g, &o.groups);
    // The host refuses the second partition: one group left, and why.
    let second = o.groups[1].anchors[0].clone();
    let refuse = |p: &bolt::partition::Partition| if p.anchor == second { Err("refused".into()) } else { Ok(()) };
    let o = offload(&g, &refuse);
    assert_eq!(o.groups.len(), 1);
    assert!(o.notes.iter().any(|n| n.contains(&second) && n.contains("refused")), "{:?}", o.notes);
}

#[test]
fn connected_work_with_a_host_op_between_its_parts_is_cut_into_two_groups() {
    // a = relu(conv(x)); b = conv(cubic(a)) + a: the second conv reads `a` directly (its
    // residual) and through the host's resize, so {conv1, conv2} as one fused node would wait on
    // the resize, which waits on it. The cut goes where the resize lies between them.
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[1, 8, 8, 8]);
    let a = n.conv(&x, 8, 8, 3, 1, 1);
    let a = n.relu(&a);
    let s = host_copy(&mut n, &a);
    let b = n.conv(&s, 8, 8, 1, 1, 0);
    let y = n.op("add", Op::Binary(Binary::Add), &[&b, &a]);
    let g = n.finish(&[&y]);
    let o = offload(&g, &any_partition);
    assert_eq!(o.groups.len(), 2, "{:?} {:?}", o.groups, o.notes);
    assert!(o.groups.iter().all(|gr| gr.anchors.len() == 1), "{:?}", o.groups);
    let second = o.groups.iter().find(|gr| gr.nodes.iter().any(|n| n.starts_with("add"))).unwrap();
    assert!(!second.nodes.iter().any(|n| n.starts_with("relu")), "the first conv's relu is not in it: {second:?}");
    groups_compute_the_model(&g, &o.groups);
}

#[test]
fn stitched_work_is_offloaded_alone_only_where_no_host_op_feeds_or_reads_it() {
    // A softmax between a host op and the output: two crossings for one kernel, left to the
    // host. A model of memory-intensive ops only (an island between the graph's inputs and
    // outputs): one group, so a GPU runs all of it.
    let softmax = Op::Softmax { axis: -1 };
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 3, 8, 8]);
    let y = host_copy(&mut n, &x);
    let y = n.op("softmax", softmax.clone(), &[&y]);
    let g = n.finish(&[&y]);
    assert!(offload(&g, &any_partition).groups.is_empty());

    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[2, 3, 8, 8]);
    let y = n.op("softmax", softmax, &[&x]);
    let y = n.op("mul", Op::Binary(Binary::Mul), &[&y, &x]);
    let g = n.finish(&[&y]);
    let o = offload(&g, &any_partition);
    assert_eq!(o.groups.len(), 1, "{:?}", o.notes);
    assert!(o.groups[0].anchors.is_empty());
    groups_compute_the_model(&g, &o.groups);
}

/// A function operator the planner expands (here ONNX's Attention on 3-D inputs, a fused attention
/// kernel between views) is the device's when its expansion is: claimed by name, even beside a model
/// node whose name extends it (`attn.after`, a host op: a node of its own, not a part of
/// `attn`'s expansion).
#[test]
fn an_expanded_function_op_is_claimed_beside_a_node_whose_name_extends_its_own() {
    let mut n = Net::new(DType::F32);
    let x = n.input("x", &[1, 8, 4, 4]);
    let x = n.conv(&x, 8, 8, 1, 1, 0);
    // [1, 8, 4, 4] read as 8 tokens of 2 heads of 8: Q = K = V.
    let shape = n.b.initializer("tokens", bolt::ir::Tensor::from_i64(vec![3], vec![1, 8, 16]));
    let qkv = n.op("split_heads", Op::Reshape { allowzero: false }, &[&x, &shape]);
    let attention = Op::Opaque {
        domain: String::new(),
        op_type: "Attention".into(),
        attrs: ["q_num_heads", "kv_num_heads"].map(|k| (k.into(), bolt::ir::AttrValue::Int(2))).to_vec(),
        why: "a host-only op".into(),
    };
    let y = n.b.node("attn", attention, &[&qkv, &qkv, &qkv]);
    let scales = n.b.initializer("after.scales", bolt::ir::Tensor::from_f32(vec![3], vec![1.0; 3]));
    let attrs = bolt::ir::ResizeAttrs { mode: bolt::ir::ResizeMode::Cubic, ..Default::default() };
    let z = n.b.node("attn.after", Op::Resize(attrs), &[&y, "", &scales]);
    let g = n.finish(&[&y, &z]);
    let o = offload(&g, &any_partition);
    assert_eq!(o.groups.len(), 1, "{:?} {:?}", o.groups, o.notes);
    assert!(o.groups[0].nodes.iter().any(|m| m == "attn"), "{:?} {:?}", o.groups, o.notes);
    assert!(!o.groups[0].nodes.iter().any(|m| m == "attn.after"), "{:?}", o.groups);
    groups_compute_the_model(&g, &o.groups);
}
