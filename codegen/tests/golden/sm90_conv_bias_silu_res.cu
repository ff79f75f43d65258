// ---- Bolt sm90 prelude: shared by every sm90 kernel of a translation unit (guarded) ----------
#ifndef BOLT_SM90_PRELUDE
#define BOLT_SM90_PRELUDE

// Headers come from the unit prologue (bolt_codegen::sm90::includes).

namespace bolt_sm90 {

// Activations CUTLASS lacks. Like CUTLASS's parameterised ones (LeakyReLU, Clamp) they take their
// parameters through `Arguments`, which the EVT's argument struct carries.

// ONNX HardSigmoid: max(0, min(1, alpha * x + beta)).
template <class T>
struct HardSigmoid {
  struct Arguments {
    T alpha = T(0.2f);
    T beta = T(0.5f);
  };

  CUTLASS_HOST_DEVICE T operator()(T const& x, T const& alpha, T const& beta) const {
    cutlass::maximum<T, /*PropagateNaN=*/true> mx;
    cutlass::minimum<T, /*PropagateNaN=*/true> mn;
    return mn(mx(alpha * x + beta, T(0)), T(1));
  }

  CUTLASS_HOST_DEVICE T operator()(T const& x, Arguments const& args = Arguments()) const {
    return (*this)(x, args.alpha, args.beta);
  }
};

template <class T, int N>
struct HardSigmoid<cutlass::Array<T, N>> {
  using Arguments = typename HardSigmoid<T>::Arguments;

  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x,
                                                      Arguments const& args = Arguments()) const {
    HardSigmoid<T> op;
    cutlass::Array<T, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      y[i] = op(x[i], args.alpha, args.beta);
    }
    return y;
  }
};

// softplus(x) = max(x, 0) + log1p(exp(-|x|)): no overflow for large |x|.
template <class T>
struct Softplus {
  CUTLASS_HOST_DEVICE T operator()(T const& x) const {
    float v = static_cast<float>(x);
    return T(fmaxf(v, 0.f) + log1pf(expf(-fabsf(v))));
  }
};

template <class T, int N>
struct Softplus<cutlass::Array<T, N>> {
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& x) const {
    Softplus<T> op;
    cutlass::Array<T, N> y;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < N; ++i) {
      y[i] = op(x[i]);
    }
    return y;
  }
};

// Hardware info for the kernel arguments: the current device's SM count, never 0. CUTLASS would
// query it itself when given 0, but stream-K's heuristics divide by it, and a machine without a
// GPU reports 0 (workspace_size would die of SIGFPE there instead of answering).
inline cutlass::KernelHardwareInfo hardware_info() {
  cutlass::KernelHardwareInfo hw;
  int sm_count = cutlass::KernelHardwareInfo::query_device_multiprocessor_count();
  if (sm_count <= 0) {
    (void)cudaGetLastError();  // clear the "no device" error: it is not the caller's
    sm_count = 1;
  }
  hw.sm_count = sm_count;
  return hw;
}

}  // namespace bolt_sm90

#endif  // BOLT_SM90_PRELUDE

