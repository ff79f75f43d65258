// CUTLASS 2.x GEMM for Ampere: f16 inputs, f32 accumulation, f16 output, tensor-op 16x8x16.
// Compiled (not run) by tests/compile_gemm.rs to prove the toolchain builds sm_80 CUTLASS kernels.
#include <cutlass/cutlass.h>
#include <cutlass/gemm/device/gemm.h>
#include <cutlass/epilogue/thread/linear_combination.h>

using Element = cutlass::half_t;
using Accumulator = float;

using Gemm = cutlass::gemm::device::Gemm<
    Element, cutlass::layout::RowMajor,     // A
    Element, cutlass::layout::ColumnMajor,  // B
    Element, cutlass::layout::RowMajor,     // C / D
    Accumulator,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<128, 128, 32>,  // threadblock tile
    cutlass::gemm::GemmShape<64, 64, 32>,    // warp tile
    cutlass::gemm::GemmShape<16, 8, 16>,     // mma.sync instruction
    cutlass::epilogue::thread::LinearCombination<
        Element, 128 / cutlass::sizeof_bits<Element>::value, Accumulator, Accumulator>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<>,
    3>;  // pipeline stages

// Host entry point: instantiates the kernel. D = alpha * A @ B + beta * C.
extern "C" int bolt_test_gemm_sm80(int m, int n, int k, float alpha, const Element* a,
                                   const Element* b, float beta, const Element* c, Element* d,
                                   cudaStream_t stream) {
  Gemm::Arguments args({m, n, k}, {a, k}, {b, k}, {c, n}, {d, n}, {alpha, beta});
  Gemm gemm;
  cutlass::Status status = gemm(args, nullptr, stream);
  return static_cast<int>(status);
}
