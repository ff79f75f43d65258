fn main() {
    let path = std::env::args().nth(1).expect("model path");
    let g = bolt::import::load(std::path::Path::new(&path)).unwrap().graph;
    let p = bolt::partition::partition(&g);
    for q in p.partitions.iter().take(12) {
        println!("{} [{}] nodes={:?} out={}", q.anchor, q.epilogue, q.nodes, q.output);
        for c in g.nodes.iter().filter(|n| n.inputs.iter().flatten().any(|i| *i == q.output)) {
            println!("    -> consumer {} {}", c.name, c.op.op_type());
        }
    }
}