// =============================================================================================
// bolt_sm90_conv_bias_silu_res: Conv2dFprop(ConvFeatures { unit_stride: false, groups: None, analytic: false }) F16->F16 (acc F32) nhwc, tile 128x128x64, cluster 1x1x1, TmaWarpSpecializedCooperative + Tma epilogue, align 8/8/8
// epilogue: silu((alpha * acc + bias[col]) + C)
// =============================================================================================
namespace bolt_sm90_conv_bias_silu_res {

using namespace cute;
using namespace cutlass::epilogue::fusion;

// GEMM view of fprop: M = N*P*Q output pixels, N = K output channels, K = R*S*C.
using ElementA = cutlass::half_t;  // activations, NHWC
using ElementB = cutlass::half_t;  // filters, KRSC
using ElementC = cutlass::half_t;
using ElementD = cutlass::half_t;  // output, NPQK
using ElementBias = cutlass::half_t;
using ElementAccumulator = float;
using ElementCompute = float;
using ElementScalar = float;
using LayoutA = cutlass::layout::TensorNHWC;
using LayoutB = cutlass::layout::TensorNHWC;
using LayoutC = cutlass::layout::TensorNHWC;
constexpr int AlignmentA = 8;
constexpr int AlignmentB = 8;
constexpr int AlignmentC = 8;
constexpr int AlignmentD = 8;
constexpr int AlignmentBias = 8;
constexpr auto RoundStyle = cutlass::FloatRoundStyle::round_to_nearest;
constexpr cutlass::conv::Operator ConvOp = cutlass::conv::Operator::kFprop;

using TileShape = Shape<_128, _128, Shape<_64>>;
using ClusterShape = Shape<_1, _1, _1>;
// CUTLASS 4.2's sm90 conv mainloop has one schedule: a (non-persistent) warp-specialized kernel
// with one producer and one consumer warp group (cooperative and ping-pong are GEMM-only).
using KernelSchedule = cutlass::conv::KernelImplicitTmaWarpSpecializedSm90;
using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;

// The epilogue tree as an epilogue visitor tree.
using Fusion =
    Sm90EVT<Sm90Compute<cutlass::epilogue::thread::SiLu, ElementD, ElementCompute, RoundStyle>,
        Sm90EVT<Sm90Compute<cutlass::plus, ElementCompute, ElementCompute, RoundStyle>,
            Sm90EVT<Sm90Compute<cutlass::homogeneous_multiply_add, ElementCompute, ElementCompute, RoundStyle>,
                Sm90ScalarBroadcast<ElementScalar>,
                Sm90AccFetch,
                Sm90RowBroadcast<0, TileShape, ElementBias, ElementCompute, Stride<_0, _1, int64_t>, AlignmentBias>>,
            Sm90SrcFetch<ElementC>>>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute,
    ElementC, LayoutC, AlignmentC, ElementD, LayoutC, AlignmentD,
    EpilogueSchedule, Fusion>::CollectiveOp;

using CollectiveMainloop = typename cutlass::conv::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ConvOp,
    ElementA, LayoutA, AlignmentA, ElementB, LayoutB, AlignmentB, ElementAccumulator,
    TileShape, ClusterShape,
    cutlass::conv::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using ProblemShape = cutlass::conv::ConvProblemShape<ConvOp, 2>;
// The scheduler is spelled out (void selects the same one) because a void fourth argument also
// matches CUTLASS 2.x's GemmUniversal specialization when a unit includes 2.x GEMM headers.
using ConvKernel = cutlass::conv::kernel::ConvUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue,
                                                        cutlass::gemm::PersistentScheduler>;
using Conv = cutlass::conv::device::ConvUniversalAdapter<ConvKernel>;

struct Kernel {
  using Problem = BoltConv2dProblem;
  using Args = BoltArgs;
  using Operator = Conv;

  // Sizes, padding, strides: what can_implement can see.
  static BoltStatus check_problem(BoltConv2dProblem const& p) {
    if (p.n <= 0 || p.h <= 0 || p.w <= 0 || p.c <= 0 || p.k <= 0 || p.r <= 0 || p.s <= 0 || p.p <= 0 ||
        p.q <= 0 || p.pad_h < 0 || p.pad_w < 0 || p.stride_h <= 0 || p.stride_w <= 0 || p.dilation_h <= 0 ||
        p.dilation_w <= 0) {
      return BOLT_ERR_UNSUPPORTED_PROBLEM;
    }
    if (p.groups != 1) {  // the sm90 conv mainloop has no groups
      return BOLT_ERR_UNSUPPORTED_PROBLEM;
    }
    // The TMA im2col descriptor's traversal strides are at most 8 (cuTensorMapEncodeIm2col);
    // CUTLASS checks this only with assert, compiled out under -DNDEBUG.
    if (p.stride_h > 8 || p.stride_w > 8) {
      return BOLT_ERR_UNSUPPORTED_PROBLEM;
    }
    // Bolt's problem has one padding per dimension: the output size must be the one it gives.
    if (p.p != (p.h + 2 * p.pad_h - p.dilation_h * (p.r - 1) - 1) / p.stride_h + 1 ||
        p.q != (p.w + 2 * p.pad_w - p.dilation_w * (p.s - 1) - 1) / p.stride_w + 1) {
      return BOLT_ERR_UNSUPPORTED_PROBLEM;
    }
    // TMA needs the contiguous (channel) extents to keep each operand's alignment.
    if (p.c % AlignmentA || p.c % AlignmentB || p.k % AlignmentD) {
      return BOLT_ERR_MISALIGNED_OPERAND;
    }
    return BOLT_OK;
  }

