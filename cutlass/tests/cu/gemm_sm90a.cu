// CUTLASS 3.x GEMM for Hopper: f16 inputs, f32 accumulation, f16 output, built with the
// CollectiveBuilder as a TMA warp-specialized (cooperative) kernel. Needs sm_90a (wgmma, setmaxnreg).
// Compiled (not run) by tests/compile_gemm.rs to prove the toolchain builds sm_90a CUTLASS kernels.
#include <cutlass/cutlass.h>
#include <cute/tensor.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>  // from tools/util/include

using namespace cute;

using Element = cutlass::half_t;
using Accumulator = float;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutC = cutlass::layout::RowMajor;
constexpr int kAlignment = 128 / cutlass::sizeof_bits<Element>::value;

using TileShape = Shape<_128, _128, _64>;
using ClusterShape = Shape<_1, _2, _1>;

using CollectiveEpilogue = cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, Accumulator, Accumulator,
    Element, LayoutC, kAlignment, Element, LayoutC, kAlignment,
    cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

using CollectiveMainloop = cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    Element, LayoutA, kAlignment, Element, LayoutB, kAlignment, Accumulator,
    TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

using GemmKernel = cutlass::gemm::kernel::GemmUniversal<
    Shape<int, int, int, int>, CollectiveMainloop, CollectiveEpilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

// Host entry point: instantiates the kernel. D = alpha * A @ B + beta * C.
extern "C" int bolt_test_gemm_sm90a(int m, int n, int k, float alpha, const Element* a,
                                    const Element* b, float beta, const Element* c, Element* d,
                                    cudaStream_t stream) {
  auto stride_a = cutlass::make_cute_packed_stride(typename Gemm::GemmKernel::StrideA{}, {m, k, 1});
  auto stride_b = cutlass::make_cute_packed_stride(typename Gemm::GemmKernel::StrideB{}, {n, k, 1});
  auto stride_c = cutlass::make_cute_packed_stride(typename Gemm::GemmKernel::StrideC{}, {m, n, 1});
  auto stride_d = cutlass::make_cute_packed_stride(typename Gemm::GemmKernel::StrideD{}, {m, n, 1});
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {m, n, k, 1},
      {a, stride_a, b, stride_b},
      {{alpha, beta}, c, stride_c, d, stride_d}};
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) {
    return -1;
  }
  // Cooperative kernels need no workspace for the default (non split-K) tile scheduler.
  cutlass::Status status = gemm.initialize(args, nullptr, stream);
  if (status != cutlass::Status::kSuccess) {
    return static_cast<int>(status);
  }
  return static_cast<int>(gemm.run(stream));
}
