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
