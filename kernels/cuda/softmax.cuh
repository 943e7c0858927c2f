// Pieces of the online softmax every CUDA attention kernel shares (sm80 and sm90a prefill,
// decode). Logits live in "scaled log2 units": x * scale * log2(e), so exp2 gives the
// softmax's exponentials; a row carries its running max m (in those units) and its sum l.
#pragma once

#include <cuda_runtime.h>

#include <cmath>

namespace bspa::kernels::cuda {

// Lazy rescale: the running max only moves (and O, l are rescaled) when a row's new max
// exceeds it by more than this; until then the exponentials use the stale max and stay
// below 2^kSoftmaxSlack, exact in fp32 and representable in bf16/f16. The final O / l and
// the lse use the same max, so the result does not depend on when it moved.
constexpr float kSoftmaxSlack = 8.f;

// The log-sum-exp of a row (natural log of the unscaled softmax denominator, i.e. of
// sum_j exp(scale * x_j)) from its max m (scaled log2 units) and its sum l; -inf for a row
// that sees no key.
__device__ __forceinline__ float row_lse(float m, float l) {
  constexpr float kLn2 = 0.69314718055994530942f;
  return l > 0.f ? m * kLn2 + logf(l) : -INFINITY;
}

// Merges partial softmax states (m_i, l_i, o_i) of one row over disjoint key sets into
// (m, l) and the weights to apply to each o_i: w_i = exp2(m_i - m). Exact: it is the
// online softmax's own rescaling. A part with l_i = 0 saw no key and gets weight 0 (its
// o_i is never read, so it need not have been written).
struct MergedRow {
  float m = -INFINITY;
  float l = 0.f;
};
// stat(i) -> float2 {m_i, l_i}; first pass: the max over the parts that saw keys.
template <class Stat>
__device__ __forceinline__ MergedRow merge_row_stats(int parts, Stat stat) {
  MergedRow r;
  for (int i = 0; i < parts; ++i) {
    const float2 s = stat(i);
    if (s.y > 0.f) r.m = fmaxf(r.m, s.x);
  }
  for (int i = 0; i < parts; ++i) {
    const float2 s = stat(i);
    if (s.y > 0.f) r.l += s.y * exp2f(s.x - r.m);
  }
  return r;
}
__device__ __forceinline__ float merge_weight(const MergedRow &r, float2 s) {
  return s.y > 0.f ? exp2f(s.x - r.m) : 0.f;
}

}  // namespace bspa::kernels::cuda
