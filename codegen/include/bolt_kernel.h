// Bolt's C ABI for generated kernels, modelled on CUTLASS's library Operation interface
// (can_implement, get_host_workspace_size / get_device_workspace_size, initialize, run). Every
// generated kernel exports six functions named after its symbol (ARGS is BoltArgs for GEMM and
// conv kernels, BoltB2bArgs for back-to-back chain kernels, BoltGlueArgs for glue kernels,
// BoltStitchArgs for stitched kernels, BoltAttentionArgs for attention kernels,
// BoltRecurrentArgs for recurrent scan kernels):
//
//   BoltStatus <symbol>_can_implement(const void* problem);
//   size_t     <symbol>_workspace_size(const void* problem);   // device workspace bytes
//   size_t     <symbol>_params_size(void);                      // host params bytes
//   BoltStatus <symbol>_initialize(const void* problem, const ARGS* args,
//                                  void* workspace, size_t workspace_bytes,
//                                  void* params, size_t params_bytes, void* stream);
//   BoltStatus <symbol>_update(void* params, const ARGS* args);
//   BoltStatus <symbol>_launch(void* params, void* stream /* cudaStream_t */);
//
// `problem` points to a BoltGemmProblem or BoltConv2dProblem according to the kernel's family
// (the library manifest says which); chain kernels take the BoltB2b* structs below.
//
// Set-up is split from launch, so CUTLASS's Params are built once per shape, not per call:
// - can_implement and workspace_size are host-only (no GPU needed). The workspace size depends
//   on the problem (split-K semaphores, stream-K partials): size it per problem, never reuse a
//   smaller one. Stream-K kernels also size it by the GPU's SM count (1 without a GPU): ask
//   on the device that runs them.
// - initialize checks the problem and the arguments (as can_implement does, plus null and
//   misaligned pointers and the workspace: BOLT_ERR_WORKSPACE_TOO_SMALL when workspace_bytes is
//   below workspace_size), then builds the kernel's state (CUTLASS Params, TMA descriptors) in
//   `params`, a host buffer of at least params_size() bytes aligned to BOLT_PARAMS_ALIGNMENT,
//   owned by the caller. It may set kernel attributes and enqueue the workspace's first
//   initialisation on `stream`, so it needs the device current and is not meant for graph
//   capture. The state points into `workspace`: keep it allocated while the params are used.
//   The params hold no resources: free the buffer when done; do not copy it byte-wise (a
//   copy is not initialised: initialize again). On failure the params are left uninitialised.
// - update replaces the device pointers and scalars of `args` (same problem, same workspace),
//   for hosts that hand new buffers on every call (ONNX Runtime). Host-only; on failure the
//   params keep their previous arguments.
// - launch enqueues the kernel (and, for kernels that need it, the workspace's
//   re-initialisation) on `stream`: no allocation, no host synchronisation, so a sequence of
//   launches can be captured in a CUDA graph. Not thread-safe on one params buffer.
// Functions never throw: C++ exceptions and CUTLASS failures become status codes; update and
// launch answer BOLT_ERR_INVALID_PARAMS for a buffer that no successful initialize of this
// kernel filled.
#ifndef BOLT_KERNEL_H
#define BOLT_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BOLT_ABI_VERSION 6

// Alignment (bytes) of the params buffer given to initialize, update and launch (CUTLASS 3
// Params hold 128-byte-aligned members).
#define BOLT_PARAMS_ALIGNMENT 128

