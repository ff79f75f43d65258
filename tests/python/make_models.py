#!/usr/bin/env python3
"""Build full-size test models with onnx.helper and seeded random weights, plus reference
outputs from onnxruntime CPU, in the ONNX backend-test layout (see refcase.py):

  resnet50/        ResNet-50 v1.5, NCHW, BatchNormalization kept (not folded), batch dim "N"
  bert_base/       BERT-base encoder stack as PyTorch exports it (no embeddings), dims
                   "batch" and "seq"; GELU spelled with Erf, Reshape shapes with 0/-1
  vgg16/           VGG-16 as torchvision defines it (conv3x3+bias+ReLU stacks, MaxPool, three
                   Gemm layers; dropout is gone in inference), batch dim "N"
  mobilenet_v2/    MobileNetV2 1.0: inverted residual blocks, depthwise 3x3 convs, BN kept,
                   ReLU6 as Clip(0, 6) (torch.onnx's spelling), batch dim "N"
  small_conv_mlp/  conv+relu, conv+relu, GlobalAveragePool, Flatten, Gemm+relu, Gemm

Weights are random, not trained: the point is real graph structure and real tensor sizes.
They are scaled (He / 1/sqrt(fan_in)) so activations stay O(1) through all layers, so
comparisons against the reference are meaningful rather than dominated by inf or 0.
"""
import argparse
import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from refcase import fresh_dir, is_fresh, write_case

OPSET = 17  # first opset with LayerNormalization; what torch.onnx exports by default


