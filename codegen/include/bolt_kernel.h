// Bolt's C ABI for generated kernels, modelled on CUTLASS's library Operation interface
// (can_implement, workspace size, run). Every generated kernel exports three functions named
// after its symbol:
//
//   BoltStatus <symbol>_can_implement(const void* problem);
//   size_t     <symbol>_workspace_size(const void* problem);
//   BoltStatus <symbol>_run(const void* problem, const BoltArgs* args, void* workspace,
//                           void* stream /* cudaStream_t */);
//
// `problem` points to a BoltGemmProblem or BoltConv2dProblem according to the kernel's family
// (the library manifest says which). Functions never throw: C++ exceptions and CUTLASS
// failures become status codes.
#ifndef BOLT_KERNEL_H
#define BOLT_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BOLT_ABI_VERSION 1

typedef enum BoltStatus {
  BOLT_OK = 0,
  BOLT_ERR_NULL_ARGUMENT = 1,          // a required pointer is null
  BOLT_ERR_MISALIGNED_OPERAND = 2,     // a leading dimension or pointer breaks the kernel's alignment
  BOLT_ERR_UNSUPPORTED_PROBLEM = 3,    // sizes, strides or groups the kernel cannot do
  BOLT_ERR_WORKSPACE_TOO_SMALL = 4,
  BOLT_ERR_CUTLASS_INTERNAL = 5,       // CUTLASS's initialize/run reported an error
  BOLT_ERR_LAUNCH_FAILED = 6,          // cudaGetLastError after launch
  BOLT_ERR_UNKNOWN = 7
} BoltStatus;

// D = epilogue(A @ B): A is M x K, B is K x N, C/D are M x N, in the kernel's layouts.
// Batched kernels run `batch` problems, each operand advanced by its batch stride
// (in elements); batch = 1 for plain GEMMs.
typedef struct BoltGemmProblem {
  int64_t m, n, k, batch;
  int64_t lda, ldb, ldc, ldd;
  int64_t batch_stride_a, batch_stride_b, batch_stride_c, batch_stride_d;
} BoltGemmProblem;

// NHWC activations (N, H, W, C), KRSC filters (K, R, S, C / groups), NPQK output.
typedef struct BoltConv2dProblem {
  int32_t n, h, w, c;
  int32_t k, r, s;
  int32_t p, q;  // output height and width
  int32_t pad_h, pad_w;
  int32_t stride_h, stride_w;
  int32_t dilation_h, dilation_w;
  int32_t groups;
} BoltConv2dProblem;

// Device pointers and epilogue scalars. `c` is the source/residual tensor (same shape as D)
// and `bias` the per-column vector, when the kernel's epilogue reads them; otherwise null.
typedef struct BoltArgs {
  const void* a;
  const void* b;
  const void* c;
  const void* bias;
  void* d;
  float alpha;
  float beta;
} BoltArgs;

#ifdef __cplusplus
}
#endif

#endif  // BOLT_KERNEL_H
