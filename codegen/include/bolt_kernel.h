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
// (the library manifest says which); back-to-back chain kernels take the BoltB2b* structs
// below. Functions never throw: C++ exceptions and CUTLASS failures become status codes.
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

// ---- Back-to-back chains (one kernel for GEMM -> GEMM or Conv -> 1x1 Conv) ------------------
// A chain kernel exports the same three functions; `problem` points to a BoltB2bGemmProblem or
// BoltB2bConv2dProblem and `run` takes a BoltB2bArgs. Layer i reads layer i-1's output from
// registers or shared memory; only the last layer's output D is written to memory.
#define BOLT_B2B_MAX_LAYERS 4

// Layer i computes [m, n[i]] = epilogue_i([m, k_i] @ B_i) with k_0 = k and k_i = n[i-1].
// A and D (and C, when the last epilogue reads it) are row-major; each weight B_i is
// column-major K_i x N_i, i.e. an [n[i], k_i] row-major array (ONNX Gemm transB = 1), packed.
typedef struct BoltB2bGemmProblem {
  int64_t layers;  // number of layers (the kernel's own count)
  int64_t m, k;
  int64_t n[BOLT_B2B_MAX_LAYERS];
  int64_t lda, ldc, ldd;
} BoltB2bGemmProblem;

// conv[0] is any conv the kernel's first layer supports; conv[i > 0] must be 1x1, stride 1,
// unpadded, on conv[i-1]'s output (n, h, w = n, p, q of conv[i-1]; c = conv[i-1].k).
typedef struct BoltB2bConv2dProblem {
  int64_t layers;
  BoltConv2dProblem conv[BOLT_B2B_MAX_LAYERS];
} BoltB2bConv2dProblem;

// One layer's weights, its per-column bias (null unless its epilogue reads one) and scalars
// (beta is read by the last layer's epilogue only, when it has beta * C).
typedef struct BoltB2bLayerArgs {
  const void* b;
  const void* bias;
  float alpha;
  float beta;
} BoltB2bLayerArgs;

typedef struct BoltB2bArgs {
  const void* a;  // layer 0's A operand (activations)
  const void* c;  // the last layer's source / residual, when its epilogue reads one
  void* d;        // the last layer's output
  BoltB2bLayerArgs layer[BOLT_B2B_MAX_LAYERS];
} BoltB2bArgs;

#ifdef __cplusplus
}
#endif

#endif  // BOLT_KERNEL_H
