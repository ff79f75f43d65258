"""Fused epilogues against onnxruntime's CPU provider (nothing Bolt computed): hand-written
regressions for the epilogue algebra, the fuzzer's corpus of graphs that once failed, and a
fixed number of fuzzer seeds. Each graph is checked three ways (fuzz_graphs.py): planned vs
model on the reference executor (`bolt compile`), reference and planned graph vs ORT CPU
(`bolt check [--planned]`), and Bolt's ONNX Runtime provider vs ORT CPU.

Needs target/release/bolt and libbolt_plugin.so (tests/run.sh builds both before pytest)."""
import tempfile
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

import fuzz_graphs as fz

# CI runs this many seeds (a few seconds); `fuzz_graphs.py --seeds N` runs more.
CI_SEEDS = 150


@pytest.fixture(scope="module", autouse=True)
def built():
    try:
        fz.bolt_exe()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)


def regression(build) -> tuple:
    b = fz.Builder(np.random.default_rng(7))
    out = build(b)
    b.output(out)
    return b.model(build.__name__), b.feeds


def mm(b, m=4, k=16, n=32):
    return b.op("MatMul", [b.input((m, k)), fz.weight(b, (k, n), k)], (m, n))


def conv(b, x, c=8, k=8):
    w = fz.weight(b, (k, c, 3, 3), c * 9)
    return b.op("Conv", [x, w, b.const(b.rng.standard_normal(k))], (1, k, 6, 6), pads=[1, 1, 1, 1])


def add(b, x, y, shape):
    return b.op("Add", [x, y], shape)


def scale(b, op, x, s, shape):
    return b.op(op, [x, fz.scalar(b, s)], shape)


# Each builds a graph whose epilogue order matters; the names say the chain.
def matmul_div8_residual(b):  # the case: the residual was divided by 8 too
    return add(b, scale(b, "Div", mm(b), 8.0, (4, 32)), b.input((4, 32)), (4, 32))


def conv_mul01_skip(b):  # Conv -> Mul(0.1) -> Add(x): the skip was scaled by 0.1
    x = b.input((1, 8, 6, 6))
    return add(b, scale(b, "Mul", conv(b, x), 0.1, (1, 8, 6, 6)), x, (1, 8, 6, 6))


def scalar_on_the_left_then_residual(b):
    y = b.op("Mul", [fz.scalar(b, 0.125), mm(b)], (4, 32))
    return add(b, b.input((4, 32)), y, (4, 32))


def gemm_alpha_beta_bias_div_residual_relu(b):
    x = b.input((4, 16))
    y = b.op("Gemm", [x, fz.weight(b, (32, 16), 16), b.const(b.rng.standard_normal(32))], (4, 32),
             alpha=2.0, beta=0.5, transB=1)
    y = add(b, scale(b, "Div", y, 4.0, (4, 32)), b.input((4, 32)), (4, 32))
    return b.op("Relu", [y], (4, 32))


def gemm_full_c_scaled_then_second_source(b):  # C is the source: a later residual stays on the host
    y = b.op("Gemm", [b.input((4, 16)), fz.weight(b, (16, 32), 16), b.input((4, 32))], (4, 32), beta=2.0)
    return add(b, scale(b, "Mul", y, 0.5, (4, 32)), b.input((4, 32)), (4, 32))


def bias_scale_bias_relu(b):  # (acc + b1) * 0.5 + b2: b1 is scaled, b2 is not
    y = add(b, mm(b), b.const(b.rng.standard_normal(32)), (4, 32))
    y = add(b, scale(b, "Mul", y, 0.5, (4, 32)), b.const(b.rng.standard_normal(32)), (4, 32))
    return b.op("Relu", [y], (4, 32))


def residual_then_scale(b):  # (acc + r) * 0.25: the residual is scaled
    return scale(b, "Mul", add(b, mm(b), b.input((4, 32)), (4, 32)), 0.25, (4, 32))


def relu_then_scale_then_residual(b):  # a scalar after the activation: not a kernel form
    x = b.input((1, 8, 6, 6))
    y = scale(b, "Mul", b.op("Relu", [conv(b, x)], (1, 8, 6, 6)), 2.0, (1, 8, 6, 6))
    return add(b, y, x, (1, 8, 6, 6))


def residual_after_relu_then_scale(b):
    y = add(b, b.op("Relu", [mm(b)], (4, 32)), b.input((4, 32)), (4, 32))
    return scale(b, "Mul", y, 3.0, (4, 32))