typedef enum BoltStatus {
  BOLT_OK = 0,
  BOLT_ERR_NULL_ARGUMENT = 1,          // a required pointer is null
  BOLT_ERR_MISALIGNED_OPERAND = 2,     // a leading dimension or pointer breaks the kernel's alignment
  BOLT_ERR_UNSUPPORTED_PROBLEM = 3,    // sizes, strides or groups the kernel cannot do
  BOLT_ERR_WORKSPACE_TOO_SMALL = 4,    // workspace null or below workspace_size(problem)
  BOLT_ERR_CUTLASS_INTERNAL = 5,       // CUTLASS's initialize/update reported an error (e.g. no device)
  BOLT_ERR_LAUNCH_FAILED = 6,          // the launch (or cudaGetLastError after it) failed
  BOLT_ERR_UNKNOWN = 7,
  BOLT_ERR_INVALID_PARAMS = 8          // params null, too small, misaligned, or not initialised by this kernel
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
// A chain kernel exports the same six functions; `problem` points to a BoltB2bGemmProblem or
// BoltB2bConv2dProblem and initialize/update take a BoltB2bArgs. Layer i reads layer i-1's output from
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

// ---- Glue kernels (layout and type conversions around the CUTLASS kernels) ------------------
// Transposes (NCHW <-> NHWC), channel padding and casts export the same six functions with a
// BoltGlueProblem and BoltGlueArgs; they need no workspace.

// A 4-D activation of logical extents n, c, h, w (the layouts are the kernel's: a transpose
// reads one and writes the other). `c_padded` is the output's channel count of a padding kernel
// (>= c, a multiple of its alignment; the extra channels are written as zeros) and equals c for
// the others. A cast reads and writes n * c * h * w elements in any layout. `p`, `q` are a
// pooling kernel's output extents (its input is n, c, h, w in its layout) and equal h, w for
// the others.
typedef struct BoltGlueProblem {
  int64_t n, c, h, w;
  int64_t c_padded;
  int64_t p, q;
} BoltGlueProblem;

typedef struct BoltGlueArgs {
  const void* x;  // input
  void* y;        // output
} BoltGlueArgs;

// ---- Stitched kernels (memory-intensive regions: element-wise ops and row reductions) ------
// A region's ops run over an iteration space of `rank` dims (at most BOLT_STITCH_MAX_RANK),
// seen as `rows` rows of `width` elements (the last dim; every reduction runs along it).
// Input i is read at sum(coord[d] * strides[i][d]) (stride 0: broadcast along d); outputs are
// dense, of the iteration space or (a reduction's result) of one value per row. No workspace.
// A gathered input (an embedding table) is read by row: element (index, col) at
// index * strides[i][rank - 2] + col * strides[i][rank - 1], of table_rows[i] rows.
#define BOLT_STITCH_MAX_RANK 6
#define BOLT_STITCH_MAX_INPUTS 8
#define BOLT_STITCH_MAX_OUTPUTS 4

typedef struct BoltStitchProblem {
  int64_t rows;
  int64_t width;
  int64_t rank;
  int64_t shape[BOLT_STITCH_MAX_RANK];
  int64_t strides[BOLT_STITCH_MAX_INPUTS][BOLT_STITCH_MAX_RANK];
  int64_t table_rows[BOLT_STITCH_MAX_INPUTS];
} BoltStitchProblem;

typedef struct BoltStitchArgs {
  const void* inputs[BOLT_STITCH_MAX_INPUTS];
  void* outputs[BOLT_STITCH_MAX_OUTPUTS];
} BoltStitchArgs;

// Fused attention: O = softmax(scale * Q K^T + bias) V for batch x heads problems. Strides are
// in elements over the (batch, head, seq) axes of Q [B,H,S_q,D], K [B,H,S_k,D] and
// V [B,H,S_k,D_v] (head-dim axis contiguous) and over the (batch, head, query) axes of the bias
// [B,H,S_q,S_k] (key axis contiguous); 0 broadcasts. The bias is read in whole vectors of 16
// bytes: when seq_k is not a multiple of one, every bias row (the last one too) must be padded
// to whole vectors in the buffer, and each non-zero bias stride must step over a padded row. O is dense in the kernel's layout
// ([B,H,S_q,D_v] or [B,S_q,H,D_v], the manifest says which).
typedef struct BoltAttentionProblem {
  int64_t batch, heads, seq_q, seq_k, head_dim, head_dim_v;
  int64_t q_strides[3];
  int64_t k_strides[3];
  int64_t v_strides[3];
  int64_t bias_strides[3];
  double scale;
} BoltAttentionProblem;

typedef struct BoltAttentionArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* bias;  // null when the kernel takes no bias
  void* o;
} BoltAttentionArgs;

// Recurrent scan (the sequential part of an RNN / GRU / LSTM layer): `seq` steps of `batch`
// sequences with `hidden` units per direction. XW holds each step's input projections
// [seq, batch, D*G*H] ([batch, seq, ..] for batch-major kernels), rt the recurrent weights
// transposed [D, H, G*H]; bias [D, 2*G*H] (R's half is read), lens (int32 per sequence), h0, c0
// ([D, batch, H] or [batch, D, H]) and peepholes [D, 3*H] may be null. y is [seq, D, batch, H]
// (or [batch, seq, D, H]); yh and yc ([D, batch, H] or [batch, D, H]) may be null.
typedef struct BoltRecurrentProblem {
  int64_t seq, batch, hidden;
} BoltRecurrentProblem;

typedef struct BoltRecurrentArgs {
  const void* xw;
  const void* rt;
  const void* bias;
  const int32_t* lens;
  const void* h0;
  const void* c0;
  const void* peepholes;
  void* y;
  void* yh;
  void* yc;
} BoltRecurrentArgs;

#ifdef __cplusplus
}
#endif

#endif  // BOLT_KERNEL_H
