//! Small networks built in code for planner tests: seeded random weights scaled to keep
//! activations O(1), NCHW convs and row-major GEMMs as exporters write them.

use bolt::ir::builder::GraphBuilder;
use bolt::ir::*;
use rand::{rngs::StdRng, Rng, SeedableRng};

pub struct Net {
    pub b: GraphBuilder,
    rng: StdRng,
    pub dtype: DType,
    n: usize,
}

impl Net {
    pub fn new(dtype: DType) -> Net {
        Net { b: GraphBuilder::new("net"), rng: StdRng::seed_from_u64(7), dtype, n: 0 }
    }

    fn name(&mut self, base: &str) -> String {
        self.n += 1;
        format!("{base}{}", self.n)
    }

    pub fn input(&mut self, name: &str, shape: &[usize]) -> String {
        self.b.input(name, self.dtype, Shape::from_static(shape))
    }

    pub fn random(&mut self, base: &str, shape: &[usize], std: f64) -> String {
        let v: Vec<f64> =
            (0..shape.iter().product()).map(|_| (self.rng.gen::<f64>() * 2.0 - 1.0) * std * 1.7).collect();
        let name = self.name(base);
        self.b.initializer(&name, Tensor::from_f64_as(self.dtype, shape.to_vec(), &v).unwrap())
    }

    pub fn relu(&mut self, x: &str) -> String {
        let name = self.name("relu");
        self.b.node(&name, Op::Unary(Unary::Relu), &[x])
    }

    /// Conv (+ bias) with square kernel `k`, `pad` on every side.
    pub fn conv(&mut self, x: &str, cin: usize, cout: usize, k: usize, stride: usize, pad: usize) -> String {
        self.grouped_conv("conv", x, cin, cout, k, stride, pad, 1)
    }

    /// Depthwise conv (+ bias): `c` channels, one filter each, square kernel `k`.
    pub fn depthwise(&mut self, x: &str, c: usize, k: usize, stride: usize, pad: usize) -> String {
        self.grouped_conv("dw", x, c, c, k, stride, pad, c)
    }

    #[allow(clippy::too_many_arguments)]
    fn grouped_conv(
        &mut self,
        base: &str,
        x: &str,
        cin: usize,
        cout: usize,
        k: usize,
        stride: usize,
        pad: usize,
        group: usize,
    ) -> String {
        let fan_in = cin / group * k * k;
        let w = self.random("w", &[cout, cin / group, k, k], (2.0 / fan_in as f64).sqrt());
        let bias = self.random("b", &[cout], 0.05);
        let op = Op::Conv {
            window: Window {
                kernel_shape: Some(vec![k, k]),
                strides: Some(vec![stride, stride]),
                pads: Some(vec![pad; 4]),
                dilations: None,
                auto_pad: AutoPad::NotSet,
            },
            group,
        };
        let name = self.name(base);
        self.b.node(&name, op, &[x, &w, &bias])
    }

    /// 1-D conv (+ bias) over [N, C, L]: kernel `k`, `dilation`, `pad` on both ends.
    pub fn conv1d(&mut self, x: &str, cin: usize, cout: usize, k: usize, dilation: usize, pad: usize) -> String {
        let w = self.random("w", &[cout, cin, k], (2.0 / (cin * k) as f64).sqrt());
        let bias = self.random("b", &[cout], 0.05);
        let op = Op::Conv {
            window: Window {
                kernel_shape: Some(vec![k]),
                strides: Some(vec![1]),
                pads: Some(vec![pad; 2]),
                dilations: Some(vec![dilation]),
                auto_pad: AutoPad::NotSet,
            },
            group: 1,
        };
        let name = self.name("conv1d");
        self.b.node(&name, op, &[x, &w, &bias])
    }

    /// x @ W[k, n] + bias as nn.Linear exports it.
    pub fn linear(&mut self, x: &str, k: usize, n: usize) -> String {
        let w = self.random("w", &[k, n], (2.0 / k as f64).sqrt());
        let bias = self.random("b", &[n], 0.05);
        let mm = self.name("matmul");
        let y = self.b.node(&mm, Op::MatMul, &[x, &w]);
        let add = self.name("add");
        self.b.node(&add, Op::Binary(Binary::Add), &[&y, &bias])
    }

    pub fn op(&mut self, base: &str, op: Op, inputs: &[&str]) -> String {
        let name = self.name(base);
        self.b.node(&name, op, inputs)
    }

    pub fn finish(mut self, outputs: &[&str]) -> Graph {
        for o in outputs {
            self.b.output(o);
        }
        self.b.finish().unwrap()
    }
}

/// A classifier head: x[m, k] @ W[k, n] + b (nn.Linear), then Softmax over `axis`.
pub fn softmax_head(m: usize, k: usize, n: usize, axis: i64) -> Graph {
    let mut net = Net::new(DType::F32);
    let x = net.input("x", &[m, k]);
    let y = net.linear(&x, k, n);
    let p = net.op("softmax", Op::Softmax { axis }, &[&y]);
    let mut g = net.finish(&[&p]);
    g.name = "classifier-head".into();
    g
}

/// Seeded inputs in [-1, 1) for every graph input (static shapes).
pub fn inputs(g: &Graph) -> std::collections::HashMap<String, Tensor> {
    bolt::compile::synthetic_inputs(g, &Default::default(), 11).unwrap()
}