def scale_residual_silu_cast_f16(b):  # rounded once, to f16, after the epilogue
    y = add(b, scale(b, "Mul", mm(b), 0.125, (4, 32)), b.input((4, 32)), (4, 32))
    y = b.op("Mul", [y, b.op("Sigmoid", [y], (4, 32))], (4, 32))
    return b.op("Cast", [y], (4, 32), to=TensorProto.FLOAT16)


def rank_raising_bias(b):  # a [1, 1, N] bias on a 2-D GEMM: the output is 3-D
    return b.op("Add", [mm(b), b.const(b.rng.standard_normal((1, 1, 32)))], (1, 4, 32))


def magic_rounding(b):  # (x + 1.5 * 2^23) - 1.5 * 2^23 is round(x) only if the add rounds to f32
    x = b.input((4, 32))
    b.feeds[x] = (b.rng.standard_normal((4, 32)) * 100).astype(np.float32)
    big = 1.5 * 2.0**23
    return b.op("Sub", [b.op("Add", [x, fz.scalar(b, big)], (4, 32)), fz.scalar(b, big)], (4, 32))


def floor_of_a_quotient_by_a_product(b):  # onnx's quantizer: floor(x / (a * c)), each op in f32
    a, c = np.float32(0.007843138), np.float32(0.0023410565)
    s = np.float32(a * c)
    k = np.arange(1, 400000, dtype=np.float32)
    x = (k * s).astype(np.float32)
    flips = x[np.floor(x / s) != np.floor(x.astype(np.float64) / np.float64(s))][:32]
    assert len(flips) == 32
    xi = b.input((1, 32))
    b.feeds[xi] = flips.reshape(1, 32)
    q = b.op("Div", [xi, b.op("Mul", [fz.scalar(b, float(a)), fz.scalar(b, float(c))], ())], (1, 32))
    return b.op("Floor", [q], (1, 32))


# Reductions over every axis (no axes, or an empty list): AStitch's global scheme, one row.
def max_of_everything_less_a_constant(b):  # Whisper's log-mel clamp: max(x, x.max() - 8)
    x = b.input((2, 8, 37))
    top = b.op("ReduceMax", [x], (1, 1, 1))
    return b.op("Max", [x, b.op("Sub", [top, fz.scalar(b, 8.0)], (1, 1, 1))], (2, 8, 37))


def scalar_max_then_scalar_arithmetic(b):  # openWakeWord: ReduceMax(keepdims=0) - 80, a scalar
    x = b.input((1, 1, 5, 32))
    top = b.op("ReduceMax", [x], (), keepdims=0)
    return b.op("Sub", [x, b.op("Sub", [top, fz.scalar(b, 80.0)], ())], (1, 1, 5, 32))


def sum_over_an_empty_axes_list(b):  # opset 13+: an empty axes input reduces every axis
    x = b.input((3, 4, 5, 6))
    return b.op("ReduceSum", [x, b.const_i64([])], (1, 1, 1, 1))


def empty_axes_with_noop_are_the_identity(b):
    x = b.input((3, 7))
    return b.op("Add", [b.op("ReduceSum", [x, b.const_i64([])], (3, 7), noop_with_empty_axes=1), x], (3, 7))


def mean_and_min_over_all_named_axes(b):  # every axis named: a whole-tensor mean and minimum
    x = b.input((2, 3, 11))
    mean = b.op("ReduceMean", [x], (1, 1, 1), axes=[0, 1, 2])
    low = b.op("ReduceMin", [x], (), axes=[0, 2, 1], keepdims=0)
    return b.op("Mul", [b.op("Sub", [x, mean], (2, 3, 11)), low], (2, 3, 11))


REDUCTIONS_OVER_EVERY_AXIS = [
    max_of_everything_less_a_constant,
    scalar_max_then_scalar_arithmetic,
    sum_over_an_empty_axes_list,
    empty_axes_with_noop_are_the_identity,
    mean_and_min_over_all_named_axes,
]


# Pads with negative entries crop (Kaldi's pre-emphasis shifts a frame by one): planned as a
# Slice and a Pad glue kernel in constant and edge modes; reflect stays with the host.
def edge_pad_shifting_by_one(b):  # pads [0, 1, 0, -1]: x[t - 1], x[-1] = x[0]
    x = b.input((3, 40))
    return b.op("Pad", [x, b.const_i64([0, 1, 0, -1])], (3, 40), mode="edge")


