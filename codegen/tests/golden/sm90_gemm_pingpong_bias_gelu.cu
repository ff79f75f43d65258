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
// bolt_sm90_gemm_pingpong_bias_gelu: Gemm F16->F16 (acc F32) rcr, tile 64x128x64, cluster 2x1x1, TmaWarpSpecializedPingpong + Tma epilogue, align 8/8/8
// epilogue: gelu_erf(alpha * acc + bias[col])
// =============================================================================================
namespace bolt_sm90_gemm_pingpong_bias_gelu {

using namespace cute;
using namespace cutlass::epilogue::fusion;

using ElementA = cutlass::half_t;
using ElementB = cutlass::half_t;
using ElementC = void;  // void: the epilogue never reads C
using ElementD = cutlass::half_t;
using ElementBias = cutlass::half_t;
using ElementAccumulator = float;
using ElementCompute = float;
using ElementScalar = float;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutC = cutlass::layout::RowMajor;
constexpr int AlignmentA = 8;
constexpr int AlignmentB = 8;
constexpr int AlignmentC = 8;
constexpr int AlignmentD = 8;
constexpr int AlignmentBias = 8;
constexpr auto RoundStyle = cutlass::FloatRoundStyle::round_to_nearest;

using TileShape = Shape<_64, _128, _64>;
using ClusterShape = Shape<_2, _1, _1>;
using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
using TileScheduler = cutlass::gemm::PersistentScheduler;

using EpilogueSchedule = cutlass::epilogue::TmaWarpSpecialized;

// The epilogue tree as an epilogue visitor tree.
using Fusion =
    Sm90EVT<Sm90Compute<cutlass::epilogue::thread::GELU, ElementD, ElementCompute, RoundStyle>,
        Sm90EVT<Sm90Compute<cutlass::homogeneous_multiply_add, ElementCompute, ElementCompute, RoundStyle>,
            Sm90ScalarBroadcast<ElementScalar>,
            Sm90AccFetch,
            Sm90RowBroadcast<0, TileShape, ElementBias, ElementCompute, Stride<_0, _1, int64_t>, AlignmentBias>>>;

using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementCompute,
    ElementC, LayoutC, AlignmentC, ElementD, LayoutC, AlignmentD,
    EpilogueSchedule, Fusion>::CollectiveOp;

using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementA, LayoutA, AlignmentA, ElementB, LayoutB, AlignmentB, ElementAccumulator,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    KernelSchedule>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue, TileScheduler>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

struct Kernel {
  using Problem = BoltGemmProblem;
  using Args = BoltArgs;
  using Operator = Gemm;

  // Sizes, leading dimensions and batch strides: what can_implement can see.
  static BoltStatus check_problem(BoltGemmProblem const& p) {
    if (p.m <= 0 || p.n <= 0 || p.k <= 0 || p.m > INT_MAX || p.n > INT_MAX || p.k > INT_MAX) {
      return BOLT_ERR_UNSUPPORTED_PROBLEM;
    }
    if (p.batch != 1) {
      return BOLT_ERR_UNSUPPORTED_PROBLEM;
    }
    if (p.lda < p.k || p.ldb < p.k || p.ldd < p.n) {
      return BOLT_ERR_UNSUPPORTED_PROBLEM;
    }
    // TMA (and the vectorised epilogue) need each operand's contiguous extent, leading dimension
    // and batch stride to keep its alignment.
    if (p.k % AlignmentA || p.lda % AlignmentA || p.k % AlignmentB || p.ldb % AlignmentB ||
        p.n % AlignmentD || p.ldd % AlignmentD) {
      return BOLT_ERR_MISALIGNED_OPERAND;
    }
    return BOLT_OK;
  }

