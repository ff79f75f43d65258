//! The built-in default model: a small CNN + MLP classifier with a symbolic batch dim.
//! It exercises what Bolt is for: convs with bias + ReLU epilogues, a pooling op left to the
//! host, and GEMMs with bias and activation.

use crate::error::Result;
use crate::ir::builder::GraphBuilder;
use crate::ir::*;
use rand::{rngs::StdRng, Rng, SeedableRng};

pub const DEFAULT_MODEL_NAME: &str = "bolt-default-cnn-mlp";

/// He-uniform weights from a fixed seed, so every run and every machine sees the same model.
fn weights(rng: &mut StdRng, shape: Vec<usize>, fan_in: usize) -> Tensor {
    let bound = (6.0 / fan_in as f32).sqrt();
    let n = shape.iter().product();
    Tensor::from_f32(shape, (0..n).map(|_| rng.gen_range(-bound..bound)).collect())
}

fn bias(rng: &mut StdRng, n: usize) -> Tensor {
    Tensor::from_f32(vec![n], (0..n).map(|_| rng.gen_range(-0.1..0.1)).collect())
}

fn conv(stride: usize) -> Op {
    Op::Conv {
        window: Window {
            kernel_shape: Some(vec![3, 3]),
            strides: Some(vec![stride, stride]),
            pads: Some(vec![1, 1, 1, 1]),
            dilations: None,
            auto_pad: AutoPad::NotSet,
        },
        group: 1,
    }
}

/// image f32[N,3,32,32] -> Conv3x3(16)+ReLU -> Conv3x3/2(32)+ReLU -> GlobalAveragePool ->
/// Flatten -> Gemm(64)+ReLU -> Gemm(10) -> logits f32[N,10].
pub fn default_model() -> Result<Graph> {
    let mut rng = StdRng::seed_from_u64(0xB017);
    let mut b = GraphBuilder::new(DEFAULT_MODEL_NAME);
    let x = b.input("image", DType::F32, Shape(vec![Dim::Sym("N".into()), 3.into(), 32.into(), 32.into()]));
    let w1 = b.initializer("conv1.weight", weights(&mut rng, vec![16, 3, 3, 3], 27));
    let b1 = b.initializer("conv1.bias", bias(&mut rng, 16));
    let w2 = b.initializer("conv2.weight", weights(&mut rng, vec![32, 16, 3, 3], 144));
    let b2 = b.initializer("conv2.bias", bias(&mut rng, 32));
    let w3 = b.initializer("fc1.weight", weights(&mut rng, vec![64, 32], 32));
    let b3 = b.initializer("fc1.bias", bias(&mut rng, 64));
    let w4 = b.initializer("fc2.weight", weights(&mut rng, vec![10, 64], 64));
    let b4 = b.initializer("fc2.bias", bias(&mut rng, 10));

    let y = b.node("conv1", conv(1), &[&x, &w1, &b1]);
    let y = b.node("relu1", Op::Unary(Unary::Relu), &[&y]);
    let y = b.node("conv2", conv(2), &[&y, &w2, &b2]);
    let y = b.node("relu2", Op::Unary(Unary::Relu), &[&y]);
    let y = b.node("pool", Op::GlobalAveragePool, &[&y]);
    let y = b.node("flatten", Op::Flatten { axis: 1 }, &[&y]);
    let gemm = Op::Gemm { alpha: 1.0, beta: 1.0, trans_a: false, trans_b: true };
    let y = b.node("fc1", gemm.clone(), &[&y, &w3, &b3]);
    let y = b.node("relu3", Op::Unary(Unary::Relu), &[&y]);
    let y = b.node("fc2", gemm, &[&y, &w4, &b4]);
    b.output(&y);
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_model_infers_symbolic_batch_through_every_layer() {
        let g = default_model().unwrap();
        let out = g.tensor_type(&g.outputs[0]).unwrap();
        assert_eq!(out.shape.as_ref().unwrap(), &Shape(vec![Dim::Sym("N".into()), 10.into()]));
        let conv2 = g.tensor_type("conv2_out").unwrap();
        assert_eq!(conv2.shape.as_ref().unwrap().to_string(), "[N, 32, 16, 16]");
    }
}