def constant_pad_cropping_and_growing(b):  # crop 2 rows at the top, grow 1 left and 3 right
    x = b.input((2, 7, 9))
    y = b.op("Pad", [x, b.const_i64([0, -2, 1, 0, 1, 3]), fz.scalar(b, 0.5)], (2, 6, 13), mode="constant")
    return b.op("Mul", [y, fz.scalar(b, 2.0)], (2, 6, 13))


def only_crops(b):  # nothing grows: a Slice alone
    x = b.input((4, 5, 6))
    return b.op("Pad", [x, b.const_i64([-1, 0, -2, -2, 0, -3])], (1, 5, 1), mode="edge")


def reflect_pad_with_a_crop(b):  # reflect reads what a crop removes: stays with the host
    x = b.input((2, 9))
    return b.op("Pad", [x, b.const_i64([0, 2, 0, -3])], (2, 8), mode="reflect")


NEGATIVE_PADS = [
    edge_pad_shifting_by_one,
    constant_pad_cropping_and_growing,
    only_crops,
    reflect_pad_with_a_crop,
]


# ConvTransposes that do not tile their output, planned as convs over the input with zeros
# inserted between elements and the weight flipped (negative pads cropping first).
def conv_transpose_1d_vocoder(b):  # HiFi-GAN's upsampling: kernel 16, stride 8, pads 4
    x = b.input((1, 6, 9))
    w = fz.weight(b, (6, 4, 16), 6 * 16)
    return b.op("ConvTranspose", [x, w, b.const(b.rng.standard_normal(4))], (1, 4, 72), strides=[8], pads=[4, 4])


def conv_transpose_2d_with_output_padding(b):  # a decoder's 3x3 stride 2, pads 1, output_padding 1
    x = b.input((2, 5, 4, 3))
    w = fz.weight(b, (5, 3, 3, 3), 45)
    return b.op("ConvTranspose", [x, w], (2, 3, 8, 6), strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])


def conv_transpose_grouped_dilated(b):  # 2 groups, dilation 2, stride (1, 3), uneven pads
    x = b.input((1, 4, 5, 4))
    w = fz.weight(b, (4, 3, 2, 3), 12)
    y = b.op("ConvTranspose", [x, w], (1, 6, 5, 11), strides=[1, 3], dilations=[2, 2], pads=[1, 0, 0, 3], group=2)
    return b.op("Relu", [y], (1, 6, 5, 11))


def conv_transpose_pads_past_the_reach(b):  # pads beyond dilation * (k - 1): the conv input is cropped
    x = b.input((1, 3, 7, 7))
    w = fz.weight(b, (3, 2, 2, 2), 12)
    return b.op("ConvTranspose", [x, w], (1, 2, 10, 10), strides=[2, 2], pads=[2, 2, 2, 2])


def conv_padded_unevenly(b):  # TensorFlow's SAME at stride 2: pads [0, 0, 1, 1]
    x = b.input((1, 8, 9, 9))
    w = fz.weight(b, (16, 8, 3, 3), 72)
    return b.op("Conv", [x, w], (1, 16, 4, 4), strides=[2, 2], pads=[0, 0, 1, 1])


def conv_same_upper_at_stride_2(b):  # auto_pad SAME_UPPER on an even size: one more at the end
    x = b.input((1, 8, 10, 10))
    w = fz.weight(b, (16, 8, 3, 3), 72)
    return b.op("Conv", [x, w], (1, 16, 5, 5), strides=[2, 2], auto_pad="SAME_UPPER")


CONV_TRANSPOSES = [
    conv_padded_unevenly,
    conv_same_upper_at_stride_2,
    conv_transpose_1d_vocoder,
    conv_transpose_2d_with_output_padding,
    conv_transpose_grouped_dilated,
    conv_transpose_pads_past_the_reach,
]


# Layouts carried through views: 1-D convs run as NHWC 2-D conv kernels over an H of one,
# and the layout pass moves their channels-last activations through the Squeeze/Unsqueeze,
# Reshape and Flatten views that drop or add axes of one and through the ops between them.
def conv1d(b, x, c, k, length, size=3, dilation=1):
    w = fz.weight(b, (k, c, size), c * size)
    pad = dilation * (size - 1) // 2
    return b.op("Conv", [x, w, b.const(b.rng.standard_normal(k))], (1, k, length), pads=[pad, pad], dilations=[dilation])