class GraphBuilder:
    """Tiny helper: unique names, initializers, nodes."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def const(self, name: str, value) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def randn(self, name: str, shape, std: float) -> str:
        return self.const(name, (self.rng.standard_normal(shape) * std).astype(np.float32))

    def uniform(self, name: str, shape, lo: float, hi: float) -> str:
        return self.const(name, self.rng.uniform(lo, hi, shape).astype(np.float32))

    def op(self, op_type: str, inputs: list[str], name: str | None = None, **attrs) -> str:
        self.n += 1
        name = name or f"{op_type.lower()}_{self.n}"
        self.nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="bolt tests/python/make_models.py")
        model.ir_version = 8  # opset 17's IR version: loadable by older runtimes too
        onnx.checker.check_model(model, full_check=True)
        return model


# ---------------------------------------------------------------------------- ResNet-50
def resnet50() -> onnx.ModelProto:
    g = GraphBuilder(seed=50)

    def conv_bn(x, name, cin, cout, k, stride, relu=True, gamma=(0.8, 1.2)):
        # torchvision: conv without bias, then BN; He init keeps variance through ReLUs.
        w = g.randn(f"{name}.weight", (cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        y = g.op("Conv", [x, w], f"{name}", kernel_shape=[k, k], strides=[stride, stride],
                 pads=[k // 2] * 4, dilations=[1, 1], group=1)
        # Random but sane BN statistics: scale near 1, small shift, variance near 1.
        bn = [g.uniform(f"{name}.bn.scale", cout, *gamma), g.randn(f"{name}.bn.bias", cout, 0.05),
              g.randn(f"{name}.bn.mean", cout, 0.05), g.uniform(f"{name}.bn.var", cout, 0.8, 1.25)]
        y = g.op("BatchNormalization", [y] + bn, f"{name}.bn", epsilon=1e-5, momentum=0.9)
        return g.op("Relu", [y], f"{name}.relu") if relu else y

    x = conv_bn("input", "conv1", 3, 64, 7, 2)
    x = g.op("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, (blocks, width) in enumerate(zip([3, 4, 6, 3], [64, 128, 256, 512]), start=1):
        for b in range(blocks):
            stride = 2 if (b == 0 and stage > 1) else 1
            name = f"layer{stage}.{b}"
            # v1.5: the stride sits on the 3x3 conv, not the first 1x1.
            y = conv_bn(x, f"{name}.conv1", cin, width, 1, 1)
            y = conv_bn(y, f"{name}.conv2", width, width, 3, stride)
            # Small scale on the last BN of the residual branch keeps the sum of 16
            # residual branches from growing activations layer after layer.
            y = conv_bn(y, f"{name}.conv3", width, width * 4, 1, 1, relu=False, gamma=(0.2, 0.4))
            skip = conv_bn(x, f"{name}.downsample", cin, width * 4, 1, stride, relu=False) if b == 0 else x
            x = g.op("Relu", [g.op("Add", [y, skip], f"{name}.add")], f"{name}.relu")
            cin = width * 4
    x = g.op("GlobalAveragePool", [x], "avgpool")
    x = g.op("Flatten", [x], "flatten", axis=1)
    w = g.randn("fc.weight", (1000, 2048), np.sqrt(1.0 / 2048))
    b = g.randn("fc.bias", 1000, 0.01)
    g.op("Gemm", [x, w, b], "logits", alpha=1.0, beta=1.0, transB=1)
    return g.model("resnet50_v1.5",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])])


def image_batch(rng, n: int, h: int, w: int) -> np.ndarray:
    """ImageNet-normalised random 'image' in [0,1) before normalisation. Blocky 8x8
    low-frequency colour patches plus pixel noise: pure white noise averages out in
    GlobalAveragePool and makes every image of a batch give nearly the same logits."""
    low = rng.random((n, 3, 8, 8), dtype=np.float32).repeat(h // 8, axis=2).repeat(w // 8, axis=3)
    img = 0.7 * low + 0.3 * rng.random((n, 3, h, w), dtype=np.float32)
    mean = np.array([0.485, 0.456, 0.406], np.float32).reshape(1, 3, 1, 1)
    std = np.array([0.229, 0.224, 0.225], np.float32).reshape(1, 3, 1, 1)
    return ((img - mean) / std).astype(np.float32)


# ---------------------------------------------------------------------------- BERT-base
def bert(layers: int, hidden=768, heads=12, inter=3072) -> onnx.ModelProto:
    g = GraphBuilder(seed=768)
    dh = hidden // heads
    # Shapes and scalars as initializers, exactly like torch.onnx's constant folding.
    split_heads = g.const("shape_split_heads", np.array([0, 0, heads, dh], np.int64))
    merge_heads = g.const("shape_merge_heads", np.array([0, 0, hidden], np.int64))
    sqrt_dh = g.const("sqrt_head_dim", np.array(np.sqrt(dh), np.float32))
    sqrt2 = g.const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    one = g.const("one", np.array(1.0, np.float32))
    half = g.const("half", np.array(0.5, np.float32))

    def linear(x, name, fin, fout):
        # nn.Linear exports as MatMul with the pre-transposed weight, then Add bias.
        w = g.randn(f"{name}.weight", (fin, fout), 1.0 / np.sqrt(fin))
        b = g.randn(f"{name}.bias", fout, 0.02)
        return g.op("Add", [g.op("MatMul", [x, w], f"{name}.matmul"), b], f"{name}.add")

    def layer_norm(x, name, out=None):
        gamma = g.const(f"{name}.weight", (1 + g.rng.standard_normal(hidden) * 0.05).astype(np.float32))
        beta = g.randn(f"{name}.bias", hidden, 0.05)
        return g.op("LayerNormalization", [x, gamma, beta], out or name, axis=-1, epsilon=1e-12)

    x = "hidden_states"
    for i in range(layers):
        p = f"encoder.layer.{i}"
        q = g.op("Transpose", [g.op("Reshape", [linear(x, f"{p}.query", hidden, hidden), split_heads])],
                 perm=[0, 2, 1, 3])  # [b, h, s, d]
        k = g.op("Transpose", [g.op("Reshape", [linear(x, f"{p}.key", hidden, hidden), split_heads])],
                 perm=[0, 2, 3, 1])  # [b, h, d, s]: torch folds permute + transpose(-1,-2)
        v = g.op("Transpose", [g.op("Reshape", [linear(x, f"{p}.value", hidden, hidden), split_heads])],
                 perm=[0, 2, 1, 3])
        scores = g.op("Add", [g.op("Div", [g.op("MatMul", [q, k]), sqrt_dh]), "attention_mask"])
        ctx = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        ctx = g.op("Reshape", [g.op("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_heads])
        attn = layer_norm(g.op("Add", [linear(ctx, f"{p}.attention.output", hidden, hidden), x]),
                          f"{p}.attention.LayerNorm")
        h = linear(attn, f"{p}.intermediate", hidden, inter)
        # GELU exactly as torch exports the erf form: x * 0.5 * (1 + erf(x / sqrt(2)))
        erf = g.op("Erf", [g.op("Div", [h, sqrt2])])
        h = g.op("Mul", [g.op("Mul", [h, g.op("Add", [erf, one])]), half])
        last = "last_hidden_state" if i == layers - 1 else None
        x = layer_norm(g.op("Add", [linear(h, f"{p}.output", inter, hidden), attn]), f"{p}.output.LayerNorm", last)
    return g.model(f"bert_base_{layers}l",
                   [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["batch", "seq", hidden]),
                    helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, ["batch", 1, 1, "seq"])],
                   [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "seq", hidden])])


def bert_feeds(rng, batch: int, seq: int, pad: list[int]) -> dict:
    """Hidden states ~ N(0,1); additive mask (0 keep / -10000 pad) with PAD[i] padded tail
    tokens in sample i, as HF builds it: (1 - mask) * -10000."""
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    for i, p in enumerate(pad):
        if p:
            mask[i, ..., seq - p:] = -10000.0
    return {"hidden_states": rng.standard_normal((batch, seq, 768), dtype=np.float32), "attention_mask": mask}


# ---------------------------------------------------------------------------- VGG-16
def vgg16() -> onnx.ModelProto:
    g = GraphBuilder(seed=16)
    x, cin = "input", 3
    for stage, (convs, width) in enumerate(zip([2, 2, 3, 3, 3], [64, 128, 256, 512, 512]), start=1):
        for c in range(convs):
            name = f"features.{stage}.{c}"
            w = g.randn(f"{name}.weight", (width, cin, 3, 3), np.sqrt(2.0 / (cin * 9)))
            b = g.randn(f"{name}.bias", width, 0.01)
            x = g.op("Relu", [g.op("Conv", [x, w, b], name, kernel_shape=[3, 3], pads=[1, 1, 1, 1])], f"{name}.relu")
            cin = width
        x = g.op("MaxPool", [x], f"pool{stage}", kernel_shape=[2, 2], strides=[2, 2])
    x = g.op("Flatten", [x], "flatten", axis=1)
    for i, (fin, fout) in enumerate([(512 * 7 * 7, 4096), (4096, 4096), (4096, 1000)]):
        w = g.randn(f"classifier.{i}.weight", (fout, fin), np.sqrt((2.0 if i < 2 else 1.0) / fin))
        x = g.op("Gemm", [x, w, g.randn(f"classifier.{i}.bias", fout, 0.01)],
                 "logits" if i == 2 else f"classifier.{i}", transB=1)
        if i < 2:
            x = g.op("Relu", [x], f"classifier.{i}.relu")
    return g.model("vgg16",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])])


# ---------------------------------------------------------------------- MobileNetV2
def mobilenet_v2() -> onnx.ModelProto:
    g = GraphBuilder(seed=2)
    zero, six = g.const("relu6.min", np.array(0.0, np.float32)), g.const("relu6.max", np.array(6.0, np.float32))

    def conv_bn(x, name, cin, cout, k, stride, group=1, relu6=True, gamma=(0.8, 1.2)):
        w = g.randn(f"{name}.weight", (cout, cin // group, k, k), np.sqrt(2.0 / (cin // group * k * k)))
        y = g.op("Conv", [x, w], name, kernel_shape=[k, k], strides=[stride] * 2, pads=[k // 2] * 4, group=group)
        bn = [g.uniform(f"{name}.bn.scale", cout, *gamma), g.randn(f"{name}.bn.bias", cout, 0.05),
              g.randn(f"{name}.bn.mean", cout, 0.05), g.uniform(f"{name}.bn.var", cout, 0.8, 1.25)]
        y = g.op("BatchNormalization", [y] + bn, f"{name}.bn", epsilon=1e-5)
        return g.op("Clip", [y, zero, six], f"{name}.relu6") if relu6 else y

    x, cin = conv_bn("input", "features.0", 3, 32, 3, 2), 32
    # (expansion t, channels c, repeats n, first stride s) from the paper's Table 2.
    layer = 1
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            name, stride, hidden = f"features.{layer}", s if i == 0 else 1, cin * t
            y = conv_bn(x, f"{name}.expand", cin, hidden, 1, 1) if t != 1 else x
            y = conv_bn(y, f"{name}.dw", hidden, hidden, 3, stride, group=hidden)
            y = conv_bn(y, f"{name}.project", hidden, c, 1, 1, relu6=False, gamma=(0.3, 0.6))
            x = g.op("Add", [x, y], f"{name}.add") if stride == 1 and cin == c else y
            cin, layer = c, layer + 1
    x = conv_bn(x, f"features.{layer}", cin, 1280, 1, 1)
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    w = g.randn("classifier.weight", (1000, 1280), np.sqrt(1.0 / 1280))
    g.op("Gemm", [x, w, g.randn("classifier.bias", 1000, 0.01)], "logits", transB=1)
    return g.model("mobilenet_v2",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 224, 224])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 1000])])


# ---------------------------------------------------------------------- small conv MLP
def small_conv_mlp() -> onnx.ModelProto:
    g = GraphBuilder(seed=17)

    def conv(x, name, cin, cout, stride):
        w = g.randn(f"{name}.weight", (cout, cin, 3, 3), np.sqrt(2.0 / (cin * 9)))
        b = g.randn(f"{name}.bias", cout, 0.05)
        return g.op("Relu", [g.op("Conv", [x, w, b], name, kernel_shape=[3, 3], strides=[stride] * 2,
                                  pads=[1, 1, 1, 1])], f"{name}.relu")

    def gemm(x, name, fin, fout, out=None):
        w = g.randn(f"{name}.weight", (fout, fin), np.sqrt(2.0 / fin))
        return g.op("Gemm", [x, w, g.randn(f"{name}.bias", fout, 0.05)], out or name, transB=1)

    x = conv(conv("input", "conv1", 3, 16, 1), "conv2", 16, 32, 2)
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    x = g.op("Relu", [gemm(x, "fc1", 32, 64)], "fc1.relu")
    gemm(x, "fc2", 64, 10, "logits")
    return g.model("small_conv_mlp",
                   [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 32, 32])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--bert-layers", type=int, default=12)
    ap.add_argument("--bert-seq", type=int, default=128, help="sequence length of test_data_set_0")
    ap.add_argument("--only", nargs="*", choices=["resnet50", "bert_base", "vgg16", "mobilenet_v2", "small_conv_mlp"])
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()

    script = hashlib.sha256(Path(__file__).read_bytes() + (Path(__file__).parent / "refcase.py").read_bytes())
    # name: (graph builder, test inputs from a seeded rng, parameters worth a stamp)
    specs = {
        "resnet50": (resnet50, lambda rng: [{"input": image_batch(rng, 1, 224, 224)},
                                            {"input": image_batch(rng, 2, 224, 224)}], {}),
        "bert_base": (lambda: bert(args.bert_layers),
                      lambda rng: [bert_feeds(rng, 1, args.bert_seq, [16]), bert_feeds(rng, 2, 32, [0, 8])],
                      {"layers": args.bert_layers, "seq0": args.bert_seq}),
        "vgg16": (vgg16, lambda rng: [{"input": image_batch(rng, 1, 224, 224)},
                                      {"input": image_batch(rng, 2, 224, 224)}], {}),
        "mobilenet_v2": (mobilenet_v2, lambda rng: [{"input": image_batch(rng, 1, 224, 224)},
                                                    {"input": image_batch(rng, 3, 224, 224)}], {}),
        "small_conv_mlp": (small_conv_mlp, lambda rng: [{"input": image_batch(rng, 1, 32, 32)},
                                                        {"input": image_batch(rng, 4, 32, 32)}], {}),
    }
    for name, (build, feeds, params) in specs.items():
        if args.only and name not in args.only:
            continue
        out = args.out.resolve() / name
        stamp = f"script={script.hexdigest()[:16]} ort={ort.__version__} onnx={onnx.__version__} {params}"
        if not args.force and is_fresh(out, stamp):
            print(f"{name}: up to date")
            continue
        print(f"{name}: building")
        fresh_dir(out)
        onnx.save(build(), out / "model.onnx")
        write_case(out, out / "model.onnx", feeds(np.random.default_rng(len(name))),
                   {"source": "generated by tests/python/make_models.py (random seeded weights)", **params}, stamp)


if __name__ == "__main__":
    main()