  static BoltStatus check_pointers(BoltArgs const& args) {
    if (!args.a || !args.b || !args.d || !args.bias) {
      return BOLT_ERR_NULL_ARGUMENT;
    }
    if (!bolt_detail::is_aligned(args.a, AlignmentA * sizeof(ElementA)) ||
        !bolt_detail::is_aligned(args.b, AlignmentB * sizeof(ElementB)) ||
        !bolt_detail::is_aligned(args.bias, sizeof(ElementBias)) ||  // read element-wise
        !bolt_detail::is_aligned(args.d, AlignmentD * sizeof(ElementD))) {
      return BOLT_ERR_MISALIGNED_OPERAND;
    }
    return BOLT_OK;
  }

  // A workspace (stream-K's partials and flags) is re-initialised before every launch, as
  // CUTLASS's own run(arguments, workspace, stream) does: a few memsets, capturable in a graph.
  static cutlass::Status reset_workspace(Gemm::Arguments const& arguments, void* workspace, cudaStream_t stream) {
    return GemmKernel::initialize_workspace(arguments, workspace, stream);
  }

  // With all-null args for can_implement and workspace queries.
  static Gemm::Arguments make_arguments(BoltGemmProblem const& p, BoltArgs const& args) {
    [[maybe_unused]] float const alpha = args.alpha;
    [[maybe_unused]] float const beta = args.beta;
    [[maybe_unused]] auto const* bias = static_cast<ElementBias const*>(args.bias);
    typename GemmKernel::StrideA stride_a = cute::make_stride(p.lda, cute::Int<1>{}, int64_t(0));
    typename GemmKernel::StrideB stride_b = cute::make_stride(p.ldb, cute::Int<1>{}, int64_t(0));
    typename GemmKernel::StrideC stride_c = cute::make_stride(p.ldc, cute::Int<1>{}, int64_t(0));
    typename GemmKernel::StrideD stride_d = cute::make_stride(p.ldd, cute::Int<1>{}, int64_t(0));
    typename Gemm::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {int(p.m), int(p.n), int(p.k), int(p.batch)},
        {static_cast<ElementA const*>(args.a), stride_a, static_cast<ElementB const*>(args.b), stride_b},
        { {}, static_cast<ElementC const*>(args.c), stride_c, static_cast<ElementD*>(args.d), stride_d },
        bolt_sm90::hardware_info()};
    arguments.epilogue.thread = {
        {
            {{alpha}},
            {},
            {bias, ElementBias(0), {}},
            {}  // homogeneous_multiply_add
        },
        {}  // GELU
    };
    return arguments;
  }
};

}  // namespace bolt_sm90_gemm_pingpong_bias_gelu

extern "C" BoltStatus bolt_sm90_gemm_pingpong_bias_gelu_can_implement(const void *problem) {
  return bolt_detail::can_implement<bolt_sm90_gemm_pingpong_bias_gelu::Kernel>(problem);
}

extern "C" size_t bolt_sm90_gemm_pingpong_bias_gelu_workspace_size(const void *problem) {
  return bolt_detail::workspace_size<bolt_sm90_gemm_pingpong_bias_gelu::Kernel>(problem);
}

extern "C" size_t bolt_sm90_gemm_pingpong_bias_gelu_params_size(void) {
  return bolt_detail::params_size<bolt_sm90_gemm_pingpong_bias_gelu::Kernel>();
}

extern "C" BoltStatus bolt_sm90_gemm_pingpong_bias_gelu_initialize(
    const void *problem, const BoltArgs *args, void *workspace, size_t workspace_bytes, void *params,
    size_t params_bytes, void *stream) {
  return bolt_detail::initialize<bolt_sm90_gemm_pingpong_bias_gelu::Kernel>(
      problem, args, workspace, workspace_bytes, params, params_bytes, stream);
}

extern "C" BoltStatus bolt_sm90_gemm_pingpong_bias_gelu_update(void *params, const BoltArgs *args) {
  return bolt_detail::update<bolt_sm90_gemm_pingpong_bias_gelu::Kernel>(params, args);
}

extern "C" BoltStatus bolt_sm90_gemm_pingpong_bias_gelu_launch(void *params, void *stream) {
  return bolt_detail::launch<bolt_sm90_gemm_pingpong_bias_gelu::Kernel>(params, stream);
}