def vocoder_residual_blocks(b):  # HiFi-GAN: x + conv(lrelu(conv(lrelu(x)))), then [N, L, C]
    x = b.input((1, 6, 20))
    h = conv1d(b, x, 6, 8, 20, size=7)
    for d in (1, 3):
        a = b.op("LeakyRelu", [h], (1, 8, 20), alpha=0.1)
        a = conv1d(b, a, 8, 8, 20, dilation=d)
        a = b.op("LeakyRelu", [a], (1, 8, 20), alpha=0.1)
        a = conv1d(b, a, 8, 8, 20)
        h = b.op("Add", [h, a], (1, 8, 20))
    return b.op("Transpose", [b.op("Tanh", [h], (1, 8, 20))], (1, 20, 8), perm=[0, 2, 1])


def crnn_features_to_a_sequence(b):  # conv features pooled to H = 1, squeezed, [W, N, C]
    x = b.input((2, 4, 2, 7))
    w = fz.weight(b, (8, 4, 3, 3), 36)
    y = b.op("Conv", [x, w, b.const(b.rng.standard_normal(8))], (2, 8, 2, 7), pads=[1, 1, 1, 1])
    y = b.op("MaxPool", [y], (2, 8, 1, 7), kernel_shape=[2, 1], strides=[2, 1])
    y = b.op("Squeeze", [y, b.const_i64([2])], (2, 8, 7))
    y = b.op("Transpose", [y], (7, 2, 8), perm=[2, 0, 1])
    return b.op("MatMul", [y, fz.weight(b, (8, 5), 8)], (7, 2, 5))


def pooled_features_flattened_for_a_gemm(b):  # a classifier head: GAP, Flatten, Gemm
    x = b.input((2, 4, 5, 5))
    w = fz.weight(b, (8, 4, 3, 3), 36)
    y = b.op("Relu", [b.op("Conv", [x, w], (2, 8, 5, 5), pads=[1, 1, 1, 1])], (2, 8, 5, 5))
    y = b.op("Flatten", [b.op("GlobalAveragePool", [y], (2, 8, 1, 1))], (2, 8), axis=1)
    return b.op("Gemm", [y, fz.weight(b, (3, 8), 8), b.const(b.rng.standard_normal(3))], (2, 3), transB=1)


def reshapes_between_1d_and_2d_convs(b):  # [N, C, L] reshaped to [N, C, 1, L] and back
    x = b.input((1, 4, 9))
    y = conv1d(b, x, 4, 6, 9)
    y = b.op("Reshape", [y, b.const_i64([1, 6, 1, 9])], (1, 6, 1, 9))
    w = fz.weight(b, (6, 6, 1, 3), 18)
    y = b.op("Conv", [y, w], (1, 6, 1, 9), pads=[0, 1, 0, 1])
    y = b.op("Reshape", [b.op("Sigmoid", [y], (1, 6, 1, 9)), b.const_i64([1, 6, 9])], (1, 6, 9))
    return conv1d(b, y, 6, 4, 9)


def separator_block_global_norm(b):  # Conv-TasNet: PRelu, a norm over [C, T], scale as [N, T, C]
    x = b.input((2, 6, 12))
    h = conv1d(b, x, 6, 8, 12)
    for _ in range(2):
        a = b.op("PRelu", [h, b.const(np.abs(b.rng.standard_normal((8, 1))) * 0.3)], (2, 8, 12))
        m = b.op("ReduceMean", [a], (2, 1, 1), axes=[1, 2])
        c = b.op("Sub", [a, m], (2, 8, 12))
        v = b.op("ReduceMean", [b.op("Mul", [c, c], (2, 8, 12))], (2, 1, 1), axes=[1, 2])
        sd = b.op("Sqrt", [b.op("Add", [v, fz.scalar(b, 1e-5)], (2, 1, 1))], (2, 1, 1))
        y = b.op("Transpose", [b.op("Div", [c, sd], (2, 8, 12))], (2, 12, 8), perm=[0, 2, 1])
        y = b.op("Mul", [b.const(b.rng.standard_normal(8)), y], (2, 12, 8))
        y = b.op("Add", [y, b.const(b.rng.standard_normal(8))], (2, 12, 8))
        h = conv1d(b, b.op("Transpose", [y], (2, 8, 12), perm=[0, 2, 1]), 8, 8, 12, dilation=2)
    return h


LAYOUT_VIEWS = [
    separator_block_global_norm,
    vocoder_residual_blocks,
    crnn_features_to_a_sequence,
    pooled_features_flattened_for_a_gemm,
    reshapes_between_1d_and_2d_convs,
]