  static BoltStatus check_pointers(BoltArgs const& args) {
    if (!args.a || !args.b || !args.d || !args.c || !args.bias) {
      return BOLT_ERR_NULL_ARGUMENT;
    }
    if (!bolt_detail::is_aligned(args.a, AlignmentA * sizeof(ElementA)) ||
        !bolt_detail::is_aligned(args.b, AlignmentB * sizeof(ElementB)) ||
        !bolt_detail::is_aligned(args.c, AlignmentC * sizeof(ElementD)) ||
        !bolt_detail::is_aligned(args.bias, sizeof(ElementBias)) ||  // read element-wise
        !bolt_detail::is_aligned(args.d, AlignmentD * sizeof(ElementD))) {
      return BOLT_ERR_MISALIGNED_OPERAND;
    }
    return BOLT_OK;
  }

  // A workspace is re-initialised before every launch, as CUTLASS's own
  // run(arguments, workspace, stream) does: a few memsets, capturable in a graph.
  static cutlass::Status reset_workspace(Conv::Arguments const& arguments, void* workspace, cudaStream_t stream) {
    return Conv::ConvKernel::initialize_workspace(arguments, workspace, stream);
  }

  // With all-null args for can_implement and workspace queries.
  static Conv::Arguments make_arguments(BoltConv2dProblem const& p, BoltArgs const& args) {
    [[maybe_unused]] float const alpha = args.alpha;
    [[maybe_unused]] float const beta = args.beta;
    [[maybe_unused]] auto const* bias = static_cast<ElementBias const*>(args.bias);
    ProblemShape shape(cutlass::conv::Mode::kCrossCorrelation,
                       {p.n, p.h, p.w, p.c},  // activations NHWC
                       {p.k, p.r, p.s, p.c},  // filters KRSC
                       {p.pad_h, p.pad_w},    // lower padding
                       {p.pad_h, p.pad_w},    // upper padding
                       {p.stride_h, p.stride_w},
                       {p.dilation_h, p.dilation_w},
                       /*groups=*/1);
    // Output strides ((Q, P, N), K, L): the packed NPQK strides, innermost first.
    typename ConvKernel::StrideC stride_c;
    typename ConvKernel::StrideD stride_d;
    cute::for_each(cute::make_seq<cute::rank<0>(typename ConvKernel::StrideC{})>{}, [&](auto i) {
      cute::get<0, i>(stride_c) = shape.stride_C[ProblemShape::RankT - 2 - i];
      cute::get<0, i>(stride_d) = shape.stride_C[ProblemShape::RankT - 2 - i];
    });
    typename Conv::Arguments arguments{
        shape,
        {static_cast<ElementA const*>(args.a), static_cast<ElementB const*>(args.b)},
        { {}, static_cast<ElementC const*>(args.c), stride_c, static_cast<ElementD*>(args.d), stride_d },
        bolt_sm90::hardware_info()};
    arguments.epilogue.thread = {
        {
            {
                {{alpha}},
                {},
                {bias, ElementBias(0), {}},
                {}  // homogeneous_multiply_add
            },
            {},
            {}  // plus
        },
        {}  // SiLu
    };
    return arguments;
  }
};

}  // namespace bolt_sm90_conv_bias_silu_res

extern "C" BoltStatus bolt_sm90_conv_bias_silu_res_can_implement(const void *problem) {
  return bolt_detail::can_implement<bolt_sm90_conv_bias_silu_res::Kernel>(problem);
}

extern "C" size_t bolt_sm90_conv_bias_silu_res_workspace_size(const void *problem) {
  return bolt_detail::workspace_size<bolt_sm90_conv_bias_silu_res::Kernel>(problem);
}

extern "C" size_t bolt_sm90_conv_bias_silu_res_params_size(void) {
  return bolt_detail::params_size<bolt_sm90_conv_bias_silu_res::Kernel>();
}

extern "C" BoltStatus bolt_sm90_conv_bias_silu_res_initialize(
    const void *problem, const BoltArgs *args, void *workspace, size_t workspace_bytes, void *params,
    size_t params_bytes, void *stream) {
  return bolt_detail::initialize<bolt_sm90_conv_bias_silu_res::Kernel>(
      problem, args, workspace, workspace_bytes, params, params_bytes, stream);
}

extern "C" BoltStatus bolt_sm90_conv_bias_silu_res_update(void *params, const BoltArgs *args) {
  return bolt_detail::update<bolt_sm90_conv_bias_silu_res::Kernel>(params, args);
}

extern "C" BoltStatus bolt_sm90_conv_bias_silu_res_launch(void *params, void *stream) {
  return bolt_detail::launch<bolt_sm90_conv_bias_silu_res::Kernel>(params, stream);
}