# Einsums that are one batched matrix product, free and contracted labels merged per axis, and
# MatMuls of a vector and a matrix (numpy's promotion).
def einsum_grouped_linear(b):  # DeepFilterNet: a batch label between free ones, constant weight
    return b.op("Einsum", [b.input((2, 3, 4, 5)), fz.weight(b, (4, 5, 6), 5)], (2, 3, 4, 6), equation="btgi,gih->btgh")


def einsum_contracted_over_two_axes(b):  # fi,fij->j: a [1, 20] @ [20, 6] product
    return b.op("Einsum", [b.input((4, 5)), fz.weight(b, (4, 5, 6), 20)], (6,), equation="fi,fij->j")


def einsum_attention_scores(b):  # per head: queries by keys
    return b.op("Einsum", [b.input((2, 3, 5, 4)), b.input((2, 3, 6, 4))], (2, 3, 5, 6), equation="bhqd,bhkd->bhqk")


def einsum_free_labels_reordered(b):  # the output lists a right free label between left ones
    return b.op("Einsum", [b.input((2, 3, 4)), fz.weight(b, (4, 5), 4)], (2, 5, 3), equation="bij,jk->bki")


def vector_times_matrix(b):  # a filterbank applied to one frame: [32] @ [32, 13]
    return b.op("MatMul", [b.input((32,)), fz.weight(b, (32, 13), 32)], (13,))


def batched_matrix_times_vector(b):  # [2, 5, 8] @ [8]: one column per batch
    return b.op("MatMul", [b.input((2, 5, 8)), b.const(b.rng.standard_normal(8))], (2, 5))


EINSUMS = [
    vector_times_matrix,
    batched_matrix_times_vector,
    einsum_grouped_linear,
    einsum_contracted_over_two_axes,
    einsum_attention_scores,
    einsum_free_labels_reordered,
]


# onnxruntime's static quantization (QDQ): QuantizeLinear -> DequantizeLinear around the
# activations, DequantizeLinear of int8 weights. Planned as float ops (fake quantization,
# stitched) and dequantized weights folded into the kernels'.
def qdq(b, x, scale, zero, shape, ty=np.uint8):
    s, z = fz.scalar(b, scale), b.name("zp")
    b.inits.append(numpy_helper.from_array(np.array(zero, ty), z))
    return b.op("DequantizeLinear", [b.op("QuantizeLinear", [x, s, z], shape), s, z], shape)


def int8_weight(b, shape, scale):
    q, s = b.name("wq"), b.name("ws")
    b.inits.append(numpy_helper.from_array(b.rng.integers(-127, 128, shape).astype(np.int8), q))
    b.inits.append(numpy_helper.from_array(np.array(scale, np.float32), s))
    return b.op("DequantizeLinear", [q, s], shape)


def qdq_matmul_relu(b):  # x -> QDQ (uint8, zero point 128) -> MatMul(int8 weight) -> Relu -> QDQ
    x = b.input((4, 32))
    y = b.op("MatMul", [qdq(b, x, 0.02, 128, (4, 32)), int8_weight(b, (32, 16), 0.01)], (4, 16))
    return qdq(b, b.op("Relu", [y], (4, 16)), 0.005, 0, (4, 16))


def qdq_saturating_int8(b):  # values past the int8 range saturate; halves round to even
    x = b.input((3, 40))
    b.feeds[x] = (np.arange(120, dtype=np.float32).reshape(3, 40) - 60.0) * 0.25
    return qdq(b, b.op("Mul", [x, fz.scalar(b, 3.0)], (3, 40)), 0.5, 100, (3, 40), np.int8)


QDQ = [qdq_matmul_relu, qdq_saturating_int8]


REGRESSIONS = [
    matmul_div8_residual,
    conv_mul01_skip,
    scalar_on_the_left_then_residual,
    gemm_alpha_beta_bias_div_residual_relu,
    gemm_full_c_scaled_then_second_source,
    bias_scale_bias_relu,
    residual_then_scale,
    relu_then_scale_then_residual,
    residual_after_relu_then_scale,
    scale_residual_silu_cast_f16,
    rank_raising_bias,
]


def test_epilogue_order_regressions_match_ort_cpu():
    cases = {f.__name__: regression(f) for f in REGRESSIONS}
    out = fz.check_cases(cases)
    assert not out.failures, out.failures
    # Every anchor ran on Bolt, so the comparison is of Bolt's fused kernels.
    assert out.claimed == out.anchors == len(REGRESSIONS), (out.claimed, out.anchors)


def test_stitched_regions_round_every_step_to_f32_as_ort_does():
    # Element-wise regions become stitched kernels; their host meaning once kept f64
    # intermediates, which ORT's f32 ops (and the kernel's registers) do not.
    cases = {f.__name__: regression(f) for f in (magic_rounding, floor_of_a_quotient_by_a_product)}
    out = fz.check_cases(cases, provider=False)
    assert not out.failures, out.failures


def provider_assignment(model) -> list:
    """(op type, whether Bolt runs it) of each node of `model` in a session with Bolt's provider."""
    import bolt_ort
    import onnxruntime as ort

    bolt_ort.register()
    so = ort.SessionOptions()
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    sess = bolt_ort.session(model.SerializeToString(), so=so)
    return [(n.op_type, sub.ep_name == bolt_ort.EP_NAME) for sub in sess.get_provider_graph_assignment_info()
            for n in sub.get_nodes()]


def ort_optimized(build, opset=None):
    """The model onnxruntime saves after its extended optimisations: com.microsoft FusedConv,
    FusedGemm and FusedMatMul where it fused an activation, a Z sum, a scale or a transpose.
    With `opset`, the model is declared at that opset (its ops mean the same there) with a
    symbolic batch and no value_info, as older exporters write it."""
    import onnx
    import onnxruntime as ort

    model, feeds = regression(build)
    if opset is not None:
        for o in model.opset_import:
            o.version = opset
        for v in list(model.graph.input) + list(model.graph.output):
            v.type.tensor_type.shape.dim[0].dim_param = "batch"
        del model.graph.value_info[:]
    with tempfile.TemporaryDirectory() as tmp:
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        so.optimized_model_filepath = str(Path(tmp) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        optimized = onnx.load(so.optimized_model_filepath)
    return optimized, feeds


def fused_by_ort(b):  # conv + relu, conv + add + leaky relu, clip; gemm + relu; x @ w^T * 0.5
    x = b.input((1, 4, 6, 6))
    w = fz.weight(b, (8, 4, 3, 3), 36)
    y = b.op("Relu", [b.op("Conv", [x, w, b.const(b.rng.standard_normal(8))], (1, 8, 6, 6), pads=[1, 1, 1, 1])], (1, 8, 6, 6))
    z = b.op("Conv", [y, fz.weight(b, (8, 8, 1, 1), 8)], (1, 8, 6, 6))
    z = b.op("LeakyRelu", [b.op("Add", [z, y], (1, 8, 6, 6))], (1, 8, 6, 6), alpha=0.2)
    z = b.op("Conv", [z, fz.weight(b, (8, 8, 1, 1), 8)], (1, 8, 6, 6))
    z = b.op("Clip", [z, fz.scalar(b, 0.0), fz.scalar(b, 6.0)], (1, 8, 6, 6))
    f = b.op("Flatten", [b.op("GlobalAveragePool", [z], (1, 8, 1, 1))], (1, 8), axis=1)
    f = b.op("Relu", [b.op("Gemm", [f, fz.weight(b, (8, 16), 8), b.const(b.rng.standard_normal(16))], (1, 16))], (1, 16))
    w_t = b.op("Transpose", [fz.weight(b, (5, 16), 16)], (16, 5), perm=[1, 0])
    m = b.op("MatMul", [b.op("Mul", [f, fz.scalar(b, 0.5)], (1, 16)), w_t], (1, 5))
    return m


def test_models_onnxruntime_saved_after_optimising_match_ort():
    model, feeds = ort_optimized(fused_by_ort)
    fused = {n.op_type for n in model.graph.node if n.domain == "com.microsoft"}
    assert {"FusedConv", "FusedGemm"} <= fused, fused
    out = fz.check_cases({"fused_by_ort": (model, feeds)})
    assert not out.failures, out.failures
    # Every node ORT fused (and the plain ops beside them) runs in Bolt's provider.
    ops = provider_assignment(model)
    fused_ops = [(op, on_bolt) for op, on_bolt in ops if op.startswith("Fused")]
    assert fused_ops and all(on_bolt for _, on_bolt in fused_ops), ops


def layer_norm(b, x, shape, rms=False):
    """LayerNormalization as exporters before opset 17 write it (RMS: without the mean)."""
    row = shape[:-1] + (1,)
    c = x if rms else b.op("Sub", [x, b.op("ReduceMean", [x], row, axes=[-1])], shape)
    v = b.op("ReduceMean", [b.op("Pow", [c, fz.scalar(b, 2.0)], shape)], row, axes=[-1])
    y = b.op("Div", [c, b.op("Sqrt", [b.op("Add", [v, fz.scalar(b, 1e-5)], row)], row)], shape)
    y = b.op("Mul", [y, b.const(1 + 0.1 * b.rng.standard_normal(shape[-1]))], shape)
    return y if rms else b.op("Add", [y, b.const(0.1 * b.rng.standard_normal(shape[-1]))], shape)


def linear(b, x, shape, n):
    y = b.op("MatMul", [x, fz.weight(b, (shape[-1], n), shape[-1])], shape[:-1] + (n,))
    return b.op("Add", [y, b.const(0.1 * b.rng.standard_normal(n))], shape[:-1] + (n,))


def transformer_block_fused_by_ort(b):
    s, f = (2, 8, 32), (2, 8, 64)
    x = b.input(s)
    y = layer_norm(b, b.op("Add", [linear(b, x, s, 32), x], s), s)  # SkipLayerNormalization
    h = linear(b, y, s, 64)
    erf = b.op("Erf", [b.op("Div", [h, fz.scalar(b, 1.4142135)], f)], f)
    h = b.op("Mul", [b.op("Mul", [h, b.op("Add", [erf, fz.scalar(b, 1.0)], f)], f), fz.scalar(b, 0.5)], f)  # BiasGelu
    h = linear(b, h, f, 32)
    cube = b.op("Mul", [b.op("Pow", [h, fz.scalar(b, 3.0)], s), fz.scalar(b, 0.044715)], s)
    inner = b.op("Mul", [b.op("Add", [h, cube], s), fz.scalar(b, 0.7978845608)], s)
    h = b.op("Mul", [b.op("Mul", [h, fz.scalar(b, 0.5)], s), b.op("Add", [b.op("Tanh", [inner], s), fz.scalar(b, 1.0)], s)], s)  # FastGelu
    h = b.op("Mul", [h, b.op("Sigmoid", [h], s)], s)  # QuickGelu (SiLU, alpha 1)
    h = b.op("Mul", [h, b.op("Sigmoid", [b.op("Mul", [h, fz.scalar(b, 1.702)], s)], s)], s)  # QuickGelu
    h = layer_norm(b, layer_norm(b, h, s, rms=True), s)  # SimplifiedLayerNormalization, LayerNormalization
    t = b.op("Transpose", [h], (2, 32, 8), perm=[0, 2, 1])  # FusedMatMul's transA
    return b.op("MatMul", [t, fz.weight(b, (8, 16), 8)], (2, 32, 16))


@pytest.mark.parametrize("opset", [13, 17])
def test_transformer_blocks_onnxruntime_saved_after_optimising_match_ort(opset):
    # What onnxruntime's transformer fusions write: com.microsoft SkipLayerNormalization,
    # BiasGelu, FastGelu, QuickGelu; SimplifiedLayerNormalization and (before opset 17, its
    # contrib version) LayerNormalization in ONNX's own domain; a FusedMatMul whose transposed
    # operand's rank the file does not declare. Bolt reads them as the ONNX ops they fused.
    model, feeds = ort_optimized(transformer_block_fused_by_ort, opset=opset)
    ops = {(n.domain, n.op_type) for n in model.graph.node}
    ms = "com.microsoft"
    fused = {(ms, "SkipLayerNormalization"), (ms, "BiasGelu"), (ms, "FastGelu"), (ms, "QuickGelu"), (ms, "FusedMatMul"),
             ("", "SimplifiedLayerNormalization"), ("", "LayerNormalization")}
    assert fused <= ops, ops
    assert not model.graph.value_info
    out = fz.check_cases({f"transformer_block_opset{opset}": (model, feeds)})
    assert not out.failures, out.failures
    # Every node runs in Bolt's provider.
    ops = provider_assignment(model)
    assert all(on_bolt for _, on_bolt in ops), ops


def ort_attention(rng, mask: str, causal: bool, scale, v_hidden: int):
    """One com.microsoft Attention node (what onnxruntime's transformer optimiser writes for a
    BERT layer's self-attention: packed Q/K/V weights, 4 heads) over [batch, seq, 32], with a
    raw int32 mask of rank `mask` ("none", "2d": [batch, keys], "3d": [batch, queries, keys])."""
    from onnx import TensorProto, helper, numpy_helper

    b, s, hidden, heads = 2, 7, 32, 4
    total = 2 * hidden + v_hidden
    inits = [numpy_helper.from_array((rng.standard_normal((hidden, total)) / np.sqrt(hidden)).astype(np.float32), "w")]
    # onnxruntime's CPU kernel needs the bias (it crashes without one).
    inits.append(numpy_helper.from_array((0.1 * rng.standard_normal(total)).astype(np.float32), "b"))
    inputs = ["x", "w", "b"]
    feeds = {"x": rng.standard_normal((b, s, hidden)).astype(np.float32)}
    graph_inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden])]
    if mask != "none":
        shape = (b, s) if mask == "2d" else (b, s, s)
        m = (rng.random(shape) > 0.3).astype(np.int32)
        m[0] = 0  # the first batch item attends to nothing: onnxruntime's shifted softmax
        feeds["mask"] = m
        dims = ["batch", "seq"] if mask == "2d" else ["batch", "seq", "seq"]
        graph_inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, dims))
        inputs.append("mask")
    attrs = {"num_heads": heads, "unidirectional": int(causal)}
    if scale is not None:
        attrs["scale"] = scale
    if v_hidden != hidden:
        attrs["qkv_hidden_sizes"] = [hidden, hidden, v_hidden]
    node = helper.make_node("Attention", inputs, ["y"], name="attention", domain="com.microsoft", **attrs)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", v_hidden])
    model = helper.make_model(helper.make_graph([node], "ort_attention", graph_inputs, [y], inits),
                              opset_imports=[helper.make_opsetid("", 14), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model, feeds


ATTENTION_FORMS = [  # mask, unidirectional, scale, V's hidden size
    ("none", False, None, 32),
    ("2d", False, None, 32),
    ("2d", True, 0.3, 32),
    ("3d", False, None, 16),
    ("3d", True, None, 32),
]


def test_onnxruntime_fused_attention_matches_ort():
    # com.microsoft Attention is read as the packed projection, Q/K/V slices and ONNX's
    # Attention (one fused attention kernel): against onnxruntime's own Attention kernel, three
    # ways, and through Bolt's provider, which runs every node.
    rng = np.random.default_rng(11)
    cases = {f"attention_{m}_{'causal' if c else 'full'}_scale{s}_v{v}": ort_attention(rng, m, c, s, v)
             for m, c, s, v in ATTENTION_FORMS}
    out = fz.check_cases(cases)
    assert not out.failures, out.failures
    for name, (model, _) in cases.items():
        ops = provider_assignment(model)
        assert all(on_bolt for _, on_bolt in ops), (name, ops)


# Each group's graphs, planned by one rewrite, against onnxruntime three ways (fuzz_graphs.py).
PLANNER_REWRITES = [
    ("reductions_over_every_axis", REDUCTIONS_OVER_EVERY_AXIS),  # Planned as one-row stitched reductions (merged axes) and scalar stitched kernels.
    ("negative_pads", NEGATIVE_PADS),  # A Slice of the cropped side, a pad kernel of the grown one.
    ("conv_transposes", CONV_TRANSPOSES),  # Convs over zero-spread inputs, uneven pads as pad kernels.
    ("layout_views", LAYOUT_VIEWS),  # Channels-last activations through views, norms and the model's transposes.
    ("einsums", EINSUMS),  # Batched GEMM kernels with merged labels, one-row GEMMs.
    ("qdq", QDQ),  # Float ops that stitch; dequantized weights folded.
]


@pytest.mark.parametrize("group", PLANNER_REWRITES, ids=[name for name, _ in PLANNER_REWRITES])
def test_planner_rewrites_match_ort(group):
    _, builds = group
    out = fz.check_cases({f.__name__: regression(f) for f in builds})
    assert not out.failures, out.failures


def test_fuzz_corpus_replays_clean():
    cases = fz.corpus_cases()
    assert cases, f"empty corpus {fz.CORPUS}"
    out = fz.check_cases(cases)
    assert not out.failures, out.failures


def test_fixed_fuzz_seeds_run_clean():
    out = fz.check_cases(fz.seed_cases(0, CI_SEEDS))
    assert not out.failures, {k: v for k, v in list(out.failures.items())[:5]}
    # The generator mostly builds graphs Bolt takes: a check that Bolt ran nothing proves nothing.
    assert out.claimed >= 0.8 * out.anchors, (out.claimed, out.anchors)
